//===- Math.h - Scalar semantics of the evaluator and kernels -*- C++ -*-===//
//
// The reference evaluator (ir/Eval*.cpp) and every generated kernel (host and
// CUDA) compute the scalar functions of sharc ops with these definitions.
// exp, tanh and erf are our own, so a compiled program
// reproduces the evaluator bit for bit while its loops still vectorize: the
// code is branch-free straight-line double arithmetic that GCC if-converts
// and vectorizes, where libm's scalar calls would stop it.
//
// Accuracy (checked against libm by MathTest over millions of arguments):
// a few units in the last place of a double, far below the f32 rounding every
// f32 op applies afterwards.  Special values follow IEEE: exp(-inf) = 0,
// exp(+inf) = +inf, overflow to +inf, underflow to 0 or subnormals, NaN in,
// NaN out; tanh(+-inf) = +-1, tanh(-0) = -0.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_MATH_H
#define SHARC_RUNTIME_MATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHARC_MATH_HD __host__ __device__ __forceinline__
#define SHARC_MATH_LONG __host__ __device__ __forceinline__
#else
#define SHARC_MATH_HD inline
/// For the long functions (erf): inlined even so, or the loops that call
/// them would not vectorize.
#define SHARC_MATH_LONG inline __attribute__((always_inline))
#endif

namespace sharc::math {

namespace detail {

/// 2^k for k in [-1022, 1023], built from its bits.
SHARC_MATH_HD double pow2(int64_t k) {
  uint64_t bits = static_cast<uint64_t>(k + 1023) << 52;
  double result;
#if defined(__CUDA_ARCH__)
  result = __longlong_as_double(static_cast<long long>(bits));
#else
  std::memcpy(&result, &bits, sizeof(result));
#endif
  return result;
}

/// e^r - 1 for |r| <= 0.35 (Taylor, degree 13; remainder < 1e-17), by
/// Horner's rule with fused multiply-adds (exactly specified by IEEE, so the
/// same on every target, and one rounding per step).
SHARC_MATH_HD double expm1Reduced(double r) {
  double p = 1.0 / 6227020800.0;
  p = ::fma(p, r, 1.0 / 479001600.0);
  p = ::fma(p, r, 1.0 / 39916800.0);
  p = ::fma(p, r, 1.0 / 3628800.0);
  p = ::fma(p, r, 1.0 / 362880.0);
  p = ::fma(p, r, 1.0 / 40320.0);
  p = ::fma(p, r, 1.0 / 5040.0);
  p = ::fma(p, r, 1.0 / 720.0);
  p = ::fma(p, r, 1.0 / 120.0);
  p = ::fma(p, r, 1.0 / 24.0);
  p = ::fma(p, r, 1.0 / 6.0);
  p = ::fma(p, r, 0.5);
  p = ::fma(p, r, 1.0);
  return p * r;
}

/// Splits y (|y| < 2^11) into k ln 2 + r, k an integer (returned in `k`) and
/// |r| <= ln(2) / 2.
SHARC_MATH_HD double reduce(double y, double &k) {
  constexpr double log2e = 1.4426950408889634;
  // ln 2 split so that k * ln2Hi is exact for |k| < 2^11.
  constexpr double ln2Hi = 6.93147180369123816490e-01;
  constexpr double ln2Lo = 1.90821492927058770002e-10;
  constexpr double shifter = 6755399441055744.0; // 1.5 * 2^52
  k = (y * log2e + shifter) - shifter;            // round to nearest
  return (y - k * ln2Hi) - k * ln2Lo;
}

/// S(t) = sum over n >= 0 of (2t)^n / (2n + 1)!!, for 0 <= t <= 25: the
/// series of erf(a) = 2/sqrt(pi) a e^{-a^2} S(a^2), all of whose terms are
/// positive (no cancellation).  81 terms leave a tail below 2^-60 of the sum
/// at t = 25; the coefficients c_n = 2^n / (2n + 1)!! are rounded to double
/// (computed exactly as fractions).  Four Horner chains in t^4 (the terms
/// n = 4k + j), so that the FMAs of one element overlap.
SHARC_MATH_LONG double erfSeries(double t) {
  double t2 = t * t, t4 = t2 * t2;
  double p0 = 0x1.c7768a40918a1p-399;
  p0 = ::fma(p0, t4, 0x1.083eda3563ac9p-373);
  p0 = ::fma(p0, t4, 0x1.f22068a67dc78p-349);
  p0 = ::fma(p0, t4, 0x1.790ec5281b8e6p-324);
  p0 = ::fma(p0, t4, 0x1.c4a1c73f9a12ep-300);
  p0 = ::fma(p0, t4, 0x1.a8bb1daf50808p-276);
  p0 = ::fma(p0, t4, 0x1.328ac2c4386e4p-252);
  p0 = ::fma(p0, t4, 0x1.4e1ca0bfaa712p-229);
  p0 = ::fma(p0, t4, 0x1.0d319d230e257p-206);
  p0 = ::fma(p0, t4, 0x1.38d3d3acbe777p-184);
  p0 = ::fma(p0, t4, 0x1.fd4910eadf32bp-163);
  p0 = ::fma(p0, t4, 0x1.18718c3c25b5ep-141);
  p0 = ::fma(p0, t4, 0x1.9086a47b449d0p-121);
  p0 = ::fma(p0, t4, 0x1.5fd74f512d38cp-101);
  p0 = ::fma(p0, t4, 0x1.636b2c25f2c57p-82);
  p0 = ::fma(p0, t4, 0x1.799ec4c4db4d0p-64);
  p0 = ::fma(p0, t4, 0x1.74dba97b8be52p-47);
  p0 = ::fma(p0, t4, 0x1.1cd3b01a822a6p-31);
  p0 = ::fma(p0, t4, 0x1.f28db670be53bp-18);
  p0 = ::fma(p0, t4, 0x1.1566abc011567p-6);
  p0 = ::fma(p0, t4, 0x1.0000000000000p+0);
  double p1 = 0x1.b46e6a0c34503p-380;
  p1 = ::fma(p1, t4, 0x1.b1be2dd85f972p-355);
  p1 = ::fma(p1, t4, 0x1.5b37f603c856fp-330);
  p1 = ::fma(p1, t4, 0x1.ba442e2a9a742p-306);
  p1 = ::fma(p1, t4, 0x1.b9ff147c2a260p-282);
  p1 = ::fma(p1, t4, 0x1.5531d21af5596p-258);
  p1 = ::fma(p1, t4, 0x1.8faf67c62dfc9p-235);
  p1 = ::fma(p1, t4, 0x1.5c0c6e1377238p-212);
  p1 = ::fma(p1, t4, 0x1.b80562010be8bp-190);
  p1 = ::fma(p1, t4, 0x1.88b3b6aeeff5cp-168);
  p1 = ::fma(p1, t4, 0x1.de9fa7a781366p-147);
  p1 = ::fma(p1, t4, 0x1.7e978a031f273p-126);
  p1 = ::fma(p1, t4, 0x1.7da878c0310ddp-106);
  p1 = ::fma(p1, t4, 0x1.be03fb2a9a10ep-87);
  p1 = ::fma(p1, t4, 0x1.19050980a3336p-68);
  p1 = ::fma(p1, t4, 0x1.54e6174c62a5ap-51);
  p1 = ::fma(p1, t4, 0x1.519297d390c9fp-35);
  p1 = ::fma(p1, t4, 0x1.a3d5a71b92cd3p-21);
  p1 = ::fma(p1, t4, 0x1.937e11175f095p-9);
  p1 = ::fma(p1, t4, 0x1.5555555555555p-1);
  double p2 = 0x1.63d10d155d32bp-386;
  p2 = ::fma(p2, t4, 0x1.749c80b9e0b8cp-361);
  p2 = ::fma(p2, t4, 0x1.3b349df88a4b4p-336);
  p2 = ::fma(p2, t4, 0x1.a9a3c857327b5p-312);
  p2 = ::fma(p2, t4, 0x1.c49ab4b87d147p-288);
  p2 = ::fma(p2, t4, 0x1.7545d22a9f03bp-264);
  p2 = ::fma(p2, t4, 0x1.d55ae5e660472p-241);
  p2 = ::fma(p2, t4, 0x1.b9175b58090c0p-218);
  p2 = ::fma(p2, t4, 0x1.2ecf673a86d1bp-195);
  p2 = ::fma(p2, t4, 0x1.27ae777aaea6fp-173);
  p2 = ::fma(p2, t4, 0x1.8dd12aeef708ap-152);
  p2 = ::fma(p2, t4, 0x1.62de2e635bf7dp-131);
  p2 = ::fma(p2, t4, 0x1.906d9c10fce8bp-111);
  p2 = ::fma(p2, t4, 0x1.0d4adb45318cap-91);
  p2 = ::fma(p2, t4, 0x1.8fac24452c5fdp-73);
  p2 = ::fma(p2, t4, 0x1.26d4d5e132b8cp-55);
  p2 = ::fma(p2, t4, 0x1.747e72912d023p-39);
  p2 = ::fma(p2, t4, 0x1.3fdfbc45c52eap-24);
  p2 = ::fma(p2, t4, 0x1.f09b28ba4d955p-12);
  p2 = ::fma(p2, t4, 0x1.1111111111111p-2);
  double p3 = 0x1.1e718cf29b87dp-392;
  p3 = ::fma(p3, t4, 0x1.3bdb20d3d1244p-367);
  p3 = ::fma(p3, t4, 0x1.1a245b464d3e0p-342);
  p3 = ::fma(p3, t4, 0x1.9391cf04ed7e6p-318);
  p3 = ::fma(p3, t4, 0x1.c82b0ace19470p-294);
  p3 = ::fma(p3, t4, 0x1.9180e20fba197p-270);
  p3 = ::fma(p3, t4, 0x1.0e9e7ff139d16p-246);
  p3 = ::fma(p3, t4, 0x1.12137bdd39d0dp-223);
  p3 = ::fma(p3, t4, 0x1.97ff32292170cp-201);
  p3 = ::fma(p3, t4, 0x1.b306925c38de1p-179);
  p3 = ::fma(p3, t4, 0x1.42483cb4a13e1p-157);
  p3 = ::fma(p3, t4, 0x1.3fe183f49b037p-136);
  p3 = ::fma(p3, t4, 0x1.96c8bf0d31af7p-116);
  p3 = ::fma(p3, t4, 0x1.395bc2a44c468p-96);
  p3 = ::fma(p3, t4, 0x1.101e0dcd0ddf3p-77);
  p3 = ::fma(p3, t4, 0x1.e3d36c1c38faap-60);
  p3 = ::fma(p3, t4, 0x1.808286c768445p-43);
  p3 = ::fma(p3, t4, 0x1.bd0ac3296b624p-28);
  p3 = ::fma(p3, t4, 0x1.08db48ebe51c7p-14);
  p3 = ::fma(p3, t4, 0x1.3813813813814p-4);
  return ::fma(::fma(p3, t, p2), t2, ::fma(p1, t, p0));
}

} // namespace detail

/// e^x.
SHARC_MATH_HD double exp(double x) {
  // Clamping keeps k in range; the ends produce 0 and +inf below.
  double clamped = x < -746.0 ? -746.0 : (x > 710.0 ? 710.0 : x);
  clamped = x != x ? 0.0 : clamped;
  double k;
  double r = detail::reduce(clamped, k);
  double er = detail::expm1Reduced(r) + 1.0;
  // 2^k as two factors, so that subnormal results and k = 1024 work.
  int64_t ki = static_cast<int64_t>(k);
  int64_t half = ki / 2;
  double result = er * detail::pow2(half) * detail::pow2(ki - half);
  result = x < -745.2 ? 0.0 : result;
  return x != x ? x : result;
}

/// tanh(x) = expm1(2|x|) / (expm1(2|x|) + 2), signed; expm1(y) =
/// 2^k expm1(r) + (2^k - 1) from the reduction of y, exact for k = 0 (small
/// |x|: no cancellation) and within a few ulp beyond.  From |x| = 22 on, tanh
/// is 1 in double.
SHARC_MATH_HD double tanh(double x) {
  double a = x < 0 ? -x : x;
  double y = 2.0 * (a < 22.0 ? a : 22.0);
  y = x != x ? 0.0 : y;
  double k;
  double r = detail::reduce(y, k);
  double scale = detail::pow2(static_cast<int64_t>(k));
  double em1 = scale * detail::expm1Reduced(r) + (scale - 1.0);
  double t = em1 / (em1 + 2.0);
  t = x != x ? x : t;
  return x < 0 ? -t : (x == 0 ? x : t);
}

/// erf(x): for |x| < 5 the positive series 2/sqrt(pi) a e^{-a^2} S(a^2); from 5
/// on 1 - erfc(a) with erfc from its asymptotic series (13 terms, relative
/// error below 1e-9 there, where erfc < 1.6e-12: far below an ulp of the
/// result).  Both are computed and one selected, so loops vectorize.
SHARC_MATH_LONG double erf(double x) {
  constexpr double twoOverSqrtPi = 1.1283791670955126;
  constexpr double oneOverSqrtPi = 0.56418958354775628;
  double a = x < 0 ? -x : x;
  a = x != x ? 0.0 : a;
  double small = a < 5.0 ? a : 5.0;
  double t = small * small;
  double series = twoOverSqrtPi * small * math::exp(-t) * detail::erfSeries(t);
  double large = a > 5.0 ? (a < 30.0 ? a : 30.0) : 5.0;
  double u = 1.0 / (2.0 * large * large);
  // sum over n <= 13 of (-1)^n (2n - 1)!! u^n, by Horner:
  // 1 - u (1 - 3u (1 - 5u (...))).
  double sum = 1.0;
  sum = ::fma(-25.0 * u, sum, 1.0);
  sum = ::fma(-23.0 * u, sum, 1.0);
  sum = ::fma(-21.0 * u, sum, 1.0);
  sum = ::fma(-19.0 * u, sum, 1.0);
  sum = ::fma(-17.0 * u, sum, 1.0);
  sum = ::fma(-15.0 * u, sum, 1.0);
  sum = ::fma(-13.0 * u, sum, 1.0);
  sum = ::fma(-11.0 * u, sum, 1.0);
  sum = ::fma(-9.0 * u, sum, 1.0);
  sum = ::fma(-7.0 * u, sum, 1.0);
  sum = ::fma(-5.0 * u, sum, 1.0);
  sum = ::fma(-3.0 * u, sum, 1.0);
  sum = ::fma(-1.0 * u, sum, 1.0);
  double erfc = oneOverSqrtPi * math::exp(-large * large) / large * sum;
  double r = a < 5.0 ? series : 1.0 - erfc;
  r = x != x ? x : r;
  return x < 0 ? -r : (x == 0 ? x : r);
}

//===----------------------------------------------------------------------===//
// The other scalar semantics of sharc ops (docs/ir.md), one definition each
//===----------------------------------------------------------------------===//

SHARC_MATH_HD double relu(double x) { return x > 0 || x != x ? x : 0.0; }
SHARC_MATH_HD double sigmoid(double x) { return 1 / (1 + math::exp(-x)); }
SHARC_MATH_HD double geluErf(double x) {
  return 0.5 * x * (1 + math::erf(x / ::sqrt(2.0)));
}
SHARC_MATH_HD double geluTanh(double x) {
  return 0.5 * x *
         (1 + math::tanh(::sqrt(2 / 3.14159265358979323846) *
                         (x + 0.044715 * x * x * x)));
}
/// Maximum and minimum propagating NaN.
SHARC_MATH_HD double maxNan(double a, double b) {
  if (a != a || b != b)
    return a + b;
  return a < b ? b : a;
}
SHARC_MATH_HD double minNan(double a, double b) {
  if (a != a || b != b)
    return a + b;
  return b < a ? b : a;
}

/// Two's complement arithmetic on int64 (no undefined overflow).
SHARC_MATH_HD int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
}
SHARC_MATH_HD int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) -
                              static_cast<uint64_t>(b));
}
SHARC_MATH_HD int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
}
SHARC_MATH_HD int64_t wrapNeg(int64_t a) { return wrapSub(0, a); }

/// Division truncating toward zero; INT64_MIN / -1 wraps; sets `bad` on
/// division by zero.
SHARC_MATH_HD int64_t truncDiv(int64_t a, int64_t b, bool &bad) {
  if (b == 0) {
    bad = true;
    return 0;
  }
  return b == -1 ? wrapNeg(a) : a / b;
}

/// base^exponent by repeated multiplication (wrapping); a negative exponent
/// gives the truncated value of 1 / base^-exponent; sets `bad` for 0^negative.
SHARC_MATH_HD int64_t ipow(int64_t base, int64_t exponent, bool &bad) {
  if (exponent < 0) {
    if (base == 0) {
      bad = true;
      return 0;
    }
    if (base == 1)
      return 1;
    if (base == -1)
      return exponent % 2 ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  for (uint64_t e = exponent; e; e >>= 1) {
    if (e & 1)
      result = wrapMul(result, base);
    base = wrapMul(base, base);
  }
  return result;
}

} // namespace sharc::math

#endif // SHARC_RUNTIME_MATH_H
