//===- MathTest.cpp - runtime/Math.h against libm -------------------------===//
//
// sharc::math::exp and tanh are what the evaluator and every kernel compute;
// libm is the independent reference.  Relative error bounds are in units of
// double epsilon; special values must match IEEE exactly.
//
//===----------------------------------------------------------------------===//

#include "runtime/Math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace {

constexpr double kEpsilon = std::numeric_limits<double>::epsilon();

/// How many doubles lie between a and b (0 when equal; signed zeros equal).
int64_t ulpDistance(double a, double b) {
  auto ordered = [](double x) {
    int64_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits < 0 ? std::numeric_limits<int64_t>::min() - bits : bits;
  };
  int64_t ia = ordered(a), ib = ordered(b);
  return ia > ib ? ia - ib : ib - ia;
}

/// Arguments over the whole useful range, near zero and at every scale.
double sample(std::mt19937_64 &rng, int kind) {
  switch (kind % 4) {
  case 0:
    return std::uniform_real_distribution<double>(-745, 709.7)(rng);
  case 1:
    return std::uniform_real_distribution<double>(-20, 20)(rng);
  case 2:
    return std::uniform_real_distribution<double>(-1, 1)(rng);
  default:
    return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng),
                      -static_cast<int>(rng() % 60));
  }
}

TEST(Math, ExpWithinOneUlpOfLibm) {
  std::mt19937_64 rng(20261130);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    double x = sample(rng, i);
    double expected = std::exp(x);
    if (expected < std::numeric_limits<double>::min())
      continue; // Subnormal results: checked below.
    worst =
        std::max(worst, std::fabs(sharc::math::exp(x) - expected) / expected);
  }
  EXPECT_LE(worst, 1.5 * kEpsilon);
}

TEST(Math, TanhWithinThreeUlpOfLibm) {
  std::mt19937_64 rng(7);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    double x = sample(rng, i);
    double expected = std::tanh(x);
    if (expected == 0)
      continue;
    worst = std::max(worst, std::fabs(sharc::math::tanh(x) - expected) /
                                std::fabs(expected));
  }
  EXPECT_LE(worst, 3.5 * kEpsilon);
}

TEST(Math, ErfWithinTwoUlpOfLibm) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> wide(-7, 7);
  std::uniform_real_distribution<double> exponent(-300, 0);
  int64_t worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    double x = i % 4 ? wide(rng)
                     : std::copysign(std::pow(10.0, exponent(rng)), wide(rng));
    int64_t distance = ulpDistance(sharc::math::erf(x), std::erf(x));
    worst = std::max(worst, distance);
    ASSERT_LE(distance, 2) << "erf(" << x << ")";
  }
  // Around the switch between the two fits and at the end of the second.
  for (double x :
       {1.0, std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0), 5.9, 6.0, 6.5})
    EXPECT_LE(ulpDistance(sharc::math::erf(x), std::erf(x)), 2) << x;
}

TEST(Math, RoundsToTheSameFloatAsLibm) {
  // f32 ops round the double result once: over f32-typical arguments the
  // rounded values must agree with libm's.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> range(-12, 12);
  int mismatches = 0;
  for (int i = 0; i < 1000000; ++i) {
    double x = static_cast<float>(range(rng));
    mismatches += static_cast<float>(sharc::math::exp(x)) !=
                  static_cast<float>(std::exp(x));
    mismatches += static_cast<float>(sharc::math::tanh(x)) !=
                  static_cast<float>(std::tanh(x));
    mismatches += static_cast<float>(sharc::math::erf(x)) !=
                  static_cast<float>(std::erf(x));
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Math, SpecialValues) {
  double inf = std::numeric_limits<double>::infinity();
  double nan = std::numeric_limits<double>::quiet_NaN();
  // Exact: zeros, infinities, overflow, underflow to 0, saturation.
  for (double x :
       {0.0, -0.0, 709.79, -745.2, -746.0, 1e-310, 1e308, -1e308, inf, -inf}) {
    EXPECT_EQ(sharc::math::exp(x), std::exp(x)) << "exp(" << x << ")";
    EXPECT_EQ(sharc::math::tanh(x), std::tanh(x)) << "tanh(" << x << ")";
  }
  // Near the ends of the range (largest finite, subnormal results).
  for (double x : {709.78, -708.5, -740.0})
    EXPECT_NEAR(sharc::math::exp(x) / std::exp(x), 1.0, 1e-12) << x;
  EXPECT_EQ(sharc::math::exp(-745.1), std::exp(-745.1)); // smallest subnormal
  EXPECT_TRUE(std::isnan(sharc::math::exp(nan)));
  EXPECT_TRUE(std::isnan(sharc::math::tanh(nan)));
  EXPECT_TRUE(std::signbit(sharc::math::tanh(-0.0)));
  for (double x : {0.0, -0.0, 1e-310, -1e-310, 1e300, -1e300, inf, -inf}) {
    EXPECT_EQ(sharc::math::erf(x), std::erf(x)) << "erf(" << x << ")";
    EXPECT_EQ(std::signbit(sharc::math::erf(x)), std::signbit(x)) << x;
  }
  EXPECT_TRUE(std::isnan(sharc::math::erf(nan)));
}

} // namespace
