//===- Passes.h - sharc passes ------------------------------------*- C++
//-*-===//

#ifndef SHARC_PASSES_PASSES_H
#define SHARC_PASSES_PASSES_H

#include "ir/SharcOps.h"
#include "ir/TrainingOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <optional>

namespace sharc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

//===----------------------------------------------------------------------===//
// Training options
//===----------------------------------------------------------------------===//

/// The optimizer named `name` ("sgd", "adam", "adamw"), if any.
std::optional<OptimizerKind> parseOptimizerKind(llvm::StringRef name);
/// The pass-option spelling of `kind`.
llvm::StringRef stringifyOptimizerKind(OptimizerKind kind);
/// The schedule named `name` ("none", "warmup-lr", "warmup-decay-lr",
/// "warmup-cosine-lr", "one-cycle", "lr-range-test"), if any.
std::optional<SchedulerKind> parseSchedulerKind(llvm::StringRef name);
/// The pass-option spelling of `kind`.
llvm::StringRef stringifySchedulerKind(SchedulerKind kind);

/// Checks the optimizer, gradient and schedule settings of `options` (value
/// ranges, combinations); reports the first problem through `emitError`.
mlir::LogicalResult
verifyTrainingOptions(const TrainingOptions &options,
                      llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

//===----------------------------------------------------------------------===//
// Training step
//===----------------------------------------------------------------------===//

/// Adds `@train_step` to `module` (docs/training.md): one call of
/// `@<options.function>_grad` per micro-batch, gradient accumulation,
/// clipping, the learning-rate schedule and the optimizer update, as
/// docs/optimizers.md describes.  Invalid options or an unexpected gradient
/// function are reported as errors.
mlir::FailureOr<mlir::func::FuncOp>
buildTrainStep(mlir::ModuleOp module, const TrainingOptions &options);

/// The options of sharc-optimizer as written: the fields of TrainingOptions
/// that TrainingOptions.def lists (but the data-parallel ones), with the
/// optimizer, the schedule and the warmup type as the strings that the pass
/// checks when it runs.
struct OptimizerOptions {
  std::string function;
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY) TYPE FIELD;
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"

  /// `options` as pass options (by default, TrainingOptions's defaults).
  explicit OptimizerOptions(const TrainingOptions &options = TrainingOptions());

  /// The default options.
  static const OptimizerOptions &defaults();

  /// These options as training options; an unknown optimizer, schedule or
  /// warmup type is reported through `emitError`.
  mlir::FailureOr<TrainingOptions>
  parse(llvm::function_ref<mlir::InFlightDiagnostic()> emitError) const;
};

/// `Base` (a pass or the options of a pass pipeline) with the options of
/// sharc-optimizer, declared from TrainingOptions.def.
template <typename Base> struct WithOptimizerOptions : Base {
  template <typename T> using Opt = typename Base::template Option<T>;

  WithOptimizerOptions() = default;
  /// Options are registered anew; a pass clone copies their values.
  WithOptimizerOptions(const WithOptimizerOptions &other) : Base(other) {}

  Opt<std::string> function{
      *this, "function",
      llvm::cl::desc("Forward function whose gradient function "
                     "(@<function>_grad) the step calls"),
      llvm::cl::init(OptimizerOptions::defaults().function)};
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  Opt<TYPE> FIELD{*this, NAME, llvm::cl::desc(DESC),                           \
                  llvm::cl::init(OptimizerOptions::defaults().FIELD)};
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"

  OptimizerOptions getOptimizerOptions() const {
    OptimizerOptions options;
    options.function = function;
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  options.FIELD = FIELD;
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"
    return options;
  }

  void setOptimizerOptions(const OptimizerOptions &options) {
    function = options.function;
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  FIELD = options.FIELD;
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"
  }
};

/// `Base` (a pass or the options of a pass pipeline) with the options of
/// sharc-data-parallel, declared from TrainingOptions.def.
template <typename Base> struct WithDataParallelOptions : Base {
  template <typename T> using Opt = typename Base::template Option<T>;

  WithDataParallelOptions() = default;
  WithDataParallelOptions(const WithDataParallelOptions &other) : Base(other) {}

#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  Opt<TYPE> FIELD{*this, NAME, llvm::cl::desc(DESC),                           \
                  llvm::cl::init(TrainingOptions().FIELD)};
#include "ir/TrainingOptions.def"

  /// `options` with these data-parallel settings.
  void applyDataParallelOptions(TrainingOptions &options) const {
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  options.FIELD = FIELD;
#include "ir/TrainingOptions.def"
  }

  void setDataParallelOptions(const TrainingOptions &options) {
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  FIELD = options.FIELD;
#include "ir/TrainingOptions.def"
  }
};

/// ZeRO stages 1 and 2 on `@train_step` for `options.worldSize` ranks
/// (docs/zero.md): the `sharc.gradients` hand-off becomes bucketed
/// reduce-scatters, the update runs on this rank's slice of each parameter
/// with the optimizer state of that slice only, and the new slices are
/// all-gathered (stage 2: buckets in backward's order, which
/// scheduleGradientScatters moves into backward; stage 3: the parameters
/// above the persistence threshold are this rank's slices, gathered where
/// the step starts, see gatherParameters).  Nothing changes at stage 0; at
/// one rank only the step's `sharc.zero_stage` attribute is set.
mlir::LogicalResult applyZero(mlir::ModuleOp module,
                              const TrainingOptions &options);
std::unique_ptr<mlir::Pass> createZeroPass(const TrainingOptions &options);

/// Stage 0 on `ranks` > 1 ranks, after the gradients are all-reduced: every
/// full sum of them in `update` (the ops after the hand-off; the clipping
/// norm's sum of squares, the fp16 overflow test) is rebuilt as ZeRO sums
/// it -- over each rank's slice of each gradient, then over the ranks in
/// rank order -- so that every stage rounds it alike.  `b` inserts before
/// the update.
void sumAsPartitioned(mlir::ImplicitLocOpBuilder &b,
                      llvm::ArrayRef<mlir::Value> grads,
                      llvm::ArrayRef<mlir::Operation *> update, int64_t ranks);

/// Makes `@train_step` data-parallel over `options.worldSize` ranks
/// (docs/training.md): the loss seed becomes 1/(GAS N), the
/// `sharc.gradients` op becomes all-reduces in buckets of at most
/// `options.reduceBucketSize` elements, and the loss is averaged over the
/// ranks.  With one rank the `sharc.gradients` op is just removed.
mlir::LogicalResult applyDataParallel(mlir::ModuleOp module,
                                      const TrainingOptions &options);

/// The sharc-data-parallel pass with the world size and bucket size of
/// `options`.
std::unique_ptr<mlir::Pass>
createDataParallelPass(const TrainingOptions &options);

/// Loss scaling and skipped steps in `@train_step` (sharc-loss-scale, see
/// Passes.td): run after sharc-optimizer, before sharc-data-parallel.
mlir::LogicalResult applyLossScaling(mlir::ModuleOp module,
                                     const LossScalingOptions &options);

/// The sharc-loss-scale options that `options.mixedPrecision` asks for:
/// dynamic or static scaling for fp16, the overflow check alone for bf16
/// with check_grad_overflow; none for fp32 and unchecked bf16.
std::optional<LossScalingOptions>
getLossScalingOptions(const TrainingOptions &options);

/// The sharc-optimizer pass with `options`.
std::unique_ptr<mlir::Pass>
createOptimizerPass(const OptimizerOptions &options);

/// The sharc-optimizer pass with the optimizer and schedule settings of
/// `options`.
std::unique_ptr<mlir::Pass> createOptimizerPass(const TrainingOptions &options);

/// sharc-mixed-precision (for a precision other than fp32), sharc-autodiff,
/// sharc-optimizer and sharc-data-parallel with `options`, then
/// canonicalize and CSE: forward function in, `@train_step` out.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainingOptions &options);

/// Registers `sharc-train-pipeline` (the options of its passes) and
/// `sharc-compile-pipeline` (option `fuse`).
void registerSharcPipelines();

/// ZeRO stage 3's knobs of its parameter gathers, in elements (DeepSpeed's
/// `stage3_max_reuse_distance`, `stage3_prefetch_bucket_size` and
/// `stage3_max_live_parameters`, with DeepSpeed's defaults).
struct ParameterGatherOptions {
  int64_t maxReuseDistance = 1000000000;
  int64_t prefetchBucketSize = 50000000;
  int64_t maxLiveParameters = 1000000000;
};

/// What sharc-rematerialize did to a gradient function.
struct RecomputeSummary {
  /// The repeated layers found (policy layers; 0 or 1: none, nothing
  /// recomputed).
  unsigned layers = 0;
  /// The segments between forward's cuts, and those recomputed.
  unsigned segments = 0;
  unsigned recomputedSegments = 0;
  /// Forward ops cloned into backward, and their FLOPs (flopsOf).
  unsigned recomputedOps = 0;
  int64_t recomputedFlops = 0;
  /// Bytes of the forward values backward now reads from the copies.
  int64_t recomputedBytes = 0;
  /// The function's activation memory (peakLiveBytes) before and after.
  int64_t peakBefore = 0;
  int64_t peakAfter = 0;
  /// Policy auto: the limit it was given.
  int64_t limit = 0;
  /// With `host`: the bytes of the checkpoints kept in host memory.
  int64_t hostBytes = 0;
};

/// Activation checkpointing at layer boundaries (sharc-rematerialize): in
/// `func`, a gradient function (`@F_grad`, one block, the loss first), the
/// values backward reads inside each repeated layer of forward are computed
/// again from the layer's input before the layer's backward.
/// With `host`, each recomputed layer's input (its checkpoint) is kept in
/// host memory between forward and backward (cpu_checkpointing).
mlir::FailureOr<RecomputeSummary> rematerializeLayers(mlir::func::FuncOp func,
                                                      bool host = false);

/// Activation checkpointing within a memory limit (policy auto): the
/// segments of forward whose recomputation costs the fewest FLOPs and
/// brings `func`'s activation memory (peakLiveBytes) to at most `limit`
/// bytes; an error naming the shortfall when recomputing them all does not.
mlir::FailureOr<RecomputeSummary>
rematerializeWithin(mlir::func::FuncOp func, int64_t limit, bool host = false);

/// The activation memory of gradient function `func` without recomputation
/// and with every segment recomputed (the least `rematerializeWithin`
/// reaches); `func` is left as it is.
mlir::FailureOr<std::pair<int64_t, int64_t>>
activationMemoryRange(mlir::func::FuncOp func);

/// ZeRO-Offload of the optimizer state (sharc-offload-optimizer): off with
/// device `none`; `cpu` keeps it in host memory and runs its update on the
/// host (the CUDA target's layout), `nvme` keeps it in files streamed
/// through the update in sub-groups; the rest are the pass's options.
struct OptimizerOffloadOptions {
  OffloadDevice device = OffloadDevice::none;
  /// NVMe: read the files into host memory (and run the update on the
  /// host; the CUDA target's layout; `cpu` always does).
  bool hostUpdate = false;
  /// ZeRO stage 3's parameter offload (offload_param): `cpu` keeps the
  /// slices the gathers read in host memory, copied to the device where each
  /// gather reads them; `nvme` keeps them in files, swapped in for each
  /// gather.
  OffloadDevice paramDevice = OffloadDevice::none;
  int64_t subGroupSize = 1000000000;
  bool pipelineRead = true;
  bool pipelineWrite = true;
};

/// `@train_step` to the IR the code generator emits (docs/codegen.md):
/// sharc-prepare-emission, sharc-gather-parameters, sharc-fuse (unless
/// `fuse` is false), sharc-schedule-collectives (overlapping communication
/// unless `overlap` is false), sharc-offload-optimizer (with `offload.nvme`),
/// sharc-update-in-place, sharc-plan-memory.  `sharc compile` runs it after
/// the train pipeline, and sharc-opt runs it as sharc-compile-pipeline.
void buildCompilePipeline(mlir::OpPassManager &pm, bool fuse = true,
                          bool overlap = true,
                          const ParameterGatherOptions &gathers = {},
                          const OptimizerOffloadOptions &offload = {});

//===----------------------------------------------------------------------===//
// ZeRO-Offload to NVMe (OffloadOptimizer.cpp)
//===----------------------------------------------------------------------===//

/// sharc-offload-optimizer on `func` (`@train_step`; other functions are
/// left alone): each parameter's optimizer state argument moves to NVMe
/// (`#sharc.storage<nvme>`), read before its update and written after it
/// through swap start/wait pairs, in sub-groups (docs/offload.md).  Fails,
/// after reporting an error, on state it cannot stream (read inside the
/// micro-batch loop, or without a result).
mlir::LogicalResult
offloadOptimizerState(mlir::func::FuncOp func,
                      const OptimizerOffloadOptions &options);

//===----------------------------------------------------------------------===//
// ZeRO stage 3's parameter gathers (GatherParameters.cpp)
//===----------------------------------------------------------------------===//

/// sharc-gather-parameters on `func` (a function at ZeRO stage 3; others
/// are left alone): each partitioned parameter's all-gather moves to its
/// first reader, in its readers' precision, and is repeated before each
/// reader farther than `maxReuseDistance` elements of other gathered
/// parameters from the previous one (docs/zero.md).
mlir::LogicalResult gatherParameters(mlir::func::FuncOp func,
                                     int64_t maxReuseDistance);

//===----------------------------------------------------------------------===//
// Scheduling collectives (ScheduleCollectives.cpp)
//===----------------------------------------------------------------------===//

/// sharc-schedule-collectives on `func`: every `sharc.all_reduce` becomes a
/// `sharc.all_reduce_start` and its `sharc.wait`; with `overlap`, starts
/// (with the reshapes and concats that pack them) move up to just after
/// their operands' producers and waits down to just before the first op
/// that reads their result (docs/passes.md).
void scheduleCollectives(mlir::func::FuncOp func, bool overlap = true);

/// The rest of sharc-schedule-collectives: in a function at ZeRO stage 2
/// (`sharc.zero_stage`), each `sharc.reduce_scatter` becomes a
/// `sharc.reduce_scatter_start` (which, with its packing, moves up to just
/// after the ops that produce its bucket, so that the bucket's full
/// gradients die in backward) and a `sharc.wait` (with `overlap`, just
/// before the first reader of the slices; else right after the start).
void scheduleGradientScatters(mlir::func::FuncOp func, bool overlap = true);

/// The ZeRO parameter gathers (marked `sharc.parameter_gather` by
/// sharc-gather-parameters), with `overlap`: each becomes a
/// `sharc.all_gather_start` and a `sharc.wait` where it stands, and after
/// each wait the gathers that follow in its block are prefetched (their
/// starts move, with their packing, to just after it) as DeepSpeed's stage 3
/// prefetches: while they add fewer elements than the smaller of
/// `prefetchBucketSize` (0: no prefetch) and `maxLiveParameters` less the
/// elements gathered and not yet released there.  Below stage 3 every gather
/// is prefetched.  Without `overlap` they stay blocking.
void scheduleParameterGathers(mlir::func::FuncOp func, bool overlap = true,
                              int64_t prefetchBucketSize = 50000000,
                              int64_t maxLiveParameters = 1000000000);

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

/// The ops of `block` where the value of `op` (an op of `block`) is read: its
/// users', or, for an op marked `sharc.fuse_into` (computed inside the
/// kernels of its users), where those users are read, recursively.
llvm::SmallVector<mlir::Operation *> readSites(mlir::Operation *op,
                                               mlir::Block &block);

/// True when an op of `block` after `op` (or, with `atOp`, `op` itself)
/// reads `value`; an op computed inside its users' kernels (`sharc.fuse_into`)
/// reads where they run.
bool readFrom(mlir::Operation *op, mlir::Value value, mlir::Block &block,
              bool atOp);

/// True when `producer`, an op of `block` run as a kernel of its own (a
/// `sharc.fusion` not computed inside another kernel nor by a GEMM), may
/// write a result of `old`'s type over `old`'s memory: it reads `old` as an
/// operand of that type (element for element), and no op of `block` after it
/// reads `old` (an op computed inside its users' kernels reads there).
bool canOverwrite(mlir::Operation *producer, mlir::Value old,
                  mlir::Block &block);

/// Groups the elementwise ops of `func` (a single block) into `sharc.fusion`
/// ops as sharc-fuse does (docs/passes.md); with `singletons`, an elementwise
/// op that joins no group becomes a fusion of its own; with `rowPrologues`,
/// a short fusion read only by a row reduction gets `sharc.fuse_into` (the
/// code generator computes it inside that kernel); with `gemmFusion`, a
/// matmul whose result only gets a bias added and/or a ReLU or tanh-GELU
/// applied becomes that fusion's GEMM (`sharc.fuse_into` on the matmul,
/// a `#sharc.gemm_epilogue` on the fusion), and
/// transposes that split or merge attention heads become strided GEMM views
/// (`sharc.fuse_into` / `sharc.gemm_output`).  Fails,
/// after reporting an error, on a function of more than one block.
mlir::LogicalResult fuseElementwiseOps(mlir::func::FuncOp func,
                                       bool singletons = true,
                                       bool rowPrologues = true,
                                       bool gemmFusion = true);

/// The sharc-fuse pass.
std::unique_ptr<mlir::Pass> createFusePass(bool singletons = true,
                                           bool rowPrologues = true,
                                           bool gemmFusion = true);

//===----------------------------------------------------------------------===//
// Preparing @train_step for code generation (PrepareEmission.cpp)
//===----------------------------------------------------------------------===//

/// sharc-prepare-emission: inlines every call into `@train_step`, erases the
/// other functions, and turns splat constants that feed non-elementwise ops
/// into broadcasts of a one-element constant.
mlir::LogicalResult prepareForEmission(mlir::ModuleOp module);

/// sharc-update-in-place: lets each sharc.fusion that computes the new value
/// of a parameter or state tensor of `@train_step` write it into that
/// argument's memory (`sharc.result_buffers = array<i64: ...>`: per result the
/// argument number, or -1), which sharc-plan-memory and the code generator
/// honour.  Only when the result is only returned, the fusion reads the old
/// value element for element and nothing after it reads the old value; and
/// each all-gather or slice that gives a ZeRO parameter's new value
/// (through reshapes), once nothing at or after it reads the old value.
void updateInPlace(mlir::ModuleOp module);

} // namespace sharc

#endif // SHARC_PASSES_PASSES_H
