//===- ScheduleTest.cpp - learning-rate schedules of the training step ----===//
//
// Builds @train_step for a trivial model with each schedule, evaluates it for
// steps t = 0..60 and compares its `lr` result with DeepSpeed's schedulers
// transcribed below from deepspeed/runtime/lr_schedules.py (v0.16): the
// constructor sets the learning rate at last_batch_iteration = -1 and
// step(), which the engine calls after each optimizer step, advances it.
// The learning rate of update t is the one set after t scheduler steps.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

//===----------------------------------------------------------------------===//
// DeepSpeed's schedulers
//===----------------------------------------------------------------------===//

/// What every reference scheduler offers: the learning rate (and beta1, for
/// OneCycle's momentum) currently set, and step().
struct ReferenceScheduler {
  virtual ~ReferenceScheduler() = default;
  virtual void step() = 0;
  double lr = 0;
  double momentum = 0;
  int64_t lastBatchIteration = -1;
};

/// No scheduler: the optimizer's learning rate throughout.
struct ConstantLR : ReferenceScheduler {
  explicit ConstantLR(double value) { lr = value; }
  void step() override {}
};

/// WarmupLR (decay = false) and WarmupDecayLR.
struct WarmupLR : ReferenceScheduler {
  WarmupLR(double minLr, double maxLr, int64_t warmupNumSteps, bool linear,
           bool decay = false, int64_t totalNumSteps = 0)
      : minLr(minLr), deltaLr(maxLr - minLr),
        warmupNumSteps(std::max<int64_t>(2, warmupNumSteps)),
        inverseLogWarmUp(1.0 / std::log(this->warmupNumSteps)), linear(linear),
        decay(decay), totalNumSteps(totalNumSteps) {
    lr = getLr();
  }
  double gamma() const {
    if (lastBatchIteration < warmupNumSteps) {
      if (!linear)
        return inverseLogWarmUp * std::log(lastBatchIteration + 1);
      return static_cast<double>(lastBatchIteration) / warmupNumSteps;
    }
    if (!decay)
      return 1.0;
    return std::max(
        0.0,
        static_cast<double>(totalNumSteps - lastBatchIteration) /
            std::max(1.0, static_cast<double>(totalNumSteps - warmupNumSteps)));
  }
  double getLr() const {
    if (lastBatchIteration < 0)
      return minLr;
    return minLr + deltaLr * gamma();
  }
  void step() override {
    ++lastBatchIteration;
    lr = getLr();
  }
  double minLr, deltaLr;
  int64_t warmupNumSteps;
  double inverseLogWarmUp;
  bool linear, decay;
  int64_t totalNumSteps;
};

struct WarmupCosineLR : ReferenceScheduler {
  WarmupCosineLR(double orgLr, int64_t totalNumSteps, double warmupMinRatio,
                 int64_t warmupNumSteps, double cosMinRatio, bool linear)
      : orgLr(orgLr), totalNumSteps(totalNumSteps),
        warmupMinRatio(warmupMinRatio),
        warmupNumSteps(std::max<int64_t>(2, warmupNumSteps)),
        cosMinRatio(cosMinRatio), linear(linear),
        inverseLogWarmUp(1.0 / std::log(this->warmupNumSteps)) {
    lr = getLr();
  }
  double getLrRatio() const {
    if (lastBatchIteration < warmupNumSteps) {
      double ratio =
          linear ? static_cast<double>(lastBatchIteration) / warmupNumSteps
                 : inverseLogWarmUp * std::log(lastBatchIteration + 1);
      return warmupMinRatio + ratio * (1.0 - warmupMinRatio);
    }
    int64_t realLastStep = lastBatchIteration - warmupNumSteps + 1;
    int64_t realTotalSteps = totalNumSteps - warmupNumSteps;
    double ratio =
        (1 + std::cos(std::numbers::pi * realLastStep / realTotalSteps)) / 2;
    return std::max(0.0, cosMinRatio + (1.0 - cosMinRatio) * ratio);
  }
  double getLr() const {
    if (lastBatchIteration < 0)
      return 0.0;
    return orgLr * getLrRatio();
  }
  void step() override {
    ++lastBatchIteration;
    lr = getLr();
  }
  double orgLr;
  int64_t totalNumSteps;
  double warmupMinRatio;
  int64_t warmupNumSteps;
  double cosMinRatio;
  bool linear;
  double inverseLogWarmUp;
};

struct OneCycle : ReferenceScheduler {
  OneCycle(double cycleMinLr, double cycleMaxLr, double decayLrRate,
           int64_t firstStepSize, int64_t secondStepSize, int64_t decayStepSize,
           double minMom = 0.8, double maxMom = 0.9, double decayMomRate = 0)
      : minLr(cycleMinLr), maxLr(cycleMaxLr), decayLrRate(decayLrRate),
        decayStepSize(decayStepSize), minMom(minMom), maxMom(maxMom),
        decayMomRate(decayMomRate) {
    double first = firstStepSize;
    double second = secondStepSize < 0 ? first : secondStepSize;
    totalSize = first + second;
    stepRatio = first / totalSize;
    skipLrDecay = decayStepSize == 0 || decayLrRate == 0;
    skipMomDecay = decayStepSize == 0 || decayMomRate == 0;
    lr = minLr;
    momentum = minMom;
  }
  double scaleFactor() const {
    double batchIteration = lastBatchIteration + 1;
    double cycle = std::floor(1 + batchIteration / totalSize);
    double x = 1. + batchIteration / totalSize - cycle;
    return x <= stepRatio ? x / stepRatio : (x - 1) / (stepRatio - 1);
  }
  void step() override {
    ++lastBatchIteration;
    if (lastBatchIteration < totalSize) {
      lr = minLr + (maxLr - minLr) * scaleFactor();
      momentum = maxMom - (maxMom - minMom) * scaleFactor();
      return;
    }
    double decayBatchIteration = lastBatchIteration - totalSize + 1;
    double decayInterval = decayBatchIteration / decayStepSize;
    lr = skipLrDecay ? minLr : minLr / (1 + decayLrRate * decayInterval);
    momentum =
        skipMomDecay ? maxMom : maxMom * (1 + decayMomRate * decayInterval);
  }
  double minLr, maxLr, decayLrRate;
  int64_t decayStepSize;
  double minMom, maxMom, decayMomRate;
  double totalSize, stepRatio;
  bool skipLrDecay, skipMomDecay;
};

struct LRRangeTest : ReferenceScheduler {
  LRRangeTest(double minLr, int64_t stepSize, double stepRate, bool staircase)
      : minLr(minLr), stepSize(stepSize), stepRate(stepRate),
        staircase(staircase) {
    lr = minLr;
  }
  void step() override {
    ++lastBatchIteration;
    double interval = static_cast<double>(lastBatchIteration + 1) / stepSize;
    if (staircase)
      interval = std::floor(interval);
    lr = minLr * (1 + stepRate * interval);
  }
  double minLr;
  int64_t stepSize;
  double stepRate;
  bool staircase;
};

/// The learning rate (and momentum) of updates 0..count-1: the engine runs
/// optimizer.step() with the current values, then scheduler.step().
std::vector<std::pair<double, double>> engineValues(ReferenceScheduler &s,
                                                    int count) {
  std::vector<std::pair<double, double>> values;
  for (int t = 0; t < count; ++t) {
    values.emplace_back(s.lr, s.momentum);
    s.step();
  }
  return values;
}

//===----------------------------------------------------------------------===//
// The training step
//===----------------------------------------------------------------------===//

/// loss = sum(x * w); the gradient function written by hand.
constexpr const char *kModel = R"mlir(
func.func @main_grad(%w: tensor<2xf32> {sharc.param = #sharc.param<"w", "w">},
                     %x: tensor<1x2xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<2xf32> {sharc.grad = "w"}) {
  %0 = sharc.mul %x, %w : (tensor<1x2xf32>, tensor<2xf32>) -> tensor<1x2xf32>
  %1 = sharc.reduce %0 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>}
      : (tensor<1x2xf32>) -> tensor<f32>
  %2 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>}
      : (tensor<1x2xf32>) -> tensor<2xf32>
  %3 = sharc.mul %2, %seed : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return %1, %3 : tensor<f32>, tensor<2xf32>
}
)mlir";

constexpr int kSteps = 61;

class ScheduleTest : public IRTest {
protected:
  /// Builds @train_step with `options` (SGD without momentum unless the
  /// options say otherwise).
  func::FuncOp build(const TrainingOptions &options) {
    if (!parse(kModel, "main_grad"))
      return {};
    FailureOr<func::FuncOp> step = buildTrainStep(*modules.back(), options);
    if (failed(step)) {
      ADD_FAILURE() << "buildTrainStep failed:\n" << diagnostics;
      return {};
    }
    return *step;
  }

  /// The results of @train_step at step counter `t`, all state zero.
  std::vector<Tensor> runStep(func::FuncOp step, int64_t t) {
    std::vector<Tensor> args;
    for (Type type : step.getArgumentTypes())
      args.emplace_back(*dtypeOf(cast<RankedTensorType>(type).getElementType()),
                        cast<RankedTensorType>(type).getShape());
    unsigned stepIndex = step.getNumArguments() - 2;
    args[stepIndex].ints()[0] = t;
    args[0] = makeTensor(DType::f32, {2}, {0.5, -0.25});
    args.back() = makeTensor(DType::f32, {1, 2}, {1.0, 2.0});
    FailureOr<std::vector<Tensor>> results = evaluate(step, args);
    if (failed(results)) {
      ADD_FAILURE() << "evaluation failed:\n" << diagnostics;
      return {};
    }
    return *results;
  }

  /// Expects the `lr` result of steps 0..kSteps-1 to match `reference`.
  void expectSchedule(const TrainingOptions &options,
                      ReferenceScheduler &reference) {
    func::FuncOp step = build(options);
    if (!step)
      return;
    std::vector<std::pair<double, double>> expected =
        engineValues(reference, kSteps);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<Tensor> results = runStep(step, t);
      if (results.empty())
        return;
      // (loss, params, state, step, lr, grad_norm)
      double lr = results[results.size() - 2].getDouble(0);
      EXPECT_NEAR(lr, expected[t].first, 1e-12 * std::fabs(expected[t].first))
          << "step " << t;
    }
  }
};

TrainingOptions sgdWith(SchedulerOptions scheduler) {
  TrainingOptions options;
  options.optimizer = OptimizerKind::sgd;
  options.function = "main";
  options.scheduler = scheduler;
  return options;
}

TEST_F(ScheduleTest, None) {
  TrainingOptions options = sgdWith({});
  options.lr = 0.0123;
  ConstantLR reference(0.0123);
  expectSchedule(options, reference);
}

TEST_F(ScheduleTest, WarmupLR) {
  for (bool linear : {false, true}) {
    SchedulerOptions s;
    s.kind = SchedulerKind::warmupLR;
    s.warmupMinLr = 0.01;
    s.warmupMaxLr = 0.1;
    s.warmupNumSteps = 10;
    s.warmupLinear = linear;
    WarmupLR reference(0.01, 0.1, 10, linear);
    SCOPED_TRACE(linear ? "linear" : "log");
    expectSchedule(sgdWith(s), reference);
  }
}

TEST_F(ScheduleTest, WarmupLRAtLeastTwoSteps) {
  SchedulerOptions s;
  s.kind = SchedulerKind::warmupLR;
  s.warmupMinLr = 0.02;
  s.warmupMaxLr = 0.2;
  s.warmupNumSteps = 0;
  WarmupLR reference(0.02, 0.2, 0, false);
  expectSchedule(sgdWith(s), reference);
}

TEST_F(ScheduleTest, WarmupDecayLR) {
  for (bool linear : {false, true}) {
    SchedulerOptions s;
    s.kind = SchedulerKind::warmupDecayLR;
    s.warmupMinLr = 0.01;
    s.warmupMaxLr = 0.1;
    s.warmupNumSteps = 10;
    s.warmupLinear = linear;
    s.totalNumSteps = 50;
    WarmupLR reference(0.01, 0.1, 10, linear, /*decay=*/true, 50);
    SCOPED_TRACE(linear ? "linear" : "log");
    expectSchedule(sgdWith(s), reference);
  }
}

TEST_F(ScheduleTest, WarmupCosineLR) {
  for (bool linear : {false, true}) {
    SchedulerOptions s;
    s.kind = SchedulerKind::warmupCosineLR;
    s.warmupNumSteps = 10;
    s.warmupLinear = linear;
    s.totalNumSteps = 50;
    s.warmupMinRatio = 0.1;
    s.cosMinRatio = 0.01;
    TrainingOptions options = sgdWith(s);
    options.lr = 0.3;
    WarmupCosineLR reference(0.3, 50, 0.1, 10, 0.01, linear);
    SCOPED_TRACE(linear ? "linear" : "log");
    expectSchedule(options, reference);
  }
}

TEST_F(ScheduleTest, OneCycle) {
  SchedulerOptions s;
  s.kind = SchedulerKind::oneCycle;
  s.cycleMinLr = 0.01;
  s.cycleMaxLr = 0.1;
  s.cycleFirstStepSize = 10;
  s.cycleSecondStepSize = 15;
  s.decayStepSize = 5;
  s.decayLrRate = 0.5;
  OneCycle reference(0.01, 0.1, 0.5, 10, 15, 5);
  expectSchedule(sgdWith(s), reference);
}

TEST_F(ScheduleTest, OneCycleWithoutDecay) {
  for (auto [decayStepSize, decayLrRate] :
       {std::pair<int64_t, double>{0, 0.5}, {5, 0.0}}) {
    SchedulerOptions s;
    s.kind = SchedulerKind::oneCycle;
    s.cycleMinLr = 0.02;
    s.cycleMaxLr = 0.2;
    s.cycleFirstStepSize = 12;
    s.decayStepSize = decayStepSize;
    s.decayLrRate = decayLrRate;
    OneCycle reference(0.02, 0.2, decayLrRate, 12, -1, decayStepSize);
    expectSchedule(sgdWith(s), reference);
  }
}

TEST_F(ScheduleTest, OneCycleStairsHaveNoEffect) {
  // DeepSpeed stores cycle_first/second_stair_count but never uses them.
  SchedulerOptions s;
  s.kind = SchedulerKind::oneCycle;
  s.cycleMinLr = 0.01;
  s.cycleMaxLr = 0.1;
  s.cycleFirstStepSize = 9;
  s.cycleSecondStepSize = 6;
  s.cycleFirstStairCount = 3;
  s.cycleSecondStairCount = 2;
  s.decayStepSize = 4;
  s.decayLrRate = 0.25;
  OneCycle reference(0.01, 0.1, 0.25, 9, 6, 4);
  expectSchedule(sgdWith(s), reference);
}

TEST_F(ScheduleTest, LRRangeTest) {
  for (bool staircase : {false, true}) {
    SchedulerOptions s;
    s.kind = SchedulerKind::lrRangeTest;
    s.lrRangeTestMinLr = 0.01;
    s.lrRangeTestStepSize = 7;
    s.lrRangeTestStepRate = 0.5;
    s.lrRangeTestStaircase = staircase;
    LRRangeTest reference(0.01, 7, 0.5, staircase);
    SCOPED_TRACE(staircase ? "staircase" : "continuous");
    expectSchedule(sgdWith(s), reference);
  }
}

/// OneCycle with Adam cycles beta1 (and sets beta2 = 0.99).  With zero
/// moments, exp_avg = (1 - beta1) g and exp_avg_sq = (1 - beta2) g^2 in f32.
TEST_F(ScheduleTest, OneCycleMomentum) {
  SchedulerOptions s;
  s.kind = SchedulerKind::oneCycle;
  s.cycleMinLr = 0.01;
  s.cycleMaxLr = 0.1;
  s.cycleFirstStepSize = 10;
  s.cycleSecondStepSize = 15;
  s.decayStepSize = 5;
  s.decayLrRate = 0.5;
  s.cycleMinMom = 0.85;
  s.cycleMaxMom = 0.95;
  s.decayMomRate = 0.01;
  TrainingOptions options = sgdWith(s);
  options.optimizer = OptimizerKind::adam;
  func::FuncOp step = build(options);
  ASSERT_TRUE(step);
  OneCycle reference(0.01, 0.1, 0.5, 10, 15, 5, 0.85, 0.95, 0.01);
  std::vector<std::pair<double, double>> expected =
      engineValues(reference, kSteps);
  const float grad[2] = {1.0f, 2.0f};
  for (int t = 0; t < kSteps; ++t) {
    std::vector<Tensor> results = runStep(step, t);
    ASSERT_EQ(results.size(), 7u);
    EXPECT_NEAR(results[5].getDouble(0), expected[t].first,
                1e-12 * expected[t].first)
        << "step " << t;
    float beta1 = static_cast<float>(expected[t].second);
    float beta2 = 0.99f;
    for (int i = 0; i < 2; ++i) {
      EXPECT_FLOAT_EQ(results[2].getDouble(i), (1.0f - beta1) * grad[i])
          << "step " << t;
      EXPECT_FLOAT_EQ(results[3].getDouble(i),
                      (1.0f - beta2) * grad[i] * grad[i])
          << "step " << t;
    }
  }
}

TEST_F(ScheduleTest, OneCycleMomentumOff) {
  SchedulerOptions s;
  s.kind = SchedulerKind::oneCycle;
  s.cycleMinLr = 0.01;
  s.cycleMaxLr = 0.1;
  s.cycleFirstStepSize = 4;
  s.cycleMomentum = false;
  TrainingOptions options = sgdWith(s);
  options.optimizer = OptimizerKind::adamw;
  options.beta1 = 0.5;
  options.beta2 = 0.75;
  func::FuncOp step = build(options);
  ASSERT_TRUE(step);
  for (int t : {0, 3, 9}) {
    std::vector<Tensor> results = runStep(step, t);
    ASSERT_EQ(results.size(), 7u);
    EXPECT_FLOAT_EQ(results[2].getDouble(1), 0.5f * 2.0f);
    EXPECT_FLOAT_EQ(results[3].getDouble(1), 0.25f * 4.0f);
  }
}

} // namespace
