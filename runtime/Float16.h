//===- Float16.h - IEEE half and bfloat16 conversions -----------*- C++ -*-===//
//
// 16-bit floats are stored as raw uint16_t bits; arithmetic on them happens in
// f32 and is rounded back to nearest, ties to even.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_FLOAT16_H
#define SHARC_RUNTIME_FLOAT16_H

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

/// The f32 value of IEEE binary16 bits `h` (exact).
inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    float magnitude = float(mantissa) * 0x1p-24f;
    return bitsFloat(floatBits(magnitude) | sign);
  }
  if (exponent == 31)
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// `f` rounded to IEEE binary16 (nearest, ties to even; overflow gives
/// infinity; NaN stays a quiet NaN).
inline uint16_t floatToHalf(float f) {
  uint32_t bits = floatBits(f);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN
    return sign | 0x7e00 | uint16_t((magnitude >> 13) & 0x3ff);
  if (magnitude >= 0x477ff000u) // >= 65520: rounds to infinity
    return sign | 0x7c00;
  if (magnitude < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5 aligns the half's subnormal
    // quantum (2^-24) with the f32 ulp, so the FPU's rounding is the answer.
    float aligned = bitsFloat(magnitude) + 0.5f;
    return sign | uint16_t(floatBits(aligned) - 0x3f000000u);
  }
  uint32_t mantissaOdd = (magnitude >> 13) & 1;
  magnitude += (uint32_t(15 - 127) << 23) + 0xfff + mantissaOdd;
  return sign | uint16_t(magnitude >> 13);
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
/// rounding `x` itself (float has 24 >= p + 2 bits).
inline float roundToOddFloat(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || x != x)
    return f;
  if (__builtin_fabs(static_cast<double>(f)) > __builtin_fabs(x))
    f = __builtin_nextafterf(f, 0.0f);
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof(bits));
  bits |= 1;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

} // namespace sharc::rt

#endif // SHARC_RUNTIME_FLOAT16_H
