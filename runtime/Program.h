//===- Program.h - The interface of a compiled training program -*- C++ -*-===//
//
// `sharc compile` emits one translation unit per program.  It defines the two
// functions declared at the bottom of this file; the runtime's step loop
// (runtime/TrainMain.cpp) is the `main` of the training binary and calls them.
// This header is the whole contract between generated code and the runtime:
// nothing else in the runtime knows about a particular model.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_PROGRAM_H
#define SHARC_RUNTIME_PROGRAM_H

#include "runtime/Communicator.h"

#include <cstdint>

namespace sharc::rt {

/// Bumped whenever ProgramInfo or StepContext change layout.
constexpr int kProgramAbiVersion = 12;

/// What a persistent buffer holds.  Persistent buffers live outside the arena
/// for the whole run.
enum class BufferRole {
  /// A trainable (or frozen) parameter: loaded from `weights/FILE`, updated
  /// in place by every step.
  param,
  /// Optimizer or loss-scaler state, or a step counter (`weights/FILE`,
  /// initially the state's `init`, zeros for optimizer state); updated in
  /// place by every step.
  state,
  /// This rank's share of one data input for one step (micro-batch x GAS rows),
  /// filled by the data loader before every step.
  input,
  /// A per-step result (the loss, the learning rate), written by the step.
  output,
  /// A constant tensor of the program: `constantData` is copied in once.
  constant,
};

/// Where a persistent buffer lives.
enum class BufferStorage {
  /// Device memory (the host's on the CPU target): StepContext::buffers
  /// points to it.
  device,
  /// A file of this rank's under the NVMe offload folder (ZeRO-Offload,
  /// offload_optimizer.device nvme; docs/offload.md): StepContext::buffers
  /// holds null for it, and the step reads and writes it whole through
  /// StepContext::swap, into and from arena memory of swapBytes(bytes).
  nvme,
  /// Host memory (pinned on CUDA; ZeRO-Offload to the CPU,
  /// offload_optimizer.device cpu): StepContext::buffers points to it, and
  /// only kernels run on the host (sharc::kern::launchHost) touch it.
  host,
};

/// The alignment of everything NVMe offload reads and writes: each file's
/// size, every request's offset and length, and the memory it moves to and
/// from (O_DIRECT).
constexpr int64_t kSwapAlignment = 4096;

/// The bytes an offloaded buffer of `bytes` occupies in its file and in the
/// arena memory it is read into: `bytes` rounded up to kSwapAlignment.
constexpr int64_t swapBytes(int64_t bytes) {
  return (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment;
}

/// Every persistent buffer starts at a multiple of this in its pool (the
/// arena's alignment, StepContext): a buffer of `bytes` takes
/// bufferPoolBytes(bytes) of it.
constexpr int64_t kBufferAlignment = 256;
constexpr int64_t bufferPoolBytes(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

constexpr int kMaxRank = 8;

struct BufferSpec {
  /// The sharc name: the parameter name, `PARAM.ROLE` for optimizer state,
  /// `step` for the step counter, the input or output name, or `constN`.
  const char *name;
  /// The ONNX initializer a parameter comes from ("" otherwise).
  const char *source;
  /// The .npy file of a parameter or state buffer in a weights or state
  /// folder ("" otherwise): distinct for every buffer of the program
  /// (rt::npyFileNames), so that no name, however chosen, can make two
  /// buffers share a file.
  const char *file;
  BufferRole role;
  DType type;
  int rank;
  int64_t shape[kMaxRank];
  int64_t numElements;
  int64_t bytes;
  /// Host data of a constant buffer (bytes() bytes); null otherwise.
  const void *constantData;
  /// Under ZeRO (sharc-zero: optimizer state from stage 1 on, parameters at
  /// stage 3): true when the buffer holds this rank's slice of a tensor of
  /// `fileShape`, its ceil(n / N) elements from rank() * ceil(n / N) on
  /// (zero past n).
  bool sliced;
  /// The shape of the buffer's file (weights and saved state hold whole
  /// tensors at every stage and world size): `shape` unless `sliced`.
  int fileRank;
  int64_t fileShape[kMaxRank];
  /// Where the buffer lives (device memory unless offloaded).
  BufferStorage storage;
  /// -1, or for state derived from a parameter (a 16-bit copy of an fp32
  /// master slice that the step carries, #sharc.state<"p", "compute_copy">):
  /// that parameter's index.  Such a buffer has no file: its value before
  /// the first step is the parameter's, loaded as the parameter is, rounded
  /// to its type (round to nearest even); it is never saved.
  int derivedFrom;
};

/// NVMe offload settings, fixed at compile time from the DeepSpeed config
/// (zero_optimization.offload_optimizer and the `aio` block).
struct SwapSettings {
  /// offload_optimizer.nvme_path: the folder under which each rank makes a
  /// folder of its own for its files ("" when nothing is offloaded; the
  /// training binary's --nvme-path overrides it).
  const char *path;
  /// aio.block_size: bytes per request (a multiple of kSwapAlignment).
  int64_t blockSize;
  /// aio.queue_depth: requests in flight.
  int64_t queueDepth;
  /// aio.single_submit: submit each request on its own.
  bool singleSubmit;
  /// aio.overlap_events: submit new requests as earlier ones complete.
  bool overlapEvents;
  /// Planned bytes read from and written to the files per step (whole
  /// buffers of swapBytes each), which the runtime counts and checks.
  uint64_t plannedReadBytes;
  uint64_t plannedWriteBytes;
};

/// Everything the compiler knows about the program, fixed at compile time.
struct ProgramInfo {
  int abiVersion;
  /// The ONNX file the program was compiled from.
  const char *model;
  /// "cpu" or "cuda".
  const char *target;
  /// The number of ranks the step was compiled for (gradients are averaged
  /// over exactly this many ranks).
  int worldSize;
  /// Rows of one micro-batch and micro-batches per step per rank.
  int64_t microBatch;
  int64_t gradientAccumulation;
  /// Planned bytes of the arena (the peak over the step, exact).
  int64_t arenaBytes;
  int numBuffers;
  const BufferSpec *buffers;
  /// Indices into `buffers` of the loss and learning-rate outputs and of the
  /// step counter.
  int lossBuffer;
  int lrBuffer;
  int stepBuffer;
  /// Index of the gradients' global L2 norm (f64 scalar output; -1 when
  /// nothing trains).
  int gradNormBuffer;
  /// Indices of the outputs of loss scaling (sharc-loss-scale), -1 when the
  /// program has none: the scale the step used (f64), whether its gradients
  /// overflowed so that it was skipped (i1), and whether they overflowed
  /// with the scale at its minimum (i1; the run must stop).
  int scaleBuffer;
  int overflowBuffer;
  int atMinScaleBuffer;
  /// The ZeRO stage the step was compiled for (0: every rank holds all the
  /// optimizer state).
  int zeroStage;
  /// Planned host staging of the communicator (CPU target: the largest
  /// reduction's every-rank parts, N ceil(count / N) elements; 0 on CUDA,
  /// where NCCL reduces in place), reserved at start-up.
  int64_t stagingBytes;
  /// Planned collective calls and bytes (nccl-tests convention, see
  /// Communicator.h) per step on every rank, by CollectiveKind.
  uint64_t plannedCollectiveCalls[kNumCollectiveKinds];
  uint64_t plannedCollectiveBytes[kNumCollectiveKinds];
  /// Distinct kernels and GEMM calls per step, for the report.
  int numKernels;
  int numGemmCalls;
  /// NVMe offload (buffers of BufferStorage::nvme).
  SwapSettings swap;
  /// ZeRO-Offload to the CPU: planned bytes of the host arena (the values of
  /// the kernels run on the host; StepContext::hostArena), and the bytes the
  /// step copies between device and host memory (sharc::kern::transferStart),
  /// which the runtime counts and checks.
  int64_t hostArenaBytes;
  uint64_t plannedTransferBytes;
  /// What a checkpoint records and a resume compares (runtime/Checkpoint.h):
  /// the sharc release that compiled the program, the model's hash (of what
  /// it computes, not of its weights or input dimensions) and the training
  /// configuration, one "NAME VALUE" line per option that changes what the
  /// steps compute.  Null reads as empty.
  const char *sharcVersion;
  const char *modelHash;
  const char *trainingConfig;
  /// DeepSpeed's csv_monitor: the folder rank 0 writes the per-step CSV
  /// files to (runtime/Metrics.h, CsvMonitor); null or empty: none.
  const char *csvMonitorFolder;
  /// DeepSpeed's tensorboard monitor: the folder rank 0 writes its event
  /// file to (runtime/Monitor.h, TensorBoardMonitor); null or empty: none.
  const char *tensorboardFolder;
};

class SwapStore;

/// What the step function runs on.  On the CUDA target every pointer is device
/// memory and `stream` is the cudaStream_t the step enqueues on.
struct StepContext {
  /// One pointer per ProgramInfo::buffers entry.
  void *const *buffers;
  /// At least ProgramInfo::arenaBytes bytes, aligned to 256 on CUDA and to
  /// kSwapAlignment on the CPU target.
  char *arena;
  Communicator *comm;
  void *stream;
  /// The files of the buffers offloaded to NVMe (runtime/Swap.h); null when
  /// the program has none.
  SwapStore *swap;
  /// At least ProgramInfo::hostArenaBytes bytes of host memory (pinned on
  /// CUDA), aligned to kSwapAlignment; null when the program has none.
  char *hostArena;
};

} // namespace sharc::rt

extern "C" {
/// The program's description (static storage).
const sharc::rt::ProgramInfo *sharcProgramInfo();
/// Runs one training step: reads params, state and inputs, writes the new
/// params and state in place and the outputs.
void sharcProgramStep(const sharc::rt::StepContext *context);
}

#endif // SHARC_RUNTIME_PROGRAM_H
