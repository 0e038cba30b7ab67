//===- MixedPrecision.cpp - sharc-mixed-precision -------------------------===//
//
// Rewrites a forward function to compute in f16 or bf16 (docs/passes.md):
// its f32 parameters stay the fp32 master weights the optimizer updates, and
// are cast to 16 bits where the body starts (one compute copy per step: it
// is recomputed from the master weights, so the step keeps no second
// persistent copy); f32 data inputs are cast too; every op then computes in
// 16 bits except the ops of the fp32 policy, whose float operands are cast
// up to f32 and whose results stay f32 (softmax, log-softmax, layer norm,
// reductions and the losses: sums and exponentials over many elements that
// 16 bits would round away or overflow).  Run before sharc-autodiff, the
// backward pass then flows in 16 bits too, and each parameter's gradient
// comes back to f32 through its cast.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"

#include "mlir/IR/IRMapping.h"

namespace sharc {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// True for an op of the fp32 policy: it computes in f32 whatever its
/// operands' precision.
bool computesInF32(Operation *op) {
  return isa<SoftmaxOp, LogSoftmaxOp, LayerNormOp, ReduceOp, CrossEntropyOp,
             NllLossOp>(op);
}

/// `type` with element type `element` when it is a float tensor.
Type withFloatElement(Type type, Type element) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !isa<FloatType>(tensor.getElementType()))
    return type;
  return tensor.clone(element);
}

/// `value` converted to `element` if it is a float tensor of another type.
Value castTo(OpBuilder &b, Location loc, Value value, Type element) {
  Type wanted = withFloatElement(value.getType(), element);
  if (wanted == value.getType())
    return value;
  return CastOp::create(b, loc, wanted, value);
}

LogicalResult rewriteFunction(func::FuncOp func, Type half) {
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "sharc-mixed-precision: '@" << func.getSymName()
                            << "' has more than one block";
  Block &body = func.getBody().front();
  for (Type type : func.getArgumentTypes())
    if (auto tensor = dyn_cast<RankedTensorType>(type);
        tensor && isa<FloatType>(tensor.getElementType()) &&
        !tensor.getElementType().isF32())
      return func.emitError() << "sharc-mixed-precision: argument of type "
                              << type << "; the pass takes an f32 model";
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  OpBuilder b(func.getContext());
  b.setInsertionPointToStart(&body);
  Type f32 = b.getF32Type();
  // The compute copies of the float arguments (parameters and data).
  IRMapping mapping;
  for (BlockArgument arg : body.getArguments())
    mapping.map(arg, castTo(b, func.getLoc(), arg, half));

  for (Operation *op : ops) {
    b.setInsertionPoint(op);
    if (isa<func::ReturnOp>(op)) {
      // The function's results keep their declared types.
      for (OpOperand &use : op->getOpOperands()) {
        Value value = mapping.lookupOrDefault(use.get());
        auto declared = cast<RankedTensorType>(use.get().getType());
        use.set(castTo(b, op->getLoc(), value, declared.getElementType()));
      }
      continue;
    }
    // A constant keeps its value's type (a cast after it gives the 16-bit
    // literal, which canonicalization folds).
    if (isa<ConstantOp>(op))
      continue;
    if (op->getNumRegions() != 0)
      return op->emitError() << "sharc-mixed-precision: ops with regions are "
                                "not supported (run it on the forward model)";
    Type compute = computesInF32(op) ? f32 : half;
    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(
          castTo(b, op->getLoc(), mapping.lookupOrDefault(operand), compute));
    SmallVector<Type> results;
    for (Type type : op->getResultTypes())
      results.push_back(withFloatElement(type, compute));
    OperationState state(op->getLoc(), op->getName(), operands, results,
                         op->getAttrs());
    Operation *rewritten = b.create(state);
    for (auto [from, to] : llvm::zip(op->getResults(), rewritten->getResults()))
      mapping.map(from, to);
  }
  // The old ops, users first.
  for (Operation *op : llvm::reverse(ops))
    if (!isa<func::ReturnOp, ConstantOp>(op))
      op->erase();
  return success();
}

struct MixedPrecisionPass
    : sharc::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    Type half;
    if (dtype == "bf16")
      half = b.getBF16Type();
    else if (dtype == "f16")
      half = b.getF16Type();
    else if (dtype == "f32")
      return;
    else {
      module.emitError() << "sharc-mixed-precision: dtype must be f32, f16 or "
                            "bf16, not '"
                         << dtype << "'";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func) {
      module.emitError() << "sharc-mixed-precision: no function '@" << function
                         << "'";
      return signalPassFailure();
    }
    if (failed(rewriteFunction(func, half)))
      signalPassFailure();
  }
};

} // namespace
