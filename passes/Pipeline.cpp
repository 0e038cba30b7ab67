//===- Pipeline.cpp - the training pipeline -------------------------------===//
//
// sharc-train-pipeline: forward function in, @train_step out.  The CLI's
// --train builds the same pipeline through buildTrainPipeline.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace sharc;

namespace {
using Desc = llvm::cl::desc;
using llvm::cl::init;

/// The options of sharc-autodiff and sharc-optimizer, under the same names.
struct TrainPipelineOptions : PassPipelineOptions<TrainPipelineOptions> {
  template <typename T> using Opt = PassOptions::Option<T>;

  Opt<std::string> function{*this, "function", Desc("Forward function"),
                            init("main")};
  Opt<std::string> loss{*this, "loss",
                        Desc("Name (sharc.output) of the loss output")};
  Opt<std::string> freeze{*this, "freeze",
                          Desc("Regex of the parameters not trained")};
  Opt<std::string> optimizer{*this, "optimizer", Desc("sgd, adam or adamw"),
                             init("adamw")};
  Opt<double> lr{*this, "lr", Desc("Learning rate"), init(1e-3)};
  Opt<double> beta1{*this, "beta1", Desc("Adam: beta1"), init(0.9)};
  Opt<double> beta2{*this, "beta2", Desc("Adam: beta2"), init(0.999)};
  Opt<double> eps{*this, "eps", Desc("Adam: epsilon"), init(1e-8)};
  Opt<double> weightDecay{*this, "weight-decay", Desc("Weight decay"),
                          init(0.0)};
  Opt<double> momentum{*this, "momentum", Desc("SGD: momentum"), init(0.0)};
  Opt<bool> nesterov{*this, "nesterov", Desc("SGD: Nesterov momentum"),
                     init(false)};
  Opt<bool> biasCorrection{*this, "bias-correction",
                           Desc("Adam: bias correction"), init(true)};
  Opt<bool> adamWMode{*this, "adam-w-mode",
                      Desc("Adam: decoupled weight decay"), init(true)};
  Opt<int64_t> gradAccum{*this, "grad-accum", Desc("Micro-batches per step"),
                         init(1)};
  Opt<double> clip{*this, "clip", Desc("Gradient clipping norm (0: none)"),
                   init(0.0)};
  Opt<std::string> scheduler{
      *this, "scheduler",
      Desc("none, warmup-lr, warmup-decay-lr, warmup-cosine-lr, one-cycle or "
           "lr-range-test"),
      init("none")};
  Opt<double> warmupMinLr{*this, "warmup-min-lr", Desc("warmup_min_lr"),
                          init(0.0)};
  Opt<double> warmupMaxLr{*this, "warmup-max-lr", Desc("warmup_max_lr"),
                          init(1e-3)};
  Opt<int64_t> warmupNumSteps{*this, "warmup-num-steps",
                              Desc("warmup_num_steps"), init(1000)};
  Opt<std::string> warmupType{*this, "warmup-type",
                              Desc("warmup_type: log or linear"), init("log")};
  Opt<int64_t> totalNumSteps{*this, "total-num-steps", Desc("total_num_steps"),
                             init(0)};
  Opt<double> warmupMinRatio{*this, "warmup-min-ratio",
                             Desc("warmup_min_ratio"), init(0.0)};
  Opt<double> cosMinRatio{*this, "cos-min-ratio", Desc("cos_min_ratio"),
                          init(1e-4)};
  Opt<double> cycleMinLr{*this, "cycle-min-lr", Desc("cycle_min_lr"),
                         init(0.0)};
  Opt<double> cycleMaxLr{*this, "cycle-max-lr", Desc("cycle_max_lr"),
                         init(0.0)};
  Opt<double> decayLrRate{*this, "decay-lr-rate", Desc("decay_lr_rate"),
                          init(0.0)};
  Opt<int64_t> cycleFirstStepSize{*this, "cycle-first-step-size",
                                  Desc("cycle_first_step_size"), init(2000)};
  Opt<int64_t> cycleSecondStepSize{*this, "cycle-second-step-size",
                                   Desc("cycle_second_step_size (-1: first)"),
                                   init(-1)};
  Opt<int64_t> cycleFirstStairCount{*this, "cycle-first-stair-count",
                                    Desc("cycle_first_stair_count (no effect)"),
                                    init(0)};
  Opt<int64_t> cycleSecondStairCount{
      *this, "cycle-second-stair-count",
      Desc("cycle_second_stair_count (no effect)"), init(-1)};
  Opt<int64_t> decayStepSize{*this, "decay-step-size", Desc("decay_step_size"),
                             init(0)};
  Opt<bool> cycleMomentum{*this, "cycle-momentum", Desc("cycle_momentum"),
                          init(true)};
  Opt<double> cycleMinMom{*this, "cycle-min-mom", Desc("cycle_min_mom"),
                          init(0.8)};
  Opt<double> cycleMaxMom{*this, "cycle-max-mom", Desc("cycle_max_mom"),
                          init(0.9)};
  Opt<double> decayMomRate{*this, "decay-mom-rate", Desc("decay_mom_rate"),
                           init(0.0)};
  Opt<double> lrRangeTestMinLr{*this, "lr-range-test-min-lr",
                               Desc("lr_range_test_min_lr"), init(1e-3)};
  Opt<double> lrRangeTestStepRate{*this, "lr-range-test-step-rate",
                                  Desc("lr_range_test_step_rate"), init(1.0)};
  Opt<int64_t> lrRangeTestStepSize{*this, "lr-range-test-step-size",
                                   Desc("lr_range_test_step_size"), init(2000)};
  Opt<bool> lrRangeTestStaircase{*this, "lr-range-test-staircase",
                                 Desc("lr_range_test_staircase"), init(false)};

  /// The options of sharc-optimizer.
  OptimizerOptions optimizerOptions() const {
    OptimizerOptions o;
    o.function = function;
    o.optimizer = optimizer;
    o.lr = lr;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.weightDecay = weightDecay;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.biasCorrection = biasCorrection;
    o.adamWMode = adamWMode;
    o.gradAccum = gradAccum;
    o.clip = clip;
    o.scheduler = scheduler;
    o.warmupMinLr = warmupMinLr;
    o.warmupMaxLr = warmupMaxLr;
    o.warmupNumSteps = warmupNumSteps;
    o.warmupType = warmupType;
    o.totalNumSteps = totalNumSteps;
    o.warmupMinRatio = warmupMinRatio;
    o.cosMinRatio = cosMinRatio;
    o.cycleMinLr = cycleMinLr;
    o.cycleMaxLr = cycleMaxLr;
    o.decayLrRate = decayLrRate;
    o.cycleFirstStepSize = cycleFirstStepSize;
    o.cycleSecondStepSize = cycleSecondStepSize;
    o.cycleFirstStairCount = cycleFirstStairCount;
    o.cycleSecondStairCount = cycleSecondStairCount;
    o.decayStepSize = decayStepSize;
    o.cycleMomentum = cycleMomentum;
    o.cycleMinMom = cycleMinMom;
    o.cycleMaxMom = cycleMaxMom;
    o.decayMomRate = decayMomRate;
    o.lrRangeTestMinLr = lrRangeTestMinLr;
    o.lrRangeTestStepRate = lrRangeTestStepRate;
    o.lrRangeTestStepSize = lrRangeTestStepSize;
    o.lrRangeTestStaircase = lrRangeTestStaircase;
    return o;
  }
};
} // namespace

/// Autodiff, the optimizer pass, then the clean-up of both.
static void addTrainPasses(OpPassManager &pm, AutodiffOptions autodiff,
                           std::unique_ptr<Pass> optimizer) {
  pm.addPass(createAutodiff(std::move(autodiff)));
  pm.addPass(std::move(optimizer));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void sharc::buildTrainPipeline(OpPassManager &pm,
                               const TrainingOptions &options) {
  addTrainPasses(pm, {options.function, options.loss, options.freeze},
                 createOptimizerPass(options));
}

void sharc::registerSharcPipelines() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "sharc-train-pipeline",
      "Forward function to @train_step: sharc-autodiff, sharc-optimizer, "
      "canonicalize, cse",
      [](OpPassManager &pm, const TrainPipelineOptions &options) {
        addTrainPasses(pm, {options.function, options.loss, options.freeze},
                       createOptimizer(options.optimizerOptions()));
      });
}
