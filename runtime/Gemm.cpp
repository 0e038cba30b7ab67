//===- Gemm.cpp - Strided-batched matrix multiplication on the host -------===//

#include "runtime/Gemm.h"

#include "runtime/Errors.h"
#include "runtime/Float16.h"
#include "runtime/ThreadPool.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
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

/// The f32 value of 16-bit element `i` of `data`.
float load16(DType type, const uint16_t *data, int64_t i) {
  return type == DType::f16 ? halfToFloat(data[i]) : bfloat16ToFloat(data[i]);
}

/// Copies the rows x cols 16-bit matrix at `src` (leading dimension `ld`) to
/// a dense f32 matrix.
void widen(DType type, const uint16_t *src, int64_t rows, int64_t cols,
           int64_t ld, std::vector<float> &dst) {
  dst.resize(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      dst[i * cols + j] = load16(type, src, i * ld + j);
}

/// The offset of batch `t` (counting outer batches times inner ones) of an
/// operand with inner stride `stride` and outer stride `outerStride`.
int64_t batchOffset(const GemmArgs &args, int64_t t, int64_t stride,
                    int64_t outerStride) {
  return t / args.batch * outerStride + t % args.batch * stride;
}

/// The 16-bit path: each batch's operands are widened to f32 (once for a
/// broadcast operand), multiplied by sgemm into an f32 C and rounded once.
void gemm16(const GemmArgs &args) {
  const auto *a = static_cast<const uint16_t *>(args.a);
  const auto *b = static_cast<const uint16_t *>(args.b);
  auto *c = static_cast<uint16_t *>(args.c);
  int64_t rowsA = args.transA ? args.k : args.m;
  int64_t colsA = args.transA ? args.m : args.k;
  int64_t rowsB = args.transB ? args.n : args.k;
  int64_t colsB = args.transB ? args.k : args.n;
  std::vector<float> wideA, wideB, wideC(args.m * args.n);
  for (int64_t batch = 0; batch < args.outerBatch * args.batch; ++batch) {
    if (batch == 0 || args.strideA != 0 || args.outerStrideA != 0)
      widen(args.type,
            a + batchOffset(args, batch, args.strideA, args.outerStrideA),
            rowsA, colsA, args.lda, wideA);
    if (batch == 0 || args.strideB != 0 || args.outerStrideB != 0)
      widen(args.type,
            b + batchOffset(args, batch, args.strideB, args.outerStrideB),
            rowsB, colsB, args.ldb, wideB);
    uint16_t *cBatch =
        c + batchOffset(args, batch, args.strideC, args.outerStrideC);
    float beta = float(args.beta);
    if (args.bias) {
      for (int64_t i = 0; i < args.m; ++i)
        for (int64_t j = 0; j < args.n; ++j)
          wideC[i * args.n + j] =
              load16(args.type, static_cast<const uint16_t *>(args.bias), j);
      beta = 1;
    } else if (args.beta != 0) {
      widen(args.type, cBatch, args.m, args.n, args.ldc, wideC);
    }
    cblas_sgemm(CblasRowMajor, args.transA ? CblasTrans : CblasNoTrans,
                args.transB ? CblasTrans : CblasNoTrans, int(args.m),
                int(args.n), int(args.k), float(args.alpha), wideA.data(),
                int(std::max<int64_t>(1, colsA)), wideB.data(),
                int(std::max<int64_t>(1, colsB)), beta, wideC.data(),
                int(args.n));
    auto narrow = [&](float value) {
      return args.type == DType::f16 ? floatToHalf(value)
                                     : floatToBFloat16(value);
    };
    uint16_t *auxBatch =
        args.aux ? static_cast<uint16_t *>(args.aux) +
                       batchOffset(args, batch, args.strideC, args.outerStrideC)
                 : nullptr;
    for (int64_t i = 0; i < args.m; ++i)
      for (int64_t j = 0; j < args.n; ++j) {
        float value = wideC[i * args.n + j];
        if (auxBatch)
          auxBatch[i * args.ldc + j] = narrow(value);
        cBatch[i * args.ldc + j] =
            narrow(float(applyActivation(args.activation, value)));
      }
  }
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

/// The epilogue's activation `Act` over rows [rowBegin, rowEnd) of one batch
/// of C (offset `offsetC`), copying the pre-activation to aux first when set.
template <typename T, GemmActivation Act>
void activateRows(const GemmArgs &args, int64_t offsetC, int64_t rowBegin,
                  int64_t rowEnd) {
  T *c = static_cast<T *>(args.c) + offsetC;
  T *aux = args.aux ? static_cast<T *>(args.aux) + offsetC : nullptr;
  for (int64_t i = rowBegin; i < rowEnd; ++i) {
    T *row = c + i * args.ldc;
    if (aux)
      std::copy(row, row + args.n, aux + i * args.ldc);
    for (int64_t j = 0; j < args.n; ++j)
      row[j] = T(applyActivation(Act, row[j]));
  }
}

template <typename T>
void activateRows(const GemmArgs &args, int64_t offsetC, int64_t rowBegin,
                  int64_t rowEnd) {
  if (args.activation == GemmActivation::relu)
    activateRows<T, GemmActivation::relu>(args, offsetC, rowBegin, rowEnd);
  else
    activateRows<T, GemmActivation::geluTanh>(args, offsetC, rowBegin, rowEnd);
}

/// Rows [rowBegin, rowEnd) of batches [batchBegin, batchEnd) of `args`
/// (f32/f64; outer batches times inner ones), on the calling thread.
void gemmPart(const GemmArgs &args, int64_t batchBegin, int64_t batchEnd,
              int64_t rowBegin, int64_t rowEnd) {
  CBLAS_TRANSPOSE transA = args.transA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE transB = args.transB ? CblasTrans : CblasNoTrans;
  // Row r of op(A) is row r of A, or column r of A when transposed.
  int64_t rowOffsetA = args.transA ? rowBegin : rowBegin * args.lda;
  int64_t rows = rowEnd - rowBegin;
  for (int64_t batch = batchBegin; batch < batchEnd; ++batch) {
    int64_t batchC =
        batchOffset(args, batch, args.strideC, args.outerStrideC);
    int64_t offsetA =
        batchOffset(args, batch, args.strideA, args.outerStrideA) + rowOffsetA;
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
                  static_cast<const double *>(args.a) + offsetA,
                  int(args.lda),
                  static_cast<const double *>(args.b) + offsetB,
                  int(args.ldb), beta,
                  static_cast<double *>(args.c) + offsetC, int(args.ldc));
    // The activation epilogue, while this block of rows is in cache.
    if (args.activation == GemmActivation::none)
      continue;
    if (args.type == DType::f32)
      activateRows<float>(args, batchC, rowBegin, rowEnd);
    else
      activateRows<double>(args, batchC, rowBegin, rowEnd);
  }
}

} // namespace

void gemm(const GemmArgs &args) {
  validateGemm(args, "gemm");
  if (args.batch == 0 || args.m == 0 || args.n == 0 || args.outerBatch == 0)
    return;
  if (args.type == DType::f16 || args.type == DType::bf16)
    return gemm16(args);
  // Large products are spread over the thread pool (ThreadPool.h): across
  // batches (outer and inner) when there are enough, else across row blocks
  // of C.  Each part is an independent BLAS call on the calling thread, so no
  // output element depends on the split.
  int64_t threads = hostThreads();
  int64_t batches = args.outerBatch * args.batch;
  double flops = double(batches) * args.m * args.n * args.k;
  if (threads <= 1 || flops < (1 << 18)) {
    gemmPart(args, 0, batches, 0, args.m);
    return;
  }
  struct Split {
    const GemmArgs *args;
    bool byBatch;
    int64_t parts, batches;
  } split{&args, batches >= threads,
          batches >= threads ? batches : std::min(threads, args.m), batches};
  parallelFor(
      split.parts,
      [](const void *context, int64_t begin, int64_t end) {
        const Split &s = *static_cast<const Split *>(context);
        const GemmArgs &a = *s.args;
        if (s.byBatch)
          return gemmPart(a, begin, end, 0, a.m);
        gemmPart(a, 0, s.batches, a.m * begin / s.parts,
                 a.m * end / s.parts);
      },
      &split);
}

void setBlasThreads(int threads) {
  if (threads > 0)
    openblas_set_num_threads(threads);
}

} // namespace sharc::rt
