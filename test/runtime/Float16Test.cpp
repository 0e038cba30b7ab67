//===- Float16Test.cpp - 16-bit conversions: hardware against software ----===//
//
// Float16.h's branch-free conversions are the definition (the evaluator
// rounds the same way); the CPU's F16C instructions, IEEE conversions done
// in hardware, are an independent reference for the f16 ones, and the
// batched widen16/narrow16 (which use them) must give the same bits.  Every
// half is widened; narrowing is checked on every half, every midpoint
// between neighbouring halves and the floats one ulp either side of those,
// the overflow threshold, subnormals, infinities and NaNs (with and without
// the quiet bit), which covers every rounding decision.
//===----------------------------------------------------------------------===//

#include "runtime/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace sharc::rt;

namespace {

/// Floats at which rounding to `type` can change: each 16-bit value, the
/// midpoints to its neighbours, and one f32 ulp either side of both.
std::vector<float> roundingBoundaries(DType type) {
  std::vector<float> values;
  auto widen = [&](uint32_t bits) {
    return type == DType::f16 ? halfToFloat(uint16_t(bits))
                              : bfloat16ToFloat(uint16_t(bits));
  };
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float x = widen(bits);
    if (std::isnan(x))
      continue;
    float next = widen((bits + 1) & 0xffff);
    float points[] = {x, std::isfinite(next) && !std::isnan(next) &&
                                 std::signbit(next) == std::signbit(x)
                             ? float((double(x) + double(next)) / 2)
                             : x};
    for (float p : points) {
      values.push_back(p);
      values.push_back(std::nextafter(p, INFINITY));
      values.push_back(std::nextafter(p, -INFINITY));
    }
  }
  // NaNs: quiet, signalling, payload only in the bits that narrowing drops.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0xffc01234u,
                       0x7f801fffu, 0xff800001u})
    values.push_back(bitsFloat(nan));
  values.push_back(65520.0f);
  values.push_back(std::nextafter(65520.0f, 0.0f));
  values.push_back(0x1p-126f);
  values.push_back(0x1p-149f);
  values.push_back(-0x1p-149f);
  return values;
}

TEST(Float16, BatchedWideningIsExact) {
  for (DType type : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> all(0x10000);
    for (uint32_t bits = 0; bits < 0x10000; ++bits)
      all[bits] = uint16_t(bits);
    std::vector<float> wide(all.size());
    widen16(type, all.data(), int64_t(all.size()), wide.data());
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      float expected = type == DType::f16 ? halfToFloat(uint16_t(bits))
                                          : bfloat16ToFloat(uint16_t(bits));
      ASSERT_EQ(floatBits(wide[bits]), floatBits(expected))
          << dtypeName(type) << " bits " << bits;
    }
  }
}

TEST(Float16, BatchedNarrowingRoundsAsScalar) {
  for (DType type : {DType::f16, DType::bf16}) {
    std::vector<float> values = roundingBoundaries(type);
    std::vector<uint16_t> narrow(values.size());
    narrow16(type, values.data(), int64_t(values.size()), narrow.data());
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t expected = type == DType::f16 ? floatToHalf(values[i])
                                             : floatToBFloat16(values[i]);
      ASSERT_EQ(narrow[i], expected) << dtypeName(type) << " float bits "
                                     << std::hex << floatBits(values[i]);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) float scalarWiden(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t scalarNarrow(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/// halfToFloat/floatToHalf against the CPU's own conversions.
TEST(Float16, HalfConversionsMatchF16c) {
  if (!__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "this CPU has no F16C to compare with";
  for (uint32_t bits = 0; bits < 0x10000; ++bits)
    ASSERT_EQ(floatBits(scalarWiden(uint16_t(bits))),
              floatBits(halfToFloat(uint16_t(bits))))
        << "bits " << bits;
  for (float f : roundingBoundaries(DType::f16))
    ASSERT_EQ(scalarNarrow(f), floatToHalf(f))
        << "float bits " << std::hex << floatBits(f);
}
#endif

/// roundToOddFloat against its definition, computed another way: the float
/// toward zero (by nextafter from the nearest one), odd when inexact.
TEST(Float16, RoundToOddFloat) {
  auto reference = [](double x) {
    float f = static_cast<float>(x);
    if (static_cast<double>(f) == x || std::isnan(x))
      return f;
    if (std::fabs(static_cast<double>(f)) > std::fabs(x))
      f = std::nextafter(f, 0.0f);
    return bitsFloat(floatBits(f) | 1u);
  };
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                -1.0,
                                1e-300,
                                -1e-300,
                                1e300,
                                -1e300,
                                INFINITY,
                                -INFINITY,
                                0x1p-149,
                                0x1.8p-150,
                                3.4028235677973366e38,
                                3.4028234663852886e38};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    uint64_t bits = rng();
    double x;
    std::memcpy(&x, &bits, sizeof(x));
    values.push_back(x);
    // Doubles near floats, where the direction of rounding matters.
    float near = static_cast<float>(x);
    if (std::isfinite(near))
      for (double delta : {0.0, 0x1p-30, -0x1p-30, 0x1p-24, -0x1p-24})
        values.push_back(static_cast<double>(near) * (1 + delta));
  }
  for (double x : values) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(roundToOddFloat(x)));
      continue;
    }
    ASSERT_EQ(floatBits(roundToOddFloat(x)), floatBits(reference(x)))
        << std::hexfloat << x;
  }
}

/// Lengths that are not multiples of the vector width.
TEST(Float16, BatchedConversionsHandleTails) {
  for (DType type : {DType::f16, DType::bf16})
    for (int64_t count : {0, 1, 7, 9, 17}) {
      std::vector<float> values(count), back(count);
      std::vector<uint16_t> narrow(count + 1, 0xabcd);
      for (int64_t i = 0; i < count; ++i)
        values[i] = 0.3f * float(i) - 1.1f;
      narrow16(type, values.data(), count, narrow.data());
      EXPECT_EQ(narrow[count], 0xabcd) << "wrote past the end";
      widen16(type, narrow.data(), count, back.data());
      for (int64_t i = 0; i < count; ++i) {
        float expected = type == DType::f16
                             ? halfToFloat(floatToHalf(values[i]))
                             : bfloat16ToFloat(floatToBFloat16(values[i]));
        EXPECT_EQ(back[i], expected) << dtypeName(type) << " " << i;
      }
    }
}

} // namespace
