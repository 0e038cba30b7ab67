//===- Pipeline.cpp - the training pipeline -------------------------------===//
//
// sharc-train-pipeline: forward function in, @train_step out (autodiff,
// optimizer, data parallelism, clean-up).  The CLI's
// --train builds the same pipeline through buildTrainPipeline.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace sharc;

namespace {
/// The options of sharc-autodiff and sharc-optimizer, under the same names.
struct TrainPipelineOptions
    : WithOptimizerOptions<
          WithDataParallelOptions<PassPipelineOptions<TrainPipelineOptions>>> {
  Opt<std::string> loss{
      *this, "loss", llvm::cl::desc("Name (sharc.output) of the loss output")};
  Opt<std::string> freeze{
      *this, "freeze", llvm::cl::desc("Regex of the parameters not trained")};
};
} // namespace

/// Autodiff, the optimizer pass, loss scaling (as `parallel`'s precision
/// asks), ZeRO partitioning (at stage 1), data parallelism, then the
/// clean-up.
static void addTrainPasses(OpPassManager &pm, AutodiffOptions autodiff,
                           std::unique_ptr<Pass> optimizer,
                           const TrainingOptions &parallel) {
  pm.addPass(createAutodiff(std::move(autodiff)));
  pm.addPass(std::move(optimizer));
  if (std::optional<LossScalingOptions> scaling =
          getLossScalingOptions(parallel))
    pm.addPass(createLossScaling(*scaling));
  // Any stage but 0 (sharc-zero checks it).
  if (parallel.zeroStage != 0)
    pm.addPass(createZeroPass(parallel));
  pm.addPass(createDataParallelPass(parallel));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // After CSE, which would merge the recomputed copies back.
  pm.addPass(createRegenerateMasks());
  if (parallel.recompute != "none")
    pm.addPass(createRematerialize({parallel.function, parallel.recompute,
                                    parallel.activationMemory,
                                    parallel.checkpointsOnHost}));
}

void sharc::buildTrainPipeline(OpPassManager &pm,
                               const TrainingOptions &options) {
  if (Precision precision = options.mixedPrecision.precision;
      precision != Precision::fp32) {
    MixedPrecisionOptions mixed;
    mixed.function = options.function;
    mixed.dtype = precision == Precision::bf16 ? "bf16" : "f16";
    pm.addPass(createMixedPrecision(mixed));
  }
  addTrainPasses(pm, {options.function, options.loss, options.freeze},
                 createOptimizerPass(options), options);
}

void sharc::buildCompilePipeline(OpPassManager &pm, bool fuse, bool overlap,
                                 const ParameterGatherOptions &gathers,
                                 const OptimizerOffloadOptions &offload) {
  pm.addPass(createPrepareEmission());
  GatherParametersOptions placement;
  placement.maxReuseDistance = gathers.maxReuseDistance;
  pm.addPass(createGatherParameters(placement));
  if (fuse) {
    pm.addPass(createIndexMasks());
    pm.addPass(createFusePass(/*singletons=*/true));
  }
  ScheduleCollectivesOptions schedule;
  schedule.overlap = overlap;
  schedule.prefetchBucketSize = gathers.prefetchBucketSize;
  schedule.maxLiveParameters = gathers.maxLiveParameters;
  pm.addPass(createScheduleCollectives(schedule));
  if (offload.device != OffloadDevice::none ||
      offload.paramDevice != OffloadDevice::none) {
    OffloadOptimizerOptions placement;
    placement.device = offload.device == OffloadDevice::cpu    ? "cpu"
                       : offload.device == OffloadDevice::nvme ? "nvme"
                                                               : "none";
    placement.subGroupSize = offload.subGroupSize;
    placement.hostUpdate = offload.hostUpdate;
    placement.paramDevice = offload.paramDevice == OffloadDevice::cpu ? "cpu"
                            : offload.paramDevice == OffloadDevice::nvme
                                ? "nvme"
                                : "none";
    placement.pipelineRead = offload.pipelineRead;
    placement.pipelineWrite = offload.pipelineWrite;
    pm.addPass(createOffloadOptimizer(placement));
  }
  pm.addPass(createUpdateInPlace());
  pm.addPass(createPlanMemory());
}

namespace {
struct CompilePipelineOptions : PassPipelineOptions<CompilePipelineOptions> {
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Fuse elementwise chains (sharc-fuse)"),
                    llvm::cl::init(true)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Overlap collectives with computation "
                                      "(sharc-schedule-collectives)"),
                       llvm::cl::init(true)};
  Option<int64_t> maxReuseDistance{
      *this, "max-reuse-distance",
      llvm::cl::desc("ZeRO stage 3: gather a parameter again when its next "
                     "reader is farther than this many elements of other "
                     "parameters (sharc-gather-parameters)"),
      llvm::cl::init(1000000000)};
  Option<int64_t> prefetchBucketSize{
      *this, "prefetch-bucket-size",
      llvm::cl::desc("ZeRO stage 3: elements of parameters prefetched after "
                     "each gather's wait (sharc-schedule-collectives)"),
      llvm::cl::init(50000000)};
  Option<int64_t> maxLiveParameters{
      *this, "max-live-parameters",
      llvm::cl::desc(
          "ZeRO stage 3: prefetch only while fewer elements of "
          "gathered parameters are live (sharc-schedule-collectives)"),
      llvm::cl::init(1000000000)};
  Option<OffloadDevice> offloadOptimizer{
      *this, "offload-optimizer",
      llvm::cl::desc("Offload the optimizer state (sharc-offload-optimizer)"),
      llvm::cl::init(OffloadDevice::none),
      llvm::cl::values(
          clEnumValN(OffloadDevice::none, "none", "on the device"),
          clEnumValN(OffloadDevice::cpu, "cpu",
                     "host memory, the update on the host"),
          clEnumValN(OffloadDevice::nvme, "nvme", "files, in sub-groups"))};
  Option<OffloadDevice> offloadParam{
      *this, "offload-param",
      llvm::cl::desc("ZeRO stage 3: where the slices the parameter gathers "
                     "read live (sharc-offload-optimizer)"),
      llvm::cl::init(OffloadDevice::none),
      llvm::cl::values(clEnumValN(OffloadDevice::none, "none", "on the device"),
                       clEnumValN(OffloadDevice::cpu, "cpu", "host memory"),
                       clEnumValN(OffloadDevice::nvme, "nvme", "files"))};
  Option<bool> hostUpdate{
      *this, "host-update",
      llvm::cl::desc("NVMe offload: read into host memory (and run the "
                     "update on the host; sharc-offload-optimizer)"),
      llvm::cl::init(false)};
  Option<int64_t> subGroupSize{
      *this, "sub-group-size",
      llvm::cl::desc("NVMe offload: elements per sub-group "
                     "(sharc-offload-optimizer)"),
      llvm::cl::init(1000000000)};
  Option<bool> pipelineRead{
      *this, "pipeline-read",
      llvm::cl::desc("NVMe offload: read the next sub-group during the "
                     "update (sharc-offload-optimizer)"),
      llvm::cl::init(true)};
  Option<bool> pipelineWrite{
      *this, "pipeline-write",
      llvm::cl::desc("NVMe offload: write each sub-group back during the "
                     "next update (sharc-offload-optimizer)"),
      llvm::cl::init(true)};
};
} // namespace

void sharc::registerSharcPipelines() {
  PassPipelineRegistration<CompilePipelineOptions>(
      "sharc-compile-pipeline",
      "@train_step to the IR the code generator emits: "
      "sharc-prepare-emission, sharc-gather-parameters, sharc-fuse, "
      "sharc-schedule-collectives, sharc-offload-optimizer (with "
      "offload-optimizer), sharc-update-in-place, sharc-plan-memory",
      [](OpPassManager &pm, const CompilePipelineOptions &options) {
        buildCompilePipeline(pm, options.fuse, options.overlap,
                             {options.maxReuseDistance,
                              options.prefetchBucketSize,
                              options.maxLiveParameters},
                             {.device = options.offloadOptimizer,
                              .hostUpdate = options.hostUpdate,
                              .paramDevice = options.offloadParam,
                              .subGroupSize = options.subGroupSize,
                              .pipelineRead = options.pipelineRead,
                              .pipelineWrite = options.pipelineWrite});
      });
  PassPipelineRegistration<TrainPipelineOptions>(
      "sharc-train-pipeline",
      "Forward function to @train_step: sharc-autodiff, sharc-optimizer, "
      "sharc-data-parallel, canonicalize, cse",
      [](OpPassManager &pm, const TrainPipelineOptions &options) {
        TrainingOptions parallel;
        options.applyDataParallelOptions(parallel);
        addTrainPasses(pm, {options.function, options.loss, options.freeze},
                       createOptimizerPass(options.getOptimizerOptions()),
                       parallel);
      });
}
