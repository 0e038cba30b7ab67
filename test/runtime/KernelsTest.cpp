//===- KernelsTest.cpp - Helpers of the generated kernels -----------------===//
//
// sharc::kern::rowMax against the in-order loop the evaluator runs
// (`max = max < v ? v : max` from -inf), bit for bit: random rows of every
// length from 0 to 70 mixing NaNs, infinities and zeros of both signs.
//
//===----------------------------------------------------------------------===//

#include "runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

uint64_t bitsOf(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

TEST(Kernels, RowMaxIsTheInOrderMaximum) {
  std::mt19937 rng(8);
  const double specials[] = {
      0.0,  -0.0, std::numeric_limits<double>::quiet_NaN(), HUGE_VAL, -HUGE_VAL,
      -1.5, 2.5};
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_real_distribution<double> value(-3, 3);
  for (int64_t n = 0; n <= 70; ++n)
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<double> row(n);
      for (double &x : row) {
        int k = pick(rng);
        x = k < 7 ? specials[k] : value(rng);
        // Three trials in four have no positive value, so that zero (of
        // either sign) is often the maximum.
        if (trial % 4 && (x > 0 || std::isnan(x)))
          x = k % 2 ? 0.0 : -0.0;
      }
      double expected = -HUGE_VAL;
      for (double x : row)
        expected = expected < x ? x : expected;
      double got =
          sharc::kern::rowMax(n, [&](int64_t c) { return row[size_t(c)]; });
      ASSERT_EQ(bitsOf(got), bitsOf(expected))
          << "n " << n << " trial " << trial;
    }
}

} // namespace

namespace {

/// Round-to-nearest-even of doubles near the midpoint of two adjacent 16-bit
/// values lo < hi (their bits given), the reference known by construction:
/// just above the midpoint rounds up, just below down, the midpoint itself
/// to the even one.  Rounding through float first (double rounding) gets
/// the points just off the midpoint wrong, as they are within float's
/// precision of it.
template <typename T>
void checkMidpoints(uint16_t loBits, float (*toFloat)(uint16_t)) {
  uint16_t hiBits = loBits + 1;
  double lo = toFloat(loBits), hi = toFloat(hiBits);
  if (!std::isfinite(lo) || !std::isfinite(hi))
    return;
  double mid = (lo + hi) / 2; // exact: two adjacent 16-bit values
  double off = std::fabs(mid) * 0x1p-40 + 0x1p-160;
  uint16_t even = (loBits & 1) ? hiBits : loBits;
  EXPECT_EQ(T(mid + off).bits, hiBits) << mid;
  EXPECT_EQ(T(mid - off).bits, loBits) << mid;
  EXPECT_EQ(T(mid).bits, even) << mid;
  // From float: the midpoint and its neighbours in float.
  float midFloat = static_cast<float>(mid);
  if (static_cast<double>(midFloat) == mid) {
    EXPECT_EQ(T(std::nextafter(midFloat, HUGE_VALF)).bits, hiBits) << mid;
    EXPECT_EQ(T(std::nextafter(midFloat, -HUGE_VALF)).bits, loBits) << mid;
    EXPECT_EQ(T(midFloat).bits, even) << mid;
  }
}

TEST(Kernels, HalfRoundingIsSingleRounding) {
  // Every positive finite f16 and bf16 value and its upper neighbour (the
  // negative ones mirror them through the sign bit).
  for (uint32_t bits = 0; bits < 0x7bff; ++bits)
    checkMidpoints<sharc::kern::f16>(uint16_t(bits), sharc::rt::halfToFloat);
  for (uint32_t bits = 0; bits < 0x7f7f; ++bits)
    checkMidpoints<sharc::kern::bf16>(uint16_t(bits),
                                      sharc::rt::bfloat16ToFloat);
  // Random doubles against GCC's _Float16 conversion, one rounding from
  // double (libgcc), whatever the magnitude: subnormals, overflow, NaN.
  std::mt19937_64 rng(16);
  std::uniform_real_distribution<double> exponent(-30, 17);
  std::uniform_real_distribution<double> mantissa(1, 2);
  for (int trial = 0; trial < 200000; ++trial) {
    double x = mantissa(rng) * std::exp2(std::floor(exponent(rng)));
    if (trial % 2)
      x = -x;
    _Float16 want = static_cast<_Float16>(x);
    uint16_t wantBits;
    std::memcpy(&wantBits, &want, sizeof(wantBits));
    ASSERT_EQ(sharc::kern::f16(x).bits, wantBits) << x;
  }
  EXPECT_EQ(sharc::kern::f16(1e6).bits, 0x7c00);
  EXPECT_EQ(sharc::kern::bf16(-1e39).bits, 0xff80);
  EXPECT_TRUE(std::isnan(float(sharc::kern::f16(std::nan("")))));
  EXPECT_TRUE(std::isnan(float(sharc::kern::bf16(std::nan("")))));
}

/// gather16 reads the element it is asked for, from buffers that start on
/// either half of a 4-byte word, at every index up to the last of an odd
/// count (whose word runs past the end).
TEST(Kernels, Gather16ReadsTheElement) {
  alignas(4) uint16_t storage[20];
  for (int i = 0; i < 20; ++i)
    storage[i] = uint16_t(0x3c00 + 17 * i);
  for (int start : {0, 1})
    for (int count : {1, 7, 19 - start}) {
      const auto *p =
          reinterpret_cast<const sharc::kern::bf16 *>(storage + start);
      const auto *h =
          reinterpret_cast<const sharc::kern::f16 *>(storage + start);
      for (int index = 0; index < count; ++index) {
        EXPECT_EQ(sharc::kern::gather16(p, index).bits, storage[start + index])
            << "start " << start << " index " << index;
        EXPECT_EQ(sharc::kern::gather16(h, index).bits, storage[start + index]);
      }
    }
}

} // namespace
