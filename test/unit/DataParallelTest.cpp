//===- DataParallelTest.cpp - the data-parallel training step -------------===//
//
// Runs @train_step (sharc-optimizer, then sharc-data-parallel with world-size
// N) on N simulated ranks, each on its own
// rows of a global batch, and checks every rank against one rank that takes
// the whole global batch as N times as many micro-batches: the same loss,
// parameters and optimizer state, up to summation order (the model is f64).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ir/Evaluator.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

constexpr int64_t kMicro = 2;

TrainingOptions adamWOptions(int64_t worldSize, int64_t gradAccum) {
  TrainingOptions o;
  o.optimizer = OptimizerKind::adamw;
  o.lr = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weightDecay = 0.1;
  o.clip = 0.5;
  o.worldSize = worldSize;
  o.gradAccum = gradAccum;
  return o;
}

/// Row r of the global batch.
std::vector<double> row(int64_t r) {
  return {0.5 + 0.25 * r, -1.0 + 0.375 * (r % 3), 2.0 - 0.5 * (r % 5)};
}

class DataParallelTest : public IRTest {
protected:
  FailureOr<func::FuncOp> build(const TrainingOptions &options) {
    if (!parse(toyGradModel("f64"), "main_grad"))
      return failure();
    // sharc-optimizer builds one rank's step; sharc-data-parallel makes it
    // run on options.worldSize ranks.
    FailureOr<func::FuncOp> step = buildTrainStep(*modules.back(), options);
    if (failed(step) || failed(applyDataParallel(*modules.back(), options))) {
      ADD_FAILURE() << "building the step failed:\n" << diagnostics;
      return failure();
    }
    return step;
  }

  /// The arguments of the step on rows [first, first + count) of the batch.
  static std::vector<Tensor> stepArgs(int64_t first, int64_t count) {
    std::vector<Tensor> args{makeTensor(DType::f64, {3}, {0.5, -1.25, 2.0}),
                             makeTensor(DType::f64, {3}, {0.125, -0.5, 1.0}),
                             makeTensor(DType::f64, {}, {0.75}),
                             makeTensor(DType::f64, {3}, {0.03, -0.02, 0.01}),
                             makeTensor(DType::f64, {3}, {0.004, 0.001, 0.002}),
                             makeTensor(DType::f64, {}, {0.05}),
                             makeTensor(DType::f64, {}, {0.003}),
                             makeTensor(DType::i64, {}, {3})};
    std::vector<double> x;
    for (int64_t r = first; r < first + count; ++r) {
      std::vector<double> values = row(r);
      x.insert(x.end(), values.begin(), values.end());
    }
    args.push_back(makeTensor(DType::f64, {count, 3}, x));
    return args;
  }

  /// Runs `worldSize` ranks of the step of `options` and checks each against
  /// one rank with worldSize times the micro-batches.
  void checkAgainstSingleRank(TrainingOptions options) {
    int64_t n = options.worldSize, gas = options.gradAccum;
    int64_t rows = kMicro * gas;
    FailureOr<func::FuncOp> step = build(options);
    ASSERT_TRUE(succeeded(step));
    std::vector<std::vector<Tensor>> argsPerRank;
    for (int64_t r = 0; r < n; ++r)
      argsPerRank.push_back(stepArgs(r * rows, rows));
    FailureOr<std::vector<std::vector<Tensor>>> ranks =
        evaluateRanks(*step, argsPerRank);
    ASSERT_TRUE(succeeded(ranks)) << diagnostics;

    TrainingOptions single = options;
    single.worldSize = 1;
    single.gradAccum = gas * n;
    FailureOr<func::FuncOp> reference = build(single);
    ASSERT_TRUE(succeeded(reference));
    FailureOr<std::vector<Tensor>> expected =
        evaluate(*reference, stepArgs(0, rows * n));
    ASSERT_TRUE(succeeded(expected)) << diagnostics;

    for (int64_t r = 0; r < n; ++r) {
      const std::vector<Tensor> &results = (*ranks)[r];
      ASSERT_EQ(results.size(), expected->size());
      for (size_t i = 0; i < results.size(); ++i) {
        ASSERT_EQ(results[i].numElements(), (*expected)[i].numElements());
        for (int64_t j = 0; j < results[i].numElements(); ++j) {
          double got = results[i].getDouble(j);
          double want = (*expected)[i].getDouble(j);
          EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-300)
              << "rank " << r << " result " << i << " element " << j;
          EXPECT_EQ(got, (*ranks)[0][i].getDouble(j))
              << "rank " << r << " differs from rank 0: result " << i
              << " element " << j;
        }
      }
    }
  }

  /// The number of ops named `name` in `func`.
  static int count(func::FuncOp func, StringRef name) {
    int n = 0;
    func.walk(
        [&](Operation *op) { n += op->getName().getStringRef() == name; });
    return n;
  }
};

} // namespace

TEST_F(DataParallelTest, MatchesSingleRank) {
  for (int64_t n : {2, 4})
    for (int64_t gas : {1, 2}) {
      SCOPED_TRACE("world size " + std::to_string(n) + ", GAS " +
                   std::to_string(gas));
      checkAgainstSingleRank(adamWOptions(n, gas));
    }
}

TEST_F(DataParallelTest, BucketsSplit) {
  // w (3 elements) and b (1): one bucket of 4, or w and b in buckets of
  // their own; either way the step matches the single rank.  Besides the
  // bucket's, the clipping norm pads w and b to rows of 2 (one concat each:
  // it sums the ranks' slices as sharc-zero does).
  struct Case {
    int64_t bucketSize;
    int allReduces, concats;
  };
  for (Case c : {Case{4, 2, 1 + 2}, Case{3, 3, 2}, Case{1, 3, 2}}) {
    SCOPED_TRACE("bucket size " + std::to_string(c.bucketSize));
    TrainingOptions o = adamWOptions(2, 2);
    o.reduceBucketSize = c.bucketSize;
    FailureOr<func::FuncOp> step = build(o);
    ASSERT_TRUE(succeeded(step));
    // One all-reduce per bucket and one for the loss.
    EXPECT_EQ(count(*step, "sharc.all_reduce"), c.allReduces);
    EXPECT_EQ(count(*step, "sharc.concat"), c.concats);
    checkAgainstSingleRank(o);
  }
}

TEST_F(DataParallelTest, OneRankHasNoCollectives) {
  FailureOr<func::FuncOp> step = build(adamWOptions(1, 2));
  ASSERT_TRUE(succeeded(step));
  EXPECT_EQ(count(*step, "sharc.all_reduce"), 0);
}
