//===- TensorTest.cpp - rounding, conversions and I/O of host tensors -----===//
//
// Expected values come from the IEEE formats (bit patterns decoded by hand
// below), from `_Float16` casts and from llvm::APFloat, never from the code
// under test.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ir/SharcOps.h"
#include "runtime/Npy.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/APFloat.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

/// The value of IEEE binary16 `bits`: 1 sign, 5 exponent (bias 15) and 10
/// mantissa bits.
double halfValue(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return bits & 0x8000 ? -magnitude : magnitude;
}

/// The value of bfloat16 `bits`: 1 sign, 8 exponent (bias 127) and 7
/// mantissa bits.
double bfloatValue(uint16_t bits) {
  int exponent = (bits >> 7) & 0xff, mantissa = bits & 0x7f;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(mantissa, -133);
  else if (exponent == 255)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(128 + mantissa, exponent - 134);
  return bits & 0x8000 ? -magnitude : magnitude;
}

/// Converts with llvm::APFloat (round to nearest, ties to even).
double apRound(const llvm::fltSemantics &semantics, double value) {
  llvm::APFloat x(value);
  bool losesInfo;
  x.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  x.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &losesInfo);
  return x.convertToDouble();
}

/// Same value and sign (NaN matches NaN).
bool sameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

struct Pattern {
  double input;
  uint16_t bits;
};

TEST(Rounding, HalfKnownPatterns) {
  const Pattern patterns[] = {
      {1.0, 0x3C00},
      {1 + 0x1p-11, 0x3C00},           // tie: even mantissa 0
      {1 + 3 * 0x1p-11, 0x3C02},       // tie: even mantissa 2
      {1 + 0x1p-11 + 0x1p-40, 0x3C01}, // just above the tie (one rounding)
      {0.1, 0x2E66},
      {-2.0, 0xC000},
      {65504.0, 0x7BFF},  // largest finite
      {65519.99, 0x7BFF}, // below the tie with 2^16
      {65520.0, 0x7C00},  // tie rounds to even = overflow
      {1e6, 0x7C00},
      {-65520.0, 0xFC00},
      {0x1p-14, 0x0400},          // smallest normal
      {1023.5 * 0x1p-24, 0x0400}, // tie between largest subnormal and 2^-14
      {0x1p-24, 0x0001},          // smallest subnormal
      {0x1p-25, 0x0000},          // tie with zero
      {0x1p-25 + 0x1p-50, 0x0001},
      {3 * 0x1p-25, 0x0002},
      {-0.0, 0x8000},
      {-0x1p-26, 0x8000},
  };
  for (const Pattern &p : patterns)
    EXPECT_TRUE(sameValue(roundTo(DType::f16, p.input), halfValue(p.bits)))
        << "f16(" << p.input << ") = " << roundTo(DType::f16, p.input)
        << ", expected bits 0x" << std::hex << p.bits;
  EXPECT_TRUE(std::isnan(roundTo(DType::f16, NAN)));
  EXPECT_EQ(roundTo(DType::f16, -INFINITY), -INFINITY);
}

TEST(Rounding, BFloatKnownPatterns) {
  const Pattern patterns[] = {
      {1.0, 0x3F80},
      {1 + 0x1p-8, 0x3F80},           // tie: even mantissa 0
      {1 + 3 * 0x1p-8, 0x3F82},       // tie: even mantissa 2
      {1 + 0x1p-8 + 0x1p-30, 0x3F81}, // above the tie; f32 would lose 2^-30
      {0.1, 0x3DCD},
      {M_PI, 0x4049},
      {-2.0, 0xC000},
      {0x1.fep127, 0x7F7F},      // largest finite
      {0x1.fefffffp127, 0x7F7F}, // below the tie with 2^128
      {0x1.ffp127, 0x7F80},      // tie rounds to even = overflow
      {1e300, 0x7F80},
      {-0x1.ffp127, 0xFF80},
      {0x1p-126, 0x0080},                    // smallest normal
      {0x1p-126 * (1 + 0x1p-8), 0x0080},     // tie in the first binade
      {0x1p-126 * (1 + 3 * 0x1p-8), 0x0082}, // tie, rounds up to even
      {127.5 * 0x1p-133, 0x0080}, // tie: largest subnormal vs smallest normal
      {0x1p-133, 0x0001},         // smallest subnormal
      {0x1p-134, 0x0000},         // tie with zero
      {0x1p-134 + 0x1p-160, 0x0001},
      {3 * 0x1p-134, 0x0002},
      {5 * 0x1p-134, 0x0002},
      {1e-45, 0x0000},
      {-0.0, 0x8000},
  };
  for (const Pattern &p : patterns)
    EXPECT_TRUE(sameValue(roundTo(DType::bf16, p.input), bfloatValue(p.bits)))
        << "bf16(" << p.input << ") = " << roundTo(DType::bf16, p.input)
        << ", expected bits 0x" << std::hex << p.bits;
  EXPECT_TRUE(std::isnan(roundTo(DType::bf16, NAN)));
  EXPECT_EQ(roundTo(DType::bf16, INFINITY), INFINITY);
}

/// Random doubles with exponents in [minExp, maxExp], plus values next to
/// the ties of a format with `mantissaBits` stored bits.
std::vector<double> sampleDoubles(int minExp, int maxExp, int mantissaBits,
                                  unsigned seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> exponent(minExp, maxExp);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::vector<double> values;
  for (int i = 0; i < 100000; ++i) {
    double v = std::ldexp(mantissa(gen), exponent(gen));
    if (i % 2)
      v = -v;
    if (i % 4 == 0) {
      // Snap to a tie of the target format, then nudge by 0 or 1 ulp of
      // double either way.
      int e = std::ilogb(v);
      double quantum = std::ldexp(1.0, e - mantissaBits - 1);
      v = std::round(v / quantum) * quantum;
      v = std::nextafter(v, (i / 4) % 3 == 0   ? INFINITY
                            : (i / 4) % 3 == 1 ? -INFINITY
                                               : v);
    }
    values.push_back(v);
  }
  return values;
}

TEST(Rounding, HalfMatchesFloat16CastAndAPFloat) {
  for (double v : sampleDoubles(-30, 17, 10, 1)) {
    double expected = static_cast<double>(static_cast<_Float16>(v));
    ASSERT_TRUE(sameValue(roundTo(DType::f16, v), expected)) << v;
    ASSERT_TRUE(sameValue(apRound(llvm::APFloat::IEEEhalf(), v), expected))
        << v;
  }
}

TEST(Rounding, BFloatMatchesAPFloat) {
  for (double v : sampleDoubles(-140, 130, 7, 2))
    ASSERT_TRUE(
        sameValue(roundTo(DType::bf16, v), apRound(llvm::APFloat::BFloat(), v)))
        << std::hexfloat << v;
}

TEST(Rounding, FloatMatchesAPFloat) {
  for (double v : sampleDoubles(-160, 130, 23, 3))
    ASSERT_TRUE(sameValue(roundTo(DType::f32, v),
                          apRound(llvm::APFloat::IEEEsingle(), v)))
        << std::hexfloat << v;
  EXPECT_EQ(roundTo(DType::f64, 0.1), 0.1);
}

TEST(Rounding, IntegerWrap) {
  EXPECT_EQ(wrapTo(DType::i32, int64_t(1) << 31), -(int64_t(1) << 31));
  EXPECT_EQ(wrapTo(DType::i32, (int64_t(1) << 32) + 5), 5);
  EXPECT_EQ(wrapTo(DType::i32, -1), -1);
  EXPECT_EQ(wrapTo(DType::i64, int64_t(1) << 40), int64_t(1) << 40);
  EXPECT_EQ(wrapTo(DType::i1, 2), 1);
  EXPECT_EQ(wrapTo(DType::i1, 0), 0);
}

TEST(Tensor, SetAndGet) {
  Tensor i32(DType::i32, {5});
  i32.setDouble(0, 3.9);
  i32.setDouble(1, -3.9);
  i32.setDouble(2, NAN);
  i32.setDouble(3, 4294967301.0); // 2^32 + 5 wraps to 5
  i32.setDouble(4, -1e30);        // saturates to INT64_MIN, wraps to 0
  EXPECT_EQ(i32.ints()[0], 3);
  EXPECT_EQ(i32.ints()[1], -3);
  EXPECT_EQ(i32.ints()[2], 0);
  EXPECT_EQ(i32.ints()[3], 5);
  EXPECT_EQ(i32.ints()[4], 0);
  Tensor half(DType::f16, {1});
  half.setDouble(0, 1 + 0x1p-11);
  EXPECT_EQ(half.getDouble(0), 1.0);
  EXPECT_EQ(half.getInt(0), 1);
  Tensor flag(DType::i1, {2});
  flag.setDouble(0, 0.5);
  flag.setDouble(1, -0.0);
  EXPECT_EQ(flag.ints()[0], 1);
  EXPECT_EQ(flag.ints()[1], 0);
  Tensor f(DType::f32, {1});
  f.setDouble(0, -7.9);
  EXPECT_EQ(f.getInt(0), -7);
}

TEST(Tensor, ConvertTo) {
  Tensor x = makeTensor(DType::f64, {5}, {-2.7, 2.7, 0.0, 1e10, 1 + 0x1p-11});
  Tensor asI32 = x.convertTo(DType::i32);
  EXPECT_EQ(asI32.dtype(), DType::i32);
  EXPECT_EQ(std::vector<int64_t>(asI32.ints().begin(), asI32.ints().end()),
            (std::vector<int64_t>{-2, 2, 0, 1410065408, 1}));
  Tensor asI1 = x.convertTo(DType::i1);
  EXPECT_EQ(std::vector<int64_t>(asI1.ints().begin(), asI1.ints().end()),
            (std::vector<int64_t>{1, 1, 0, 1, 1}));
  Tensor asF16 = x.convertTo(DType::f16);
  EXPECT_EQ(asF16.getDouble(4), 1.0);
  EXPECT_EQ(asF16.getDouble(3), INFINITY);
  EXPECT_EQ(asF16.getDouble(0), halfValue(0xC166)); // -2.69921875
  Tensor back = asI1.convertTo(DType::f32);
  EXPECT_EQ(back.getDouble(2), 0.0);
  EXPECT_EQ(back.getDouble(3), 1.0);

  // Integers convert with a single rounding, even beyond 2^53.
  Tensor big(DType::i64, {2});
  big.ints()[0] = (int64_t(1) << 60) + (int64_t(1) << 52) + 1;
  big.ints()[1] = (int64_t(1) << 60) + (int64_t(1) << 36) + 1;
  EXPECT_EQ(big.convertTo(DType::bf16).getDouble(0), 0x1p60 + 0x1p53);
  EXPECT_EQ(big.convertTo(DType::f32).getDouble(1), 0x1p60 + 0x1p37);
  EXPECT_EQ(big.convertTo(DType::i32).ints()[0], 1);
}

class TensorAttrTest : public IRTest {};

TEST_F(TensorAttrTest, DenseRoundTripEveryDType) {
  struct Case {
    const char *text;
    std::vector<double> expected;
  };
  const Case cases[] = {
      {"dense<[[1.5, -2.25], [3.0, 0.1]]> : tensor<2x2xf64>",
       {1.5, -2.25, 3.0, 0.1}},
      {"dense<[[1.5, -2.25], [3.0, 0.1]]> : tensor<2x2xf32>",
       {1.5, -2.25, 3.0, static_cast<double>(0.1f)}},
      {"dense<[[1.5, -2.25], [3.0, 0.1]]> : tensor<2x2xf16>",
       {1.5, -2.25, 3.0, halfValue(0x2E66)}},
      {"dense<[[1.5, -2.25], [3.0, 0.1]]> : tensor<2x2xbf16>",
       {1.5, -2.25, 3.0, bfloatValue(0x3DCD)}},
      {"dense<[[1, -2], [3, 9000000000]]> : tensor<2x2xi64>",
       {1, -2, 3, 9000000000.0}},
      {"dense<[[1, -2], [3, 2147483647]]> : tensor<2x2xi32>",
       {1, -2, 3, 2147483647}},
      {"dense<[[true, false], [false, true]]> : tensor<2x2xi1>", {1, 0, 0, 1}},
      {"dense<0.1> : tensor<3xbf16>",
       {0.10009765625, 0.10009765625, 0.10009765625}},
      {"dense<-7> : tensor<2x1xi32>", {-7, -7}},
      {"dense<true> : tensor<3xi1>", {1, 1, 1}},
      {"dense<2.5> : tensor<f16>", {2.5}},
  };
  for (const Case &c : cases) {
    auto attr =
        dyn_cast_or_null<ElementsAttr>(parseAttribute(c.text, &context));
    ASSERT_TRUE(attr) << c.text;
    std::optional<Tensor> t = Tensor::fromAttr(attr);
    ASSERT_TRUE(t) << c.text;
    EXPECT_EQ(t->mlirTensorType(&context), attr.getType()) << c.text;
    expectClose(*t, c.expected, 0, c.text);
    DenseElementsAttr back = t->toAttr(&context);
    EXPECT_EQ(back.getType(), attr.getType()) << c.text;
    EXPECT_EQ(Tensor::fromAttr(back), t) << c.text;
    if (!cast<DenseElementsAttr>(attr).isSplat()) {
      EXPECT_EQ(back, attr) << c.text;
    }
  }
}

TEST_F(TensorAttrTest, DenseResource) {
  // 1.0f, 2.0f, -3.0f little-endian, after the 4-byte alignment header.
  const char *text = R"mlir(
    func.func @main() -> tensor<3xf32> {
      %0 = sharc.constant dense_resource<blob> : tensor<3xf32>
      return %0 : tensor<3xf32>
    }
    {-#
      dialect_resources: {
        builtin: {
          blob: "0x040000000000803F00000040000040C0"
        }
      }
    #-}
  )mlir";
  std::vector<Tensor> results = run(text, {});
  ASSERT_EQ(results.size(), 1u);
  expectClose(results[0], {1, 2, -3}, 0);
}

TEST(Tensor, NpyRoundTrip) {
  for (DType type : {DType::f64, DType::f32, DType::f16, DType::bf16,
                     DType::i64, DType::i32, DType::i1}) {
    Tensor t = randomTensor(type, {2, 3}, 7, -5, 5);
    rt::NpyArray array = t.toNpy();
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
    std::string path = ::testing::TempDir() + "/sharc-npy-" +
                       std::string(dtypeName(type)) + ".npy";
    std::string error;
    ASSERT_TRUE(rt::writeNpy(path, array, error)) << error;
    rt::NpyArray read;
    ASSERT_TRUE(rt::readNpy(path, read, error)) << error;
    std::remove(path.c_str());
    Tensor back = Tensor::fromNpy(read);
    if (type == DType::bf16) {
      EXPECT_EQ(read.type, rt::NpyType::f32);
      EXPECT_EQ(back.convertTo(DType::bf16), t);
    } else {
      EXPECT_EQ(back, t) << std::string(dtypeName(type));
    }
  }
}

/// The bytes a C++ compiler stores element `i` of `t` as, in its dtype
/// (the independent reference for PackedTensor's encoding).
static std::string elementBytes(const Tensor &t, int64_t i) {
  auto bytesOf = [](auto value) {
    return std::string(reinterpret_cast<const char *>(&value), sizeof(value));
  };
  switch (t.dtype()) {
  case DType::f64:
    return bytesOf(t.floats()[i]);
  case DType::f32:
    return bytesOf(static_cast<float>(t.floats()[i]));
  case DType::f16:
    return bytesOf(static_cast<_Float16>(t.floats()[i]));
  case DType::bf16: {
    uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(t.floats()[i]));
    return bytesOf(static_cast<uint16_t>(bits >> 16));
  }
  case DType::i64:
    return bytesOf(t.ints()[i]);
  case DType::i32:
    return bytesOf(static_cast<int32_t>(t.ints()[i]));
  case DType::i1:
    return bytesOf(static_cast<char>(t.ints()[i] != 0));
  }
  return "";
}

TEST(PackedTensor, PackUnpackAndNpy) {
  for (DType type : {DType::f64, DType::f32, DType::f16, DType::bf16,
                     DType::i64, DType::i32, DType::i1}) {
    std::string name(dtypeName(type));
    Tensor t = randomTensor(type, {3, 5}, 11, -5, 5);
    if (t.isFloat()) {
      t.floats()[0] = -0.0;
      t.floats()[1] = std::numeric_limits<double>::infinity();
    }
    PackedTensor packed = PackedTensor::pack(t);
    EXPECT_EQ(packed.dtype(), type) << name;
    EXPECT_EQ(packed.shape(), t.shape()) << name;
    std::string expected;
    for (int64_t i = 0; i < t.numElements(); ++i)
      expected += elementBytes(t, i);
    EXPECT_EQ(packed.bytes().str(), expected) << name;
    EXPECT_EQ(packed.unpack(), t) << name;

    // Written as Tensor::toNpy writes it (bf16 widened to f32).
    std::string path = ::testing::TempDir() + "/sharc-packed-" + name + ".npy";
    std::string error;
    ASSERT_TRUE(packed.writeNpy(path, error)) << error;
    rt::NpyArray read;
    ASSERT_TRUE(rt::readNpy(path, read, error)) << error;
    std::remove(path.c_str());
    rt::NpyArray direct = t.toNpy();
    EXPECT_EQ(read.type, direct.type) << name;
    EXPECT_EQ(read.shape, direct.shape) << name;
    EXPECT_EQ(read.data, direct.data) << name;
  }
  // Bytes are taken over, not copied.
  std::string bytes(4096, '\0');
  const char *storage = bytes.data();
  PackedTensor taken(DType::f32, {1024}, std::move(bytes));
  EXPECT_EQ(taken.bytes().data(), storage);
}

TEST(Tensor, DescribeAndEquality) {
  EXPECT_EQ(Tensor(DType::f32, {2, 3}).describe(), "f32[2, 3]");
  EXPECT_EQ(Tensor(DType::i1, {}).describe(), "i1[]");
  Tensor a = makeTensor(DType::f32, {2}, {NAN, 0.0});
  Tensor b = makeTensor(DType::f32, {2}, {NAN, 0.0});
  Tensor c = makeTensor(DType::f32, {2}, {NAN, -0.0});
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == a.convertTo(DType::f64));
  EXPECT_FALSE(a == a.reshaped({2, 1}));
  EXPECT_EQ(a.reshaped({1, 2}).shape(), (ArrayRef<int64_t>{1, 2}));
}

} // namespace
