//===- GatherParameters.cpp - sharc-gather-parameters ---------------------===//
//
// ZeRO (docs/zero.md): sharc-zero gathers every partitioned parameter (at
// stage 3 those above the persistence threshold; at stages 1 and 2 the fp32
// master weights of mixed precision) where the step starts, from the slice
// its argument holds.  Once the gradient function is inlined, this pass
// decides where each gathered parameter lives:
//
//   - at stage 3 a micro-batch loop (gradient accumulation) that reads a
//     gathered parameter gets a gather of its own at the start of its body,
//     placed there as below: each micro-batch gathers its parameters, as
//     each of DeepSpeed's forward-backward passes does, and nothing gathered
//     lives across micro-batches;
//   - a gathered parameter read only through casts to one type (the 16-bit
//     compute copy of mixed precision) is gathered in that type: the slice
//     is cast before the all-gather, so the whole fp32 parameter never
//     exists and the all-gather sends 16-bit elements;
//   - the readers of each gathered parameter, in program order, are split
//     into groups: a reader joins the previous one's group when the readers
//     in between read at most `max-reuse-distance` elements of other
//     gathered parameters (DeepSpeed's stage3_max_reuse_distance), and
//     starts a group of its own otherwise;
//   - each group gets its own all-gather just before its first reader (the
//     first group the original one), so that the memory plan frees the
//     whole parameter after the last reader of each group: forward and
//     backward gather it once each when they are far apart.  Below stage 3
//     the reuse distance is unbounded: the 16-bit copies stay for the step,
//     as DeepSpeed's 16-bit parameters do at stages 1 and 2.
//
// A gathered parameter is recomputed from arguments only (the slice, casts
// and views of it), so a second gather reads what the first did.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Schedule.h"

#include "ir/SharcOps.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>

namespace sharc {
#define GEN_PASS_DEF_GATHERPARAMETERS
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// One stage-3 gather: the ops that compute a whole parameter from its
/// slice argument, in program order (the packing and casts of the slice,
/// the all-gather, the views that unpack it).
struct GatherChain {
  SmallVector<Operation *> ops;
  /// The whole parameter (the last op's result).
  Value whole;
  /// Elements of the whole parameter.
  int64_t elements = 0;
};

/// The gather chain of `gather` when it gathers a partitioned parameter's
/// slice (an argument with `sharc.slice` and `sharc.param`, through
/// reshapes and casts) and is unpacked by views read by nothing else.
std::optional<GatherChain> chainOf(func::FuncOp func, AllGatherOp gather) {
  GatherChain chain;
  Value source = gather.getOperand();
  SmallVector<Operation *> packing;
  while (Operation *def = source.getDefiningOp()) {
    if (!isa<ReshapeOp, CastOp>(def) || !def->hasOneUse())
      return std::nullopt;
    packing.push_back(def);
    source = def->getOperand(0);
  }
  auto arg = dyn_cast<BlockArgument>(source);
  if (!arg || !getSliceAttr(func, arg.getArgNumber()) ||
      !getParamAttr(func, arg.getArgNumber()))
    return std::nullopt;
  chain.ops.assign(packing.rbegin(), packing.rend());
  chain.ops.push_back(gather);
  Value whole = gather.getResult();
  while (whole.hasOneUse() &&
         isa<ReshapeOp, SliceOp>(*whole.getUsers().begin())) {
    Operation *view = *whole.getUsers().begin();
    chain.ops.push_back(view);
    whole = view->getResult(0);
  }
  chain.whole = whole;
  chain.elements =
      getSliceAttr(func, arg.getArgNumber()).getWhole().getNumElements();
  return chain;
}

/// Rebuilds `chain` in element type `element` when every reader of the
/// whole parameter is a cast to that type, which then reads the new chain;
/// returns the chain (rebuilt or not).
GatherChain gatherInReadersType(GatherChain chain) {
  Value whole = chain.whole;
  if (whole.use_empty())
    return chain;
  Type element;
  for (Operation *user : whole.getUsers()) {
    auto cast = dyn_cast<CastOp>(user);
    Type to = cast ? elementTypeOf(cast.getResult()) : Type();
    if (!cast || !isa<FloatType>(to) || (element && to != element))
      return chain;
    element = to;
  }
  if (element == elementTypeOf(whole))
    return chain;
  // The first op reads the slice argument (or a cast of it).
  Operation *first = chain.ops.front();
  OpBuilder b(first);
  Value slice = first->getOperand(0);
  Value current = CastOp::create(
      b, first->getLoc(),
      cast<RankedTensorType>(slice.getType()).clone(element), slice);
  GatherChain rebuilt;
  rebuilt.elements = chain.elements;
  rebuilt.ops.push_back(current.getDefiningOp());
  for (Operation *op : chain.ops) {
    if (isa<CastOp>(op))
      continue;
    OperationState state(
        op->getLoc(), op->getName(), ValueRange{current},
        TypeRange{
            cast<RankedTensorType>(op->getResult(0).getType()).clone(element)},
        op->getAttrs());
    Operation *clone = b.create(state);
    rebuilt.ops.push_back(clone);
    current = clone->getResult(0);
  }
  rebuilt.whole = current;
  for (Operation *user : llvm::make_early_inc_range(whole.getUsers())) {
    user->getResult(0).replaceAllUsesWith(current);
    user->erase();
  }
  for (Operation *op : llvm::reverse(chain.ops))
    op->erase();
  return rebuilt;
}

} // namespace

/// Places the gathers of `chains`, whose whole parameters ops of `block`
/// (or ops nested in them) read: with `perMicroBatch`, each micro-batch
/// loop of `block` that reads a parameter gets a gather of its own in its
/// body, placed there in turn; then each gather moves to its first reader
/// in `block` and is repeated for each group of readers farther apart than
/// `maxReuseDistance`.
static void placeGathers(Block &block, SmallVector<GatherChain> chains,
                         int64_t maxReuseDistance, bool perMicroBatch) {
  if (perMicroBatch) {
    for (auto loop : block.getOps<MicroBatchLoopOp>()) {
      Block &body = loop.getBody().front();
      SmallVector<GatherChain> inner;
      for (GatherChain &chain : chains) {
        auto inLoop = [&](OpOperand &use) {
          return loop->isProperAncestor(use.getOwner());
        };
        if (llvm::none_of(chain.whole.getUses(), inLoop))
          continue;
        OpBuilder b(&body, body.begin());
        IRMapping mapping;
        GatherChain copy;
        copy.elements = chain.elements;
        for (Operation *op : chain.ops)
          copy.ops.push_back(b.clone(*op, mapping));
        copy.whole = mapping.lookup(chain.whole);
        chain.whole.replaceUsesWithIf(copy.whole, inLoop);
        inner.push_back(std::move(copy));
      }
      placeGathers(body, std::move(inner), maxReuseDistance, perMicroBatch);
    }
    // A gather read only in loops is gone.
    llvm::erase_if(chains, [](GatherChain &chain) {
      if (!chain.whole.use_empty())
        return false;
      for (Operation *op : llvm::reverse(chain.ops))
        op->erase();
      return true;
    });
  }

  // Each chain's readers (the ops of the block that read the whole
  // parameter), in program order, by position.
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = static_cast<int64_t>(i);
  SmallVector<SmallVector<Operation *>> readers(chains.size());
  SmallVector<SmallVector<int64_t>> at(chains.size());
  for (auto [c, chain] : llvm::enumerate(chains)) {
    llvm::SmallDenseSet<Operation *> seen;
    for (OpOperand &use : chain.whole.getUses())
      if (Operation *top = block.findAncestorOpInBlock(*use.getOwner());
          top && seen.insert(top).second)
        readers[c].push_back(top);
    llvm::sort(readers[c], [&](Operation *x, Operation *y) {
      return position[x] < position[y];
    });
    for (Operation *reader : readers[c])
      at[c].push_back(position[reader]);
  }
  // Elements of other gathered parameters read strictly between positions
  // `from` and `to` (each parameter counted once).
  auto distance = [&](size_t self, int64_t from, int64_t to) {
    int64_t total = 0;
    for (size_t c = 0; c < chains.size(); ++c) {
      if (c == self)
        continue;
      auto next = llvm::upper_bound(at[c], from);
      if (next != at[c].end() && *next < to)
        total += chains[c].elements;
    }
    return total;
  };

  for (auto [c, chain] : llvm::enumerate(chains)) {
    if (readers[c].empty())
      continue;
    // Groups of readers; each starts with the index of its first reader.
    SmallVector<size_t> groupStarts = {0};
    for (size_t k = 1; k < readers[c].size(); ++k)
      if (distance(c, at[c][k - 1], at[c][k]) > maxReuseDistance)
        groupStarts.push_back(k);
    // The first group: the original chain, moved to its first reader.
    // The code generator's report finds the gathers by their mark.
    Operation *firstReader = readers[c].front();
    for (Operation *op : chain.ops)
      if (isa<AllGatherOp>(op))
        op->setAttr("sharc.parameter_gather", UnitAttr::get(op->getContext()));
    for (Operation *op : chain.ops)
      op->moveBefore(firstReader);
    // Every later group: a copy of the chain before its first reader, read
    // by the group's readers.
    for (size_t g = 1; g < groupStarts.size(); ++g) {
      size_t begin = groupStarts[g];
      size_t end =
          g + 1 < groupStarts.size() ? groupStarts[g + 1] : readers[c].size();
      llvm::SmallDenseSet<Operation *> group(readers[c].begin() + begin,
                                             readers[c].begin() + end);
      OpBuilder b(readers[c][begin]);
      IRMapping mapping;
      for (Operation *op : chain.ops)
        b.clone(*op, mapping);
      Value again = mapping.lookup(chain.whole);
      chain.whole.replaceUsesWithIf(again, [&](OpOperand &use) {
        return group.contains(block.findAncestorOpInBlock(*use.getOwner()));
      });
    }
  }
}

LogicalResult sharc::gatherParameters(func::FuncOp func,
                                      int64_t maxReuseDistance) {
  auto stage = func->getAttrOfType<IntegerAttr>("sharc.zero_stage");
  if (!stage || stage.getInt() < 1 || func.isExternal())
    return success();
  // Stages 1 and 2 keep the gathered 16-bit copies of their partitioned
  // masters for the whole step, as DeepSpeed keeps its 16-bit parameters;
  // stage 3 gathers in each micro-batch, as DeepSpeed's forward and
  // backward of each micro-batch do.
  bool perMicroBatch = stage.getInt() >= 3;
  if (!perMicroBatch)
    maxReuseDistance = std::numeric_limits<int64_t>::max();
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "sharc-gather-parameters: '@"
                            << func.getSymName() << "' has more than one block";
  Block &block = func.getBody().front();
  SmallVector<GatherChain> chains;
  for (auto gather : llvm::make_early_inc_range(block.getOps<AllGatherOp>()))
    if (std::optional<GatherChain> chain = chainOf(func, gather))
      chains.push_back(gatherInReadersType(std::move(*chain)));
  placeGathers(block, std::move(chains), maxReuseDistance, perMicroBatch);
  return success();
}

namespace {
struct GatherParametersPass
    : sharc::impl::GatherParametersBase<GatherParametersPass> {
  using GatherParametersBase::GatherParametersBase;

  void runOnOperation() override {
    auto emitError = [&] { return getOperation().emitError(); };
    if (!OptionChecker(emitError).inRange("max-reuse-distance",
                                          maxReuseDistance, 0,
                                          TrainingOptions::kMaxBucketSize))
      return signalPassFailure();
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(gatherParameters(func, maxReuseDistance)))
        return signalPassFailure();
  }
};
} // namespace
