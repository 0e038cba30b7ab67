//===- CollectivesTest.cpp - collectives over simulated ranks -------------===//

#include "TestUtil.h"

#include "ir/Collectives.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

class CollectivesTest : public IRTest {
protected:
  /// Runs evaluateRanks, failing the test (and ending the process, since
  /// the ranks' threads cannot be reclaimed) if it does not return within a
  /// minute.
  FailureOr<std::vector<std::vector<Tensor>>>
  runRanks(func::FuncOp func, std::vector<std::vector<Tensor>> args) {
    auto done = std::make_shared<
        std::promise<FailureOr<std::vector<std::vector<Tensor>>>>>();
    auto result = done->get_future();
    std::thread([func, args, done]() mutable {
      done->set_value(evaluateRanks(func, args));
    }).detach();
    if (result.wait_for(std::chrono::seconds(60)) !=
        std::future_status::ready) {
      ADD_FAILURE() << "evaluateRanks hangs";
      std::fprintf(stderr, "evaluateRanks hangs; aborting the test run\n");
      std::_Exit(1);
    }
    return result.get();
  }
};

const char *allCollectives = R"(
  func.func @main(%x: tensor<8x3xf32>, %flags: tensor<2xi1>, %n: tensor<2xi32>)
      -> (tensor<8x3xf32>, tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<8x3xf32>,
          tensor<8xi1>, tensor<2xi1>, tensor<2xi32>) {
    %sum = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<8x3xf32>
    %max = sharc.all_reduce %x {kind = #sharc.collective_kind<max>, ranks = 4} : tensor<8x3xf32>
    %rs = sharc.reduce_scatter %x {kind = #sharc.collective_kind<sum>, ranks = 4} : (tensor<8x3xf32>) -> tensor<2x3xf32>
    %ag = sharc.all_gather %x {ranks = 4} : (tensor<8x3xf32>) -> tensor<32x3xf32>
    %bc = sharc.broadcast_from %x {root = 2, ranks = 4} : tensor<8x3xf32>
    %agb = sharc.all_gather %flags {ranks = 4} : (tensor<2xi1>) -> tensor<8xi1>
    %bcb = sharc.broadcast_from %flags {root = 3, ranks = 4} : tensor<2xi1>
    %ni = sharc.all_reduce %n {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<2xi32>
    return %sum, %max, %rs, %ag, %bc, %agb, %bcb, %ni
        : tensor<8x3xf32>, tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<8x3xf32>,
          tensor<8xi1>, tensor<2xi1>, tensor<2xi32>
  })";

TEST_F(CollectivesTest, FourRanks) {
  func::FuncOp func = parse(allCollectives);
  ASSERT_TRUE(func);
  std::vector<std::vector<Tensor>> args;
  for (int r = 0; r < 4; ++r)
    args.push_back({randomTensor(DType::f32, {8, 3}, 100 + r),
                    makeTensor(DType::i1, {2}, {double(r % 2), double(r > 1)}),
                    makeTensor(DType::i32, {2}, {1 << 30, double(r)})});
  auto results = runRanks(func, args);
  ASSERT_TRUE(succeeded(results)) << diagnostics;
  ASSERT_EQ(results->size(), 4u);

  std::vector<double> sum, max, gathered;
  for (int i = 0; i < 24; ++i) {
    double s = 0, m = -INFINITY;
    for (int r = 0; r < 4; ++r) {
      s += args[r][0].getDouble(i);
      m = std::max(m, args[r][0].getDouble(i));
    }
    sum.push_back(static_cast<float>(s));
    max.push_back(m);
  }
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 24; ++i)
      gathered.push_back(args[r][0].getDouble(i));
  for (int r = 0; r < 4; ++r) {
    const std::vector<Tensor> &out = (*results)[r];
    ASSERT_EQ(out.size(), 8u);
    expectClose(out[0], sum, 0, "all_reduce sum");
    expectClose(out[1], max, 0, "all_reduce max");
    expectClose(out[2], ArrayRef<double>(sum).slice(r * 6, 6), 0,
                "reduce_scatter");
    expectClose(out[3], gathered, 0, "all_gather");
    EXPECT_EQ(out[4], args[2][0]) << "broadcast_from";
    expectClose(out[5], {0, 0, 1, 0, 0, 1, 1, 1}, 0, "all_gather i1");
    expectClose(out[6], {1, 1}, 0, "broadcast_from i1");
    // 4 * 2^30 = 2^32 wraps to 0; 0 + 1 + 2 + 3 = 6.
    expectClose(out[7], {0, 6}, 0, "all_reduce i32");
  }
}

TEST_F(CollectivesTest, SumRoundsOnce) {
  // In bf16, 1 + 2^-9 rounds back to 1, so adding rank by rank with rounding
  // would stay at 1; the exact sum 1 + 3 * 2^-9 rounds to 1 + 2^-7.
  func::FuncOp func = parse(R"(
    func.func @main(%x: tensor<1xbf16>) -> tensor<1xbf16> {
      %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<1xbf16>
      return %0 : tensor<1xbf16>
    })");
  ASSERT_TRUE(func);
  std::vector<std::vector<Tensor>> args = {
      {makeTensor(DType::bf16, {1}, {1})},
      {makeTensor(DType::bf16, {1}, {0x1p-9})},
      {makeTensor(DType::bf16, {1}, {0x1p-9})},
      {makeTensor(DType::bf16, {1}, {0x1p-9})}};
  auto results = runRanks(func, args);
  ASSERT_TRUE(succeeded(results)) << diagnostics;
  for (const std::vector<Tensor> &out : *results)
    expectClose(out[0], {1 + 0x1p-7}, 0, "bf16 sum");
}

TEST_F(CollectivesTest, DataParallelMatmuls) {
  // Every rank multiplies its shard on its own thread (concurrent BLAS
  // calls), then the partial products are summed.
  func::FuncOp func = parse(R"(
    func.func @main(%x: tensor<16x32xf64>, %w: tensor<32x8xf64>) -> tensor<16x8xf64> {
      %0 = sharc.matmul %x, %w : (tensor<16x32xf64>, tensor<32x8xf64>) -> tensor<16x8xf64>
      %1 = sharc.all_reduce %0 {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<16x8xf64>
      return %1 : tensor<16x8xf64>
    })");
  ASSERT_TRUE(func);
  std::vector<std::vector<Tensor>> args;
  for (int r = 0; r < 4; ++r)
    args.push_back({randomTensor(DType::f64, {16, 32}, 200 + r),
                    randomTensor(DType::f64, {32, 8}, 300 + r)});
  std::vector<double> expected(16 * 8, 0);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j)
        for (int p = 0; p < 32; ++p)
          expected[i * 8 + j] += args[r][0].getDouble(i * 32 + p) *
                                 args[r][1].getDouble(p * 8 + j);
  for (int repeat = 0; repeat < 20; ++repeat) {
    auto results = runRanks(func, args);
    ASSERT_TRUE(succeeded(results)) << diagnostics;
    for (const std::vector<Tensor> &out : *results)
      expectClose(out[0], expected, 1e-12, "sum of matmuls");
  }
}

TEST_F(CollectivesTest, WithoutAGroup) {
  func::FuncOp one = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<1xf32>, tensor<2xf32>) {
      %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 1} : tensor<2xf32>
      %1 = sharc.reduce_scatter %x {kind = #sharc.collective_kind<max>, ranks = 2} : (tensor<2xf32>) -> tensor<1xf32>
      %2 = sharc.broadcast_from %x {root = 0, ranks = 1} : tensor<2xf32>
      return %0, %1, %2 : tensor<2xf32>, tensor<1xf32>, tensor<2xf32>
    })");
  ASSERT_TRUE(one);
  Tensor x = makeTensor(DType::f32, {2}, {1.5, -2});
  // The reduce_scatter is for two ranks: a lone evaluation cannot run it.
  diagnostics.clear();
  EXPECT_TRUE(failed(evaluate(one, {x})));
  EXPECT_NE(diagnostics.find("needs 2 ranks; run with evaluateRanks"),
            std::string::npos)
      << diagnostics;

  func::FuncOp single = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
      %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 1} : tensor<2xf32>
      %1 = sharc.all_gather %x {ranks = 1} : (tensor<2xf32>) -> tensor<2xf32>
      %2 = sharc.broadcast_from %x {root = 0, ranks = 1} : tensor<2xf32>
      return %0, %1, %2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    })");
  ASSERT_TRUE(single);
  FailureOr<std::vector<Tensor>> r = evaluate(single, {x});
  ASSERT_TRUE(succeeded(r)) << diagnostics;
  for (const Tensor &t : *r)
    EXPECT_EQ(t, x);
}

TEST_F(CollectivesTest, FailingRankReleasesTheOthers) {
  // Rank 2's gather fails before the first collective (the others wait in
  // it), or after it (the others wait in the second one).
  for (bool failLate : {false, true}) {
    std::string text = substitute(R"(
      func.func @main(%data: tensor<4x2xf32>, %idx: tensor<3xi32>) -> tensor<3x2xf32> {
        $0
        %g = sharc.gather %data, %idx {axis = 0} : (tensor<4x2xf32>, tensor<3xi32>) -> tensor<3x2xf32>
        %r = sharc.all_reduce %g {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<3x2xf32>
        return %r : tensor<3x2xf32>
      })",
                                  {failLate ? "%pre = sharc.all_reduce %data "
                                              "{kind = "
                                              "#sharc.collective_kind<sum>, "
                                              "ranks = 4} : tensor<4x2xf32>"
                                            : ""});
    func::FuncOp func = parse(text);
    ASSERT_TRUE(func);
    std::vector<std::vector<Tensor>> args;
    for (int r = 0; r < 4; ++r)
      args.push_back({randomTensor(DType::f32, {4, 2}, r),
                      makeTensor(DType::i32, {3}, {0, r == 2 ? 9.0 : 1.0, 2})});
    diagnostics.clear();
    auto results = runRanks(func, args);
    EXPECT_TRUE(failed(results));
    EXPECT_NE(diagnostics.find("gather index 9"), std::string::npos)
        << diagnostics;
    EXPECT_NE(diagnostics.find("on rank 2 of 4"), std::string::npos)
        << diagnostics;
  }
}

TEST_F(CollectivesTest, GroupSizeMismatch) {
  func::FuncOp func = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<2xf32>
      return %0 : tensor<2xf32>
    })");
  ASSERT_TRUE(func);
  Tensor x = makeTensor(DType::f32, {2}, {1, 2});
  diagnostics.clear();
  EXPECT_TRUE(failed(runRanks(func, {{x}, {x}, {x}})));
  EXPECT_NE(diagnostics.find("group of 4 ranks, but 3 ranks"),
            std::string::npos)
      << diagnostics;
}

TEST_F(CollectivesTest, RanksThatDisagreeOrLeaveFail) {
  func::FuncOp reduce = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<2xf32>
      return %0 : tensor<2xf32>
    })");
  func::FuncOp gather = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<4xf32> {
      %0 = sharc.all_gather %x {ranks = 2} : (tensor<2xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    })");
  func::FuncOp nothing = parse(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      return %x : tensor<2xf32>
    })");
  ASSERT_TRUE(reduce && gather && nothing);
  Tensor x = makeTensor(DType::f32, {2}, {1, 2});
  for (func::FuncOp other : {gather, nothing}) {
    diagnostics.clear();
    CollectiveGroup group(2);
    auto first = std::async(std::launch::async,
                            [&] { return evaluate(reduce, {x}, &group, 0); });
    auto second = std::async(std::launch::async,
                             [&] { return evaluate(other, {x}, &group, 1); });
    ASSERT_EQ(first.wait_for(std::chrono::seconds(60)),
              std::future_status::ready);
    EXPECT_TRUE(failed(first.get()));
    if (other == gather) {
      EXPECT_TRUE(failed(second.get()));
      EXPECT_NE(diagnostics.find("ranks disagree"), std::string::npos)
          << diagnostics;
    } else {
      EXPECT_TRUE(succeeded(second.get()));
      EXPECT_NE(diagnostics.find("rank 1 finished its function"),
                std::string::npos)
          << diagnostics;
    }
  }
}

} // namespace
