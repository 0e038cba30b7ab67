//===- MemoryPlanTest.cpp - sharc-plan-memory on random functions ---------===//
//
// Plans random straight-line functions and checks the plan against live
// ranges recomputed here: no two values live together overlap, offsets are
// aligned, and the arena lies between the peak live size and the total size.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <random>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

struct PlannedValue {
  /// Aligned size and bytes in use.
  int64_t offset, size, bytes, first, last;
};

class MemoryPlanTest : public IRTest {};

TEST_F(MemoryPlanTest, RandomFunctions) {
  std::mt19937 rng(20261130);
  const int64_t alignments[] = {1, 8, 64, 256};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = randomStraightLineFunction(rng);
    int64_t alignment = alignments[trial % 4];
    SCOPED_TRACE("alignment " + std::to_string(alignment) + "\n" + text);
    func::FuncOp func = parse(text);
    ASSERT_TRUE(func);
    PassManager pm(&context);
    PlanMemoryOptions options;
    options.alignment = alignment;
    pm.addPass(createPlanMemory(options));
    ASSERT_TRUE(succeeded(pm.run(func->getParentOfType<ModuleOp>())))
        << diagnostics;

    Block &block = func.getBody().front();
    DenseMap<Operation *, int64_t> index;
    for (auto [i, op] : llvm::enumerate(block))
      index[&op] = i;
    std::vector<PlannedValue> planned;
    for (Operation &op : block) {
      if (op.getNumResults() == 0)
        continue;
      auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("sharc.offsets");
      ASSERT_TRUE(offsets);
      ASSERT_EQ(offsets.size(), 1);
      if (isa<ConstantOp>(op)) {
        EXPECT_EQ(offsets[0], -1);
        continue;
      }
      auto type = cast<RankedTensorType>(op.getResult(0).getType());
      int64_t bytes =
          type.getNumElements() * (type.getElementTypeBitWidth() / 8);
      PlannedValue value{offsets[0],
                         (bytes + alignment - 1) / alignment * alignment, bytes,
                         index[&op], index[&op]};
      for (Operation *user : op.getResult(0).getUsers())
        value.last = std::max(value.last, index[user]);
      EXPECT_GE(value.offset, 0);
      EXPECT_EQ(value.offset % alignment, 0);
      planned.push_back(value);
    }

    int64_t end = 0, total = 0, peak = 0;
    for (const PlannedValue &value : planned) {
      end = std::max(end, value.offset + value.bytes);
      total += value.size;
    }
    for (int64_t point = 0; point < static_cast<int64_t>(index.size());
         ++point) {
      int64_t live = 0;
      for (const PlannedValue &value : planned)
        if (value.first <= point && point <= value.last)
          live += value.bytes;
      peak = std::max(peak, live);
    }
    for (size_t i = 0; i < planned.size(); ++i)
      for (size_t j = i + 1; j < planned.size(); ++j) {
        const PlannedValue &a = planned[i], &b = planned[j];
        if (a.first <= b.last && b.first <= a.last) {
          EXPECT_TRUE(a.offset + a.size <= b.offset ||
                      b.offset + b.size <= a.offset)
              << "values " << i << " and " << j << " overlap";
        }
      }

    auto arena = func->getAttrOfType<IntegerAttr>("sharc.arena_bytes");
    ASSERT_TRUE(arena);
    EXPECT_EQ(arena.getInt(), end);
    EXPECT_GE(arena.getInt(), peak);
    EXPECT_LE(arena.getInt(), total);
    if (HasFailure())
      return;
  }
}

TEST_F(MemoryPlanTest, RejectsZeroAlignment) {
  func::FuncOp func = parse(R"(
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = sharc.exp %x : tensor<4xf32>
      return %y : tensor<4xf32>
    })");
  ASSERT_TRUE(func);
  PassManager pm(&context);
  PlanMemoryOptions options;
  options.alignment = 0;
  pm.addPass(createPlanMemory(options));
  EXPECT_TRUE(failed(pm.run(func->getParentOfType<ModuleOp>())));
  EXPECT_NE(diagnostics.find("alignment must be positive, got 0"),
            std::string::npos)
      << diagnostics;
}

} // namespace
