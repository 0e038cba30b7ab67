//===- Zero.cpp - sharc-zero ----------------------------------------------===//
//
// ZeRO stages 1 to 3 (docs/zero.md): each of the N data-parallel ranks
// keeps the optimizer state of one slice of every trainable parameter and
// updates only that slice.  Runs after sharc-optimizer (and
// sharc-loss-scale), before sharc-data-parallel, on the `sharc.gradients`
// hand-off:
//
//   - each parameter of n elements is viewed as [N, s] with s = ceil(n / N)
//     (zero padding at the end): rank r owns row r, elements [r s, r s + s);
//   - the complete local gradients are reduce-scattered in buckets (rows of
//     consecutive parameters side by side, at most reduce-bucket-size
//     elements), so each rank receives the sum of its rows;
//   - the update (every op after the hand-off that reads a gradient, a
//     parameter or its state, elementwise) is rebuilt on the slices; a full
//     reduction of a gradient (the clipping norm, the fp16 overflow test)
//     becomes the reduction of the slice followed by an all-reduce, the
//     padding adding nothing;
//   - the optimizer state arguments and results become the [s] slices, and
//     the updated parameter slices are all-gathered (in the same buckets)
//     into the full parameters.
//
// Stage 2 is the same step: its reduce-scatters are moved into backward,
// each to just after the last op its bucket reads, by
// sharc-schedule-collectives (after the gradient function is inlined), so
// that each bucket's full gradients die there and the arena never holds all
// of them.  Its buckets follow the order backward completes the gradients
// (the reverse of the parameters'), as DeepSpeed's do.
//
// Stage 3 partitions the parameters above the persistence threshold too:
// such a parameter's argument is this rank's [s] slice (`sharc.slice`),
// all-gathered where the step starts into the whole parameter that forward
// and backward read, and its result is the updated slice (no gather at the
// end); sharc-gather-parameters later moves each gather to its readers and
// repeats it where a reuse is far.  The smaller parameters are handled as
// at stage 2.
//
//===----------------------------------------------------------------------===//

#include "passes/Buckets.h"
#include "passes/Passes.h"
#include "passes/Schedule.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/DenseSet.h"

#include <numeric>

namespace sharc {
#define GEN_PASS_DEF_ZERO
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// `value` as `type` (a view; `value` itself when it has that type).
Value reshape(ImplicitLocOpBuilder &b, RankedTensorType type, Value value) {
  return value.getType() == type ? value : ReshapeOp::create(b, type, value);
}

/// One trainable parameter's place in the partition.
struct Partitioned {
  /// The parameter's argument, its gradient (a `sharc.gradients` result)
  /// and its optimizer state arguments.
  BlockArgument param;
  Value grad;
  SmallVector<BlockArgument, 2> state;
  RankedTensorType type;
  /// Elements, and elements per rank (n <= N s).
  int64_t elements = 0, slice = 0;
  /// ZeRO stage 3: the parameter itself is partitioned (its argument holds
  /// this rank's slice, all-gathered where the step starts); otherwise it
  /// is whole on every rank and its updated slices are all-gathered at the
  /// end of the step.
  bool partitioned = false;

  /// The layout of a tensor of `tensor`'s type over `ranks` ranks.
  void setType(RankedTensorType tensor, int64_t ranks) {
    type = tensor;
    elements = type.getNumElements();
    slice = (elements + ranks - 1) / ranks;
  }
};

/// Builds the [N, s] view of `value` (of `part`'s type): flattened, padded
/// with zeros to N s elements.
Value rowsOf(MathBuilder &math, Value value, const Partitioned &part,
             int64_t ranks) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  Type element = part.type.getElementType();
  Value flat =
      reshape(b, RankedTensorType::get({part.elements}, element), value);
  int64_t padding = ranks * part.slice - part.elements;
  if (padding > 0) {
    auto padType = RankedTensorType::get({padding}, element);
    Value zeros = ConstantOp::create(
        b, DenseElementsAttr::get(padType, b.getZeroAttr(element)));
    flat = ConcatOp::create(b, ValueRange{flat, zeros}, 0);
  }
  return reshape(b, RankedTensorType::get({ranks, part.slice}, element), flat);
}

/// The inverse of rowsOf: `rows`, the [N, s] view of `part`, flattened, the
/// padding cut off, in the parameter's shape.
Value wholeOf(ImplicitLocOpBuilder &b, Value rows, const Partitioned &part,
              int64_t ranks) {
  Type element = part.type.getElementType();
  Value flat =
      reshape(b, RankedTensorType::get({ranks * part.slice}, element), rows);
  if (ranks * part.slice != part.elements)
    flat = SliceOp::create(b, RankedTensorType::get({part.elements}, element),
                           flat, ArrayRef<int64_t>{0}, ArrayRef<int64_t>{1});
  return reshape(b, part.type, flat);
}

/// The whole parameter of `part` from its slices on every rank: `mine`
/// (this rank's [s] slice) all-gathered into [N, s], then wholeOf.
Value gatherWhole(ImplicitLocOpBuilder &b, const Partitioned &part, Value mine,
                  int64_t ranks) {
  Value rows = reshape(
      b, RankedTensorType::get({1, part.slice}, part.type.getElementType()),
      mine);
  return wholeOf(b, AllGatherOp::create(b, rows, ranks), part, ranks);
}

/// True when everything before `marker` (forward and backward) reads `param`
/// only as its 16-bit compute copy: each use is an operand of a call whose
/// callee casts that argument to f16 or bf16 and reads it no other way (what
/// sharc-mixed-precision makes of an fp32 parameter).
bool readAsSixteenBits(ModuleOp module, Block &entry, Operation *marker,
                       BlockArgument param) {
  bool read = false;
  for (OpOperand &use : param.getUses()) {
    Operation *top = entry.findAncestorOpInBlock(*use.getOwner());
    if (!top || !top->isBeforeInBlock(marker))
      continue;
    auto call = dyn_cast<func::CallOp>(use.getOwner());
    auto callee =
        call ? module.lookupSymbol<func::FuncOp>(call.getCallee()) : nullptr;
    if (!callee || callee.isExternal())
      return false;
    BlockArgument arg = callee.getArgument(use.getOperandNumber());
    if (arg.use_empty())
      return false;
    for (Operation *user : arg.getUsers()) {
      auto cast = dyn_cast<CastOp>(user);
      Type to = cast ? elementTypeOf(cast.getResult()) : Type();
      if (!to || !(to.isF16() || to.isBF16()))
        return false;
    }
    read = true;
  }
  return read;
}

/// Splits `parts`, in the order of `order` (indices into `parts`), into
/// buckets: consecutive parameters of one element type while N times their
/// slices fit in `bucketSize` elements (a larger one is a bucket of its
/// own).  Each bucket is the list of its parameters' indices.
SmallVector<SmallVector<size_t>> buckets(ArrayRef<Partitioned> parts,
                                         ArrayRef<size_t> order, int64_t ranks,
                                         int64_t bucketSize) {
  SmallVector<SmallVector<size_t>> result;
  for (auto [begin, end] : bucketRanges(
           order.size(),
           [&](size_t i) { return ranks * parts[order[i]].slice; },
           [&](size_t i) { return parts[order[i]].type.getElementType(); },
           bucketSize))
    result.emplace_back(order.begin() + begin, order.begin() + end);
  return result;
}

/// The rebuilt update: values of the step (after the hand-off) and their
/// slices, and the partial sums of full reductions.
///
/// `everyRank` (stage 0): the "slices" are the [N, s] rows of every rank,
/// which this rank holds whole after the all-reduce; a full sum's partial is
/// the [N] vector of every rank's partial sum, added up in rank order where
/// its value is read -- the order ZeRO's all-reduce of the partials adds
/// them in, so that stage 0 rounds the clipping norm as stages 1 to 3 do.
/// Only the sums are rebuilt then; an op that cannot be is left as it is.
class Partitioner {
public:
  Partitioner(MathBuilder &math, int64_t ranks, bool everyRank = false)
      : math(math), ranks(ranks), everyRank(everyRank) {}

  void map(Value full, Value slice) { slices[full] = slice; }
  Value sliceOf(Value full) const { return slices.lookup(full); }

  /// Rebuilds `op` on the slices of its operands, or fails (after an
  /// error) for an op that cannot be partitioned.  Ops that read neither a
  /// slice nor a partial sum are left alone.
  LogicalResult partition(Operation *op);

  /// The ops whose slices replaced them (erased once unused).
  ArrayRef<Operation *> replaced() const { return done; }

private:
  /// The sum over the ranks of the partial sum that stands for `full`.
  Value total(Value full);

  MathBuilder &math;
  int64_t ranks;
  bool everyRank;
  DenseMap<Value, Value> slices;
  /// A full reduction of a partitioned value, and what the op reducing it
  /// and the ops adding such reductions up (or widening them) give on this
  /// rank's slices: a partial sum, summed over the ranks where a value is
  /// needed (one all-reduce for the clipping norm's sum of squares, however
  /// many parameters it adds up).
  DenseMap<Value, Value> partials, totals;
  SmallVector<Operation *> done;
};

Value Partitioner::total(Value full) {
  Value &sum = totals[full];
  if (sum)
    return sum;
  ImplicitLocOpBuilder &b = math.getBuilder();
  Value partial = partials.lookup(full);
  if (!everyRank)
    return sum = AllReduceOp::create(b, partial, CollectiveKind::sum, ranks);
  // ((p_0 + p_1) + p_2) + ..., as the communicator folds the ranks' parts.
  auto type = tensorType(full);
  for (int64_t r = 0; r < ranks; ++r) {
    Value part =
        SliceOp::create(b, RankedTensorType::get({1}, type.getElementType()),
                        partial, ArrayRef<int64_t>{r}, ArrayRef<int64_t>{1});
    part = reshape(b, type, part);
    sum = sum ? math.add(sum, part) : part;
  }
  return sum;
}

LogicalResult Partitioner::partition(Operation *op) {
  auto isSlice = [&](Value v) { return slices.count(v) != 0; };
  auto isPartial = [&](Value v) { return partials.count(v) != 0; };
  if (llvm::none_of(op->getOperands(), isSlice) &&
      llvm::none_of(op->getOperands(), isPartial))
    return success();
  ImplicitLocOpBuilder &b = math.getBuilder();
  b.setInsertionPoint(op);
  if (auto reduce = dyn_cast<ReduceOp>(op)) {
    // A full reduction of a partitioned value: the slice's, a partial sum.
    // The padding is zero, and the update's reductions (sums of squares,
    // sums of g * 0) add nothing for it.
    auto type = tensorType(reduce.getOperand());
    if (!isSlice(reduce.getOperand()) || reduce.getKind() != ReduceKind::sum ||
        static_cast<int64_t>(reduce.getAxes().size()) != type.getRank()) {
      if (everyRank)
        return success();
      return op->emitError() << "sharc-zero: only full sums of a "
                                "partitioned value can be partitioned";
    }
    // Every rank's slice is a row: the sums of the rows (each as the sum of
    // a slice of its own) are the ranks' partial sums.
    partials[reduce.getResult()] =
        ReduceOp::create(b, slices.lookup(reduce.getOperand()), ReduceKind::sum,
                         ArrayRef<int64_t>{everyRank ? 1 : 0});
    done.push_back(op);
    return success();
  }
  // Partial sums stay partial through widening casts and sums of them.
  auto cast = dyn_cast<CastOp>(op);
  bool widening = cast && isPartial(cast.getOperand()) &&
                  isa<FloatType>(elementTypeOf(cast.getOperand())) &&
                  isa<FloatType>(elementTypeOf(cast.getResult())) &&
                  elementTypeOf(cast.getResult()).getIntOrFloatBitWidth() >=
                      elementTypeOf(cast.getOperand()).getIntOrFloatBitWidth();
  auto add = dyn_cast<AddOp>(op);
  if (widening) {
    partials[op->getResult(0)] = math.cast(partials.lookup(cast.getOperand()),
                                           elementTypeOf(cast.getResult()));
    done.push_back(op);
    return success();
  }
  if (add && isPartial(add.getLhs()) && isPartial(add.getRhs())) {
    partials[op->getResult(0)] =
        math.add(partials.lookup(add.getLhs()), partials.lookup(add.getRhs()));
    done.push_back(op);
    return success();
  }
  // Any other use of a partial sum reads its total.
  for (OpOperand &use : op->getOpOperands())
    if (isPartial(use.get()))
      use.set(total(use.get()));
  if (llvm::none_of(op->getOperands(), isSlice))
    return success();
  if (!isFusibleElementwiseOp(op) || op->getNumResults() != 1) {
    if (everyRank)
      return success();
    return op->emitError() << "sharc-zero: cannot partition '" << op->getName()
                           << "', which reads a gradient, "
                           << "a parameter or its optimizer state";
  }
  // Elementwise: the same op on the slices; other operands must be scalars.
  SmallVector<Value> operands;
  SmallVector<int64_t> shape;
  for (Value operand : op->getOperands()) {
    Value slice = slices.lookup(operand);
    if (!slice && tensorType(operand).getRank() != 0 && everyRank)
      return success();
    if (!slice && tensorType(operand).getRank() != 0)
      return op->emitError() << "sharc-zero: '" << op->getName()
                             << "' combines a partitioned value with a "
                                "full tensor of type "
                             << operand.getType();
    operands.push_back(slice ? slice : operand);
    if (slice)
      shape.assign(tensorType(slice).getShape().begin(),
                   tensorType(slice).getShape().end());
  }
  auto resultType = tensorType(op->getResult(0)).clone(shape);
  OperationState state(op->getLoc(), op->getName(), operands,
                       TypeRange{resultType}, op->getAttrs());
  Operation *clone = b.create(state);
  slices[op->getResult(0)] = clone->getResult(0);
  done.push_back(op);
  return success();
}

/// Gradient accumulation from stage 2 on: each gradient of `marker` is a
/// result of `loop` that sums, over the micro-batches, a per-micro-batch
/// gradient (`carried + g`).  The reduce-scatters move into the loop body,
/// on each micro-batch's gradients (`scatter` builds them), and the loop
/// carries and sums this rank's slices instead, from zeros: no rank holds an
/// accumulated full gradient.
LogicalResult
scatterInLoop(MathBuilder &math, MicroBatchLoopOp loop, GradientsOp marker,
              ArrayRef<Partitioned> parts,
              llvm::function_ref<SmallVector<Value>(ArrayRef<Value>)> scatter,
              Partitioner &partitioner) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  YieldOp yield = loop.getYield();
  SmallVector<unsigned> carried;
  SmallVector<Value> perMicro;
  SmallVector<Operation *> sums;
  for (auto [i, part] : llvm::enumerate(parts)) {
    auto result = dyn_cast<OpResult>(marker.getValues()[i]);
    if (!result || result.getOwner() != loop)
      return marker.emitError() << "sharc-zero: with gradient accumulation "
                                   "every gradient must come out of the "
                                   "micro-batch loop";
    unsigned index = result.getResultNumber();
    BlockArgument sum = loop.getCarriedArgs()[index];
    auto add = yield.getOperand(index).getDefiningOp<AddOp>();
    Value grad;
    if (add && add.getLhs() == sum)
      grad = add.getRhs();
    else if (add && add.getRhs() == sum)
      grad = add.getLhs();
    if (!grad || !sum.hasOneUse() || grad.getType() != part.type)
      return loop.emitError()
             << "sharc-zero: the micro-batch loop does not "
                "sum gradient '"
             << cast<StringAttr>(marker.getParams()[i]).getValue()
             << "' over its micro-batches";
    carried.push_back(index);
    perMicro.push_back(grad);
    sums.push_back(add);
  }
  b.setInsertionPoint(yield);
  SmallVector<Value> slices = scatter(perMicro);
  for (auto [i, part] : llvm::enumerate(parts)) {
    unsigned index = carried[i];
    auto sliceType =
        RankedTensorType::get({part.slice}, part.type.getElementType());
    BlockArgument sum = loop.getCarriedArgs()[index];
    sum.setType(sliceType);
    yield->setOperand(index, math.add(sum, slices[i]));
    sums[i]->erase();
    OpOperand &init = loop.getInitsMutable()[index];
    Operation *zeros = init.get().getDefiningOp();
    b.setInsertionPoint(loop);
    init.set(ConstantOp::create(
        b, DenseElementsAttr::get(sliceType,
                                  b.getZeroAttr(sliceType.getElementType()))));
    if (zeros && zeros->use_empty())
      zeros->erase();
    b.setInsertionPoint(yield);
    loop.getResult(index).setType(sliceType);
    partitioner.map(part.grad, loop.getResult(index));
  }
  b.setInsertionPointAfter(marker);
  return success();
}

} // namespace

void sharc::sumAsPartitioned(ImplicitLocOpBuilder &b, ArrayRef<Value> grads,
                             ArrayRef<Operation *> update, int64_t ranks) {
  MathBuilder math(b);
  Partitioner partitioner(math, ranks, /*everyRank=*/true);
  for (Value grad : grads) {
    Partitioned part;
    part.setType(tensorType(grad), ranks);
    partitioner.map(grad, rowsOf(math, grad, part, ranks));
  }
  for (Operation *op : update)
    (void)partitioner.partition(op);
  // The stage-0 sums (and what only they read) are gone; the elementwise
  // ops rebuilt on the rows that feed no sum are left to canonicalization.
  for (Operation *op : llvm::reverse(partitioner.replaced()))
    if (op->use_empty())
      op->erase();
}

LogicalResult sharc::applyZero(ModuleOp module,
                               const TrainingOptions &options) {
  auto emitError = [&] { return module.emitError(); };
  OptionChecker check(emitError);
  if (!check.inRange("zero-stage", options.zeroStage, 0,
                     TrainingOptions::kMaxZeroStage) ||
      !check.inRange("world-size", options.worldSize, 1,
                     TrainingOptions::kMaxWorldSize) ||
      !check.inRange("reduce-bucket-size", options.reduceBucketSize, 1,
                     TrainingOptions::kMaxBucketSize) ||
      !check.inRange("allgather-bucket-size", options.allgatherBucketSize, 1,
                     TrainingOptions::kMaxBucketSize))
    return failure();
  // Stage 3's knobs, in elements.
  for (auto [name, value] :
       {std::pair("param-persistence-threshold",
                  options.paramPersistenceThreshold),
        std::pair("max-reuse-distance", options.maxReuseDistance),
        std::pair("prefetch-bucket-size", options.prefetchBucketSize),
        std::pair("max-live-parameters", options.maxLiveParameters)})
    if (!check.inRange(name, value, 0, TrainingOptions::kMaxBucketSize))
      return failure();
  int64_t ranks = options.worldSize;
  if (options.zeroStage == 0)
    return success();
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError() << "sharc-zero needs '@train_step' (run "
                                 "sharc-optimizer first)";
  Builder builder(module.getContext());
  step->setAttr("sharc.zero_stage",
                builder.getI64IntegerAttr(options.zeroStage));
  SmallVector<GradientsOp> markers;
  step.walk([&](GradientsOp op) { markers.push_back(op); });
  if (markers.size() > 1)
    return markers[1].emitError() << "sharc-zero: a step with more than one "
                                     "'sharc.gradients'";
  // One rank owns everything: nothing to partition.
  if (ranks == 1 || markers.empty())
    return success();
  GradientsOp marker = markers.front();
  if (marker->getParentOp() != step)
    return marker.emitError() << "sharc-zero: the gradients must be complete "
                                 "in the step's body (not in a loop)";
  Block &entry = step.getBody().front();
  // From stage 2 on, with gradient accumulation, each micro-batch's
  // gradients are reduce-scattered in the micro-batch loop and the loop
  // sums the slices.
  MicroBatchLoopOp loop;
  if (options.zeroStage >= 2)
    for (Value grad : marker.getValues())
      if (auto owner = grad.getDefiningOp<MicroBatchLoopOp>()) {
        if (loop && owner != loop)
          return marker.emitError() << "sharc-zero: gradients of more than "
                                       "one micro-batch loop";
        loop = owner;
      }

  // Each gradient's parameter and optimizer state.
  SmallVector<Partitioned> parts;
  for (auto [grad, nameAttr] :
       llvm::zip(marker.getResults(), marker.getParams())) {
    StringRef name = cast<StringAttr>(nameAttr).getValue();
    Partitioned part;
    part.grad = grad;
    for (BlockArgument arg : entry.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (ParamAttr param = getParamAttr(step, i);
          param && param.getName() == name)
        part.param = arg;
      if (auto state = step.getArgAttrOfType<StateAttr>(
              i, SharcDialect::getStateAttrName());
          state && state.getParam() == name)
        part.state.push_back(arg);
    }
    if (!part.param)
      return marker.emitError()
             << "sharc-zero: no argument is parameter '" << name << "'";
    part.setType(tensorType(part.param), ranks);
    // Stage 3 partitions the parameters above the threshold (DeepSpeed
    // keeps the smaller ones whole); stages 1 and 2 partition the fp32
    // master weights of mixed precision (a parameter forward reads only as
    // its 16-bit compute copy), whose 16-bit copies are gathered whole.
    part.partitioned =
        options.zeroStage >= 3
            ? part.elements > options.paramPersistenceThreshold
            : readAsSixteenBits(module, entry, marker, part.param);
    parts.push_back(part);
  }

  // The ops of the update, before anything is inserted.
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<Operation *> update;
  for (Operation *op = marker->getNextNode(); op != ret; op = op->getNextNode())
    update.push_back(op);

  ImplicitLocOpBuilder b(step.getLoc(), marker);
  MathBuilder math(b);
  Partitioner partitioner(math, ranks);
  auto sliceAttr = [&](RankedTensorType whole) {
    return SliceAttr::get(module.getContext(), whole, ranks);
  };
  // Stage 3: a partitioned parameter's argument is this rank's slice; where
  // the step starts, the slices are all-gathered (one parameter per
  // all-gather) into the whole parameter that forward and backward read.
  // sharc-schedule-collectives later moves each gather to its first reader
  // and gathers again where a reuse is far (docs/zero.md).
  b.setInsertionPointToStart(&entry);
  for (Partitioned &part : parts) {
    if (!part.partitioned)
      continue;
    Type element = part.type.getElementType();
    auto sliceType = RankedTensorType::get({part.slice}, element);
    part.param.setType(sliceType);
    step.setArgAttr(part.param.getArgNumber(), SharcDialect::getSliceAttrName(),
                    sliceAttr(part.type));
    Value whole = gatherWhole(b, part, part.param, ranks);
    // Forward and backward (before the hand-off) read the whole parameter,
    // the update its slice.
    Operation *gathered = whole.getDefiningOp();
    part.param.replaceUsesWithIf(whole, [&](OpOperand &use) {
      Operation *top = entry.findAncestorOpInBlock(*use.getOwner());
      return top && gathered->isBeforeInBlock(top) &&
             top->isBeforeInBlock(marker);
    });
    partitioner.map(part.param, part.param);
  }
  b.setInsertionPointAfter(marker);
  // Reduce-scatter the gradients; each rank's slice of each parameter.
  // Stage 2's buckets follow backward, which completes the gradients about
  // in the reverse order of the parameters.
  SmallVector<size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  if (options.zeroStage >= 2)
    std::reverse(order.begin(), order.end());
  // This rank's [s] slice of each part's gradient, for the full gradients
  // `grads` (one per part), built at the builder's insertion point.
  auto scatter = [&](ArrayRef<Value> grads) {
    SmallVector<Value> slices(parts.size());
    for (ArrayRef<size_t> bucketParts :
         buckets(parts, order, ranks, options.reduceBucketSize)) {
      SmallVector<Value> rows;
      for (size_t i : bucketParts)
        rows.push_back(rowsOf(math, grads[i], parts[i], ranks));
      Value bucket =
          rows.size() == 1 ? rows.front() : ConcatOp::create(b, rows, 1);
      Value mine =
          ReduceScatterOp::create(b, bucket, CollectiveKind::sum, ranks);
      int64_t offset = 0;
      for (size_t i : bucketParts) {
        Type element = parts[i].type.getElementType();
        Value slice = mine;
        if (bucketParts.size() > 1)
          slice = SliceOp::create(
              b, RankedTensorType::get({1, parts[i].slice}, element), mine,
              ArrayRef<int64_t>{0, offset}, ArrayRef<int64_t>{1, 1});
        slices[i] =
            reshape(b, RankedTensorType::get({parts[i].slice}, element), slice);
        offset += parts[i].slice;
      }
    }
    return slices;
  };
  if (!loop) {
    SmallVector<Value> grads;
    for (const Partitioned &part : parts)
      grads.push_back(part.grad);
    for (auto [part, slice] : llvm::zip(parts, scatter(grads)))
      partitioner.map(part.grad, slice);
  } else if (failed(scatterInLoop(math, loop, marker, parts, scatter,
                                  partitioner))) {
    return failure();
  }
  for (Partitioned &part : parts) {
    auto sliceType =
        RankedTensorType::get({part.slice}, part.type.getElementType());
    if (!part.partitioned) {
      Value rows = rowsOf(math, part.param, part, ranks);
      Value mine = ShardOp::create(b, rows, ranks);
      partitioner.map(part.param, reshape(b, sliceType, mine));
    }
    // The optimizer state holds this rank's slice only.
    for (BlockArgument state : part.state) {
      if (state.getType() != part.type)
        return step.emitError()
               << "sharc-zero: optimizer state of type " << state.getType()
               << " for parameter of type " << part.type;
      state.setType(sliceType);
      step.setArgAttr(state.getArgNumber(), SharcDialect::getSliceAttrName(),
                      sliceAttr(part.type));
      partitioner.map(state, state);
    }
  }

  // Rebuild the update on the slices.
  for (Operation *op : update)
    if (failed(partitioner.partition(op)))
      return failure();

  // State results are the slices; the new parameter slices are gathered.
  b.setInsertionPoint(ret);
  SmallVector<Value> results(ret.getOperands());
  SmallVector<Value> newSlices(parts.size());
  // The result that is each parameter's new value.
  SmallVector<std::optional<unsigned>> paramResult(parts.size());
  for (auto [r, value] : llvm::enumerate(results)) {
    std::optional<unsigned> updated = getUpdatedArgument(step, r);
    auto part = llvm::find_if(parts, [&](const Partitioned &p) {
      return updated && (p.param.getArgNumber() == *updated ||
                         llvm::any_of(p.state, [&](BlockArgument s) {
                           return s.getArgNumber() == *updated;
                         }));
    });
    Value slice = partitioner.sliceOf(value);
    if (part == parts.end()) {
      if (slice)
        return ret.emitError() << "sharc-zero: result " << r
                               << " is partitioned but updates no parameter "
                                  "or optimizer state";
      continue;
    }
    if (!slice)
      slice = partitioner.sliceOf(entry.getArgument(*updated));
    if (part->param.getArgNumber() == *updated && !part->partitioned) {
      newSlices[part - parts.begin()] = slice;
      paramResult[part - parts.begin()] = r;
    } else {
      results[r] = slice;
    }
  }
  // The parameters kept whole get their updated slices back.
  SmallVector<size_t> paramOrder;
  for (auto [i, part] : llvm::enumerate(parts))
    if (!part.partitioned)
      paramOrder.push_back(i);
  for (ArrayRef<size_t> bucketParts :
       buckets(parts, paramOrder, ranks, options.allgatherBucketSize)) {
    SmallVector<Value> rows;
    for (size_t i : bucketParts) {
      if (!newSlices[i])
        return ret.emitError() << "sharc-zero: the step returns no new value "
                                  "of a partitioned parameter";
      rows.push_back(
          reshape(b,
                  RankedTensorType::get({1, parts[i].slice},
                                        parts[i].type.getElementType()),
                  newSlices[i]));
    }
    Value mine = rows.size() == 1 ? rows.front() : ConcatOp::create(b, rows, 1);
    Value all = AllGatherOp::create(b, mine, ranks);
    int64_t offset = 0;
    for (size_t i : bucketParts) {
      const Partitioned &part = parts[i];
      Type element = part.type.getElementType();
      Value columns = all;
      if (bucketParts.size() > 1)
        columns = SliceOp::create(
            b, RankedTensorType::get({ranks, part.slice}, element), all,
            ArrayRef<int64_t>{0, offset}, ArrayRef<int64_t>{1, 1});
      results[*paramResult[i]] = wholeOf(b, columns, part, ranks);
      offset += part.slice;
    }
  }
  ret->setOperands(results);
  for (Operation *op : llvm::reverse(partitioner.replaced()))
    if (op->use_empty())
      op->erase();
  marker.replaceAllUsesWith(marker.getValues());
  marker.erase();
  step.setFunctionType(FunctionType::get(
      module.getContext(), entry.getArgumentTypes(), ret.getOperandTypes()));
  return success();
}

namespace {
struct ZeroPass : WithDataParallelOptions<sharc::impl::ZeroBase<ZeroPass>> {
  ZeroPass() = default;
  ZeroPass(const ZeroPass &other) : WithDataParallelOptions(other) {}

  void runOnOperation() override {
    TrainingOptions options;
    applyDataParallelOptions(options);
    if (failed(applyZero(getOperation(), options)))
      signalPassFailure();
  }
};
} // namespace

std::unique_ptr<Pass> sharc::createZeroPass(const TrainingOptions &options) {
  auto pass = std::make_unique<ZeroPass>();
  pass->setDataParallelOptions(options);
  return pass;
}
