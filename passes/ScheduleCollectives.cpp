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

#include "ir/SharcOps.h"

#include <functional>

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

void sharc::scheduleParameterGathers(func::FuncOp func, bool overlap) {
  if (!overlap)
    return;
  SmallVector<AllGatherOp> gathers;
  func.walk([&](AllGatherOp op) {
    if (op->hasAttr("sharc.parameter_gather"))
      gathers.push_back(op);
  });
  // Each gather becomes a start and a wait where it stands; then each start
  // but the first moves up to just after the previous parameter's wait, so
  // that a parameter is gathered while the readers of the one before it
  // compute (one parameter ahead).
  SmallVector<std::pair<AllGatherStartOp, WaitOp>> pairs;
  for (AllGatherOp gather : gathers) {
    OpBuilder builder(gather);
    auto start = AllGatherStartOp::create(
        builder, gather.getLoc(), gather.getOperand(), gather.getRanks());
    start->setAttr("sharc.parameter_gather", builder.getUnitAttr());
    auto wait = WaitOp::create(builder, gather.getLoc(), start.getFuture());
    gather.replaceAllUsesWith(wait.getResult());
    gather.erase();
    pairs.emplace_back(start, wait);
  }
  for (size_t k = 1; k < pairs.size(); ++k) {
    WaitOp previous = pairs[k - 1].second;
    AllGatherStartOp start = pairs[k].first;
    if (previous->getBlock() == start->getBlock() &&
        previous->isBeforeInBlock(start))
      moveWithPacking(start, previous->getNextNode());
  }
}

namespace {
struct ScheduleCollectivesPass
    : sharc::impl::ScheduleCollectivesBase<ScheduleCollectivesPass> {
  using ScheduleCollectivesBase::ScheduleCollectivesBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal()) {
        scheduleCollectives(func, overlap);
        scheduleGradientScatters(func, overlap);
        scheduleParameterGathers(func, overlap);
      }
  }
};
} // namespace
