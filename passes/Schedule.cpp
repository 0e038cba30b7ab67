//===- Schedule.cpp - learning-rate schedules in the IR -------------------===//
//
// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py) as f64 scalar IR.
// DeepSpeed sets the learning rate once when the scheduler is built
// (last_batch_iteration = -1) and again in scheduler.step(), which the engine
// calls after each optimizer step.  Update t (t updates applied before it,
// the step counter) therefore uses the scheduler's value at
// last_batch_iteration = t - 1, the constructor's value for t = 0.  Every
// formula below is DeepSpeed's, evaluated in the same order.
//
//===----------------------------------------------------------------------===//

#include "passes/Schedule.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <numbers>

using namespace mlir;
using namespace sharc;

//===----------------------------------------------------------------------===//
// MathBuilder
//===----------------------------------------------------------------------===//

Value MathBuilder::constant(Type elementType, double value) {
  auto type = RankedTensorType::get({}, elementType);
  if (auto floatType = dyn_cast<FloatType>(elementType)) {
    llvm::APFloat number(value);
    bool losesInfo;
    number.convert(floatType.getFloatSemantics(),
                   llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    return ConstantOp::create(builder, DenseElementsAttr::get(type, number));
  }
  auto intType = llvm::cast<IntegerType>(elementType);
  llvm::APInt number(intType.getWidth(), static_cast<int64_t>(value),
                     /*isSigned=*/true);
  return ConstantOp::create(builder, DenseElementsAttr::get(type, number));
}

Value MathBuilder::f64(double value) {
  return constant(builder.getF64Type(), value);
}

Value MathBuilder::cast(Value value, Type elementType) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  if (type.getElementType() == elementType)
    return value;
  return CastOp::create(builder, type.clone(elementType), value);
}

Value MathBuilder::add(Value lhs, Value rhs) {
  return AddOp::create(builder, lhs, rhs);
}
Value MathBuilder::sub(Value lhs, Value rhs) {
  return SubOp::create(builder, lhs, rhs);
}
Value MathBuilder::mul(Value lhs, Value rhs) {
  return MulOp::create(builder, lhs, rhs);
}
Value MathBuilder::div(Value lhs, Value rhs) {
  return DivOp::create(builder, lhs, rhs);
}
Value MathBuilder::max(Value lhs, Value rhs) {
  return MaxOp::create(builder, lhs, rhs);
}
Value MathBuilder::pow(Value lhs, Value rhs) {
  return PowOp::create(builder, lhs, rhs);
}
Value MathBuilder::sqrt(Value operand) {
  return SqrtOp::create(builder, operand);
}
Value MathBuilder::log(Value operand) {
  return LogOp::create(builder, operand);
}
Value MathBuilder::cos(Value operand) {
  return CosOp::create(builder, operand);
}
Value MathBuilder::floor(Value operand) {
  return FloorOp::create(builder, operand);
}
Value MathBuilder::compare(Value lhs, Value rhs, ComparePredicate predicate) {
  return CompareOp::create(builder, lhs, rhs, predicate);
}
Value MathBuilder::select(Value condition, Value onTrue, Value onFalse) {
  return SelectOp::create(builder, condition, onTrue, onFalse);
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

/// WarmupLR's and WarmupCosineLR's warmup_num_steps.
static double effectiveWarmupSteps(const SchedulerOptions &options) {
  return static_cast<double>(std::max<int64_t>(2, options.warmupNumSteps));
}

/// The warmup fraction at last_batch_iteration = t - 1: log(t) / log(N)
/// (log) or (t - 1) / N (linear); 0 for t = 0, where DeepSpeed's constructor
/// sets the initial value.
static Value buildWarmupGamma(MathBuilder &math, Value t,
                              const SchedulerOptions &options) {
  double steps = effectiveWarmupSteps(options);
  if (options.warmupLinear)
    return math.div(math.max(math.sub(t, math.f64(1)), math.f64(0)),
                    math.f64(steps));
  return math.mul(math.f64(1.0 / std::log(steps)),
                  math.log(math.max(t, math.f64(1))));
}

/// WarmupLR and WarmupDecayLR: min + (max - min) * gamma, gamma rising during
/// the warmup, then 1 (WarmupLR) or falling linearly to 0 at total_num_steps
/// (WarmupDecayLR).
static Value buildWarmupLR(MathBuilder &math, Value t,
                           const SchedulerOptions &options) {
  double steps = effectiveWarmupSteps(options);
  Value last = math.sub(t, math.f64(1));
  Value gamma = buildWarmupGamma(math, t, options);
  Value after = math.f64(1);
  if (options.kind == SchedulerKind::warmupDecayLR) {
    double total = static_cast<double>(options.totalNumSteps);
    after =
        math.max(math.f64(0), math.div(math.sub(math.f64(total), last),
                                       math.f64(std::max(1.0, total - steps))));
  }
  Value warming = math.compare(last, math.f64(steps), ComparePredicate::lt);
  gamma = math.select(warming, gamma, after);
  return math.add(
      math.f64(options.warmupMinLr),
      math.mul(math.f64(options.warmupMaxLr - options.warmupMinLr), gamma));
}

/// WarmupCosineLR: lr * ratio, the ratio rising from warmup_min_ratio to 1,
/// then following half a cosine down to cos_min_ratio at total_num_steps.
/// DeepSpeed's constructor sets 0, so the first update uses lr 0.
static Value buildWarmupCosineLR(MathBuilder &math, Value t,
                                 const TrainingOptions &options) {
  const SchedulerOptions &schedule = options.scheduler;
  double steps = effectiveWarmupSteps(schedule);
  double total = static_cast<double>(schedule.totalNumSteps);
  Value last = math.sub(t, math.f64(1));
  Value warmup = math.add(math.f64(schedule.warmupMinRatio),
                          math.mul(buildWarmupGamma(math, t, schedule),
                                   math.f64(1.0 - schedule.warmupMinRatio)));
  Value angle = math.div(
      math.mul(math.f64(std::numbers::pi), math.sub(t, math.f64(steps))),
      math.f64(total - steps));
  Value half = math.div(math.add(math.f64(1), math.cos(angle)), math.f64(2));
  Value cosine =
      math.max(math.f64(0),
               math.add(math.f64(schedule.cosMinRatio),
                        math.mul(math.f64(1.0 - schedule.cosMinRatio), half)));
  Value warming = math.compare(last, math.f64(steps), ComparePredicate::lt);
  Value ratio = math.select(warming, warmup, cosine);
  Value lr = math.mul(math.f64(options.lr), ratio);
  Value started = math.compare(t, math.f64(1), ComparePredicate::ge);
  return math.select(started, lr, math.f64(0));
}

/// OneCycle: the learning rate rises linearly from cycle_min_lr to
/// cycle_max_lr over cycle_first_step_size steps, falls back over
/// cycle_second_step_size steps, then stays at cycle_min_lr or decays as
/// cycle_min_lr / (1 + decay_lr_rate * steps / decay_step_size).  With Adam
/// and cycle_momentum, beta1 moves inversely between cycle_max_mom and
/// cycle_min_mom (then stays at cycle_max_mom or grows by decay_mom_rate)
/// and beta2 is 0.99.  Stair counts have no effect, as in DeepSpeed.
static ScheduledValues buildOneCycle(MathBuilder &math, Value t,
                                     const TrainingOptions &options) {
  const SchedulerOptions &schedule = options.scheduler;
  double first = static_cast<double>(schedule.cycleFirstStepSize);
  double second = schedule.cycleSecondStepSize < 0
                      ? first
                      : static_cast<double>(schedule.cycleSecondStepSize);
  double total = first + second;
  double stepRatio = first / total;

  // The position in the cycle at batch_iteration = t.
  Value progress = math.add(math.f64(1), math.div(t, math.f64(total)));
  Value x = math.sub(progress, math.floor(progress));
  Value rising = math.compare(x, math.f64(stepRatio), ComparePredicate::le);
  Value scale =
      math.select(rising, math.div(x, math.f64(stepRatio)),
                  math.div(math.sub(x, math.f64(1)), math.f64(stepRatio - 1)));

  Value inCycle = math.compare(math.sub(t, math.f64(1)), math.f64(total),
                               ComparePredicate::lt);
  // 1 + rate * (decay intervals after the cycle); null without decay.
  auto decayFactor = [&](double rate) -> Value {
    if (schedule.decayStepSize == 0 || rate == 0)
      return {};
    Value interval =
        math.div(math.sub(t, math.f64(total)),
                 math.f64(static_cast<double>(schedule.decayStepSize)));
    return math.add(math.f64(1), math.mul(math.f64(rate), interval));
  };

  ScheduledValues values;
  Value cycleLr = math.add(
      math.f64(schedule.cycleMinLr),
      math.mul(math.f64(schedule.cycleMaxLr - schedule.cycleMinLr), scale));
  Value decayLr = math.f64(schedule.cycleMinLr);
  if (Value factor = decayFactor(schedule.decayLrRate))
    decayLr = math.div(decayLr, factor);
  values.lr = math.select(inCycle, cycleLr, decayLr);

  if (!schedule.cycleMomentum || options.optimizer == OptimizerKind::sgd)
    return values;
  Value cycleMom = math.sub(
      math.f64(schedule.cycleMaxMom),
      math.mul(math.f64(schedule.cycleMaxMom - schedule.cycleMinMom), scale));
  Value decayMom = math.f64(schedule.cycleMaxMom);
  if (Value factor = decayFactor(schedule.decayMomRate))
    decayMom = math.mul(decayMom, factor);
  Value started = math.compare(t, math.f64(1), ComparePredicate::ge);
  values.beta1 = math.select(started, math.select(inCycle, cycleMom, decayMom),
                             math.f64(schedule.cycleMinMom));
  values.beta2 = math.f64(0.99);
  return values;
}

/// LRRangeTest: lr_range_test_min_lr * (1 + step_rate * t / step_size), the
/// quotient rounded down with the staircase.
static Value buildLRRangeTest(MathBuilder &math, Value t,
                              const SchedulerOptions &options) {
  Value interval =
      math.div(t, math.f64(static_cast<double>(options.lrRangeTestStepSize)));
  if (options.lrRangeTestStaircase)
    interval = math.floor(interval);
  Value increase = math.add(
      math.f64(1), math.mul(math.f64(options.lrRangeTestStepRate), interval));
  return math.mul(math.f64(options.lrRangeTestMinLr), increase);
}

ScheduledValues sharc::buildSchedule(MathBuilder &math, Value step,
                                     const TrainingOptions &options) {
  switch (options.scheduler.kind) {
  case SchedulerKind::none:
    return {math.f64(options.lr), {}, {}};
  case SchedulerKind::warmupLR:
  case SchedulerKind::warmupDecayLR:
    return {buildWarmupLR(math, step, options.scheduler), {}, {}};
  case SchedulerKind::warmupCosineLR:
    return {buildWarmupCosineLR(math, step, options), {}, {}};
  case SchedulerKind::oneCycle:
    return buildOneCycle(math, step, options);
  case SchedulerKind::lrRangeTest:
    return {buildLRRangeTest(math, step, options.scheduler), {}, {}};
  }
  llvm_unreachable("unknown schedule");
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

/// `value` as "%g" prints it ("0.1", "1e-08", "2000").
static std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return text;
}

bool OptionChecker::atLeast(StringRef name, double value, double low) {
  if (value >= low && std::isfinite(value))
    return true;
  emitError() << "option '" << name << "' must be at least "
              << formatNumber(low) << ", got " << formatNumber(value);
  return false;
}

bool OptionChecker::positive(StringRef name, double value) {
  if (value > 0 && std::isfinite(value))
    return true;
  emitError() << "option '" << name << "' must be positive and finite, got "
              << formatNumber(value);
  return false;
}

bool OptionChecker::fraction(StringRef name, double value) {
  if (value >= 0 && value <= 1)
    return true;
  emitError() << "option '" << name << "' must be in [0, 1], got "
              << formatNumber(value);
  return false;
}

bool OptionChecker::beta(StringRef name, double value) {
  if (value >= 0 && value < 1)
    return true;
  emitError() << "option '" << name << "' must be in [0, 1), got "
              << formatNumber(value);
  return false;
}

bool OptionChecker::inRange(StringRef name, int64_t value, int64_t low,
                            int64_t high) {
  if (value >= low && value <= high)
    return true;
  emitError() << "option '" << name << "' must be between " << low << " and "
              << high << ", got " << value;
  return false;
}

bool OptionChecker::defaultOrAtLeast(StringRef name, int64_t value,
                                     int64_t low) {
  if (value == -1 || value >= low)
    return true;
  emitError() << "option '" << name << "' must be -1 or at least " << low
              << ", got " << value;
  return false;
}

LogicalResult
sharc::verifySchedulerOptions(const TrainingOptions &options,
                              function_ref<InFlightDiagnostic()> emitError) {
  const SchedulerOptions &s = options.scheduler;
  OptionChecker check(emitError);
  switch (s.kind) {
  case SchedulerKind::none:
    return success();
  case SchedulerKind::warmupLR:
    return success(check.atLeast("warmup-min-lr", s.warmupMinLr, 0) &&
                   check.atLeast("warmup-max-lr", s.warmupMaxLr, 0) &&
                   check.atLeast("warmup-num-steps", s.warmupNumSteps, 0));
  case SchedulerKind::warmupDecayLR:
    return success(check.atLeast("warmup-min-lr", s.warmupMinLr, 0) &&
                   check.atLeast("warmup-max-lr", s.warmupMaxLr, 0) &&
                   check.atLeast("warmup-num-steps", s.warmupNumSteps, 0) &&
                   check.atLeast("total-num-steps", s.totalNumSteps, 1));
  case SchedulerKind::warmupCosineLR: {
    if (!check.atLeast("warmup-num-steps", s.warmupNumSteps, 0) ||
        !check.fraction("warmup-min-ratio", s.warmupMinRatio) ||
        !check.fraction("cos-min-ratio", s.cosMinRatio))
      return failure();
    double steps = effectiveWarmupSteps(s);
    if (static_cast<double>(s.totalNumSteps) > steps)
      return success();
    return emitError() << "option 'total-num-steps' (" << s.totalNumSteps
                       << ") must exceed the warmup steps ("
                       << formatNumber(steps)
                       << ", warmup-num-steps raised to at least 2) for "
                          "warmup-cosine-lr";
  }
  case SchedulerKind::oneCycle:
    return success(
        check.atLeast("cycle-min-lr", s.cycleMinLr, 0) &&
        check.atLeast("cycle-max-lr", s.cycleMaxLr, 0) &&
        check.atLeast("decay-lr-rate", s.decayLrRate, 0) &&
        check.atLeast("cycle-first-step-size", s.cycleFirstStepSize, 1) &&
        check.defaultOrAtLeast("cycle-second-step-size", s.cycleSecondStepSize,
                               1) &&
        check.atLeast("cycle-first-stair-count", s.cycleFirstStairCount, 0) &&
        check.defaultOrAtLeast("cycle-second-stair-count",
                               s.cycleSecondStairCount, 0) &&
        check.atLeast("decay-step-size", s.decayStepSize, 0) &&
        check.beta("cycle-min-mom", s.cycleMinMom) &&
        check.beta("cycle-max-mom", s.cycleMaxMom) &&
        check.atLeast("decay-mom-rate", s.decayMomRate, 0));
  case SchedulerKind::lrRangeTest:
    return success(
        check.atLeast("lr-range-test-min-lr", s.lrRangeTestMinLr, 0) &&
        check.atLeast("lr-range-test-step-rate", s.lrRangeTestStepRate, 0) &&
        check.atLeast("lr-range-test-step-size", s.lrRangeTestStepSize, 1));
  }
  llvm_unreachable("unknown schedule");
}
