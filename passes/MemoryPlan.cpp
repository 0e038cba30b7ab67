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

/// Places `buffer` at the lowest aligned offset that overlaps none of the
/// placed `buffers` it is live with.
void place(Buffer &buffer, ArrayRef<Buffer *> placed, int64_t alignment) {
  SmallVector<Buffer *> conflicts;
  for (Buffer *other : placed)
    if (liveTogether(buffer, *other))
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

/// Plans the arena of `func` and records it as attributes.
LogicalResult planFunction(func::FuncOp func, int64_t alignment) {
  if (func.isExternal())
    return success();
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "sharc-plan-memory: function '@" << func.getSymName() << "' has "
           << func.getBody().getBlocks().size()
           << " blocks; memory planning needs a single block";
  Block &block = func.getBody().front();

  DenseMap<Operation *, int64_t> index;
  for (auto [i, op] : llvm::enumerate(block))
    index[&op] = i;

  // A reshape is a view: its result shares its operand's memory (the root of
  // a chain of reshapes), whose live range then covers the reshape's users.
  auto aliasRoot = [](Value value) {
    while (auto reshape = value.getDefiningOp<ReshapeOp>())
      value = reshape.getOperand();
    return value;
  };
  // An op marked sharc.fuse_into is computed inside its users' kernels: it
  // has no memory, and its operands are read where those users are.
  auto useIndex = [&](Operation *user) {
    Operation *top = block.findAncestorOpInBlock(*user);
    if (!top->hasAttr("sharc.fuse_into"))
      return index[top];
    int64_t last = index[top];
    for (Operation *site : readSites(top, block))
      last = std::max(last, index[site]);
    return last;
  };
  SmallVector<Buffer> buffers;
  DenseMap<Value, size_t> bufferOf;
  for (Operation &op : block) {
    if (isa<ConstantOp>(op))
      continue;
    if (auto reshape = dyn_cast<ReshapeOp>(op)) {
      auto root = bufferOf.find(aliasRoot(reshape.getResult()));
      if (root == bufferOf.end())
        continue;
      for (Operation *user : reshape.getResult().getUsers())
        buffers[root->second].last =
            std::max(buffers[root->second].last, useIndex(user));
      continue;
    }
    if (op.hasAttr("sharc.fuse_into"))
      continue;
    // Scratch space a kernel needs while it runs: live at the op only.
    if (auto scratch = op.getAttrOfType<IntegerAttr>("sharc.scratch_bytes")) {
      int64_t bytes = scratch.getInt();
      Buffer buffer{Value(), &op, alignUp(bytes, alignment), bytes, index[&op],
                    index[&op]};
      buffers.push_back(buffer);
    }
    // Results an op writes into a function argument's memory (the code
    // generator's in-place updates) take no arena space.
    auto external = op.getAttrOfType<DenseI64ArrayAttr>("sharc.result_buffers");
    for (Value result : op.getResults()) {
      unsigned number = cast<OpResult>(result).getResultNumber();
      if (external && number < external.size() && external[number] >= 0)
        continue;
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type)
        continue;
      if (!type.hasStaticShape() || !type.getElementType().isIntOrFloat())
        return op.emitError() << "sharc-plan-memory: cannot size " << type;
      int64_t elementBytes = (type.getElementTypeBitWidth() + 7) / 8;
      int64_t bytes = type.getNumElements() * elementBytes;
      Buffer buffer{result, nullptr, alignUp(bytes, alignment), bytes,
                    index[&op], index[&op]};
      for (Operation *user : result.getUsers())
        buffer.last = std::max(buffer.last, useIndex(user));
      bufferOf[result] = buffers.size();
      buffers.push_back(buffer);
    }
  }

  SmallVector<Buffer *> order;
  for (Buffer &buffer : buffers)
    order.push_back(&buffer);
  llvm::stable_sort(order,
                    [](Buffer *a, Buffer *b) { return a->size > b->size; });
  SmallVector<Buffer *> placed;
  int64_t arenaBytes = 0;
  for (Buffer *buffer : order) {
    place(*buffer, placed, alignment);
    placed.push_back(buffer);
    // The peak is the highest byte in use; padding after the topmost
    // tensor is never touched.
    arenaBytes = std::max(arenaBytes, buffer->offset + buffer->bytes);
  }

  for (auto [i, a] : llvm::enumerate(buffers))
    for (const Buffer &b : ArrayRef(buffers).drop_front(i + 1))
      if (liveTogether(a, b) && overlapInMemory(a, b))
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
  block.walk([&](ReshapeOp reshape) {
    auto root = offsets.find(aliasRoot(reshape.getResult()));
    if (root != offsets.end())
      offsets[reshape.getResult()] = root->second;
  });
  for (Operation &op : block) {
    if (op.getNumResults() == 0)
      continue;
    SmallVector<int64_t> resultOffsets;
    for (Value result : op.getResults())
      resultOffsets.push_back(offsets.lookup_or(result, -1));
    op.setAttr("sharc.offsets", builder.getDenseI64ArrayAttr(resultOffsets));
  }
  func->setAttr("sharc.arena_bytes", builder.getI64IntegerAttr(arenaBytes));
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
