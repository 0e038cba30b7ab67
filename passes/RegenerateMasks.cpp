//===- RegenerateMasks.cpp - sharc-regenerate-masks -----------------------===//
//
// Dropout's keep masks are pure functions of the step counter and the batch
// rows (sharc.dropout_mask, runtime/Random.h): drawing one again costs a few
// integer multiplies per element, keeping it from forward to backward one
// byte per element for the whole step.  This pass makes backward draw its
// own copy (docs/passes.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace sharc {
#define GEN_PASS_DEF_REGENERATEMASKS
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// The ops of `body` that depend on `seed`: backward's.
llvm::DenseSet<Operation *> dependents(Block &body, Value seed) {
  llvm::DenseSet<Operation *> found;
  SmallVector<Value> work{seed};
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      if (top && found.insert(top).second)
        llvm::append_range(work, top->getResults());
    }
  return found;
}

void regenerateMasks(func::FuncOp func) {
  unsigned numArgs = func.getNumArguments();
  if (func.isExternal() || numArgs == 0)
    return;
  auto seedName = func.getArgAttrOfType<StringAttr>(
      numArgs - 1, SharcDialect::getInputAttrName());
  if (!seedName || seedName.getValue() != "loss_seed")
    return;
  Block &body = func.getBody().front();
  llvm::DenseSet<Operation *> backward =
      dependents(body, body.getArgument(numArgs - 1));
  for (auto mask : llvm::make_early_inc_range(body.getOps<DropoutMaskOp>())) {
    Operation *first = nullptr;
    for (Operation *user : mask->getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      if (backward.contains(top) && (!first || top->isBeforeInBlock(first)))
        first = top;
    }
    if (!first)
      continue;
    OpBuilder builder(first);
    Operation *copy = builder.clone(*mask);
    mask.getResult().replaceUsesWithIf(copy->getResult(0), [&](OpOperand &use) {
      return backward.contains(body.findAncestorOpInBlock(*use.getOwner()));
    });
  }
}

struct RegenerateMasksPass
    : sharc::impl::RegenerateMasksBase<RegenerateMasksPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      regenerateMasks(func);
  }
};

} // namespace
