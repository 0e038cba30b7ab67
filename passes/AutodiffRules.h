//===- AutodiffRules.h - gradient rules of the sharc ops -------*- C++ -*-===//
//
// The vector-Jacobian product of every differentiable sharc op, used by the
// sharc-autodiff pass (passes/Autodiff.cpp).  docs/autodiff.md states each
// rule in math.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_AUTODIFFRULES_H
#define SHARC_PASSES_AUTODIFFRULES_H

#include "ir/SharcOps.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace sharc::autodiff {

/// True when `op` has a gradient rule: the adjoints of its float operands can
/// be computed from the adjoints of its results.
bool hasGradientRule(mlir::Operation *op);

/// Emits, at `builder`'s insertion point, the adjoint contributions of the
/// operands of `op` (an op with a gradient rule) given `resultGrads`, the
/// adjoints of its results (null where a result has none).  Contributions
/// are computed only for the operands with `wanted` set; `operandGrads` gets
/// one entry per operand, null where there is no contribution (an operand
/// not wanted, or a zero contribution such as floor's).
void buildOperandGrads(mlir::ImplicitLocOpBuilder &builder, mlir::Operation *op,
                       llvm::ArrayRef<mlir::Value> resultGrads,
                       llvm::ArrayRef<bool> wanted,
                       llvm::SmallVectorImpl<mlir::Value> &operandGrads);

/// A splat constant of `type` (float or integer elements) holding `value`.
mlir::Value buildSplat(mlir::ImplicitLocOpBuilder &builder,
                       mlir::RankedTensorType type, double value);

/// Sums `grad`, the adjoint of a value of `type` that was numpy-broadcast to
/// `grad`'s shape, back to `type`: reduces the leading dimensions and those
/// where `type` has size 1, then reshapes.  Returns `grad` when nothing was
/// broadcast.
mlir::Value buildUnbroadcast(mlir::ImplicitLocOpBuilder &builder,
                             mlir::Value grad, mlir::RankedTensorType type);

} // namespace sharc::autodiff

#endif // SHARC_PASSES_AUTODIFFRULES_H
