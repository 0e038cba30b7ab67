//===- RandomTest.cpp - runtime/Random.h ----------------------------------===//
//
// Philox-4x32-10 against Random123's published known-answer vectors (the
// reference implementation of Salmon et al.), and the keep masks that
// sharc.dropout_mask builds from it: their keep rate (binomial bounds), and
// the independence of masks of different streams, steps, rows and seeds.
//
//===----------------------------------------------------------------------===//

#include "runtime/Random.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>

namespace {

using sharc::random::dropoutKeepBits;
using sharc::random::dropoutThreshold;
using sharc::random::philox4x32;

TEST(RandomTest, PhiloxMatchesRandom123KnownAnswers) {
  struct Vector {
    std::array<uint32_t, 4> counter;
    std::array<uint32_t, 2> key;
    std::array<uint32_t, 4> expected;
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector &v : vectors) {
    uint32_t out[4];
    philox4x32(v.counter[0], v.counter[1], v.counter[2], v.counter[3], v.key[0],
               v.key[1], out);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out[i], v.expected[i]) << "word " << i;
  }
}

/// Keep bits of positions [0, 4 groups) of a row.
int64_t keptIn(uint64_t seed, uint32_t stream, uint64_t step, uint64_t row,
               int64_t groups, uint64_t threshold) {
  int64_t kept = 0;
  for (int64_t g = 0; g < groups; ++g)
    kept += __builtin_popcount(
        dropoutKeepBits(seed, stream, step, row, g, threshold));
  return kept;
}

TEST(RandomTest, KeepRateIsOneMinusTheRatio) {
  // 2^20 positions: the kept fraction lies within 6 standard deviations of
  // 1 - ratio (a false failure has probability below 1e-8).
  const int64_t groups = 1 << 18, n = 4 * groups;
  for (double ratio : {0.0, 0.1, 0.25, 0.5, 0.9}) {
    double p = 1 - ratio;
    int64_t kept = keptIn(42, 3, 7, 11, groups, dropoutThreshold(ratio));
    double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(double(kept), n * p, 6 * sigma + 0.5) << "ratio " << ratio;
  }
  EXPECT_EQ(dropoutThreshold(0.0), 0u);
  EXPECT_EQ(dropoutThreshold(0.5), uint64_t(1) << 31);
}

TEST(RandomTest, MasksOfOtherKeysAreIndependent) {
  // Two independent masks of keep rate 1/2 agree on half of the positions;
  // a mask agrees with itself everywhere.
  const int64_t groups = 1 << 16, n = 4 * groups;
  uint64_t threshold = dropoutThreshold(0.5);
  auto agreement = [&](auto first, auto second) {
    int64_t same = 0;
    for (int64_t g = 0; g < groups; ++g)
      same += __builtin_popcount(~(first(g) ^ second(g)) & 0xFu);
    return same;
  };
  auto base = [&](int64_t g) {
    return dropoutKeepBits(1, 0, 5, 9, g, threshold);
  };
  EXPECT_EQ(agreement(base, base), n);
  double sigma = std::sqrt(n * 0.25);
  auto expectIndependent = [&](auto other, const char *what) {
    EXPECT_NEAR(double(agreement(base, other)), n / 2.0, 6 * sigma) << what;
  };
  expectIndependent(
      [&](int64_t g) { return dropoutKeepBits(2, 0, 5, 9, g, threshold); },
      "another seed");
  expectIndependent(
      [&](int64_t g) {
        return dropoutKeepBits(uint64_t(1) << 32 | 1, 0, 5, 9, g, threshold);
      },
      "the seed's high word");
  expectIndependent(
      [&](int64_t g) { return dropoutKeepBits(1, 1, 5, 9, g, threshold); },
      "another stream");
  expectIndependent(
      [&](int64_t g) { return dropoutKeepBits(1, 0, 6, 9, g, threshold); },
      "another step");
  expectIndependent(
      [&](int64_t g) { return dropoutKeepBits(1, 0, 5, 10, g, threshold); },
      "another row");
  expectIndependent(
      [&](int64_t g) {
        return dropoutKeepBits(1, 0, 5, 9, g + groups, threshold);
      },
      "other positions");
}

} // namespace
