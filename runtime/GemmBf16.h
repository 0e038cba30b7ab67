//===- GemmBf16.h - bf16 products on bf16 instructions ----------*- C++ -*-===//
//
// A bf16 matrix product with f32 accumulation on oneDNN's kernels for the
// CPU's bf16 dot-product instructions (AVX512-BF16, AMX): twice the f32 GEMM's
// rate on a core that has them.  The host GEMM (Gemm.cpp) and the evaluator
// (ir/EvalLinalg.cpp) both multiply bf16 blocks through bf16Product(), so the
// training binaries and `sharc eval` stay equal bit for bit.
//
// oneDNN picks its kernel, and so the order of the sums, from the shape and
// the operands' layout: a padded leading dimension or a transposed A can give
// other bits for the same values (oneDNN 2.6: another kernel for padded rows;
// for a transposed A with k past about 1024, another split of the sums).
// bf16Product() therefore hands oneDNN its operands in one layout, A dense
// and not transposed and B dense, so that a block's result depends on its
// values and shape, not on how the caller stores them.  B keeps its
// transposition, which oneDNN's kernels copy to one packed format either way
// (the unit test checks both give the same bits); copying A costs a
// transposition where the program reads A transposed (the weight gradients).
// It runs on the calling thread: oneDNN's own threads would split the sums
// by thread count.
//
// SHARC_BF16_GEMM=widened turns it off: bf16 GEMMs then widen their operands
// to f32 and run sgemm, as on a CPU without bf16 instructions.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_GEMMBF16_H
#define SHARC_RUNTIME_GEMMBF16_H

#include <cstdint>
#include <string>

namespace sharc::rt {

/// True when bf16 products run on bf16Product(): oneDNN reports the CPU's
/// bf16 instructions (AVX512-BF16 or AMX) and SHARC_BF16_GEMM is not
/// "widened".  Decided once per process; another value of SHARC_BF16_GEMM
/// than "native" and "widened", or "native" on a CPU without the
/// instructions, gets a warning on stderr and the default.
bool bf16GemmNative();

/// What multiplies bf16 matrices in this process, e.g. "oneDNN 2.6.3,
/// avx512_core_bf16 kernels" or "widened to f32".
std::string bf16GemmDescription();

/// C = op(A) op(B) for bf16 A and B (raw bits, Float16.h), accumulated and
/// stored in f32: op(A) is m x k (A stored k x m when transA), op(B) k x n
/// (B stored n x k when transB), row-major with leading dimensions lda and
/// ldb; C is m x n with leading dimension ldc.  One oneDNN call on the
/// calling thread, whose result depends on the values of op(A) and op(B) and
/// on m, n and k alone.  Requires bf16GemmNative().  Returns false
/// with `error` set when oneDNN fails (out of memory).
bool bf16Product(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                 float *c, int64_t ldc, std::string &error);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_GEMMBF16_H
