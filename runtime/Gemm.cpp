//===- Gemm.cpp - Strided-batched matrix multiplication on the host -------===//

#include "runtime/Gemm.h"

#include "runtime/CpuClones.h"
#include "runtime/Errors.h"
#include "runtime/Float16.h"
#include "runtime/GemmBf16.h"
#include "runtime/ThreadPool.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>
#include <vector>

namespace sharc::rt {

namespace {

/// Fatal unless `value` is in [0, 2^31 - 1].
void checkSize(const char *caller, const char *name, int64_t value) {
  if (value < 0)
    fatal(std::string(caller) + ": " + name + " " + std::to_string(value) +
          " is negative");
  if (value > INT_MAX)
    fatal(std::string(caller) + ": " + name + " " + std::to_string(value) +
          " exceeds 2^31 - 1");
}

/// Fatal unless leading dimension `ld` covers the `cols` columns of `matrix`.
void checkLeading(const char *caller, const char *name, int64_t ld,
                  const char *matrix, int64_t cols) {
  checkSize(caller, name, ld);
  if (ld < std::max<int64_t>(1, cols))
    fatal(std::string(caller) + ": " + name + " " + std::to_string(ld) +
          " is less than max(1, " + std::to_string(cols) + "), the columns " +
          "of " + matrix);
}

/// Fatal unless batch stride `stride` is non-negative.
void checkStride(const char *caller, const char *name, int64_t stride) {
  if (stride < 0)
    fatal(std::string(caller) + ": " + name + " " + std::to_string(stride) +
          " is negative");
}

/// The offset of batch `t` (counting outer batches times inner ones) of an
/// operand with inner stride `stride` and outer stride `outerStride`.
int64_t batchOffset(const GemmArgs &args, int64_t t, int64_t stride,
                    int64_t outerStride) {
  return t / args.batch * outerStride + t % args.batch * stride;
}

/// One block of a GEMM: rows [rowBegin, rowEnd) of C in batch `batch`
/// (counting outer batches times inner ones), computed on the calling thread
/// by one BLAS call.
using GemmBlockFn = void (*)(const void *context, int64_t batch,
                             int64_t rowBegin, int64_t rowEnd);

/// Runs `block` over the blocks of `args` (gemmRowBlock(m) rows of one batch
/// each, Gemm.h), spread over the thread pool (ThreadPool.h) for large
/// products.  The blocks do not depend on the thread count.
void runBlocks(const GemmArgs &args, GemmBlockFn block, const void *context) {
  const int64_t rows = gemmRowBlock(args.m);
  struct Blocks {
    GemmBlockFn block;
    const void *context;
    int64_t m, rows, perBatch;
  } blocks{block, context, args.m, rows, (args.m + rows - 1) / rows};
  int64_t count = args.outerBatch * args.batch * blocks.perBatch;
  auto run = [](const void *context, int64_t begin, int64_t end) {
    const Blocks &b = *static_cast<const Blocks *>(context);
    for (int64_t i = begin; i < end; ++i) {
      int64_t row = i % b.perBatch * b.rows;
      b.block(b.context, i / b.perBatch, row, std::min(b.m, row + b.rows));
    }
  };
  double flops =
      double(args.outerBatch * args.batch) * args.m * args.n * args.k;
  if (hostThreads() <= 1 || count == 1 || flops < (1 << 18))
    return run(&blocks, 0, count);
  parallelFor(count, run, &blocks);
}

/// The epilogue's activation over the `n` values at `row` (f32/f64), in
/// place, after copying them to `aux` when it is not null.
/// (Inlined into each clone, which compiles it for its CPU.)
template <typename T>
__attribute__((always_inline)) inline void
activateRow(GemmActivation activation, T *row, T *aux, int64_t n) {
  if (aux)
    std::copy(row, row + n, aux);
  if (activation == GemmActivation::relu)
    for (int64_t j = 0; j < n; ++j)
      row[j] = T(applyActivation(GemmActivation::relu, row[j]));
  else
    for (int64_t j = 0; j < n; ++j)
      row[j] = T(applyActivation(GemmActivation::geluTanh, row[j]));
}
SHARC_CPU_CLONES void activateRowF32(GemmActivation activation, float *row,
                                     float *aux, int64_t n) {
  activateRow(activation, row, aux, n);
}
SHARC_CPU_CLONES void activateRowF64(GemmActivation activation, double *row,
                                     double *aux, int64_t n) {
  activateRow(activation, row, aux, n);
}

/// Copies the rows x cols 16-bit matrix at `src` (leading dimension `ld`) to
/// the dense f32 matrix `dst`.
void widenMatrix(DType type, const uint16_t *src, int64_t rows, int64_t cols,
                 int64_t ld, std::vector<float> &dst) {
  if (dst.size() < size_t(rows * cols))
    dst.resize(rows * cols);
  if (ld == cols)
    return widen16(type, src, rows * cols, dst.data());
  for (int64_t i = 0; i < rows; ++i)
    widen16(type, src + i * ld, cols, dst.data() + i * cols);
}

/// Stores the rows x n f32 sums at `block` (dense) to the 16-bit C at
/// element `offsetC`: each row rounded once, to aux as it is and to C after
/// the activation, which is computed in double from the f32 sum and rounded
/// to f32 first, as the f32 epilogue does.
void finishRows16(const GemmArgs &args, float *block, int64_t rows,
                  int64_t offsetC) {
  auto *c = static_cast<uint16_t *>(args.c);
  auto *aux = static_cast<uint16_t *>(args.aux);
  int64_t n = args.n;
  for (int64_t i = 0; i < rows; ++i) {
    float *row = block + i * n;
    if (aux)
      narrow16(args.type, row, n, aux + offsetC + i * args.ldc);
    if (args.activation != GemmActivation::none)
      activateRowF32(args.activation, row, nullptr, n);
    narrow16(args.type, row, n, c + offsetC + i * args.ldc);
  }
}

/// A 16-bit GEMM in f32: the operands that every part reads whole (a
/// broadcast A or B, the bias) widened once by the calling thread, null
/// where each part widens its own block.
struct Gemm16 {
  const GemmArgs *args;
  int64_t colsA, rowsB, colsB;
  const float *a, *b, *bias;
};

/// f32 blocks of one thread, kept from call to call (each grows to the
/// largest block the thread has seen, so steady-state steps allocate
/// nothing).
struct Scratch16 {
  std::vector<float> a, b, c;
};

/// Rows [rowBegin, rowEnd) of batch `batch` of a 16-bit GEMM: these rows
/// of op(A), and B unless shared, are widened to f32, multiplied by sgemm
/// (f32 accumulation) into an f32 block of C (prefilled with the bias, or C
/// itself when beta is not 0), and the rows finished by finishRows16.
void gemm16Block(const void *context, int64_t batch, int64_t rowBegin,
                 int64_t rowEnd) {
  const Gemm16 &g = *static_cast<const Gemm16 *>(context);
  const GemmArgs &args = *g.args;
  thread_local Scratch16 s;
  const auto *a = static_cast<const uint16_t *>(args.a);
  const auto *b = static_cast<const uint16_t *>(args.b);
  auto *c = static_cast<uint16_t *>(args.c);
  int64_t rows = rowEnd - rowBegin, n = args.n;
  {
    // Row r of op(A) is row r of A, or column r of A when transposed.
    const float *wideA;
    int64_t lda;
    if (g.a) {
      wideA = g.a + (args.transA ? rowBegin : rowBegin * g.colsA);
      lda = g.colsA;
    } else {
      const uint16_t *batchA =
          a + batchOffset(args, batch, args.strideA, args.outerStrideA);
      if (args.transA)
        widenMatrix(args.type, batchA + rowBegin, args.k, rows, args.lda, s.a);
      else
        widenMatrix(args.type, batchA + rowBegin * args.lda, rows, args.k,
                    args.lda, s.a);
      wideA = s.a.data();
      lda = args.transA ? rows : args.k;
    }
    const float *wideB = g.b;
    if (!wideB) {
      widenMatrix(args.type,
                  b + batchOffset(args, batch, args.strideB, args.outerStrideB),
                  g.rowsB, g.colsB, args.ldb, s.b);
      wideB = s.b.data();
    }
    int64_t offsetC =
        batchOffset(args, batch, args.strideC, args.outerStrideC) +
        rowBegin * args.ldc;
    if (s.c.size() < size_t(rows * n))
      s.c.resize(rows * n);
    float beta = float(args.beta);
    if (g.bias) {
      for (int64_t i = 0; i < rows; ++i)
        std::copy(g.bias, g.bias + n, s.c.data() + i * n);
      beta = 1;
    } else if (args.beta != 0) {
      widenMatrix(args.type, c + offsetC, rows, n, args.ldc, s.c);
    }
    cblas_sgemm(CblasRowMajor, args.transA ? CblasTrans : CblasNoTrans,
                args.transB ? CblasTrans : CblasNoTrans, int(rows), int(n),
                int(args.k), float(args.alpha), wideA,
                int(std::max<int64_t>(1, lda)), wideB,
                int(std::max<int64_t>(1, g.colsB)), beta, s.c.data(), int(n));
    finishRows16(args, s.c.data(), rows, offsetC);
  }
}

/// Rows [rowBegin, rowEnd) of batch `batch` of a bf16 GEMM on the CPU's bf16
/// instructions (GemmBf16.h): the product straight from the bf16 operands
/// into an f32 block, then alpha, and the bias or beta * C, in f32, and the
/// rows finished as gemm16Block's.
void gemmBf16Block(const void *context, int64_t batch, int64_t rowBegin,
                   int64_t rowEnd) {
  const GemmArgs &args = *static_cast<const GemmArgs *>(context);
  thread_local std::vector<float> block, old;
  int64_t rows = rowEnd - rowBegin, n = args.n;
  // Row r of op(A) is row r of A, or column r of A when transposed.
  const auto *a = static_cast<const uint16_t *>(args.a) +
                  batchOffset(args, batch, args.strideA, args.outerStrideA) +
                  (args.transA ? rowBegin : rowBegin * args.lda);
  const auto *b = static_cast<const uint16_t *>(args.b) +
                  batchOffset(args, batch, args.strideB, args.outerStrideB);
  int64_t offsetC = batchOffset(args, batch, args.strideC, args.outerStrideC) +
                    rowBegin * args.ldc;
  if (block.size() < size_t(rows * n))
    block.resize(rows * n);
  std::string error;
  if (!bf16Product(args.transA, args.transB, rows, n, args.k, a, args.lda, b,
                   args.ldb, block.data(), n, error))
    fatal("gemm: " + error);
  float alpha = float(args.alpha);
  if (alpha != 1)
    for (int64_t i = 0; i < rows * n; ++i)
      block[i] *= alpha;
  if (args.bias) {
    if (old.size() < size_t(n))
      old.resize(n);
    widen16(args.type, static_cast<const uint16_t *>(args.bias), n, old.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j)
        block[i * n + j] += old[j];
  } else if (args.beta != 0) {
    widenMatrix(args.type, static_cast<const uint16_t *>(args.c) + offsetC,
                rows, n, args.ldc, old);
    float beta = float(args.beta);
    for (int64_t i = 0; i < rows * n; ++i)
      block[i] += beta * old[i];
  }
  finishRows16(args, block.data(), rows, offsetC);
}

/// The 16-bit path: gemm16Block over the thread pool, with the operands that
/// every part reads whole widened once.
void gemm16(const GemmArgs &args) {
  thread_local std::vector<float> sharedA, sharedB, sharedBias;
  int64_t rowsA = args.transA ? args.k : args.m;
  Gemm16 g{&args,
           args.transA ? args.m : args.k,
           args.transB ? args.n : args.k,
           args.transB ? args.k : args.n,
           nullptr,
           nullptr,
           nullptr};
  int64_t batches = args.outerBatch * args.batch;
  bool broadcastA = args.strideA == 0 && args.outerStrideA == 0;
  bool broadcastB = args.strideB == 0 && args.outerStrideB == 0;
  if (broadcastA && batches > 1) {
    widenMatrix(args.type, static_cast<const uint16_t *>(args.a), rowsA,
                g.colsA, args.lda, sharedA);
    g.a = sharedA.data();
  }
  if (broadcastB || batches == 1) {
    widenMatrix(args.type, static_cast<const uint16_t *>(args.b), g.rowsB,
                g.colsB, args.ldb, sharedB);
    g.b = sharedB.data();
  }
  if (args.bias) {
    widenMatrix(args.type, static_cast<const uint16_t *>(args.bias), 1, args.n,
                args.n, sharedBias);
    g.bias = sharedBias.data();
  }
  runBlocks(args, gemm16Block, &g);
}

} // namespace

void validateGemm(const GemmArgs &args, const char *caller) {
  if (args.type != DType::f32 && args.type != DType::f64 &&
      args.type != DType::f16 && args.type != DType::bf16)
    fatal(std::string(caller) + ": element type must be f32, f64, f16 or bf16");
  checkSize(caller, "m", args.m);
  checkSize(caller, "n", args.n);
  checkSize(caller, "k", args.k);
  checkSize(caller, "batch", args.batch);
  checkLeading(caller, "lda", args.lda, args.transA ? "A^T" : "A",
               args.transA ? args.m : args.k);
  checkLeading(caller, "ldb", args.ldb, args.transB ? "B^T" : "B",
               args.transB ? args.k : args.n);
  checkLeading(caller, "ldc", args.ldc, "C", args.n);
  checkStride(caller, "strideA", args.strideA);
  checkStride(caller, "strideB", args.strideB);
  checkStride(caller, "strideC", args.strideC);
  checkSize(caller, "outerBatch", args.outerBatch);
  checkStride(caller, "outerStrideA", args.outerStrideA);
  checkStride(caller, "outerStrideB", args.outerStrideB);
  checkStride(caller, "outerStrideC", args.outerStrideC);
  if (args.batch == 0 || args.m == 0 || args.n == 0 || args.outerBatch == 0)
    return;
  int64_t innerSpan =
      (args.batch - 1) * args.strideC + (args.m - 1) * args.ldc + args.n;
  if (args.outerBatch > 1 && args.outerStrideC < innerSpan)
    fatal(std::string(caller) + ": outerStrideC " +
          std::to_string(args.outerStrideC) +
          " makes outer batches of C overlap (each spans " +
          std::to_string(innerSpan) + " elements)");
  // Batches of C are disjoint when stacked (each after the previous one's
  // last element) or side by side within the rows (the heads of attention
  // written into one [tokens, heads x dim] matrix).
  bool stacked = args.strideC >= (args.m - 1) * args.ldc + args.n;
  bool sideBySide = args.strideC >= args.n &&
                    (args.batch - 1) * args.strideC + args.n <= args.ldc;
  if (args.batch > 1 && !stacked && !sideBySide)
    fatal(std::string(caller) + ": strideC " + std::to_string(args.strideC) +
          " makes batches of C overlap (each spans " +
          std::to_string((args.m - 1) * args.ldc + args.n) +
          " elements and they are not side by side within ldc " +
          std::to_string(args.ldc) + ")");
  if (args.bias && args.beta != 0)
    fatal(std::string(caller) + ": a bias needs beta = 0 (beta is " +
          std::to_string(args.beta) + ")");
  if (args.aux && args.activation == GemmActivation::none)
    fatal(std::string(caller) + ": an aux output needs an activation");
  if (!args.a || !args.b || !args.c)
    fatal(std::string(caller) + ": " +
          (!args.a   ? "A"
           : !args.b ? "B"
                     : "C") +
          " is null");
}

namespace {

/// Sets rows [rowBegin, rowEnd) of C to `bias`.
template <typename T>
void fillRows(T *c, int64_t ldc, const void *bias, int64_t n, int64_t rowBegin,
              int64_t rowEnd) {
  const T *row = static_cast<const T *>(bias);
  for (int64_t i = rowBegin; i < rowEnd; ++i)
    std::copy(row, row + n, c + i * ldc);
}

/// The epilogue's activation over rows [rowBegin, rowEnd) of one batch of C
/// (offset `offsetC`), copying the pre-activation to aux first when set.
template <typename T>
void activateRows(const GemmArgs &args, int64_t offsetC, int64_t rowBegin,
                  int64_t rowEnd) {
  T *c = static_cast<T *>(args.c) + offsetC;
  T *aux = args.aux ? static_cast<T *>(args.aux) + offsetC : nullptr;
  for (int64_t i = rowBegin; i < rowEnd; ++i) {
    T *row = c + i * args.ldc, *auxRow = aux ? aux + i * args.ldc : nullptr;
    if constexpr (std::is_same_v<T, float>)
      activateRowF32(args.activation, row, auxRow, args.n);
    else
      activateRowF64(args.activation, row, auxRow, args.n);
  }
}

/// Rows [rowBegin, rowEnd) of batch `batch` of `args` (f32/f64), on the
/// calling thread.
void gemmBlock(const void *context, int64_t batch, int64_t rowBegin,
               int64_t rowEnd) {
  const GemmArgs &args = *static_cast<const GemmArgs *>(context);
  CBLAS_TRANSPOSE transA = args.transA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE transB = args.transB ? CblasTrans : CblasNoTrans;
  int64_t rows = rowEnd - rowBegin;
  int64_t batchC = batchOffset(args, batch, args.strideC, args.outerStrideC);
  // Row r of op(A) is row r of A, or column r of A when transposed.
  int64_t offsetA = batchOffset(args, batch, args.strideA, args.outerStrideA) +
                    (args.transA ? rowBegin : rowBegin * args.lda);
  int64_t offsetB = batchOffset(args, batch, args.strideB, args.outerStrideB);
  int64_t offsetC = batchC + rowBegin * args.ldc;
  // A bias: C starts as the bias in every row, and the product adds to it.
  double beta = args.beta;
  if (args.bias) {
    if (args.type == DType::f32)
      fillRows(static_cast<float *>(args.c) + batchC, args.ldc, args.bias,
               args.n, rowBegin, rowEnd);
    else
      fillRows(static_cast<double *>(args.c) + batchC, args.ldc, args.bias,
               args.n, rowBegin, rowEnd);
    beta = 1;
  }
  if (args.type == DType::f32)
    cblas_sgemm(CblasRowMajor, transA, transB, int(rows), int(args.n),
                int(args.k), float(args.alpha),
                static_cast<const float *>(args.a) + offsetA, int(args.lda),
                static_cast<const float *>(args.b) + offsetB, int(args.ldb),
                float(beta), static_cast<float *>(args.c) + offsetC,
                int(args.ldc));
  else
    cblas_dgemm(CblasRowMajor, transA, transB, int(rows), int(args.n),
                int(args.k), args.alpha,
                static_cast<const double *>(args.a) + offsetA, int(args.lda),
                static_cast<const double *>(args.b) + offsetB, int(args.ldb),
                beta, static_cast<double *>(args.c) + offsetC, int(args.ldc));
  // The activation epilogue, while this block of rows is in cache.
  if (args.activation == GemmActivation::none)
    return;
  if (args.type == DType::f32)
    activateRows<float>(args, batchC, rowBegin, rowEnd);
  else
    activateRows<double>(args, batchC, rowBegin, rowEnd);
}

} // namespace

void gemm(const GemmArgs &args) {
  validateGemm(args, "gemm");
  // OpenBLAS's own threading would change the sums (see gemmRowBlock).
  static const bool singleThreaded = (openblas_set_num_threads(1), true);
  (void)singleThreaded;
  if (args.batch == 0 || args.m == 0 || args.n == 0 || args.outerBatch == 0)
    return;
  if (args.type == DType::bf16 && bf16GemmNative())
    return runBlocks(args, gemmBf16Block, &args);
  if (args.type == DType::f16 || args.type == DType::bf16)
    return gemm16(args);
  runBlocks(args, gemmBlock, &args);
}

} // namespace sharc::rt
