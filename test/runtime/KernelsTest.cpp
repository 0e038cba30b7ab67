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
