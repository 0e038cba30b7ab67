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

#include "passes/Cost.h"

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

/// Finds the cuts of forward and the longest periodic run of segments;
/// with `inputsLive`, floating-point data inputs count as activations.
Layers findLayers(func::FuncOp func, const llvm::DenseSet<Operation *> &fwd,
                  bool inputsLive) {
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
  // A floating-point data input may be an activation too, alive from the
  // start to its last forward reader (a first layer reading it directly),
  // or context every layer reads (an attention mask).
  int live = 0;
  for (BlockArgument arg :
       inputsLive ? body.getArguments() : ArrayRef<BlockArgument>()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (sources.lookup(arg) != fromInput || !type ||
        !isa<FloatType>(type.getElementType()))
      continue;
    std::optional<unsigned> last;
    for (Operation *user : arg.getUsers())
      if (auto found = index.find(user); found != index.end())
        last = std::max(last.value_or(0), found->second);
    if (last) {
      ++live;
      --delta[*last];
    }
  }
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
    for (unsigned start = 0; start + 2 * period <= m; ++start) {
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

namespace {

/// What recomputing forward segments [first, last] takes: the values
/// backward reads from them (but the last one's cut, the next segment's
/// input, kept), the ops those depend on, and where the copies go.
struct Closure {
  /// The cut before the segments (their input, a checkpoint); null for the
  /// first segment, whose inputs are the function's arguments.
  Value input;
  SetVector<Value> needed;
  /// In program order.
  SmallVector<Operation *> ops;
  /// The first backward op that reads one of `needed`.
  Operation *firstReader = nullptr;
  int64_t bytes = 0;
  int64_t flops = 0;
};

/// The ops of segments [first, last] of `layers`: after cut first-1 (from
/// the start for segment 0) up to cut `last`.
std::pair<unsigned, unsigned> opRange(const Layers &layers, unsigned first,
                                      unsigned last) {
  return {first == 0 ? 0 : layers.cuts[first - 1] + 1, layers.cuts[last]};
}

Closure closureOf(const Layers &layers, const llvm::DenseSet<Operation *> &fwd,
                  unsigned first, unsigned last) {
  Closure closure;
  if (first > 0)
    closure.input = layers.ops[layers.cuts[first - 1]]->getResult(0);
  auto [from, to] = opRange(layers, first, last);
  for (unsigned i = from; i < to; ++i)
    for (Value result : layers.ops[i]->getResults())
      for (Operation *user : result.getUsers()) {
        if (fwd.contains(user) || user->getBlock() != layers.ops[i]->getBlock())
          continue;
        closure.needed.insert(result);
        if (!closure.firstReader || user->isBeforeInBlock(closure.firstReader))
          closure.firstReader = user;
      }
  llvm::DenseSet<Operation *> inRange, chosen;
  for (unsigned i = from; i <= to; ++i)
    inRange.insert(layers.ops[i]);
  SmallVector<Operation *> work;
  for (Value value : closure.needed) {
    work.push_back(value.getDefiningOp());
    closure.bytes += tensorBytes(value.getType());
  }
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!inRange.contains(op) || !chosen.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.push_back(def);
  }
  for (unsigned i = from; i < to; ++i)
    if (chosen.contains(layers.ops[i])) {
      closure.ops.push_back(layers.ops[i]);
      closure.flops += flopsOf(layers.ops[i]);
    }
  return closure;
}

/// Copies `closure`'s ops before its first backward reader and has backward
/// read the copies.
void recompute(const Closure &closure, const llvm::DenseSet<Operation *> &fwd,
               RecomputeSummary &summary) {
  OpBuilder builder(closure.firstReader);
  IRMapping mapping;
  for (Operation *op : closure.ops)
    builder.clone(*op, mapping);
  for (Value value : closure.needed)
    value.replaceUsesWithIf(mapping.lookup(value), [&](OpOperand &use) {
      return !fwd.contains(use.getOwner());
    });
  summary.recomputedOps += closure.ops.size();
  summary.recomputedBytes += closure.bytes;
  summary.recomputedFlops += closure.flops;
}

/// Keeps checkpoint `value` in host memory between forward and backward:
/// copied to the host after its last forward reader, back to the device
/// before its first backward reader (a recomputed copy, or a gradient),
/// which with every later backward reader reads the copy.  Returns the
/// bytes moved each way.
int64_t keepOnHost(Value value, const llvm::DenseSet<Operation *> &fwd) {
  Block *block = value.getParentBlock();
  Operation *lastForward = value.getDefiningOp(), *firstBackward = nullptr;
  SmallVector<OpOperand *> backward;
  for (OpOperand &use : value.getUses()) {
    Operation *user = block->findAncestorOpInBlock(*use.getOwner());
    if (!user)
      continue;
    if (fwd.contains(user)) {
      if (!lastForward || lastForward->isBeforeInBlock(user))
        lastForward = user;
      continue;
    }
    backward.push_back(&use);
    if (!firstBackward || user->isBeforeInBlock(firstBackward))
      firstBackward = user;
  }
  if (!firstBackward || !lastForward ||
      !lastForward->isBeforeInBlock(firstBackward))
    return 0;
  MLIRContext *context = value.getContext();
  OpBuilder builder(context);
  builder.setInsertionPointAfter(lastForward);
  auto out = TransferStartOp::create(builder, value.getLoc(), value,
                                     StorageAttr::get(context, Storage::host));
  Value onHost = WaitOp::create(builder, value.getLoc(), out.getFuture());
  builder.setInsertionPoint(firstBackward);
  auto in = TransferStartOp::create(builder, value.getLoc(), onHost,
                                    StorageAttr::get(context, Storage::device));
  Value back = WaitOp::create(builder, value.getLoc(), in.getFuture());
  for (OpOperand *use : backward)
    use->set(back);
  return tensorBytes(value.getType());
}

/// Keeps the inputs of `closures` that were recomputed in host memory
/// between forward and backward (keepOnHost).
void keepInputsOnHost(ArrayRef<Closure> closures,
                      const llvm::DenseSet<Operation *> &fwd,
                      RecomputeSummary &summary) {
  llvm::DenseSet<Value> done;
  for (const Closure &closure : closures)
    if (closure.input && !closure.needed.empty() &&
        done.insert(closure.input).second)
      summary.hostBytes += keepOnHost(closure.input, fwd);
}

/// The cheapest set of `items` (bytes saved, FLOPs) whose saving minus its
/// largest item's bytes (alive again while that item's backward runs) is at
/// least `need`: for each bound on the largest item, a 0/1 covering
/// knapsack solved exactly over the Pareto front of (saving, FLOPs).
std::optional<SmallVector<unsigned>>
cheapestCover(ArrayRef<std::pair<int64_t, int64_t>> items, int64_t need) {
  struct State {
    int64_t saved, flops;
    SmallVector<unsigned> chosen;
  };
  std::optional<State> best;
  SmallVector<int64_t> bounds;
  for (auto [bytes, flops] : items)
    bounds.push_back(bytes);
  llvm::sort(bounds);
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  for (int64_t bound : bounds) {
    int64_t target = std::max<int64_t>(need + bound, 0);
    SmallVector<State> front = {{0, 0, {}}};
    for (auto [i, item] : llvm::enumerate(items)) {
      if (item.first > bound)
        continue;
      SmallVector<State> next = front;
      for (const State &state : front) {
        State grown = state;
        grown.saved = std::min(target, state.saved + item.first);
        grown.flops += item.second;
        grown.chosen.push_back(i);
        next.push_back(std::move(grown));
      }
      // Keep the states no other saves as much for fewer FLOPs.
      llvm::sort(next, [](const State &a, const State &b) {
        return a.saved != b.saved ? a.saved > b.saved : a.flops < b.flops;
      });
      front.clear();
      for (State &state : next)
        if (front.empty() || state.flops < front.back().flops)
          front.push_back(std::move(state));
    }
    for (State &state : front)
      if (state.saved >= target && (!best || state.flops < best->flops))
        best = std::move(state);
  }
  if (!best)
    return std::nullopt;
  return best->chosen;
}

/// What the pass knows of a gradient function before rewriting it.
struct Analysis {
  llvm::DenseSet<Operation *> fwd;
  Layers layers;
  /// Its segments and activation memory filled in.
  RecomputeSummary summary;
};

/// The forward ops and layers of `func`, or an error; with `measure`, its
/// activation memory too (peakBefore, peakAfter).
FailureOr<Analysis> analyse(func::FuncOp func, bool measure = true) {
  Block &body = func.getBody().front();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret || ret.getNumOperands() == 0)
    return func.emitError() << "sharc-rematerialize: @" << func.getSymName()
                            << " returns no loss";
  Analysis analysis;
  analysis.fwd = forwardOps(body, ret.getOperand(0));
  // Data inputs as activations (a first layer reading the input) or as
  // context (a mask every layer reads): the reading whose layers cover more
  // of forward.
  auto covered = [](const Layers &layers) -> unsigned {
    if (layers.count < 2)
      return 0;
    unsigned last = layers.start + layers.count * layers.period - 1;
    return layers.cuts[last] -
           (layers.start == 0 ? 0 : layers.cuts[layers.start - 1] + 1);
  };
  analysis.layers = findLayers(func, analysis.fwd, /*inputsLive=*/true);
  Layers context = findLayers(func, analysis.fwd, /*inputsLive=*/false);
  if (covered(context) > covered(analysis.layers))
    analysis.layers = std::move(context);
  analysis.summary.segments = analysis.layers.cuts.size();
  if (measure)
    analysis.summary.peakBefore = analysis.summary.peakAfter =
        peakLiveBytes(func);
  return analysis;
}

/// Recomputes segments `chosen` (ascending) of `func`.
RecomputeSummary recomputeSegments(func::FuncOp func, ArrayRef<unsigned> chosen,
                                   bool host = false) {
  FailureOr<Analysis> analysed = analyse(func, /*measure=*/false);
  if (failed(analysed))
    return {};
  auto &[fwd, layers, summary] = *analysed;
  // Closures first: a copy of one segment reads no other's copies.
  SmallVector<Closure> closures;
  for (unsigned segment : chosen)
    closures.push_back(closureOf(layers, fwd, segment, segment));
  for (const Closure &closure : closures)
    if (!closure.needed.empty()) {
      recompute(closure, fwd, summary);
      ++summary.recomputedSegments;
    }
  if (host)
    keepInputsOnHost(closures, fwd, summary);
  summary.peakAfter = peakLiveBytes(func);
  return summary;
}

/// The segments whose recomputation copies something, with each one's
/// (bytes freed, FLOPs) appended to `items` if given.
SmallVector<unsigned>
recomputable(const Layers &layers, const llvm::DenseSet<Operation *> &fwd,
             SmallVectorImpl<std::pair<int64_t, int64_t>> *items = nullptr) {
  SmallVector<unsigned> segments;
  for (unsigned t = 0, m = layers.cuts.size(); t < m; ++t) {
    Closure closure = closureOf(layers, fwd, t, t);
    if (closure.needed.empty())
      continue;
    if (items)
      items->push_back({closure.bytes, closure.flops});
    segments.push_back(t);
  }
  return segments;
}

/// What recomputing `chosen` does to a copy of `func` (a trial: `func` is
/// left as it is).
RecomputeSummary trial(func::FuncOp func, ArrayRef<unsigned> chosen) {
  func::FuncOp copy = func.clone();
  RecomputeSummary result = recomputeSegments(copy, chosen);
  copy.erase();
  return result;
}

} // namespace

FailureOr<std::pair<int64_t, int64_t>>
sharc::activationMemoryRange(func::FuncOp func) {
  FailureOr<Analysis> analysed = analyse(func);
  if (failed(analysed))
    return failure();
  auto &[fwd, layers, summary] = *analysed;
  return std::make_pair(summary.peakBefore,
                        trial(func, recomputable(layers, fwd)).peakAfter);
}

FailureOr<RecomputeSummary> sharc::rematerializeLayers(func::FuncOp func,
                                                       bool host) {
  FailureOr<Analysis> analysed = analyse(func);
  if (failed(analysed))
    return failure();
  auto &[fwd, layers, summary] = *analysed;
  if (layers.count < 2)
    return summary;
  summary.layers = layers.count;
  SmallVector<Closure> closures;
  for (unsigned k = 0; k < layers.count; ++k) {
    unsigned first = layers.start + k * layers.period;
    closures.push_back(
        closureOf(layers, fwd, first, first + layers.period - 1));
  }
  for (const Closure &closure : closures)
    if (!closure.needed.empty()) {
      recompute(closure, fwd, summary);
      summary.recomputedSegments += layers.period;
    }
  if (host)
    keepInputsOnHost(closures, fwd, summary);
  summary.peakAfter = peakLiveBytes(func);
  return summary;
}

FailureOr<RecomputeSummary>
sharc::rematerializeWithin(func::FuncOp func, int64_t limit, bool host) {
  FailureOr<Analysis> analysed = analyse(func);
  if (failed(analysed))
    return failure();
  auto &[fwd, layers, summary] = *analysed;
  summary.limit = limit;
  if (summary.peakBefore <= limit)
    return summary;
  // Each segment alone: the bytes its recomputation frees at the turn
  // from forward to backward, and its FLOPs.
  SmallVector<std::pair<int64_t, int64_t>> items;
  SmallVector<unsigned> segmentOf = recomputable(layers, fwd, &items);
  SmallVector<unsigned> all(segmentOf);
  int64_t floor = trial(func, all).peakAfter;
  if (floor > limit)
    return func.emitError()
           << "sharc-rematerialize: the activation memory cannot fall to "
           << limit << " bytes: recomputing every one of the "
           << summary.segments << " segments leaves " << floor << " bytes, "
           << floor - limit << " bytes over";
  int64_t need = summary.peakBefore - limit;
  SmallVector<unsigned> chosen = all;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::optional<SmallVector<unsigned>> cover = cheapestCover(items, need);
    if (!cover)
      break;
    SmallVector<unsigned> segments;
    for (unsigned item : *cover)
      segments.push_back(segmentOf[item]);
    llvm::sort(segments);
    int64_t peak = trial(func, segments).peakAfter;
    if (peak <= limit) {
      chosen = segments;
      break;
    }
    need += peak - limit;
  }
  RecomputeSummary done = recomputeSegments(func, chosen, host);
  done.peakBefore = summary.peakBefore;
  done.limit = limit;
  return done;
}

namespace {
struct RematerializePass : sharc::impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;

  void runOnOperation() override {
    if (policy == "none")
      return;
    if (policy != "layers" && policy != "auto") {
      getOperation().emitError() << "sharc-rematerialize: policy must be "
                                    "none, layers or auto, not '"
                                 << policy << "'";
      return signalPassFailure();
    }
    if ((policy == "auto") != (limit > 0)) {
      getOperation().emitError()
          << "sharc-rematerialize: "
          << (policy == "auto" ? "policy=auto needs a limit in bytes"
                               : "limit applies to policy=auto only");
      return signalPassFailure();
    }
    auto func = getOperation().lookupSymbol<func::FuncOp>(function + "_grad");
    if (!func || func.isExternal() || !func.getBody().hasOneBlock()) {
      getOperation().emitError()
          << "sharc-rematerialize: no gradient function @" << function
          << "_grad of one block (run sharc-autodiff first)";
      return signalPassFailure();
    }
    FailureOr<RecomputeSummary> summary =
        policy == "auto" ? rematerializeWithin(func, limit, host)
                         : rematerializeLayers(func, host);
    if (failed(summary))
      return signalPassFailure();
    if (policy == "layers" && summary->layers < 2) {
      emitWarning(func.getLoc())
          << "sharc-rematerialize: no repeated layers found "
             "in forward; nothing is recomputed";
      return;
    }
    InFlightDiagnostic remark = emitRemark(func.getLoc())
                                << "sharc-rematerialize: ";
    if (policy == "layers")
      remark << summary->layers << " layers found; ";
    else if (summary->recomputedSegments == 0) {
      remark << "activation memory " << summary->peakBefore
             << " bytes is within " << summary->limit
             << " bytes; nothing is recomputed";
      return;
    } else
      remark << summary->recomputedSegments << " of " << summary->segments
             << " segments recomputed to fit " << summary->limit << " bytes; ";
    remark << "backward recomputes " << summary->recomputedOps
           << " forward ops (" << summary->recomputedFlops
           << " FLOPs) instead of keeping " << summary->recomputedBytes
           << " bytes of their values; activation memory "
           << summary->peakBefore << " -> " << summary->peakAfter << " bytes";
    if (host)
      remark << "; " << summary->hostBytes
             << " bytes of checkpoints kept in host memory";
  }
};
} // namespace
