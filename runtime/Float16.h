//===- Float16.h - IEEE half and bfloat16 conversions -----------*- C++ -*-===//
//
// 16-bit floats are stored as raw uint16_t bits; arithmetic on them happens in
// f32 and is rounded back to nearest, ties to even.  The conversions are
// branch-free integer and float arithmetic (selects, no calls), so that the
// compiler vectorizes the kernel loops that use them: GCC vectorizes neither
// F16C's scalar intrinsics nor _Float16 casts.  The batched host routines
// widen16/narrow16 use F16C's vector instructions, which give the same bits
// (the runtime tests compare them on every half and every rounding
// boundary).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_FLOAT16_H
#define SHARC_RUNTIME_FLOAT16_H

#include "runtime/DType.h"

#include <cstdint>
#include <cstring>

namespace sharc::rt {

/// The bits of `f`, and the float of `bits` (memcpy: C++17 and device code
/// compile it, where std::bit_cast needs C++20; the emitted programs include
/// this header).
inline uint32_t floatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}
inline float bitsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// The f32 value of IEEE binary16 bits `h` (exact; a NaN comes back quiet,
/// as F16C's conversion makes it).
inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t rest = h & 0x7fff;
  // Normal and subnormal halves: their bits moved into an f32's place read
  // as the value times 2^-112, exactly, so one multiplication rescales them.
  float scaled = bitsFloat(rest << 13) * 0x1p112f;
  uint32_t infNan =
      0x7f800000u | (rest << 13) | (rest > 0x7c00 ? 0x400000u : 0u);
  return bitsFloat(sign | (rest >= 0x7c00 ? infNan : floatBits(scaled)));
}

/// `f` rounded to IEEE binary16 (nearest, ties to even; overflow gives
/// infinity; NaN stays a quiet NaN).
inline uint16_t floatToHalf(float f) {
  uint32_t bits = floatBits(f);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t magnitude = bits & 0x7fffffffu;
  uint32_t nan = 0x7e00 | ((magnitude >> 13) & 0x3ff);
  // A subnormal (or zero) result: adding 0.5 aligns the half's subnormal
  // quantum (2^-24) with the f32 ulp, so the FPU's rounding is the answer.
  uint32_t subnormal = floatBits(bitsFloat(magnitude) + 0.5f) - 0x3f000000u;
  // A normal one: rebias the exponent and round the 13 dropped bits to
  // nearest, ties to even.
  uint32_t normal = (magnitude + (uint32_t(15 - 127) << 23) + 0xfff +
                     ((magnitude >> 13) & 1)) >>
                    13;
  uint32_t result = magnitude > 0x7f800000u    ? nan
                    : magnitude >= 0x477ff000u ? 0x7c00u // >= 65520: infinity
                    : magnitude < 0x38800000u  ? subnormal
                                               : normal;
  return uint16_t(sign | result);
}

/// The f32 value of bfloat16 bits `b` (exact).
inline float bfloat16ToFloat(uint16_t b) {
  return bitsFloat(uint32_t(b) << 16);
}

/// `f` rounded to bfloat16 (nearest, ties to even; NaN stays a quiet NaN).
inline uint16_t floatToBFloat16(float f) {
  uint32_t bits = floatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

/// `x` rounded to float toward zero, with the last bit set when inexact
/// (round to odd): rounding that to 16 bits gives the same result as
/// rounding `x` itself (float has 24 >= p + 2 bits).  Branch-free (selects
/// on integers), so that kernel loops that round a double to 16 bits still
/// vectorize: the nearest float is stepped one ulp toward zero when it lies
/// beyond `x` (the bit pattern of a float's magnitude is monotonic), then
/// made odd when inexact; NaN stays as it is.
inline float roundToOddFloat(double x) {
  float f = static_cast<float>(x);
  double back = static_cast<double>(f);
  uint32_t bits = floatBits(f);
  bits -= __builtin_fabs(back) > __builtin_fabs(x) ? 1u : 0u;
  bits |= back != x && x == x ? 1u : 0u;
  return bitsFloat(bits);
}

/// The f32 values of `count` f16 or bf16 values (`type`) at `src`, exactly:
/// F16C eight at a time for f16 where the CPU has it (checked at run time,
/// since the runtime library is built for any x86-64), else the software
/// routines, which the compiler vectorizes for bf16.  Host only.
void widen16(DType type, const uint16_t *src, int64_t count, float *dst);

/// `count` f32 values at `src` rounded to f16 or bf16 (`type`) as
/// floatToHalf / floatToBFloat16 round them.  Host only.  (AVX512-BF16's
/// vcvtneps2bf16 is not used: it flushes subnormal inputs to zero, which
/// would change bits that the evaluator keeps.)
void narrow16(DType type, const float *src, int64_t count, uint16_t *dst);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_FLOAT16_H
