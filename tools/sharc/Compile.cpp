//===- Compile.cpp - sharc compile ----------------------------------------===//
//
//   sharc compile MODEL.onnx --target cpu|cuda [training flags | --config F]
//                 -o OUTDIR [--report] [--cuda-arch sm_90] [--emit-only]
//
// Builds the training step (the train pipeline), prepares, fuses and plans it,
// emits OUTDIR/program.cpp (program.cu for CUDA), the initial weights, a
// manifest of every persistent tensor, and links OUTDIR/train against the
// runtime.  Everything is written to a fresh folder OUTDIR.partial-XXXXXX
// (created exclusively) and renamed at the end, so a failed compile leaves
// nothing behind; an earlier OUTDIR is replaced only when it holds nothing
// but what sharc compile writes.  docs/cli.md documents it.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Compile.h"

#include "codegen/Emitter.h"
#include "ir/SharcOps.h"
#include "passes/Passes.h"
#include "runtime/Npy.h"
#include "tools/sharc/BuildConfig.h"
#include "tools/sharc/Diagnostics.h"
#include "tools/sharc/Options.h"
#include "tools/sharc/Plan.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir;
using namespace sharc;
namespace cl = llvm::cl;

namespace {

/// The flags of `sharc compile` besides the training flags.
struct CompileFlags {
  CompileFlags(cl::SubCommand &sub, cl::OptionCategory &category)
      : target("target", cl::desc("cpu (default) or cuda"),
               cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::sub(sub),
               cl::cat(category)),
        cudaArch("cuda-arch",
                 cl::desc("GPU architecture for --target cuda (default sm_90; "
                          "PTX is embedded too)"),
                 cl::value_desc("sm_XX"), cl::init("sm_90"), cl::sub(sub),
                 cl::cat(category)),
        report("report",
               cl::desc("Print kernels, GEMMs, arena and per-rank "
                        "parameter/gradient/state and collective bytes"),
               cl::sub(sub), cl::cat(category)),
        fuse("fuse",
             cl::desc("Fuse elementwise chains into one kernel each "
                      "(sharc-fuse; default on)"),
             cl::init(true), cl::sub(sub), cl::cat(category)),
        overlapComm(
            "overlap-comm",
            cl::desc("Start each gradient all-reduce as soon as its bucket "
                     "is complete, overlapping backward "
                     "(sharc-schedule-collectives; default on, or "
                     "zero_optimization.overlap_comm)"),
            cl::init(true), cl::sub(sub), cl::cat(category)),
        emitOnly("emit-only",
                 cl::desc("Write the source, weights and manifest; do not "
                          "build OUTDIR/train"),
                 cl::sub(sub), cl::cat(category)),
        plan("plan",
             cl::desc("Plan without weights: read only the parameters' "
                      "shapes (their data may be absent), print the report "
                      "and write nothing (no -o)"),
             cl::sub(sub), cl::cat(category)),
        hostUpdate(
            "host-update",
            cl::desc("With --offload-optimizer cpu: keep the optimizer state "
                     "in host memory and run its update on the host, copying "
                     "what it reads there and what it writes back, as the "
                     "CUDA target does (the default there); on the CPU "
                     "target, whose device memory is the host's, this runs "
                     "that same program"),
            cl::sub(sub), cl::cat(category)),
        memoryBudget(
            "memory-budget",
            cl::desc("Search ZeRO stage, offload, micro-batch and "
                     "recomputation for the fastest plan whose memory per "
                     "rank fits BYTES, print every candidate, and compile "
                     "the chosen one (docs/budget.md)"),
            cl::value_desc("BYTES"), cl::init(0), cl::sub(sub),
            cl::cat(category)) {}

  cl::opt<std::string> target;
  cl::opt<std::string> cudaArch;
  cl::opt<bool> report;
  cl::opt<bool> fuse;
  cl::opt<bool> overlapComm;
  cl::opt<bool> emitOnly;
  cl::opt<bool> plan;
  cl::opt<bool> hostUpdate;
  cl::opt<int64_t> memoryBudget;
};

/// The flags, made by registerCompileFlags.
std::unique_ptr<CompileFlags> flags;

namespace fs = std::filesystem;

/// The folder this compile writes into before it becomes OUTDIR: created
/// exclusively under a fresh name next to OUTDIR, so that it is never
/// something sharc did not create.  Removed (without following symbolic
/// links) unless `keep` is called.
class StagingFolder {
public:
  ~StagingFolder() {
    if (!path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
  LogicalResult create(StringRef outDir) {
    StringRef parent = llvm::sys::path::parent_path(outDir);
    if (!parent.empty())
      if (std::error_code ec = llvm::sys::fs::create_directories(parent)) {
        fail("cannot create '" + parent + "': " + ec.message());
        return failure();
      }
    std::string pattern = (outDir + ".partial-XXXXXX").str();
    if (!mkdtemp(pattern.data())) {
      fail("cannot create a folder next to '" + outDir +
           "': " + std::strerror(errno));
      return failure();
    }
    path = pattern;
    return success();
  }
  const std::string &get() const { return path; }
  void keep() { path.clear(); }

private:
  std::string path;
};

/// What `sharc compile` writes into OUTDIR besides the weight files.
bool isOutputFile(StringRef name) {
  return name == "manifest.json" || name == "program.cpp" ||
         name == "program.cu" || name == "train";
}

/// Checks that `outDir` may be replaced: it is absent, or it is a folder (not
/// a symbolic link) holding only what an earlier sharc compile wrote — the
/// files above and the weight files its manifest lists.  Returns the paths
/// to remove to replace it (files first, then folders), never anything else.
FailureOr<std::vector<fs::path>> replaceableOutput(StringRef outDir) {
  std::error_code ec;
  fs::path dir(outDir.str());
  fs::file_status status = fs::symlink_status(dir, ec);
  if (ec || status.type() == fs::file_type::not_found)
    return std::vector<fs::path>();
  auto refuse = [&](const Twine &why) -> FailureOr<std::vector<fs::path>> {
    fail("'" + outDir + "' " + why +
         "; not replacing it (remove it or choose "
         "another -o)");
    return failure();
  };
  if (fs::is_symlink(status))
    return refuse("is a symbolic link");
  if (!fs::is_directory(status))
    return refuse("exists and is not a folder");
  auto manifestText =
      llvm::MemoryBuffer::getFile((dir / "manifest.json").string());
  if (!manifestText)
    return refuse(
        "exists and is not a sharc compile output (no manifest.json)");
  llvm::Expected<llvm::json::Value> manifest =
      llvm::json::parse((*manifestText)->getBuffer());
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return refuse("has a manifest.json that is not sharc's");
  }
  std::set<std::string> weights;
  if (const llvm::json::Object *object = manifest->getAsObject())
    if (const llvm::json::Array *buffers = object->getArray("buffers"))
      for (const llvm::json::Value &buffer : *buffers)
        if (const llvm::json::Object *entry = buffer.getAsObject())
          if (std::optional<StringRef> file = entry->getString("file"))
            if (file->starts_with("weights/"))
              weights.insert(file->drop_front(8).str());

  std::vector<fs::path> files, folders;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    fs::file_status kind = entry.symlink_status();
    if (name == "weights" && fs::is_directory(kind)) {
      for (const fs::directory_entry &weight :
           fs::directory_iterator(entry.path(), ec)) {
        std::string file = weight.path().filename().string();
        if (!weights.count(file) ||
            !fs::is_regular_file(weight.symlink_status()))
          return refuse("holds 'weights/" + file +
                        "', which sharc compile did not write");
        files.push_back(weight.path());
      }
      if (ec)
        return refuse("cannot be read (" + ec.message() + ")");
      folders.push_back(entry.path());
      continue;
    }
    if (!isOutputFile(name) || !fs::is_regular_file(kind))
      return refuse("holds '" + name + "', which sharc compile did not write");
    files.push_back(entry.path());
  }
  if (ec)
    return refuse("cannot be read (" + ec.message() + ")");
  files.insert(files.end(), folders.begin(), folders.end());
  files.push_back(dir);
  return files;
}

/// Writes `text` to `path`, checking every write and the close.
LogicalResult writeFile(const std::string &path, StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << text;
    os.close();
    ec = os.error();
    os.clear_error();
  }
  if (ec) {
    fail("cannot write '" + path + "': " + ec.message());
    return failure();
  }
  return success();
}

/// Runs `argv`; on failure prints the command and returns failure.
LogicalResult runTool(ArrayRef<std::string> argv, StringRef what) {
  SmallVector<StringRef> args(argv.begin(), argv.end());
  std::string error;
  llvm::errs() << "sharc: " << what << "\n";
  int status =
      llvm::sys::ExecuteAndWait(argv[0], args, std::nullopt, {}, 0, 0, &error);
  if (status != 0) {
    fail(what + " failed (" +
         (error.empty() ? "exit status " + std::to_string(status) : error) +
         "): " + llvm::join(args, " "));
    return failure();
  }
  return success();
}

/// `list` (CMake's ;-separated) as separate strings.
SmallVector<std::string> splitList(StringRef list) {
  SmallVector<StringRef> parts;
  list.split(parts, ';', -1, /*KeepEmpty=*/false);
  return SmallVector<std::string>(parts.begin(), parts.end());
}

/// The compiler and link command that builds `source` into `binary`.
///
/// CPU: the host compiler, linking SharcTrainMain, SharcDeviceHost, the
/// runtime, MPI and BLAS.  CUDA: nvcc, compiling for `arch` (sm_XX: its
/// machine code plus compute_XX PTX, which later GPUs JIT-compile) and
/// linking SharcTrainMain, libSharcRuntimeCuda.a (device layer, cuBLASLt GEMM,
/// NcclCommunicator), the runtime, NCCL, cuBLASLt, cudart, MPI and BLAS with
/// an rpath to the CUDA libraries (SHARC_CUDA_RUNTIME_LIBS and
/// SHARC_CUDA_LINK_LIBS of BuildConfig.h).
SmallVector<std::string> buildCommand(StringRef source, StringRef binary,
                                      bool cuda, StringRef arch) {
  SmallVector<std::string> argv;
  if (cuda) {
    std::string digits = arch.drop_front(3).str(); // sm_90 -> 90
    argv = {SHARC_NVCC, "-O3", "-std=c++20", "--expt-relaxed-constexpr",
            // No fused multiply-adds: every op rounds as on the CPU.
            "--fmad=false",
            "-gencode=arch=compute_" + digits + ",code=sm_" + digits,
            "-gencode=arch=compute_" + digits + ",code=compute_" + digits,
            "-I" SHARC_SOURCE_DIR};
    for (const std::string &dir : splitList(SHARC_MPI_INCLUDES))
      argv.append({"-isystem", dir});
    argv.push_back(source.str());
    argv.append({"-o", binary.str()});
    for (const std::string &lib : splitList(SHARC_CUDA_RUNTIME_LIBS))
      argv.push_back(lib);
    // NCCL, cuBLASLt, cudart, MPI, BLAS, liburing and the rpath flags, and
    // protobuf.
    for (const std::string &lib : splitList(SHARC_CUDA_LINK_LIBS))
      argv.push_back(lib);
    for (const std::string &lib : splitList(SHARC_PROTOBUF_LIBS))
      argv.push_back(lib);
    return argv;
  }
  // No contraction into FMAs: every op rounds exactly as the evaluator does,
  // so the CPU kernels reproduce `sharc eval --train` bit for bit.  Without
  // trapping math the compiler may evaluate both sides of a select, which is
  // what lets kernel loops (runtime/Math.h's exp and tanh included) vectorize;
  // it changes no result.  Nothing reads errno, so sqrt needs no library
  // call for negative inputs.
  argv = {SHARC_HOST_CXX,      "-O3",
          "-std=c++17",        "-march=native",
          "-ffp-contract=off", "-fno-trapping-math",
          "-fno-math-errno"};
  argv.push_back("-I" SHARC_SOURCE_DIR);
  for (const std::string &dir : splitList(SHARC_MPI_INCLUDES))
    argv.push_back("-I" + dir);
  // SHARC_HOST_CXXFLAGS: more flags for the host compiler (debug symbols,
  // GCC's vectorization reports), space-separated, after sharc's own.
  if (const char *extra = std::getenv("SHARC_HOST_CXXFLAGS"))
    for (StringRef flag : llvm::split(StringRef(extra), ' '))
      if (!flag.trim().empty())
        argv.push_back(flag.trim().str());
  argv.push_back(source.str());
  argv.append({"-o", binary.str()});
  for (const std::string &lib : splitList(SHARC_RUNTIME_LIBS))
    argv.push_back(lib);
  for (const std::string &lib : splitList(SHARC_MPI_LIBS))
    argv.push_back(lib);
  for (const std::string &lib : splitList(SHARC_BLAS_LIBS))
    argv.push_back(lib);
  // The bf16 products' oneDNN and its OpenMP (runtime/GemmBf16.cpp).
  for (const std::string &lib : splitList(SHARC_DNNL_LIBS))
    argv.push_back(lib);
  // NVMe offload's io_uring (runtime/Swap.cpp), and protobuf for
  // TensorBoard's event files (runtime/TensorBoard.cpp).
  for (const std::string &lib : splitList(SHARC_URING_LIBS))
    argv.push_back(lib);
  for (const std::string &lib : splitList(SHARC_PROTOBUF_LIBS))
    argv.push_back(lib);
  return argv;
}

/// The .npy array of one element of state buffer `buffer` (optimizer and
/// scaler state, the step counter): its `init`, zero unless stated, stored
/// as its type stores it; nullopt for a type state cannot have.
std::optional<rt::NpyArray> stateElement(const ReportBuffer &buffer) {
  static const std::map<std::string, DType> types = {{"f32", DType::f32},
                                                     {"f64", DType::f64},
                                                     {"i64", DType::i64},
                                                     {"i32", DType::i32},
                                                     {"i1", DType::i1}};
  auto type = types.find(buffer.type);
  if (type == types.end())
    return std::nullopt;
  Tensor element(type->second, {1});
  element.setDouble(0, buffer.initialValue);
  return element.toNpy();
}

/// Writes the initial file `path` of persistent buffer `buffer`: a
/// parameter's value from the model, as the model stores it; for state,
/// every element its `init`, repeated from one converted element (a state
/// tensor is as large as its parameter: no full-size Tensor, whose floats are
/// doubles, is made for it), and zero state (AdamW's moments) as a file of
/// zeros that are not written (writeNpyZeros).  Returns the error, or ""
/// (safe to call from several threads for different buffers).
std::string writeInitialValue(const ReportBuffer &buffer,
                              const LoadedModel &model,
                              const std::string &path) {
  std::string error;
  if (buffer.role != "state") {
    auto known = model.parameters.find(buffer.name);
    if (known == model.parameters.end())
      return "parameter '" + buffer.name +
             "' has no initial value in the model (initializers only)";
    known->second.writeNpy(path, error);
    return error;
  }
  std::optional<rt::NpyArray> element = stateElement(buffer);
  if (!element)
    return "'" + buffer.name + "' has unsupported type " + buffer.type;
  if (llvm::all_of(element->data, [](char byte) { return byte == 0; })) {
    rt::writeNpyZeros(path, element->type, buffer.fileShape, error);
    return error;
  }
  rt::NpyArray array;
  array.type = element->type;
  array.shape.assign(buffer.fileShape.begin(), buffer.fileShape.end());
  array.data.resize(size_t(array.numElements()) * element->data.size());
  for (size_t at = 0; at < array.data.size(); at += element->data.size())
    std::memcpy(array.data.data() + at, element->data.data(),
                element->data.size());
  rt::writeNpy(path, array, error);
  return error;
}

/// Writes the initial files of `buffers` (buffer, path) on every core: the
/// copy into the file system's cache is most of a large model's compile time
/// after its import.  Fails with the first error in `buffers`' order.
LogicalResult
writeInitialValues(ArrayRef<std::pair<const ReportBuffer *, std::string>> files,
                   const LoadedModel &model) {
  // Largest first, so that the last file to start is a small one.
  std::vector<size_t> order(files.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return files[a].first->bytes > files[b].first->bytes;
  });
  std::vector<std::string> errors(files.size());
  uint64_t total = 0;
  for (const auto &file : files)
    total += file.first->bytes;
  {
    Progress writing("writing the initial weights", total);
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
    for (size_t index : order)
      pool.async([&, index] {
        errors[index] =
            writeInitialValue(*files[index].first, model, files[index].second);
        writing.add(files[index].first->bytes);
      });
    pool.wait();
  }
  for (const std::string &error : errors)
    if (!error.empty()) {
      fail(error);
      return failure();
    }
  return success();
}

/// `shape` as a JSON array of dimensions.
llvm::json::Array shapeJson(ArrayRef<int64_t> shape) {
  llvm::json::Array array;
  for (int64_t d : shape)
    array.push_back(d);
  return array;
}

/// Prints the --report lines of `report` to `os`.
void printReport(const ProgramReport &report, const EmitOptions &options,
                 llvm::raw_ostream &os) {
  os << "report: target " << options.target << ", " << options.worldSize
     << " rank(s), micro-batch " << options.microBatch << " x "
     << options.gradientAccumulation << " accumulation step(s) per rank\n";
  os << "report: kernels " << report.numKernels << " (launches per step "
     << report.numKernelLaunches << "), GEMM calls per step "
     << report.numGemmCalls << " (" << report.numGemmEpilogues
     << " with a bias or activation epilogue)\n";
  os << "report: arena peak bytes " << report.arenaBytes << "\n";
  if (report.stagingBytes)
    os << "report: communication staging bytes " << report.stagingBytes
       << " (the host communicator's largest reduction, every rank's part)\n";
  os << "report: per rank: parameter bytes " << report.paramBytes
     << ", gradient bytes " << report.gradientBytes
     << ", optimizer state bytes " << report.stateBytes << "\n";
  // Where each rank's bytes live, and what moves between the places.
  os << "report: per rank memory: " << options.target << " device "
     << deviceBytes(report) << " bytes (arena, staging and buffers"
     << (options.target == "cpu" ? "; the CPU target's device memory is the "
                                   "host's"
                                 : "")
     << "), pinned host " << report.hostBytes + report.hostArenaBytes
     << ", NVMe " << report.nvmeBytes << "; moved per step: PCIe "
     << report.transferBytes << ", NVMe read " << report.swapReadBytes
     << " written " << report.swapWriteBytes << "\n";
  if (options.zeroStage == 1 || options.zeroStage == 2)
    os << "report: ZeRO stage " << options.zeroStage
       << ": each rank holds the optimizer state of its slice of every "
          "parameter (ceil(n / "
       << options.worldSize << ") elements)"
       << (options.zeroStage >= 2
               ? " and of its gradient; each gradient bucket is "
                 "reduce-scattered where backward completes it"
               : "; gradients are reduce-scattered after backward")
       << ", and the updated slices all-gathered"
       << (report.gatheredParameterPeakBytes
               ? "; the fp32 master weights are partitioned too (the "
                 "parameter bytes above), their 16-bit copies all-gathered "
                 "where forward first reads them and kept for the step"
               : "")
       << "\n";
  if (options.zeroStage >= 3)
    os << "report: ZeRO stage 3: each rank holds its slice (ceil(n / "
       << options.worldSize
       << ") elements) of every parameter above the persistence threshold, "
          "and of every optimizer state and gradient; each gradient bucket "
          "is reduce-scattered where backward completes it; each "
          "partitioned parameter is all-gathered before its readers (again "
          "where a reuse is farther than the reuse distance) and freed "
          "after them\n";
  if (report.gatheredParameterPeakBytes || options.zeroStage >= 3)
    os << "report: per rank: gathered parameters peak bytes "
       << report.gatheredParameterPeakBytes
       << " (whole parameters live at once, in the arena)\n";
  if (report.carriedCopyBytes)
    os << "report: per rank: 16-bit copies of the master slices, carried from "
          "step to step: "
       << report.carriedCopyBytes
       << " bytes (in device memory; derived from the masters at start, never "
          "saved; the masters go with the offloaded optimizer state)\n";
  if (report.computeCopyBytes)
    os << "report: per rank: 16-bit compute copies of the parameters "
       << report.computeCopyBytes
       << " bytes (in the arena, cast from the fp32 master weights each "
          "step; the parameter bytes above are the fp32 masters)\n";
  static const char *const names[] = {"all-reduce", "reduce-scatter",
                                      "all-gather", "broadcast"};
  // What each kind of started collective overlaps: the compute calls (kernel
  // launches, GEMM calls) between its start and its wait.
  for (int kind = 0; kind < 3; ++kind) {
    int64_t started = 0, overlapping = 0, least = 0, most = 0, sum = 0;
    for (const ScheduledCollective &entry : report.schedule) {
      if (entry.kind != kind)
        continue;
      int64_t between = entry.computeCallsBetween;
      least = started ? std::min(least, between) : between;
      most = std::max(most, between);
      sum += between;
      overlapping += between > 0;
      ++started;
    }
    if (started)
      os << "report: schedule: " << names[kind] << ": " << overlapping << " of "
         << started << " started calls overlap compute (" << least << " to "
         << most << " kernel launches and GEMM calls between start and wait, "
         << llvm::formatv("{0:f1}", double(sum) / double(started))
         << " on average)\n";
  }
  uint64_t total = 0;
  for (size_t k = 0; k < 4; ++k)
    total += report.collectiveBytes[k];
  os << "report: collective bytes per rank per step " << total;
  for (size_t k = 0; k < 4; ++k)
    if (report.collectiveCalls[k])
      os << " (" << names[k] << ": " << report.collectiveCalls[k] << " calls, "
         << report.collectiveBytes[k] << " bytes)";
  os << "\n";
}

} // namespace

void sharc::registerCompileFlags(cl::SubCommand &compile,
                                 cl::OptionCategory &category) {
  flags = std::make_unique<CompileFlags>(compile, category);
}

bool sharc::compileReadsShapesOnly() { return flags && flags->plan; }

int sharc::runCompile(MLIRContext &context, LoadedModel &model,
                      StringRef modelPath, ArrayRef<std::string> inputShapes,
                      StringRef outDir) {
  bool plan = flags->plan;
  if (plan && !(outDir.empty() || outDir == "-"))
    return fail("--plan writes nothing; -o does not apply");
  if (plan && flags->emitOnly)
    return fail("--plan writes nothing; --emit-only does not apply");
  if (!plan && (outDir.empty() || outDir == "-"))
    return fail("sharc compile needs -o OUTDIR (or --plan)");
  // `-o out/` names the folder `out`.
  while (outDir.size() > 1 && outDir.ends_with("/"))
    outDir = outDir.drop_back();
  if (outDir == "/" || outDir == "." || outDir == ".." ||
      llvm::sys::path::filename(outDir) == "." ||
      llvm::sys::path::filename(outDir) == "..")
    return fail("'" + outDir +
                "' cannot be the output folder; give -o a new folder's name");
  bool cuda = flags->target == "cuda";
  if (!cuda && flags->target != "cpu")
    return fail("--target must be cpu or cuda, not '" + flags->target + "'");
  if (!StringRef(flags->cudaArch).starts_with("sm_") ||
      !llvm::all_of(StringRef(flags->cudaArch).drop_front(3), llvm::isDigit) ||
      flags->cudaArch.size() < 5)
    return fail("--cuda-arch must look like sm_90, not '" + flags->cudaArch +
                "'");
  if (cuda && !flags->emitOnly && StringRef(SHARC_NVCC).empty())
    return fail("--target cuda needs nvcc, which this sharc was built "
                "without (install the CUDA toolkit and reconfigure)");
  if (cuda && !flags->emitOnly && StringRef(SHARC_CUDA_RUNTIME_LIBS).empty())
    return fail("--target cuda needs the CUDA runtime library, which this "
                "sharc was built without (NCCL was not found; install it and "
                "reconfigure), or --emit-only");
  unsigned capability = 0;
  if (cuda &&
      (StringRef(flags->cudaArch).drop_front(3).getAsInteger(10, capability) ||
       capability < 80))
    return fail("--cuda-arch " + flags->cudaArch +
                " is not supported: the CUDA runtime is built for sm_80 and "
                "later (sm_80, sm_86, sm_89, sm_90, ...)");
  if (!plan && failed(replaceableOutput(outDir)))
    return 1;

  bool budgeted = flags->memoryBudget.getNumOccurrences() != 0;
  FailureOr<TrainingOptions> options =
      resolveTrainingOptions(model.entry, budgeted);
  if (failed(options))
    return 1;
  bool anyOffload = options->offloadOptimizer != OffloadDevice::none ||
                    options->offloadParam != OffloadDevice::none;
  PlanSettings settings{.cuda = cuda,
                        .fuse = flags->fuse,
                        .overlapComm = std::nullopt,
                        .hostUpdate = flags->hostUpdate,
                        .modelHash = model.modelHash};
  if (flags->overlapComm.getNumOccurrences())
    settings.overlapComm = flags->overlapComm;
  // cpu_checkpointing: the checkpoints in host memory, which on the CPU
  // target is where they are (unless --host-update runs the CUDA target's
  // program).
  options->checkpointsOnHost = options->cpuCheckpointing &&
                               options->recompute != "none" &&
                               (cuda || flags->hostUpdate);
  if (budgeted && flags->memoryBudget < 1)
    return fail("--memory-budget must be a positive number of bytes, got " +
                Twine(flags->memoryBudget));
  if (flags->hostUpdate && !anyOffload && !budgeted &&
      !options->checkpointsOnHost)
    return fail("--host-update needs --offload-optimizer or --offload-param "
                "cpu or nvme (or their keys in zero_optimization), or "
                "activation_checkpointing.cpu_checkpointing");

  DefaultTimingManager timingManager;
  applyDefaultTimingManagerCLOptions(timingManager);
  TimingScope timing = timingManager.getRootScope();
  // One pass manager for the whole pipeline, so that the MLIR flags
  // (--mlir-print-ir-*, --mlir-timing) see every pass once.  It lives until
  // the end: its timers are keyed by the passes' addresses, which later
  // timers must not reuse.
  std::optional<PassManager> pm;
  FailureOr<PlannedProgram> planned = failure();
  if (budgeted) {
    FixedDimensions fixed{.zeroStage = trainingFlagGiven("zero-stage"),
                          .offload = trainingFlagGiven("offload-optimizer") ||
                                     trainingFlagGiven("offload-param"),
                          .microBatch = trainingFlagGiven("grad-accum"),
                          .recompute = trainingFlagGiven("recompute")};
    planned = searchMemoryBudget(context, model, modelPath, inputShapes, plan,
                                 *options, settings, fixed, flags->memoryBudget,
                                 llvm::outs());
  } else {
    pm.emplace(&context);
    if (failed(applyPassManagerCLOptions(*pm)))
      return 1;
    pm->enableTiming(timing);
    planned = planProgram(*pm, *model.module, *options, settings, modelPath,
                          /*train=*/true, &timing);
  }
  if (failed(planned))
    return 1;
  options = planned->options;
  const EmitOptions &emit = planned->emit;
  const ProgramReport &report = planned->report;
  const std::string &source = planned->source;
  bool nvme = planned->nvme, paramNvme = planned->paramNvme,
       hostLayout = planned->hostLayout, hostUpdate = planned->hostUpdate,
       paramsOnHost = planned->paramsOnHost, offload = planned->offload;
  auto printAll = [&] {
    printReport(report, emit, llvm::outs());
    if (offload)
      llvm::outs() << "report: ZeRO-Offload to the CPU ("
                   << (options->offloadOptimizer == OffloadDevice::cpu
                           ? "optimizer state"
                           : "")
                   << (options->offloadOptimizer == OffloadDevice::cpu &&
                               options->offloadParam == OffloadDevice::cpu
                           ? " and "
                           : "")
                   << (options->offloadParam == OffloadDevice::cpu
                           ? "parameters"
                           : "")
                   << "): on the CPU target the device memory is the host's, "
                      "so nothing moves and the bytes above stay where they "
                      "are\n";
    if (options->checkpointsOnHost && options->recompute != "none")
      llvm::outs() << "report: activation_checkpointing.cpu_checkpointing: "
                      "each recomputed layer's input is kept in "
                   << (cuda ? "pinned host memory" : "host memory")
                   << " between forward and backward (in the host arena), "
                      "copied back before its backward\n";
    else if (options->cpuCheckpointing && options->recompute != "none")
      llvm::outs() << "report: activation_checkpointing.cpu_checkpointing: on "
                      "the CPU target the checkpoints are in host memory "
                      "already; nothing moves\n";
    if (paramsOnHost)
      llvm::outs() << "report: ZeRO-Offload of the parameters (stage 3): each "
                      "rank keeps the slices its gathers read in "
                   << (cuda ? "pinned host memory" : "host memory")
                   << " and copies each to the device where a gather reads "
                      "it\n";
    if (hostUpdate && !nvme)
      llvm::outs() << "report: ZeRO-Offload to the CPU (optimizer state): "
                      "each rank keeps its optimizer state in "
                   << (cuda ? "pinned host memory" : "host memory")
                   << " and runs its update on the host; the gradient slices "
                      "and the update's other inputs are copied to the host, "
                      "the new parameters back ("
                   << report.transferBytes << " bytes per step)\n";
    if (nvme)
      llvm::outs() << "report: ZeRO-Offload to NVMe (optimizer state): each "
                      "rank keeps its optimizer state in files under '"
                   << options->nvmePath
                   << "' and streams it through the update in sub-groups of "
                      "at least "
                   << options->subGroupSize << " elements (reads "
                   << (options->pipelineRead ? "" : "not ")
                   << "pipelined, writes "
                   << (options->pipelineWrite ? "" : "not ") << "pipelined"
                   << (hostUpdate ? "), into host memory, where the update "
                                    "runs"
                                  : ")")
                   << "\n";
    if (paramNvme)
      llvm::outs() << "report: ZeRO-Offload of the parameters to NVMe (stage "
                      "3): each rank keeps the slices its gathers read in "
                      "files under '"
                   << options->nvmePath
                   << "' and reads each where a gather reads it (one read "
                      "ahead)"
                   << (hostLayout ? ", into host memory, then to the device"
                                  : "")
                   << "\n";
  };
  if (plan) {
    printAll();
    llvm::errs() << "sharc: planned " << modelPath
                 << " from its shapes (nothing written)\n";
    return 0;
  }

  StagingFolder folder;
  if (failed(folder.create(outDir)))
    return 1;
  const std::string &staging = folder.get();
  if (std::error_code ec =
          llvm::sys::fs::create_directory(staging + "/weights"))
    return fail("cannot create '" + staging + "/weights': " + ec.message());
  std::string sourcePath = staging + (cuda ? "/program.cu" : "/program.cpp");
  if (failed(writeFile(sourcePath, source)))
    return 1;

  // Initial weights and the manifest.
  llvm::json::Array buffers;
  std::vector<std::pair<const ReportBuffer *, std::string>> initialFiles;
  for (const ReportBuffer &buffer : report.buffers) {
    llvm::json::Object entry{{"name", buffer.name},
                             {"role", buffer.role},
                             {"type", buffer.type},
                             {"shape", shapeJson(buffer.shape)},
                             {"bytes", buffer.bytes}};
    if (buffer.role == "param")
      entry["trainable"] = buffer.trainable;
    entry["storage"] = buffer.offloaded ? "nvme"
                       : buffer.inHost  ? "host"
                                        : "device";
    if (!buffer.derivedFrom.empty())
      entry["derived_from"] = buffer.derivedFrom;
    if (buffer.fileShape != buffer.shape)
      entry["file_shape"] = shapeJson(buffer.fileShape);
    if ((buffer.role == "param" || buffer.role == "state") &&
        buffer.derivedFrom.empty()) {
      std::string file = "weights/" + buffer.file;
      initialFiles.emplace_back(&buffer, staging + "/" + file);
      entry["file"] = file;
    }
    if (buffer.role != "constant")
      buffers.push_back(std::move(entry));
  }
  if (failed(writeInitialValues(initialFiles, model)))
    return 1;
  llvm::json::Array collectives;
  static const char *const kinds[] = {"all_reduce", "reduce_scatter",
                                      "all_gather", "broadcast"};
  for (size_t k = 0; k < 4; ++k)
    collectives.push_back(llvm::json::Object{
        {"kind", kinds[k]},
        {"calls_per_step", static_cast<int64_t>(report.collectiveCalls[k])},
        {"bytes_per_step", static_cast<int64_t>(report.collectiveBytes[k])}});
  llvm::json::Array schedule;
  for (const ScheduledCollective &entry : report.schedule)
    schedule.push_back(
        llvm::json::Object{{"kind", kinds[entry.kind]},
                           {"bytes", static_cast<int64_t>(entry.bytes)},
                           {"compute_calls_between", entry.computeCallsBetween},
                           {"in_micro_batch_loop", entry.inMicroBatchLoop}});
  llvm::json::Object manifest{
      {"model", modelPath.str()},
      {"model_hash", emit.modelHash},
      {"sharc_version", emit.sharcVersion},
      {"training_config", emit.trainingConfig},
      {"target", emit.target},
      {"world_size", emit.worldSize},
      {"zero_stage", emit.zeroStage},
      {"micro_batch", emit.microBatch},
      {"gradient_accumulation", emit.gradientAccumulation},
      {"arena_bytes", report.arenaBytes},
      {"staging_bytes", report.stagingBytes},
      {"parameter_bytes", report.paramBytes},
      {"gradient_bytes", report.gradientBytes},
      {"optimizer_state_bytes", report.stateBytes},
      {"compute_copy_bytes", report.computeCopyBytes},
      {"gathered_parameter_peak_bytes", report.gatheredParameterPeakBytes},
      {"device_bytes", deviceBytes(report)},
      {"nvme_bytes", report.nvmeBytes},
      {"host_bytes", report.hostBytes},
      {"carried_copy_bytes", report.carriedCopyBytes},
      {"host_arena_bytes", report.hostArenaBytes},
      {"transfer_bytes_per_step", static_cast<int64_t>(report.transferBytes)},
      {"nvme_read_bytes_per_step", static_cast<int64_t>(report.swapReadBytes)},
      {"nvme_write_bytes_per_step",
       static_cast<int64_t>(report.swapWriteBytes)},
      {"kernels", report.numKernels},
      {"gemm_calls_per_step", report.numGemmCalls},
      {"gemm_epilogues_per_step", report.numGemmEpilogues},
      {"collectives", std::move(collectives)},
      {"schedule", std::move(schedule)},
      {"buffers", std::move(buffers)}};
  if (failed(writeFile(
          staging + "/manifest.json",
          llvm::formatv("{0:2}\n", llvm::json::Value(std::move(manifest)))
              .str())))
    return 1;

  if (!flags->emitOnly) {
    TimingScope build = timing.nest("build-binary");
    SmallVector<std::string> argv =
        buildCommand(sourcePath, staging + "/train", cuda, flags->cudaArch);
    std::string what = ("building " + outDir + "/train with " +
                        llvm::sys::path::filename(argv[0]))
                           .str();
    if (failed(runTool(argv, what)))
      return 1;
  }

  // The output folder is readable as any folder the user makes (mkdtemp
  // made it private).
  mode_t mask = umask(0);
  umask(mask);
  if (chmod(staging.c_str(), 0777 & ~mask) != 0)
    return fail("cannot set the permissions of '" + staging +
                "': " + std::strerror(errno));
  // Replace an earlier output: checked again now, and only its own files go.
  FailureOr<std::vector<fs::path>> old = replaceableOutput(outDir);
  if (failed(old))
    return 1;
  for (const fs::path &path : *old) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec)
      return fail("cannot remove '" + path.string() +
                  "' of the earlier "
                  "output: " +
                  ec.message());
  }
  if (std::error_code ec = llvm::sys::fs::rename(staging, outDir))
    return fail("cannot move '" + staging + "' to '" + outDir +
                "': " + ec.message());
  folder.keep();
  if (flags->report)
    printAll();
  llvm::errs() << "sharc: wrote " << outDir
               << (flags->emitOnly ? " (sources only)" : "/train") << "\n";
  return 0;
}
