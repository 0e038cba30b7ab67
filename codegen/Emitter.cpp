//===- Emitter.cpp - Training step to C++/CUDA source ---------------------===//
//
// Walks the prepared, fused and memory-planned `@train_step` in order and
// writes one statement per op into `sharcProgramStep`: a kernel launch, a
// GEMM, a copy or a collective.  Kernels are functors with every shape baked
// in; their text is deduplicated, so a layer repeated with the same shapes
// compiles to one kernel.  Model names only ever appear inside escaped string
// literals (cppStringLiteral).
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterInternal.h"

#include "ir/SharcOps.h"
#include "runtime/Npy.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::codegen;

//===----------------------------------------------------------------------===//
// Text helpers
//===----------------------------------------------------------------------===//

std::string sharc::cppStringLiteral(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c == '?') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      // Always three octal digits: an octal escape takes at most three, so
      // the next character can never extend it.
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\%03o", static_cast<unsigned>(c));
      out += escape;
    }
  }
  return out + "\"";
}

namespace sharc::codegen {

int ProgramEmitter::errorCode(std::string message) {
  messages.push_back(std::move(message));
  return static_cast<int>(messages.size());
}

void ProgramEmitter::launch(const KernelText &kernel, int64_t count) {
  std::string text = " {\n";
  for (const std::string &member : kernel.members)
    text += "  " + member + ";\n";
  for (const std::string &helper : kernel.helpers)
    text += helper;
  text += "  SHARC_HD void operator()(int64_t i) const {\n" + kernel.body +
          "  }\n};\n";
  auto [it, inserted] =
      kernelNames.try_emplace(text, "K" + str(kernelNames.size()));
  if (inserted)
    kernelDefinitions += "struct " + it->second + text + "\n";
  // Join the pending run when this is the same kernel, it writes only
  // persistent buffers (distinct allocations, never arena memory that the
  // plan may share with what the run reads), and it touches nothing the run
  // writes, nor writes anything the run reads: then the launches may run as
  // one (the optimizer update of every parameter).
  bool groupable = true, independent = true;
  for (auto [member, argument] : llvm::zip(kernel.members, kernel.arguments)) {
    bool reads = StringRef(member).starts_with("const ");
    if (!reads && !StringRef(argument).contains("ctx->buffers["))
      groupable = false;
    if (pending.writes.contains(argument) ||
        (!reads && pending.reads.contains(argument)))
      independent = false;
  }
  // A CUDA kernel's parameters (the group) stay well under 32 KiB.
  bool full = pending.launches.size() >= 64 ||
              (pending.launches.size() + 1) * kernel.members.size() * 8 > 16384;
  if (!groupable || full || pending.kernel != it->second ||
      pending.work != kernel.work || !independent)
    flushLaunches();
  pending.kernel = it->second;
  pending.work = kernel.work;
  pending.launches.emplace_back(llvm::join(kernel.arguments, ", "), count);
  for (auto [member, argument] : llvm::zip(kernel.members, kernel.arguments))
    (StringRef(member).starts_with("const ") ? pending.reads : pending.writes)
        .insert(argument);
  if (!groupable)
    flushLaunches();
}

void ProgramEmitter::flushLaunches() {
  if (pending.launches.empty())
    return;
  const std::string &name = pending.kernel;
  if (pending.launches.size() == 1) {
    auto &[arguments, count] = pending.launches.front();
    stepBody += "  sharc::kern::launch(ctx, " + str(count) + ", " +
                str(pending.work) + ", " + name + "{" + arguments + "});\n";
  } else {
    size_t n = pending.launches.size();
    stepBody += "  {\n    const sharc::kern::Group<" + name + ", " + str(n) +
                "> group{{\n";
    for (auto &[arguments, count] : pending.launches)
      stepBody += "        " + name + "{" + arguments + "},\n";
    stepBody += "    }, {";
    for (auto [i, launch] : llvm::enumerate(pending.launches))
      stepBody += (i ? ", " : "") + str(launch.second);
    stepBody += "}};\n    sharc::kern::launchGroup(ctx, " + str(pending.work) +
                ", group);\n  }\n";
  }
  report.numKernelLaunches += repeat;
  pending = PendingLaunches();
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::collectBuffers() {
  Block &entry = step.getBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    unsigned i = arg.getArgNumber();
    Buffer buffer;
    buffer.element = elementOf(arg);
    buffer.shape.assign(tensorType(arg).getShape().begin(),
                        tensorType(arg).getShape().end());
    if (ParamAttr param = getParamAttr(step, i)) {
      buffer.name = param.getName().str();
      buffer.source = param.getSource().str();
      buffer.role = "param";
    } else if (auto state = step.getArgAttrOfType<StateAttr>(
                   i, SharcDialect::getStateAttrName())) {
      buffer.role = "state";
      buffer.name = state.getParam().empty()
                        ? state.getRole().str()
                        : (state.getParam() + "." + state.getRole()).str();
      if (state.getParam().empty() && state.getRole() == "step")
        stepBuffer = static_cast<int>(buffers.size());
    } else if (auto input = step.getArgAttrOfType<StringAttr>(
                   i, SharcDialect::getInputAttrName())) {
      buffer.role = "input";
      buffer.name = input.getValue().str();
    } else {
      return step.emitError() << "code generation: argument " << i
                              << " of @train_step has no sharc.param, "
                                 "sharc.state or sharc.input attribute";
    }
    if (storageType(buffer.element).empty())
      return step.emitError()
             << "code generation: argument '" << buffer.name << "' has type "
             << arg.getType() << "; f16/bf16 programs are not supported yet";
    bufferOf[arg] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
  }
  // Trainable parameters: those whose new value is not the argument itself.
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  for (auto [r, value] : llvm::enumerate(ret.getOperands())) {
    auto param = step.getResultAttrOfType<ParamAttr>(
        r, SharcDialect::getParamAttrName());
    if (!param || isa<BlockArgument>(value))
      continue;
    for (Buffer &buffer : buffers)
      if (buffer.role == "param" && buffer.name == param.getName())
        buffer.trainable = true;
  }
  // Outputs.
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r) {
    auto name = step.getResultAttrOfType<StringAttr>(
        r, SharcDialect::getOutputAttrName());
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(step.getResultTypes()[r]);
    Buffer buffer;
    buffer.role = "output";
    buffer.name = name.getValue().str();
    buffer.element = type.getElementType();
    buffer.shape.assign(type.getShape().begin(), type.getShape().end());
    if (buffer.name == "loss")
      lossBuffer = static_cast<int>(buffers.size());
    else if (buffer.name == "lr")
      lrBuffer = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
  }
  if (lossBuffer < 0 || lrBuffer < 0 || stepBuffer < 0)
    return step.emitError() << "code generation: @train_step needs 'loss' "
                               "and 'lr' outputs and a step counter";
  if (buffers[lossBuffer].shape.size() != 0 ||
      !isFloatType(buffers[lossBuffer].element))
    return step.emitError() << "code generation: the loss must be a float "
                               "scalar";
  return success();
}

FailureOr<std::string> ProgramEmitter::pointerTo(Value value) {
  // A reshape is a view of its operand (sharc-plan-memory aliases them).
  while (auto reshape = value.getDefiningOp<ReshapeOp>())
    value = reshape.getOperand();
  auto known = bufferOf.find(value);
  if (known != bufferOf.end())
    return "ctx->buffers[" + str(known->second) + "]";
  auto argument = argumentPointers.find(value);
  if (argument != argumentPointers.end())
    return argument->second;
  Operation *op = value.getDefiningOp();
  if (auto constant = dyn_cast_or_null<ConstantOp>(op)) {
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    Type element = elementOf(value);
    if (!attr || storageType(element).empty())
      return constant.emitError()
             << "code generation: unsupported constant of type "
             << value.getType();
    std::string data;
    auto type = tensorType(value);
    int64_t n = type.getNumElements();
    if (isFloatType(element)) {
      for (int64_t k = 0; k < n; ++k) {
        APFloat v = attr.isSplat() ? attr.getSplatValue<APFloat>()
                                   : attr.getValues<APFloat>()[k];
        data += (k ? ", " : "") + doubleLiteral(v.convertToDouble());
      }
    } else if (element.isInteger(1)) {
      for (int64_t k = 0; k < n; ++k) {
        bool v = attr.isSplat() ? attr.getSplatValue<bool>()
                                : attr.getValues<bool>()[k];
        data += std::string(k ? ", " : "") + (v ? "true" : "false");
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        APInt v = attr.isSplat() ? attr.getSplatValue<APInt>()
                                 : attr.getValues<APInt>()[k];
        data += (k ? ", " : "") + intLiteral(v.getSExtValue());
      }
    }
    Buffer buffer;
    buffer.role = "constant";
    buffer.name = "const" + str(buffers.size());
    buffer.element = element;
    buffer.shape.assign(type.getShape().begin(), type.getShape().end());
    buffer.constantData = std::move(data);
    bufferOf[value] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
    return "ctx->buffers[" + str(bufferOf[value]) + "]";
  }
  if (!op)
    return failure();
  unsigned index = cast<OpResult>(value).getResultNumber();
  if (auto external =
          op->getAttrOfType<DenseI64ArrayAttr>("sharc.result_buffers"))
    if (index < external.size() && external[index] >= 0)
      return "ctx->buffers[" +
             str(bufferOf.lookup(step.getArgument(external[index]))) + "]";
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("sharc.offsets");
  if (!offsets || offsets.size() <= index || offsets[index] < 0)
    return op->emitError() << "code generation: result " << index
                           << " has no arena offset (run sharc-plan-memory)";
  return "(ctx->arena + " + str(offsets[index]) + ")";
}

FailureOr<std::string> ProgramEmitter::typedPointer(Value value) {
  FailureOr<std::string> pointer = pointerTo(value);
  if (failed(pointer))
    return failure();
  std::string type = storageType(elementOf(value));
  if (type.empty())
    return emitError(value.getLoc())
           << "code generation: element type " << elementOf(value)
           << " is not supported yet";
  return "reinterpret_cast<" + type + " *>(" + *pointer + ")";
}

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
        return element.isF32() ? floatLiteral(v) : doubleLiteral(v);
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
  std::string load = member + "[" +
                     broadcastIndex(tensorType(value).getShape(), iteration) +
                     "]";
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
  if (auto attr = op->getAttrOfType<DenseI64ArrayAttr>("sharc.gemm_epilogue")) {
    // act(matmul + bias): the GEMM writes this op's results, the bias and
    // activation applied by its epilogue (sharc-fuse's gemm-fusion).
    ArrayRef<int64_t> at = attr.asArrayRef();
    auto operand = [&](int64_t i) {
      return i >= 0 && i < int64_t(op->getNumOperands()) ? op->getOperand(i)
                                                         : Value();
    };
    auto result = [&](int64_t i) {
      return i >= 0 && i < int64_t(op->getNumResults()) ? op->getResult(i)
                                                        : Value();
    };
    auto matmul =
        at.size() == 4 ? operand(at[0]).getDefiningOp<MatmulOp>() : MatmulOp();
    GemmEpilogue epilogue;
    if (auto activation =
            op->getAttrOfType<StringAttr>("sharc.gemm_activation"))
      epilogue.activation = activation.getValue();
    if (!matmul || !result(at[2]) || (at[1] >= 0 && !operand(at[1])) ||
        (at[3] >= 0 && (!result(at[3]) || epilogue.activation.empty())))
      return op->emitError() << "code generation: malformed "
                                "sharc.gemm_epilogue";
    epilogue.bias = operand(at[1]);
    epilogue.aux = result(at[3]);
    return emitMatmul(matmul, result(at[2]), epilogue);
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
    kernel.body = "    " + dst + "[(i / " + str(row) + ") * " + str(outRow) +
                  " + " + str(offset) + " + i % " + str(row) + "] = " + src +
                  "[i];\n";
    launch(kernel, tensorType(input).getNumElements());
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
                dst + "[i] = 0; return; }\n" +
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
      "];\n" + "      for (int64_t k = 0; k < width; ++k) acc[k] = " + base +
      "[i * " + n + " + k0 + k];\n" + "      for (int64_t j = 0; j < " + c +
      "; ++j) {\n" + "        int64_t index = int64_t(" + idx + "[j]);\n" +
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
  if (!element.isF32() && !element.isF64())
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
  std::string type = element.isF32() ? "f32" : "f64";
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
  if (!epilogue.activation.empty()) {
    if (epilogue.activation != "relu" && epilogue.activation != "gelu_tanh")
      return op.emitError() << "code generation: unknown GEMM epilogue "
                               "activation '"
                            << epilogue.activation << "'";
    code += indent + "args.activation = sharc::rt::GemmActivation::" +
            (epilogue.activation == "relu" ? "relu" : "geluTanh") + ";\n";
  }
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
  if (epilogue.bias || !epilogue.activation.empty())
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

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitAllReduce(AllReduceOp op) {
  if (static_cast<int>(op.getRanks()) != options.worldSize)
    return op.emitError() << "code generation: all_reduce over "
                          << op.getRanks() << " ranks in a program compiled "
                          << "for " << options.worldSize;
  if (failed(emitCopy(op.getOperand(), op.getResult())))
    return failure();
  FailureOr<std::string> pointer = pointerTo(op.getResult());
  if (failed(pointer))
    return failure();
  Type element = elementOf(op.getResult());
  int64_t count = tensorType(op.getResult()).getNumElements();
  std::string dtype = element.isF32()         ? "f32"
                      : element.isF64()       ? "f64"
                      : element.isInteger(32) ? "i32"
                                              : "i64";
  // Started here, waited for just before the first op that reads the
  // result: what runs in between (the rest of backward, once the collectives
  // are scheduled early) overlaps the communication.
  std::string ticket =
      "ticket" + str(pendingCollectives.size() + completedCollectives);
  body() += "  const uint64_t " + ticket + " = ctx->comm->startAllReduce(" +
            *pointer + ", " + str(count) + ", sharc::rt::DType::" + dtype +
            ", sharc::rt::ReduceOp::" +
            (op.getKind() == CollectiveKind::sum ? "sum" : "max") + ");\n";
  pendingCollectives[op.getResult()] = ticket;
  uint64_t bytes = count * elementBytes(element);
  uint64_t n = options.worldSize;
  report.collectiveCalls[0] += 1;
  report.collectiveBytes[0] += n > 1 ? 2 * (n - 1) * bytes / n : 0;
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitMicroBatchLoop(MicroBatchLoopOp loop) {
  bool hasCollective = false;
  loop.getBody().walk([&](Operation *inner) {
    hasCollective |=
        isa<AllReduceOp, ReduceScatterOp, AllGatherOp, BroadcastFromOp>(inner);
    // What the body reads from above is complete before the loop starts.
    waitForOperands(inner);
  });
  if (hasCollective)
    return loop.emitError() << "code generation: collectives inside a "
                               "micro-batch loop are not supported yet";
  Block &loopBody = loop.getBody().front();
  YieldOp yield = loop.getYield();
  // Iteration 0 carries the inits (in place when sharc-plan-memory gave an
  // init its loop's memory).
  for (auto [init, arg, result] :
       llvm::zip(loop.getInits(), loop.getCarriedArgs(), loop.getResults())) {
    FailureOr<std::string> from = pointerTo(init), to = pointerTo(result);
    if (failed(from) || failed(to))
      return failure();
    if (*from != *to && failed(emitCopy(init, result)))
      return failure();
    argumentPointers[arg] = *to;
  }
  for (auto [input, arg] :
       llvm::zip(loop.getInputs(), loop.getMicroBatchArgs())) {
    FailureOr<std::string> base = pointerTo(input);
    if (failed(base))
      return failure();
    int64_t bytes =
        tensorType(arg).getNumElements() * elementBytes(elementOf(arg));
    argumentPointers[arg] = "(reinterpret_cast<char *>(" + *base +
                            ") + micro * " + intLiteral(bytes) + ")";
  }
  body() += "  for (int64_t micro = 0; micro < " + intLiteral(loop.getCount()) +
            "; ++micro) {\n";
  int64_t outer = repeat;
  repeat *= loop.getCount();
  for (Operation &op : loopBody.without_terminator())
    if (failed(emitOp(&op)))
      return failure();
  // The carried values of the next iteration: yielded values that were not
  // computed in place are copied.  A carried argument yielded as is stays.
  for (auto [index, value, result] :
       llvm::enumerate(yield.getOperands(), loop.getResults())) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (arg && arg.getOwner() == &loopBody &&
        arg.getArgNumber() >= loop.getInputs().size()) {
      if (arg != loop.getCarriedArgs()[index])
        return yield.emitError() << "code generation: a micro-batch loop "
                                    "that permutes its carried values is "
                                    "not supported";
      continue;
    }
    FailureOr<std::string> from = pointerTo(value), to = pointerTo(result);
    if (failed(from) || failed(to))
      return failure();
    if (*from != *to && failed(emitCopy(value, result)))
      return failure();
  }
  body() += "  }\n";
  repeat = outer;
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

void ProgramEmitter::waitForOperands(Operation *op) {
  for (Value operand : op->getOperands()) {
    // A producer computed inside this op's kernel reads its operands here.
    if (Operation *producer = operand.getDefiningOp())
      if (producer->hasAttr("sharc.fuse_into"))
        waitForOperands(producer);
    auto pending = pendingCollectives.find(operand);
    if (pending == pendingCollectives.end())
      continue;
    body() += "  ctx->comm->wait(" + pending->second + ");\n";
    pendingCollectives.erase(pending);
    ++completedCollectives;
  }
}

LogicalResult ProgramEmitter::emitOp(Operation *op) {
  if (!op->hasAttr("sharc.fuse_into"))
    waitForOperands(op);
  if (isFusibleElementwiseOp(op) || isa<FusionOp>(op))
    return emitElementwise(op);
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConstantOp) { return success(); })
      .Case([&](MatmulOp op) {
        // A GEMM with an epilogue is emitted where its user is.
        return op->hasAttr("sharc.fuse_into") ? success() : emitMatmul(op);
      })
      .Case([&](ReduceOp op) { return emitReduce(op); })
      .Case([&](SoftmaxOp op) { return emitSoftmax(op, op.getAxis(), false); })
      .Case(
          [&](LogSoftmaxOp op) { return emitSoftmax(op, op.getAxis(), true); })
      .Case([&](LayerNormOp op) { return emitLayerNorm(op); })
      .Case([&](NllLossOp op) {
        return emitLoss(op, op.getInput(), op.getTarget(), op.getWeight(),
                        op.getReduction(), op.getIgnoreIndex(), false);
      })
      .Case([&](CrossEntropyOp op) {
        return emitLoss(op, op.getLogits(), op.getTarget(), op.getWeight(),
                        op.getReduction(), op.getIgnoreIndex(), true);
      })
      .Case([&](ReshapeOp) { return success(); })
      .Case([&](TransposeOp op) {
        // Read in place by the GEMMs it feeds (sharc-fuse's gemm-views).
        if (op->hasAttr("sharc.fuse_into"))
          return success();
        // Written by the GEMM that feeds it.
        if (op->hasAttr("sharc.gemm_output"))
          return emitMatmul(op.getOperand().getDefiningOp<MatmulOp>(),
                            op.getResult());
        ArrayRef<int64_t> inShape = tensorType(op.getOperand()).getShape();
        SmallVector<int64_t> inStrides = rowMajorStrides(inShape);
        SmallVector<int64_t> strides;
        for (int64_t p : op.getPermutation())
          strides.push_back(inStrides[p]);
        return emitIndexMap(
            op, op.getOperand(),
            affineOffset(tensorType(op.getResult()).getShape(), strides, 0));
      })
      .Case([&](BroadcastOp op) {
        return emitIndexMap(
            op, op.getOperand(),
            "    const int64_t offset = " +
                broadcastIndex(tensorType(op.getOperand()).getShape(),
                               tensorType(op.getResult()).getShape()) +
                ";\n");
      })
      .Case([&](SliceOp op) {
        SmallVector<int64_t> inStrides =
            rowMajorStrides(tensorType(op.getOperand()).getShape());
        SmallVector<int64_t> strides;
        int64_t base = 0;
        for (auto [d, start, stride] :
             llvm::enumerate(op.getStart(), op.getStride())) {
          base += start * inStrides[d];
          strides.push_back(stride * inStrides[d]);
        }
        return emitIndexMap(
            op, op.getOperand(),
            affineOffset(tensorType(op.getResult()).getShape(), strides, base));
      })
      .Case([&](IotaOp op) {
        auto type = tensorType(op.getResult());
        int64_t dim = op.getDimension();
        FailureOr<std::string> out = typedPointer(op.getResult());
        if (failed(out))
          return failure();
        KernelText kernel;
        std::string storage = storageType(type.getElementType());
        std::string dst = kernel.pointer(storage, false, *out);
        kernel.body = "    " + dst + "[i] = static_cast<" + storage +
                      ">((i / " +
                      str(numElements(type.getShape().drop_front(dim + 1))) +
                      ") % " + str(type.getDimSize(dim)) + ");\n";
        launch(kernel, type.getNumElements());
        return success();
      })
      .Case([&](TriluOp op) {
        auto type = tensorType(op.getResult());
        int64_t rows = type.getDimSize(type.getRank() - 2);
        int64_t cols = type.getShape().back();
        int64_t diagonal = std::clamp(static_cast<int64_t>(op.getDiagonal()),
                                      -(rows + cols), rows + cols);
        FailureOr<std::string> in = typedPointer(op.getOperand()),
                               out = typedPointer(op.getResult());
        if (failed(in) || failed(out))
          return failure();
        KernelText kernel;
        std::string storage = storageType(type.getElementType());
        std::string src = kernel.pointer(storage, true, *in);
        std::string dst = kernel.pointer(storage, false, *out);
        kernel.body = "    const int64_t row = (i / " + str(cols) + ") % " +
                      str(rows) + ", col = i % " + str(cols) + ";\n" +
                      "    const bool keep = col " +
                      (op.getUpper() ? ">=" : "<=") + " row + " +
                      intLiteral(diagonal) + ";\n" + "    " + dst +
                      "[i] = keep ? " + src + "[i] : " + storage + "(0);\n";
        launch(kernel, type.getNumElements());
        return success();
      })
      .Case<Conv2DOp, Conv2DInputGradOp, Conv2DWeightGradOp, MaxPool2DOp,
            MaxPool2DGradOp, AvgPool2DOp, AvgPool2DGradOp>(
          [&](Operation *op) { return emitWindowOp(op); })
      .Case([&](ConcatOp op) { return emitConcat(op); })
      .Case([&](InsertSliceOp op) { return emitInsertSlice(op); })
      .Case([&](GatherOp op) { return emitGather(op); })
      .Case([&](ScatterAddOp op) { return emitScatterAdd(op); })
      .Case([&](AllReduceOp op) { return emitAllReduce(op); })
      .Case([&](MicroBatchLoopOp op) { return emitMicroBatchLoop(op); })
      .Case([&](func::ReturnOp op) { return emitReturn(op); })
      .Default([](Operation *op) {
        return op->emitError()
               << "code generation: '" << op->getName()
               << "' is not supported by the code generator yet";
      });
}

LogicalResult ProgramEmitter::emitReturn(func::ReturnOp ret) {
  if (library)
    return emitLibraryReturn(ret);
  Block &entry = step.getBody().front();
  for (auto [r, value] : llvm::enumerate(ret.getOperands())) {
    int target = -1;
    for (StringRef attrName :
         {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()}) {
      Attribute attr = step.getResultAttr(r, attrName);
      if (!attr)
        continue;
      for (BlockArgument arg : entry.getArguments())
        if (step.getArgAttr(arg.getArgNumber(), attrName) == attr)
          target = bufferOf[arg];
    }
    if (auto name = step.getResultAttrOfType<StringAttr>(
            r, SharcDialect::getOutputAttrName()))
      target = name.getValue() == "loss" ? lossBuffer
               : name.getValue() == "lr" ? lrBuffer
                                         : -1;
    if (target < 0)
      return ret.emitError() << "code generation: result " << r
                             << " of @train_step has no destination";
    FailureOr<std::string> src = pointerTo(value);
    if (failed(src))
      return failure();
    const Buffer &buffer = buffers[target];
    int64_t bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    std::string dest = "ctx->buffers[" + str(target) + "]";
    if (*src != dest)
      body() += "  sharc::kern::copy(ctx, " + dest + ", " + *src + ", " +
                str(bytes) + ");\n";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The translation unit
//===----------------------------------------------------------------------===//

FailureOr<int64_t> ProgramEmitter::emitFunction() {
  if (!step.getBody().hasOneBlock())
    return step.emitError() << "code generation needs a single-block function";
  if (failed(library ? collectLibraryBuffers() : collectBuffers()))
    return failure();
  auto arena = step->getAttrOfType<IntegerAttr>("sharc.arena_bytes");
  if (!arena)
    return step.emitError()
           << "code generation: no memory plan (run sharc-plan-memory)";
  for (Operation &op : step.getBody().front())
    if (failed(emitOp(&op)))
      return failure();
  return arena.getInt();
}

void ProgramEmitter::writeKernelsAndTables(llvm::raw_ostream &os) const {
  os << kernelDefinitions;
  for (auto [i, buffer] : llvm::enumerate(buffers))
    if (buffer.role == "constant")
      os << "const " << storageType(buffer.element) << " constant" << i
         << "[] = {" << buffer.constantData << "};\n";
  os << "\nconst char *const messages[] = {\n";
  for (const std::string &message : messages)
    os << "  " << cppStringLiteral(message) << ",\n";
  os << "  nullptr};\n\n";
}

LogicalResult ProgramEmitter::run(llvm::raw_ostream &os) {
  FailureOr<int64_t> arenaBytes = emitFunction();
  if (failed(arenaBytes))
    return failure();

  report.numKernels = static_cast<int>(kernelNames.size());
  report.arenaBytes = *arenaBytes;
  // Every parameter and state buffer gets a file of its own, whatever the
  // model calls its tensors (an initializer named "step", names that differ
  // only in characters a file name cannot hold).
  std::vector<std::string> persistentNames;
  for (const Buffer &buffer : buffers)
    if (buffer.role == "param" || buffer.role == "state")
      persistentNames.push_back(buffer.name);
  std::vector<std::string> files = rt::npyFileNames(persistentNames);
  size_t nextFile = 0;
  for (Buffer &buffer : buffers)
    if (buffer.role == "param" || buffer.role == "state")
      buffer.file = files[nextFile++];
  for (const Buffer &buffer : buffers) {
    ReportBuffer entry;
    entry.name = buffer.name;
    entry.file = buffer.file;
    entry.role = buffer.role;
    entry.type = dtypeEnumerator(buffer.element);
    entry.shape.assign(buffer.shape.begin(), buffer.shape.end());
    entry.bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    entry.trainable = buffer.trainable;
    if (buffer.role == "param") {
      report.paramBytes += entry.bytes;
      if (buffer.trainable)
        report.gradientBytes += entry.bytes;
    } else if (buffer.role == "state") {
      report.stateBytes += entry.bytes;
    }
    report.buffers.push_back(std::move(entry));
  }

  os << "// Generated by sharc compile (target " << options.target
     << "). Do not edit.\n"
     << "#include \"runtime/Errors.h\"\n"
     << "#include \"runtime/Kernels.h\"\n\n"
     << "namespace {\nusing namespace sharc::kern;\n\n";
  writeKernelsAndTables(os);
  os << "const sharc::rt::BufferSpec buffers[] = {\n";
  for (auto [i, buffer] : llvm::enumerate(buffers)) {
    os << "  {" << cppStringLiteral(buffer.name) << ", "
       << cppStringLiteral(buffer.source) << ", "
       << cppStringLiteral(buffer.file)
       << ", sharc::rt::BufferRole::" << buffer.role
       << ", sharc::rt::DType::" << dtypeEnumerator(buffer.element) << ", "
       << buffer.shape.size() << ", {";
    for (auto [d, size] : llvm::enumerate(buffer.shape))
      os << (d ? ", " : "") << size;
    int64_t bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    os << "}, " << numElements(buffer.shape) << ", " << bytes << ", "
       << (buffer.role == "constant" ? "constant" + str(i) : "nullptr")
       << "},\n";
  }
  os << "};\n\n";
  os << "const sharc::rt::ProgramInfo info = {\n"
     << "  sharc::rt::kProgramAbiVersion, " << cppStringLiteral(options.model)
     << ", " << cppStringLiteral(options.target) << ",\n  " << options.worldSize
     << ", " << options.microBatch << ", " << options.gradientAccumulation
     << ", " << report.arenaBytes << ",\n  " << buffers.size() << ", buffers, "
     << lossBuffer << ", " << lrBuffer << ", " << stepBuffer << ",\n  {";
  for (size_t k = 0; k < 4; ++k)
    os << (k ? ", " : "") << report.collectiveCalls[k] << "u";
  os << "},\n  {";
  for (size_t k = 0; k < 4; ++k)
    os << (k ? ", " : "") << report.collectiveBytes[k] << "u";
  os << "},\n  " << report.numKernels << ", " << report.numGemmCalls
     << "};\n} // namespace\n\n";
  os << "extern \"C\" const sharc::rt::ProgramInfo *sharcProgramInfo() {\n"
     << "  return &info;\n}\n\n"
     << "extern \"C\" void sharcProgramStep(const sharc::rt::StepContext "
        "*ctx) {\n"
     << body() << "  ctx->comm->waitAll();\n"
     << "  if (int code = sharc::kern::takeError(ctx))\n"
     << "    sharc::rt::fatal(std::string(\"step failed: \") + "
        "messages[code - 1]);\n"
     << "}\n";
  return success();
}

} // namespace sharc::codegen

FailureOr<EmitOptions> sharc::programOptionsOf(func::FuncOp step) {
  EmitOptions options;
  if (auto ranks = step->getAttrOfType<IntegerAttr>("sharc.world_size"))
    options.worldSize = static_cast<int>(ranks.getInt());
  step.walk([&](MicroBatchLoopOp loop) {
    options.gradientAccumulation = loop.getCount();
  });
  for (BlockArgument arg : step.getArguments())
    if (step.getArgAttr(arg.getArgNumber(), SharcDialect::getInputAttrName())) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() == 0)
        return step.emitError() << "code generation: data input #"
                                << arg.getArgNumber() << " is a scalar";
      options.microBatch = type.getDimSize(0) / options.gradientAccumulation;
      break;
    }
  return options;
}

LogicalResult sharc::emitProgram(func::FuncOp step, const EmitOptions &options,
                                 llvm::raw_ostream &os, ProgramReport &report) {
  return codegen::ProgramEmitter(step, options, report).run(os);
}
