//===- EvaluatorTest.cpp - the evaluator on elementwise, linalg, data ops -===//
//
// Every expected value is computed here from the op's definition (loops and
// formulas in double, rounded with casts), never copied from the evaluator.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <chrono>
#include <cmath>
#include <functional>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

class EvalTest : public IRTest {};

double toF32(double x) { return static_cast<float>(x); }
double toF16(double x) { return static_cast<double>(static_cast<_Float16>(x)); }

std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numElements(); ++i)
    v.push_back(t.getDouble(i));
  return v;
}

std::vector<int64_t> ints(const Tensor &t) {
  return std::vector<int64_t>(t.ints().begin(), t.ints().end());
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(EvalTest, UnaryFloatOps) {
  struct Case {
    const char *op;
    std::function<double(double)> fn;
  };
  const Case cases[] = {
      {"exp", [](double x) { return std::exp(x); }},
      {"log", [](double x) { return std::log(x); }},
      {"sqrt", [](double x) { return std::sqrt(x); }},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }},
      {"erf", [](double x) { return std::erf(x); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"neg", [](double x) { return -x; }},
      {"abs", [](double x) { return std::fabs(x); }},
      {"relu", [](double x) { return x > 0 ? x : 0; }},
  };
  for (const char *element : {"f32", "f16"}) {
    DType type = element[1] == '3' ? DType::f32 : DType::f16;
    auto round = type == DType::f32 ? toF32 : toF16;
    Tensor x = randomTensor(type, {3, 5}, 11, 0.05, 3);
    x.setDouble(0, -0.5); // exercises neg/abs/relu (log etc. give NaN)
    for (const Case &c : cases) {
      std::string t = tensorType({3, 5}, element);
      std::string text = substitute(R"(
        func.func @main(%x: $1) -> $1 {
          %0 = sharc.$0 %x : $1
          return %0 : $1
        })",
                                    {c.op, t});
      std::vector<Tensor> r = run(text, {x});
      ASSERT_EQ(r.size(), 1u);
      std::vector<double> expected;
      for (double v : values(x))
        expected.push_back(round(c.fn(v)));
      expectClose(r[0], expected, 0, c.op);
    }
  }
}

TEST_F(EvalTest, Gelu) {
  Tensor x = makeTensor(DType::f64, {5}, {-3, -0.5, 0, 0.7, 2.5});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<5xf64>) -> (tensor<5xf64>, tensor<5xf64>) {
      %0 = sharc.gelu %x : tensor<5xf64>
      %1 = sharc.gelu %x {approximation = #sharc.gelu_approximation<tanh>} : tensor<5xf64>
      return %0, %1 : tensor<5xf64>, tensor<5xf64>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  std::vector<double> exact, approx;
  for (double v : values(x)) {
    exact.push_back(v * 0.5 * (1 + std::erf(v / std::sqrt(2.0))));
    approx.push_back(
        v * 0.5 *
        (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  expectClose(r[0], exact, 1e-15, "gelu");
  expectClose(r[1], approx, 1e-15, "gelu tanh");
}

TEST_F(EvalTest, IntegerUnaryOpsWrap) {
  int64_t minI32 = -(int64_t(1) << 31);
  Tensor x = makeTensor(DType::i32, {4}, {double(minI32), -5, 0, 7});
  Tensor b = makeTensor(DType::i1, {3}, {1, 0, 1});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<4xi32>, %b: tensor<3xi1>)
        -> (tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<3xi1>) {
      %0 = sharc.neg %x : tensor<4xi32>
      %1 = sharc.abs %x : tensor<4xi32>
      %2 = sharc.relu %x : tensor<4xi32>
      %3 = sharc.not %b : tensor<3xi1>
      return %0, %1, %2, %3 : tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<3xi1>
    })",
                              {x, b});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{minI32, 5, 0, -7}));
  EXPECT_EQ(ints(r[1]), (std::vector<int64_t>{minI32, 5, 0, 7}));
  EXPECT_EQ(ints(r[2]), (std::vector<int64_t>{0, 0, 0, 7}));
  EXPECT_EQ(ints(r[3]), (std::vector<int64_t>{0, 1, 0}));
}

TEST_F(EvalTest, BroadcastingBinaryFloatOps) {
  struct Case {
    const char *op;
    std::function<double(double, double)> fn;
  };
  const Case cases[] = {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"pow", [](double a, double b) { return std::pow(a, b); }},
      {"max", [](double a, double b) { return std::max(a, b); }},
      {"min", [](double a, double b) { return std::min(a, b); }},
  };
  // [2,1,3] op [4,1] -> [2,4,3].
  Tensor a = randomTensor(DType::f32, {2, 1, 3}, 1, 0.1, 2);
  Tensor b = randomTensor(DType::f32, {4, 1}, 2, -2, 2);
  for (const Case &c : cases) {
    std::string text = substitute(R"(
      func.func @main(%a: tensor<2x1x3xf32>, %b: tensor<4x1xf32>) -> tensor<2x4x3xf32> {
        %0 = sharc.$0 %a, %b : (tensor<2x1x3xf32>, tensor<4x1xf32>) -> tensor<2x4x3xf32>
        return %0 : tensor<2x4x3xf32>
      })",
                                  {c.op});
    std::vector<Tensor> r = run(text, {a, b});
    ASSERT_EQ(r.size(), 1u);
    std::vector<double> expected;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 3; ++k)
          expected.push_back(
              toF32(c.fn(a.getDouble(i * 3 + k), b.getDouble(j))));
    expectClose(r[0], expected, 0, c.op);
  }
}

TEST_F(EvalTest, MaxMinPropagateNaN) {
  Tensor a = makeTensor(DType::f64, {3}, {NAN, 1, 2});
  Tensor b = makeTensor(DType::f64, {3}, {1, NAN, 3});
  std::vector<Tensor> r = run(R"(
    func.func @main(%a: tensor<3xf64>, %b: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) {
      %0 = sharc.max %a, %b : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
      %1 = sharc.min %a, %b : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
      %2 = sharc.relu %a : tensor<3xf64>
      return %0, %1, %2 : tensor<3xf64>, tensor<3xf64>, tensor<3xf64>
    })",
                              {a, b});
  ASSERT_EQ(r.size(), 3u);
  expectClose(r[0], {NAN, NAN, 3}, 0, "max");
  expectClose(r[1], {NAN, NAN, 2}, 0, "min");
  expectClose(r[2], {NAN, 1, 2}, 0, "relu");
}

TEST_F(EvalTest, IntegerBinaryOps) {
  int64_t minI32 = -(int64_t(1) << 31);
  Tensor a =
      makeTensor(DType::i32, {8}, {-7, 7, -7, 7, 65536, double(minI32), 2, -3});
  Tensor b = makeTensor(DType::i32, {8}, {2, -2, -2, 2, 65536, -1, 10, 3});
  std::vector<Tensor> r = run(R"(
    func.func @main(%a: tensor<8xi32>, %b: tensor<8xi32>)
        -> (tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>) {
      %0 = sharc.div %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      %1 = sharc.mul %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      %2 = sharc.add %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      %3 = sharc.sub %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      %4 = sharc.max %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      %5 = sharc.min %a, %b : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
      return %0, %1, %2, %3, %4, %5 : tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>
    })",
                              {a, b});
  ASSERT_EQ(r.size(), 6u);
  // Division truncates toward zero; INT32_MIN / -1 and 2^16 * 2^16 wrap.
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{-3, -3, 3, 3, 1, minI32, 0, -1}));
  EXPECT_EQ(ints(r[1]),
            (std::vector<int64_t>{-14, -14, 14, 14, 0, minI32, 20, -9}));
  EXPECT_EQ(ints(r[2]),
            (std::vector<int64_t>{-5, 5, -9, 9, 131072, 2147483647, 12, 0}));
  EXPECT_EQ(ints(r[3]),
            (std::vector<int64_t>{-9, 9, -5, 5, 0, -2147483647, -8, -6}));
  EXPECT_EQ(ints(r[4]), (std::vector<int64_t>{2, 7, -2, 7, 65536, -1, 10, 3}));
  EXPECT_EQ(ints(r[5]),
            (std::vector<int64_t>{-7, -2, -7, 2, 65536, minI32, 2, -3}));

  Tensor base = makeTensor(DType::i64, {7}, {2, 3, -2, 2, 1, -1, 5});
  Tensor exponent = makeTensor(DType::i64, {7}, {10, 3, 3, 0, -3, -3, -1});
  r = run(R"(
    func.func @main(%a: tensor<7xi64>, %b: tensor<7xi64>) -> tensor<7xi64> {
      %0 = sharc.pow %a, %b : (tensor<7xi64>, tensor<7xi64>) -> tensor<7xi64>
      return %0 : tensor<7xi64>
    })",
          {base, exponent});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{1024, 27, -8, 1, 1, -1, 0}));
}

TEST_F(EvalTest, IntegerDivisionByZeroIsAnError) {
  Tensor a = makeTensor(DType::i64, {2}, {1, 2});
  Tensor b = makeTensor(DType::i64, {2}, {1, 0});
  std::string errors = runFailing(R"(
    func.func @main(%a: tensor<2xi64>, %b: tensor<2xi64>) -> tensor<2xi64> {
      %0 = sharc.div %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
      return %0 : tensor<2xi64>
    })",
                                  {a, b});
  EXPECT_NE(errors.find("integer division by zero"), std::string::npos)
      << errors;
}

TEST_F(EvalTest, CompareSelectLogic) {
  Tensor a = makeTensor(DType::f32, {2, 3}, {1, 2, 3, NAN, 5, -1});
  Tensor b = makeTensor(DType::f32, {3}, {2, 2, 2});
  Tensor c = makeTensor(DType::i1, {2, 1}, {1, 0});
  std::vector<Tensor> r = run(R"(
    func.func @main(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x1xi1>)
        -> (tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>,
            tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi1>) {
      %eq = sharc.compare %a, %b {predicate = #sharc.predicate<eq>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %ne = sharc.compare %a, %b {predicate = #sharc.predicate<ne>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %lt = sharc.compare %a, %b {predicate = #sharc.predicate<lt>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %le = sharc.compare %a, %b {predicate = #sharc.predicate<le>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %gt = sharc.compare %a, %b {predicate = #sharc.predicate<gt>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %ge = sharc.compare %a, %b {predicate = #sharc.predicate<ge>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
      %s = sharc.select %c, %a, %b : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %and = sharc.and %lt, %c : (tensor<2x3xi1>, tensor<2x1xi1>) -> tensor<2x3xi1>
      %or = sharc.or %gt, %c : (tensor<2x3xi1>, tensor<2x1xi1>) -> tensor<2x3xi1>
      return %eq, %ne, %lt, %le, %gt, %ge, %s, %and, %or : tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi1>
    })",
                              {a, b, c});
  ASSERT_EQ(r.size(), 9u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(ints(r[1]), (std::vector<int64_t>{1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(ints(r[2]), (std::vector<int64_t>{1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(ints(r[3]), (std::vector<int64_t>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(ints(r[4]), (std::vector<int64_t>{0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(ints(r[5]), (std::vector<int64_t>{0, 1, 1, 0, 1, 0}));
  expectClose(r[6], {1, 2, 3, 2, 2, 2}, 0, "select");
  EXPECT_EQ(ints(r[7]), (std::vector<int64_t>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ints(r[8]), (std::vector<int64_t>{1, 1, 1, 0, 1, 0}));
}

TEST_F(EvalTest, Cast) {
  Tensor x = makeTensor(DType::f32, {4}, {-2.5, 0.1, 0, 70000});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<4xf32>) -> (tensor<4xi32>, tensor<4xf16>, tensor<4xi1>, tensor<4xf32>) {
      %0 = sharc.cast %x : tensor<4xf32> to tensor<4xi32>
      %1 = sharc.cast %x : tensor<4xf32> to tensor<4xf16>
      %2 = sharc.cast %x : tensor<4xf32> to tensor<4xi1>
      %3 = sharc.cast %2 : tensor<4xi1> to tensor<4xf32>
      return %0, %1, %2, %3 : tensor<4xi32>, tensor<4xf16>, tensor<4xi1>, tensor<4xf32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{-2, 0, 0, 70000}));
  expectClose(r[1], {-2.5, toF16(toF32(0.1)), 0, INFINITY}, 0, "to f16");
  EXPECT_EQ(ints(r[2]), (std::vector<int64_t>{1, 1, 0, 1}));
  expectClose(r[3], {1, 1, 0, 1}, 0, "i1 to f32");
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// Naive batched matmul in double: out[b..., i, j] = sum_p A[i, p] B[p, j],
/// with numpy batch broadcasting and optional transposes.
std::vector<double> naiveMatmul(const Tensor &a, const Tensor &b, bool ta,
                                bool tb, ArrayRef<int64_t> outShape) {
  int64_t m = outShape[outShape.size() - 2], n = outShape.back();
  int64_t k = ta ? a.shape()[a.rank() - 2] : a.shape().back();
  ArrayRef<int64_t> batch = outShape.drop_back(2);
  int64_t batches = 1;
  for (int64_t d : batch)
    batches *= d;
  std::vector<double> out;
  for (int64_t linear = 0; linear < batches; ++linear) {
    // Unravel the batch index, then map it into each operand's batch dims.
    std::vector<int64_t> index(batch.size());
    for (int64_t rest = linear, d = batch.size() - 1; d >= 0; --d) {
      index[d] = rest % batch[d];
      rest /= batch[d];
    }
    auto element = [&](const Tensor &t, int64_t r, int64_t c) {
      std::vector<int64_t> full;
      int64_t offset = batch.size() - (t.rank() - 2);
      for (int64_t d = 0; d < t.rank() - 2; ++d)
        full.push_back(t.shape()[d] == 1 ? 0 : index[offset + d]);
      full.push_back(r);
      full.push_back(c);
      return t.getDouble(linearIndex(t.shape(), full));
    };
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += (ta ? element(a, p, i) : element(a, i, p)) *
                 (tb ? element(b, j, p) : element(b, p, j));
        out.push_back(sum);
      }
  }
  return out;
}

TEST_F(EvalTest, MatmulEveryDTypeWithBroadcastAndTransposes) {
  struct Case {
    const char *element;
    DType type;
    double tolerance;
  };
  const Case cases[] = {{"f32", DType::f32, 1e-5}, {"f64", DType::f64, 1e-12},
                        {"f16", DType::f16, 1e-3}, {"bf16", DType::bf16, 8e-3},
                        {"i64", DType::i64, 0},    {"i32", DType::i32, 0}};
  for (const Case &c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        // lhs [2,1,3,4] (m=3, k=4), rhs [5,4,2] (n=2) -> [2,5,3,2].
        SmallVector<int64_t> lhsShape = ta ? SmallVector<int64_t>{2, 1, 4, 3}
                                           : SmallVector<int64_t>{2, 1, 3, 4};
        SmallVector<int64_t> rhsShape =
            tb ? SmallVector<int64_t>{5, 2, 4} : SmallVector<int64_t>{5, 4, 2};
        double range = isFloat(c.type) ? 1 : 20;
        Tensor a = randomTensor(c.type, lhsShape, 3, -range, range);
        Tensor b = randomTensor(c.type, rhsShape, 4, -range, range);
        std::string text = substitute(
            R"(
          func.func @main(%a: $0, %b: $1) -> $2 {
            %0 = sharc.matmul %a, %b {transpose_lhs = $3, transpose_rhs = $4} : ($0, $1) -> $2
            return %0 : $2
          })",
            {tensorType(lhsShape, c.element), tensorType(rhsShape, c.element),
             tensorType({2, 5, 3, 2}, c.element), ta ? "true" : "false",
             tb ? "true" : "false"});
        std::vector<Tensor> r = run(text, {a, b});
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].shape(), (ArrayRef<int64_t>{2, 5, 3, 2}));
        std::vector<double> expected = naiveMatmul(a, b, ta, tb, {2, 5, 3, 2});
        std::string what =
            std::string(c.element) + (ta ? " ta" : "") + (tb ? " tb" : "");
        expectClose(r[0], expected, c.tolerance, what.c_str());
        // Results are representable in the dtype.
        for (int64_t i = 0; isFloat(c.type) && i < r[0].numElements(); ++i)
          ASSERT_EQ(r[0].getDouble(i), roundTo(c.type, r[0].getDouble(i)));
      }
}

TEST_F(EvalTest, MatmulIntegerWraps) {
  Tensor a = makeTensor(DType::i32, {1, 2}, {65536, 65536});
  Tensor b = makeTensor(DType::i32, {2, 1}, {32768, 32768});
  std::vector<Tensor> r = run(R"(
    func.func @main(%a: tensor<1x2xi32>, %b: tensor<2x1xi32>) -> tensor<1x1xi32> {
      %0 = sharc.matmul %a, %b : (tensor<1x2xi32>, tensor<2x1xi32>) -> tensor<1x1xi32>
      return %0 : tensor<1x1xi32>
    })",
                              {a, b});
  ASSERT_EQ(r.size(), 1u);
  // 2 * 2^31 = 2^32 wraps to 0.
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{0}));
}

//===----------------------------------------------------------------------===//
// Reductions, softmax, layer_norm
//===----------------------------------------------------------------------===//

TEST_F(EvalTest, Reduce) {
  Tensor x = randomTensor(DType::f32, {2, 3, 4}, 5);
  x.setDouble(5, 7.5);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x3x4xf32>)
        -> (tensor<3xf32>, tensor<2x1x4xf32>, tensor<2x3xf32>, tensor<2x3x4xf32>, tensor<f32>) {
      %0 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>
      %1 = sharc.reduce %x {kind = #sharc.reduce_kind<mean>, axes = array<i64: 1>, keep_dims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
      %2 = sharc.reduce %x {kind = #sharc.reduce_kind<max>, axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
      %3 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
      %4 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
      return %0, %1, %2, %3, %4 : tensor<3xf32>, tensor<2x1x4xf32>, tensor<2x3xf32>, tensor<2x3x4xf32>, tensor<f32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 5u);
  auto at = [&](int i, int j, int k) {
    return x.getDouble((i * 3 + j) * 4 + k);
  };
  std::vector<double> sum02(3, 0), mean1, max2;
  double total = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        sum02[j] += at(i, j, k);
        total += at(i, j, k);
      }
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      mean1.push_back(toF32((at(i, 0, k) + at(i, 1, k) + at(i, 2, k)) / 3));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      max2.push_back(
          std::max({at(i, j, 0), at(i, j, 1), at(i, j, 2), at(i, j, 3)}));
  for (double &v : sum02)
    v = toF32(v);
  expectClose(r[0], sum02, 0, "sum over 0, 2");
  expectClose(r[1], mean1, 0, "mean over 1");
  expectClose(r[2], max2, 0, "max over 2");
  EXPECT_EQ(r[3], x);
  expectClose(r[4], {toF32(total)}, 0, "sum over all");
}

TEST_F(EvalTest, ReduceIntegers) {
  Tensor x = makeTensor(DType::i32, {2, 2}, {2147483647, 1, -5, 3});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x2xi32>) -> (tensor<2xi32>, tensor<2xi32>) {
      %0 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 1>} : (tensor<2x2xi32>) -> tensor<2xi32>
      %1 = sharc.reduce %x {kind = #sharc.reduce_kind<max>, axes = array<i64: 0>} : (tensor<2x2xi32>) -> tensor<2xi32>
      return %0, %1 : tensor<2xi32>, tensor<2xi32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{-2147483647 - 1, -2}));
  EXPECT_EQ(ints(r[1]), (std::vector<int64_t>{2147483647, 3}));
}

TEST_F(EvalTest, SoftmaxAndLogSoftmax) {
  Tensor x = randomTensor(DType::f64, {2, 3, 4}, 6, -3, 3);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x3x4xf64>) -> (tensor<2x3x4xf64>, tensor<2x3x4xf64>) {
      %0 = sharc.softmax %x {axis = 1} : tensor<2x3x4xf64>
      %1 = sharc.log_softmax %x {axis = 1} : tensor<2x3x4xf64>
      return %0, %1 : tensor<2x3x4xf64>, tensor<2x3x4xf64>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  std::vector<double> soft(24), logSoft(24);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double sum = 0;
      for (int j = 0; j < 3; ++j)
        sum += std::exp(x.getDouble((i * 3 + j) * 4 + k));
      for (int j = 0; j < 3; ++j) {
        int idx = (i * 3 + j) * 4 + k;
        soft[idx] = std::exp(x.getDouble(idx)) / sum;
        logSoft[idx] = x.getDouble(idx) - std::log(sum);
      }
    }
  expectClose(r[0], soft, 1e-14, "softmax");
  expectClose(r[1], logSoft, 1e-14, "log_softmax");
}

TEST_F(EvalTest, LayerNorm) {
  Tensor x = randomTensor(DType::f32, {2, 3, 4}, 7, -2, 2);
  Tensor scale = randomTensor(DType::f32, {4}, 8, 0.5, 1.5);
  Tensor bias = randomTensor(DType::f32, {3, 1}, 9);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>, %b: tensor<3x1xf32>)
        -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>) {
      %y, %mean, %inv = sharc.layer_norm %x, %s, %b {axis = 1, epsilon = 1.0e-5}
          : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<3x1xf32>) -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>)
      return %y, %mean, %inv : tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>
    })",
                              {x, scale, bias});
  ASSERT_EQ(r.size(), 3u);
  std::vector<double> y, means, invs;
  for (int i = 0; i < 2; ++i) {
    double mean = 0, var = 0;
    for (int e = 0; e < 12; ++e)
      mean += x.getDouble(i * 12 + e) / 12;
    for (int e = 0; e < 12; ++e)
      var += std::pow(x.getDouble(i * 12 + e) - mean, 2) / 12;
    double inv = 1 / std::sqrt(var + 1e-5);
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        y.push_back(toF32((x.getDouble(i * 12 + j * 4 + k) - mean) * inv *
                              scale.getDouble(k) +
                          bias.getDouble(j)));
    means.push_back(toF32(mean));
    invs.push_back(toF32(inv));
  }
  // One f32 ulp of slack for the summation order.
  expectClose(r[0], y, 2e-7, "y");
  expectClose(r[1], means, 2e-7, "mean");
  expectClose(r[2], invs, 2e-7, "inv_std");
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

TEST_F(EvalTest, NllLossWeightsIgnoreIndexReductions) {
  // input [N=3, C=4, d=2] of log-probabilities, target [3, 2].
  Tensor input = randomTensor(DType::f64, {3, 4, 2}, 10, -3, 0);
  Tensor target = makeTensor(DType::i64, {3, 2}, {0, 3, -100, 1, 2, 3});
  Tensor weight = makeTensor(DType::f64, {4}, {0.5, 1, 2, 0.25});
  const char *text = R"(
    func.func @main(%x: tensor<3x4x2xf64>, %t: tensor<3x2xi64>, %w: tensor<4xf64>)
        -> (tensor<3x2xf64>, tensor<f64>, tensor<f64>, tensor<f64>) {
      %0 = sharc.nll_loss %x, %t, %w {reduction = #sharc.loss_reduction<none>, ignore_index = -100}
          : (tensor<3x4x2xf64>, tensor<3x2xi64>, tensor<4xf64>) -> tensor<3x2xf64>
      %1 = sharc.nll_loss %x, %t, %w {reduction = #sharc.loss_reduction<sum>, ignore_index = -100}
          : (tensor<3x4x2xf64>, tensor<3x2xi64>, tensor<4xf64>) -> tensor<f64>
      %2 = sharc.nll_loss %x, %t, %w {reduction = #sharc.loss_reduction<mean>, ignore_index = -100}
          : (tensor<3x4x2xf64>, tensor<3x2xi64>, tensor<4xf64>) -> tensor<f64>
      %3 = sharc.nll_loss %x, %t {reduction = #sharc.loss_reduction<mean>, ignore_index = -100}
          : (tensor<3x4x2xf64>, tensor<3x2xi64>) -> tensor<f64>
      return %0, %1, %2, %3 : tensor<3x2xf64>, tensor<f64>, tensor<f64>, tensor<f64>
    })";
  std::vector<Tensor> r = run(text, {input, target, weight});
  ASSERT_EQ(r.size(), 4u);
  std::vector<double> none;
  double sum = 0, weights = 0, unweighted = 0, count = 0;
  for (int n = 0; n < 3; ++n)
    for (int d = 0; d < 2; ++d) {
      int64_t t = target.ints()[n * 2 + d];
      if (t == -100) {
        none.push_back(0);
        continue;
      }
      double logProb = input.getDouble((n * 4 + t) * 2 + d);
      none.push_back(-logProb * weight.getDouble(t));
      sum += -logProb * weight.getDouble(t);
      weights += weight.getDouble(t);
      unweighted += -logProb;
      count += 1;
    }
  expectClose(r[0], none, 1e-15, "none");
  expectClose(r[1], {sum}, 1e-15, "sum");
  expectClose(r[2], {sum / weights}, 1e-15, "weighted mean");
  expectClose(r[3], {unweighted / count}, 1e-15, "mean");

  // A target outside [0, C) that is not ignored is a run-time error.
  Tensor bad = makeTensor(DType::i64, {3, 2}, {0, 4, 1, 1, 2, 3});
  std::string errors = runFailing(text, {input, bad, weight});
  EXPECT_NE(errors.find("target 4"), std::string::npos) << errors;
}

TEST_F(EvalTest, CrossEntropyIsNllOfLogSoftmax) {
  Tensor logits = randomTensor(DType::f32, {4, 5}, 12, -4, 4);
  Tensor target = makeTensor(DType::i32, {4}, {4, 0, 2, 2});
  Tensor weight = makeTensor(DType::f32, {5}, {1, 2, 0.5, 1, 3});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<4x5xf32>, %t: tensor<4xi32>, %w: tensor<5xf32>) -> (tensor<f32>, tensor<4xf32>) {
      %0 = sharc.cross_entropy %x, %t, %w {reduction = #sharc.loss_reduction<mean>, ignore_index = 0}
          : (tensor<4x5xf32>, tensor<4xi32>, tensor<5xf32>) -> tensor<f32>
      %1 = sharc.cross_entropy %x, %t {reduction = #sharc.loss_reduction<none>}
          : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<4xf32>
      return %0, %1 : tensor<f32>, tensor<4xf32>
    })",
                              {logits, target, weight});
  ASSERT_EQ(r.size(), 2u);
  double sum = 0, weights = 0;
  std::vector<double> none;
  for (int n = 0; n < 4; ++n) {
    double lse = 0;
    for (int c = 0; c < 5; ++c)
      lse += std::exp(logits.getDouble(n * 5 + c));
    lse = std::log(lse);
    int64_t t = target.ints()[n];
    double loss = -(logits.getDouble(n * 5 + t) - lse);
    none.push_back(toF32(loss));
    if (t == 0)
      continue;
    sum += loss * weight.getDouble(t);
    weights += weight.getDouble(t);
  }
  expectClose(r[0], {toF32(sum / weights)}, 1e-7, "weighted mean");
  expectClose(r[1], none, 1e-7, "none");
}

//===----------------------------------------------------------------------===//
// Data movement and generators
//===----------------------------------------------------------------------===//

TEST_F(EvalTest, TransposeBroadcastReshape) {
  Tensor x = randomTensor(DType::bf16, {2, 3, 4}, 13);
  Tensor v = makeTensor(DType::i64, {3, 1}, {7, 8, 9});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x3x4xbf16>, %v: tensor<3x1xi64>)
        -> (tensor<4x2x3xbf16>, tensor<2x3x2xi64>, tensor<6x4xbf16>) {
      %0 = sharc.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
      %1 = sharc.broadcast %v : tensor<3x1xi64> to tensor<2x3x2xi64>
      %2 = sharc.reshape %x : tensor<2x3x4xbf16> to tensor<6x4xbf16>
      return %0, %1, %2 : tensor<4x2x3xbf16>, tensor<2x3x2xi64>, tensor<6x4xbf16>
    })",
                              {x, v});
  ASSERT_EQ(r.size(), 3u);
  std::vector<double> transposed;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        transposed.push_back(x.getDouble((i * 3 + j) * 4 + k));
  expectClose(r[0], transposed, 0, "transpose");
  EXPECT_EQ(ints(r[1]),
            (std::vector<int64_t>{7, 7, 8, 8, 9, 9, 7, 7, 8, 8, 9, 9}));
  EXPECT_EQ(r[2].shape(), (ArrayRef<int64_t>{6, 4}));
  expectClose(r[2], values(x), 0, "reshape");
}

TEST_F(EvalTest, SliceWithNegativeStrides) {
  Tensor x = randomTensor(DType::f32, {4, 5}, 14);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<4x5xf32>) -> (tensor<2x3xf32>, tensor<4x5xf32>) {
      %0 = sharc.slice %x {start = array<i64: 3, 0>, stride = array<i64: -2, 2>} : tensor<4x5xf32> to tensor<2x3xf32>
      %1 = sharc.slice %x {start = array<i64: 3, 4>, stride = array<i64: -1, -1>} : tensor<4x5xf32> to tensor<4x5xf32>
      return %0, %1 : tensor<2x3xf32>, tensor<4x5xf32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  std::vector<double> strided, reversed;
  for (int i : {3, 1})
    for (int j : {0, 2, 4})
      strided.push_back(x.getDouble(i * 5 + j));
  for (int i = 3; i >= 0; --i)
    for (int j = 4; j >= 0; --j)
      reversed.push_back(x.getDouble(i * 5 + j));
  expectClose(r[0], strided, 0, "strided");
  expectClose(r[1], reversed, 0, "reversed");
}

TEST_F(EvalTest, ConcatGatherTriluIotaConstant) {
  Tensor a = makeTensor(DType::i32, {2, 1}, {1, 2});
  Tensor b = makeTensor(DType::i32, {2, 2}, {3, 4, 5, 6});
  Tensor data = randomTensor(DType::f16, {2, 4, 3}, 15);
  Tensor idx = makeTensor(DType::i64, {2, 2}, {0, -1, 3, -4});
  Tensor m = randomTensor(DType::f64, {2, 3, 4}, 16);
  std::vector<Tensor> r = run(R"(
    func.func @main(%a: tensor<2x1xi32>, %b: tensor<2x2xi32>, %data: tensor<2x4x3xf16>,
                    %idx: tensor<2x2xi64>, %m: tensor<2x3x4xf64>)
        -> (tensor<2x4xi32>, tensor<2x2x2x3xf16>, tensor<2x3x4xf64>, tensor<2x3x4xf64>,
            tensor<2x3xf32>, tensor<2x3xbf16>, tensor<3xi1>) {
      %0 = sharc.concat %a, %b, %a {axis = 1} : (tensor<2x1xi32>, tensor<2x2xi32>, tensor<2x1xi32>) -> tensor<2x4xi32>
      %1 = sharc.gather %data, %idx {axis = 1} : (tensor<2x4x3xf16>, tensor<2x2xi64>) -> tensor<2x2x2x3xf16>
      %2 = sharc.trilu %m {upper = true, diagonal = 1} : tensor<2x3x4xf64>
      %3 = sharc.trilu %m {upper = false, diagonal = -1} : tensor<2x3x4xf64>
      %4 = sharc.iota {dimension = 1} : tensor<2x3xf32>
      %5 = sharc.constant dense<[[1.0, 2.0, 3.0], [0.1, 5.0, 6.0]]> : tensor<2x3xbf16>
      %6 = sharc.constant dense<true> : tensor<3xi1>
      return %0, %1, %2, %3, %4, %5, %6 : tensor<2x4xi32>, tensor<2x2x2x3xf16>, tensor<2x3x4xf64>, tensor<2x3x4xf64>, tensor<2x3xf32>, tensor<2x3xbf16>, tensor<3xi1>
    })",
                              {a, b, data, idx, m});
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{1, 3, 4, 1, 2, 5, 6, 2}));
  std::vector<double> gathered;
  for (int i = 0; i < 2; ++i)
    for (int64_t j : {0, 3, 3, 0}) // -1 -> 3, -4 -> 0
      for (int k = 0; k < 3; ++k)
        gathered.push_back(data.getDouble((i * 4 + j) * 3 + k));
  expectClose(r[1], gathered, 0, "gather");
  std::vector<double> upper, lower;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double v = m.getDouble((b * 3 + i) * 4 + j);
        upper.push_back(j - i >= 1 ? v : 0);
        lower.push_back(j - i <= -1 ? v : 0);
      }
  expectClose(r[2], upper, 0, "upper");
  expectClose(r[3], lower, 0, "lower");
  expectClose(r[4], {0, 1, 2, 0, 1, 2}, 0, "iota");
  expectClose(r[5], {1, 2, 3, 0.10009765625, 5, 6}, 0, "constant");
  EXPECT_EQ(ints(r[6]), (std::vector<int64_t>{1, 1, 1}));
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

const char *gatherText = R"(
  func.func @main(%data: tensor<4x2xf32>, %idx: tensor<3xi32>) -> tensor<3x2xf32> {
    %0 = sharc.gather %data, %idx {axis = 0} : (tensor<4x2xf32>, tensor<3xi32>) -> tensor<3x2xf32>
    return %0 : tensor<3x2xf32>
  })";

TEST_F(EvalTest, GatherIndexOutOfRange) {
  Tensor data = randomTensor(DType::f32, {4, 2}, 17);
  for (double bad : {4.0, -5.0}) {
    Tensor idx = makeTensor(DType::i32, {3}, {0, bad, 1});
    std::string errors = runFailing(gatherText, {data, idx});
    EXPECT_NE(errors.find("out of range"), std::string::npos) << errors;
  }
}

TEST_F(EvalTest, ArgumentMismatch) {
  Tensor data = randomTensor(DType::f32, {4, 2}, 17);
  Tensor idx = makeTensor(DType::i32, {3}, {0, 1, 2});
  std::string errors = runFailing(gatherText, {data});
  EXPECT_NE(errors.find("takes 2 arguments, got 1"), std::string::npos)
      << errors;
  errors = runFailing(gatherText, {data, idx.convertTo(DType::i64)});
  EXPECT_NE(errors.find("argument #1"), std::string::npos) << errors;
  errors = runFailing(gatherText, {data.reshaped({2, 4}), idx});
  EXPECT_NE(errors.find("argument #0"), std::string::npos) << errors;
}

TEST_F(EvalTest, UnsupportedOp) {
  context.allowUnregisteredDialects();
  Tensor x = randomTensor(DType::f32, {2}, 18);
  std::string errors = runFailing(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = "test.mystery"(%x) : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    })",
                                  {x});
  EXPECT_NE(errors.find("does not support 'test.mystery'"), std::string::npos)
      << errors;
}

TEST_F(EvalTest, EvaluateOp) {
  func::FuncOp func = parse(R"(
    func.func @main(%a: tensor<2xf16>, %b: tensor<2xf16>) -> tensor<2xf16> {
      %0 = sharc.add %a, %b : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>
      return %0 : tensor<2xf16>
    })");
  ASSERT_TRUE(func);
  Operation *add = &func.getBody().front().front();
  Tensor a = makeTensor(DType::f16, {2}, {1, 2048});
  Tensor b = makeTensor(DType::f16, {2}, {0x1p-11, 1});
  FailureOr<std::vector<Tensor>> r = evaluateOp(add, {a, b});
  ASSERT_TRUE(succeeded(r));
  // 1 + 2^-11 ties to 1; 2048 + 1 ties to 2048 (f16 spacing 2 there).
  expectClose((*r)[0], {1, 2048}, 0, "f16 add");
  diagnostics.clear();
  EXPECT_TRUE(failed(evaluateOp(add, {a})));
  EXPECT_TRUE(failed(evaluateOp(add, {a, a.convertTo(DType::f32)})));
  EXPECT_NE(diagnostics.find("operand #1"), std::string::npos) << diagnostics;
}

TEST_F(EvalTest, ReturnsArgumentsAndRepeatedValues) {
  Tensor x = randomTensor(DType::f32, {3}, 19);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %0 = sharc.neg %x : tensor<3xf32>
      %1 = sharc.neg %0 : tensor<3xf32>
      return %0, %x, %0, %1 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1], x);
  EXPECT_EQ(r[3], x);
  EXPECT_EQ(r[0], r[2]);
  expectClose(r[0], {-x.getDouble(0), -x.getDouble(1), -x.getDouble(2)}, 0);
}

TEST_F(EvalTest, MicroBatchLoopCarriesValuesInOrder) {
  // Three micro-batches of two rows; the body reads %w from above, carries a
  // running column sum and the product of the per-micro-batch totals, in
  // micro-batch order (float reduces sum in double and round once).
  Tensor x = randomTensor(DType::f32, {6, 3}, 21);
  Tensor w = randomTensor(DType::f32, {3}, 22);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<6x3xf32>, %w: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
      %zeros = sharc.constant dense<0.0> : tensor<3xf32>
      %one = sharc.constant dense<1.0> : tensor<f32>
      %r:2 = sharc.micro_batch_loop count 3 inputs(%x : tensor<6x3xf32>)
          inits(%zeros, %one : tensor<3xf32>, tensor<f32>) -> tensor<3xf32>, tensor<f32> {
      ^bb0(%m: tensor<2x3xf32>, %sum: tensor<3xf32>, %prod: tensor<f32>):
        %0 = sharc.mul %m, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
        %1 = sharc.reduce %0 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
        %2 = sharc.add %sum, %1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
        %3 = sharc.reduce %1 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
        %4 = sharc.mul %prod, %3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
        sharc.yield %2, %4 : tensor<3xf32>, tensor<f32>
      }
      return %r#0, %r#1 : tensor<3xf32>, tensor<f32>
    })",
                              {x, w});
  ASSERT_EQ(r.size(), 2u);
  // f32 arithmetic rounds each exact sum or product once, as the ops do.
  float sum[3] = {0, 0, 0}, prod = 1;
  for (int k = 0; k < 3; ++k) {
    float partial[3];
    for (int j = 0; j < 3; ++j) {
      float a = static_cast<float>(x.getDouble((2 * k) * 3 + j)) *
                static_cast<float>(w.getDouble(j));
      float b = static_cast<float>(x.getDouble((2 * k + 1) * 3 + j)) *
                static_cast<float>(w.getDouble(j));
      partial[j] = a + b;
      sum[j] += partial[j];
    }
    // A sum of three in double, rounded once.
    prod *= static_cast<float>(double(partial[0]) + partial[1] + partial[2]);
  }
  expectClose(r[0], {sum[0], sum[1], sum[2]}, 0, "carried sum");
  expectClose(r[1], {prod}, 0, "carried product");
}

TEST_F(EvalTest, RecursiveCallIsAnError) {
  Tensor x = randomTensor(DType::f32, {2}, 23);
  std::string errors = runFailing(R"(
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = func.call @again(%x) : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }
    func.func @again(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = func.call @main(%x) : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    })",
                                  {x});
  EXPECT_NE(errors.find("cannot evaluate a recursive call to '@main'"),
            std::string::npos)
      << errors;
}

//===----------------------------------------------------------------------===//
// A GPT-style toy model
//===----------------------------------------------------------------------===//

/// Writes the IR of a small GPT (token + position embeddings, pre-norm
/// attention and MLP blocks, tied output head, cross-entropy loss).
class GptWriter {
public:
  GptWriter(int64_t batch, int64_t seq, int64_t dim, int64_t heads,
            int64_t vocab, int layers)
      : b(batch), t(seq), d(dim), h(heads), v(vocab), layers(layers) {}

  std::string text() {
    std::string args = "%tokens: tensor<" + dims({b, t}) +
                       "xi64>, %targets: " + "tensor<" + dims({b, t}) + "xi64>";
    for (auto &[name, shape] : params())
      args += ", %" + name + ": " + f32(shape);
    std::string x =
        emit("gather %wte, %tokens {axis = 0} : (" + f32({v, d}) + ", tensor<" +
             dims({b, t}) + "xi64>) -> " + f32({b, t, d}));
    x = binary("add", x, "%wpe", {b, t, d}, {t, d});
    // Causal mask: key position <= query position.
    std::string rows =
        emit("iota {dimension = 0} : tensor<" + dims({t, t}) + "xi64>");
    std::string cols =
        emit("iota {dimension = 1} : tensor<" + dims({t, t}) + "xi64>");
    std::string mask = emit("compare " + cols + ", " + rows +
                            " {predicate = #sharc.predicate<le>} : (tensor<" +
                            dims({t, t}) + "xi64>, tensor<" + dims({t, t}) +
                            "xi64>) -> tensor<" + dims({t, t}) + "xi1>");
    std::string scale =
        emit("constant dense<" + std::to_string(1 / std::sqrt(double(d / h))) +
             "> : tensor<f32>");
    std::string minusInf = emit("constant dense<-1.0e9> : tensor<f32>");
    int64_t hd = d / h;
    for (int l = 0; l < layers; ++l) {
      std::string p = "%l" + std::to_string(l) + "_";
      std::string n1 = layerNorm(x, p + "ln1s", p + "ln1b");
      std::string qkv =
          matmul(n1, p + "wqkv", {b, t, d}, {d, 3 * d}, {b, t, 3 * d});
      std::string heads[3];
      for (int i = 0; i < 3; ++i) {
        std::string part =
            emit("slice " + qkv + " {start = array<i64: 0, 0, " +
                 std::to_string(i * d) + ">, stride = array<i64: 1, 1, 1>} : " +
                 f32({b, t, 3 * d}) + " to " + f32({b, t, d}));
        std::string split = emit("reshape " + part + " : " + f32({b, t, d}) +
                                 " to " + f32({b, t, h, hd}));
        heads[i] = emit("transpose " + split +
                        " {permutation = array<i64: 0, 2, 1, 3>} : (" +
                        f32({b, t, h, hd}) + ") -> " + f32({b, h, t, hd}));
      }
      std::string scores =
          emit("matmul " + heads[0] + ", " + heads[1] +
               " {transpose_rhs = true} : (" + f32({b, h, t, hd}) + ", " +
               f32({b, h, t, hd}) + ") -> " + f32({b, h, t, t}));
      scores = binary("mul", scores, scale, {b, h, t, t}, {});
      std::string masked =
          emit("select " + mask + ", " + scores + ", " + minusInf +
               " : (tensor<" + dims({t, t}) + "xi1>, " + f32({b, h, t, t}) +
               ", tensor<f32>) -> " + f32({b, h, t, t}));
      std::string probs =
          emit("softmax " + masked + " {axis = 3} : " + f32({b, h, t, t}));
      std::string mixed =
          matmul(probs, heads[2], {b, h, t, t}, {b, h, t, hd}, {b, h, t, hd});
      std::string merged = emit(
          "transpose " + mixed + " {permutation = array<i64: 0, 2, 1, 3>} : (" +
          f32({b, h, t, hd}) + ") -> " + f32({b, t, h, hd}));
      merged = emit("reshape " + merged + " : " + f32({b, t, h, hd}) + " to " +
                    f32({b, t, d}));
      x = binary("add", x,
                 matmul(merged, p + "wo", {b, t, d}, {d, d}, {b, t, d}),
                 {b, t, d}, {b, t, d});
      std::string n2 = layerNorm(x, p + "ln2s", p + "ln2b");
      std::string up =
          matmul(n2, p + "w1", {b, t, d}, {d, 4 * d}, {b, t, 4 * d});
      std::string act = emit("gelu " + up + " : " + f32({b, t, 4 * d}));
      x = binary("add", x,
                 matmul(act, p + "w2", {b, t, 4 * d}, {4 * d, d}, {b, t, d}),
                 {b, t, d}, {b, t, d});
    }
    std::string final = layerNorm(x, "%lnfs", "%lnfb");
    std::string logits =
        emit("matmul " + final + ", %wte {transpose_rhs = true} : (" +
             f32({b, t, d}) + ", " + f32({v, d}) + ") -> " + f32({b, t, v}));
    std::string classesFirst = emit("transpose " + logits +
                                    " {permutation = array<i64: 0, 2, 1>} : (" +
                                    f32({b, t, v}) + ") -> " + f32({b, v, t}));
    std::string loss = emit(
        "cross_entropy " + classesFirst +
        ", %targets {reduction = #sharc.loss_reduction<mean>} : (" +
        f32({b, v, t}) + ", tensor<" + dims({b, t}) + "xi64>) -> tensor<f32>");
    return "func.func @main(" + args + ") -> (tensor<f32>, " + f32({b, t, v}) +
           ") {\n" + body + "  return " + loss + ", " + logits +
           " : tensor<f32>, " + f32({b, t, v}) + "\n}\n";
  }

  /// Parameter names and shapes, in argument order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> params() const {
    std::vector<std::pair<std::string, std::vector<int64_t>>> list = {
        {"wte", {v, d}}, {"wpe", {t, d}}};
    for (int l = 0; l < layers; ++l) {
      std::string p = "l" + std::to_string(l) + "_";
      list.push_back({p + "ln1s", {d}});
      list.push_back({p + "ln1b", {d}});
      list.push_back({p + "wqkv", {d, 3 * d}});
      list.push_back({p + "wo", {d, d}});
      list.push_back({p + "ln2s", {d}});
      list.push_back({p + "ln2b", {d}});
      list.push_back({p + "w1", {d, 4 * d}});
      list.push_back({p + "w2", {4 * d, d}});
    }
    list.push_back({"lnfs", {d}});
    list.push_back({"lnfb", {d}});
    return list;
  }

  int64_t b, t, d, h, v;
  int layers;

private:
  static std::string dims(std::vector<int64_t> shape) {
    std::string text;
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? "x" : "") + std::to_string(shape[i]);
    return text;
  }
  static std::string f32(std::vector<int64_t> shape) {
    return tensorType(shape, "f32");
  }
  std::string emit(const std::string &op) {
    std::string name = "%v" + std::to_string(next++);
    body += "  " + name + " = sharc." + op + "\n";
    return name;
  }
  std::string binary(const char *op, const std::string &lhs,
                     const std::string &rhs, std::vector<int64_t> lhsShape,
                     std::vector<int64_t> rhsShape) {
    return emit(std::string(op) + " " + lhs + ", " + rhs + " : (" +
                f32(lhsShape) + ", " + f32(rhsShape) + ") -> " + f32(lhsShape));
  }
  std::string matmul(const std::string &lhs, const std::string &rhs,
                     std::vector<int64_t> lhsShape,
                     std::vector<int64_t> rhsShape,
                     std::vector<int64_t> outShape) {
    return emit("matmul " + lhs + ", " + rhs + " : (" + f32(lhsShape) + ", " +
                f32(rhsShape) + ") -> " + f32(outShape));
  }
  std::string layerNorm(const std::string &x, const std::string &scale,
                        const std::string &bias) {
    std::string name = "%v" + std::to_string(next++);
    body += "  " + name + ":3 = sharc.layer_norm " + x + ", " + scale + ", " +
            bias + " {axis = 2, epsilon = 1.0e-5} : (" + f32({b, t, d}) + ", " +
            f32({d}) + ", " + f32({d}) + ") -> (" + f32({b, t, d}) + ", " +
            f32({b, t, 1}) + ", " + f32({b, t, 1}) + ")\n";
    return name + "#0";
  }

  std::string body;
  int next = 0;
};

TEST_F(EvalTest, GptToyModelIsFast) {
  GptWriter gpt(/*batch=*/4, /*seq=*/32, /*dim=*/64, /*heads=*/4,
                /*vocab=*/64, /*layers=*/2);
  func::FuncOp func = parse(gpt.text());
  ASSERT_TRUE(func);
  std::vector<Tensor> args;
  args.push_back(randomTensor(DType::i64, {4, 32}, 20, 0, 64));
  args.push_back(randomTensor(DType::i64, {4, 32}, 21, 0, 64));
  unsigned seed = 22;
  for (auto &[name, shape] : gpt.params()) {
    bool isNorm = name.find("ln") != std::string::npos;
    bool isScale = isNorm && name.back() == 's';
    Tensor p = randomTensor(DType::f32, shape, seed++, -0.05, 0.05);
    if (isNorm)
      for (int64_t i = 0; i < p.numElements(); ++i)
        p.setDouble(i, isScale ? 1.0 : 0.0);
    args.push_back(p);
  }
  auto start = std::chrono::steady_clock::now();
  FailureOr<std::vector<Tensor>> r = evaluate(func, args);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(succeeded(r)) << diagnostics;
  // Near-uniform predictions: the loss is close to ln(vocab).
  double loss = (*r)[0].getDouble(0);
  EXPECT_NEAR(loss, std::log(64.0), 0.2);
  EXPECT_LT(seconds, 1.0);
  ::testing::Test::RecordProperty("gpt_eval_ms",
                                  std::to_string(seconds * 1000));
}

} // namespace
