//===- EvalNN.cpp - convolution and pooling -------------------------------===//
//
// conv2d (im2col + double-precision GEMM, rounded once), max_pool2d and
// avg_pool2d, all NCHW.  Output sizes come from the result types, which the
// shape functions derived from the attributes.
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

/// Spatial geometry of a 2-D window op.
struct Window {
  int64_t height, width;       // input
  int64_t outHeight, outWidth; // output
  int64_t kernelH, kernelW;
  int64_t strideH, strideW;
  int64_t padTop, padLeft, padBottom, padRight;
  int64_t dilationH = 1, dilationW = 1;
};

Window makeWindow(const Tensor &in, const Tensor &out, ArrayRef<int64_t> kernel,
                  ArrayRef<int64_t> strides, ArrayRef<int64_t> padding) {
  Window w;
  w.height = in.shape()[2];
  w.width = in.shape()[3];
  w.outHeight = out.shape()[2];
  w.outWidth = out.shape()[3];
  w.kernelH = kernel[0];
  w.kernelW = kernel[1];
  w.strideH = strides[0];
  w.strideW = strides[1];
  w.padTop = padding[0];
  w.padLeft = padding[1];
  w.padBottom = padding[2];
  w.padRight = padding[3];
  return w;
}

LogicalResult evalConv2D(const OpCall &call, Conv2DOp op) {
  const Tensor &in = call.operand(0), &weight = call.operand(1);
  const Tensor *bias = call.operands.size() > 2 ? call.operands[2] : nullptr;
  Tensor &out = call.result();
  Window w = makeWindow(in, out, weight.shape().drop_front(2), op.getStrides(),
                        op.getPadding());
  w.dilationH = op.getDilations()[0];
  w.dilationW = op.getDilations()[1];
  int64_t batch = in.shape()[0], channels = in.shape()[1];
  int64_t outChannels = out.shape()[1];
  int64_t groups = op.getGroups();
  int64_t groupChannels = channels / groups;
  int64_t groupOutChannels = outChannels / groups;
  int64_t patch = groupChannels * w.kernelH * w.kernelW;
  int64_t pixels = w.outHeight * w.outWidth;
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();

  // columns[r][p]: input value under kernel tap r for output pixel p.
  std::vector<double> columns(patch * pixels);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t c = 0; c < groupChannels; ++c) {
        const double *plane =
            &x[((n * channels) + g * groupChannels + c) * w.height * w.width];
        for (int64_t ki = 0; ki < w.kernelH; ++ki)
          for (int64_t kj = 0; kj < w.kernelW; ++kj) {
            double *row =
                &columns[((c * w.kernelH + ki) * w.kernelW + kj) * pixels];
            for (int64_t oh = 0; oh < w.outHeight; ++oh) {
              int64_t ih = oh * w.strideH - w.padTop + ki * w.dilationH;
              for (int64_t ow = 0; ow < w.outWidth; ++ow) {
                int64_t iw = ow * w.strideW - w.padLeft + kj * w.dilationW;
                bool inside =
                    ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
                row[oh * w.outWidth + ow] =
                    inside ? plane[ih * w.width + iw] : 0.0;
              }
            }
          }
      }
      if (patch == 0 || pixels == 0 || groupOutChannels == 0)
        continue;
      // out[o][p] = sum_r weight[o][r] * columns[r][p] for this group.
      cblas_dgemm(
          CblasRowMajor, CblasNoTrans, CblasNoTrans, groupOutChannels, pixels,
          patch, 1.0, &weight.floats()[g * groupOutChannels * patch], patch,
          columns.data(), pixels, 0.0,
          &y[(n * outChannels + g * groupOutChannels) * pixels], pixels);
    }
  if (bias)
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t o = 0; o < outChannels; ++o)
        for (int64_t p = 0; p < pixels; ++p)
          y[(n * outChannels + o) * pixels + p] += bias->floats()[o];
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

LogicalResult evalMaxPool(const OpCall &call, MaxPool2DOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  Window w =
      makeWindow(in, out, op.getKernel(), op.getStrides(), op.getPadding());
  w.dilationH = op.getDilations()[0];
  w.dilationW = op.getDilations()[1];
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(out, w,
                [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
                  const double *src = &x[plane * planeSize];
                  double best = -std::numeric_limits<double>::infinity();
                  for (int64_t ki = 0; ki < w.kernelH; ++ki) {
                    int64_t ih = h0 + ki * w.dilationH;
                    if (ih < 0 || ih >= w.height)
                      continue;
                    for (int64_t kj = 0; kj < w.kernelW; ++kj) {
                      int64_t iw = w0 + kj * w.dilationW;
                      if (iw < 0 || iw >= w.width)
                        continue;
                      double v = src[ih * w.width + iw];
                      if (std::isnan(v) || v > best)
                        best = v;
                      if (std::isnan(best))
                        break;
                    }
                  }
                  y[plane * outPlaneSize + cell] = best;
                });
  return success();
}

LogicalResult evalAvgPool(const OpCall &call, AvgPool2DOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  Window w =
      makeWindow(in, out, op.getKernel(), op.getStrides(), op.getPadding());
  bool countPad = op.getCountIncludePad();
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();
  int64_t planeSize = w.height * w.width;
  int64_t outPlaneSize = w.outHeight * w.outWidth;
  forEachWindow(
      out, w, [&](int64_t plane, int64_t cell, int64_t h0, int64_t w0) {
        // The window clipped to the padded input (for count_include_pad)
        // and to the real input (for the sum).
        int64_t hEnd = std::min(h0 + w.kernelH, w.height + w.padBottom);
        int64_t wEnd = std::min(w0 + w.kernelW, w.width + w.padRight);
        int64_t paddedCount = (hEnd - h0) * (wEnd - w0);
        int64_t hBegin = std::max<int64_t>(h0, 0);
        int64_t wBegin = std::max<int64_t>(w0, 0);
        hEnd = std::min(hEnd, w.height);
        wEnd = std::min(wEnd, w.width);
        const double *src = &x[plane * planeSize];
        double sum = 0;
        for (int64_t ih = hBegin; ih < hEnd; ++ih)
          for (int64_t iw = wBegin; iw < wEnd; ++iw)
            sum += src[ih * w.width + iw];
        int64_t count = countPad ? paddedCount
                                 : std::max<int64_t>(0, hEnd - hBegin) *
                                       std::max<int64_t>(0, wEnd - wBegin);
        y[plane * outPlaneSize + cell] = sum / static_cast<double>(count);
      });
  roundInPlace(out);
  return success();
}

} // namespace

std::optional<LogicalResult> eval::evalNNOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      .Case([&](Conv2DOp op) { return evalConv2D(call, op); })
      .Case([&](MaxPool2DOp op) { return evalMaxPool(call, op); })
      .Case([&](AvgPool2DOp op) { return evalAvgPool(call, op); })
      .Default([](Operation *) { return Result(); });
}
