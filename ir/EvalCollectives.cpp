//===- EvalCollectives.cpp - collectives over simulated ranks -------------===//
//
// all_reduce (and its asynchronous form, all_reduce_start and wait),
// reduce_scatter, all_gather and broadcast_from.  Every rank
// meets the others in the CollectiveGroup; the contributions are combined in
// rank order (floats summed in double and rounded once), so every rank gets
// the same, deterministic result.
//
//===----------------------------------------------------------------------===//

#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

namespace {

/// Combines equally shaped tensors elementwise, in order.
Tensor combineElementwise(ArrayRef<const Tensor *> parts, CollectiveKind kind) {
  Tensor result = *parts.front();
  bool isMax = kind == CollectiveKind::max;
  if (result.isFloat()) {
    MutableArrayRef<double> acc = result.floats();
    for (const Tensor *part : parts.drop_front()) {
      ArrayRef<double> x = part->floats();
      for (size_t i = 0; i < acc.size(); ++i) {
        if (!isMax)
          acc[i] += x[i];
        else if (std::isnan(x[i]) || x[i] > acc[i])
          acc[i] = x[i];
      }
    }
    roundInPlace(result);
    return result;
  }
  MutableArrayRef<int64_t> acc = result.ints();
  for (const Tensor *part : parts.drop_front()) {
    ArrayRef<int64_t> x = part->ints();
    for (size_t i = 0; i < acc.size(); ++i)
      acc[i] = isMax ? std::max(acc[i], x[i])
                     : static_cast<int64_t>(static_cast<uint64_t>(acc[i]) +
                                            static_cast<uint64_t>(x[i]));
  }
  wrapInPlace(result);
  return result;
}

/// Runs one collective: meets the other ranks of the group (or, without a
/// group, acts as a group of one if the op is for one rank).
LogicalResult runCollective(const OpCall &call, int64_t ranks,
                            const std::string &key,
                            CollectiveGroup::Combine combine) {
  const Tensor &operand = call.operand(0);
  if (!call.group) {
    if (ranks != 1)
      return call.error() << "'" << call.op->getName() << "' needs " << ranks
                          << " ranks; run with evaluateRanks";
    const Tensor *single = &operand;
    call.result() = std::move(combine(single).front());
    return success();
  }
  if (call.group->size() != ranks)
    return call.error() << "'" << call.op->getName() << "' is for a group of "
                        << ranks << " ranks, but " << call.group->size()
                        << " ranks are running";
  CollectiveGroup::Outcome outcome =
      call.group->exchange(call.rank, key, operand, combine);
  if (!outcome.ok) {
    if (!outcome.error.empty())
      call.error() << outcome.error;
    return failure();
  }
  call.result() = std::move(outcome.result);
  return success();
}

std::string keyOf(const OpCall &call, StringRef detail) {
  return (call.op->getName().getStringRef() + detail + " on " +
          call.operand(0).describe())
      .str();
}

/// all_reduce, and all_reduce_start, whose future holds the same result (the
/// evaluator completes a collective where it starts).
LogicalResult evalAllReduce(const OpCall &call, CollectiveKind kind,
                            int64_t ranks) {
  return runCollective(
      call, ranks,
      keyOf(call, ("<" + stringifyCollectiveKind(kind) + ">").str()),
      [&](ArrayRef<const Tensor *> parts) {
        Tensor combined = combineElementwise(parts, kind);
        return std::vector<Tensor>(parts.size(), combined);
      });
}

/// A reduce-scatter, or the start of one (its future holds the slice).
LogicalResult evalReduceScatter(const OpCall &call, CollectiveKind kind,
                                int64_t ranks) {
  ArrayRef<int64_t> shape = call.result().shape();
  DType dtype = call.result().dtype();
  return runCollective(
      call, ranks,
      keyOf(call, ("<" + stringifyCollectiveKind(kind) + ">").str()),
      [&](ArrayRef<const Tensor *> parts) {
        Tensor combined = combineElementwise(parts, kind);
        std::vector<Tensor> slices;
        int64_t count = sharc::numElements(shape);
        for (size_t r = 0; r < parts.size(); ++r) {
          slices.emplace_back(dtype, shape);
          copyElements(combined, r * count, slices.back(), 0, count);
        }
        return slices;
      });
}

/// An all-gather, or the start of one (its future holds the result).
LogicalResult evalAllGather(const OpCall &call, int64_t ranks) {
  ArrayRef<int64_t> shape = call.result().shape();
  DType dtype = call.result().dtype();
  return runCollective(
      call, ranks, keyOf(call, ""), [&](ArrayRef<const Tensor *> parts) {
        Tensor gathered(dtype, shape);
        int64_t offset = 0;
        for (const Tensor *part : parts) {
          copyElements(*part, 0, gathered, offset, part->numElements());
          offset += part->numElements();
        }
        return std::vector<Tensor>(parts.size(), gathered);
      });
}

LogicalResult evalBroadcastFrom(const OpCall &call, BroadcastFromOp op) {
  int64_t root = op.getRoot();
  return runCollective(call, op.getRanks(),
                       keyOf(call, "<root " + std::to_string(root) + ">"),
                       [&](ArrayRef<const Tensor *> parts) {
                         return std::vector<Tensor>(parts.size(), *parts[root]);
                       });
}

} // namespace

std::optional<LogicalResult> eval::evalCollectiveOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      .Case([&](AllReduceOp op) {
        return evalAllReduce(call, op.getKind(), op.getRanks());
      })
      .Case([&](AllReduceStartOp op) {
        return evalAllReduce(call, op.getKind(), op.getRanks());
      })
      .Case([&](WaitOp) {
        call.result() = call.operand(0);
        return success();
      })
      // Offloaded state moves between a file, host and device memory
      // unchanged.
      .Case<SwapInStartOp, SwapOutStartOp, TransferStartOp>([&](Operation *) {
        call.result() = call.operand(0);
        return success();
      })
      .Case([&](ReduceScatterOp op) {
        return evalReduceScatter(call, op.getKind(), op.getRanks());
      })
      .Case([&](ReduceScatterStartOp op) {
        return evalReduceScatter(call, op.getKind(), op.getRanks());
      })
      .Case([&](AllGatherOp op) { return evalAllGather(call, op.getRanks()); })
      .Case([&](AllGatherStartOp op) {
        return evalAllGather(call, op.getRanks());
      })
      .Case([&](BroadcastFromOp op) { return evalBroadcastFrom(call, op); })
      .Case([&](ShardOp op) -> LogicalResult {
        int64_t ranks = op.getRanks();
        int64_t group = call.group ? call.group->size() : 1;
        if (group != ranks)
          return call.error()
                 << "'sharc.shard' is for a group of " << ranks
                 << " ranks, but " << group << " ranks are running";
        int64_t count = call.result().numElements();
        copyElements(call.operand(0), call.rank * count, call.result(), 0,
                     count);
        return success();
      })
      .Default([](Operation *) { return Result(); });
}
