//===- GemmTest.cpp - Host GEMM against a naive triple loop ---------------===//
//
// Random shapes (not multiples of any tile size), all transpose combinations,
// padded leading dimensions, broadcast batches, alpha and beta, for every
// element type.  The reference is a triple loop in double on the same stored
// (for f16/bf16: already rounded) inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/Gemm.h"
#include "runtime/Float16.h"
#include "runtime/GemmBf16.h"
#include "test/runtime/GemmBuffer.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace sharc::rt;
using sharc::rt::test::Buffer;

namespace {

/// The distance from `value` rounded to 16-bit `type` to the next
/// representable value away from zero.
double ulp16(DType type, double value) {
  float magnitude = std::fabs(float(value));
  uint16_t bits =
      type == DType::f16 ? floatToHalf(magnitude) : floatToBFloat16(magnitude);
  auto decode = [&](uint16_t b) {
    return type == DType::f16 ? halfToFloat(b) : bfloat16ToFloat(b);
  };
  return double(decode(bits + 1)) - double(decode(bits));
}

struct Shape {
  int64_t m, n, k, batch;
  bool transA, transB, broadcastA, broadcastB;
  double alpha, beta;
  /// Adds a random bias vector to every row (beta must be 0).
  bool bias = false;
  /// The epilogue's activation, and whether the pre-activation is stored.
  GemmActivation activation = GemmActivation::none;
  bool aux = false;
};

/// Runs `shape` through gemm() on random data with padded leading dimensions
/// and batch strides, and checks every element of C (including the padding,
/// which must be untouched) against the double-precision triple loop.
void checkGemm(DType type, const Shape &shape, std::mt19937 &rng) {
  SCOPED_TRACE("m=" + std::to_string(shape.m) + " n=" +
               std::to_string(shape.n) + " k=" + std::to_string(shape.k) +
               " batch=" + std::to_string(shape.batch) +
               " transA=" + std::to_string(shape.transA) +
               " transB=" + std::to_string(shape.transB) +
               " broadcastA=" + std::to_string(shape.broadcastA) +
               " broadcastB=" + std::to_string(shape.broadcastB) +
               " alpha=" + std::to_string(shape.alpha) +
               " beta=" + std::to_string(shape.beta) +
               " bias=" + std::to_string(shape.bias) +
               " activation=" + std::to_string(int(shape.activation)) +
               " aux=" + std::to_string(shape.aux));
  std::uniform_real_distribution<double> value(-1, 1);
  std::uniform_int_distribution<int64_t> pad(0, 3);
  int64_t rowsA = shape.transA ? shape.k : shape.m;
  int64_t colsA = shape.transA ? shape.m : shape.k;
  int64_t rowsB = shape.transB ? shape.n : shape.k;
  int64_t colsB = shape.transB ? shape.k : shape.n;
  GemmArgs args;
  args.type = type;
  args.transA = shape.transA;
  args.transB = shape.transB;
  args.m = shape.m;
  args.n = shape.n;
  args.k = shape.k;
  args.alpha = shape.alpha;
  args.beta = shape.beta;
  args.batch = shape.batch;
  args.lda = std::max<int64_t>(1, colsA) + pad(rng);
  args.ldb = std::max<int64_t>(1, colsB) + pad(rng);
  args.ldc = std::max<int64_t>(1, shape.n) + pad(rng);
  args.strideA = shape.broadcastA ? 0 : rowsA * args.lda + pad(rng);
  args.strideB = shape.broadcastB ? 0 : rowsB * args.ldb + pad(rng);
  args.strideC = shape.m * args.ldc + pad(rng);
  int64_t sizeA = (shape.batch - 1) * args.strideA + rowsA * args.lda + 1;
  int64_t sizeB = (shape.batch - 1) * args.strideB + rowsB * args.ldb + 1;
  int64_t sizeC = (shape.batch - 1) * args.strideC + shape.m * args.ldc + 1;
  Buffer a(type, sizeA), b(type, sizeB), c(type, sizeC);
  for (int64_t i = 0; i < sizeA; ++i)
    a.set(i, value(rng));
  for (int64_t i = 0; i < sizeB; ++i)
    b.set(i, value(rng));
  for (int64_t i = 0; i < sizeC; ++i)
    c.set(i, value(rng));
  Buffer before = c;
  Buffer aux = c, auxBefore = c;
  Buffer bias(type, shape.n);
  for (int64_t j = 0; j < shape.n; ++j)
    bias.set(j, value(rng));
  args.a = a.data();
  args.b = b.data();
  args.c = c.data();
  if (shape.bias)
    args.bias = bias.data();
  args.activation = shape.activation;
  if (shape.aux)
    args.aux = aux.data();
  gemm(args);

  bool is16 = type == DType::f16 || type == DType::bf16;
  // Relative error per unit of sum |terms|: the working precision's epsilon
  // times the accumulation length, with a margin.
  double epsilon = type == DType::f64 ? 0x1p-52 : 0x1p-23;
  double rtol = epsilon * double(shape.k + 2) * 4;
  std::vector<bool> inC(sizeC, false);
  for (int64_t batch = 0; batch < shape.batch; ++batch)
    for (int64_t i = 0; i < shape.m; ++i)
      for (int64_t j = 0; j < shape.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < shape.k; ++p) {
          double x =
              a.get(batch * args.strideA +
                    (shape.transA ? p * args.lda + i : i * args.lda + p));
          double y =
              b.get(batch * args.strideB +
                    (shape.transB ? j * args.ldb + p : p * args.ldb + j));
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        int64_t index = batch * args.strideC + i * args.ldc + j;
        inC[index] = true;
        double expected = shape.alpha * sum;
        magnitude *= std::fabs(shape.alpha);
        if (shape.beta != 0) {
          expected += shape.beta * before.get(index);
          magnitude += std::fabs(shape.beta * before.get(index));
        }
        if (shape.bias) {
          expected += bias.get(j);
          magnitude += std::fabs(bias.get(j));
        }
        double tolerance = rtol * magnitude;
        auto round = [&](double x) {
          Buffer rounded(type, 1);
          rounded.set(0, x);
          return rounded.get(0);
        };
        if (shape.aux) {
          double pre = is16 ? round(expected) : expected;
          ASSERT_NEAR(aux.get(index), pre,
                      tolerance + (is16 ? 2 * ulp16(type, pre) : 0.0))
              << "pre-activation: batch " << batch << " row " << i << " column "
              << j;
          // C is the activation of the stored sum, rounded once.
          if (!is16) {
            ASSERT_EQ(c.get(index),
                      round(applyActivation(shape.activation, aux.get(index))));
          }
        }
        if (shape.activation != GemmActivation::none) {
          // Both activations are 1.2-Lipschitz; the result is rounded once.
          expected = applyActivation(shape.activation, expected);
          tolerance = 1.2 * tolerance + epsilon * std::fabs(expected);
        }
        if (is16) {
          expected = round(expected);
          tolerance += 2 * ulp16(type, expected);
        }
        ASSERT_NEAR(c.get(index), expected, tolerance)
            << "batch " << batch << " row " << i << " column " << j;
      }
  size_t elementBytes = dtypeBytes(type);
  for (int64_t i = 0; i < sizeC; ++i) {
    if (inC[i])
      continue;
    ASSERT_EQ(std::memcmp(&c.bytes[i * elementBytes],
                          &before.bytes[i * elementBytes], elementBytes),
              0)
        << "padding element " << i << " of C was written";
    if (shape.aux) {
      ASSERT_EQ(std::memcmp(&aux.bytes[i * elementBytes],
                            &auxBefore.bytes[i * elementBytes], elementBytes),
                0)
          << "padding element " << i << " of aux was written";
    }
  }
  if (!shape.aux) {
    ASSERT_EQ(aux.bytes, auxBefore.bytes) << "aux written without being set";
  }
}

class GemmTypes : public testing::TestWithParam<DType> {};

TEST_P(GemmTypes, RandomShapesAllTransposes) {
  std::mt19937 rng(1234 + int(GetParam()));
  std::uniform_int_distribution<int64_t> size(1, 70);
  for (int trial = 0; trial < 6; ++trial)
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        checkGemm(GetParam(),
                  {size(rng), size(rng), size(rng), 1, transA, transB, false,
                   false, 1, 0},
                  rng);
}

TEST_P(GemmTypes, TileEdgesAndTinyShapes) {
  std::mt19937 rng(99);
  for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1},
                         {1, 17, 1},
                         {33, 1, 65},
                         {65, 67, 129},
                         {2, 3, 257}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        checkGemm(GetParam(), {m, n, k, 2, transA, transB, false, false, 1, 0},
                  rng);
}

TEST_P(GemmTypes, AlphaBeta) {
  std::mt19937 rng(7);
  for (auto [alpha, beta] :
       {std::pair{0.5, 1.0}, {-1.25, 0.75}, {0.0, -2.0}, {2.0, 0.0}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        checkGemm(GetParam(),
                  {23, 19, 41, 3, transA, transB, false, false, alpha, beta},
                  rng);
}

TEST_P(GemmTypes, BroadcastBatches) {
  std::mt19937 rng(11);
  for (auto [broadcastA, broadcastB] :
       {std::pair{true, false}, {false, true}, {true, true}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        checkGemm(
            GetParam(),
            {13, 29, 37, 4, transA, transB, broadcastA, broadcastB, 1.5, 0.5},
            rng);
}

TEST_P(GemmTypes, BiasEpilogue) {
  std::mt19937 rng(17);
  for (auto [m, n, k] :
       {std::array<int64_t, 3>{1, 1, 1}, {21, 35, 40}, {65, 17, 3}, {6, 5, 0}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        checkGemm(GetParam(),
                  {m, n, k, 3, transA, transB, false, transB, 1.25, 0, true},
                  rng);
}

/// ReLU and tanh-GELU epilogues, with and without a bias, a stored
/// pre-activation, alpha and beta, on products large enough (2^18
/// multiply-adds) for gemm() to split rows or batches over the thread pool.
TEST_P(GemmTypes, ActivationEpilogues) {
  std::mt19937 rng(31);
  for (GemmActivation activation :
       {GemmActivation::relu, GemmActivation::geluTanh})
    for (bool aux : {false, true})
      for (bool bias : {false, true})
        for (auto [m, n, k, batch] : {std::array<int64_t, 4>{7, 9, 5, 2},
                                      {90, 70, 50, 1},
                                      {40, 33, 30, 7},
                                      {5, 4, 0, 1}})
          checkGemm(GetParam(),
                    {m, n, k, batch, bool(m % 2), bool(n % 2), false, false,
                     bias ? 1.0 : 0.75, bias ? 0.0 : -0.5, bias, activation,
                     aux},
                    rng);
}

/// Attention heads read and written in place: Q and K are [T, H, D] slices
/// of [sequence, token, head x dim] memory, the scores S[s][h] = Q K^T go to
/// [S, H, T, T] memory, and O[s][h] = S V is written back side by side into
/// [S, T, H x D] (outer batch: sequence, inner batch: head).  Every element
/// is checked against a loop over the same index formulas, and C's padding
/// (elements no batch owns) must stay untouched.
TEST_P(GemmTypes, OuterBatchesAndSideBySideHeads) {
  DType type = GetParam();
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> value(-1, 1);
  // Large enough (2^18 multiply-adds) for gemm() to split the batches over
  // the thread pool.
  const int64_t seqs = 4, tokens = 40, heads = 3, dim = 16, row = heads * dim;
  Buffer q(type, seqs * tokens * row), v(type, seqs * tokens * row);
  for (int64_t i = 0; i < seqs * tokens * row; ++i) {
    q.set(i, value(rng));
    v.set(i, value(rng));
  }
  // Scores: [S, H, T, T], C stacked per head.
  Buffer scores(type, seqs * heads * tokens * tokens);
  GemmArgs args;
  args.type = type;
  args.transB = true;
  args.m = tokens, args.n = tokens, args.k = dim;
  args.a = q.data(), args.lda = row, args.strideA = dim;
  args.b = q.data(), args.ldb = row, args.strideB = dim;
  args.c = scores.data(), args.ldc = tokens, args.strideC = tokens * tokens;
  args.batch = heads;
  args.outerBatch = seqs;
  args.outerStrideA = args.outerStrideB = tokens * row;
  args.outerStrideC = heads * tokens * tokens;
  gemm(args);
  double epsilon = type == DType::f64 ? 0x1p-52 : 0x1p-23;
  bool is16 = type == DType::f16 || type == DType::bf16;
  auto near = [&](double got, double expected, double magnitude) {
    double tolerance =
        epsilon * 16 * magnitude + (is16 ? 2 * ulp16(type, expected) : 0.0);
    return std::fabs(got - expected) <= tolerance;
  };
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < tokens; ++i)
        for (int64_t j = 0; j < tokens; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t d = 0; d < dim; ++d) {
            double x = q.get(s * tokens * row + i * row + h * dim + d) *
                       q.get(s * tokens * row + j * row + h * dim + d);
            sum += x;
            magnitude += std::fabs(x);
          }
          double got = scores.get(((s * heads + h) * tokens + i) * tokens + j);
          ASSERT_TRUE(near(got, sum, magnitude))
              << "scores " << s << " " << h << " " << i << " " << j << ": "
              << got << " vs " << sum;
        }
  // Outputs side by side: O[s][t][h * D + d], with one padding column.
  const int64_t ldo = row + 1;
  Buffer out(type, seqs * tokens * ldo);
  for (int64_t i = 0; i < seqs * tokens * ldo; ++i)
    out.set(i, 7);
  GemmArgs o;
  o.type = type;
  o.m = tokens, o.n = dim, o.k = tokens;
  o.a = scores.data(), o.lda = tokens, o.strideA = tokens * tokens;
  o.b = v.data(), o.ldb = row, o.strideB = dim;
  o.c = out.data(), o.ldc = ldo, o.strideC = dim;
  o.batch = heads;
  o.outerBatch = seqs;
  o.outerStrideA = heads * tokens * tokens;
  o.outerStrideB = tokens * row;
  o.outerStrideC = tokens * ldo;
  gemm(o);
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          double sum = 0, magnitude = 0;
          for (int64_t u = 0; u < tokens; ++u) {
            double x = scores.get(((s * heads + h) * tokens + t) * tokens + u) *
                       v.get(s * tokens * row + u * row + h * dim + d);
            sum += x;
            magnitude += std::fabs(x);
          }
          double got = out.get(s * tokens * ldo + t * ldo + h * dim + d);
          ASSERT_TRUE(near(got, sum, magnitude))
              << "output " << s << " " << t << " " << h << " " << d << ": "
              << got << " vs " << sum;
        }
      ASSERT_EQ(out.get(s * tokens * ldo + t * ldo + row), 7)
          << "padding of row " << t << " of sequence " << s << " was written";
    }
}

TEST_P(GemmTypes, EmptyInnerDimensionScalesC) {
  std::mt19937 rng(5);
  checkGemm(GetParam(), {7, 9, 0, 2, false, true, false, false, 1, 0.5}, rng);
  checkGemm(GetParam(), {7, 9, 0, 2, true, false, false, false, 1, 0}, rng);
}

TEST_P(GemmTypes, ZeroBetaDoesNotReadC) {
  DType type = GetParam();
  Buffer a(type, 6), b(type, 6), c(type, 4);
  for (int i = 0; i < 6; ++i) {
    a.set(i, i + 1);
    b.set(i, 1 - i);
  }
  for (int i = 0; i < 4; ++i)
    c.set(i, std::numeric_limits<double>::quiet_NaN());
  GemmArgs args;
  args.type = type;
  args.m = 2;
  args.n = 2;
  args.k = 3;
  args.a = a.data();
  args.lda = 3;
  args.b = b.data();
  args.ldb = 2;
  args.c = c.data();
  args.ldc = 2;
  gemm(args);
  // A = [1 2 3; 4 5 6], B = [1 0; -1 -2; -3 -4].
  EXPECT_EQ(c.get(0), -10);
  EXPECT_EQ(c.get(1), -16);
  EXPECT_EQ(c.get(2), -19);
  EXPECT_EQ(c.get(3), -34);
}

/// The host's cut of a product into BLAS calls: blocks that tile the rows,
/// at most kGemmMaxRowBlock long, start at multiples of 16, and at least two
/// of them from 128 rows on (so that two threads share a product).
TEST(GemmRowBlock, TilesTheRows) {
  for (int64_t m = 1; m <= 5000; ++m) {
    SCOPED_TRACE("m=" + std::to_string(m));
    int64_t rows = gemmRowBlock(m);
    int64_t blocks = (m + rows - 1) / rows;
    ASSERT_GE(rows, 1);
    ASSERT_LE(rows, std::max<int64_t>(m, 1));
    ASSERT_LE(rows, kGemmMaxRowBlock);
    ASSERT_GT(m - (blocks - 1) * rows, 0) << "an empty last block";
    if (m < 128) {
      ASSERT_EQ(blocks, 1);
    } else {
      ASSERT_EQ(rows % 16, 0);
      ASSERT_GE(blocks, 2);
      // No more calls than the longest blocks need, but for the rounding
      // of the block starts to 16 rows.
      int64_t fewest =
          std::max<int64_t>(2, (m + kGemmMaxRowBlock - 1) / kGemmMaxRowBlock);
      ASSERT_LE(blocks, fewest + 1);
    }
  }
}

TEST_P(GemmTypes, EmptyProblemsTouchNothing) {
  GemmArgs args;
  args.type = GetParam();
  args.m = 0;
  args.n = 5;
  args.k = 3;
  args.lda = 3;
  args.ldb = 5;
  args.ldc = 5;
  gemm(args); // null pointers are fine: nothing to compute
  args.m = 4;
  args.batch = 0;
  gemm(args);
}

/// A 16-bit GEMM is, bit for bit, what the evaluator computes (and what
/// the CUDA path's f32 accumulation approximates): the operands widened to
/// f32, sgemm over each block of gemmRowBlock(m) rows (C prefilled with the
/// bias) -- for bf16 on a CPU with bf16 instructions, bf16Product over each
/// block, then the bias or beta * C added in f32 --, the activation computed
/// from the f32 sum, each value rounded once.  The shapes are large enough
/// for gemm() to cut rows or batches over the thread pool and to widen per
/// block, so a split that changed a sum would show here.
TEST(Gemm16, BitsOfTheWidenedSgemm) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<double> value(-1, 1);
  struct Case {
    int64_t m, n, k, batch;
    bool transA, transB, broadcastA, broadcastB, bias;
    GemmActivation activation;
    double beta;
  };
  const Case cases[] = {
      {130, 70, 60, 1, false, false, false, false, false, GemmActivation::none,
       0},
      {130, 70, 60, 1, true, true, false, false, true, GemmActivation::geluTanh,
       0},
      {45, 50, 40, 5, false, true, false, true, false, GemmActivation::relu, 0},
      {45, 50, 40, 5, true, false, true, false, false, GemmActivation::none,
       0.5},
      {33, 90, 70, 3, false, false, false, false, true, GemmActivation::relu,
       0}};
  for (DType type : {DType::f16, DType::bf16})
    for (const Case &t : cases) {
      SCOPED_TRACE(std::string(dtypeName(type)) + " m=" + std::to_string(t.m) +
                   " batch=" + std::to_string(t.batch) +
                   " transA=" + std::to_string(t.transA) +
                   " transB=" + std::to_string(t.transB));
      int64_t rowsA = t.transA ? t.k : t.m, colsA = t.transA ? t.m : t.k;
      int64_t rowsB = t.transB ? t.n : t.k, colsB = t.transB ? t.k : t.n;
      int64_t sizeA = rowsA * colsA, sizeB = rowsB * colsB, sizeC = t.m * t.n;
      int64_t batchesA = t.broadcastA ? 1 : t.batch;
      int64_t batchesB = t.broadcastB ? 1 : t.batch;
      Buffer a(type, batchesA * sizeA), b(type, batchesB * sizeB),
          c(type, t.batch * sizeC), bias(type, t.n);
      for (int64_t i = 0; i < batchesA * sizeA; ++i)
        a.set(i, value(rng));
      for (int64_t i = 0; i < batchesB * sizeB; ++i)
        b.set(i, value(rng));
      for (int64_t i = 0; i < t.batch * sizeC; ++i)
        c.set(i, value(rng));
      for (int64_t j = 0; j < t.n; ++j)
        bias.set(j, value(rng));
      Buffer aux = c;
      // The reference, in f32 on whole batches.
      std::vector<float> expected(t.batch * sizeC),
          expectedAux(t.batch * sizeC);
      for (int64_t batch = 0; batch < t.batch; ++batch) {
        std::vector<float> wa(sizeA), wb(sizeB), wc(sizeC);
        for (int64_t i = 0; i < sizeA; ++i)
          wa[i] = float(a.get((t.broadcastA ? 0 : batch) * sizeA + i));
        for (int64_t i = 0; i < sizeB; ++i)
          wb[i] = float(b.get((t.broadcastB ? 0 : batch) * sizeB + i));
        for (int64_t i = 0; i < sizeC; ++i)
          wc[i] = t.bias ? float(bias.get(i % t.n))
                         : float(c.get(batch * sizeC + i));
        // The evaluator's calls: one per gemmRowBlock(m) rows, one BLAS
        // thread.
        openblas_set_num_threads(1);
        const int64_t block = gemmRowBlock(t.m);
        if (type == DType::bf16 && bf16GemmNative()) {
          std::vector<uint16_t> ba(sizeA), bb(sizeB);
          for (int64_t i = 0; i < sizeA; ++i)
            ba[i] = floatToBFloat16(wa[i]);
          for (int64_t i = 0; i < sizeB; ++i)
            bb[i] = floatToBFloat16(wb[i]);
          std::vector<float> product(sizeC);
          std::string error;
          for (int64_t row = 0; row < t.m; row += block)
            ASSERT_TRUE(bf16Product(
                t.transA, t.transB, std::min(block, t.m - row), t.n, t.k,
                ba.data() + (t.transA ? row : row * colsA), colsA, bb.data(),
                colsB, product.data() + row * t.n, t.n, error))
                << error;
          for (int64_t i = 0; i < sizeC; ++i)
            wc[i] = t.bias ? product[i] + wc[i]
                           : product[i] + float(t.beta) * wc[i];
        } else {
          for (int64_t row = 0; row < t.m; row += block)
            cblas_sgemm(CblasRowMajor, t.transA ? CblasTrans : CblasNoTrans,
                        t.transB ? CblasTrans : CblasNoTrans,
                        int(std::min(block, t.m - row)), int(t.n), int(t.k),
                        1.0f, wa.data() + (t.transA ? row : row * colsA),
                        int(colsA), wb.data(), int(colsB),
                        t.bias ? 1.0f : float(t.beta), wc.data() + row * t.n,
                        int(t.n));
        }
        for (int64_t i = 0; i < sizeC; ++i) {
          expectedAux[batch * sizeC + i] = wc[i];
          expected[batch * sizeC + i] =
              float(applyActivation(t.activation, wc[i]));
        }
      }
      GemmArgs args;
      args.type = type;
      args.transA = t.transA, args.transB = t.transB;
      args.m = t.m, args.n = t.n, args.k = t.k, args.batch = t.batch;
      args.beta = t.beta;
      args.a = a.data(), args.lda = colsA,
      args.strideA = t.broadcastA ? 0 : sizeA;
      args.b = b.data(), args.ldb = colsB,
      args.strideB = t.broadcastB ? 0 : sizeB;
      args.c = c.data(), args.ldc = t.n, args.strideC = sizeC;
      args.bias = t.bias ? bias.data() : nullptr;
      args.activation = t.activation;
      args.aux = t.activation != GemmActivation::none ? aux.data() : nullptr;
      gemm(args);
      Buffer rounded(type, 1);
      for (int64_t i = 0; i < t.batch * sizeC; ++i) {
        rounded.set(0, expected[i]);
        ASSERT_EQ(std::memcmp(&c.bytes[2 * i], rounded.data(), 2), 0)
            << "element " << i << ": " << c.get(i) << " vs " << rounded.get(0);
        if (!args.aux)
          continue;
        rounded.set(0, expectedAux[i]);
        ASSERT_EQ(std::memcmp(&aux.bytes[2 * i], rounded.data(), 2), 0)
            << "aux element " << i;
      }
    }
}

/// The CPU's flags in /proc/cpuinfo (empty elsewhere).
std::string cpuFlags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0)
      return line + " ";
  return "";
}

/// bf16 products run on the CPU's bf16 instructions exactly where it has
/// them (unless SHARC_BF16_GEMM says otherwise).
TEST(GemmBf16, NativeWhereTheCpuHasBf16Instructions) {
  if (std::getenv("SHARC_BF16_GEMM"))
    GTEST_SKIP() << "SHARC_BF16_GEMM is set";
  std::string flags = cpuFlags();
  if (flags.empty())
    GTEST_SKIP() << "no /proc/cpuinfo";
  bool hasBf16 = flags.find(" avx512_bf16 ") != std::string::npos ||
                 flags.find(" amx_bf16 ") != std::string::npos;
  EXPECT_EQ(bf16GemmNative(), hasBf16) << bf16GemmDescription();
}

/// Random bf16 matrices: op(A) m x k and op(B) k x n as dense row-major
/// logical matrices.
struct Bf16Operands {
  int64_t m, n, k;
  std::vector<uint16_t> a, b;
};

Bf16Operands randomBf16(int64_t m, int64_t n, int64_t k, std::mt19937 &rng) {
  std::normal_distribution<float> value(0, 1);
  Bf16Operands x{m, n, k, std::vector<uint16_t>(m * k),
                 std::vector<uint16_t>(k * n)};
  for (uint16_t &v : x.a)
    v = floatToBFloat16(value(rng));
  for (uint16_t &v : x.b)
    v = floatToBFloat16(value(rng));
  return x;
}

/// bf16Product of `x` with A and B stored as transA/transB say, each row
/// padded by padA/padB/padC elements; C returned dense.
std::vector<float> productIn(const Bf16Operands &x, bool transA, bool transB,
                             int64_t padA, int64_t padB, int64_t padC) {
  int64_t lda = (transA ? x.m : x.k) + padA;
  int64_t ldb = (transB ? x.k : x.n) + padB, ldc = x.n + padC;
  std::vector<uint16_t> a((transA ? x.k : x.m) * lda, 0xffff),
      b((transB ? x.n : x.k) * ldb, 0xffff);
  for (int64_t i = 0; i < x.m; ++i)
    for (int64_t p = 0; p < x.k; ++p)
      a[transA ? p * lda + i : i * lda + p] = x.a[i * x.k + p];
  for (int64_t p = 0; p < x.k; ++p)
    for (int64_t j = 0; j < x.n; ++j)
      b[transB ? j * ldb + p : p * ldb + j] = x.b[p * x.n + j];
  std::vector<float> c(x.m * ldc, -7.0f);
  std::string error;
  EXPECT_TRUE(bf16Product(transA, transB, x.m, x.n, x.k, a.data(), lda,
                          b.data(), ldb, c.data(), ldc, error))
      << error;
  std::vector<float> dense(x.m * x.n);
  for (int64_t i = 0; i < x.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j < x.n)
        dense[i * x.n + j] = c[i * ldc + j];
      else
        EXPECT_EQ(c[i * ldc + j], -7.0f) << "padding of C written";
    }
  return dense;
}

/// bf16Product against sums in double of the same bf16 values, within f32
/// accumulation's error bound.
TEST(GemmBf16, ProductAgainstExactSums) {
  if (!bf16GemmNative())
    GTEST_SKIP() << "bf16 products are widened here: " << bf16GemmDescription();
  std::mt19937 rng(7);
  const int64_t shapes[][3] = {{1, 1, 1},       {37, 53, 29},   {128, 64, 128},
                               {256, 768, 256}, {61, 70, 1000}, {5, 300, 3}};
  for (const auto &shape : shapes) {
    Bf16Operands x = randomBf16(shape[0], shape[1], shape[2], rng);
    for (int variant = 0; variant < 4; ++variant) {
      bool transA = variant & 1, transB = variant & 2;
      SCOPED_TRACE("m=" + std::to_string(x.m) + " n=" + std::to_string(x.n) +
                   " k=" + std::to_string(x.k) +
                   " transA=" + std::to_string(transA) +
                   " transB=" + std::to_string(transB));
      std::vector<float> c = productIn(x, transA, transB, 3, 5, 2);
      for (int64_t i = 0; i < x.m; ++i)
        for (int64_t j = 0; j < x.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t p = 0; p < x.k; ++p) {
            double term = double(bfloat16ToFloat(x.a[i * x.k + p])) *
                          bfloat16ToFloat(x.b[p * x.n + j]);
            sum += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(c[i * x.n + j], sum,
                      0x1p-23 * double(x.k + 2) * 4 * magnitude)
              << "row " << i << " column " << j;
        }
    }
  }
}

/// A block's bits depend on its values and shape alone: A transposed or not,
/// B transposed or not, padded leading dimensions (which make oneDNN choose
/// other kernels, and for a transposed A with k past 1024 another order of
/// the sums) give the bits of the dense layout.  The evaluator stores its
/// operands densely, the runtime as the program's views lay them out.
TEST(GemmBf16, BitsDependOnValuesAndShapeAlone) {
  if (!bf16GemmNative())
    GTEST_SKIP() << "bf16 products are widened here: " << bf16GemmDescription();
  std::mt19937 rng(11);
  const int64_t shapes[][3] = {{250, 70, 1000},  {161, 168, 1080},
                               {87, 596, 1060},  {128, 128, 64},
                               {256, 256, 1024}, {128, 1024, 2048}};
  for (const auto &shape : shapes) {
    Bf16Operands x = randomBf16(shape[0], shape[1], shape[2], rng);
    std::vector<float> dense = productIn(x, false, false, 0, 0, 0);
    for (int variant = 1; variant < 16; ++variant) {
      bool transA = variant & 1, transB = variant & 8;
      {
        int64_t pad = variant & 2 ? 7 : 0, padC = variant & 4 ? 3 : 0;
        SCOPED_TRACE(
            "m=" + std::to_string(x.m) + " n=" + std::to_string(x.n) +
            " k=" + std::to_string(x.k) + " transA=" + std::to_string(transA) +
            " transB=" + std::to_string(transB) +
            " pad=" + std::to_string(pad) + " padC=" + std::to_string(padC));
        std::vector<float> c = productIn(x, transA, transB, pad, pad, padC);
        ASSERT_EQ(std::memcmp(c.data(), dense.data(), c.size() * 4), 0);
      }
    }
  }
}

std::string typeName(const testing::TestParamInfo<DType> &info) {
  return dtypeName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmTypes,
                         testing::Values(DType::f32, DType::f64, DType::f16,
                                         DType::bf16),
                         typeName);

} // namespace
