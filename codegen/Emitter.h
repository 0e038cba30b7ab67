//===- Emitter.h - Training step to C++/CUDA source -------------*- C++ -*-===//
//
// Turns `@train_step` into one translation unit implementing the program ABI
// of runtime/Program.h: a kernel functor per elementwise group, row reduction
// or data movement (runtime/Kernels.h launches it as a CUDA grid or a host
// loop), GEMM calls for matmuls, collective calls for all-reduces, and tables
// describing every persistent buffer.  docs/codegen.md describes the output.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_CODEGEN_EMITTER_H
#define SHARC_CODEGEN_EMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace sharc {

/// Compile-time facts the ProgramInfo table records.
struct EmitOptions {
  /// "cpu" or "cuda".
  std::string target = "cpu";
  /// The model the program comes from (recorded, never interpreted).
  std::string model;
  int worldSize = 1;
  int64_t microBatch = 1;
  int64_t gradientAccumulation = 1;
  /// The ZeRO stage (`sharc.zero_stage`, set by sharc-zero; 0 without it).
  int zeroStage = 0;
  /// NVMe offload (the caller's, from the DeepSpeed config): the folder
  /// under which each rank keeps its files (offload_optimizer.nvme_path,
  /// the default of the binary's --nvme-path) and the `aio` settings.
  std::string nvmePath;
  int64_t aioBlockSize = 1048576;
  int64_t aioQueueDepth = 8;
  bool aioSingleSubmit = false;
  bool aioOverlapEvents = true;
  /// Recorded for checkpoints (ProgramInfo): the sharc version, the model's
  /// hash and the training configuration ("NAME VALUE" lines).
  std::string sharcVersion;
  std::string modelHash;
  std::string trainingConfig;
  /// The csv_monitor folder (ProgramInfo::csvMonitorFolder), empty: none.
  std::string csvMonitorFolder;
  /// The tensorboard folder (ProgramInfo::tensorboardFolder), empty: none.
  std::string tensorboardFolder;
};

/// One persistent buffer of the emitted program.
struct ReportBuffer {
  std::string name;
  /// The .npy file of a parameter or state buffer in the weights and state
  /// folders, unique in the program; "" for other buffers.
  std::string file;
  /// "param", "state", "input", "output" or "constant".
  std::string role;
  /// "f32", "i64", ...
  std::string type;
  std::vector<int64_t> shape;
  /// The shape of its file in the weights and state folders: `shape`, or
  /// for optimizer state that holds this rank's ZeRO slice, the whole
  /// parameter's (the files are the same at every stage and world size).
  std::vector<int64_t> fileShape;
  int64_t bytes = 0;
  /// True for a parameter the step updates (it has a gradient).
  bool trainable = false;
  /// True for state that lives on NVMe between steps (sharc-offload-
  /// optimizer), not in device memory.
  bool offloaded = false;
  /// True for state that lives in (pinned) host memory (ZeRO-Offload to the
  /// CPU: `#sharc.storage<host>`).
  bool inHost = false;
  /// For a carried 16-bit compute copy: the parameter whose master it is
  /// derived from at start (it has no file: never loaded nor saved).
  std::string derivedFrom;
  /// State only: the value of every element before the first step
  /// (`#sharc.state<..., init = V>`).
  double initialValue = 0;
};

/// What the emitted program needs per rank, for `sharc compile --report` and
/// the manifest.
/// One started collective of the step and the compute between its start and
/// its wait (what it overlaps).
struct ScheduledCollective {
  /// Runtime CollectiveKind: all-reduce, reduce-scatter, all-gather.
  int kind = 0;
  /// Bytes this rank sends (nccl-tests convention, as collectiveBytes).
  uint64_t bytes = 0;
  /// Kernel launches and GEMM calls emitted between the start and the wait.
  int64_t computeCallsBetween = 0;
  /// In the micro-batch loop's body (it runs once per micro-batch).
  bool inMicroBatchLoop = false;
};

struct ProgramReport {
  int numKernels = 0;
  int numKernelLaunches = 0;
  int numGemmCalls = 0;
  /// GEMM calls per step whose epilogue adds a bias or applies an activation.
  int numGemmEpilogues = 0;
  int64_t arenaBytes = 0;
  int64_t paramBytes = 0;
  int64_t gradientBytes = 0;
  int64_t stateBytes = 0;
  /// Bytes of the 16-bit compute copies of the parameters (sharc-mixed-
  /// precision casts each fp32 master weight once per step; they live in
  /// the arena): one 16-bit result of the shape of each parameter read
  /// directly by an op.
  int64_t computeCopyBytes = 0;
  /// ZeRO stage 3: the most bytes of whole parameters gathered from their
  /// slices (sharc-gather-parameters) that are live at once in the arena.
  int64_t gatheredParameterPeakBytes = 0;
  /// By runtime CollectiveKind: all-reduce, reduce-scatter, all-gather,
  /// broadcast.
  std::array<uint64_t, 4> collectiveCalls{};
  std::array<uint64_t, 4> collectiveBytes{};
  /// NVMe offload: bytes this rank reads from and writes to its files per
  /// step (whole blocks of rt::kSwapAlignment), and the bytes of its files.
  uint64_t swapReadBytes = 0;
  uint64_t swapWriteBytes = 0;
  int64_t nvmeBytes = 0;
  /// ZeRO-Offload to the CPU: the bytes of the buffers kept in host memory
  /// and of the host arena (the values of the ops run on the host), and the
  /// bytes copied between device and host memory per step (PCIe on CUDA).
  int64_t hostBytes = 0;
  /// Mixed precision with offloaded masters: the 16-bit copies of the master
  /// slices carried from step to step in device memory (derived state).
  int64_t carriedCopyBytes = 0;
  int64_t hostArenaBytes = 0;
  uint64_t transferBytes = 0;
  /// The host communicator's staging (CPU target): the largest reduction's
  /// every-rank parts, N ceil(count / N) elements (runtime/Communicator.cpp,
  /// reduceSlicesAs); 0 on CUDA (NCCL reduces in place) and on one rank.
  int64_t stagingBytes = 0;
  std::vector<ReportBuffer> buffers;
  /// Every started collective, in program order, with what it overlaps.
  std::vector<ScheduledCollective> schedule;
};

/// The facts of `step` that EmitOptions records, read from the IR: the world
/// size (`sharc.world_size`, set by sharc-data-parallel; 1 without it), the
/// ZeRO stage (`sharc.zero_stage`; 0 without it), the
/// micro-batches per step (the count of its micro-batch loop; 1 without
/// one) and the rows of a micro-batch (dimension 0 of its first data input,
/// divided by the micro-batches).  `target` and `model` are the caller's.
mlir::FailureOr<EmitOptions> programOptionsOf(mlir::func::FuncOp step);

/// Emits `step` (prepared, fused and memory-planned: every op result carries
/// `sharc.offsets` and the function `sharc.arena_bytes`) as C++ to `os`.
mlir::LogicalResult emitProgram(mlir::func::FuncOp step,
                                const EmitOptions &options,
                                llvm::raw_ostream &os, ProgramReport &report);

/// Emits every function of `module` (each memory-planned, see
/// sharc-plan-memory) as one C++ translation unit for the CPU: function k is
/// namespace `sharc_lib_k` holding its kernels and
/// `extern "C" void sharc_fn_NAME(const sharc::rt::StepContext *ctx)`, whose
/// `ctx->buffers` are the function's arguments followed by its results and
/// `ctx->arena` at least `sharc_fn_NAME_arena_bytes()` bytes.  NAME is the
/// function's name with every character outside [A-Za-z0-9_] replaced by
/// '_' (and `_k` appended if that collides).  Used by the kernel tests.
mlir::LogicalResult emitFunctionLibrary(mlir::ModuleOp module,
                                        llvm::raw_ostream &os);

/// `text` as a C++ string literal (quotes included) that any compiler reads
/// back as exactly `text`: quotes, backslashes, question marks and every
/// byte outside printable ASCII are escaped.
std::string cppStringLiteral(llvm::StringRef text);

} // namespace sharc

#endif // SHARC_CODEGEN_EMITTER_H
