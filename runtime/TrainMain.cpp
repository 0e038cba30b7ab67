//===- TrainMain.cpp - The main of a compiled training binary -------------===//
//
// The step loop of `OUTDIR/train`: parses the command line, allocates every
// persistent buffer and the arena on the device (Device.h), loads parameters
// and optimizer state from `weights/NAME.npy`, feeds each step this rank's
// share of the data inputs, calls the generated sharcProgramStep() and reports
// loss, learning rate, throughput, and the measured arena peak, collective
// volume and NVMe traffic next to the planned ones.  Buffers offloaded to NVMe
// live in files of a SwapStore (Swap.h) instead of device memory.  Everything
// model-specific comes from sharcProgramInfo() (Program.h).  See
// docs/runtime.md, "The training binary".
//
//===----------------------------------------------------------------------===//

#include "runtime/AtomicFile.h"
#include "runtime/Blas.h"
#include "runtime/Checkpoint.h"
#include "runtime/DataLoader.h"
#include "runtime/Device.h"
#include "runtime/Errors.h"
#include "runtime/Float16.h"
#include "runtime/Gemm.h"
#include "runtime/GemmBf16.h"
#include "runtime/Metrics.h"
#include "runtime/Npy.h"
#include "runtime/Program.h"
#include "runtime/StateDir.h"
#include "runtime/Swap.h"
#include "runtime/System.h"
#include "runtime/ThreadPool.h"

#include <mpi.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace sharc::rt;

/// The communicator of the device target, defined (strongly) by an object the
/// CUDA target links, e.g. one returning `new NcclCommunicator()`.  Weak and
/// absent on the CPU target, where the binary uses MpiCommunicator.  Called
/// after deviceInit with the collective timeout (--collective-timeout); the
/// caller owns the result.
extern "C" __attribute__((weak)) Communicator *
sharcCreateCommunicator(double collectiveTimeoutSeconds);

namespace {

/// The byte every arena byte, and every byte of a guard after the planned
/// arena, is set to before the first step; the measured arena is one past
/// the highest byte that no longer holds it, so a step that writes past
/// its plan shows (and is an error).
constexpr unsigned char kArenaSentinel = 0xA5;
constexpr size_t kArenaGuardBytes = 64 << 10;

/// Bytes of the pool that holds the persistent buffers of `info` kept in
/// `storage`: device memory (not those offloaded), or host memory
/// (ZeRO-Offload to the CPU).
size_t poolBytes(const ProgramInfo &info,
                 BufferStorage storage = BufferStorage::device) {
  size_t total = 0;
  for (int i = 0; i < info.numBuffers; ++i)
    if (info.buffers[i].storage == storage)
      total += size_t(bufferPoolBytes(info.buffers[i].bytes));
  return total;
}

/// The indices of the buffers offloaded to NVMe (none for a malformed table,
/// which checkProgramInfo reports).
std::vector<int> offloadedBuffers(const ProgramInfo &info) {
  std::vector<int> indices;
  if (!info.buffers)
    return indices;
  for (int i = 0; i < info.numBuffers; ++i)
    if (info.buffers[i].storage == BufferStorage::nvme)
      indices.push_back(i);
  return indices;
}

/// The name of an offloaded buffer's file: its .npy file name with ".swp"
/// for ".npy"; for a carried 16-bit copy, which has no .npy file, its
/// parameter's with "~copy.swp" ('~' ends no .npy name but with hex digits or
/// a count: Npy.h's npyFileNames).
std::string swapFileName(const ProgramInfo &info, int index) {
  const BufferSpec &spec = info.buffers[index];
  bool copy = spec.derivedFrom >= 0;
  std::string npyFile = copy ? info.buffers[spec.derivedFrom].file : spec.file;
  const std::string suffix = ".npy";
  if (npyFile.size() > suffix.size() &&
      npyFile.compare(npyFile.size() - suffix.size(), suffix.size(), suffix) ==
          0)
    npyFile.resize(npyFile.size() - suffix.size());
  return npyFile + (copy ? "~copy.swp" : ".swp");
}

/// Host memory aligned to kSwapAlignment, as NVMe offload's O_DIRECT
/// transfers need: the staging of one offloaded buffer at a time.
struct SwapStaging {
  explicit SwapStaging(int64_t bytes)
      : bytes(size_t(std::max<int64_t>(bytes, kSwapAlignment))),
        data(static_cast<char *>(
            std::aligned_alloc(size_t(kSwapAlignment), this->bytes))) {
    if (!data)
      fatal("out of host memory staging " + std::to_string(bytes) +
            " bytes of a buffer offloaded to NVMe");
  }
  ~SwapStaging() { std::free(data); }
  SwapStaging(const SwapStaging &) = delete;
  SwapStaging &operator=(const SwapStaging &) = delete;
  size_t bytes;
  char *data;
};

/// One past the highest byte of the `bytes` at `arena` that no longer holds
/// kArenaSentinel, scanned from the end in chunks (no host copy of the
/// whole arena).
uint64_t usedArenaBytes(const char *arena, size_t bytes) {
  constexpr size_t kChunk = 1 << 20;
  std::vector<unsigned char> host(std::min(bytes, kChunk));
  for (size_t end = bytes; end > 0;) {
    size_t begin = end > kChunk ? end - kChunk : 0;
    copyToHost(host.data(), arena + begin, end - begin);
    for (size_t i = end - begin; i > 0; --i)
      if (host[i - 1] != kArenaSentinel)
        return begin + i;
    end = begin;
  }
  return 0;
}

/// Seconds without a step line after which a progress line is printed.
constexpr double kProgressSeconds = 10.0;

using Clock = std::chrono::steady_clock;

/// The command line.
struct Options {
  /// The values of the --input flags, NAME=FILE.npy, in order.
  std::vector<std::string> inputs;
  int64_t steps = 1;
  int64_t logEvery = 1;
  std::string weightsDir;
  bool weightsGiven = false;
  std::string saveStateDir;
  /// Checkpoints (Checkpoint.h): every --save-every steps (0: only after
  /// the last step) in --save-dir (empty: none), keeping the --keep-last
  /// newest (0: all); --resume: where the run continues from.
  int64_t saveEvery = 0;
  std::string saveDir;
  int64_t keepLast = 0;
  std::string resumeDir;
  /// --metrics: a JSON line per step (Metrics.h), rank 0 only.
  std::string metricsPath;
  /// --nvme-path: the folder for the files of buffers offloaded to NVMe
  /// (empty: the program's SwapSettings::path).
  std::string nvmePath;
  double collectiveTimeout = kDefaultCollectiveTimeout;
  bool help = false;
  /// The first command-line error (parsing stops there), reported once the
  /// communicator exists.
  std::string error;
};

const char *roleName(BufferRole role) {
  switch (role) {
  case BufferRole::param:
    return "parameter";
  case BufferRole::state:
    return "state";
  case BufferRole::input:
    return "input";
  case BufferRole::output:
    return "output";
  case BufferRole::constant:
    return "constant";
  }
  return "?";
}

/// How a buffer of `type` is stored in a .npy file: bf16 as f32 (NumPy has no
/// bfloat16; every bf16 value is exact in f32), i1 as NumPy's bool.
NpyType fileType(DType type) {
  switch (type) {
  case DType::f32:
  case DType::bf16:
    return NpyType::f32;
  case DType::f64:
    return NpyType::f64;
  case DType::f16:
    return NpyType::f16;
  case DType::i32:
    return NpyType::i32;
  case DType::i64:
    return NpyType::i64;
  case DType::i1:
    return NpyType::b1;
  }
  return NpyType::f32;
}

std::string shapeString(const int64_t *shape, int rank) {
  std::string text = "[";
  for (int i = 0; i < rank; ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string shapeString(const std::vector<int64_t> &shape) {
  return shapeString(shape.data(), static_cast<int>(shape.size()));
}

/// Converts `count` f32 values to bf16 bits (`dest` may not alias `src`).
void floatsToBFloat16(const float *src, uint16_t *dest, size_t count) {
  for (size_t i = 0; i < count; ++i)
    dest[i] = floatToBFloat16(src[i]);
}

/// Fails on rank 0 with `message`; the other ranks wait for the abort.  Only
/// for errors every rank detects identically (the command line and the
/// compiled-in program description), so exactly one message is printed --
/// unless rank 0 does not end the job within the collective timeout (stopped
/// or hung), when every other rank reports it.
[[noreturn]] void fatalOnce(const Communicator &comm,
                            const std::string &message) {
  if (comm.rank() == 0)
    fatal(message);
  Clock::time_point deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(comm.collectiveTimeout()));
  while (Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fatal(message + " (rank 0 did not end the job within the collective "
                  "timeout)");
}

/// The node-local rank, for device selection: from the launcher's environment
/// (Open MPI, PMIx, MPICH/Hydra, Slurm), else 0.
int localRankFromEnvironment() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK",
                           "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char *value = std::getenv(name)) {
      char *end = nullptr;
      long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0)
        return static_cast<int>(rank);
    }
  }
  return 0;
}

std::string usage(const char *argv0, const ProgramInfo &info) {
  std::string text =
      std::string("usage: ") + argv0 +
      " --input NAME=FILE.npy ... [--steps S] [--log-every K]\n"
      "       [--weights DIR | --resume DIR] [--save-state DIR]\n"
      "       [--save-dir DIR [--save-every K] [--keep-last M]]\n"
      "       [--metrics FILE.jsonl] [--nvme-path DIR]\n"
      "       [--collective-timeout SECONDS] [--help]\n"
      "\n"
      "Trains " +
      info.model + " (target " + info.target + ", " +
      std::to_string(info.worldSize) +
      (info.worldSize == 1 ? " rank" : " ranks") +
      ") for S steps (default 1), printing every K-th step\n"
      "(default 1).  Parameters and optimizer state come from DIR/NAME.npy\n"
      "(--weights, default: the `weights` folder next to this binary), or\n"
      "from a state saved at any stage and world size; --save-state writes\n"
      "them after the last step (under ZeRO each rank its own slices; `sharc\n"
      "consolidate` makes them whole).  --save-dir DIR writes a checkpoint\n"
      "DIR/step-N every --save-every K steps and after the last step, each\n"
      "complete or not at all, keeping the newest M (--keep-last; default:\n"
      "all); --resume DIR continues from DIR's newest checkpoint (or from\n"
      "DIR itself) exactly where it stopped: the same model and training\n"
      "configuration, any world size and ZeRO stage.  --metrics appends a\n"
      "JSON line per step (loss, lr, scale, ms, throughput, peak memory) to\n"
      "FILE.  A collective or barrier that waits longer than\n"
      "--collective-timeout seconds (default 600) for\n"
      "the other ranks ends the job with an error naming them.  A program\n"
      "that offloads buffers to NVMe (offload_optimizer.device nvme) keeps\n"
      "them in files of a folder of each rank's own under --nvme-path DIR\n"
      "(default: the nvme_path it was compiled with), removed at the end.\n"
      "\n"
      "inputs (rows along axis 0, any number of them):\n";
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (spec.role != BufferRole::input)
      continue;
    text += std::string("  ") + spec.name + ": " +
            npyTypeName(fileType(spec.type)) + " [rows";
    for (int d = 1; d < spec.rank; ++d)
      text += ", " + std::to_string(spec.shape[d]);
    text += "]\n";
  }
  return text;
}

/// Parses a positive integer flag value into `number`, or sets `error`.
bool parsePositive(const std::string &flag, const std::string &value,
                   int64_t &number, std::string &error) {
  char *end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || parsed < 1) {
    error = flag + ": expected a positive integer, got '" + value + "'";
    return false;
  }
  number = parsed;
  return true;
}

/// Parses the command line (every rank parses the same one).  Needs no
/// communicator, so that the collective timeout is known when it is created;
/// the first error ends the parsing and is left in `Options::error`.
Options parseOptions(int argc, char **argv) {
  Options options;
  auto fail = [&](const std::string &message) {
    options.error = message;
    return options;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string flag = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0) {
      size_t equals = arg.find('=');
      if (equals != std::string::npos) {
        flag = arg.substr(0, equals);
        value = arg.substr(equals + 1);
        hasValue = true;
      }
    }
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    static const std::set<std::string> known = {
        "--input",      "--steps",     "--log-every",          "--weights",
        "--save-state", "--save-dir",  "--save-every",         "--keep-last",
        "--resume",     "--nvme-path", "--collective-timeout", "--metrics"};
    if (!known.count(flag))
      return fail("unknown argument '" + arg + "' (see " +
                  std::string(argv[0]) + " --help)");
    if (!hasValue) {
      if (i + 1 >= argc)
        return fail(flag + ": missing value");
      value = argv[++i];
    }
    std::string error;
    if (flag == "--input") {
      // Split once the program's input names are known (a name may hold
      // '='); only the form is checked here.
      std::string name, file;
      if (!splitInputSpec(value, {}, name, file, error))
        return fail("--input: " + error);
      options.inputs.push_back(value);
    } else if (flag == "--steps") {
      if (!parsePositive(flag, value, options.steps, error))
        return fail(error);
    } else if (flag == "--log-every") {
      if (!parsePositive(flag, value, options.logEvery, error))
        return fail(error);
    } else if (flag == "--save-every") {
      if (!parsePositive(flag, value, options.saveEvery, error))
        return fail(error);
    } else if (flag == "--keep-last") {
      if (!parsePositive(flag, value, options.keepLast, error))
        return fail(error);
    } else if (flag == "--collective-timeout") {
      if (!parseCollectiveTimeout(value, options.collectiveTimeout, error))
        return fail("--collective-timeout: " + error);
    } else {
      // A folder.
      if (value.empty())
        return fail(flag + ": empty directory name");
      std::string &target = flag == "--weights"      ? options.weightsDir
                            : flag == "--save-state" ? options.saveStateDir
                            : flag == "--save-dir"   ? options.saveDir
                            : flag == "--resume"     ? options.resumeDir
                            : flag == "--metrics"    ? options.metricsPath
                                                     : options.nvmePath;
      target = value;
      options.weightsGiven |= flag == "--weights";
    }
  }
  if (options.weightsGiven && !options.resumeDir.empty())
    return fail("--weights and --resume both choose where the run starts: "
                "give one");
  if (options.saveDir.empty() && (options.saveEvery || options.keepLast))
    return fail(
        std::string(options.saveEvery ? "--save-every" : "--keep-last") +
        " needs --save-dir DIR");
  if (options.weightsDir.empty()) {
    std::filesystem::path self(argc > 0 ? argv[0] : "train");
    options.weightsDir = (self.parent_path() / "weights").string();
  }
  return options;
}

/// Checks the compiled-in program description, so that a malformed one fails
/// here with a message rather than corrupting memory later.
void checkProgramInfo(const Communicator &comm, const ProgramInfo &info) {
  auto fail = [&](const std::string &message) {
    fatalOnce(comm, "malformed program description: " + message);
  };
  if (info.numBuffers < 0 || (info.numBuffers > 0 && !info.buffers))
    fail("no buffer table");
  if (info.worldSize < 1 || info.microBatch < 1 ||
      info.gradientAccumulation < 1 || info.arenaBytes < 0)
    fail("world size " + std::to_string(info.worldSize) + ", micro-batch " +
         std::to_string(info.microBatch) + ", gradient accumulation " +
         std::to_string(info.gradientAccumulation) + ", arena bytes " +
         std::to_string(info.arenaBytes));
  std::set<std::string> files;
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    std::string name = spec.name ? spec.name : "";
    if (name.empty())
      fail("buffer " + std::to_string(i) + " has no name");
    if (spec.rank < 0 || spec.rank > kMaxRank)
      fail("buffer '" + name + "' has rank " + std::to_string(spec.rank));
    int64_t elements = 1;
    for (int d = 0; d < spec.rank; ++d) {
      if (spec.shape[d] < 0)
        fail("buffer '" + name + "' has shape " +
             shapeString(spec.shape, spec.rank));
      elements *= spec.shape[d];
    }
    if (elements != spec.numElements ||
        spec.bytes != elements * int64_t(dtypeBytes(spec.type)))
      fail("buffer '" + name + "' of shape " +
           shapeString(spec.shape, spec.rank) + " and type " +
           dtypeName(spec.type) + " claims " +
           std::to_string(spec.numElements) + " elements and " +
           std::to_string(spec.bytes) + " bytes");
    if (spec.role == BufferRole::constant && spec.bytes > 0 &&
        !spec.constantData)
      fail("constant '" + name + "' has no data");
    if (spec.storage != BufferStorage::device &&
        spec.storage != BufferStorage::nvme &&
        spec.storage != BufferStorage::host)
      fail("buffer '" + name + "' has storage " +
           std::to_string(int(spec.storage)));
    if (spec.storage != BufferStorage::device &&
        spec.role != BufferRole::param && spec.role != BufferRole::state)
      fail(std::string(roleName(spec.role)) + " '" + name + "' is offloaded (" +
           (spec.storage == BufferStorage::nvme ? "NVMe" : "host memory") +
           "): only parameters and state can be");
    if (spec.derivedFrom != -1) {
      // A carried 16-bit copy of a parameter (BufferSpec::derivedFrom).
      const BufferSpec *from =
          spec.derivedFrom >= 0 && spec.derivedFrom < info.numBuffers
              ? &info.buffers[spec.derivedFrom]
              : nullptr;
      if (spec.role != BufferRole::state || !from ||
          from->role != BufferRole::param || from->derivedFrom != -1 ||
          from->type != DType::f32 ||
          (spec.type != DType::f16 && spec.type != DType::bf16) ||
          from->numElements != spec.numElements ||
          from->sliced != spec.sliced || (spec.file && *spec.file) ||
          !from->file || !*from->file)
        fail("buffer '" + name + "' is derived from buffer " +
             std::to_string(spec.derivedFrom) +
             ": only a 16-bit state buffer without a file can be derived, "
             "from an f32 parameter of as many elements with one");
      continue;
    }
    if (spec.role == BufferRole::param || spec.role == BufferRole::state) {
      std::string file = spec.file ? spec.file : "";
      if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
        fail("buffer '" + name + "' has file name '" + file + "'");
      if (!files.insert(file).second)
        fail("two buffers have file '" + file + "'");
    }
    if (spec.role == BufferRole::input &&
        (spec.rank < 1 ||
         spec.shape[0] != info.microBatch * info.gradientAccumulation))
      fail("input '" + name + "' has shape " +
           shapeString(spec.shape, spec.rank) +
           ", but a rank's share is micro-batch x gradient accumulation = " +
           std::to_string(info.microBatch * info.gradientAccumulation) +
           " rows");
  }
  auto checkScalar = [&](int index, const char *what, bool allowF32,
                         BufferRole role) {
    if (index < 0 || index >= info.numBuffers)
      fail(std::string(what) + " buffer index " + std::to_string(index) +
           " is out of range");
    const BufferSpec &spec = info.buffers[index];
    bool typeOk =
        spec.type == DType::f64 || (allowF32 && spec.type == DType::f32);
    if (spec.role != role || spec.numElements != 1 || !typeOk)
      fail(std::string(what) + " buffer '" + spec.name + "' is a " +
           roleName(spec.role) + " " + dtypeName(spec.type) + " " +
           shapeString(spec.shape, spec.rank));
  };
  checkScalar(info.lossBuffer, "loss", /*allowF32=*/true, BufferRole::output);
  checkScalar(info.lrBuffer, "learning-rate", /*allowF32=*/false,
              BufferRole::output);
  if (info.gradNormBuffer >= 0)
    checkScalar(info.gradNormBuffer, "gradient-norm", /*allowF32=*/false,
                BufferRole::output);
  if (info.scaleBuffer >= 0)
    checkScalar(info.scaleBuffer, "loss-scale", /*allowF32=*/false,
                BufferRole::output);
  for (auto [index, what] :
       {std::pair{info.overflowBuffer, "overflow"},
        std::pair{info.atMinScaleBuffer, "at-min-scale"}}) {
    if (index < 0)
      continue;
    if (index >= info.numBuffers)
      fail(std::string(what) + " buffer index " + std::to_string(index) +
           " is out of range");
    const BufferSpec &spec = info.buffers[index];
    if (spec.role != BufferRole::output || spec.numElements != 1 ||
        spec.type != DType::i1)
      fail(std::string(what) + " buffer '" + spec.name + "' is a " +
           roleName(spec.role) + " " + dtypeName(spec.type) + " " +
           shapeString(spec.shape, spec.rank));
  }
  if ((info.atMinScaleBuffer >= 0 && info.scaleBuffer < 0) ||
      (info.scaleBuffer >= 0 && info.overflowBuffer < 0))
    fail("a loss-scaled program needs its loss-scale and overflow outputs");
  if (info.stepBuffer >= 0) {
    if (info.stepBuffer >= info.numBuffers)
      fail("step buffer index " + std::to_string(info.stepBuffer) +
           " is out of range");
    const BufferSpec &spec = info.buffers[info.stepBuffer];
    if (spec.role != BufferRole::state || spec.numElements != 1 ||
        (spec.type != DType::i64 && spec.type != DType::i32))
      fail(std::string("step buffer '") + spec.name + "' is a " +
           roleName(spec.role) + " " + dtypeName(spec.type) + " " +
           shapeString(spec.shape, spec.rank));
    if (spec.storage != BufferStorage::device)
      fail(std::string("step buffer '") + spec.name + "' is offloaded");
  }
  const SwapSettings &swap = info.swap;
  if (!offloadedBuffers(info).empty()) {
    if (swap.blockSize <= 0 || swap.blockSize % kSwapAlignment != 0 ||
        swap.queueDepth < 1)
      fail("NVMe offload with aio block size " +
           std::to_string(swap.blockSize) + " and queue depth " +
           std::to_string(swap.queueDepth));
  } else if (swap.plannedReadBytes != 0 || swap.plannedWriteBytes != 0) {
    fail("NVMe traffic is planned (" + std::to_string(swap.plannedReadBytes) +
         " bytes read and " + std::to_string(swap.plannedWriteBytes) +
         " written per step) but no buffer is offloaded");
  }
}

/// The shape of `spec`'s file: its own, or for a ZeRO slice, the whole
/// tensor's (the files hold whole tensors at every stage).
std::vector<int64_t> fileShape(const BufferSpec &spec) {
  return std::vector<int64_t>(spec.fileShape, spec.fileShape + spec.fileRank);
}

/// Reads the parameter or state buffer `spec` from the state (or weights)
/// in `dir`, whose index is `index` (StateDir.h), checks its type and shape,
/// and copies it to `device`: for a ZeRO slice on rank `rank` of `ranks`,
/// the slice file of this rank when the state was saved at this world size
/// and partitioned alike, else elements [rank s, rank s + s) of the whole
/// tensor (zeros past its end).
void loadBuffer(const std::string &dir, const StateIndex &index,
                const BufferSpec &spec, int rank, int ranks, void *device) {
  // Host memory (ZeRO-Offload to the CPU) is filled by the host.
  auto copyToDevice = [&](void *dest, const void *src, size_t bytes) {
    if (spec.storage == BufferStorage::host)
      std::memcpy(dest, src, bytes);
    else
      sharc::rt::copyToDevice(dest, src, bytes);
  };
  NpyArray array;
  std::string error;
  std::vector<int64_t> expected = fileShape(spec);
  NpyType expectedType = fileType(spec.type);
  auto sliced = index.sliced.find(spec.file);
  if (spec.sliced && sliced != index.sliced.end() && index.ranks == ranks &&
      sliced->second.type == expectedType && sliced->second.shape == expected) {
    if (!readStateSlice(dir, index, spec.file, rank, array, error))
      fatal(std::string(roleName(spec.role)) + " '" + spec.name +
            "': " + error);
    copyToDevice(device, array.data.data(), spec.bytes);
    return;
  }
  if (!readStateTensor(dir, index, spec.file, array, error))
    fatal(std::string(roleName(spec.role)) + " '" + spec.name + "': " + error);
  std::string path = (std::filesystem::path(dir) / spec.file).string();
  if (array.type != expectedType || array.shape != expected)
    fatal(path + ": " + roleName(spec.role) + " '" + spec.name +
          "' expects a " + npyTypeName(expectedType) + " array of shape " +
          shapeString(expected) + ", got a " + npyTypeName(array.type) +
          " array of shape " + shapeString(array.shape));
  if (spec.sliced) {
    // This rank's slice, zero-padded (the dtype is not bf16: ZeRO slices
    // hold fp32 master weights and optimizer state).
    size_t element = dtypeBytes(spec.type);
    size_t begin = size_t(rank) * spec.numElements * element;
    std::vector<char> slice(spec.bytes, 0);
    if (begin < array.data.size())
      std::memcpy(slice.data(), array.data.data() + begin,
                  std::min(slice.size(), array.data.size() - begin));
    array.data = std::move(slice);
  }
  if (spec.type == DType::bf16) {
    std::vector<uint16_t> bits(spec.numElements);
    floatsToBFloat16(reinterpret_cast<const float *>(array.data.data()),
                     bits.data(), bits.size());
    copyToDevice(device, bits.data(), spec.bytes);
    return;
  }
  copyToDevice(device, array.data.data(), spec.bytes);
}

/// The file of the whole (not partitioned) buffer `spec`, whose bytes are
/// `host`, as `dir/FILE` in `files` (bf16 as f32: NumPy has no bfloat16),
/// its checksum in `checksums`.
bool saveWhole(AtomicFileSet &files, const std::string &dir,
               const BufferSpec &spec, std::vector<char> host,
               std::map<std::string, uint64_t> &checksums, std::string &error) {
  NpyArray array;
  array.type = fileType(spec.type);
  array.shape = fileShape(spec);
  if (spec.type == DType::bf16) {
    array.data.resize(spec.numElements * sizeof(float));
    const auto *bits = reinterpret_cast<const uint16_t *>(host.data());
    auto *floats = reinterpret_cast<float *>(array.data.data());
    for (int64_t i = 0; i < spec.numElements; ++i)
      floats[i] = bfloat16ToFloat(bits[i]);
  } else {
    array.data = std::move(host);
  }
  return writeStateArray(files, dir, spec.file, array, checksums, error);
}

/// Copies the `spec.bytes` bytes of buffer `index` to `host`: from device
/// memory, or for a buffer offloaded to NVMe, read from its file in `store`
/// through an aligned staging buffer (one buffer at a time).
bool bufferToHost(const ProgramInfo &info, const std::vector<void *> &buffers,
                  SwapStore *store, int index, char *host, std::string &error) {
  const BufferSpec &spec = info.buffers[index];
  if (spec.storage == BufferStorage::device) {
    copyToHost(host, buffers[index], spec.bytes);
    return true;
  }
  if (spec.storage == BufferStorage::host) {
    std::memcpy(host, buffers[index], spec.bytes);
    return true;
  }
  SwapStaging staging(swapBytes(spec.bytes));
  if (!store->read(index, staging.data, error))
    return false;
  std::memcpy(host, staging.data, spec.bytes);
  return true;
}

/// A value every rank agrees on: rank 0's `value`.
uint64_t broadcastValue(Communicator &comm, uint64_t value) {
  void *scratch = deviceAlloc(sizeof(uint64_t));
  copyToDevice(scratch, &value, sizeof(value));
  comm.broadcast(scratch, 1, DType::i64, 0);
  copyToHost(&value, scratch, sizeof(value));
  deviceFree(scratch);
  return value;
}

/// A fresh save id (rank 0's, broadcast): it tells this save's slice
/// folders from an earlier one's.
uint64_t agreeOnSaveId(Communicator &comm) {
  uint64_t id = 0;
  if (comm.rank() == 0)
    id = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (uint64_t(std::random_device()()) << 32) ^ uint64_t(::getpid());
  return broadcastValue(comm, id);
}

/// The meta lines of a state saved after `step` steps (Checkpoint.h): the
/// step, what a resume compares, and the layout it was saved in.
MetaLines stateMeta(const ProgramInfo &info, int ranks, int64_t step) {
  auto text = [](const char *value) { return std::string(value ? value : ""); };
  return sharc::rt::stateMeta({step, text(info.sharcVersion), text(info.model),
                               text(info.modelHash), text(info.trainingConfig),
                               text(info.target), ranks, info.zeroStage,
                               info.microBatch, info.gradientAccumulation});
}

/// Saves the parameters and optimizer state in `dir` (StateDir.h) as save
/// `id`, the index with `meta`: each rank writes its slices of the
/// partitioned buffers into its slice folder, rank 0 the whole buffers and,
/// last, the index.  No rank's files replace anything until every rank has
/// written all of its own (a collective agrees on it); a rank that fails
/// reports why (after `flag`), after every rank removed what it wrote and
/// rank 0 discarded `rootFolders` (the checkpoint's folder).  Buffers
/// offloaded to NVMe are read from `store`; the files are the same either
/// way.  Returns the bytes this rank wrote.
uint64_t saveState(Communicator &comm, const ProgramInfo &info,
                   const std::vector<void *> &buffers, SwapStore *store,
                   const std::string &dir, uint64_t id, const MetaLines &meta,
                   const std::string &flag,
                   AtomicFileSet *rootFolders = nullptr) {
  comm.setContext(flag);
  int rank = comm.rank(), ranks = comm.size();
  StateIndex index;
  index.ranks = ranks;
  index.saveId = id;
  index.meta = meta;

  AtomicFileSet files;
  std::string error;
  bool ok = true;
  uint64_t written = 0;
  std::map<std::string, uint64_t> sliceChecksums;
  // Carried 16-bit copies are derived from their parameters: not saved.
  auto saved = [](const BufferSpec &spec) {
    return (spec.role == BufferRole::param || spec.role == BufferRole::state) &&
           spec.derivedFrom < 0;
  };
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (!saved(spec))
      continue;
    if (spec.sliced)
      index.sliced[spec.file] = {fileType(spec.type), fileShape(spec)};
    else
      index.whole.push_back(spec.file);
  }
  bool anySliced = !index.sliced.empty();
  std::string sliceDir = sliceDirectory(dir, rank, ranks);
  if (anySliced)
    ok = files.createDirectories(sliceDir, error);
  else if (rank == 0)
    ok = files.createDirectories(dir, error);
  for (int i = 0; i < info.numBuffers && ok; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (!saved(spec))
      continue;
    if (spec.sliced) {
      NpyArray array;
      array.type = fileType(spec.type);
      array.shape = {spec.numElements};
      array.data.resize(spec.bytes);
      ok = bufferToHost(info, buffers, store, i, array.data.data(), error) &&
           writeStateArray(files, sliceDir, spec.file, array, sliceChecksums,
                           error);
      written += uint64_t(spec.bytes);
    } else if (rank == 0) {
      std::vector<char> host(spec.bytes);
      ok = bufferToHost(info, buffers, store, i, host.data(), error) &&
           saveWhole(files, dir, spec, std::move(host), index.checksums, error);
      written += uint64_t(spec.bytes);
    }
  }
  if (ok && anySliced)
    ok = writeText(files, saveIdPath(dir, rank, ranks),
                   saveIdText(index.saveId, sliceChecksums), error);
  if (ok && rank == 0)
    ok = writeText(files, stateIndexPath(dir), stateIndexText(index), error);

  // Every rank has written its files (or failed): the lowest failing rank,
  // if any (the largest `ranks - rank` of a failing rank), reports after
  // every rank removed its temporary files.
  int32_t code = ok ? 0 : ranks - rank;
  void *scratch = deviceAlloc(sizeof(int32_t));
  copyToDevice(scratch, &code, sizeof(code));
  comm.allReduce(scratch, 1, DType::i32, ReduceOp::max);
  copyToHost(&code, scratch, sizeof(code));
  deviceFree(scratch);
  int failed = ranks - code;
  if (code > 0) {
    files.discard();
    comm.barrier();
    if (rootFolders)
      rootFolders->discard();
    if (rank == failed)
      fatal(flag + ": " + error);
    comm.barrier(); // ended by the failing rank's abort
    fatal(flag + ": rank " + std::to_string(failed) + " failed");
  }
  // Rank 0 renames its files, the index last, after the others did theirs.
  if (rank != 0 && !files.commit(error))
    fatal(flag + ": " + error);
  comm.barrier();
  if (rank == 0 && !files.commit(error))
    fatal(flag + ": " + error);
  return written;
}

/// Writes the checkpoint after `step` steps: the state saved into a hidden
/// folder of --save-dir, which rank 0 renames to `step-N` once every rank
/// has written its files, then removes the checkpoints beyond --keep-last
/// (Checkpoint.h).  Its collectives are left out of the run's figures.
void saveCheckpoint(Communicator &comm, const ProgramInfo &info,
                    const std::vector<void *> &buffers, SwapStore *store,
                    const Options &options, int64_t step) {
  Communicator::StatsSnapshot stats = comm.snapshotStats();
  auto start = std::chrono::steady_clock::now();
  const std::string flag = "--save-dir";
  comm.setContext(flag);
  uint64_t id = agreeOnSaveId(comm);
  std::string partial = partialCheckpointPath(options.saveDir, step, id);
  std::string target =
      (std::filesystem::path(options.saveDir) / checkpointName(step)).string();
  // Rank 0 makes the folder (and --save-dir); the others write into it.
  AtomicFileSet folders;
  std::string error;
  uint64_t made = 1;
  if (comm.rank() == 0) {
    struct stat existing;
    if (::lstat(partial.c_str(), &existing) == 0)
      error = partial + ": exists", made = 0;
    else if (!folders.createDirectories(partial, error))
      made = 0;
  }
  if (!broadcastValue(comm, made)) {
    if (comm.rank() == 0)
      fatal(flag + ": " + error);
    comm.barrier(); // ended by rank 0's abort
  }
  uint64_t written = saveState(comm, info, buffers, store, partial, id,
                               stateMeta(info, comm.size(), step), flag,
                               comm.rank() == 0 ? &folders : nullptr);
  if (comm.rank() == 0) {
    std::vector<std::string> removed, warnings;
    if (!commitCheckpoint(partial, target, options.keepLast, removed, warnings,
                          error))
      fatal(flag + ": " + error);
    folders.commit(error);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    std::printf("checkpoint: step %" PRId64 " saved in %s (%" PRIu64
                " bytes from rank 0, %.3f s)",
                step, target.c_str(), written, seconds);
    for (const std::string &path : removed)
      std::printf("; removed %s", path.c_str());
    std::printf("\n");
    std::fflush(stdout);
    for (const std::string &message : warnings)
      std::fprintf(stderr, "warning: --keep-last: %s\n", message.c_str());
    std::fflush(stderr);
  }
  comm.restoreStats(stats);
}

/// A scalar output as a double.
/// The value of a one-element i1 output buffer.
bool readFlag(const void *device) {
  unsigned char value = 0;
  copyToHost(&value, device, 1);
  return value != 0;
}

double readScalar(const BufferSpec &spec, const void *device) {
  if (spec.type == DType::f32) {
    float value = 0;
    copyToHost(&value, device, sizeof(value));
    return value;
  }
  double value = 0;
  copyToHost(&value, device, sizeof(value));
  return value;
}

/// `total / steps`, exactly when it divides, else with two decimals.
std::string perStep(uint64_t total, int64_t steps) {
  if (total % uint64_t(steps) == 0)
    return std::to_string(total / uint64_t(steps));
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", double(total) / double(steps));
  return text;
}

/// One data input of the program: the buffer it fills, its host staging
/// buffer(s).
struct InputSlot {
  int buffer;
  bool toBFloat16;
  std::vector<char> staging;
  std::vector<uint16_t> converted;
};

int run(int argc, char **argv) {
  deviceInit(localRankFromEnvironment());
  // Parsed before the communicator, whose start-up the timeout bounds too;
  // errors are reported below, once.
  Options options = parseOptions(argc, argv);
  std::unique_ptr<Communicator> commOwner(
      sharcCreateCommunicator
          ? sharcCreateCommunicator(options.collectiveTimeout)
          : new MpiCommunicator(options.collectiveTimeout));
  Communicator &comm = *commOwner;

  const ProgramInfo *infoPointer = sharcProgramInfo();
  if (!infoPointer)
    fatalOnce(comm, "sharcProgramInfo() returned null");
  if (infoPointer->abiVersion != kProgramAbiVersion)
    fatalOnce(comm, "this program was compiled for runtime ABI version " +
                        std::to_string(infoPointer->abiVersion) +
                        " but the runtime implements version " +
                        std::to_string(kProgramAbiVersion) +
                        "; recompile it with this sharc");
  const ProgramInfo &info = *infoPointer;
  // A CPU program reads its buffers on the host; a CUDA program needs device
  // memory and a device communicator.
  bool cpuDevice = deviceName() == "cpu";
  std::string target = info.target ? info.target : "";
  // On CUDA the files are read into host memory (the host arena), never into
  // device memory, which io_uring cannot reach.
  if (target == "cuda" && !offloadedBuffers(info).empty() &&
      info.hostArenaBytes <= 0)
    fatalOnce(comm, "this CUDA program offloads buffers to NVMe but has no "
                    "host memory to read them into; NVMe offload on the CUDA "
                    "target reads into host memory and updates there "
                    "(recompile it with this sharc)");
  if (target == "cpu" && !cpuDevice)
    fatalOnce(comm, "this program was compiled for the cpu target but is "
                    "linked with the device layer of " +
                        deviceName() + "; link SharcDeviceHost");
  if (target == "cuda" && (cpuDevice || !sharcCreateCommunicator))
    fatalOnce(comm, "this program was compiled for the cuda target but is "
                    "linked with the cpu device layer or without a device "
                    "communicator; link DeviceCuda.cu and "
                    "NcclCommunicator.cu");
  if (target != "cpu" && target != "cuda")
    fatalOnce(comm, "unknown program target '" + target + "'");

  if (!options.error.empty())
    fatalOnce(comm, options.error);
  if (options.help) {
    if (comm.rank() == 0)
      std::fputs(usage(argv[0], info).c_str(), stdout);
    return 0;
  }

  if (comm.size() != info.worldSize)
    fatalOnce(comm, "this program was compiled for " +
                        std::to_string(info.worldSize) +
                        (info.worldSize == 1 ? " rank" : " ranks") +
                        " (--world-size " + std::to_string(info.worldSize) +
                        ") but runs on " + std::to_string(comm.size()) +
                        "; recompile with sharc compile --world-size " +
                        std::to_string(comm.size()) +
                        " or launch with mpirun -np " +
                        std::to_string(info.worldSize));
  checkProgramInfo(comm, info);

  // Buffers offloaded to NVMe: the folder for their files.
  std::vector<int> offloaded = offloadedBuffers(info);
  std::string nvmePath = options.nvmePath;
  if (nvmePath.empty() && info.swap.path)
    nvmePath = info.swap.path;
  if (!offloaded.empty() && nvmePath.empty())
    fatalOnce(comm, "this program offloads " +
                        std::to_string(offloaded.size()) +
                        " buffer(s) to NVMe but has no folder for their "
                        "files: pass --nvme-path DIR (or compile with "
                        "zero_optimization.offload_optimizer.nvme_path)");

  // Match the --input flags with the program's inputs.
  std::vector<DataInput> dataInputs;
  std::vector<InputSlot> slots;
  std::string inputNames;
  std::vector<std::string> names;
  for (int i = 0; i < info.numBuffers; ++i)
    if (info.buffers[i].role == BufferRole::input) {
      inputNames +=
          (inputNames.empty() ? "" : ", ") + std::string(info.buffers[i].name);
      names.push_back(info.buffers[i].name);
    }
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const std::string &spec : options.inputs) {
    std::string name, path, error;
    if (!splitInputSpec(spec, names, name, path, error))
      fatalOnce(comm, "--input " + error);
    inputs.emplace_back(name, path);
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    const auto &[name, path] = inputs[j];
    for (size_t k = 0; k < j; ++k)
      if (inputs[k].first == name)
        fatalOnce(comm, "--input '" + name + "' is given more than once");
    bool known = false;
    for (int i = 0; i < info.numBuffers; ++i)
      known |= info.buffers[i].role == BufferRole::input &&
               name == info.buffers[i].name;
    if (!known)
      fatalOnce(comm, "--input " + name + "=" + path +
                          ": the program has no input named '" + name +
                          "' (its inputs: " + inputNames + ")");
  }
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (spec.role != BufferRole::input)
      continue;
    const std::string *path = nullptr;
    for (const auto &[name, file] : inputs)
      if (name == spec.name)
        path = &file;
    if (!path)
      fatalOnce(comm, std::string("missing --input ") + spec.name +
                          "=FILE.npy (the program's inputs: " + inputNames +
                          ")");
    DataInput input;
    input.name = spec.name;
    input.path = *path;
    input.type = fileType(spec.type);
    input.rowShape.assign(spec.shape + 1, spec.shape + spec.rank);
    dataInputs.push_back(std::move(input));
    slots.push_back({i, spec.type == DType::bf16, {}, {}});
  }

  BatchLayout layout;
  layout.microBatch = info.microBatch;
  layout.gradientAccumulation = info.gradientAccumulation;
  layout.rank = comm.rank();
  layout.numRanks = comm.size();
  // What this rank holds at once, against what the machine has: too much
  // fails here with the figures instead of in an allocator.
  uint64_t deviceBytes = static_cast<uint64_t>(info.arenaBytes),
           stagingBytes = 0, persistentBytes = 0;
  // ZeRO-Offload to the CPU: the state and the values of the update kept in
  // host memory.
  uint64_t offloadedHostBytes =
      poolBytes(info, BufferStorage::host) +
      uint64_t(std::max<int64_t>(info.hostArenaBytes, 0));
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (spec.storage != BufferStorage::device)
      continue; // in a file or in host memory, not in device memory
    deviceBytes += static_cast<uint64_t>(spec.bytes);
    if (spec.role == BufferRole::input)
      stagingBytes += static_cast<uint64_t>(spec.bytes) *
                      (spec.type == DType::bf16 ? 3 : 1);
    else
      persistentBytes += static_cast<uint64_t>(spec.bytes);
  }
  if (deviceBytes > deviceMemoryBytes())
    fatalOnce(
        comm,
        "this rank needs " + std::to_string(deviceBytes) + " bytes of " +
            deviceName() + " memory (arena " + std::to_string(info.arenaBytes) +
            ", parameters, state, constants and outputs " +
            std::to_string(persistentBytes) + ", inputs " +
            std::to_string(deviceBytes - info.arenaBytes - persistentBytes) +
            "), more than the " + std::to_string(deviceMemoryBytes()) +
            " it has");
  if (stagingBytes + offloadedHostBytes > hostMemoryBytes())
    fatalOnce(
        comm,
        "this rank needs " + std::to_string(stagingBytes + offloadedHostBytes) +
            " bytes of host memory (inputs " + std::to_string(stagingBytes) +
            ", offloaded state and its update " +
            std::to_string(offloadedHostBytes) + "), more than the machine's " +
            std::to_string(hostMemoryBytes()));
  std::unique_ptr<DataLoader> loader;
  if (!dataInputs.empty()) {
    std::string error;
    loader = DataLoader::load(dataInputs, layout, error);
    if (!loader)
      fatal(error);
    for (size_t j = 0; j < slots.size(); ++j) {
      slots[j].staging.resize(loader->shareBytes(j));
      if (slots[j].toBFloat16)
        slots[j].converted.resize(loader->shareBytes(j) / sizeof(float));
    }
  }

  // What the process holds before the planned memory: code, libraries, the
  // communicator, the data.
  uint64_t baselineMemory = devicePeakBytes();
  // Persistent buffers: one allocation (rounded to whole huge pages once,
  // not once per buffer), each buffer at an aligned offset of it.
  std::vector<void *> buffers(info.numBuffers);
  StateIndex weightsIndex;
  // --resume: the newest checkpoint of the folder (or the folder), which
  // must be of this model and training configuration.
  if (!options.resumeDir.empty()) {
    std::string error;
    if (!findResumePoint(options.resumeDir, options.weightsDir, error))
      fatalOnce(comm, error);
  }
  if (std::string error;
      !readStateIndex(options.weightsDir, weightsIndex, error))
    fatalOnce(comm, error);
  int64_t resumedStep = -1;
  if (!options.resumeDir.empty()) {
    std::string error;
    if (!checkResumable(
            options.weightsDir, weightsIndex,
            resumeIdentity(info.modelHash ? info.modelHash : "-",
                           info.trainingConfig ? info.trainingConfig : ""),
            error))
      fatalOnce(comm, error);
    const std::string *step = weightsIndex.findMeta("step");
    char *end = nullptr;
    resumedStep = step ? std::strtoll(step->c_str(), &end, 10) : -1;
    if (!step || step->empty() || *end || resumedStep < 0)
      fatalOnce(comm, stateIndexPath(options.weightsDir) +
                          ": no step count (meta step) in the checkpoint");
    if (comm.rank() == 0) {
      auto meta = [&](const char *key) {
        const std::string *value = weightsIndex.findMeta(key);
        return value ? *value : std::string("?");
      };
      std::printf("resume: from %s (step %" PRId64
                  "; saved by %s rank(s) at ZeRO stage %s)\n",
                  options.weightsDir.c_str(), resumedStep,
                  meta("world-size").c_str(), meta("zero-stage").c_str());
      std::fflush(stdout);
    }
  }
  // The files of the buffers offloaded to NVMe, in a folder of this rank's
  // own; removed when the store goes, also when the run ends by fatal() or
  // SIGTERM, SIGINT or SIGHUP (Swap.h).
  std::unique_ptr<SwapStore> store;
  std::unique_ptr<SwapStaging> swapStaging;
  if (!offloaded.empty()) {
    std::vector<SwapFile> files;
    int64_t largest = 0;
    for (int i : offloaded) {
      const BufferSpec &spec = info.buffers[i];
      files.push_back({i, swapFileName(info, i), swapBytes(spec.bytes)});
      largest = std::max(largest, swapBytes(spec.bytes));
    }
    std::string error;
    store = SwapStore::create(info.swap, nvmePath, comm.rank(), comm.size(),
                              std::move(files), error);
    if (!store)
      fatal("NVMe offload: " + error);
    swapStaging = std::make_unique<SwapStaging>(largest);
  }
  char *pool = static_cast<char *>(deviceAlloc(poolBytes(info)));
  // State kept in host memory (ZeRO-Offload to the CPU; pinned on CUDA).
  char *hostPool = nullptr;
  size_t hostOffset = 0;
  if (size_t bytes = poolBytes(info, BufferStorage::host))
    hostPool = static_cast<char *>(hostAlloc(bytes));
  size_t offset = 0;
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (spec.storage == BufferStorage::host) {
      buffers[i] = hostPool + hostOffset;
      hostOffset += size_t(bufferPoolBytes(spec.bytes));
      if (spec.derivedFrom < 0)
        loadBuffer(options.weightsDir, weightsIndex, spec, comm.rank(),
                   comm.size(), buffers[i]);
      continue;
    }
    if (spec.storage == BufferStorage::nvme) {
      // Loaded as a device buffer would be, into host staging (the CPU
      // target's device memory), zero-padded to its file's size.
      buffers[i] = nullptr;
      if (spec.derivedFrom >= 0)
        continue;
      std::memset(swapStaging->data, 0, size_t(swapBytes(spec.bytes)));
      loadBuffer(options.weightsDir, weightsIndex, spec, comm.rank(),
                 comm.size(), swapStaging->data);
      if (std::string error; !store->write(i, swapStaging->data, error))
        fatal(error);
      continue;
    }
    buffers[i] = pool + offset;
    offset += size_t(bufferPoolBytes(spec.bytes));
    switch (spec.role) {
    case BufferRole::param:
    case BufferRole::state:
      if (spec.derivedFrom < 0)
        loadBuffer(options.weightsDir, weightsIndex, spec, comm.rank(),
                   comm.size(), buffers[i]);
      break;
    case BufferRole::constant:
      copyToDevice(buffers[i], spec.constantData, spec.bytes);
      break;
    case BufferRole::input:
    case BufferRole::output:
      deviceMemset(buffers[i], 0, spec.bytes);
      break;
    }
  }
  // Carried 16-bit copies: the parameter each comes from, loaded as it is
  // (its slice), rounded to 16 bits as the step's casts round.
  for (int i = 0; i < info.numBuffers; ++i) {
    const BufferSpec &spec = info.buffers[i];
    if (spec.derivedFrom < 0)
      continue;
    const BufferSpec &from = info.buffers[spec.derivedFrom];
    std::vector<float> master(size_t(from.numElements));
    BufferSpec hostSpec = from;
    hostSpec.storage = BufferStorage::host; // loaded into host memory
    loadBuffer(options.weightsDir, weightsIndex, hostSpec, comm.rank(),
               comm.size(), master.data());
    std::vector<uint16_t> copy(master.size());
    narrow16(spec.type, master.data(), int64_t(master.size()), copy.data());
    if (spec.storage == BufferStorage::nvme) {
      std::memset(swapStaging->data, 0, size_t(swapBytes(spec.bytes)));
      std::memcpy(swapStaging->data, copy.data(), size_t(spec.bytes));
      if (std::string error; !store->write(i, swapStaging->data, error))
        fatal(error);
    } else if (spec.storage == BufferStorage::host) {
      std::memcpy(buffers[i], copy.data(), size_t(spec.bytes));
    } else {
      copyToDevice(buffers[i], copy.data(), size_t(spec.bytes));
    }
  }
  swapStaging.reset();
  if (store && comm.rank() == 0) {
    std::printf("offload: %zu buffer%s, %" PRId64
                " bytes per rank in %s (NVMe, io_uring, %s)\n",
                offloaded.size(), offloaded.size() == 1 ? "" : "s",
                store->totalBytes(), store->folder().c_str(),
                store->directIo() ? "O_DIRECT" : "buffered");
    std::fflush(stdout);
  }
  char *arena =
      static_cast<char *>(deviceAlloc(info.arenaBytes + kArenaGuardBytes));
  char *hostArena =
      info.hostArenaBytes > 0
          ? static_cast<char *>(hostAlloc(size_t(info.hostArenaBytes)))
          : nullptr;
  comm.reserveStaging(size_t(info.stagingBytes));

  // Steps already applied (a resumed run continues the data and the step
  // numbers where the saved state left off).
  int64_t firstStep = 0;
  if (info.stepBuffer >= 0) {
    const BufferSpec &spec = info.buffers[info.stepBuffer];
    if (spec.type == DType::i64) {
      copyToHost(&firstStep, buffers[info.stepBuffer], sizeof(int64_t));
    } else {
      int32_t value = 0;
      copyToHost(&value, buffers[info.stepBuffer], sizeof(int32_t));
      firstStep = value;
    }
    if (firstStep < 0)
      fatal("state 'step' holds " + std::to_string(firstStep) +
            " applied steps; expected a non-negative count");
    if (resumedStep >= 0 && firstStep != resumedStep)
      fatal(stateIndexPath(options.weightsDir) + ": the checkpoint of step " +
            std::to_string(resumedStep) + " holds a step counter of " +
            std::to_string(firstStep) + " (a damaged checkpoint)");
  } else if (resumedStep >= 0) {
    firstStep = resumedStep;
  }

  // Throughput: tokens per second when an input is a token sequence (an
  // integer input of rank 2 or more: rows of the global batch times the
  // elements of one row), else samples (rows) per second.
  int64_t rowElements = 1;
  const char *unit = "samples/s";
  for (const InputSlot &slot : slots) {
    const BufferSpec &spec = info.buffers[slot.buffer];
    if ((spec.type == DType::i32 || spec.type == DType::i64) &&
        spec.rank >= 2) {
      rowElements = spec.numElements / spec.shape[0];
      unit = "tokens/s";
      break;
    }
  }
  double tokensPerStep = double(info.microBatch * info.gradientAccumulation *
                                info.worldSize * rowElements);

  StepContext context;
  context.buffers = buffers.data();
  context.arena = arena;
  context.comm = &comm;
  context.stream = deviceStream();
  context.swap = store.get();
  context.hostArena = hostArena;

  const BufferSpec &lossSpec = info.buffers[info.lossBuffer];
  const BufferSpec &lrSpec = info.buffers[info.lrBuffer];
  bool isRoot = comm.rank() == 0;
  comm.resetStats();
  if (store)
    store->resetStats();
  resetTransferStats();
  // --metrics and DeepSpeed's monitors (compiled in from the config).
  StepLog log;
  if (isRoot) {
    auto folder = [](const char *name) {
      return std::string(name ? name : "");
    };
    if (std::string error;
        !log.open(options.metricsPath, folder(info.csvMonitorFolder),
                  folder(info.tensorboardFolder), error))
      fatal(error);
  }
  auto syncLogs = [&] {
    if (std::string error; !log.sync(error))
      fatal(error);
  };
  double totalSeconds = 0;
  uint64_t measuredArena = 0;
  int64_t skippedSteps = 0;
  // NVMe bytes that checkpoints read (not the steps').
  uint64_t checkpointReadBytes = 0;
  Clock::time_point lastLine = Clock::now();
  for (int64_t s = 0; s < options.steps; ++s) {
    int64_t globalStep = firstStep + s;
    comm.setContext("step " + std::to_string(globalStep + 1));
    if (s == 0)
      deviceMemset(arena, kArenaSentinel, info.arenaBytes + kArenaGuardBytes);

    Clock::time_point start = Clock::now();
    for (size_t j = 0; j < slots.size(); ++j) {
      InputSlot &slot = slots[j];
      loader->copyShare(j, globalStep, slot.staging.data());
      const void *source = slot.staging.data();
      if (slot.toBFloat16) {
        floatsToBFloat16(reinterpret_cast<const float *>(source),
                         slot.converted.data(), slot.converted.size());
        source = slot.converted.data();
      }
      copyToDevice(buffers[slot.buffer], source,
                   info.buffers[slot.buffer].bytes);
    }
    sharcProgramStep(&context);
    // A step leaves no NVMe transfer in flight (and its time covers them).
    if (store)
      store->waitAll();
    deviceSynchronize();
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    totalSeconds += seconds;

    if (s == 0)
      measuredArena = usedArenaBytes(arena, info.arenaBytes + kArenaGuardBytes);

    bool last = s + 1 == options.steps;
    bool overflow =
        info.overflowBuffer >= 0 && readFlag(buffers[info.overflowBuffer]);
    skippedSteps += overflow;
    bool stop = info.atMinScaleBuffer >= 0 && overflow &&
                readFlag(buffers[info.atMinScaleBuffer]);
    if (log.isOpen()) {
      StepMetrics record;
      record.step = globalStep + 1;
      record.loss = readScalar(lossSpec, buffers[info.lossBuffer]);
      record.lr = readScalar(lrSpec, buffers[info.lrBuffer]);
      if (info.gradNormBuffer >= 0)
        record.gradNorm = readScalar(info.buffers[info.gradNormBuffer],
                                     buffers[info.gradNormBuffer]);
      if (info.scaleBuffer >= 0)
        record.scale = readScalar(info.buffers[info.scaleBuffer],
                                  buffers[info.scaleBuffer]);
      record.skipped = overflow;
      record.milliseconds = seconds * 1e3;
      record.throughputKey =
          std::string(unit) == "tokens/s" ? "tokens_per_s" : "samples_per_s";
      record.throughput = seconds > 0 ? tokensPerStep / seconds : 0.0;
      record.peakMemoryBytes = devicePeakBytes();
      if (std::string error; !log.record(
              record,
              info.microBatch * info.gradientAccumulation * info.worldSize,
              error))
        fatal(error);
    }
    if (s == 0 || (s + 1) % options.logEvery == 0 || last || overflow || stop) {
      double loss = readScalar(lossSpec, buffers[info.lossBuffer]);
      double lr = readScalar(lrSpec, buffers[info.lrBuffer]);
      if (isRoot) {
        std::printf("step %" PRId64 " loss %.9g lr %.9g", globalStep + 1, loss,
                    lr);
        if (info.scaleBuffer >= 0)
          std::printf(" scale %.9g", readScalar(info.buffers[info.scaleBuffer],
                                                buffers[info.scaleBuffer]));
        std::printf(" ms %.3f %s %.1f%s\n", seconds * 1e3, unit,
                    seconds > 0 ? tokensPerStep / seconds : 0.0,
                    overflow ? " skipped" : "");
        std::fflush(stdout);
      }
      if (stop)
        fatal(lossScaleAtMinimumMessage(
            globalStep + 1, readScalar(info.buffers[info.scaleBuffer],
                                       buffers[info.scaleBuffer])));
      lastLine = Clock::now();
    } else if (isRoot &&
               std::chrono::duration<double>(Clock::now() - lastLine).count() >=
                   kProgressSeconds) {
      std::fprintf(stderr, "... step %" PRId64 "/%" PRId64 "\n", globalStep + 1,
                   firstStep + options.steps);
      std::fflush(stderr);
      lastLine = Clock::now();
    }
    // Checkpoints: every --save-every steps (counted from the first step of
    // training, not of this run) and after the last.  Their NVMe reads are
    // not the steps'.
    if (!options.saveDir.empty() &&
        (last ||
         (options.saveEvery && (globalStep + 1) % options.saveEvery == 0))) {
      uint64_t read = store ? store->bytesRead() : 0;
      saveCheckpoint(comm, info, buffers, store.get(), options, globalStep + 1);
      syncLogs();
      if (store)
        checkpointReadBytes += store->bytesRead() - read;
      lastLine = Clock::now();
    }
  }

  // Summary.  Planned memory: the persistent buffers, the arena and the
  // communicator's staging.
  // On the CPU target host memory is the device's: the resident set holds
  // what ZeRO-Offload to the CPU keeps on the host too.
  bool hostIsDevice = std::string(deviceName()) == "cpu";
  uint64_t plannedMemory = poolBytes(info) + uint64_t(info.arenaBytes) +
                           uint64_t(info.stagingBytes) +
                           (hostIsDevice ? offloadedHostBytes : 0);
  uint64_t plannedBytes = 0, plannedCalls = 0, measuredBytes = 0,
           measuredCalls = 0;
  for (size_t kind = 0; kind < kNumCollectiveKinds; ++kind) {
    plannedBytes += info.plannedCollectiveBytes[kind];
    plannedCalls += info.plannedCollectiveCalls[kind];
    const CollectiveStats &stats =
        comm.stats(static_cast<CollectiveKind>(kind));
    measuredBytes += stats.bytes;
    measuredCalls += stats.calls;
  }
  if (isRoot) {
    double meanMs = totalSeconds * 1e3 / double(options.steps);
    double tokensPerSecond =
        totalSeconds > 0 ? tokensPerStep * double(options.steps) / totalSeconds
                         : 0.0;
    std::printf("summary: steps %" PRId64 ", mean step ms %.3f, %s %.1f\n",
                options.steps, meanMs, unit, tokensPerSecond);
    std::printf("summary: host threads per rank %d, BLAS %s\n", hostThreads(),
                blasDescription().c_str());
    std::printf("summary: bf16 GEMM %s\n", bf16GemmDescription().c_str());
    if (info.overflowBuffer >= 0)
      std::printf("summary: skipped steps %" PRId64 " (gradients not finite)\n",
                  skippedSteps);
    std::printf("summary: arena bytes planned %" PRId64 " measured %" PRIu64
                "\n",
                info.arenaBytes, measuredArena);
    std::printf(
        "summary: peak memory bytes per rank planned %" PRIu64
        " measured %" PRIu64 " (%s; planned: buffers %" PRIu64
        ", arena %" PRId64 ", communication staging %" PRId64
        "; held before them %" PRIu64 ")\n",
        plannedMemory, devicePeakBytes(),
        std::string(deviceName()) == "cpu"
            ? "peak resident set, getrusage"
            : "device memory in use, cudaMemGetInfo",
        poolBytes(info) +
            (hostIsDevice ? poolBytes(info, BufferStorage::host) : 0),
        info.arenaBytes +
            (hostIsDevice ? std::max<int64_t>(info.hostArenaBytes, 0) : 0),
        info.stagingBytes, baselineMemory);
    if (offloadedHostBytes || info.plannedTransferBytes)
      std::printf("summary: host memory bytes per rank planned %" PRIu64
                  " (offloaded state %zu, host arena %" PRId64
                  "); host transfer bytes per step planned %" PRIu64
                  " measured %s\n",
                  offloadedHostBytes, poolBytes(info, BufferStorage::host),
                  info.hostArenaBytes, info.plannedTransferBytes,
                  perStep(transferredBytes(), options.steps).c_str());
    std::printf("summary: collective bytes per step planned %" PRIu64
                " measured %s\n",
                plannedBytes, perStep(measuredBytes, options.steps).c_str());
    std::printf("summary: collective calls per step planned %" PRIu64
                " measured %s\n",
                plannedCalls, perStep(measuredCalls, options.steps).c_str());
    if (store)
      std::printf(
          "summary: NVMe bytes per step planned read %" PRIu64
          " written %" PRIu64 " measured read %s written %s\n",
          info.swap.plannedReadBytes, info.swap.plannedWriteBytes,
          perStep(store->bytesRead() - checkpointReadBytes, options.steps)
              .c_str(),
          perStep(store->bytesWritten(), options.steps).c_str());
    std::fflush(stdout);
    if (measuredArena < uint64_t(info.arenaBytes))
      std::fprintf(stderr,
                   "warning: the first step used %" PRIu64
                   " arena bytes, the plan %" PRId64 "\n",
                   measuredArena, info.arenaBytes);
    std::fflush(stderr);
    // The plan is what the compiler promises: a step that wrote past its
    // arena, or collectives that moved other bytes than planned, are bugs.
    if (measuredArena > uint64_t(info.arenaBytes))
      fatal("the first step wrote " + std::to_string(measuredArena) +
            " arena bytes, past the plan's " + std::to_string(info.arenaBytes));
    if (measuredBytes != plannedBytes * uint64_t(options.steps))
      fatal("collectives sent " + perStep(measuredBytes, options.steps) +
            " bytes per step, the plan " + std::to_string(plannedBytes));
    if (measuredCalls != plannedCalls * uint64_t(options.steps))
      fatal(perStep(measuredCalls, options.steps) +
            " collective calls per step, the plan " +
            std::to_string(plannedCalls));
    if (store && (store->bytesRead() - checkpointReadBytes !=
                      info.swap.plannedReadBytes * uint64_t(options.steps) ||
                  store->bytesWritten() !=
                      info.swap.plannedWriteBytes * uint64_t(options.steps)))
      fatal("NVMe offload read " +
            perStep(store->bytesRead() - checkpointReadBytes, options.steps) +
            " and wrote " + perStep(store->bytesWritten(), options.steps) +
            " bytes per step, the plan " +
            std::to_string(info.swap.plannedReadBytes) + " and " +
            std::to_string(info.swap.plannedWriteBytes));
    if (transferredBytes() !=
        info.plannedTransferBytes * uint64_t(options.steps))
      fatal("copies between device and host memory moved " +
            perStep(transferredBytes(), options.steps) +
            " bytes per step, the plan " +
            std::to_string(info.plannedTransferBytes));
    if (comm.stagingBytes() > uint64_t(info.stagingBytes))
      fatal("the collectives staged " + std::to_string(comm.stagingBytes()) +
            " bytes, past the plan's " + std::to_string(info.stagingBytes));
  }

  syncLogs();
  if (!options.saveStateDir.empty())
    saveState(comm, info, buffers, store.get(), options.saveStateDir,
              agreeOnSaveId(comm),
              stateMeta(info, comm.size(), firstStep + options.steps),
              "--save-state");

  // No rank finalizes MPI (which waits for every rank, without a timeout)
  // before all have finished, --save-state included.
  comm.setContext("the end of the run");
  comm.barrier();

  // The offload files go before MPI_Finalize.
  store.reset();
  deviceFree(pool);
  deviceFree(arena);
  hostFree(hostPool);
  hostFree(hostArena);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // Before MPI and any thread: it may run this process again.
  sharc::rt::ensureBlasKernels(argv);
  int threadLevel = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &threadLevel);
  int status = run(argc, argv);
  MPI_Finalize();
  return status;
}
