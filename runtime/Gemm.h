//===- Gemm.h - Strided-batched matrix multiplication -----------*- C++ -*-===//
//
// The GEMM layer of the runtime: C[b] = alpha * op(A[b]) * op(B[b]) +
// beta * C[b] for b in [0, batch), row-major, on host memory through BLAS.
// GemmCuda.h has the same interface on device memory.  See docs/runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_GEMM_H
#define SHARC_RUNTIME_GEMM_H

#include "runtime/DType.h"
#include "runtime/Math.h"

#include <algorithm>
#include <cstdint>

namespace sharc::rt {

/// The activation a GEMM's epilogue applies: computed in double from the
/// f32/f64 (or widened 16-bit) sum and rounded once, as the evaluator
/// computes sharc.relu and sharc.gelu {approximation = tanh}.
enum class GemmActivation { none, relu, geluTanh };

/// act(x) for `activation` (the identity for none); host and device.
SHARC_MATH_HD double applyActivation(GemmActivation activation, double x) {
  switch (activation) {
  case GemmActivation::relu:
    return math::relu(x);
  case GemmActivation::geluTanh:
    return math::geluTanh(x);
  default:
    return x;
  }
}

/// One strided-batched GEMM on row-major matrices.  op(A[b]) is m x k and
/// op(B[b]) is k x n; A is stored k x m when transA is set (m x k otherwise),
/// B n x k when transB is set (k x n otherwise), C m x n.  Leading dimensions
/// and batch strides are in elements; a batch stride of 0 makes every batch
/// use the same A or B (broadcast).  When beta is 0, C is not read.  With a
/// bias (n elements of the same type, beta 0), C[b] = alpha * op(A[b]) *
/// op(B[b]) + bias, the bias added to every row: the GEMM library's bias
/// epilogue on CUDA, C prefilled with the bias and beta = 1 on the host.
/// With an activation, C[b] = act(that sum), and `aux`, when set, receives
/// the sum itself (the pre-activation the backward pass reads) in C's layout:
/// cuBLASLt's RELU/GELU(_AUX)(_BIAS) epilogues on CUDA, a pass over each
/// block of rows right after its product on the host.
struct GemmArgs {
  /// f32, f64, f16 or bf16 (raw 16-bit values, see Float16.h); the type of
  /// A, B and C alike.
  DType type = DType::f32;
  bool transA = false;
  bool transB = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  double alpha = 1;
  double beta = 0;
  const void *a = nullptr;
  int64_t lda = 0;
  int64_t strideA = 0;
  const void *b = nullptr;
  int64_t ldb = 0;
  int64_t strideB = 0;
  void *c = nullptr;
  int64_t ldc = 0;
  int64_t strideC = 0;
  int64_t batch = 1;
  const void *bias = nullptr;
  GemmActivation activation = GemmActivation::none;
  /// The pre-activation output (activation only; C's layout and type).
  void *aux = nullptr;
  /// A second, outer batch level: for o in [0, outerBatch), the batches above
  /// start at A + o * outerStrideA (and B, C alike).  Attention heads viewed
  /// in place have two batch dimensions (sequence, head) of unrelated
  /// strides.
  int64_t outerBatch = 1;
  int64_t outerStrideA = 0;
  int64_t outerStrideB = 0;
  int64_t outerStrideC = 0;
};

/// Checks `args` and calls fatal() naming `caller` and the first problem:
/// an unsupported type, negative sizes or strides, sizes or a batch count
/// past 2^31 - 1, a leading dimension less than the row length of its matrix,
/// batches of C that overlap, a bias with a non-zero beta, an aux output
/// without an activation, or a null A, B or C when there is work to do
/// (batch, m and n all non-zero).
void validateGemm(const GemmArgs &args, const char *caller);

/// Rows of C per BLAS call on the host for a product of `m` rows: gemm()
/// cuts every batch into blocks of this many rows (the last one shorter)
/// whatever the thread count, and the threads share out the blocks.  A BLAS's
/// sum for an element depends on the call it is part of (OpenBLAS's edge
/// kernels and its own threading add in other orders), so a cut that depends
/// on the shape alone makes the result independent of the threads, and the
/// evaluator, which makes the same calls one thread at a time, computes the
/// same bits.
///
/// Each call packs all of B again, so short blocks cost packing time (a
/// 1024 x 1024 x 256 product in 64-row calls runs at 77 GFLOP/s on one core
/// where 256-row calls reach 96): blocks are up to kGemmMaxRowBlock rows, and
/// a product of 128 to 256 rows is cut in two so that two threads share it.
/// Block starts are multiples of 16 rows.
constexpr int64_t kGemmMaxRowBlock = 256;
constexpr int64_t gemmRowBlock(int64_t m) {
  if (m < 128)
    return std::max<int64_t>(m, 1);
  int64_t blocks =
      std::max<int64_t>(2, (m + kGemmMaxRowBlock - 1) / kGemmMaxRowBlock);
  int64_t rows = (m + blocks - 1) / blocks;
  return (rows + 15) / 16 * 16;
}

/// Computes `args` on host memory in blocks of gemmRowBlock(m) rows, each one
/// BLAS call on one BLAS thread (gemm() sets OpenBLAS to one thread: its own
/// threading changes the sums): cblas_sgemm/dgemm for f32/f64; f16 and bf16
/// are converted to f32, multiplied by sgemm (f32 accumulation) and rounded
/// once to the 16-bit type.  Fatal on invalid arguments.
void gemm(const GemmArgs &args);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_GEMM_H
