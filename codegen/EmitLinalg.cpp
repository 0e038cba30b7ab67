//===- EmitLinalg.cpp - GEMMs, reductions, normalization, losses ---------===//
//
// The emitter's GEMM calls (strided views, batches, epilogues), reductions,
// softmax, layer norm and the losses.  Emitter.cpp walks the step and calls
// these.
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterInternal.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::codegen;

namespace sharc::codegen {

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

FailureOr<ProgramEmitter::StridedView>
ProgramEmitter::stridedView(Value value) {
  StridedView view;
  view.shape.assign(tensorType(value).getShape().begin(),
                    tensorType(value).getShape().end());
  // A transpose marked by sharc-fuse's gemm-views is read in place: its
  // dimensions walk its operand's row-major memory in permuted order.
  if (auto transpose = value.getDefiningOp<TransposeOp>();
      transpose && transpose->hasAttr("sharc.fuse_into")) {
    FailureOr<std::string> pointer = typedPointer(transpose.getOperand());
    if (failed(pointer))
      return failure();
    SmallVector<int64_t> source =
        rowMajorStrides(tensorType(transpose.getOperand()).getShape());
    view.pointer = *pointer;
    for (int64_t p : transpose.getPermutation())
      view.strides.push_back(source[p]);
    return view;
  }
  FailureOr<std::string> pointer = typedPointer(value);
  if (failed(pointer))
    return failure();
  view.pointer = *pointer;
  view.strides = rowMajorStrides(view.shape);
  // A transpose written by the GEMM that feeds it (gemm-views): the product
  // lands in the transpose's memory, permuted.
  if (auto transpose = value.getDefiningOp<TransposeOp>();
      transpose && transpose->hasAttr("sharc.gemm_output")) {
    SmallVector<int64_t> permuted = view.strides;
    ArrayRef<int64_t> permutation = transpose.getPermutation();
    view.shape.assign(tensorType(transpose.getOperand()).getShape().begin(),
                      tensorType(transpose.getOperand()).getShape().end());
    for (auto [k, p] : llvm::enumerate(permutation))
      view.strides[p] = permuted[k];
  }
  return view;
}

LogicalResult ProgramEmitter::emitMatmul(MatmulOp op, Value result,
                                         const GemmEpilogue &epilogue) {
  if (!result)
    result = op.getResult();
  auto out = tensorType(op.getResult());
  Type element = out.getElementType();
  if (!isFloatType(element))
    return op.emitError() << "code generation: matmul of " << element
                          << " is not supported yet";
  FailureOr<StridedView> a = stridedView(op.getLhs()),
                         b = stridedView(op.getRhs()), c = stridedView(result);
  if (failed(a) || failed(b) || failed(c))
    return failure();
  int64_t rank = out.getRank();
  int64_t m = out.getDimSize(rank - 2), n = out.getShape().back();
  bool transA = op.getTransposeLhs(), transB = op.getTransposeRhs();
  int64_t k = transA ? a->shape[a->shape.size() - 2] : a->shape.back();
  // The leading dimension of an operand's matrix as BLAS stores it: rows
  // with unit-stride columns, or (flipping its transpose flag) columns with
  // unit-stride rows.
  auto leading = [&](const StridedView &view,
                     bool &transposed) -> std::optional<int64_t> {
    size_t r = view.shape.size();
    int64_t rows = view.shape[r - 2], cols = view.shape[r - 1];
    int64_t rowStride = view.strides[r - 2], colStride = view.strides[r - 1];
    if (colStride == 1 || cols == 1)
      return std::max<int64_t>({rowStride, cols, 1});
    if (rowStride == 1 || rows == 1) {
      transposed = !transposed;
      return std::max<int64_t>({colStride, rows, 1});
    }
    return std::nullopt;
  };
  std::optional<int64_t> lda = leading(*a, transA), ldb = leading(*b, transB);
  bool transC = false;
  std::optional<int64_t> ldc = leading(*c, transC);
  if (!lda || !ldb || !ldc || transC)
    return op.emitError() << "code generation: a matmul operand or result "
                             "has no unit-stride matrix dimension";
  // Batch dimensions (numpy-broadcast, right-aligned): size and the stride
  // of A, B and C along each (0 where an operand is broadcast).  Size-1
  // dimensions are dropped and adjacent ones merged where all three are
  // contiguous across them.
  struct Dim {
    int64_t size, a, b, c;
  };
  auto batchStride = [&](const StridedView &view, int64_t d) -> int64_t {
    int64_t offset = (rank - 2) - (int64_t(view.shape.size()) - 2);
    int64_t own = d - offset;
    if (own < 0 || view.shape[own] == 1)
      return 0;
    return view.strides[own];
  };
  SmallVector<Dim> dims;
  for (int64_t d = 0; d + 2 < rank; ++d) {
    if (out.getDimSize(d) == 1)
      continue;
    Dim dim{out.getDimSize(d), batchStride(*a, d), batchStride(*b, d),
            batchStride(*c, d)};
    if (!dims.empty()) {
      Dim &outer = dims.back();
      if (outer.a == dim.a * dim.size && outer.b == dim.b * dim.size &&
          outer.c == dim.c * dim.size) {
        outer.size *= dim.size;
        outer.a = dim.a, outer.b = dim.b, outer.c = dim.c;
        continue;
      }
    }
    dims.push_back(dim);
  }
  // A batch of stacked row-major lhs matrices times one rhs, into stacked
  // result matrices, is one taller GEMM: the rhs is packed once.
  while (!dims.empty() && !transA && dims.back().b == 0 &&
         dims.back().a == m * *lda && dims.back().c == m * *ldc) {
    m *= dims.back().size;
    dims.pop_back();
  }
  Dim inner = dims.empty() ? Dim{1, 0, 0, 0} : dims.pop_back_val();
  Dim outer = dims.empty() ? Dim{1, 0, 0, 0} : dims.pop_back_val();
  std::string offsetA, offsetB, offsetC;
  std::string code = "  {\n";
  std::string indent = "    ";
  int64_t calls = 1;
  for (auto [d, dim] : llvm::enumerate(dims)) {
    std::string var = "b" + str(d);
    code += indent + "for (int64_t " + var + " = 0; " + var + " < " +
            str(dim.size) + "; ++" + var + ") {\n";
    indent += "  ";
    offsetA += " + " + var + " * " + str(dim.a);
    offsetB += " + " + var + " * " + str(dim.b);
    offsetC += " + " + var + " * " + str(dim.c);
    calls *= dim.size;
  }
  std::string type = element.isF32()    ? "f32"
                     : element.isF16()  ? "f16"
                     : element.isBF16() ? "bf16"
                                        : "f64";
  code += indent + "sharc::rt::GemmArgs args;\n" + indent +
          "args.type = sharc::rt::DType::" + type + ";\n" + indent +
          "args.transA = " + (transA ? "true" : "false") +
          "; args.transB = " + (transB ? "true" : "false") + ";\n" + indent +
          "args.m = " + str(m) + "; args.n = " + str(n) +
          "; args.k = " + str(k) + ";\n" + indent + "args.a = " + a->pointer +
          offsetA + "; args.lda = " + str(*lda) +
          "; args.strideA = " + str(inner.a) + ";\n" + indent +
          "args.b = " + b->pointer + offsetB + "; args.ldb = " + str(*ldb) +
          "; args.strideB = " + str(inner.b) + ";\n" + indent +
          "args.c = " + c->pointer + offsetC + "; args.ldc = " + str(*ldc) +
          "; args.strideC = " + str(inner.c) + ";\n" + indent +
          "args.batch = " + str(inner.size) + ";\n";
  if (outer.size > 1)
    code += indent + "args.outerBatch = " + str(outer.size) +
            "; args.outerStrideA = " + str(outer.a) +
            "; args.outerStrideB = " + str(outer.b) +
            "; args.outerStrideC = " + str(outer.c) + ";\n";
  if (epilogue.bias) {
    FailureOr<std::string> pointer = typedPointer(epilogue.bias);
    if (failed(pointer))
      return failure();
    code += indent + "args.bias = " + *pointer + ";\n";
  }
  if (epilogue.activation != GemmActivation::none)
    code +=
        indent + "args.activation = sharc::rt::GemmActivation::" +
        (epilogue.activation == GemmActivation::relu ? "relu" : "geluTanh") +
        ";\n";
  if (epilogue.aux) {
    // The pre-activation has the output's layout (both plain results).
    FailureOr<StridedView> aux = stridedView(epilogue.aux);
    if (failed(aux))
      return failure();
    if (aux->strides != c->strides || aux->shape != c->shape)
      return op.emitError() << "code generation: a GEMM's pre-activation "
                               "output must have the layout of its result";
    code += indent + "args.aux = " + aux->pointer + offsetC + ";\n";
  }
  code += indent + "sharc::kern::gemm(ctx, args);\n";
  for (size_t d = 0; d < dims.size(); ++d) {
    indent.resize(indent.size() - 2);
    code += indent + "}\n";
  }
  body() += code + "  }\n";
  report.numGemmCalls += calls * repeat;
  ++computeCalls;
  if (epilogue.bias || epilogue.activation != GemmActivation::none)
    report.numGemmEpilogues += calls * repeat;
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and normalization
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitReduce(ReduceOp op) {
  auto inType = tensorType(op.getOperand());
  ArrayRef<int64_t> shape = inType.getShape();
  SmallVector<int64_t> strides = rowMajorStrides(shape);
  llvm::SmallDenseSet<int64_t> reduced(op.getAxes().begin(),
                                       op.getAxes().end());
  int64_t count = 1;
  for (int64_t axis : op.getAxes())
    count *= shape[axis];
  bool fp = isFloatType(inType.getElementType());
  ReduceKind kind = op.getKind();
  if (kind == ReduceKind::max && count == 0 &&
      tensorType(op.getResult()).getNumElements() > 0)
    return op.emitError() << "max reduction over an empty dimension";
  FailureOr<std::string> out = typedPointer(op.getResult());
  if (failed(out))
    return failure();
  KernelText kernel;
  std::string type = storageType(inType.getElementType());
  // Float inputs may be computed in the kernel (a fused producer); integer
  // ones are loaded as they are.
  Loader load;
  if (fp) {
    FailureOr<Loader> loader = rowInput(kernel, op.getOperand());
    if (failed(loader))
      return failure();
    load = *loader;
  } else {
    FailureOr<std::string> in = typedPointer(op.getOperand());
    if (failed(in))
      return failure();
    std::string src = kernel.pointer(type, true, *in);
    load = [src](StringRef index) {
      return "int64_t(" + src + "[" + index.str() + "])";
    };
  }
  std::string dst = kernel.pointer(type, false, *out);
  // Float sums add each output's inputs in sharc::math::laneSum's order (the
  // evaluator's): 16 interleaved lanes over the reduced elements in
  // row-major order.  Reducing the leading axes (bias gradients: a sum over
  // batch and sequence) is a column sum: one call per block of 16 adjacent
  // outputs walks the rows once, with 16 lanes of 16 columns, so that the
  // loop over a row's columns vectorizes.
  int64_t leading = static_cast<int64_t>(reduced.size());
  bool leadingOnly =
      fp && kind != ReduceKind::max && leading > 0 &&
      leading < static_cast<int64_t>(shape.size()) &&
      llvm::all_of(reduced, [&](int64_t axis) { return axis < leading; });
  if (leadingOnly) {
    int64_t columns = numElements(shape.drop_front(leading));
    constexpr int64_t block = 16;
    std::string n = str(columns), b = str(block);
    std::string lanes = "sharc::math::kSumLanes";
    int64_t whole = count - count % 16;
    kernel.body =
        "    static_assert(" + lanes + " == 16, \"lane count\");\n" +
        "    const int64_t j0 = i * " + b + ", width = " + n + " - j0 < " + b +
        " ? " + n + " - j0 : " + b + ";\n" + "    double lane[16][" + b +
        "] = {};\n" + "    for (int64_t r0 = 0; r0 < " + str(whole) +
        "; r0 += 16)\n" + "      for (int64_t l = 0; l < 16; ++l)\n" +
        "        for (int64_t k = 0; k < width; ++k) lane[l][k] += " +
        load("(r0 + l) * " + n + " + j0 + k") + ";\n" + "    double acc[" + b +
        "] = {};\n" + "    for (int64_t l = 0; l < 16; ++l)\n" +
        "      for (int64_t k = 0; k < width; ++k) acc[k] += lane[l][k];\n" +
        "    for (int64_t r = " + str(whole) + "; r < " + str(count) +
        "; ++r)\n" + "      for (int64_t k = 0; k < width; ++k) acc[k] += " +
        load("r * " + n + " + j0 + k") + ";\n" +
        "    for (int64_t k = 0; k < width; ++k) " + dst +
        "[j0 + k] = " + "static_cast<" + type + ">(acc[k]" +
        (kind == ReduceKind::mean ? " / " + str(count) + ".0" : "") + ");\n";
    kernel.work = count * block;
    launch(kernel, (columns + block - 1) / block);
    return success();
  }
  // Kept coordinates of output element i (innermost kept dim varies fastest).
  std::string code;
  if (reduced.size() == shape.size()) {
    code = "    const int64_t base = 0;\n";
  } else {
    code = "    int64_t rest = i, base = 0;\n";
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (reduced.contains(d))
        continue;
      code += "    base += (rest % " + str(shape[d]) + ") * " +
              str(strides[d]) + "; rest /= " + str(shape[d]) + ";\n";
    }
  }
  std::string acc = fp ? "double" : "int64_t";
  std::string init =
      kind == ReduceKind::max
          ? (fp ? "-HUGE_VAL" : "(-INT64_C(9223372036854775807) - 1)")
          : (fp ? "0.0" : "INT64_C(0)");
  if (fp && kind != ReduceKind::max && count == 0) {
    code += "    double acc = 0.0;\n";
  } else if (fp && kind != ReduceKind::max) {
    // The reduced elements' offset from element r of their row-major order;
    // reduced axes that are contiguous in memory are merged first.
    SmallVector<std::pair<int64_t, int64_t>> groups; // (size, stride)
    for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis) {
      if (!reduced.contains(axis))
        continue;
      if (!groups.empty() &&
          groups.back().second == strides[axis] * shape[axis] &&
          reduced.contains(axis - 1)) {
        groups.back() = {groups.back().first * shape[axis], strides[axis]};
        continue;
      }
      groups.push_back({shape[axis], strides[axis]});
    }
    std::string offset;
    if (groups.size() == 1) {
      offset = "r * " + str(groups.front().second);
    } else {
      code += "    const auto offsetOf = [](int64_t r) {\n"
              "      int64_t off = 0;\n";
      for (auto [size, stride] : llvm::reverse(groups))
        code += "      off += (r % " + str(size) + ") * " + str(stride) +
                "; r /= " + str(size) + ";\n";
      code += "      return off;\n    };\n";
      offset = "offsetOf(r)";
    }
    code += "    double acc = sharc::math::laneSum(" + str(count) +
            ", [&](int64_t r) { return " + load("base + " + offset) + "; });\n";
  } else {
    code += "    " + acc + " acc = " + init + ";\n";
    std::string offset = "base";
    std::string indent = "    ";
    for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis) {
      if (!reduced.contains(axis))
        continue;
      std::string r = "r" + str(axis);
      code += indent + "for (int64_t " + r + " = 0; " + r + " < " +
              str(shape[axis]) + "; ++" + r + ")\n";
      indent += "  ";
      offset += " + " + r + " * " + str(strides[axis]);
    }
    std::string x = load(offset);
    if (kind == ReduceKind::max)
      code += indent + "{ const " + acc + " x = " + x + "; " +
              (fp ? "if (x != x || x > acc) acc = x; }\n"
                  : "if (x > acc) acc = x; }\n");
    else
      code += indent + "acc = wrapAdd(acc, " + x + ");\n";
  }
  if (kind == ReduceKind::mean)
    code += "    acc /= " + str(count) + ".0;\n";
  code += "    " + dst + "[i] = static_cast<" + type + ">(acc);\n";
  kernel.body = code;
  kernel.work = count;
  launch(kernel, tensorType(op.getResult()).getNumElements());
  return success();
}

/// Rows up to this length are kept in a stack array by the softmax kernels.
constexpr int64_t kRowBuffer = 1024;

LogicalResult ProgramEmitter::emitSoftmax(Operation *op, int64_t axis,
                                          bool log) {
  Value input = op->getOperand(0), result = op->getResult(0);
  ArrayRef<int64_t> shape = tensorType(input).getShape();
  int64_t length = shape[axis];
  int64_t inner = numElements(shape.drop_front(axis + 1));
  int64_t rows = numElements(shape) / std::max<int64_t>(1, length);
  FailureOr<std::string> out = typedPointer(result);
  if (failed(out))
    return failure();
  KernelText kernel;
  std::string type = storageType(elementOf(result));
  FailureOr<Loader> x = rowInput(kernel, input);
  if (failed(x))
    return failure();
  std::string y = kernel.pointer(type, false, *out);
  std::string at = "(i / " + str(inner) + ") * " + str(length * inner) +
                   " + i % " + str(inner);
  std::string step = str(inner), len = str(length);
  std::string load = (*x)("base + c * " + step);
  std::string store =
      y + "[base + c * " + step + "] = static_cast<" + type + ">(";
  // The row's maximum and sum run in independent lanes (rowMax, laneSum: the
  // evaluator's order), so these loops vectorize.
  std::string body = "    const int64_t base = " + at + ";\n";
  auto loop = [&](StringRef count, StringRef statement) {
    return "    for (int64_t c = 0; c < " + count.str() + "; ++c) " +
           statement.str() + "\n";
  };
  if (length <= kRowBuffer) {
    // The row is read once into x[] (its prologue computed once per element).
    body += "    double x[" + len + "], e[" + len + "];\n" +
            loop(len, "x[c] = " + load + ";") +
            "    const double max = sharc::kern::rowMax(" + len +
            ", [&](int64_t c) { return x[c]; });\n" +
            loop(len, "e[c] = sharc::math::exp(x[c] - max);") +
            "    const double sum = sharc::math::laneSum(" + len +
            ", [&](int64_t c) { return e[c]; });\n";
    if (log)
      body += "    const double logSum = log(sum);\n" +
              loop(len, store + "x[c] - max - logSum);");
    else
      body += loop(len, store + "e[c] / sum);");
  } else {
    body += "    const double max = sharc::kern::rowMax(" + len +
            ", [&](int64_t c) { return double(" + load + "); });\n" +
            "    const double sum = sharc::math::laneSum(" + len +
            ", [&](int64_t c) { return sharc::math::exp(" + load +
            " - max); });\n";
    if (log)
      body += "    const double logSum = log(sum);\n" +
              loop(len, store + load + " - max - logSum);");
    else
      body += loop(len, store + "sharc::math::exp(" + load + " - max) / sum);");
  }
  kernel.body = body;
  kernel.work = 3 * length;
  launch(kernel, rows);
  return success();
}

LogicalResult ProgramEmitter::emitLayerNorm(LayerNormOp op) {
  ArrayRef<int64_t> shape = tensorType(op.getOperand()).getShape();
  int64_t axis = op.getAxis();
  ArrayRef<int64_t> normalized = shape.drop_front(axis);
  int64_t size = numElements(normalized);
  int64_t rows = numElements(shape.take_front(axis));
  double epsilon = op.getEpsilon().convertToDouble();
  FailureOr<std::string> scale = typedPointer(op.getScale()),
                         y = typedPointer(op.getResult()),
                         mean = typedPointer(op.getMean()),
                         invStd = typedPointer(op.getInvStd());
  if (failed(scale) || failed(y) || failed(mean) || failed(invStd))
    return failure();
  KernelText kernel;
  std::string type = storageType(elementOf(op.getResult()));
  FailureOr<Loader> x = rowInput(kernel, op.getOperand());
  if (failed(x))
    return failure();
  std::string s = kernel.pointer(type, true, *scale);
  std::string scaleAt =
      s + "[" +
      broadcastIndex(tensorType(op.getScale()).getShape(), normalized, "j") +
      "]";
  std::string biasAt = "0.0";
  if (Value bias = op.getBias()) {
    FailureOr<std::string> b = typedPointer(bias);
    if (failed(b))
      return failure();
    std::string member = kernel.pointer(type, true, *b);
    biasAt = "double(" + member + "[" +
             broadcastIndex(tensorType(bias).getShape(), normalized, "j") +
             "])";
  }
  std::string out = kernel.pointer(type, false, *y);
  std::string meanOut = kernel.pointer(type, false, *mean);
  std::string invOut = kernel.pointer(type, false, *invStd);
  std::string n = str(size);
  std::string at = (*x)("i * " + n + " + j");
  kernel.body = "    const double mean = sharc::math::laneSum(" + n +
                ", [&](int64_t j) { return " + at + "; }) / " + n + ".0;\n" +
                "    const double squares = sharc::math::laneSum(" + n +
                ", [&](int64_t j) { const double d = " + at +
                " - mean; return d * d; });\n" +
                "    const double invStd = 1 / sqrt(squares / " + n + ".0 + " +
                doubleLiteral(epsilon) + ");\n" +
                "    for (int64_t j = 0; j < " + n + "; ++j)\n" + "      " +
                out + "[i * " + n + " + j] = static_cast<" + type + ">((" + at +
                " - mean) * invStd * double(" + scaleAt + ") + " + biasAt +
                ");\n" + "    " + meanOut + "[i] = static_cast<" + type +
                ">(mean);\n" + "    " + invOut + "[i] = static_cast<" + type +
                ">(invStd);\n";
  kernel.work = 3 * size;
  launch(kernel, rows);
  return success();
}

LogicalResult ProgramEmitter::emitLoss(Operation *op, Value input, Value target,
                                       Value weight, LossReduction reduction,
                                       std::optional<uint64_t> ignoreIndex,
                                       bool fromLogits) {
  ArrayRef<int64_t> shape = tensorType(input).getShape();
  int64_t batch = shape[0], classes = shape[1];
  int64_t spatial = numElements(shape.drop_front(2));
  FailureOr<std::string> in = typedPointer(input),
                         targets = typedPointer(target),
                         out = typedPointer(op->getResult(0));
  if (failed(in) || failed(targets) || failed(out))
    return failure();
  std::string location;
  llvm::raw_string_ostream os(location);
  op->getLoc().print(os);
  int code = errorCode("a loss target is not a class index in [0, " +
                       str(classes) + ") in " + location);
  KernelText kernel;
  std::string type = storageType(elementOf(input));
  std::string x = kernel.pointer(type, true, *in);
  std::string t =
      kernel.pointer(storageType(elementOf(target)), true, *targets);
  std::string w;
  if (weight) {
    FailureOr<std::string> wp = typedPointer(weight);
    if (failed(wp))
      return failure();
    w = kernel.pointer(type, true, *wp);
  }
  std::string y = kernel.pointer(type, false, *out);
  // One position: its loss and weight (0 when ignored).
  std::string position = "      const int64_t n = position / " + str(spatial) +
                         ", d = position % " + str(spatial) + ";\n" +
                         "      const int64_t t = int64_t(" + t +
                         "[position]);\n" + "      double loss = 0, w = 0;\n";
  std::string body = "      {\n";
  if (ignoreIndex)
    body = "      if (t != " + intLiteral(static_cast<int64_t>(*ignoreIndex)) +
           ") {\n";
  body += "        if (t < 0 || t >= " + str(classes) + ") { raise(" +
          str(code) + "); } else {\n";
  std::string at =
      x + "[(n * " + str(classes) + " + c) * " + str(spatial) + " + d]";
  std::string atTarget =
      x + "[(n * " + str(classes) + " + t) * " + str(spatial) + " + d]";
  body += "        double logProb = double(" + atTarget + ");\n";
  if (fromLogits)
    body += "        const double max = sharc::kern::rowMax(" + str(classes) +
            ", [&](int64_t c) { return double(" + at +
            "); });\n"
            "        const double sum = sharc::math::laneSum(" +
            str(classes) +
            ", [&](int64_t c) { return sharc::math::exp(double(" + at +
            ") - max); });\n" + "        logProb = logProb - max - log(sum);\n";
  body +=
      "        w = " + (weight ? "double(" + w + "[t])" : std::string("1.0")) +
      ";\n        loss = -logProb * w;\n        }\n      }\n";
  if (reduction == LossReduction::none) {
    kernel.body = "      const int64_t position = i;\n" + position + body +
                  "      " + y + "[i] = static_cast<" + type + ">(loss);\n";
    kernel.work = 3 * classes;
    launch(kernel, batch * spatial);
    return success();
  }
  std::string result =
      reduction == LossReduction::mean ? "total / weightSum" : "total";
  if (auto scratch = op->getAttrOfType<IntegerAttr>("sharc.scratch_offset")) {
    // sum / mean with scratch space: every position's loss and weight in
    // parallel, then one in-order sum (the evaluator's order, so the same
    // double sums).
    std::string at = "(ctx->arena + " + str(scratch.getInt()) + ")";
    std::string parts =
        kernel.pointer("double", false, "reinterpret_cast<double *>" + at);
    kernel.body = "      const int64_t position = i;\n" + position + body +
                  "      " + parts + "[2 * i] = loss;\n      " + parts +
                  "[2 * i + 1] = w;\n";
    kernel.work = 3 * classes;
    launch(kernel, batch * spatial);
    KernelText sum;
    std::string in =
        sum.pointer("double", true, "reinterpret_cast<const double *>" + at);
    std::string out = sum.pointer(type, false, *typedPointer(op->getResult(0)));
    sum.body = "    double total = 0, weightSum = 0;\n"
               "    for (int64_t p = 0; p < " +
               str(batch * spatial) + "; ++p) { total += " + in +
               "[2 * p]; weightSum += " + in + "[2 * p + 1]; }\n" + "    " +
               out + "[0] = static_cast<" + type + ">(" + result + ");\n";
    launch(sum, 1);
    return success();
  }
  // sum / mean without scratch space: one sequential pass.
  kernel.body = "    double total = 0, weightSum = 0;\n"
                "    for (int64_t position = 0; position < " +
                str(batch * spatial) + "; ++position) {\n" + position + body +
                "      total += loss; weightSum += w;\n    }\n" + "    " + y +
                "[0] = static_cast<" + type + ">(" + result + ");\n";
  launch(kernel, 1);
  return success();
}

} // namespace sharc::codegen
