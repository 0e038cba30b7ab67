//===- DataParallel.cpp - sharc-data-parallel -----------------------------===//
//
// Makes the single-rank @train_step that sharc-optimizer builds run on N
// data-parallel ranks (docs/training.md, "Data parallelism"): the loss seed
// becomes 1/(GAS N), the complete local gradients (the `sharc.gradients` op)
// are summed over the ranks by all-reduces in buckets, and the reported loss
// is the mean over the ranks.  The ZeRO passes are its siblings: they turn
// the same `sharc.gradients` op into other collectives.
//
//===----------------------------------------------------------------------===//

#include "passes/Buckets.h"
#include "passes/Passes.h"
#include "passes/Schedule.h"

#include "ir/SharcOps.h"

namespace sharc {
#define GEN_PASS_DEF_DATAPARALLEL
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

/// Sums `grads` over `ranks` ranks in place, in buckets: consecutive
/// gradients of one element type, until a bucket would exceed `bucketSize`
/// elements (a larger gradient is a bucket of its own).  A bucket of several
/// gradients is flattened to 1-D, concatenated, all-reduced once, sliced and
/// reshaped back; a bucket of one is all-reduced as it is.
static void allReduceGradients(MathBuilder &math, MutableArrayRef<Value> grads,
                               int64_t ranks, int64_t bucketSize) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  auto reduceBucket = [&](MutableArrayRef<Value> bucket) {
    if (bucket.size() == 1) {
      bucket[0] = AllReduceOp::create(b, bucket[0], CollectiveKind::sum, ranks);
      return;
    }
    SmallVector<Value> flat;
    for (Value grad : bucket) {
      auto type = cast<RankedTensorType>(grad.getType());
      flat.push_back(
          type.getRank() == 1
              ? grad
              : ReshapeOp::create(
                    b, type.clone(ArrayRef<int64_t>{type.getNumElements()}),
                    grad));
    }
    Value sum = AllReduceOp::create(b, ConcatOp::create(b, flat, 0),
                                    CollectiveKind::sum, ranks);
    int64_t offset = 0;
    for (Value &grad : bucket) {
      auto type = cast<RankedTensorType>(grad.getType());
      int64_t size = type.getNumElements();
      Value part =
          SliceOp::create(b, type.clone(ArrayRef<int64_t>{size}), sum,
                          ArrayRef<int64_t>{offset}, ArrayRef<int64_t>{1});
      grad = type.getRank() == 1 ? part : ReshapeOp::create(b, type, part);
      offset += size;
    }
  };
  for (auto [begin, end] : bucketRanges(
           grads.size(),
           [&](size_t i) {
             return cast<RankedTensorType>(grads[i].getType()).getNumElements();
           },
           [&](size_t i) { return elementTypeOf(grads[i]); }, bucketSize))
    reduceBucket(grads.slice(begin, end - begin));
}

/// Gives every call of a gradient function in `step` the loss seed of
/// `worldSize` ranks: 1/(G N), G the count of the micro-batch loop around the
/// call (1 outside one).
static LogicalResult scaleLossSeeds(func::FuncOp step, int64_t worldSize) {
  ModuleOp module = step->getParentOfType<ModuleOp>();
  WalkResult result = step.walk([&](func::CallOp call) {
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    unsigned last = call.getNumOperands();
    if (!callee || last == 0)
      return WalkResult::advance();
    auto name = callee.getArgAttrOfType<StringAttr>(
        last - 1, SharcDialect::getInputAttrName());
    if (!name || name.getValue() != "loss_seed")
      return WalkResult::advance();
    // The seed is sharc-optimizer's constant, or sharc-loss-scale's product
    // of it and the loss scale.
    OpOperand *seedUse = &call->getOpOperand(last - 1);
    if (auto product = seedUse->get().getDefiningOp<MulOp>())
      seedUse = &product->getOpOperand(0);
    Value seed = seedUse->get();
    if (!seed.getDefiningOp<ConstantOp>()) {
      call.emitError() << "sharc-data-parallel: the loss seed of this call "
                          "is neither a constant nor a constant times the "
                          "loss scale";
      return WalkResult::interrupt();
    }
    int64_t microBatches = 1;
    if (auto loop = call->getParentOfType<MicroBatchLoopOp>())
      microBatches = loop.getCount();
    ImplicitLocOpBuilder b(seed.getLoc(), call);
    b.setInsertionPointAfterValue(seed);
    MathBuilder math(b);
    seedUse->set(math.constant(elementTypeOf(seed),
                               lossSeedValue(microBatches, worldSize)));
    if (seed.use_empty())
      seed.getDefiningOp()->erase();
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult sharc::applyDataParallel(ModuleOp module,
                                       const TrainingOptions &options) {
  auto emitError = [&] { return module.emitError(); };
  OptionChecker check(emitError);
  if (!check.inRange("world-size", options.worldSize, 1,
                     TrainingOptions::kMaxWorldSize) ||
      !check.inRange("reduce-bucket-size", options.reduceBucketSize, 1,
                     TrainingOptions::kMaxBucketSize))
    return failure();
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError() << "sharc-data-parallel needs '@train_step' "
                                 "(run sharc-optimizer first)";
  SmallVector<GradientsOp> markers;
  step.walk([&](GradientsOp op) { markers.push_back(op); });
  if (markers.size() > 1)
    return markers[1].emitError() << "sharc-data-parallel: a step with more "
                                     "than one 'sharc.gradients'";
  int64_t ranks = options.worldSize;
  // The step states the ranks it was made for (the code generator reads it).
  step->setAttr("sharc.world_size",
                Builder(module.getContext()).getI64IntegerAttr(ranks));
  if (ranks == 1) {
    for (GradientsOp marker : markers) {
      marker.replaceAllUsesWith(marker.getValues());
      marker.erase();
    }
    return success();
  }
  if (failed(scaleLossSeeds(step, ranks)))
    return failure();

  auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
  std::optional<unsigned> lossResult;
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r)
    if (auto name = step.getResultAttrOfType<StringAttr>(
            r, SharcDialect::getOutputAttrName());
        name && name.getValue() == "loss")
      lossResult = r;
  if (!lossResult)
    return step.emitError() << "sharc-data-parallel: '@train_step' has no "
                               "'loss' result";

  // The collectives go where the gradients are complete (after the loss
  // when there is nothing to train).
  Value loss = ret.getOperand(*lossResult);
  ImplicitLocOpBuilder b(step.getLoc(), ret);
  if (!markers.empty())
    b.setInsertionPointAfter(markers.front());
  else
    b.setInsertionPointAfterValue(loss);
  MathBuilder math(b);
  if (!markers.empty()) {
    GradientsOp marker = markers.front();
    SmallVector<Operation *> update;
    for (Operation *op = marker->getNextNode(); op != ret;
         op = op->getNextNode())
      update.push_back(op);
    SmallVector<Value> grads(marker.getValues());
    allReduceGradients(math, grads, ranks, options.reduceBucketSize);
    marker.replaceAllUsesWith(grads);
    marker.erase();
    // The clipping norm summed as ZeRO sums it (sharc-zero): stage 0 and
    // stages 1 to 3 clip with the same bits.
    if (!update.empty()) {
      b.setInsertionPoint(update.front());
      sumAsPartitioned(b, grads, update, ranks);
    }
  }
  Value total = AllReduceOp::create(b, loss, CollectiveKind::sum, ranks);
  Value mean = math.div(
      total, math.constant(elementTypeOf(loss), static_cast<double>(ranks)));
  ret.setOperand(*lossResult, mean);
  // Buffers (BatchNorm's running statistics) take rank 0's new values, as
  // PyTorch's DistributedDataParallel broadcasts rank 0's buffers before
  // each forward: every rank normalizes with its own batch statistics, and
  // the running statistics follow rank 0's.
  b.setInsertionPoint(ret);
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r)
    if (std::optional<unsigned> arg = getUpdatedArgument(step, r);
        arg && isBuffer(step, *arg))
      ret.setOperand(r,
                     BroadcastFromOp::create(b, ret.getOperand(r), 0, ranks));
  return success();
}

namespace {
struct DataParallelPass
    : WithDataParallelOptions<sharc::impl::DataParallelBase<DataParallelPass>> {
  DataParallelPass() = default;
  DataParallelPass(const DataParallelPass &other)
      : WithDataParallelOptions(other) {}

  void runOnOperation() override {
    TrainingOptions options;
    applyDataParallelOptions(options);
    if (failed(applyDataParallel(getOperation(), options)))
      signalPassFailure();
  }
};
} // namespace

std::unique_ptr<Pass>
sharc::createDataParallelPass(const TrainingOptions &options) {
  auto pass = std::make_unique<DataParallelPass>();
  pass->setDataParallelOptions(options);
  return pass;
}
