//===- CostTest.cpp - the planning passes' cost model ---------------------===//
//
// flopsOf against the textbook counts of matmuls (batched, transposed) and
// convolutions computed here from the shapes; peakLiveBytes against a
// brute-force sum, at every op, of the values alive there, on random
// straight-line functions.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ir/SharcOps.h"
#include "passes/Cost.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <random>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

class CostTest : public IRTest {};

/// The first op named `name` in `func`.
Operation *firstOp(func::FuncOp func, StringRef name) {
  Operation *found = nullptr;
  func.walk([&](Operation *op) {
    if (!found && op->getName().getStringRef() == name)
      found = op;
  });
  return found;
}

TEST_F(CostTest, MatmulIsTwoFlopsPerMultiplyAdd) {
  std::mt19937 rng(20261205);
  auto dim = [&] { return std::uniform_int_distribution<int64_t>(1, 9)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    int64_t batch = dim(), m = dim(), n = dim(), k = dim();
    bool transposeLhs = trial % 2, transposeRhs = trial % 3 == 0;
    std::vector<int64_t> lhs = {batch, transposeLhs ? k : m,
                                transposeLhs ? m : k};
    std::vector<int64_t> rhs = {batch, transposeRhs ? n : k,
                                transposeRhs ? k : n};
    std::vector<int64_t> out = {batch, m, n};
    std::string text =
        "func.func @main(%a: " + tensorType(lhs, "f32") +
        ", %b: " + tensorType(rhs, "f32") + ") -> " + tensorType(out, "f32") +
        " {\n  %c = sharc.matmul %a, %b {transpose_lhs = " +
        (transposeLhs ? "true" : "false") +
        ", transpose_rhs = " + (transposeRhs ? "true" : "false") + "} : (" +
        tensorType(lhs, "f32") + ", " + tensorType(rhs, "f32") + ") -> " +
        tensorType(out, "f32") + "\n  return %c : " + tensorType(out, "f32") +
        "\n}\n";
    SCOPED_TRACE(text);
    func::FuncOp func = parse(text);
    ASSERT_TRUE(func) << diagnostics;
    EXPECT_EQ(flopsOf(firstOp(func, "sharc.matmul")), 2 * batch * m * n * k);
  }
}

TEST_F(CostTest, ConvolutionAndElementwiseAndMovement) {
  // A 3x3 convolution of 4 channels into 6 over a 2x4x8x8 input (padding 1):
  // each of the 2*6*8*8 outputs is a dot product of 4*3*3 terms.
  func::FuncOp func = parse(R"(
func.func @main(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32> {
  %y = sharc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32>
  %t = sharc.tanh %y : tensor<2x6x8x8xf32>
  %r = sharc.reshape %t : tensor<2x6x8x8xf32> to tensor<12x64xf32>
  %s = sharc.transpose %r {permutation = array<i64: 1, 0>} : (tensor<12x64xf32>) -> tensor<64x12xf32>
  %u = sharc.transpose %s {permutation = array<i64: 1, 0>} : (tensor<64x12xf32>) -> tensor<12x64xf32>
  %v = sharc.reshape %u : tensor<12x64xf32> to tensor<2x6x8x8xf32>
  return %v : tensor<2x6x8x8xf32>
}
)");
  ASSERT_TRUE(func) << diagnostics;
  EXPECT_EQ(flopsOf(firstOp(func, "sharc.conv2d")),
            2 * (2 * 6 * 8 * 8) * 4 * 3 * 3);
  EXPECT_EQ(flopsOf(firstOp(func, "sharc.tanh")), 2 * 6 * 8 * 8);
  EXPECT_EQ(flopsOf(firstOp(func, "sharc.reshape")), 0);
  EXPECT_EQ(flopsOf(firstOp(func, "sharc.transpose")), 0);
}

TEST_F(CostTest, PeakLiveBytesIsTheMostAliveAtOnce) {
  std::mt19937 rng(20261206);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = randomStraightLineFunction(rng);
    SCOPED_TRACE(text);
    func::FuncOp func = parse(text);
    ASSERT_TRUE(func) << diagnostics;
    // Brute force: at op i, every value defined at or before i whose last
    // reader (the op itself if none) is at or after i.
    std::vector<Operation *> ops;
    for (Operation &op : func.getBody().front())
      ops.push_back(&op);
    auto position = [&](Operation *op) {
      return std::find(ops.begin(), ops.end(), op) - ops.begin();
    };
    int64_t peak = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      int64_t live = 0;
      for (size_t j = 0; j <= i; ++j)
        for (Value result : ops[j]->getResults()) {
          long last = long(j);
          for (Operation *user : result.getUsers())
            last = std::max(last, long(position(user)));
          if (last >= long(i))
            live += tensorBytes(result.getType());
        }
      peak = std::max(peak, live);
    }
    EXPECT_EQ(peakLiveBytes(func), peak);
  }
}

} // namespace
