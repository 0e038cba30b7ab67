//===- MemoryPlan.cpp - static arena planning --------------------------===//
//
// sharc-plan-memory: gives every intermediate tensor of a function a byte
// offset in one arena, greedily by size (largest first, each at the lowest
// aligned offset free over its live range), as TFLite's and llm.c's static
// arenas do.  docs/passes.md describes the plan and its attributes.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"
#include "runtime/Program.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace sharc {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// One tensor that needs arena memory: op results [first, last] of the block.
struct Buffer {
  /// The tensor, or null for an op's scratch space (`scratchOf`).
  Value value;
  Operation *scratchOf = nullptr;
  /// Bytes reserved (a multiple of the alignment) and bytes used.
  int64_t size;
  int64_t bytes;
  int64_t first;
  int64_t last;
  int64_t offset = -1;
  /// The alignment of its offset: the pass's, or kSwapAlignment for memory
  /// that NVMe offload reads into or writes from (O_DIRECT).
  int64_t alignment = 0;
  /// In the host arena (a value in host memory: ZeRO-Offload to the CPU)
  /// rather than the device's.
  bool host = false;
};

bool liveTogether(const Buffer &a, const Buffer &b) {
  return a.first <= b.last && b.first <= a.last;
}

bool overlapInMemory(const Buffer &a, const Buffer &b) {
  return a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

int64_t alignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Places `buffer` at the lowest offset aligned to its alignment that
/// overlaps none of the placed `buffers` it is live with.
void place(Buffer &buffer, ArrayRef<Buffer *> placed) {
  int64_t alignment = buffer.alignment;
  SmallVector<Buffer *> conflicts;
  for (Buffer *other : placed)
    if (other->host == buffer.host && liveTogether(buffer, *other))
      conflicts.push_back(other);
  llvm::sort(conflicts,
             [](Buffer *a, Buffer *b) { return a->offset < b->offset; });
  int64_t offset = 0;
  for (Buffer *other : conflicts) {
    if (offset + buffer.size <= other->offset)
      break;
    offset = std::max(offset, alignUp(other->offset + other->size, alignment));
  }
  buffer.offset = offset;
}

/// The ops of a function in the order they run, outside fusion bodies: a
/// micro-batch loop's body follows the loop op, and a value that the body
/// reads from outside the loop lives until the body's last op, since every
/// iteration reads it.
struct ProgramOrder {
  DenseMap<Operation *, int64_t> index;
  /// For a loop, the index of the last op of its body; for other ops their
  /// own index.
  DenseMap<Operation *, int64_t> end;
  SmallVector<Operation *> ops;

  explicit ProgramOrder(Block &block) { number(block); }

  void number(Block &block) {
    for (Operation &op : block) {
      index[&op] = ops.size();
      ops.push_back(&op);
      if (auto loop = dyn_cast<MicroBatchLoopOp>(op))
        number(loop.getBody().front());
      end[&op] = ops.size() - 1;
    }
  }
};

/// Plans the arena of `func` and records it as attributes.
LogicalResult planFunction(func::FuncOp func, int64_t alignment) {
  if (func.isExternal())
    return success();
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "sharc-plan-memory: function '@" << func.getSymName() << "' has "
           << func.getBody().getBlocks().size()
           << " blocks; memory planning needs a single block";
  ProgramOrder order(func.getBody().front());

  // A reshape is a view: its result shares its operand's memory (the root of
  // a chain of views), whose live range then covers the reshape's users.  So
  // is a wait: its result is the buffer its collective's future names.
  auto isView = [](Operation *op) {
    return isa_and_nonnull<ReshapeOp, WaitOp>(op);
  };
  auto aliasRoot = [&](Value value) {
    while (isView(value.getDefiningOp()))
      value = value.getDefiningOp()->getOperand(0);
    return value;
  };
  // Where `user` reads a value defined in `block`: at the op of the block
  // that is or contains it; through a whole loop whose body reads it or
  // whose inputs it is.  An op marked sharc.fuse_into is computed inside its
  // users' kernels: it has no memory, and its operands are read where those
  // users are.
  auto useIndex = [&](Operation *user, Block &block) {
    Operation *top = block.findAncestorOpInBlock(*user);
    if (isa<MicroBatchLoopOp>(top))
      return order.end[top];
    if (!top->hasAttr("sharc.fuse_into"))
      return order.index[top];
    int64_t last = order.index[top];
    for (Operation *site : readSites(top, block))
      last = std::max(last, order.index[site]);
    return last;
  };
  auto lastUse = [&](Value value, int64_t first) {
    int64_t last = first;
    for (Operation *user : value.getUsers())
      last = std::max(last, useIndex(user, *value.getParentBlock()));
    return last;
  };

  SmallVector<Buffer> buffers;
  DenseMap<Value, size_t> bufferOf;
  // Values that share the memory of another value's buffer: a loop's carried
  // values and, where they may, its inits and yielded values (ties).
  DenseMap<Value, Value> sharesWith;
  for (Operation *loopOp : order.ops) {
    auto loop = dyn_cast<MicroBatchLoopOp>(loopOp);
    if (!loop)
      continue;
    Block &body = loop.getBody().front();
    YieldOp yield = loop.getYield();
    for (auto [init, arg, value, result] :
         llvm::zip(loop.getInits(), loop.getCarriedArgs(), yield.getOperands(),
                   loop.getResults())) {
      sharesWith[arg] = result;
      // The init's producer writes the loop's buffer when the loop is its
      // only reader (the zeros an accumulation starts from).
      Operation *def = init.getDefiningOp();
      if (def && init.hasOneUse() && def->getBlock() == loop->getBlock() &&
          isa<BroadcastOp, FusionOp>(def) && !def->hasAttr("sharc.fuse_into") &&
          !def->hasAttr("sharc.gemm_epilogue") &&
          !def->hasAttr("sharc.result_buffers"))
        sharesWith[init] = result;
      // The yielded value's producer writes over the carried value when it
      // reads it element for element and nothing after it does.
      Operation *producer = value.getDefiningOp();
      if (producer && producer->getBlock() == &body &&
          llvm::count(yield.getOperands(), value) == 1 &&
          canOverwrite(producer, arg, body))
        sharesWith[value] = result;
    }
  }

  // NVMe offload: an update that reads a swapped-in state element for
  // element, and nothing after it, writes the new state over it (the value it
  // swaps out).
  for (Operation *op : order.ops) {
    auto out = dyn_cast<SwapOutStartOp>(op);
    if (!out)
      continue;
    Value value = out.getValue();
    Operation *producer = value.getDefiningOp();
    if (!producer || !value.hasOneUse() || sharesWith.count(value))
      continue;
    for (Value operand : producer->getOperands()) {
      auto wait = operand.getDefiningOp<WaitOp>();
      auto in = wait ? wait.getFuture().getDefiningOp<SwapInStartOp>()
                     : SwapInStartOp();
      if (in && in.getOperand() == out.getTarget() &&
          operand.getType() == value.getType() &&
          canOverwrite(producer, operand, *op->getBlock())) {
        sharesWith[value] = in.getFuture();
        break;
      }
    }
  }

  for (Operation *opPointer : order.ops) {
    Operation &op = *opPointer;
    int64_t at = order.index[&op];
    if (isa<ConstantOp>(op) || isView(&op) || op.hasAttr("sharc.fuse_into"))
      continue;
    // Scratch space a kernel needs while it runs: live at the op only.
    if (auto scratch = op.getAttrOfType<IntegerAttr>("sharc.scratch_bytes")) {
      int64_t bytes = scratch.getInt();
      Buffer buffer{Value(), &op, alignUp(bytes, alignment), bytes, at, at};
      buffer.alignment = alignment;
      buffers.push_back(buffer);
    }
    // Results an op writes into a function argument's memory (the code
    // generator's in-place updates) take no arena space.
    auto external = op.getAttrOfType<DenseI64ArrayAttr>("sharc.result_buffers");
    for (Value result : op.getResults()) {
      unsigned number = cast<OpResult>(result).getResultNumber();
      if (external && number < external.size() && external[number] >= 0)
        continue;
      if (sharesWith.count(result))
        continue;
      // A value written to NVMe is in its file, not in the arena.
      if (isa<SwapOutStartOp>(op))
        continue;
      // A future occupies the tensor its collective writes.
      RankedTensorType type = storedTensorType(result.getType());
      if (!type)
        continue;
      if (!type.hasStaticShape() || !type.getElementType().isIntOrFloat())
        return op.emitError() << "sharc-plan-memory: cannot size " << type;
      int64_t elementBytes = (type.getElementTypeBitWidth() + 7) / 8;
      int64_t bytes = type.getNumElements() * elementBytes;
      Buffer buffer{result, nullptr, alignUp(bytes, alignment),
                    bytes,  at,      lastUse(result, at)};
      buffer.alignment = alignment;
      auto transfer = dyn_cast<TransferStartOp>(op);
      buffer.host = op.hasAttr("sharc.on_host") ||
                    (transfer && transfer.getTo() == Storage::host);
      // NVMe offload reads whole file blocks, to memory aligned for
      // O_DIRECT.
      if (isa<SwapInStartOp>(op)) {
        buffer.alignment = rt::kSwapAlignment;
        buffer.size = buffer.bytes = rt::swapBytes(bytes);
      }
      // A loop's result is written from its first iteration on and carried
      // through the body.
      if (isa<MicroBatchLoopOp>(op))
        buffer.last = std::max(buffer.last, order.end[&op]);
      bufferOf[result] = buffers.size();
      buffers.push_back(buffer);
    }
  }
  // Tied values live in their loop result's buffer: it is live from the
  // first write of any of them to the last read of any.
  for (auto [value, owner] : sharesWith) {
    Buffer &buffer = buffers[bufferOf.lookup(owner)];
    int64_t first = isa<BlockArgument>(value)
                        ? buffer.first
                        : order.index[value.getDefiningOp()];
    buffer.first = std::min(buffer.first, first);
    buffer.last = std::max(buffer.last, lastUse(value, first));
  }
  // A view's users read its root's buffer.
  for (Operation *op : order.ops) {
    if (!isView(op))
      continue;
    Value root = aliasRoot(op->getResult(0));
    root = sharesWith.lookup_or(root, root);
    auto known = bufferOf.find(root);
    if (known == bufferOf.end())
      continue;
    Buffer &buffer = buffers[known->second];
    for (Operation *user : op->getResult(0).getUsers())
      buffer.last = std::max(buffer.last, useIndex(user, *op->getBlock()));
  }
  // A started reduce-scatter, all-gather, NVMe write or transfer between
  // device and host memory reads its operand until its wait; an NVMe write
  // reads whole file blocks, from memory aligned for O_DIRECT.
  for (Operation *op : order.ops) {
    if (!isa<ReduceScatterStartOp, AllGatherStartOp, SwapOutStartOp,
             TransferStartOp>(op))
      continue;
    Value root = aliasRoot(op->getOperand(0));
    root = sharesWith.lookup_or(root, root);
    auto known = bufferOf.find(root);
    if (known == bufferOf.end())
      continue;
    Buffer &buffer = buffers[known->second];
    for (Operation *wait : op->getResult(0).getUsers())
      buffer.last = std::max(buffer.last, useIndex(wait, *op->getBlock()));
    if (isa<SwapOutStartOp>(op)) {
      buffer.alignment = std::max(buffer.alignment, rt::kSwapAlignment);
      buffer.size = std::max(buffer.size, rt::swapBytes(buffer.bytes));
      buffer.bytes = rt::swapBytes(buffer.bytes);
    }
  }

  SmallVector<Buffer *> sorted;
  for (Buffer &buffer : buffers)
    sorted.push_back(&buffer);
  llvm::stable_sort(sorted,
                    [](Buffer *a, Buffer *b) { return a->size > b->size; });
  SmallVector<Buffer *> placed;
  int64_t arenaBytes = 0, hostArenaBytes = 0;
  for (Buffer *buffer : sorted) {
    place(*buffer, placed);
    placed.push_back(buffer);
    // The peak is the highest byte in use; padding after the topmost
    // tensor is never touched.
    int64_t &peak = buffer->host ? hostArenaBytes : arenaBytes;
    peak = std::max(peak, buffer->offset + buffer->bytes);
  }

  for (auto [i, a] : llvm::enumerate(buffers))
    for (const Buffer &b : ArrayRef(buffers).drop_front(i + 1))
      if (a.host == b.host && liveTogether(a, b) && overlapInMemory(a, b))
        return func.emitError()
               << "sharc-plan-memory: internal error: the plan overlaps two "
                  "live values";

  DenseMap<Value, int64_t> offsets;
  Builder builder(func.getContext());
  for (const Buffer &buffer : buffers) {
    if (buffer.scratchOf)
      buffer.scratchOf->setAttr("sharc.scratch_offset",
                                builder.getI64IntegerAttr(buffer.offset));
    else
      offsets[buffer.value] = buffer.offset;
  }
  for (auto [value, owner] : sharesWith)
    offsets[value] = offsets.lookup(owner);
  func.walk([&](Operation *view) {
    if (!isView(view))
      return;
    auto root = offsets.find(aliasRoot(view->getResult(0)));
    if (root != offsets.end())
      offsets[view->getResult(0)] = root->second;
  });
  for (Operation *op : order.ops) {
    if (op->getNumResults() == 0)
      continue;
    SmallVector<int64_t> resultOffsets;
    for (Value result : op->getResults())
      resultOffsets.push_back(offsets.lookup_or(result, -1));
    op->setAttr("sharc.offsets", builder.getDenseI64ArrayAttr(resultOffsets));
  }
  func->setAttr("sharc.arena_bytes", builder.getI64IntegerAttr(arenaBytes));
  if (llvm::any_of(buffers, [](const Buffer &buffer) { return buffer.host; }))
    func->setAttr("sharc.host_arena_bytes",
                  builder.getI64IntegerAttr(hostArenaBytes));
  return success();
}

struct PlanMemoryPass : sharc::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    if (alignment <= 0) {
      getOperation().emitError()
          << "sharc-plan-memory: alignment must be positive, got "
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(planFunction(func, alignment)))
        signalPassFailure();
  }
};

} // namespace
