//===- NNTest.cpp - convolution and pooling against direct formulas -------===//

#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

class NNTest : public IRTest {};

TEST_F(NNTest, Conv2DGroupsStridesDilationsPadding) {
  // N=2, C=4, H=7, W=6; O=6, groups=2, kernel 3x2, strides (2,1),
  // dilations (2,1), padding [top 1, left 0, bottom 2, right 1]:
  // OH = (7+1+2 - 5)/2 + 1 = 3, OW = (6+0+1 - 2)/1 + 1 = 6.
  const int64_t n = 2, c = 4, hIn = 7, wIn = 6, o = 6, groups = 2, kh = 3,
                kw = 2, sh = 2, sw = 1, dh = 2, dw = 1, top = 1, left = 0,
                oh = 3, ow = 6;
  for (const char *element : {"f32", "f64"}) {
    DType type = element[1] == '3' ? DType::f32 : DType::f64;
    auto round = [&](double v) {
      return type == DType::f32 ? static_cast<float>(v) : v;
    };
    Tensor x = randomTensor(type, {n, c, hIn, wIn}, 1);
    Tensor w = randomTensor(type, {o, c / groups, kh, kw}, 2);
    Tensor b = randomTensor(type, {o}, 3);
    std::string text = substitute(R"(
      func.func @main(%x: $0, %w: $1, %b: $2) -> ($3, $3) {
        %0 = sharc.conv2d %x, %w, %b {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>,
                                      dilations = array<i64: 2, 1>, groups = 2}
            : ($0, $1, $2) -> $3
        %1 = sharc.conv2d %x, %w {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>,
                                  dilations = array<i64: 2, 1>, groups = 2}
            : ($0, $1) -> $3
        return %0, %1 : $3, $3
      })",
                                  {tensorType({n, c, hIn, wIn}, element),
                                   tensorType({o, c / groups, kh, kw}, element),
                                   tensorType({o}, element),
                                   tensorType({n, o, oh, ow}, element)});
    std::vector<Tensor> r = run(text, {x, w, b});
    ASSERT_EQ(r.size(), 2u);
    std::vector<double> withBias, withoutBias;
    int64_t groupIn = c / groups, groupOut = o / groups;
    for (int64_t in = 0; in < n; ++in)
      for (int64_t oc = 0; oc < o; ++oc)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t z = 0; z < ow; ++z) {
            double sum = 0;
            int64_t g = oc / groupOut;
            for (int64_t ic = 0; ic < groupIn; ++ic)
              for (int64_t i = 0; i < kh; ++i)
                for (int64_t j = 0; j < kw; ++j) {
                  int64_t row = y * sh - top + i * dh;
                  int64_t col = z * sw - left + j * dw;
                  if (row < 0 || row >= hIn || col < 0 || col >= wIn)
                    continue;
                  sum +=
                      x.getDouble(linearIndex(
                          {n, c, hIn, wIn}, {in, g * groupIn + ic, row, col})) *
                      w.getDouble(
                          linearIndex({o, groupIn, kh, kw}, {oc, ic, i, j}));
                }
            withoutBias.push_back(round(sum));
            withBias.push_back(round(sum + b.getDouble(oc)));
          }
    double tolerance = type == DType::f32 ? 2e-7 : 1e-14;
    expectClose(r[0], withBias, tolerance, "conv with bias");
    expectClose(r[1], withoutBias, tolerance, "conv without bias");
  }
}

TEST_F(NNTest, MaxPoolCeilModeDilationsPadding) {
  // H=6, kernel 3, stride 2, no padding, ceil_mode: (6-3)/2 rounded up + 1 =
  // 3 windows, the last hanging over the bottom edge.  W=7, kernel 2,
  // dilation 2, stride 2, padding 1/1: (7+2-3)/2 + 1 = 4.
  Tensor x = randomTensor(DType::f16, {1, 2, 6, 7}, 4, -4, 4);
  x.setDouble(linearIndex({1, 2, 6, 7}, {0, 1, 5, 6}), NAN);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<1x2x6x7xf16>) -> tensor<1x2x3x4xf16> {
      %0 = sharc.max_pool2d %x {kernel = array<i64: 3, 2>, strides = array<i64: 2, 2>,
                                padding = array<i64: 0, 1, 0, 1>, dilations = array<i64: 1, 2>,
                                ceil_mode = true}
          : (tensor<1x2x6x7xf16>) -> tensor<1x2x3x4xf16>
      return %0 : tensor<1x2x3x4xf16>
    })",
                              {x});
  ASSERT_EQ(r.size(), 1u);
  std::vector<double> expected;
  for (int64_t ch = 0; ch < 2; ++ch)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t z = 0; z < 4; ++z) {
        double best = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            int64_t row = y * 2 + i, col = z * 2 - 1 + j * 2;
            if (row >= 6 || col < 0 || col >= 7)
              continue;
            double v =
                x.getDouble(linearIndex({1, 2, 6, 7}, {0, ch, row, col}));
            nan |= std::isnan(v);
            best = std::max(best, v);
          }
        expected.push_back(nan ? NAN : best);
      }
  expectClose(r[0], expected, 0, "max_pool2d");
}

/// Average pooling the way ONNX's reference implementation does it: pad the
/// input explicitly (remembering which cells are padding), then average each
/// window over the cells that exist in the padded array, counting either
/// every such cell or only the real ones.
std::vector<double> paddedAveragePool(const Tensor &x, int64_t kernel,
                                      int64_t stride,
                                      std::array<int64_t, 4> padding,
                                      int64_t outH, int64_t outW,
                                      bool countIncludePad) {
  int64_t planes = x.shape()[0] * x.shape()[1];
  int64_t h = x.shape()[2], w = x.shape()[3];
  int64_t ph = h + padding[0] + padding[2], pw = w + padding[1] + padding[3];
  std::vector<double> out;
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<double> padded(ph * pw, 0);
    std::vector<bool> real(ph * pw, false);
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        int64_t at = (i + padding[0]) * pw + j + padding[1];
        padded[at] = x.getDouble((p * h + i) * w + j);
        real[at] = true;
      }
    for (int64_t y = 0; y < outH; ++y)
      for (int64_t z = 0; z < outW; ++z) {
        double sum = 0;
        int64_t count = 0;
        for (int64_t i = y * stride; i < y * stride + kernel && i < ph; ++i)
          for (int64_t j = z * stride; j < z * stride + kernel && j < pw; ++j) {
            sum += padded[i * pw + j];
            count += countIncludePad || real[i * pw + j];
          }
        out.push_back(sum / count);
      }
  }
  return out;
}

TEST_F(NNTest, AvgPoolCountIncludePadAndCeilMode) {
  // H=W=5, kernel 3, stride 2, padding [1, 1, 0, 0], ceil_mode:
  // (5+1-3)/2 rounded up + 1 = 3; the last window sticks out of the padded
  // input by one row/column, which is never counted.
  Tensor x = randomTensor(DType::f32, {2, 1, 5, 5}, 5);
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<2x1x5x5xf32>) -> (tensor<2x1x3x3xf32>, tensor<2x1x3x3xf32>) {
      %0 = sharc.avg_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>,
                                padding = array<i64: 1, 1, 0, 0>, ceil_mode = true,
                                count_include_pad = true}
          : (tensor<2x1x5x5xf32>) -> tensor<2x1x3x3xf32>
      %1 = sharc.avg_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>,
                                padding = array<i64: 1, 1, 0, 0>, ceil_mode = true}
          : (tensor<2x1x5x5xf32>) -> tensor<2x1x3x3xf32>
      return %0, %1 : tensor<2x1x3x3xf32>, tensor<2x1x3x3xf32>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  auto toF32 = [](std::vector<double> v) {
    for (double &e : v)
      e = static_cast<float>(e);
    return v;
  };
  expectClose(r[0], toF32(paddedAveragePool(x, 3, 2, {1, 1, 0, 0}, 3, 3, true)),
              2e-7, "count_include_pad");
  expectClose(r[1],
              toF32(paddedAveragePool(x, 3, 2, {1, 1, 0, 0}, 3, 3, false)),
              2e-7, "exclude pad");
}

TEST_F(NNTest, AvgPoolByHand) {
  // [[1, 2], [3, 4]], kernel 2, stride 1, padding 1 all round -> 3x3.
  Tensor x = makeTensor(DType::f64, {1, 1, 2, 2}, {1, 2, 3, 4});
  std::vector<Tensor> r = run(R"(
    func.func @main(%x: tensor<1x1x2x2xf64>) -> (tensor<1x1x3x3xf64>, tensor<1x1x3x3xf64>) {
      %0 = sharc.avg_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>,
                                padding = array<i64: 1, 1, 1, 1>, count_include_pad = true}
          : (tensor<1x1x2x2xf64>) -> tensor<1x1x3x3xf64>
      %1 = sharc.avg_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>,
                                padding = array<i64: 1, 1, 1, 1>}
          : (tensor<1x1x2x2xf64>) -> tensor<1x1x3x3xf64>
      return %0, %1 : tensor<1x1x3x3xf64>, tensor<1x1x3x3xf64>
    })",
                              {x});
  ASSERT_EQ(r.size(), 2u);
  expectClose(r[0], {0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1}, 0,
              "count_include_pad");
  expectClose(r[1], {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, 0, "exclude pad");
}

} // namespace
