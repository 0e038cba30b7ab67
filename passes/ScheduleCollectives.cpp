//===- ScheduleCollectives.cpp - sharc-schedule-collectives ---------------===//
//
// Makes the overlap of communication with computation explicit in the IR:
// every all-reduce becomes a start, which returns a `!sharc.future`, and a
// wait, which gives the result.  The start moves up to where its data is
// complete and the wait down to where its result is first read; the code
// generator emits each where it stands (docs/passes.md).  At ZeRO stage 2
// each gradient reduce-scatter becomes a start and a wait too: the start
// moves up to where its bucket is complete, so that backward frees each
// bucket's full gradients as it goes and overlaps the reduction.
// This runs on kernels (after sharc-fuse), the unit the emitted program runs
// in order.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Schedule.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/MapVector.h"

#include <functional>
#include <limits>

namespace sharc {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

/// Moves `op` up to just after the last op of its block that defines one of
/// its operands (to the start of the block if none does).
static void hoist(Operation *op) {
  Block *block = op->getBlock();
  Operation *last = nullptr;
  for (Value operand : op->getOperands()) {
    Operation *def = operand.getDefiningOp();
    if (def && def->getBlock() == block &&
        (!last || last->isBeforeInBlock(def)))
      last = def;
  }
  if (last)
    op->moveAfter(last);
  else
    op->moveBefore(&block->front());
}

/// Moves `start` (a collective) and the ops that pack its operand (reshapes
/// and concats read by nothing else), producers first, up to just after what
/// they read.
static void hoistWithPacking(Operation *start) {
  SmallVector<Operation *> chain;
  std::function<void(Operation *)> collect = [&](Operation *op) {
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (def && def->getBlock() == start->getBlock() &&
          isa<ReshapeOp, ConcatOp>(def) && def->hasOneUse() &&
          !def->hasAttr("sharc.fuse_into"))
        collect(def);
    }
    chain.push_back(op);
  };
  collect(start);
  for (Operation *op : chain)
    hoist(op);
}

/// The first op of `wait`'s block that reads its result: a user, or the op
/// of the block that contains one (a micro-batch loop, which reads it before
/// its first iteration); the terminator if none.  (An op computed inside
/// another kernel, `sharc.fuse_into`, runs later than it stands, but as an
/// operand its value must still be defined before it.)
static Operation *firstReader(WaitOp wait) {
  Block &block = *wait->getBlock();
  Operation *first = block.getTerminator();
  for (Operation *user : wait.getResult().getUsers())
    if (Operation *top = block.findAncestorOpInBlock(*user);
        top && top->isBeforeInBlock(first))
      first = top;
  return first;
}

void sharc::scheduleCollectives(func::FuncOp func, bool overlap) {
  SmallVector<AllReduceOp> reduces;
  func.walk([&](AllReduceOp op) { reduces.push_back(op); });
  SmallVector<std::pair<AllReduceStartOp, WaitOp>> pairs;
  for (AllReduceOp reduce : reduces) {
    OpBuilder builder(reduce);
    auto start =
        AllReduceStartOp::create(builder, reduce.getLoc(), reduce.getOperand(),
                                 reduce.getKind(), reduce.getRanks());
    auto wait = WaitOp::create(builder, reduce.getLoc(), start.getFuture());
    reduce.replaceAllUsesWith(wait.getResult());
    reduce.erase();
    pairs.emplace_back(start, wait);
  }
  if (!overlap)
    return;
  // Each wait sinks to its first reader; then the starts, in program order,
  // move up with their packing.  (In this order a collective of another's
  // result starts where that result's wait has sunk to; moving a start up
  // never passes the wait of its own future, which only sinks.)
  for (auto [start, wait] : pairs) {
    Operation *reader = firstReader(wait);
    if (wait->isBeforeInBlock(reader))
      wait->moveBefore(reader);
  }
  for (auto [start, wait] : pairs)
    hoistWithPacking(start);
}

void sharc::scheduleGradientScatters(func::FuncOp func, bool overlap) {
  auto stage = func->getAttrOfType<IntegerAttr>("sharc.zero_stage");
  if (!stage || stage.getInt() < 2)
    return;
  SmallVector<ReduceScatterOp> scatters;
  func.walk([&](ReduceScatterOp op) { scatters.push_back(op); });
  SmallVector<std::pair<ReduceScatterStartOp, WaitOp>> pairs;
  for (ReduceScatterOp scatter : scatters) {
    OpBuilder builder(scatter);
    auto start = ReduceScatterStartOp::create(
        builder, scatter.getLoc(), scatter.getOperand(), scatter.getKind(),
        scatter.getRanks());
    auto wait = WaitOp::create(builder, scatter.getLoc(), start.getFuture());
    scatter.replaceAllUsesWith(wait.getResult());
    scatter.erase();
    hoistWithPacking(start);
    pairs.emplace_back(start, wait);
  }
  // A started reduce-scatter reads its bucket until its wait: one bucket is
  // in flight while backward computes the next, as in DeepSpeed's stage 2,
  // so the wait sinks to the next bucket's start (or the first reader of
  // the slices, if that comes first); without overlap it follows its start.
  llvm::sort(pairs,
             [](auto a, auto b) { return a.first->isBeforeInBlock(b.first); });
  for (auto [k, pair] : llvm::enumerate(pairs)) {
    auto [start, wait] = pair;
    if (!overlap) {
      wait->moveAfter(start);
      continue;
    }
    Operation *until = firstReader(wait);
    if (k + 1 < pairs.size() && pairs[k + 1].first->isBeforeInBlock(until))
      until = pairs[k + 1].first;
    wait->moveBefore(until);
  }
}

/// Moves `op`, with the ops that compute its operands and are read by
/// nothing else (the packing of a gather: the cast and reshape of a slice),
/// producers first, to just before `before`; false (nothing moved) when an
/// operand is computed after `before` by an op that other ops read.
static bool moveWithPacking(Operation *op, Operation *before) {
  SmallVector<Operation *> chain;
  std::function<bool(Operation *)> collect = [&](Operation *user) {
    for (Value operand : user->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || def->isBeforeInBlock(before))
        continue;
      if (def->getBlock() != user->getBlock() || !def->hasOneUse() ||
          !collect(def))
        return false;
    }
    chain.push_back(user);
    return true;
  };
  if (!collect(op))
    return false;
  for (Operation *member : chain)
    member->moveBefore(before);
  return true;
}

/// Prefetches the parameter gathers of one block (`pairs`, in program
/// order) as DeepSpeed's stage 3 does (docs/zero.md): after the wait of each
/// gather, the gathers that follow start, in order, while the elements they
/// add are fewer than the smaller of `prefetchBucketSize` and
/// `maxLiveParameters` less the elements gathered and not yet released
/// there.  A gather of a parameter whose earlier gather is still live there
/// is not prefetched (DeepSpeed skips a parameter that is available; sharc
/// released that copy by the reuse distance and gathers it again later).
static void prefetchGathers(ArrayRef<std::pair<AllGatherStartOp, WaitOp>> pairs,
                            Block &block, int64_t prefetchBucketSize,
                            int64_t maxLiveParameters) {
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = static_cast<int64_t>(i);
  size_t n = pairs.size();
  // Each gather's elements (the whole parameter's, as DeepSpeed counts), the
  // position where it starts (that of the wait it is prefetched after, or its
  // own) and that of its last reader.
  SmallVector<int64_t> elements(n), startAt(n, -1), releaseAt(n);
  SmallVector<BlockArgument> parameter(n);
  for (auto [k, pair] : llvm::enumerate(pairs)) {
    auto [start, wait] = pair;
    parameter[k] = getGatheredSliceArgument(start);
    elements[k] = parameter[k]
                      ? getSliceAttr(parameter[k].getOwner()->getParentOp(),
                                     parameter[k].getArgNumber())
                            .getWhole()
                            .getNumElements()
                      : cast<RankedTensorType>(wait.getResult().getType())
                            .getNumElements();
    releaseAt[k] = position[getLastGatheredReader(wait.getResult(), block)];
  }
  // Gather j holds its parameter at position `at`.
  auto live = [&](size_t j, int64_t at) {
    return startAt[j] >= 0 && startAt[j] <= at && releaseAt[j] >= at;
  };
  for (size_t k = 0; k < n; ++k) {
    int64_t here = position[pairs[k].second];
    if (startAt[k] < 0)
      startAt[k] = here;
    int64_t available = 0;
    for (size_t j = 0; j < n; ++j)
      if (live(j, here))
        available += elements[j];
    int64_t limit = std::min(prefetchBucketSize, maxLiveParameters - available);
    Operation *after = pairs[k].second;
    int64_t prefetching = 0;
    for (size_t m = k + 1; m < n && prefetching < limit; ++m) {
      if (startAt[m] >= 0 ||
          llvm::any_of(llvm::seq<size_t>(0, m), [&](size_t j) {
            return parameter[j] && parameter[j] == parameter[m] &&
                   live(j, here);
          }))
        continue;
      if (!moveWithPacking(pairs[m].first, after->getNextNode()))
        break;
      after = pairs[m].first;
      startAt[m] = here;
      prefetching += elements[m];
    }
  }
}

void sharc::scheduleParameterGathers(func::FuncOp func, bool overlap,
                                     int64_t prefetchBucketSize,
                                     int64_t maxLiveParameters) {
  if (!overlap)
    return;
  // Below stage 3 the gathered 16-bit copies stay for the step (DeepSpeed
  // gathers them all at the end of the step before): every one is
  // prefetched.
  auto stage = func->getAttrOfType<IntegerAttr>("sharc.zero_stage");
  if (!stage || stage.getInt() < 3)
    prefetchBucketSize = maxLiveParameters =
        std::numeric_limits<int64_t>::max();
  SmallVector<AllGatherOp> gathers;
  func.walk([&](AllGatherOp op) {
    if (op->hasAttr("sharc.parameter_gather"))
      gathers.push_back(op);
  });
  // Each gather becomes a start and a wait where it stands (just before its
  // first reader); then the starts are prefetched, block by block (the
  // step's, a micro-batch loop's body).
  llvm::MapVector<Block *, SmallVector<std::pair<AllGatherStartOp, WaitOp>>>
      pairs;
  for (AllGatherOp gather : gathers) {
    OpBuilder builder(gather);
    auto start = AllGatherStartOp::create(
        builder, gather.getLoc(), gather.getOperand(), gather.getRanks());
    start->setAttr("sharc.parameter_gather", builder.getUnitAttr());
    auto wait = WaitOp::create(builder, gather.getLoc(), start.getFuture());
    gather.replaceAllUsesWith(wait.getResult());
    gather.erase();
    pairs[start->getBlock()].emplace_back(start, wait);
  }
  for (auto &[block, blockPairs] : pairs)
    if (prefetchBucketSize > 0)
      prefetchGathers(blockPairs, *block, prefetchBucketSize,
                      maxLiveParameters);
}

namespace {
struct ScheduleCollectivesPass
    : sharc::impl::ScheduleCollectivesBase<ScheduleCollectivesPass> {
  using ScheduleCollectivesBase::ScheduleCollectivesBase;

  void runOnOperation() override {
    auto emitError = [&] { return getOperation().emitError(); };
    OptionChecker check(emitError);
    if (!check.inRange("prefetch-bucket-size", prefetchBucketSize, 0,
                       TrainingOptions::kMaxBucketSize) ||
        !check.inRange("max-live-parameters", maxLiveParameters, 0,
                       TrainingOptions::kMaxBucketSize))
      return signalPassFailure();
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal()) {
        scheduleCollectives(func, overlap);
        scheduleGradientScatters(func, overlap);
        scheduleParameterGathers(func, overlap, prefetchBucketSize,
                                 maxLiveParameters);
      }
  }
};
} // namespace
