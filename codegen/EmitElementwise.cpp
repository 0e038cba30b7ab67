//===- EmitElementwise.cpp - Elementwise kernels and data movement -------===//
//
// The emitter's elementwise groups (a kernel per sharc.fusion, GEMM
// epilogues), copies, index maps, concatenation, insertion, gather and
// scatter-add.  Emitter.cpp walks the step and calls these.
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
// Elementwise
//===----------------------------------------------------------------------===//

FailureOr<std::string> ProgramEmitter::scalarExpr(Operation *op,
                                                  ArrayRef<std::string> x) {
  Type result = elementOf(op->getResult(0));
  Type operand = elementOf(op->getOperand(0));
  bool fp = isFloatType(operand);
  std::string a = x.size() > 0 ? x[0] : "", b = x.size() > 1 ? x[1] : "";
  auto fn = [&](StringRef name) { return name.str() + "(" + a + ")"; };
  auto fn2 = [&](StringRef name) {
    return name.str() + "(" + a + ", " + b + ")";
  };
  // Functions that are not exactly rounded in f32 take their argument as a
  // double, as the evaluator computes them, whatever the operand's type.
  auto dfn = [&](StringRef name) { return name.str() + "(double(" + a + "))"; };
  auto location = [&] {
    std::string text;
    llvm::raw_string_ostream os(text);
    op->getLoc().print(os);
    return text;
  };
  std::optional<std::string> expr =
      llvm::TypeSwitch<Operation *, std::optional<std::string>>(op)
          .Case([&](NegOp) { return fp ? "(-" + a + ")" : fn("wrapNeg"); })
          .Case([&](AbsOp) { return fp ? dfn("fabs") : fn("iabs"); })
          .Case([&](ReluOp) {
            return fp ? fn("relu") : "imax(" + a + ", INT64_C(0))";
          })
          .Case([&](ExpOp) { return dfn("sharc::math::exp"); })
          .Case([&](LogOp) { return dfn("log"); })
          .Case([&](SqrtOp) {
            // sqrt is exactly rounded, so f32 may stay in float.
            return operand.isF32() ? fn("sqrtf") : dfn("sqrt");
          })
          .Case([&](RsqrtOp) { return "(1.0 / sqrt(double(" + a + ")))"; })
          .Case([&](ErfOp) { return dfn("sharc::math::erf"); })
          .Case([&](TanhOp) { return dfn("sharc::math::tanh"); })
          .Case([&](SigmoidOp) { return dfn("sigmoid"); })
          .Case([&](SinOp) { return dfn("sin"); })
          .Case([&](AsinOp) { return dfn("asin"); })
          .Case([&](AcosOp) { return dfn("acos"); })
          .Case([&](AtanOp) { return dfn("atan"); })
          .Case([&](AsinhOp) { return dfn("asinh"); })
          .Case([&](AcoshOp) { return dfn("acosh"); })
          .Case([&](AtanhOp) { return dfn("atanh"); })
          .Case([&](CosOp) { return dfn("cos"); })
          .Case([&](FloorOp) { return dfn("floor"); })
          .Case([&](NotOp) { return "int64_t(!" + a + ")"; })
          .Case([&](GeluOp g) {
            return g.getApproximation() == GeluApproximation::tanh
                       ? dfn("geluTanh")
                       : dfn("geluErf");
          })
          .Case([&](CastOp) -> std::string {
            if (isFloatType(result))
              return fp ? a : "static_cast<double>(" + a + ")";
            // Float to bool is `x != 0` (NaN is true), as the evaluator.
            if (fp && result.isInteger(1))
              return "int64_t(" + a + " != 0.0)";
            return fp ? dfn("ftoi") : a;
          })
          .Case([&](AddOp) {
            return fp ? "(" + a + " + " + b + ")" : fn2("wrapAdd");
          })
          .Case([&](SubOp) {
            return fp ? "(" + a + " - " + b + ")" : fn2("wrapSub");
          })
          .Case([&](MulOp) {
            return fp ? "(" + a + " * " + b + ")" : fn2("wrapMul");
          })
          .Case([&](DivOp) -> std::string {
            if (fp)
              return "(" + a + " / " + b + ")";
            int code = errorCode("integer division by zero in " + location());
            return "truncDiv(" + a + ", " + b + ", " + str(code) + ")";
          })
          .Case([&](PowOp) -> std::string {
            if (fp)
              return "pow(double(" + a + "), double(" + b + "))";
            int code = errorCode("integer zero raised to a negative power in " +
                                 location());
            return "ipow(" + a + ", " + b + ", " + str(code) + ")";
          })
          .Case([&](MaxOp) { return fp ? fn2("fmaxNan") : fn2("imax"); })
          .Case([&](MinOp) { return fp ? fn2("fminNan") : fn2("imin"); })
          .Case([&](AndOp) { return "int64_t(" + a + " && " + b + ")"; })
          .Case([&](OrOp) { return "int64_t(" + a + " || " + b + ")"; })
          .Case([&](CompareOp c) {
            StringRef symbol;
            switch (c.getPredicate()) {
            case ComparePredicate::eq:
              symbol = "==";
              break;
            case ComparePredicate::ne:
              symbol = "!=";
              break;
            case ComparePredicate::lt:
              symbol = "<";
              break;
            case ComparePredicate::le:
              symbol = "<=";
              break;
            case ComparePredicate::gt:
              symbol = ">";
              break;
            case ComparePredicate::ge:
              symbol = ">=";
              break;
            }
            return "int64_t(" + a + " " + symbol.str() + " " + b + ")";
          })
          .Case([&](SelectOp) {
            return "(" + a + " ? " + b + " : " + x[2] + ")";
          })
          .Default([](Operation *) { return std::nullopt; });
  if (!expr)
    return op->emitError() << "code generation: not an elementwise op";
  // Round (floats) or wrap (integers) to the result type, as the evaluator.
  // f32 values are computed in float: +, -, *, / (and the ops that only
  // compare, select or negate) rounded once to f32 give the same bits as in
  // double rounded to f32 (double has more than 2 x 24 + 2 bits), so only the
  // functions above go through double.
  if (result.isF32())
    return "float(" + *expr + ")";
  if (result.isF16())
    return "sharc::kern::roundF16(" + *expr + ")";
  if (result.isBF16())
    return "sharc::kern::roundBF16(" + *expr + ")";
  if (result.isF64())
    return "double(" + *expr + ")";
  if (result.isInteger(32))
    return "int64_t(int32_t(uint32_t(" + *expr + ")))";
  if (result.isInteger(1) && !isa<CompareOp, NotOp, AndOp, OrOp>(op))
    return "int64_t((" + *expr + ") != 0)";
  if (result.isF64() || result.isInteger(64) || result.isInteger(1))
    return *expr;
  return op->emitError() << "code generation: element type " << result
                         << " is not supported yet";
}

FailureOr<std::string> ProgramEmitter::loadScalar(KernelText &kernel,
                                                  Value value,
                                                  ArrayRef<int64_t> iteration) {
  Type element = elementOf(value);
  if (auto constant = value.getDefiningOp<ConstantOp>()) {
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (attr && attr.isSplat()) {
      if (isFloatType(element)) {
        double v = attr.getSplatValue<APFloat>().convertToDouble();
        return element.isF64() ? doubleLiteral(v) : floatLiteral(v);
      }
      if (element.isInteger(1))
        return std::string(attr.getSplatValue<bool>() ? "INT64_C(1)"
                                                      : "INT64_C(0)");
      return intLiteral(attr.getSplatValue<APInt>().getSExtValue());
    }
  }
  FailureOr<std::string> pointer = typedPointer(value);
  if (failed(pointer))
    return failure();
  std::string member =
      kernel.pointer(storageType(element), /*isConst=*/true, *pointer);
  std::string index = broadcastIndex(tensorType(value).getShape(), iteration);
  // A 16-bit operand read at a broadcast index goes through gather16, which
  // x86's vector gathers (32- and 64-bit only) can vectorize.
  bool gather = (element.isF16() || element.isBF16()) && index != "i";
  std::string load =
      gather ? "sharc::kern::gather16(" + member + ", " + index + ")"
             : member + "[" + index + "]";
  return scalarType(element) + "(" + load + ")";
}

/// Emits one kernel for an elementwise op or a `sharc.fusion` group: every
/// result has the iteration shape; operands broadcast into it.
LogicalResult ProgramEmitter::emitFusionBody(
    Operation *fusion, KernelText &kernel, std::string &code,
    DenseMap<Value, std::string> &scalars, StringRef prefix) {
  ArrayRef<int64_t> iteration = tensorType(fusion->getResult(0)).getShape();
  int next = 0;
  auto define = [&](Value value, const std::string &expr) {
    std::string name = prefix.str() + str(next++);
    code += "    const " + scalarType(elementOf(value)) + " " + name + " = " +
            expr + ";\n";
    scalars[value] = name;
  };
  Block &body = fusion->getRegion(0).front();
  for (auto [arg, operand] :
       llvm::zip(body.getArguments(), fusion->getOperands())) {
    FailureOr<std::string> load = loadScalar(kernel, operand, iteration);
    if (failed(load))
      return failure();
    define(arg, *load);
  }
  for (Operation &inner : body.without_terminator()) {
    if (isa<ConstantOp>(inner)) {
      FailureOr<std::string> literal =
          loadScalar(kernel, inner.getResult(0), iteration);
      if (failed(literal))
        return failure();
      scalars[inner.getResult(0)] = *literal;
      continue;
    }
    if (auto iota = dyn_cast<IotaOp>(inner)) {
      // The element's index along the dimension, from its position in the
      // iota's shape (into which the iteration broadcasts).
      auto type = tensorType(iota.getResult());
      std::string coord =
          iotaIndex(type, iota.getDimension(),
                    "(" + broadcastIndex(type.getShape(), iteration) + ")",
                    numElements(iteration));
      define(iota.getResult(),
             scalarType(type.getElementType()) + "(" + coord + ")");
      continue;
    }
    SmallVector<std::string> args;
    for (Value operand : inner.getOperands())
      args.push_back(scalars.lookup(operand));
    FailureOr<std::string> expr = scalarExpr(&inner, args);
    if (failed(expr))
      return failure();
    define(inner.getResult(0), *expr);
  }
  return success();
}

FailureOr<ProgramEmitter::Loader> ProgramEmitter::rowInput(KernelText &kernel,
                                                           Value input) {
  auto fusion = input.getDefiningOp<FusionOp>();
  if (fusion && fusion->hasAttr("sharc.fuse_into")) {
    // The producer's body becomes a member function: each element the row
    // kernel reads is computed where it is read, never stored.
    std::string code;
    DenseMap<Value, std::string> scalars;
    if (failed(emitFusionBody(fusion, kernel, code, scalars, "u")))
      return failure();
    Value yielded = fusion.getBody().front().getTerminator()->getOperand(0);
    std::string name = "in" + str(kernel.helpers.size());
    kernel.helpers.push_back("  SHARC_HD double " + name +
                             "(int64_t i) const {\n" + code + "    return " +
                             scalars.lookup(yielded) + ";\n  }\n");
    return Loader(
        [name](StringRef index) { return name + "(" + index.str() + ")"; });
  }
  FailureOr<std::string> pointer = typedPointer(input);
  if (failed(pointer))
    return failure();
  std::string member =
      kernel.pointer(storageType(elementOf(input)), true, *pointer);
  return Loader([member](StringRef index) {
    return "double(" + member + "[" + index.str() + "])";
  });
}

LogicalResult ProgramEmitter::emitElementwise(Operation *op) {
  if (op->hasAttr("sharc.fuse_into"))
    return success(); // Computed inside the row kernel that reads it.
  if (auto attr = op->getAttrOfType<GemmEpilogueAttr>("sharc.gemm_epilogue")) {
    // act(matmul + bias): the GEMM writes this op's results, the bias and
    // activation applied by its epilogue (sharc-fuse's gemm-fusion; the
    // dialect verified the indices).
    auto matmul = op->getOperand(attr.getProduct()).getDefiningOp<MatmulOp>();
    if (!matmul)
      return op->emitError() << "code generation: the product of a "
                                "sharc.gemm_epilogue is not a sharc.matmul";
    GemmEpilogue epilogue{};
    epilogue.activation = attr.getActivation();
    if (attr.getBias() >= 0)
      epilogue.bias = op->getOperand(attr.getBias());
    if (attr.getAux() >= 0)
      epilogue.aux = op->getResult(attr.getAux());
    return emitMatmul(matmul, op->getResult(attr.getResult()), epilogue);
  }
  ArrayRef<int64_t> iteration = tensorType(op->getResult(0)).getShape();
  KernelText kernel;
  DenseMap<Value, std::string> scalars;
  SmallVector<Value> outputs;
  SmallVector<Value> stored;
  if (op->getName().getStringRef() == "sharc.fusion") {
    if (failed(emitFusionBody(op, kernel, kernel.body, scalars, "v")))
      return failure();
    Operation *yield = op->getRegion(0).front().getTerminator();
    for (auto [result, value] :
         llvm::zip(op->getResults(), yield->getOperands())) {
      outputs.push_back(result);
      stored.push_back(value);
    }
  } else {
    SmallVector<std::string> args;
    for (Value operand : op->getOperands()) {
      FailureOr<std::string> load = loadScalar(kernel, operand, iteration);
      if (failed(load))
        return failure();
      args.push_back(*load);
    }
    FailureOr<std::string> expr = scalarExpr(op, args);
    if (failed(expr))
      return failure();
    kernel.body += "    const " + scalarType(elementOf(op->getResult(0))) +
                   " v0 = " + *expr + ";\n";
    scalars[op->getResult(0)] = "v0";
    outputs.push_back(op->getResult(0));
    stored.push_back(op->getResult(0));
  }
  for (auto [result, value] : llvm::zip(outputs, stored)) {
    if (result.use_empty())
      continue;
    FailureOr<std::string> pointer = typedPointer(result);
    if (failed(pointer))
      return failure();
    Type element = elementOf(result);
    std::string member =
        kernel.pointer(storageType(element), /*isConst=*/false, *pointer);
    std::string scalar = scalars.lookup(value);
    if (scalar.empty())
      return op->emitError() << "code generation: a fusion yields a value it "
                                "does not compute";
    kernel.body +=
        "    " + member + "[i] = " +
        (element.isInteger(1)
             ? "(" + scalar + ") != 0"
             : "static_cast<" + storageType(element) + ">(" + scalar + ")") +
        ";\n";
  }
  if (!kernel.body.empty() && kernel.body.find("[i] = ") != std::string::npos)
    launch(kernel, numElements(iteration));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitCopy(Value from, Value to) {
  FailureOr<std::string> src = pointerTo(from), dest = pointerTo(to);
  if (failed(src) || failed(dest))
    return failure();
  int64_t bytes = tensorType(to).getNumElements() * elementBytes(elementOf(to));
  body() += "  sharc::kern::copy(ctx, " + *dest + ", " + *src + ", " +
            str(bytes) + ");\n";
  return success();
}

/// `result[i] = source[offset]` where `offsetCode` computes `offset` from `i`
/// (and may use the coordinates c0, c1, ... of i in the result).
LogicalResult ProgramEmitter::emitIndexMap(Operation *op, Value source,
                                           const std::string &offsetCode) {
  Value result = op->getResult(0);
  FailureOr<std::string> in = typedPointer(source), out = typedPointer(result);
  if (failed(in) || failed(out))
    return failure();
  KernelText kernel;
  std::string type = storageType(elementOf(result));
  std::string src = kernel.pointer(type, true, *in);
  std::string dst = kernel.pointer(type, false, *out);
  kernel.body = offsetCode + "    " + dst + "[i] = " + src + "[offset];\n";
  launch(kernel, tensorType(result).getNumElements());
  return success();
}

/// Code computing `offset` = sum of coordinate * stride over the result.
std::string affineOffset(ArrayRef<int64_t> resultShape,
                         ArrayRef<int64_t> strides, int64_t base) {
  std::string code = coordinates(resultShape, "i", "c");
  code += "    const int64_t offset = " + str(base);
  for (size_t d = 0; d < strides.size(); ++d)
    if (strides[d] != 0 && resultShape[d] != 1)
      code += " + c" + str(d) + " * " + str(strides[d]);
  return code + ";\n";
}

LogicalResult ProgramEmitter::emitConcat(ConcatOp op) {
  auto outType = tensorType(op.getResult());
  int64_t axis = op.getAxis();
  int64_t inner = numElements(outType.getShape().drop_front(axis + 1));
  int64_t outRow = outType.getDimSize(axis) * inner;
  FailureOr<std::string> out = typedPointer(op.getResult());
  if (failed(out))
    return failure();
  int64_t offset = 0;
  std::string type = storageType(outType.getElementType());
  for (Value input : op.getInputs()) {
    int64_t row = tensorType(input).getDimSize(axis) * inner;
    FailureOr<std::string> in = typedPointer(input);
    if (failed(in))
      return failure();
    KernelText kernel;
    std::string src = kernel.pointer(type, true, *in);
    std::string dst = kernel.pointer(type, false, *out);
    int64_t count = tensorType(input).getNumElements();
    kernel.body = "    " + dst + "[" + divMod("i", row, 0, count) + " * " +
                  str(outRow) + " + " + str(offset) + " + " +
                  divMod("i", 1, row, count) + "] = " + src + "[i];\n";
    launch(kernel, count);
    offset += row;
  }
  return success();
}

LogicalResult ProgramEmitter::emitInsertSlice(InsertSliceOp op) {
  if (failed(emitCopy(op.getDest(), op.getResult())))
    return failure();
  auto outType = tensorType(op.getResult());
  SmallVector<int64_t> outStrides = rowMajorStrides(outType.getShape());
  SmallVector<int64_t> strides;
  int64_t base = 0;
  for (auto [d, start, stride] :
       llvm::enumerate(op.getStart(), op.getStride())) {
    base += start * outStrides[d];
    strides.push_back(stride * outStrides[d]);
  }
  FailureOr<std::string> in = typedPointer(op.getSource()),
                         out = typedPointer(op.getResult());
  if (failed(in) || failed(out))
    return failure();
  KernelText kernel;
  std::string type = storageType(outType.getElementType());
  std::string src = kernel.pointer(type, true, *in);
  std::string dst = kernel.pointer(type, false, *out);
  kernel.body =
      affineOffset(tensorType(op.getSource()).getShape(), strides, base) +
      "    " + dst + "[offset] = " + src + "[i];\n";
  launch(kernel, tensorType(op.getSource()).getNumElements());
  return success();
}

LogicalResult ProgramEmitter::emitGather(GatherOp op) {
  auto dataType = tensorType(op.getData());
  int64_t axis = op.getAxis();
  int64_t size = dataType.getDimSize(axis);
  int64_t inner = numElements(dataType.getShape().drop_front(axis + 1));
  int64_t count = tensorType(op.getIndices()).getNumElements();
  FailureOr<std::string> data = typedPointer(op.getData()),
                         indices = typedPointer(op.getIndices()),
                         out = typedPointer(op.getResult());
  if (failed(data) || failed(indices) || failed(out))
    return failure();
  std::string location;
  llvm::raw_string_ostream os(location);
  op.getLoc().print(os);
  int code = errorCode("gather index out of range for dimension " + str(axis) +
                       " of size " + str(size) + " in " + location);
  KernelText kernel;
  std::string type = storageType(dataType.getElementType());
  std::string src = kernel.pointer(type, true, *data);
  std::string idx =
      kernel.pointer(storageType(elementOf(op.getIndices())), true, *indices);
  std::string dst = kernel.pointer(type, false, *out);
  kernel.body = "    const int64_t k = i % " + str(inner) + ", j = (i / " +
                str(inner) + ") % " + str(count) + ", o = i / " +
                str(inner * count) + ";\n" + "    int64_t index = int64_t(" +
                idx + "[j]);\n" + "    if (index < -" + str(size) +
                " || index >= " + str(size) + ") { raise(" + str(code) + "); " +
                dst + "[i] = " + type + "(0); return; }\n" +
                "    if (index < 0) index += " + str(size) + ";\n" + "    " +
                dst + "[i] = " + src + "[(o * " + str(size) + " + index) * " +
                str(inner) + " + k];\n";
  launch(kernel, tensorType(op.getResult()).getNumElements());
  return success();
}

LogicalResult ProgramEmitter::emitScatterAdd(ScatterAddOp op) {
  auto outType = tensorType(op.getResult());
  int64_t axis = op.getAxis();
  int64_t size = outType.getDimSize(axis);
  int64_t inner = numElements(outType.getShape().drop_front(axis + 1));
  int64_t count = tensorType(op.getIndices()).getNumElements();
  FailureOr<std::string> dest = typedPointer(op.getDest()),
                         indices = typedPointer(op.getIndices()),
                         updates = typedPointer(op.getUpdates()),
                         out = typedPointer(op.getResult());
  if (failed(dest) || failed(indices) || failed(updates) || failed(out))
    return failure();
  std::string location;
  llvm::raw_string_ostream os(location);
  op.getLoc().print(os);
  int code = errorCode("scatter_add index out of range for dimension " +
                       str(axis) + " of size " + str(size) + " in " + location);
  KernelText kernel;
  std::string type = storageType(outType.getElementType());
  std::string base = kernel.pointer(type, true, *dest);
  std::string idx =
      kernel.pointer(storageType(elementOf(op.getIndices())), true, *indices);
  std::string upd = kernel.pointer(type, true, *updates);
  std::string dst = kernel.pointer(type, false, *out);
  // One call per destination row (o, r): it scans the indices once per
  // block of up to 256 inner elements (an embedding row is usually one
  // block), summing the matching updates in index order in double and
  // rounding once: deterministic on any number of threads, and no atomics.
  int64_t block = std::min<int64_t>(256, std::max<int64_t>(1, inner));
  std::string s = str(size), n = str(inner), c = str(count);
  kernel.body =
      "    const int64_t r = i % " + s + ", o = i / " + s + ";\n" +
      "    for (int64_t k0 = 0; k0 < " + n + "; k0 += " + str(block) + ") {\n" +
      "      const int64_t width = " + n + " - k0 < " + str(block) + " ? " + n +
      " - k0 : " + str(block) + ";\n" + "      double acc[" + str(block) +
      "];\n" + "      for (int64_t k = 0; k < width; ++k) acc[k] = double(" +
      base + "[i * " + n + " + k0 + k]);\n" + "      for (int64_t j = 0; j < " +
      c + "; ++j) {\n" + "        int64_t index = int64_t(" + idx + "[j]);\n" +
      "        if (index < -" + s + " || index >= " + s + ") { raise(" +
      str(code) + "); continue; }\n" + "        if (index < 0) index += " + s +
      ";\n" + "        if (index != r) continue;\n" + "        const " + type +
      " *from = " + upd + " + (o * " + c + " + j) * " + n + " + k0;\n" +
      "        for (int64_t k = 0; k < width; ++k) acc[k] += "
      "double(from[k]);\n" +
      "      }\n" + "      for (int64_t k = 0; k < width; ++k) " + dst +
      "[i * " + n + " + k0 + k] = static_cast<" + type + ">(acc[k]);\n" +
      "    }\n";
  kernel.work = count * ((inner + block - 1) / block) + inner;
  launch(kernel, outType.getNumElements() / std::max<int64_t>(1, inner));
  return success();
}

} // namespace sharc::codegen
