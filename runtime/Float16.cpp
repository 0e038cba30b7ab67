//===- Float16.cpp - Batched 16-bit conversions on the host ---------------===//

#include "runtime/Float16.h"

#include "runtime/CpuClones.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sharc::rt {

namespace {

/// The f32 values of `count` 16-bit values at `src` (exact).  (Cloned per
/// CPU: the bf16 loops vectorize to the CPU's widest vectors.)
SHARC_CPU_CLONES void widenScalar(DType type, const uint16_t *src,
                                  int64_t count, float *dst) {
  if (type == DType::bf16) {
    for (int64_t i = 0; i < count; ++i)
      dst[i] = bfloat16ToFloat(src[i]);
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    dst[i] = halfToFloat(src[i]);
}

/// `count` f32 values at `src` rounded to 16 bits (nearest, ties to even).
SHARC_CPU_CLONES void narrowScalar(DType type, const float *src, int64_t count,
                                   uint16_t *dst) {
  if (type == DType::bf16) {
    for (int64_t i = 0; i < count; ++i)
      dst[i] = floatToBFloat16(src[i]);
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    dst[i] = floatToHalf(src[i]);
}

#if defined(__x86_64__)
/// widenScalar for f16 on F16C's vcvtph2ps, eight values at a time (the
/// instruction is exact, so the bits are the same).
__attribute__((target("avx,f16c"))) void
widenHalfF16c(const uint16_t *src, int64_t count, float *dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i *>(src + i))));
  for (; i < count; ++i)
    dst[i] = halfToFloat(src[i]);
}

/// narrowScalar for f16 on F16C's vcvtps2ph with round to nearest even,
/// which ignores MXCSR and rounds subnormals, infinities and NaNs as
/// floatToHalf does (runtime tests compare the two on every
/// half-way case).
__attribute__((target("avx,f16c"))) void
narrowHalfF16c(const float *src, int64_t count, uint16_t *dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i *>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < count; ++i)
    dst[i] = floatToHalf(src[i]);
}

bool hasF16c() {
  static const bool has = __builtin_cpu_supports("f16c");
  return has;
}
#endif

} // namespace

void widen16(DType type, const uint16_t *src, int64_t count, float *dst) {
#if defined(__x86_64__)
  if (type == DType::f16 && hasF16c())
    return widenHalfF16c(src, count, dst);
#endif
  widenScalar(type, src, count, dst);
}

void narrow16(DType type, const float *src, int64_t count, uint16_t *dst) {
#if defined(__x86_64__)
  if (type == DType::f16 && hasF16c())
    return narrowHalfF16c(src, count, dst);
#endif
  narrowScalar(type, src, count, dst);
}

} // namespace sharc::rt
