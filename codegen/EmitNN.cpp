//===- EmitNN.cpp - Convolution and pooling kernels -----------------------===//
//
// conv2d, its input and weight gradients, max/avg pooling and their
// gradients, all NCHW.  Every kernel computes one element of its result by a
// direct loop (one thread per output element, no atomics), so results do not
// depend on the number of threads.  The loops reproduce ir/EvalNN.cpp: they
// accumulate in double in the evaluator's order (gradients gather the
// contributions a scatter in the evaluator would have added, in the order it
// adds them) and round once when storing.
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterInternal.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace sharc;
using namespace sharc::codegen;

namespace {

using Window = WindowGeometry;

/// Statements defining the coordinates `n`, `c`, `h`, `w` (names given by
/// the caller; an empty name is skipped) of the flat index `i` of an NCHW
/// tensor of `shape`.
std::string nchw(ArrayRef<int64_t> shape, StringRef n, StringRef c, StringRef h,
                 StringRef w) {
  std::string code;
  auto define = [&](StringRef name, const std::string &expr) {
    if (!name.empty())
      code += "    const int64_t " + name.str() + " = " + expr + ";\n";
  };
  define(w, "i % " + str(shape[3]));
  define(h, "(i / " + str(shape[3]) + ") % " + str(shape[2]));
  define(c, "(i / " + str(shape[2] * shape[3]) + ") % " + str(shape[1]));
  define(n, "i / " + str(shape[1] * shape[2] * shape[3]));
  return code;
}

/// Code that sets `position` (declared by the caller, an int64_t) to the
/// argmax of the max-pooling window with top-left corner (`h0`, `w0`) in the
/// plane at `src`, as ir/EvalNN.cpp's windowArgmax: the first NaN, else the
/// first strictly greater value in row-major window order, -1 when the
/// window covers padding only.
std::string argmaxCode(const Window &w, StringRef src, StringRef h0,
                       StringRef w0, StringRef position, StringRef indent) {
  std::string in = indent.str();
  return in + "{\n" + in + "  double best = -HUGE_VAL;\n" + in +
         "  bool nan = false;\n" + in + "  for (int64_t ki = 0; ki < " +
         str(w.kernelH) + " && !nan; ++ki) {\n" + in +
         "    const int64_t ih = " + h0.str() + " + ki * " + str(w.dilationH) +
         ";\n" + in + "    if (ih < 0 || ih >= " + str(w.height) +
         ") continue;\n" + in + "    for (int64_t kj = 0; kj < " +
         str(w.kernelW) + "; ++kj) {\n" + in +
         "      const int64_t iw = " + w0.str() + " + kj * " +
         str(w.dilationW) + ";\n" + in +
         "      if (iw < 0 || iw >= " + str(w.width) + ") continue;\n" + in +
         "      const int64_t at = ih * " + str(w.width) + " + iw;\n" + in +
         "      const double v = double(" + src.str() + "[at]);\n" + in +
         "      if (v != v) { " + position.str() +
         " = at; nan = true; break; }\n" + in + "      if (" + position.str() +
         " < 0 || v > best) { " + position.str() + " = at; best = v; }\n" + in +
         "    }\n" + in + "  }\n" + in + "}\n";
}

/// Code defining `divisor` (a double) for the average-pooling window with
/// top-left corner (h0, w0), and the clipped window [hBegin, hEnd) x
/// [wBegin, wEnd), as ir/EvalNN.cpp's clipAvgWindow.
std::string avgWindowCode(const Window &w, bool countPad, StringRef indent) {
  std::string in = indent.str();
  std::string code =
      in + "const int64_t hLimit = h0 + " + str(w.kernelH) + " < " +
      str(w.height + w.padBottom) + " ? h0 + " + str(w.kernelH) + " : " +
      str(w.height + w.padBottom) + ";\n" + in +
      "const int64_t wLimit = w0 + " + str(w.kernelW) + " < " +
      str(w.width + w.padRight) + " ? w0 + " + str(w.kernelW) + " : " +
      str(w.width + w.padRight) + ";\n" + in +
      "[[maybe_unused]] const int64_t hBegin = h0 > 0 ? h0 : 0, wBegin = w0 > "
      "0 ? w0 : 0;\n" +
      in + "[[maybe_unused]] const int64_t hEnd = hLimit < " + str(w.height) +
      " ? hLimit : " + str(w.height) + ", wEnd = wLimit < " + str(w.width) +
      " ? wLimit : " + str(w.width) + ";\n";
  if (countPad)
    code +=
        in + "const double divisor = double((hLimit - h0) * (wLimit - w0));\n";
  else
    code += in +
            "const double divisor = double((hEnd > hBegin ? hEnd - hBegin : 0) "
            "* (wEnd > wBegin ? wEnd - wBegin : 0));\n";
  return code;
}

/// Code defining the range [lo, hi] of output rows (or columns) `o` whose
/// window, starting at o * stride - pad and spanning `extent` input cells,
/// contains input coordinate `coord`.
std::string windowRange(StringRef lo, StringRef hi, StringRef coord,
                        int64_t stride, int64_t pad, int64_t extent,
                        int64_t outSize, StringRef indent) {
  std::string in = indent.str();
  // Built by appending: GCC 12 reports a false -Wrestrict (bug 105651) for
  // "literal" + std::string here.
  std::string first = "(";
  first += coord;
  first += " + " + str(pad - extent + 1) + ")";
  std::string last =
      "((" + coord.str() + " + " + str(pad) + ") / " + str(stride) + ")";
  return in + "const int64_t " + lo.str() + " = " + first + " <= 0 ? 0 : (" +
         first + " + " + str(stride - 1) + ") / " + str(stride) + ";\n" + in +
         "const int64_t " + hi.str() + " = " + last + " < " + str(outSize - 1) +
         " ? " + last + " : " + str(outSize - 1) + ";\n";
}

} // namespace

LogicalResult ProgramEmitter::emitWindowOp(Operation *op) {
  Value result = op->getResult(0);
  Type element = elementOf(result);
  std::string type = storageType(element);
  if (!isFloatType(element))
    return op->emitError() << "code generation: '" << op->getName() << "' of "
                           << element << " is not supported yet";
  FailureOr<std::string> out = typedPointer(result);
  if (failed(out))
    return failure();
  int64_t count = tensorType(result).getNumElements();
  KernelText kernel;
  // Members in operand order, then the result.
  SmallVector<std::string> in;
  for (Value operand : op->getOperands()) {
    FailureOr<std::string> pointer = typedPointer(operand);
    if (failed(pointer))
      return failure();
    in.push_back(kernel.pointer(type, /*isConst=*/true, *pointer));
  }
  std::string y = kernel.pointer(type, /*isConst=*/false, *out);
  std::string store = "    " + y + "[i] = static_cast<" + type + ">(acc);\n";
  auto shapeOf = [](Value v) { return tensorType(v).getShape(); };

  auto emitConv = [&](Conv2DOp conv) {
    ArrayRef<int64_t> weight = shapeOf(conv.getWeight());
    Window w(shapeOf(conv.getInput()), shapeOf(result), weight.drop_front(2),
             conv.getStrides(), conv.getPadding(), conv.getDilations());
    int64_t groupChannels = weight[1];
    int64_t groupOut = w.outChannels / conv.getGroups();
    int64_t patch = groupChannels * w.kernelH * w.kernelW;
    // out[n, o, oh, ow] = sum over the group's taps (padding reads 0) of
    // weight * input, in the im2col row order, then + bias.
    std::string code = nchw(shapeOf(result), "n", "o", "oh", "ow");
    code +=
        "    const " + type + " *x = " + in[0] + " + (n * " + str(w.channels) +
        " + (o / " + str(groupOut) + ") * " + str(groupChannels) + ") * " +
        str(w.height * w.width) + ";\n" + "    const " + type +
        " *k = " + in[1] + " + o * " + str(patch) + ";\n" +
        "    double acc = 0;\n" + "    for (int64_t ch = 0; ch < " +
        str(groupChannels) + "; ++ch)\n" + "      for (int64_t ki = 0; ki < " +
        str(w.kernelH) + "; ++ki) {\n" + "        const int64_t ih = oh * " +
        str(w.strideH) + " - " + str(w.padTop) + " + ki * " + str(w.dilationH) +
        ";\n" + "        const bool rowInside = ih >= 0 && ih < " +
        str(w.height) + ";\n" + "        for (int64_t kj = 0; kj < " +
        str(w.kernelW) + "; ++kj) {\n" + "          const int64_t iw = ow * " +
        str(w.strideW) + " - " + str(w.padLeft) + " + kj * " +
        str(w.dilationW) + ";\n" +
        "          const double v = rowInside && iw >= 0 && iw < " +
        str(w.width) + " ? double(x[(ch * " + str(w.height) + " + ih) * " +
        str(w.width) + " + iw]) : 0.0;\n" + "          acc += double(k[(ch * " +
        str(w.kernelH) + " + ki) * " + str(w.kernelW) + " + kj]) * v;\n" +
        "        }\n      }\n";
    if (conv.getBias())
      code += "    acc += double(" + in[2] + "[o]);\n";
    // What one output costs: the launch spreads over threads when
    // outputs x work is large (kernel.work, runtime/Kernels.h launch()).
    kernel.work = patch;
    kernel.body = code + store;
    return success();
  };

  auto emitConvInputGrad = [&](Conv2DInputGradOp conv) {
    ArrayRef<int64_t> weight = shapeOf(conv.getWeight());
    Window w(shapeOf(result), shapeOf(conv.getOutputGrad()),
             weight.drop_front(2), conv.getStrides(), conv.getPadding(),
             conv.getDilations());
    int64_t groupChannels = weight[1];
    int64_t groupOut = w.outChannels / conv.getGroups();
    int64_t taps = w.kernelH * w.kernelW;
    // dx[n, c, ih, iw]: for each tap (ki, kj) in order, the output pixel
    // that reads (ih, iw) through it (if any) contributes
    // sum over the group's output channels of weight * dy.
    std::string code = nchw(shapeOf(result), "n", "c", "ih", "iw");
    code += "    const int64_t g = c / " + str(groupChannels) + ", ch = c % " +
            str(groupChannels) + ";\n" + "    const " + type +
            " *dy = " + in[0] + " + (n * " + str(w.outChannels) + " + g * " +
            str(groupOut) + ") * " + str(w.outHeight * w.outWidth) + ";\n" +
            "    const " + type + " *k = " + in[1] + " + (g * " +
            str(groupOut) + " * " + str(groupChannels) + " + ch) * " +
            str(taps) + ";\n" + "    double acc = 0;\n" +
            "    for (int64_t ki = 0; ki < " + str(w.kernelH) + "; ++ki) {\n" +
            "      const int64_t th = ih + " + str(w.padTop) + " - ki * " +
            str(w.dilationH) + ";\n" + "      if (th < 0 || th % " +
            str(w.strideH) + " != 0 || th / " + str(w.strideH) +
            " >= " + str(w.outHeight) + ") continue;\n" +
            "      const int64_t oh = th / " + str(w.strideH) + ";\n" +
            "      for (int64_t kj = 0; kj < " + str(w.kernelW) +
            "; ++kj) {\n" + "        const int64_t tw = iw + " +
            str(w.padLeft) + " - kj * " + str(w.dilationW) + ";\n" +
            "        if (tw < 0 || tw % " + str(w.strideW) + " != 0 || tw / " +
            str(w.strideW) + " >= " + str(w.outWidth) + ") continue;\n" +
            "        const int64_t pixel = oh * " + str(w.outWidth) +
            " + tw / " + str(w.strideW) + ";\n" + "        double sum = 0;\n" +
            "        for (int64_t o = 0; o < " + str(groupOut) + "; ++o)\n" +
            "          sum += double(k[o * " + str(groupChannels * taps) +
            " + ki * " + str(w.kernelW) + " + kj]) * double(dy[o * " +
            str(w.outHeight * w.outWidth) + " + pixel]);\n" +
            "        acc += sum;\n" + "      }\n    }\n";
    kernel.work = taps * groupOut;
    kernel.body = code + store;
    return success();
  };

  auto emitConvWeightGrad = [&](Conv2DWeightGradOp conv) {
    ArrayRef<int64_t> weight = shapeOf(result);
    Window w(shapeOf(conv.getInput()), shapeOf(conv.getOutputGrad()),
             weight.drop_front(2), conv.getStrides(), conv.getPadding(),
             conv.getDilations());
    int64_t groupChannels = weight[1];
    int64_t groupOut = w.outChannels / conv.getGroups();
    int64_t pixels = w.outHeight * w.outWidth;
    // dweight[o, ch, ki, kj]: per image, the sum over output pixels of
    // dy * input (padding reads 0), added image by image.
    std::string code = nchw(weight, "o", "ch", "ki", "kj");
    code += "    const int64_t c = (o / " + str(groupOut) + ") * " +
            str(groupChannels) + " + ch;\n" + "    double acc = 0;\n" +
            "    for (int64_t n = 0; n < " + str(w.batch) + "; ++n) {\n" +
            "      const " + type + " *x = " + in[0] + " + (n * " +
            str(w.channels) + " + c) * " + str(w.height * w.width) + ";\n" +
            "      const " + type + " *dy = " + in[1] + " + (n * " +
            str(w.outChannels) + " + o) * " + str(pixels) + ";\n" +
            "      double sum = 0;\n" + "      for (int64_t oh = 0; oh < " +
            str(w.outHeight) + "; ++oh) {\n" +
            "        const int64_t ih = oh * " + str(w.strideH) + " - " +
            str(w.padTop) + " + ki * " + str(w.dilationH) + ";\n" +
            "        const bool rowInside = ih >= 0 && ih < " + str(w.height) +
            ";\n" + "        for (int64_t ow = 0; ow < " + str(w.outWidth) +
            "; ++ow) {\n" + "          const int64_t iw = ow * " +
            str(w.strideW) + " - " + str(w.padLeft) + " + kj * " +
            str(w.dilationW) + ";\n" +
            "          const double v = rowInside && iw >= 0 && iw < " +
            str(w.width) + " ? double(x[ih * " + str(w.width) +
            " + iw]) : 0.0;\n" + "          sum += double(dy[oh * " +
            str(w.outWidth) + " + ow]) * v;\n" + "        }\n      }\n" +
            "      acc += sum;\n    }\n";
    kernel.work = w.batch * pixels;
    kernel.body = code + store;
    return success();
  };

  auto emitMaxPool = [&](MaxPool2DOp pool) {
    Window w(shapeOf(pool.getInput()), shapeOf(result), pool.getKernel(),
             pool.getStrides(), pool.getPadding(), pool.getDilations());
    std::string code = nchw(shapeOf(result), "", "", "oh", "ow");
    code += "    const " + type + " *src = " + in[0] + " + (i / " +
            str(w.outHeight * w.outWidth) + ") * " + str(w.height * w.width) +
            ";\n" + "    const int64_t h0 = oh * " + str(w.strideH) + " - " +
            str(w.padTop) + ", w0 = ow * " + str(w.strideW) + " - " +
            str(w.padLeft) + ";\n" + "    int64_t position = -1;\n" +
            argmaxCode(w, "src", "h0", "w0", "position", "    ") + "    " + y +
            "[i] = position < 0 ? static_cast<" + type +
            ">(-HUGE_VAL) : src[position];\n";
    kernel.work = w.kernelH * w.kernelW;
    kernel.body = code;
    return success();
  };

  auto emitMaxPoolGrad = [&](MaxPool2DGradOp pool) {
    Window w(shapeOf(pool.getInput()), shapeOf(pool.getOutputGrad()),
             pool.getKernel(), pool.getStrides(), pool.getPadding(),
             pool.getDilations());
    int64_t outPlane = w.outHeight * w.outWidth;
    // dx[n, c, ih, iw]: dy of every window (row-major) whose argmax is here.
    std::string code = nchw(shapeOf(result), "", "", "ih", "iw");
    code +=
        "    const int64_t plane = i / " + str(w.height * w.width) +
        ", here = ih * " + str(w.width) + " + iw;\n" + "    const " + type +
        " *src = " + in[0] + " + plane * " + str(w.height * w.width) + ";\n" +
        "    const " + type + " *dy = " + in[1] + " + plane * " +
        str(outPlane) + ";\n" + "    double acc = 0;\n" +
        windowRange("ohLo", "ohHi", "ih", w.strideH, w.padTop,
                    (w.kernelH - 1) * w.dilationH + 1, w.outHeight, "    ") +
        windowRange("owLo", "owHi", "iw", w.strideW, w.padLeft,
                    (w.kernelW - 1) * w.dilationW + 1, w.outWidth, "    ") +
        "    for (int64_t oh = ohLo; oh <= ohHi; ++oh) {\n" +
        "      const int64_t h0 = oh * " + str(w.strideH) + " - " +
        str(w.padTop) + ";\n" + "      if ((ih - h0) % " + str(w.dilationH) +
        " != 0) continue;\n" +
        "      for (int64_t ow = owLo; ow <= owHi; ++ow) {\n" +
        "        const int64_t w0 = ow * " + str(w.strideW) + " - " +
        str(w.padLeft) + ";\n" + "        if ((iw - w0) % " + str(w.dilationW) +
        " != 0) continue;\n" + "        int64_t position = -1;\n" +
        argmaxCode(w, "src", "h0", "w0", "position", "        ") +
        "        if (position == here) acc += double(dy[oh * " +
        str(w.outWidth) + " + ow]);\n" + "      }\n    }\n";
    kernel.work = w.kernelH * w.kernelW;
    kernel.body = code + store;
    return success();
  };

  auto emitAvgPool = [&](AvgPool2DOp pool) {
    Window w(shapeOf(pool.getInput()), shapeOf(result), pool.getKernel(),
             pool.getStrides(), pool.getPadding());
    std::string code = nchw(shapeOf(result), "", "", "oh", "ow");
    code += "    const " + type + " *src = " + in[0] + " + (i / " +
            str(w.outHeight * w.outWidth) + ") * " + str(w.height * w.width) +
            ";\n" + "    const int64_t h0 = oh * " + str(w.strideH) + " - " +
            str(w.padTop) + ", w0 = ow * " + str(w.strideW) + " - " +
            str(w.padLeft) + ";\n" +
            avgWindowCode(w, pool.getCountIncludePad(), "    ") +
            "    double acc = 0;\n" +
            "    for (int64_t ih = hBegin; ih < hEnd; ++ih)\n" +
            "      for (int64_t iw = wBegin; iw < wEnd; ++iw)\n" +
            "        acc += double(src[ih * " + str(w.width) + " + iw]);\n" +
            "    acc = acc / divisor;\n";
    kernel.work = w.kernelH * w.kernelW;
    kernel.body = code + store;
    return success();
  };

  auto emitAvgPoolGrad = [&](AvgPool2DGradOp pool) {
    Window w(shapeOf(result), shapeOf(pool.getOutputGrad()), pool.getKernel(),
             pool.getStrides(), pool.getPadding());
    // dx[n, c, ih, iw]: dy / divisor of every window (row-major) holding it.
    std::string code = nchw(shapeOf(result), "", "", "ih", "iw");
    code += "    const " + type + " *dy = " + in[0] + " + (i / " +
            str(w.height * w.width) + ") * " + str(w.outHeight * w.outWidth) +
            ";\n" + "    double acc = 0;\n" +
            windowRange("ohLo", "ohHi", "ih", w.strideH, w.padTop, w.kernelH,
                        w.outHeight, "    ") +
            windowRange("owLo", "owHi", "iw", w.strideW, w.padLeft, w.kernelW,
                        w.outWidth, "    ") +
            "    for (int64_t oh = ohLo; oh <= ohHi; ++oh)\n" +
            "      for (int64_t ow = owLo; ow <= owHi; ++ow) {\n" +
            "        const int64_t h0 = oh * " + str(w.strideH) + " - " +
            str(w.padTop) + ", w0 = ow * " + str(w.strideW) + " - " +
            str(w.padLeft) + ";\n" +
            avgWindowCode(w, pool.getCountIncludePad(), "        ") +
            "        acc += double(dy[oh * " + str(w.outWidth) +
            " + ow]) / divisor;\n" + "      }\n";
    kernel.work = w.kernelH * w.kernelW;
    kernel.body = code + store;
    return success();
  };

  LogicalResult emitted =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](Conv2DOp conv) { return emitConv(conv); })
          .Case([&](Conv2DInputGradOp conv) { return emitConvInputGrad(conv); })
          .Case(
              [&](Conv2DWeightGradOp conv) { return emitConvWeightGrad(conv); })
          .Case([&](MaxPool2DOp pool) { return emitMaxPool(pool); })
          .Case([&](MaxPool2DGradOp pool) { return emitMaxPoolGrad(pool); })
          .Case([&](AvgPool2DOp pool) { return emitAvgPool(pool); })
          .Case([&](AvgPool2DGradOp pool) { return emitAvgPoolGrad(pool); })
          .Default([](Operation *op) {
            return op->emitError() << "code generation: '" << op->getName()
                                   << "' is not a window op";
          });
  if (failed(emitted))
    return failure();
  launch(kernel, count);
  return success();
}
