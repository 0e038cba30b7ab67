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
// NaN out; tanh(+-inf) = +-1, tanh(-0) = -0; erf(+-inf) = +-1, erf(-0) = -0.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_MATH_H
#define SHARC_RUNTIME_MATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHARC_MATH_HD __host__ __device__ __forceinline__
#define SHARC_MATH_HD_INLINE __host__ __device__ __forceinline__
#else
#define SHARC_MATH_HD inline
/// For functions too large for GCC to inline on its own, whose callers' loops
/// only vectorize with them inlined.
#define SHARC_MATH_HD_INLINE __attribute__((always_inline)) inline
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
  k = (y * log2e + shifter) - shifter;           // round to nearest
  return (y - k * ln2Hi) - k * ln2Lo;
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

/// erf(x) (|x| < 1: x P(x^2), P a degree-11 fit of erf(x) / x on x^2 in
/// [0, 1]; 1 <= |x| < 6: 1 - e^(-x^2) Q(u), Q a degree-28 fit of
/// erfc(x) e^(x^2) in u = (|x| - 3.5) / 2.5; from 6 on, erf is +-1 in double),
/// both fits Chebyshev interpolants (relative error below 1e-16) evaluated by
/// fused multiply-adds.  Branch-free, so loops that call it vectorize, where
/// libm's erf is a scalar call.
SHARC_MATH_HD_INLINE double erf(double x) {
  const double a = x < 0 ? -x : x;
  const double t = x * x;
  double p = -0x1.ac9585a44fe29p-31;
  p = ::fma(p, t, 0x1.d76af6ca49787p-27);
  p = ::fma(p, t, -0x1.5c131500d3f88p-23);
  p = ::fma(p, t, 0x1.b981d78881a5dp-20);
  p = ::fma(p, t, -0x1.f4ca838adb73bp-17);
  p = ::fma(p, t, 0x1.f9a2be4f731a1p-14);
  p = ::fma(p, t, -0x1.c02db0665e53dp-11);
  p = ::fma(p, t, 0x1.565bccfa44156p-8);
  p = ::fma(p, t, -0x1.b82ce31203772p-6);
  p = ::fma(p, t, 0x1.ce2f21a040f66p-4);
  p = ::fma(p, t, -0x1.812746b0379c1p-2);
  p = ::fma(p, t, 0x1.20dd750429b6dp+0);
  const double small = x * p;
  // NaN stays NaN through the clamp (both comparisons are false).
  const double c = a > 6.0 ? 6.0 : (a < 1.0 ? 1.0 : a);
  const double u = (c - 3.5) * 0.4;
  double q = 0x1.d3c7bd2d2e41ap-29;
  q = ::fma(q, u, -0x1.1c6ec36270ca0p-27);
  q = ::fma(q, u, -0x1.44993686b4758p-28);
  q = ::fma(q, u, 0x1.a8fd939bed25dp-27);
  q = ::fma(q, u, 0x1.9e8c06432b6fep-25);
  q = ::fma(q, u, -0x1.e85cd5506e228p-24);
  q = ::fma(q, u, 0x1.de9782507a5cbp-24);
  q = ::fma(q, u, -0x1.0202f041d1bf9p-22);
  q = ::fma(q, u, 0x1.7a28a1a45dd69p-21);
  q = ::fma(q, u, -0x1.9ba6b6d06ebcbp-20);
  q = ::fma(q, u, 0x1.a3e9a5a8966e5p-19);
  q = ::fma(q, u, -0x1.bac3fc64de733p-18);
  q = ::fma(q, u, 0x1.d00596cf21d46p-17);
  q = ::fma(q, u, -0x1.dc67620a32826p-16);
  q = ::fma(q, u, 0x1.e1a8b70a9f098p-15);
  q = ::fma(q, u, -0x1.dffb1d9868fa7p-14);
  q = ::fma(q, u, 0x1.d6dfe313f39ffp-13);
  q = ::fma(q, u, -0x1.c66a004826238p-12);
  q = ::fma(q, u, 0x1.af1938baed377p-11);
  q = ::fma(q, u, -0x1.91bd602bb6908p-10);
  q = ::fma(q, u, 0x1.6f7004a4f648ep-9);
  q = ::fma(q, u, -0x1.4984fb8fbe174p-8);
  q = ::fma(q, u, 0x1.2174216a5e87ap-7);
  q = ::fma(q, u, -0x1.f1802347240c3p-7);
  q = ::fma(q, u, 0x1.a1b820b73afa2p-6);
  q = ::fma(q, u, -0x1.56274da1063e4p-5);
  q = ::fma(q, u, 0x1.10eccd7003675p-4);
  q = ::fma(q, u, -0x1.a72747a5e6b46p-4);
  q = ::fma(q, u, 0x1.3e0a99a0ee914p-3);
  const double large = 1.0 - math::exp(-(c * c)) * q;
  return a < 1.0 ? small : (x < 0 ? -large : large);
}

//===----------------------------------------------------------------------===//
// The other scalar semantics of sharc ops (docs/ir.md), one definition each
//===----------------------------------------------------------------------===//

SHARC_MATH_HD double relu(double x) { return x > 0 || x != x ? x : 0.0; }
SHARC_MATH_HD double sigmoid(double x) { return 1 / (1 + math::exp(-x)); }
/// (The GELUs are forced inline, as erf is: kernel loops that call them only
/// vectorize with their bodies inlined.)
SHARC_MATH_HD_INLINE double geluErf(double x) {
  return 0.5 * x * (1 + math::erf(x / ::sqrt(2.0)));
}
SHARC_MATH_HD_INLINE double geluTanh(double x) {
  return 0.5 * x *
         (1 + math::tanh(::sqrt(2 / 3.14159265358979323846) *
                         (x + 0.044715 * x * x * x)));
}
/// The sum in double of value(c) for c in [0, n), in the order the evaluator
/// and every generated kernel add a row: kSumLanes interleaved partial sums
/// (lane k adds the values at c = k, k + 16, ... in turn, over the first
/// n - n % 16 values), the lanes added in order, then the last n % 16 values
/// in order.  The lanes are independent, so the loop vectorizes; the order is
/// fixed, so the result has the same bits everywhere.  Below 16 values it is
/// the plain in-order sum.
constexpr int kSumLanes = 16;
template <typename Value> SHARC_MATH_HD double laneSum(int64_t n, Value value) {
  double lane[kSumLanes] = {};
  const int64_t whole = n - n % kSumLanes;
  for (int64_t c = 0; c < whole; c += kSumLanes)
    for (int k = 0; k < kSumLanes; ++k)
      lane[k] += value(c + k);
  double sum = 0;
  for (int k = 0; k < kSumLanes; ++k)
    sum += lane[k];
  for (int64_t c = whole; c < n; ++c)
    sum += value(c);
  return sum;
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
