//===- Rematerialize.cpp - sharc-rematerialize ----------------------------===//
//
// Activation checkpointing as a rewrite of the gradient function: the forward
// values backward reads inside each repeated layer are not kept from forward
// to backward but computed again, from the layer's input, just before the
// layer's backward first reads one of them.  The layers are found in the
// graph's structure (no annotation): the forward values that are, at their
// definition, the only activation alive (the residual stream of a
// transformer) cut forward into segments, and the longest run of segments
// that repeats with a period marks the layers (docs/recompute.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SetVector.h"

#include "mlir/IR/IRMapping.h"

namespace sharc {
#define GEN_PASS_DEF_REMATERIALIZE
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// The forward ops of `body`: those the loss (the first result) depends on.
llvm::DenseSet<Operation *> forwardOps(Block &body, Value loss) {
  llvm::DenseSet<Operation *> forward;
  SmallVector<Operation *> work;
  if (Operation *def = loss.getDefiningOp())
    work.push_back(def);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (op->getBlock() != &body || !forward.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.push_back(def);
  }
  return forward;
}

/// A structural signature of `op`: its name, attributes, operand count and
/// result types (the same in every layer of a repeated block).
llvm::hash_code signatureOf(Operation *op) {
  llvm::hash_code hash = llvm::hash_combine(
      op->getName().getAsOpaquePointer(),
      op->getAttrDictionary().getAsOpaquePointer(), op->getNumOperands());
  for (Type type : op->getResultTypes())
    hash = llvm::hash_combine(hash, type.getAsOpaquePointer());
  return hash;
}

/// What the structure of one gradient function gives.
struct Layers {
  /// The forward ops in program order.
  SmallVector<Operation *> ops;
  /// The index in `ops` of the op whose result is each cut (ascending).
  SmallVector<unsigned> cuts;
  /// The repeated run: segments [start, start + period * count).  Segment t
  /// holds the ops after cut t-1 up to cut t.
  unsigned start = 0, period = 0, count = 0;
};

/// Finds the cuts of forward and the longest periodic run of segments.
Layers findLayers(func::FuncOp func, const llvm::DenseSet<Operation *> &fwd) {
  Block &body = func.getBody().front();
  Layers layers;
  DenseMap<Operation *, unsigned> index;
  for (Operation &op : body)
    if (fwd.contains(&op)) {
      index[&op] = layers.ops.size();
      layers.ops.push_back(&op);
    }
  // Activations: floating-point values computed from both a data input
  // (`sharc.input`) and a parameter.  The rest is static: computed from
  // parameters alone (a cast parameter, a position table), from the data
  // alone (an attention mask, the targets), or not floating point; it does
  // not cut forward.
  enum : unsigned { fromInput = 1, fromParam = 2 };
  DenseMap<Value, unsigned> sources;
  for (BlockArgument arg : body.getArguments()) {
    unsigned index = arg.getArgNumber();
    if (func.getArgAttr(index, SharcDialect::getInputAttrName()))
      sources[arg] = fromInput;
    else if (func.getArgAttr(index, SharcDialect::getParamAttrName()))
      sources[arg] = fromParam;
  }
  llvm::DenseSet<Value> isStatic;
  for (Operation *op : layers.ops) {
    unsigned from = 0;
    for (Value operand : op->getOperands())
      from |= sources.lookup(operand);
    for (Value result : op->getResults()) {
      sources[result] = from;
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (from != (fromInput | fromParam) || !type ||
          !isa<FloatType>(type.getElementType()))
        isStatic.insert(result);
    }
  }
  // Live activations after each op: an activation is live from its
  // definition to its last forward reader.
  unsigned n = layers.ops.size();
  SmallVector<int> delta(n + 1, 0);
  SmallVector<unsigned> lastUse(n, 0);
  for (auto [i, op] : llvm::enumerate(layers.ops)) {
    lastUse[i] = i;
    for (Value result : op->getResults()) {
      if (isStatic.contains(result) || isa<ConstantOp>(op))
        continue;
      unsigned last = i;
      for (Operation *user : result.getUsers())
        if (auto found = index.find(user); found != index.end())
          last = std::max(last, found->second);
      lastUse[i] = std::max(lastUse[i], last);
      if (last > i) {
        ++delta[i];
        --delta[last];
      }
    }
  }
  int live = 0;
  for (unsigned i = 0; i < n; ++i) {
    live += delta[i];
    // A cut: the only activation alive after op i is its (one) result.
    Operation *op = layers.ops[i];
    if (live == 1 && op->getNumResults() == 1 &&
        !isStatic.contains(op->getResult(0)) && lastUse[i] > i)
      layers.cuts.push_back(i);
  }
  // Segment signatures, then the longest run repeating with some period
  // (ties: the smaller period, then the earlier start).
  // (Static ops do not count: the first layer may compute an attention
  // mask the others read.)
  SmallVector<llvm::hash_code> segments;
  unsigned begin = 0;
  for (unsigned cut : layers.cuts) {
    llvm::hash_code hash = llvm::hash_value(0);
    for (unsigned i = begin; i <= cut; ++i)
      if (llvm::any_of(layers.ops[i]->getResults(),
                       [&](Value v) { return !isStatic.contains(v); }))
        hash = llvm::hash_combine(hash, signatureOf(layers.ops[i]));
    segments.push_back(hash);
    begin = cut + 1;
  }
  unsigned m = segments.size(), best = 0;
  for (unsigned period = 1; 2 * period <= m; ++period)
    for (unsigned start = 1; start + 2 * period <= m; ++start) {
      unsigned length = period;
      while (start + length < m &&
             segments[start + length] == segments[start + length % period])
        ++length;
      unsigned count = length / period;
      if (count >= 2 && count * period > best) {
        best = count * period;
        layers.start = start;
        layers.period = period;
        layers.count = count;
      }
    }
  return layers;
}

} // namespace

FailureOr<RecomputeSummary> sharc::rematerializeLayers(func::FuncOp func) {
  RecomputeSummary summary;
  Block &body = func.getBody().front();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret || ret.getNumOperands() == 0)
    return func.emitError() << "sharc-rematerialize: @" << func.getSymName()
                            << " returns no loss";
  llvm::DenseSet<Operation *> fwd = forwardOps(body, ret.getOperand(0));
  Layers layers = findLayers(func, fwd);
  if (layers.count < 2)
    return summary;
  summary.layers = layers.count;
  OpBuilder builder(func.getContext());
  for (unsigned k = 0; k < layers.count; ++k) {
    unsigned first = layers.start + k * layers.period;
    unsigned last = first + layers.period - 1;
    unsigned from = layers.cuts[first - 1] + 1, to = layers.cuts[last];
    // The layer's values backward reads, but its output (the next layer's
    // input, kept).
    SetVector<Value> needed;
    Operation *firstReader = nullptr;
    for (unsigned i = from; i < to; ++i)
      for (Value result : layers.ops[i]->getResults())
        for (Operation *user : result.getUsers()) {
          if (fwd.contains(user) || user->getBlock() != &body)
            continue;
          needed.insert(result);
          if (!firstReader || user->isBeforeInBlock(firstReader))
            firstReader = user;
        }
    if (needed.empty())
      continue;
    // The layer's ops those values depend on, in program order.
    llvm::DenseSet<Operation *> inLayer;
    for (unsigned i = from; i <= to; ++i)
      inLayer.insert(layers.ops[i]);
    llvm::DenseSet<Operation *> chosen;
    SmallVector<Operation *> work;
    for (Value value : needed)
      work.push_back(value.getDefiningOp());
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!inLayer.contains(op) || !chosen.insert(op).second)
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          work.push_back(def);
    }
    builder.setInsertionPoint(firstReader);
    IRMapping mapping;
    for (unsigned i = from; i < to; ++i)
      if (chosen.contains(layers.ops[i])) {
        builder.clone(*layers.ops[i], mapping);
        ++summary.recomputedOps;
      }
    for (Value value : needed) {
      Value copy = mapping.lookup(value);
      // Backward's readers (the copies read copies).
      value.replaceUsesWithIf(
          copy, [&](OpOperand &use) { return !fwd.contains(use.getOwner()); });
      auto type = cast<RankedTensorType>(value.getType());
      summary.recomputedBytes +=
          type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
    }
  }
  return summary;
}

namespace {
struct RematerializePass : sharc::impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;

  void runOnOperation() override {
    if (policy == "none")
      return;
    if (policy != "layers") {
      getOperation().emitError() << "sharc-rematerialize: policy must be "
                                    "none or layers, not '"
                                 << policy << "'";
      return signalPassFailure();
    }
    auto func = getOperation().lookupSymbol<func::FuncOp>(function + "_grad");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      getOperation().emitError()
          << "sharc-rematerialize: no gradient function @" << function
          << "_grad of one block (run sharc-autodiff first)";
      return signalPassFailure();
    }
    FailureOr<RecomputeSummary> summary = rematerializeLayers(func);
    if (failed(summary))
      return signalPassFailure();
    if (summary->layers < 2)
      emitWarning(func.getLoc())
          << "sharc-rematerialize: no repeated layers found "
             "in forward; nothing is recomputed";
    else
      emitRemark(func.getLoc())
          << "sharc-rematerialize: " << summary->layers
          << " layers found; backward recomputes " << summary->recomputedOps
          << " forward ops instead of "
          << "keeping " << summary->recomputedBytes << " bytes of their values";
  }
};
} // namespace
