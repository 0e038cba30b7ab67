//===- EvalNN.cpp - convolution and pooling -------------------------------===//
//
// conv2d (im2col + double-precision GEMM, rounded once), max_pool2d,
// avg_pool2d and their gradients, all NCHW.  Output sizes come from the
// result types, which the shape functions derived from the attributes (or
// verified, for the gradients).
//
//===----------------------------------------------------------------------===//

#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cblas.h>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

namespace {

using Window = WindowGeometry;

/// Geometry of a conv2d or of one of its gradients: input [N, C, H, W],
/// weight [O, C/groups, KH, KW], output [N, O, OH, OW].
struct Conv {
  Window w;
  int64_t batch, channels, outChannels, groups;
  int64_t groupChannels, groupOutChannels;
  /// Rows of the column matrix (one per kernel tap of a group's channels)
  /// and its columns (one per output pixel).
  int64_t patch, pixels;
};

template <typename OpTy>
Conv makeConv(OpTy op, ArrayRef<int64_t> input, ArrayRef<int64_t> weight,
              ArrayRef<int64_t> output) {
  Conv c{Window(input, output, weight.drop_front(2), op.getStrides(),
                op.getPadding(), op.getDilations())};
  const Window &w = c.w;
  c.batch = w.batch;
  c.channels = w.channels;
  c.outChannels = w.outChannels;
  c.groups = op.getGroups();
  c.groupChannels = c.channels / c.groups;
  c.groupOutChannels = c.outChannels / c.groups;
  c.patch = c.groupChannels * w.kernelH * w.kernelW;
  c.pixels = w.outHeight * w.outWidth;
  return c;
}

/// Calls `fn(row, pixel, inputOffset)` for every kernel tap `row` of group
/// `g`'s channels and output pixel whose input position is inside image `n`
/// (offset into the NCHW input); padding taps are skipped.
template <typename Fn>
void forEachTap(const Conv &c, int64_t n, int64_t g, Fn fn) {
  const Window &w = c.w;
  for (int64_t ch = 0; ch < c.groupChannels; ++ch) {
    int64_t plane =
        ((n * c.channels) + g * c.groupChannels + ch) * w.height * w.width;
    for (int64_t ki = 0; ki < w.kernelH; ++ki)
      for (int64_t kj = 0; kj < w.kernelW; ++kj) {
        int64_t row = (ch * w.kernelH + ki) * w.kernelW + kj;
        for (int64_t oh = 0; oh < w.outHeight; ++oh) {
          int64_t ih = oh * w.strideH - w.padTop + ki * w.dilationH;
          if (ih < 0 || ih >= w.height)
            continue;
          for (int64_t ow = 0; ow < w.outWidth; ++ow) {
            int64_t iw = ow * w.strideW - w.padLeft + kj * w.dilationW;
            if (iw >= 0 && iw < w.width)
              fn(row, oh * w.outWidth + ow, plane + ih * w.width + iw);
          }
        }
      }
  }
}

/// columns[row][pixel] (patch x pixels): the input value under each kernel
/// tap for each output pixel of image `n`, group `g`; zero in the padding.
void im2col(const Conv &c, ArrayRef<double> x, int64_t n, int64_t g,
            std::vector<double> &columns) {
  std::fill(columns.begin(), columns.end(), 0.0);
  forEachTap(c, n, g, [&](int64_t row, int64_t pixel, int64_t at) {
    columns[row * c.pixels + pixel] = x[at];
  });
}

/// C = op(A) * op(B) (+ C when `accumulate`), row-major, in double.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          const double *a, const double *b, double *out, bool accumulate) {
  if (m == 0 || n == 0 || k == 0)
    return;
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a,
              transA ? m : k, b, transB ? k : n, accumulate ? 1.0 : 0.0, out,
              n);
}

LogicalResult evalConv2D(const OpCall &call, Conv2DOp op) {
  const Tensor &in = call.operand(0), &weight = call.operand(1);
  const Tensor *bias = call.operands.size() > 2 ? call.operands[2] : nullptr;
  Tensor &out = call.result();
  Conv c = makeConv(op, in.shape(), weight.shape(), out.shape());
  MutableArrayRef<double> y = out.floats();
  std::vector<double> columns(c.patch * c.pixels);
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t g = 0; g < c.groups; ++g) {
      im2col(c, in.floats(), n, g, columns);
      // out[o][p] = sum_r weight[o][r] * columns[r][p] for this group.
      gemm(false, false, c.groupOutChannels, c.pixels, c.patch,
           &weight.floats()[g * c.groupOutChannels * c.patch], columns.data(),
           &y[(n * c.outChannels + g * c.groupOutChannels) * c.pixels],
           /*accumulate=*/false);
    }
  if (bias)
    for (int64_t n = 0; n < c.batch; ++n)
      for (int64_t o = 0; o < c.outChannels; ++o)
        for (int64_t p = 0; p < c.pixels; ++p)
          y[(n * c.outChannels + o) * c.pixels + p] += bias->floats()[o];
  roundInPlace(out);
  return success();
}

LogicalResult evalConv2DInputGrad(const OpCall &call, Conv2DInputGradOp op) {
  const Tensor &grad = call.operand(0), &weight = call.operand(1);
  Tensor &out = call.result();
  Conv c = makeConv(op, out.shape(), weight.shape(), grad.shape());
  MutableArrayRef<double> dx = out.floats();
  std::vector<double> columns(c.patch * c.pixels);
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t g = 0; g < c.groups; ++g) {
      // columns = weight_g^T * grad_g, then each tap adds to its input.
      std::fill(columns.begin(), columns.end(), 0.0);
      gemm(true, false, c.patch, c.pixels, c.groupOutChannels,
           &weight.floats()[g * c.groupOutChannels * c.patch],
           &grad.floats()[(n * c.outChannels + g * c.groupOutChannels) *
                          c.pixels],
           columns.data(), /*accumulate=*/false);
      forEachTap(c, n, g, [&](int64_t row, int64_t pixel, int64_t at) {
        dx[at] += columns[row * c.pixels + pixel];
      });
    }
  roundInPlace(out);
  return success();
}

LogicalResult evalConv2DWeightGrad(const OpCall &call, Conv2DWeightGradOp op) {
  const Tensor &in = call.operand(0), &grad = call.operand(1);
  Tensor &out = call.result();
  Conv c = makeConv(op, in.shape(), out.shape(), grad.shape());
  std::vector<double> columns(c.patch * c.pixels);
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t g = 0; g < c.groups; ++g) {
      // dweight_g += grad_g * columns^T.
      im2col(c, in.floats(), n, g, columns);
      gemm(false, true, c.groupOutChannels, c.patch, c.pixels,
           &grad.floats()[(n * c.outChannels + g * c.groupOutChannels) *
                          c.pixels],
           columns.data(), &out.floats()[g * c.groupOutChannels * c.patch],
           /*accumulate=*/true);
    }
  roundInPlace(out);
  return success();
}

/// Calls `fn(planeIndex, oh, ow, hStart, wStart)` for every output cell, with
/// the window's (possibly negative) top-left corner in input coordinates.
template <typename Fn>
void forEachWindow(const Tensor &out, const Window &w, Fn fn) {
  int64_t planes = out.shape()[0] * out.shape()[1];
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t oh = 0; oh < w.outHeight; ++oh)
      for (int64_t ow = 0; ow < w.outWidth; ++ow)
        fn(plane, oh * w.outWidth + ow, oh * w.strideH - w.padTop,
           ow * w.strideW - w.padLeft);
}

/// Position (in the input plane) of the maximum of the window whose top-left
/// corner is (h0, w0): the first NaN if any, else the first position holding
/// the largest value in row-major window order; -1 if the window covers
/// padding only.
int64_t windowArgmax(const double *plane, const Window &w, int64_t h0,
                     int64_t w0) {
  int64_t position = -1;
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t ki = 0; ki < w.kernelH; ++ki) {
    int64_t ih = h0 + ki * w.dilationH;
    if (ih < 0 || ih >= w.height)
      continue;
    for (int64_t kj = 0; kj < w.kernelW; ++kj) {
      int64_t iw = w0 + kj * w.dilationW;
      if (iw < 0 || iw >= w.width)
        continue;
      int64_t at = ih * w.width + iw;
      double v = plane[at];
      if (std::isnan(v))
        return at;
      if (position < 0 || v > best) {
        position = at;
        best = v;
      }
    }
  }
  return position;
}

LogicalResult evalMaxPool(const OpCall &call, MaxPool2DOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  Window w(in.shape(), out.shape(), op.getKernel(), op.getStrides(),
           op.getPadding(), op.getDilations());
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(
      out, w, [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
        const double *src = &x[plane * planeSize];
        int64_t at = windowArgmax(src, w, h0, w0);
        y[plane * outPlaneSize + cell] =
            at < 0 ? -std::numeric_limits<double>::infinity() : src[at];
      });
  return success();
}

LogicalResult evalMaxPoolGrad(const OpCall &call, MaxPool2DGradOp op) {
  const Tensor &in = call.operand(0), &grad = call.operand(1);
  Tensor &out = call.result();
  Window w(in.shape(), grad.shape(), op.getKernel(), op.getStrides(),
           op.getPadding(), op.getDilations());
  ArrayRef<double> x = in.floats(), dy = grad.floats();
  MutableArrayRef<double> dx = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(
      grad, w, [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
        int64_t at = windowArgmax(&x[plane * planeSize], w, h0, w0);
        if (at >= 0)
          dx[plane * planeSize + at] += dy[plane * outPlaneSize + cell];
      });
  roundInPlace(out);
  return success();
}

/// The part of an average-pooling window inside the input, and its divisor.
struct AvgWindow {
  int64_t hBegin, hEnd, wBegin, wEnd;
  double divisor;
};

/// The window whose top-left corner is (h0, w0); with `countPad` the divisor
/// counts the explicit padding (not the extra cells of ceil_mode windows).
AvgWindow clipAvgWindow(const Window &w, int64_t h0, int64_t w0,
                        bool countPad) {
  int64_t hEnd = std::min(h0 + w.kernelH, w.height + w.padBottom);
  int64_t wEnd = std::min(w0 + w.kernelW, w.width + w.padRight);
  int64_t paddedCount = (hEnd - h0) * (wEnd - w0);
  AvgWindow a;
  a.hBegin = std::max<int64_t>(h0, 0);
  a.wBegin = std::max<int64_t>(w0, 0);
  a.hEnd = std::min(hEnd, w.height);
  a.wEnd = std::min(wEnd, w.width);
  int64_t count = countPad ? paddedCount
                           : std::max<int64_t>(0, a.hEnd - a.hBegin) *
                                 std::max<int64_t>(0, a.wEnd - a.wBegin);
  a.divisor = static_cast<double>(count);
  return a;
}

LogicalResult evalAvgPool(const OpCall &call, AvgPool2DOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  Window w(in.shape(), out.shape(), op.getKernel(), op.getStrides(),
           op.getPadding());
  bool countPad = op.getCountIncludePad();
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(out, w,
                [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
                  AvgWindow a = clipAvgWindow(w, h0, w0, countPad);
                  const double *src = &x[plane * planeSize];
                  double sum = 0;
                  for (int64_t ih = a.hBegin; ih < a.hEnd; ++ih)
                    for (int64_t iw = a.wBegin; iw < a.wEnd; ++iw)
                      sum += src[ih * w.width + iw];
                  y[plane * outPlaneSize + cell] = sum / a.divisor;
                });
  roundInPlace(out);
  return success();
}

LogicalResult evalAvgPoolGrad(const OpCall &call, AvgPool2DGradOp op) {
  const Tensor &grad = call.operand(0);
  Tensor &out = call.result();
  Window w(out.shape(), grad.shape(), op.getKernel(), op.getStrides(),
           op.getPadding());
  bool countPad = op.getCountIncludePad();
  ArrayRef<double> dy = grad.floats();
  MutableArrayRef<double> dx = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(grad, w,
                [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
                  AvgWindow a = clipAvgWindow(w, h0, w0, countPad);
                  double share = dy[plane * outPlaneSize + cell] / a.divisor;
                  double *dst = &dx[plane * planeSize];
                  for (int64_t ih = a.hBegin; ih < a.hEnd; ++ih)
                    for (int64_t iw = a.wBegin; iw < a.wEnd; ++iw)
                      dst[ih * w.width + iw] += share;
                });
  roundInPlace(out);
  return success();
}

} // namespace

std::optional<LogicalResult> eval::evalNNOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      .Case([&](Conv2DOp op) { return evalConv2D(call, op); })
      .Case([&](Conv2DInputGradOp op) { return evalConv2DInputGrad(call, op); })
      .Case(
          [&](Conv2DWeightGradOp op) { return evalConv2DWeightGrad(call, op); })
      .Case([&](MaxPool2DOp op) { return evalMaxPool(call, op); })
      .Case([&](MaxPool2DGradOp op) { return evalMaxPoolGrad(call, op); })
      .Case([&](AvgPool2DOp op) { return evalAvgPool(call, op); })
      .Case([&](AvgPool2DGradOp op) { return evalAvgPoolGrad(call, op); })
      .Default([](Operation *) { return Result(); });
}
