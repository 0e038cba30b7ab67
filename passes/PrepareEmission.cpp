//===- PrepareEmission.cpp - Shape @train_step for code generation --------===//
//
// The code generator emits one function with one arena.  This inlines the
// gradient function into `@train_step` (the memory plan then covers the whole
// step), drops every other function and gives splat constants that feed
// non-elementwise ops a home: a broadcast of a one-element constant, which
// the memory planner places in the arena like any other value.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace sharc {
#define GEN_PASS_DEF_PREPAREEMISSION
#define GEN_PASS_DEF_UPDATEINPLACE
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

/// Inlines every func.call in `func` (recursively: callees are inlined into
/// `func`, whose body is a single block).
static LogicalResult inlineCalls(func::FuncOp func, ModuleOp module) {
  for (int depth = 0; depth < 64; ++depth) {
    SmallVector<func::CallOp> calls;
    func.walk([&](func::CallOp call) { calls.push_back(call); });
    if (calls.empty())
      return success();
    for (func::CallOp call : calls) {
      auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
      if (!callee || callee.isExternal() || !callee.getBody().hasOneBlock())
        return call.emitError()
               << "code generation: cannot inline the call to '@"
               << call.getCallee() << "' (missing or not a single block)";
      Block &body = callee.getBody().front();
      IRMapping mapping;
      for (auto [arg, operand] :
           llvm::zip(body.getArguments(), call.getOperands()))
        mapping.map(arg, operand);
      OpBuilder builder(call);
      for (Operation &op : body.without_terminator())
        builder.clone(op, mapping);
      auto ret = cast<func::ReturnOp>(body.getTerminator());
      for (auto [result, value] :
           llvm::zip(call.getResults(), ret.getOperands()))
        result.replaceAllUsesWith(mapping.lookupOrDefault(value));
      call.erase();
    }
  }
  return func.emitError() << "code generation: calls nested too deeply";
}

LogicalResult sharc::prepareForEmission(ModuleOp module) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError()
           << "code generation needs '@train_step' (run the train pipeline)";
  if (failed(inlineCalls(step, module)))
    return failure();
  GradientsOp marker;
  step.walk([&](GradientsOp op) { marker = op; });
  if (marker)
    return marker.emitError() << "code generation: 'sharc.gradients' is left "
                                 "(run sharc-data-parallel first)";
  for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
    if (func != step)
      func.erase();

  // A summed or averaged loss is computed per position in parallel into
  // scratch space (a double loss and weight each), then summed in order.
  step.walk([&](Operation *op) {
    Value input;
    LossReduction reduction;
    if (auto loss = dyn_cast<CrossEntropyOp>(op)) {
      input = loss.getLogits();
      reduction = loss.getReduction();
    } else if (auto loss = dyn_cast<NllLossOp>(op)) {
      input = loss.getInput();
      reduction = loss.getReduction();
    } else {
      return;
    }
    if (reduction == LossReduction::none)
      return;
    auto shape = cast<RankedTensorType>(input.getType()).getShape();
    int64_t positions = shape[0];
    for (int64_t d : shape.drop_front(2))
      positions *= d;
    op->setAttr("sharc.scratch_bytes",
                Builder(op->getContext()).getI64IntegerAttr(16 * positions));
  });

  SmallVector<ConstantOp> constants;
  step.walk([&](ConstantOp op) { constants.push_back(op); });
  for (ConstantOp constant : constants) {
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    auto type = cast<RankedTensorType>(constant.getType());
    if (!attr || !attr.isSplat() || type.getNumElements() <= 1)
      continue;
    for (OpOperand &use : llvm::make_early_inc_range(constant->getUses())) {
      // An elementwise user reads the constant as a literal.
      if (isFusibleElementwiseOp(use.getOwner()) ||
          isa<FusionOp>(use.getOwner()))
        continue;
      OpBuilder builder(use.getOwner());
      auto scalarType = RankedTensorType::get({}, type.getElementType());
      Value scalar = ConstantOp::create(builder, constant.getLoc(),
                                        attr.resizeSplat(scalarType));
      Value full =
          BroadcastOp::create(builder, constant.getLoc(), type, scalar);
      use.set(full);
    }
    if (constant->use_empty())
      constant.erase();
  }
  return success();
}

/// The copy that produces `value` through views read by nothing else: the
/// all-gather of ZeRO's updated slices, or the slice that cuts a parameter
/// out of a gathered bucket; null otherwise.
static Operation *gatheredCopy(Value value) {
  while (auto reshape = value.getDefiningOp<ReshapeOp>()) {
    if (!value.hasOneUse())
      return nullptr;
    value = reshape.getOperand();
  }
  Operation *def = value.getDefiningOp();
  if (!value.hasOneUse() || !isa_and_nonnull<AllGatherOp, SliceOp>(def))
    return nullptr;
  return def;
}

void sharc::updateInPlace(ModuleOp module) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step || !step.getBody().hasOneBlock())
    return;
  Block &block = step.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  Builder builder(module.getContext());
  DenseMap<Operation *, SmallVector<int64_t>> assigned;
  for (auto [r, value] : llvm::enumerate(ret.getOperands())) {
    // The argument this result replaces (same sharc.param / sharc.state).
    std::optional<unsigned> target;
    for (StringRef name :
         {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()})
      if (Attribute attr = step.getResultAttr(r, name))
        for (BlockArgument arg : block.getArguments())
          if (step.getArgAttr(arg.getArgNumber(), name) == attr)
            target = arg.getArgNumber();
    if (!target || !value.hasOneUse())
      continue;
    BlockArgument old = block.getArgument(*target);
    // A copy into the new value (ZeRO's gathered parameters) may write the
    // argument's memory once nothing reads the old value any more.
    if (Operation *copy = gatheredCopy(value)) {
      auto type = cast<RankedTensorType>(copy->getResult(0).getType());
      auto oldType = cast<RankedTensorType>(old.getType());
      if (copy->getBlock() == &block &&
          type.getElementType() == oldType.getElementType() &&
          type.getNumElements() == oldType.getNumElements() &&
          !assigned.count(copy) && !readFrom(copy, old, block, /*atOp=*/true))
        assigned[copy] = {static_cast<int64_t>(*target)};
      continue;
    }
    auto fusion = value.getDefiningOp<FusionOp>();
    if (!fusion)
      continue;
    if (old.getType() != value.getType() || !canOverwrite(fusion, old, block))
      continue;
    SmallVector<int64_t> &buffers = assigned[fusion];
    if (buffers.empty())
      buffers.assign(fusion->getNumResults(), -1);
    unsigned index = cast<OpResult>(value).getResultNumber();
    if (llvm::is_contained(buffers, static_cast<int64_t>(*target)))
      continue;
    buffers[index] = *target;
  }
  for (auto &[fusion, buffers] : assigned)
    fusion->setAttr("sharc.result_buffers",
                    builder.getDenseI64ArrayAttr(buffers));
}

namespace {
struct PrepareEmissionPass
    : sharc::impl::PrepareEmissionBase<PrepareEmissionPass> {
  void runOnOperation() override {
    if (failed(prepareForEmission(getOperation())))
      signalPassFailure();
  }
};

struct UpdateInPlacePass : sharc::impl::UpdateInPlaceBase<UpdateInPlacePass> {
  void runOnOperation() override { updateInPlace(getOperation()); }
};
} // namespace
