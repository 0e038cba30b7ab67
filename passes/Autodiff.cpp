//===- Autodiff.cpp - reverse-mode differentiation ------------------------===//
//
// The sharc-autodiff pass: adds `@F_grad`, which returns the loss of the
// forward function `@F` and the gradient of `loss_seed * loss` with respect
// to every trainable parameter (docs/training.md is the contract,
// docs/autodiff.md the design).
//
// The forward ops are cloned into the new function; then the ops on a path
// from a trainable parameter to the loss (the active ops) are visited in
// reverse order, each turning the adjoints of its results into adjoint
// contributions of its operands (AutodiffRules.cpp).  Contributions to one
// value are summed.  Forward ops the loss does not need are removed at the
// end.
//
//===----------------------------------------------------------------------===//

#include "passes/AutodiffRules.h"
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Regex.h"

namespace sharc {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

bool isScalarFloat(Type type) {
  return isFloatTensor(type) && cast<RankedTensorType>(type).getRank() == 0;
}

/// The `sharc.output` name of result `index`, or "#index" without one.
std::string outputName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(
          index, SharcDialect::getOutputAttrName()))
    return name.str();
  return llvm::formatv("#{0}", index).str();
}

/// The index of the loss among `func`'s results: the output named `loss`, or
/// the only scalar float output when `loss` is empty.
FailureOr<unsigned> findLoss(func::FuncOp func, StringRef loss) {
  unsigned count = func.getNumResults();
  auto names = [&](auto keep) {
    std::string list;
    for (unsigned i = 0; i < count; ++i)
      if (keep(i)) {
        if (!list.empty())
          list += ", ";
        list += outputName(func, i);
      }
    return list;
  };
  if (!loss.empty()) {
    for (unsigned i = 0; i < count; ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(
          i, SharcDialect::getOutputAttrName());
      if (!name || name.getValue() != loss)
        continue;
      if (!isScalarFloat(func.getResultTypes()[i]))
        return func.emitError()
               << "sharc-autodiff: the loss '" << loss
               << "' must be a scalar float, got " << func.getResultTypes()[i];
      return i;
    }
    return func.emitError()
           << "sharc-autodiff: '@" << func.getSymName()
           << "' has no output named '" << loss
           << "' (outputs: " << names([](unsigned) { return true; }) << ")";
  }
  SmallVector<unsigned> candidates;
  for (unsigned i = 0; i < count; ++i)
    if (isScalarFloat(func.getResultTypes()[i]))
      candidates.push_back(i);
  if (candidates.size() == 1)
    return candidates.front();
  if (candidates.empty())
    return func.emitError() << "sharc-autodiff: '@" << func.getSymName()
                            << "' has no scalar float output to use as the "
                               "loss";
  return func.emitError() << "sharc-autodiff: '@" << func.getSymName()
                          << "' has " << candidates.size()
                          << " scalar float outputs ("
                          << names([&](unsigned i) {
                               return llvm::is_contained(candidates, i);
                             })
                          << "); choose the loss with the 'loss' option";
}

/// The values of the forward body that lie on a path from a trainable
/// parameter to the loss: float values computed from a trainable parameter
/// (varied) that the loss depends on (useful).  Only these get adjoints.
DenseSet<Value> findActiveValues(Block &body, ArrayRef<Value> trainable,
                                 Value loss) {
  DenseSet<Value> varied(trainable.begin(), trainable.end());
  for (Operation &op : body)
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result.getType()))
          varied.insert(result);
  DenseSet<Value> useful{loss};
  for (Operation &op : llvm::reverse(body))
    if (llvm::any_of(op.getResults(),
                     [&](Value v) { return useful.contains(v); }))
      useful.insert(op.operand_begin(), op.operand_end());
  DenseSet<Value> active;
  for (Value v : varied)
    if (useful.contains(v))
      active.insert(v);
  return active;
}

struct AutodiffPass : sharc::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;
  void runOnOperation() override;
};

void AutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto forward = module.lookupSymbol<func::FuncOp>(function);
  if (!forward) {
    module.emitError() << "sharc-autodiff: no function '@" << function
                       << "' to differentiate";
    return signalPassFailure();
  }
  if (forward.isExternal() || !forward.getBody().hasOneBlock()) {
    forward.emitError() << "sharc-autodiff needs a single-block function body";
    return signalPassFailure();
  }
  std::string gradName = function + "_grad";
  if (module.lookupSymbol(gradName)) {
    forward.emitError() << "sharc-autodiff: '@" << gradName
                        << "' already exists";
    return signalPassFailure();
  }
  llvm::Regex freezeRegex(freeze);
  std::string regexError;
  if (!freeze.empty() && !freezeRegex.isValid(regexError)) {
    forward.emitError() << "sharc-autodiff: invalid freeze regex '" << freeze
                        << "': " << regexError;
    return signalPassFailure();
  }
  FailureOr<unsigned> lossIndex = findLoss(forward, loss);
  if (failed(lossIndex))
    return signalPassFailure();

  Block &body = forward.getBody().front();
  Value lossValue = body.getTerminator()->getOperand(*lossIndex);
  SmallVector<unsigned> trainable;
  SmallVector<Value> trainableArgs;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    ParamAttr param = getParamAttr(forward, i);
    if (!param || isBuffer(forward, i) ||
        (!freeze.empty() && (freezeRegex.match(param.getName()) ||
                             freezeRegex.match(param.getSource()))))
      continue;
    trainable.push_back(i);
    trainableArgs.push_back(body.getArgument(i));
  }
  if (trainable.empty())
    forward.emitWarning() << "sharc-autodiff: '@" << function
                          << "' has no trainable parameter";

  DenseSet<Value> active = findActiveValues(body, trainableArgs, lossValue);
  auto isActiveOp = [&](Operation &op) {
    return llvm::any_of(op.getResults(),
                        [&](Value v) { return active.contains(v); });
  };
  bool missingRule = false;
  for (Operation &op : body.without_terminator())
    if (isActiveOp(op) && !autodiff::hasGradientRule(&op)) {
      op.emitError() << "no gradient rule for '" << op.getName()
                     << "', which is on a path from a trainable parameter "
                        "to the loss";
      missingRule = true;
    }
  if (missingRule)
    return signalPassFailure();

  // The signature: @F's arguments and the seed; the loss and the gradients.
  MLIRContext *context = &getContext();
  Type lossType = lossValue.getType();
  SmallVector<Type> inputs(forward.getArgumentTypes());
  inputs.push_back(lossType);
  SmallVector<Type> results{lossType};
  for (unsigned i : trainable)
    results.push_back(forward.getArgumentTypes()[i]);
  // The buffers' new values (forward results marked sharc.param) follow the
  // gradients.
  SmallVector<unsigned> bufferResults;
  for (unsigned r = 0; r < forward.getNumResults(); ++r)
    if (forward.getResultAttr(r, SharcDialect::getParamAttrName())) {
      bufferResults.push_back(r);
      results.push_back(forward.getResultTypes()[r]);
    }
  OpBuilder builder(context);
  builder.setInsertionPointAfter(forward);
  auto grad = func::FuncOp::create(builder, forward.getLoc(), gradName,
                                   builder.getFunctionType(inputs, results));
  for (unsigned i = 0; i < forward.getNumArguments(); ++i)
    grad.setArgAttrs(i, forward.getArgAttrDict(i));
  grad.setArgAttr(forward.getNumArguments(), SharcDialect::getInputAttrName(),
                  builder.getStringAttr("loss_seed"));
  grad.setResultAttrs(0, forward.getResultAttrDict(*lossIndex));
  for (auto [index, arg] : llvm::enumerate(trainable))
    grad.setResultAttr(
        index + 1, SharcDialect::getGradAttrName(),
        builder.getStringAttr(getParamAttr(forward, arg).getName()));
  for (auto [index, r] : llvm::enumerate(bufferResults))
    grad.setResultAttr(
        1 + trainable.size() + index, SharcDialect::getParamAttrName(),
        forward.getResultAttr(r, SharcDialect::getParamAttrName()));

  // The forward computation.
  Block *entry = grad.addEntryBlock();
  IRMapping mapping;
  mapping.map(body.getArguments(), entry->getArguments().drop_back());
  builder.setInsertionPointToEnd(entry);
  SmallVector<std::pair<Operation *, Operation *>> cloned;
  for (Operation &op : body.without_terminator())
    cloned.push_back({&op, builder.clone(op, mapping)});

  // The adjoint sweep, keyed by the forward function's values.
  ImplicitLocOpBuilder b(forward.getLoc(), builder);
  DenseMap<Value, Value> adjoints;
  adjoints[lossValue] = entry->getArguments().back();
  for (auto [op, clone] : llvm::reverse(cloned)) {
    if (!isActiveOp(*op))
      continue;
    SmallVector<Value> resultGrads;
    for (Value result : op->getResults())
      resultGrads.push_back(adjoints.lookup(result));
    if (llvm::none_of(resultGrads, [](Value v) { return bool(v); }))
      continue;
    SmallVector<bool> wanted;
    for (Value operand : op->getOperands())
      wanted.push_back(active.contains(operand));
    b.setLoc(op->getLoc());
    SmallVector<Value> operandGrads;
    autodiff::buildOperandGrads(b, clone, resultGrads, wanted, operandGrads);
    for (auto [operand, contribution] :
         llvm::zip(op->getOperands(), operandGrads)) {
      if (!contribution)
        continue;
      Value &sum = adjoints[operand];
      sum =
          sum ? AddOp::create(b, sum, contribution).getResult() : contribution;
    }
  }

  b.setLoc(forward.getLoc());
  SmallVector<Value> returned{mapping.lookupOrDefault(lossValue)};
  for (unsigned i : trainable) {
    Value gradient = adjoints.lookup(body.getArgument(i));
    if (!gradient) {
      forward.emitWarning()
          << "sharc-autodiff: the loss '" << outputName(forward, *lossIndex)
          << "' does not depend on trainable parameter '"
          << getParamAttr(forward, i).getName() << "'; its gradient is zero";
      gradient = autodiff::buildSplat(
          b, cast<RankedTensorType>(body.getArgument(i).getType()), 0.0);
    }
    returned.push_back(gradient);
  }
  for (unsigned r : bufferResults)
    returned.push_back(
        mapping.lookupOrDefault(body.getTerminator()->getOperand(r)));
  func::ReturnOp::create(b, returned);

  // Drop the forward ops the loss and the gradients do not use, and keep one
  // of each constant (the rules build their small constants where needed).
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(entry->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  DenseMap<Attribute, Value> constants;
  for (Operation &op : llvm::make_early_inc_range(entry->getOperations()))
    if (auto constant = dyn_cast<ConstantOp>(op)) {
      auto [it, inserted] =
          constants.try_emplace(constant.getValue(), constant.getResult());
      if (!inserted) {
        constant.getResult().replaceAllUsesWith(it->second);
        constant.erase();
      }
    }
}

} // namespace
