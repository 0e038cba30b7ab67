//===- Schedule.h - learning-rate schedules in the IR -----------*- C++ -*-===//
//
// Private to passes/: the scalar arithmetic builder that the optimizer pass
// and the schedules share, and the schedules themselves, which compute the
// hyper-parameters of a step from its step counter inside the IR so that one
// compiled training step serves every step.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_SCHEDULE_H
#define SHARC_PASSES_SCHEDULE_H

#include "ir/SharcOps.h"
#include "ir/TrainingOptions.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace sharc {

/// Builds broadcasting sharc arithmetic at one insertion point; scalars are
/// rank-0 tensors.
class MathBuilder {
public:
  explicit MathBuilder(mlir::ImplicitLocOpBuilder &builder)
      : builder(builder) {}

  mlir::ImplicitLocOpBuilder &getBuilder() { return builder; }

  /// A rank-0 constant of float or integer `elementType` (floats rounded to
  /// nearest even).
  mlir::Value constant(mlir::Type elementType, double value);
  /// A `tensor<f64>` constant.
  mlir::Value f64(double value);
  /// `value` converted to `elementType` (unchanged when it already has it).
  mlir::Value cast(mlir::Value value, mlir::Type elementType);

  mlir::Value add(mlir::Value lhs, mlir::Value rhs);
  mlir::Value sub(mlir::Value lhs, mlir::Value rhs);
  mlir::Value mul(mlir::Value lhs, mlir::Value rhs);
  mlir::Value div(mlir::Value lhs, mlir::Value rhs);
  mlir::Value max(mlir::Value lhs, mlir::Value rhs);
  mlir::Value pow(mlir::Value lhs, mlir::Value rhs);
  mlir::Value sqrt(mlir::Value operand);
  mlir::Value log(mlir::Value operand);
  mlir::Value cos(mlir::Value operand);
  mlir::Value floor(mlir::Value operand);
  mlir::Value compare(mlir::Value lhs, mlir::Value rhs,
                      ComparePredicate predicate);
  mlir::Value select(mlir::Value condition, mlir::Value onTrue,
                     mlir::Value onFalse);

private:
  mlir::ImplicitLocOpBuilder &builder;
};

/// The hyper-parameters that a schedule sets for one step, as `tensor<f64>`
/// scalars.  `beta1` and `beta2` are set only where the schedule overrides
/// Adam's betas (OneCycle with momentum cycling).
struct ScheduledValues {
  mlir::Value lr;
  mlir::Value beta1;
  mlir::Value beta2;
};

/// Builds the schedule of `options` for the update that follows `step`
/// updates (`step`: a `tensor<f64>`), as DeepSpeed's scheduler gives it:
/// DeepSpeed steps the scheduler after each optimizer step, so update `t`
/// uses the value its scheduler reached after `t` scheduler steps.
ScheduledValues buildSchedule(MathBuilder &math, mlir::Value step,
                              const TrainingOptions &options);

/// Range checks of options that report the offending option by its
/// pass-option name; each returns false after reporting.
class OptionChecker {
public:
  explicit OptionChecker(
      llvm::function_ref<mlir::InFlightDiagnostic()> emitError)
      : emitError(emitError) {}

  /// value >= low and finite.
  bool atLeast(llvm::StringRef name, double value, double low);
  /// value > 0 and finite.
  bool positive(llvm::StringRef name, double value);
  /// value in [0, 1].
  bool fraction(llvm::StringRef name, double value);
  /// value in [0, 1), a decay rate such as Adam's betas.
  bool beta(llvm::StringRef name, double value);
  /// low <= value <= high (integers).
  bool inRange(llvm::StringRef name, int64_t value, int64_t low, int64_t high);
  /// value == -1 (meaning "the default") or value >= low.
  bool defaultOrAtLeast(llvm::StringRef name, int64_t value, int64_t low);

private:
  llvm::function_ref<mlir::InFlightDiagnostic()> emitError;
};

/// The element type of tensor `value`.
inline mlir::Type elementTypeOf(mlir::Value value) {
  return llvm::cast<mlir::RankedTensorType>(value.getType()).getElementType();
}

/// The loss seed of a step with `microBatches` micro-batches per rank on
/// `worldSize` ranks: 1/(G N), computed in double and rounded once to the
/// loss's type (sharc-optimizer builds 1/G, sharc-data-parallel 1/(G N)).
inline double lossSeedValue(int64_t microBatches, int64_t worldSize) {
  return 1.0 / (static_cast<double>(microBatches) * worldSize);
}

/// Checks the parameters of the schedule `options.scheduler.kind`.
mlir::LogicalResult verifySchedulerOptions(
    const TrainingOptions &options,
    llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

} // namespace sharc

#endif // SHARC_PASSES_SCHEDULE_H
