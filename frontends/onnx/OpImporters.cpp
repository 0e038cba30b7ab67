//===- OpImporters.cpp - ONNX operators to sharc ops ----------------------===//
//
// One rule per ONNX operator (default domain, the definitions in force from
// opset 13 to 21; see Importer.cpp for older opsets).  Operators without a
// direct sharc op are decomposed into primitives; inputs that determine
// shapes (Reshape's shape, Slice's bounds, axes, ...) must be constants by
// the time the node is imported, which constant folding of the shape
// computations before it guarantees for static graphs.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/ImporterInternal.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::onnx_import;

/// Largest kernel size, stride, dilation, padding or group count accepted.
static constexpr int64_t kMaxWindowValue = int64_t(1) << 31;

/// Maps `axis` from [-rank, rank) to [0, rank).
FailureOr<int64_t>
sharc::onnx_import::normalizeAxis(NodeImporter &n, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return n.emitError() << "axis " << axis << " is out of range for rank "
                         << rank;
  return axis < 0 ? axis + rank : axis;
}

/// Normalizes a list of distinct axes.
static FailureOr<SmallVector<int64_t>>
normalizeAxes(NodeImporter &n, ArrayRef<int64_t> axes, int64_t rank) {
  SmallVector<int64_t> result;
  SmallVector<bool> seen(rank, false);
  for (int64_t axis : axes) {
    FailureOr<int64_t> normalized = normalizeAxis(n, axis, rank);
    if (failed(normalized))
      return failure();
    if (seen[*normalized])
      return n.emitError() << "axis " << axis << " is repeated";
    seen[*normalized] = true;
    result.push_back(*normalized);
  }
  return result;
}

static SmallVector<int64_t> allAxes(int64_t rank) {
  return llvm::to_vector(llvm::seq<int64_t>(0, rank));
}

LogicalResult sharc::onnx_import::requireFloat(NodeImporter &n, Value value) {
  if (isa<FloatType>(elementTypeOf(value)))
    return success();
  return n.emitError() << "needs a floating-point tensor, got "
                       << value.getType();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy>
static FailureOr<Results> importUnary(NodeImporter &n) {
  return wrap(n.create<OpTy>(n.input(0)));
}

template <typename OpTy>
static FailureOr<Results> importBinary(NodeImporter &n) {
  return wrap(n.create<OpTy>(n.input(0), n.input(1)));
}

template <ComparePredicate predicate>
static FailureOr<Results> importCompare(NodeImporter &n) {
  return wrap(n.create<CompareOp>(n.input(0), n.input(1), predicate));
}

/// Max and Min: a left fold over any number of inputs.
template <typename OpTy>
static FailureOr<Results> importVariadic(NodeImporter &n) {
  Value result = n.input(0);
  for (unsigned i = 1; i < n.numInputs(); ++i) {
    if (!n.hasInput(i))
      return n.emitError() << "input #" << i << " is empty";
    FailureOr<Value> next = n.create<OpTy>(result, n.input(i));
    if (failed(next))
      return failure();
    result = *next;
  }
  return Results{result};
}

/// The exponent may have another type than the base; the result has the
/// base's type.  An integer base with a float exponent is raised in f64 and
/// truncated back (as numpy and onnxruntime do: 9 ^ 0.5 = 3); otherwise the
/// exponent is converted to the base's type.
static FailureOr<Results> importPow(NodeImporter &n) {
  Value base = n.input(0), exponent = n.input(1);
  Type type = elementTypeOf(base);
  if (isa<FloatType>(type) || !isa<FloatType>(elementTypeOf(exponent))) {
    FailureOr<Value> converted = n.cast(exponent, type);
    if (failed(converted))
      return failure();
    return wrap(n.create<PowOp>(base, *converted));
  }
  Type f64 = Float64Type::get(n.context());
  FailureOr<Value> wideBase = n.cast(base, f64);
  if (failed(wideBase))
    return failure();
  FailureOr<Value> wideExponent = n.cast(exponent, f64);
  if (failed(wideExponent))
    return failure();
  FailureOr<Value> power = n.create<PowOp>(*wideBase, *wideExponent);
  if (failed(power))
    return failure();
  return wrap(n.cast(*power, type));
}

/// 1 / x.
static FailureOr<Results> importReciprocal(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  return wrap(n.create<DivOp>(n.scalar(elementTypeOf(x), 1.0), x));
}

/// x < 0 ? alpha * x : x.
static FailureOr<Results> importLeakyRelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  double alpha = n.getFloat("alpha", static_cast<double>(0.01f));
  FailureOr<Value> negative =
      n.create<CompareOp>(x, n.scalar(type, 0.0), ComparePredicate::lt);
  if (failed(negative))
    return failure();
  FailureOr<Value> scaled = n.create<MulOp>(x, n.scalar(type, alpha));
  if (failed(scaled))
    return failure();
  return wrap(n.create<SelectOp>(*negative, *scaled, x));
}

static FailureOr<Results> importGelu(NodeImporter &n) {
  std::string approximation = n.getString("approximate", "none");
  GeluApproximation kind;
  if (approximation == "none")
    kind = GeluApproximation::none;
  else if (approximation == "tanh")
    kind = GeluApproximation::tanh;
  else
    return n.emitError() << "unsupported approximation '" << approximation
                         << "'";
  return wrap(n.create<GeluOp>(n.input(0), kind));
}

/// log(exp(x) + 1), as ONNX defines it.
static FailureOr<Results> importSoftplus(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<Value> exp = n.create<ExpOp>(x);
  if (failed(exp))
    return failure();
  FailureOr<Value> sum = n.create<AddOp>(*exp, n.scalar(elementTypeOf(x), 1.0));
  if (failed(sum))
    return failure();
  return wrap(n.create<LogOp>(*sum));
}

/// x < 0 ? alpha (e^x - 1) : x.
static FailureOr<Results> importElu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  SHARC_TRY(exp, n.create<ExpOp>(x));
  SHARC_TRY(em1, n.create<SubOp>(*exp, n.scalar(type, 1.0)));
  SHARC_TRY(scaled,
            n.create<MulOp>(*em1, n.scalar(type, n.getFloat("alpha", 1.0))));
  SHARC_TRY(negative,
            n.create<CompareOp>(x, n.scalar(type, 0.0), ComparePredicate::lt));
  return wrap(n.create<SelectOp>(*negative, *scaled, x));
}

/// gamma (x <= 0 ? alpha e^x - alpha : x), ONNX's default alpha and gamma
/// (float32 values of SELU's constants).
static FailureOr<Results> importSelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  double alpha =
      n.getFloat("alpha", static_cast<double>(1.67326319217681884765625f));
  double gamma =
      n.getFloat("gamma", static_cast<double>(1.05070102214813232421875f));
  SHARC_TRY(exp, n.create<ExpOp>(x));
  SHARC_TRY(scaled, n.create<MulOp>(*exp, n.scalar(type, alpha)));
  SHARC_TRY(shifted, n.create<SubOp>(*scaled, n.scalar(type, alpha)));
  SHARC_TRY(positive,
            n.create<CompareOp>(x, n.scalar(type, 0.0), ComparePredicate::gt));
  SHARC_TRY(chosen, n.create<SelectOp>(*positive, x, *shifted));
  return wrap(n.create<MulOp>(*chosen, n.scalar(type, gamma)));
}

/// max(0, x) + min(0, alpha (e^(x / alpha) - 1)).
static FailureOr<Results> importCelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  double alpha = n.getFloat("alpha", 1.0);
  if (alpha == 0)
    return n.emitError() << "alpha must not be 0";
  SHARC_TRY(divided, n.create<DivOp>(x, n.scalar(type, alpha)));
  SHARC_TRY(exp, n.create<ExpOp>(*divided));
  SHARC_TRY(em1, n.create<SubOp>(*exp, n.scalar(type, 1.0)));
  SHARC_TRY(scaled, n.create<MulOp>(*em1, n.scalar(type, alpha)));
  SHARC_TRY(low, n.create<MinOp>(*scaled, n.scalar(type, 0.0)));
  SHARC_TRY(high, n.create<MaxOp>(x, n.scalar(type, 0.0)));
  return wrap(n.create<AddOp>(*high, *low));
}

/// max(0, min(1, alpha x + beta)); HardSwish is x times it with alpha 1/6.
static FailureOr<Value> hardSigmoid(NodeImporter &n, Value x, double alpha,
                                    double beta) {
  Type type = elementTypeOf(x);
  SHARC_TRY(scaled, n.create<MulOp>(x, n.scalar(type, alpha)));
  SHARC_TRY(shifted, n.create<AddOp>(*scaled, n.scalar(type, beta)));
  SHARC_TRY(capped, n.create<MinOp>(*shifted, n.scalar(type, 1.0)));
  return n.create<MaxOp>(*capped, n.scalar(type, 0.0));
}

static FailureOr<Results> importHardSigmoid(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  return wrap(hardSigmoid(n, x, n.getFloat("alpha", static_cast<double>(0.2f)),
                          n.getFloat("beta", 0.5)));
}

static FailureOr<Results> importHardSwish(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(gate, hardSigmoid(n, x, static_cast<double>(1.0f / 6), 0.5));
  return wrap(n.create<MulOp>(x, *gate));
}

/// x / (1 + |x|).
static FailureOr<Results> importSoftsign(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(abs, n.create<AbsOp>(x));
  SHARC_TRY(denominator,
            n.create<AddOp>(*abs, n.scalar(elementTypeOf(x), 1.0)));
  return wrap(n.create<DivOp>(x, *denominator));
}

/// x > alpha ? x : 0.
static FailureOr<Results> importThresholdedRelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  SHARC_TRY(above,
            n.create<CompareOp>(x, n.scalar(type, n.getFloat("alpha", 1.0)),
                                ComparePredicate::gt));
  return wrap(n.create<SelectOp>(*above, x, n.scalar(type, 0.0)));
}

/// x < 0 ? slope x : x, the slope broadcast to x (unidirectionally).
static FailureOr<Results> importPRelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(slope, n.broadcast(n.input(1), shapeOf(x)));
  SHARC_TRY(scaled, n.create<MulOp>(x, *slope));
  SHARC_TRY(negative, n.create<CompareOp>(x, n.scalar(elementTypeOf(x), 0.0),
                                          ComparePredicate::lt));
  return wrap(n.create<SelectOp>(*negative, *scaled, x));
}

/// x < -lambd ? x + bias : (x > lambd ? x - bias : 0).
static FailureOr<Results> importShrink(NodeImporter &n) {
  Value x = n.input(0);
  Type type = elementTypeOf(x);
  double lambd = n.getFloat("lambd", 0.5), bias = n.getFloat("bias", 0.0);
  Value zero = n.scalar(type, 0.0);
  SHARC_TRY(low, n.create<CompareOp>(x, n.scalar(type, -lambd),
                                     ComparePredicate::lt));
  SHARC_TRY(high, n.create<CompareOp>(x, n.scalar(type, lambd),
                                      ComparePredicate::gt));
  SHARC_TRY(plus, n.create<AddOp>(x, n.scalar(type, bias)));
  SHARC_TRY(minus, n.create<SubOp>(x, n.scalar(type, bias)));
  SHARC_TRY(upper, n.create<SelectOp>(*high, *minus, zero));
  return wrap(n.create<SelectOp>(*low, *plus, *upper));
}

/// sin(x) / cos(x).
static FailureOr<Results> importTan(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(sin, n.create<SinOp>(x));
  SHARC_TRY(cos, n.create<CosOp>(x));
  return wrap(n.create<DivOp>(*sin, *cos));
}

/// (e^x - e^-x) / 2 (Sinh) or (e^x + e^-x) / 2 (Cosh).
template <typename CombineOp>
static FailureOr<Results> importHyperbolic(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(exp, n.create<ExpOp>(x));
  SHARC_TRY(negated, n.create<NegOp>(x));
  SHARC_TRY(expNegated, n.create<ExpOp>(*negated));
  SHARC_TRY(combined, n.create<CombineOp>(*exp, *expNegated));
  return wrap(n.create<MulOp>(*combined, n.scalar(elementTypeOf(x), 0.5)));
}

/// -floor(-x).
static FailureOr<Results> importCeil(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SHARC_TRY(negated, n.create<NegOp>(x));
  SHARC_TRY(floor, n.create<FloorOp>(*negated));
  return wrap(n.create<NegOp>(*floor));
}

/// 1, -1 or 0 (NaN for NaN), in x's type.
static FailureOr<Results> importSign(NodeImporter &n) {
  Value x = n.input(0);
  Type type = elementTypeOf(x);
  Value zero = n.scalar(type, 0.0);
  SHARC_TRY(positive, n.create<CompareOp>(x, zero, ComparePredicate::gt));
  SHARC_TRY(negative, n.create<CompareOp>(x, zero, ComparePredicate::lt));
  SHARC_TRY(lower, n.create<SelectOp>(*negative, n.scalar(type, -1.0), zero));
  SHARC_TRY(sign, n.create<SelectOp>(*positive, n.scalar(type, 1.0), *lower));
  if (!isa<FloatType>(type))
    return Results{*sign};
  // A NaN compares false both ways: keep it.
  SHARC_TRY(number, n.create<CompareOp>(x, x, ComparePredicate::eq));
  return wrap(n.create<SelectOp>(*number, *sign, x));
}

/// x != x.
static FailureOr<Results> importIsNaN(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  return wrap(n.create<CompareOp>(x, x, ComparePredicate::ne));
}

/// x == +inf (detect_positive) or x == -inf (detect_negative).
static FailureOr<Results> importIsInf(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  Type type = elementTypeOf(x);
  double infinity = std::numeric_limits<double>::infinity();
  bool positive = n.getInt("detect_positive", 1) != 0;
  bool negative = n.getInt("detect_negative", 1) != 0;
  SHARC_TRY(isPositive, n.create<CompareOp>(x, n.scalar(type, infinity),
                                            ComparePredicate::eq));
  SHARC_TRY(isNegative, n.create<CompareOp>(x, n.scalar(type, -infinity),
                                            ComparePredicate::eq));
  if (positive && negative)
    return wrap(n.create<OrOp>(*isPositive, *isNegative));
  if (positive)
    return Results{*isPositive};
  if (negative)
    return Results{*isNegative};
  // Neither: all false.
  return wrap(n.create<AndOp>(*isPositive, *isNegative));
}

/// (a or b) and not (a and b).
static FailureOr<Results> importXor(NodeImporter &n) {
  SHARC_TRY(either, n.create<OrOp>(n.input(0), n.input(1)));
  SHARC_TRY(both, n.create<AndOp>(n.input(0), n.input(1)));
  SHARC_TRY(notBoth, n.create<NotOp>(*both));
  return wrap(n.create<AndOp>(*either, *notBoth));
}

/// Sum and Mean: a left fold of additions over the inputs (Mean divides by
/// their count).
template <bool mean>
static FailureOr<Results> importSumOrMean(NodeImporter &n) {
  FailureOr<Results> sum = importVariadic<AddOp>(n);
  if (failed(sum) || !mean || n.numInputs() == 1)
    return sum;
  Value total = (*sum)[0];
  if (failed(requireFloat(n, total)))
    return failure();
  return wrap(n.create<DivOp>(
      total, n.scalar(elementTypeOf(total), double(n.numInputs()))));
}

/// min(max(x, lo), hi), each bound optional and possibly a dynamic value.
static FailureOr<Results> importClip(NodeImporter &n) {
  Value result = n.input(0);
  for (unsigned index : {1u, 2u}) {
    if (!n.hasInput(index))
      continue;
    Value bound = n.input(index);
    if (tensorTypeOf(bound).getNumElements() != 1)
      return n.emitError() << (index == 1 ? "min" : "max")
                           << " must be a scalar, got " << bound.getType();
    FailureOr<Value> scalarBound = n.reshape(bound, {});
    if (failed(scalarBound))
      return failure();
    FailureOr<Value> clipped = index == 1
                                   ? n.create<MaxOp>(result, *scalarBound)
                                   : n.create<MinOp>(result, *scalarBound);
    if (failed(clipped))
      return failure();
    result = *clipped;
  }
  return Results{result};
}

static FailureOr<Results> importWhere(NodeImporter &n) {
  return wrap(n.create<SelectOp>(n.input(0), n.input(1), n.input(2)));
}

static FailureOr<Results> importCast(NodeImporter &n) {
  if (!n.hasAttr("to"))
    return n.emitError() << "needs the 'to' attribute";
  int64_t to = n.getInt("to", 0);
  std::optional<DType> dtype = dtypeFromOnnx(to);
  if (!dtype)
    return n.emitError() << "cannot cast to unsupported element type "
                         << onnxTypeName(to);
  return wrap(n.cast(n.input(0), mlirType(*dtype, n.context())));
}

static FailureOr<Results> importCastLike(NodeImporter &n) {
  return wrap(n.cast(n.input(0), elementTypeOf(n.input(1))));
}

static FailureOr<Results> importIdentity(NodeImporter &n) {
  return Results{n.input(0)};
}

//===----------------------------------------------------------------------===//
// Constants and shape computations
//===----------------------------------------------------------------------===//

static FailureOr<Results> importConstant(NodeImporter &n) {
  int given =
      llvm::count_if(ArrayRef<StringRef>{"value", "value_float", "value_floats",
                                         "value_int", "value_ints"},
                     [&](StringRef name) { return n.hasAttr(name); });
  if (given != 1)
    return n.emitError() << "needs exactly one value attribute, got " << given;
  Tensor value;
  if (const onnx::TensorProto *proto = n.getTensor("value")) {
    FailureOr<Tensor> tensor = n.readTensor(*proto, "the 'value' attribute");
    if (failed(tensor))
      return failure();
    value = std::move(*tensor);
  } else if (n.hasAttr("value_float")) {
    value = Tensor(DType::f32, {});
    value.floats()[0] = n.getFloat("value_float", 0.0);
  } else if (std::optional<SmallVector<double>> floats =
                 n.getFloats("value_floats")) {
    value = Tensor(DType::f32, {static_cast<int64_t>(floats->size())});
    llvm::copy(*floats, value.floats().begin());
  } else if (n.hasAttr("value_int")) {
    value = Tensor(DType::i64, {});
    value.ints()[0] = n.getInt("value_int", 0);
  } else {
    SmallVector<int64_t> ints = *n.getInts("value_ints");
    value = Tensor(DType::i64, {static_cast<int64_t>(ints.size())});
    llvm::copy(ints, value.ints().begin());
  }
  return Results{n.constant(value)};
}

/// A scalar broadcast to the shape; it folds to a constant when small.
static FailureOr<Results> importConstantOfShape(NodeImporter &n) {
  FailureOr<SmallVector<int64_t>> shape = n.requireInts(0, "shape");
  if (failed(shape))
    return failure();
  if (!checkedNumElements(*shape))
    return n.emitError() << "shape " << formatShape(*shape)
                         << " is invalid or too large";
  Tensor value(DType::f32, {});
  if (const onnx::TensorProto *proto = n.getTensor("value")) {
    FailureOr<Tensor> tensor = n.readTensor(*proto, "the 'value' attribute");
    if (failed(tensor))
      return failure();
    if (tensor->numElements() != 1)
      return n.emitError() << "the 'value' attribute must hold one element, "
                              "got "
                           << tensor->describe();
    value = tensor->reshaped({});
  }
  return wrap(n.broadcast(n.constant(value), *shape));
}

static FailureOr<Results> importShape(NodeImporter &n) {
  ArrayRef<int64_t> dims = shapeOf(n.input(0));
  int64_t rank = dims.size();
  auto clampIndex = [&](int64_t index) {
    if (index < 0)
      index += rank;
    return std::clamp<int64_t>(index, 0, rank);
  };
  int64_t start = clampIndex(n.getInt("start", 0));
  int64_t end = clampIndex(n.getInt("end", rank));
  Tensor value(DType::i64, {std::max<int64_t>(end - start, 0)});
  for (int64_t i = start; i < end; ++i)
    value.ints()[i - start] = dims[i];
  return Results{n.constant(value)};
}

static FailureOr<Results> importSize(NodeImporter &n) {
  Tensor value(DType::i64, {});
  value.ints()[0] = tensorTypeOf(n.input(0)).getNumElements();
  return Results{n.constant(value)};
}

/// Number of elements of Range(start, limit, delta) for integers.
static std::optional<int64_t> integerRangeCount(int64_t start, int64_t limit,
                                                int64_t delta) {
  if (delta == 0)
    return std::nullopt;
  if (delta > 0 ? limit <= start : limit >= start)
    return 0;
  uint64_t distance = delta > 0 ? static_cast<uint64_t>(limit) - start
                                : static_cast<uint64_t>(start) - limit;
  uint64_t step = delta > 0 ? static_cast<uint64_t>(delta)
                            : 0 - static_cast<uint64_t>(delta);
  uint64_t count = distance / step + (distance % step != 0);
  if (count > static_cast<uint64_t>(kMaxElements))
    return std::nullopt;
  return count;
}

/// output[i] = start + i * delta, built from iota so that it folds when small.
static FailureOr<Results> importRange(NodeImporter &n) {
  Type type = elementTypeOf(n.input(0));
  if (elementTypeOf(n.input(1)) != type || elementTypeOf(n.input(2)) != type)
    return n.emitError() << "start, limit and delta must have the same type";
  static constexpr const char *names[] = {"start", "limit", "delta"};
  SmallVector<Tensor, 3> operands;
  for (unsigned index = 0; index < 3; ++index) {
    StringRef name = names[index];
    FailureOr<Tensor> value = n.requireConstant(index, name);
    if (failed(value))
      return failure();
    if (value->numElements() != 1)
      return n.emitError() << name << " must be a scalar, got "
                           << value->describe();
    operands.push_back(value->reshaped({}));
  }
  std::optional<int64_t> count;
  if (isa<FloatType>(type)) {
    double start = operands[0].getDouble(0), limit = operands[1].getDouble(0),
           delta = operands[2].getDouble(0);
    double elements = std::ceil((limit - start) / delta);
    if (delta != 0 && elements <= static_cast<double>(kMaxElements))
      count = elements > 0 ? static_cast<int64_t>(elements) : 0;
  } else {
    count = integerRangeCount(operands[0].getInt(0), operands[1].getInt(0),
                              operands[2].getInt(0));
  }
  if (!count)
    return n.emitError() << "Range with delta "
                         << llvm::formatv("{0}", operands[2].getDouble(0))
                         << " has no valid element count";
  FailureOr<Value> iota =
      n.createTyped<IotaOp>(RankedTensorType::get({*count}, type), int64_t(0));
  if (failed(iota))
    return failure();
  FailureOr<Value> scaled = n.create<MulOp>(*iota, n.constant(operands[2]));
  if (failed(scaled))
    return failure();
  return wrap(n.create<AddOp>(*scaled, n.constant(operands[0])));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

static FailureOr<Results> importGather(NodeImporter &n) {
  Value data = n.input(0);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", 0), rankOf(data));
  if (failed(axis))
    return failure();
  return wrap(n.create<GatherOp>(data, n.input(1), *axis));
}

FailureOr<Value> sharc::onnx_import::sliceAlong(NodeImporter &n, Value x,
                                                int64_t axis, int64_t start,
                                                int64_t count, int64_t stride) {
  SmallVector<int64_t> shape(shapeOf(x)), starts(rankOf(x), 0),
      strides(rankOf(x), 1);
  shape[axis] = count;
  starts[axis] = start;
  strides[axis] = stride;
  return n.createTyped<SliceOp>(tensorTypeOf(x).clone(shape), x,
                                ArrayRef<int64_t>(starts),
                                ArrayRef<int64_t>(strides));
}

/// `x` with `count` zeros before its first element along `axis` and its last
/// `count` elements dropped (the shift of a scan).
static FailureOr<Value> shiftAlong(NodeImporter &n, Value x, int64_t axis,
                                   int64_t count) {
  SmallVector<int64_t> zerosShape(shapeOf(x));
  zerosShape[axis] = count;
  SHARC_TRY(zeros, n.broadcast(n.scalar(elementTypeOf(x), 0.0), zerosShape));
  SHARC_TRY(kept, sliceAlong(n, x, axis, 0, shapeOf(x)[axis] - count));
  return n.create<ConcatOp>(ValueRange{*zeros, *kept}, axis);
}

/// CumSum as a Hillis-Steele scan: log2(L) rounds of y += shift(y, 2^k)
/// along the axis (integers exactly; floats summed in the scan's tree
/// order), `exclusive` one more shift, `reverse` on the reversed axis (a
/// slice of stride -1).  The axis must be a constant.
static FailureOr<Results> importCumSum(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<SmallVector<int64_t>> axisInput = n.requireInts(1, "axis");
  if (failed(axisInput))
    return failure();
  if (axisInput->size() != 1)
    return n.emitError() << "axis must hold one value, got "
                         << axisInput->size();
  FailureOr<int64_t> axis = normalizeAxis(n, axisInput->front(), rankOf(x));
  if (failed(axis))
    return failure();
  Type type = elementTypeOf(x);
  if (isa<IntegerType>(type) && type.getIntOrFloatBitWidth() == 1)
    return n.emitError() << "needs a numeric tensor, got " << x.getType();
  int64_t length = shapeOf(x)[*axis];
  if (length == 0)
    return Results{x};
  bool reverse = n.getInt("reverse", 0) != 0;
  bool exclusive = n.getInt("exclusive", 0) != 0;
  Value y = x;
  auto flip = [&]() -> LogicalResult {
    FailureOr<Value> flipped = sliceAlong(n, y, *axis, length - 1, length, -1);
    if (failed(flipped))
      return failure();
    y = *flipped;
    return success();
  };
  if (reverse && failed(flip()))
    return failure();
  for (int64_t step = 1; step < length; step *= 2) {
    SHARC_TRY(shifted, shiftAlong(n, y, *axis, step));
    SHARC_TRY(sum, n.create<AddOp>(y, *shifted));
    y = *sum;
  }
  if (exclusive) {
    SHARC_TRY(shifted, shiftAlong(n, y, *axis, 1));
    y = *shifted;
  }
  if (reverse && failed(flip()))
    return failure();
  return Results{y};
}

/// Integer (not bool) indices.
static LogicalResult requireIndices(NodeImporter &n, Value indices) {
  Type type = elementTypeOf(indices);
  if (isa<IntegerType>(type) && type.getIntOrFloatBitWidth() > 1)
    return success();
  return n.emitError() << "indices must be integers, got " << indices.getType();
}

/// Indices counted from the end made non-negative: i + (i < 0 ? size : 0),
/// `sizes` broadcast against them.
static FailureOr<Value> wrapNegative(NodeImporter &n, Value indices,
                                     Value sizes) {
  SHARC_TRY(negative,
            n.create<CompareOp>(indices, n.scalar(elementTypeOf(indices), 0.0),
                                ComparePredicate::lt));
  SHARC_TRY(wrapped, n.create<AddOp>(indices, sizes));
  return n.create<SelectOp>(*negative, *wrapped, indices);
}

/// Where the ND and Elements forms of Gather and Scatter address `data`:
/// `data` viewed as `flatShape` (the addressed leading dimensions as one),
/// and the row of that view each index (tuple) selects.
struct FlatAddress {
  Value offsets;
  SmallVector<int64_t> flatShape;
};

/// GatherND's and ScatterND's addressing: the dimensions of `data` that the
/// batch dimensions and an index tuple select (the first b + q) are viewed as
/// one of their product; each index tuple becomes its row-major offset there
/// (negative indices count from the end; the batch position, from `iota`s
/// over the batch dimensions, picks the block of its batch).
static FailureOr<FlatAddress> tupleOffsets(NodeImporter &n, Value data,
                                           Value indices, int64_t batch) {
  Type indexType = elementTypeOf(indices);
  if (failed(requireIndices(n, indices)))
    return failure();
  ArrayRef<int64_t> dims = shapeOf(data), indexDims = shapeOf(indices);
  int64_t indexRank = indexDims.size();
  if (batch < 0 || batch >= std::min<int64_t>(indexRank, dims.size()))
    return n.emitError() << "batch_dims " << batch
                         << " must be less than the ranks of data and indices";
  for (int64_t a = 0; a < batch; ++a)
    if (dims[a] != indexDims[a])
      return n.emitError() << "batch dimension " << a << " is " << dims[a]
                           << " in data but " << indexDims[a] << " in indices";
  int64_t q = indexDims.back();
  if (q < 1 || batch + q > static_cast<int64_t>(dims.size()))
    return n.emitError() << "the last dimension of indices (" << q
                         << ") must be in [1, rank of data - batch_dims = "
                         << dims.size() - batch << "]";
  // Row-major strides of the indexed dimensions, and each index made
  // non-negative: i + (i < 0 ? d : 0).
  SmallVector<double> strides(q), sizes(q);
  int64_t block = 1;
  for (int64_t j = q - 1; j >= 0; --j) {
    strides[j] = double(block);
    sizes[j] = double(dims[batch + j]);
    block *= dims[batch + j];
  }
  auto vector = [&](ArrayRef<double> values) {
    Tensor t(*dtypeOf(indexType), {q});
    for (int64_t j = 0; j < q; ++j)
      t.setDouble(j, values[j]);
    return n.constant(t);
  };
  SHARC_TRY(positive, wrapNegative(n, indices, vector(sizes)));
  SHARC_TRY(scaled, n.create<MulOp>(*positive, vector(strides)));
  SHARC_TRY(offsets,
            n.create<ReduceOp>(*scaled, ReduceKind::sum,
                               ArrayRef<int64_t>{indexRank - 1}, false));
  Value offset = *offsets;
  auto offsetType = cast<RankedTensorType>(offset.getType());
  int64_t batchStride = block;
  for (int64_t a = batch - 1; a >= 0; --a) {
    SHARC_TRY(position, n.createTyped<IotaOp>(offsetType, a));
    SHARC_TRY(start, n.create<MulOp>(*position,
                                     n.scalar(indexType, double(batchStride))));
    SHARC_TRY(sum, n.create<AddOp>(offset, *start));
    offset = *sum;
    batchStride *= dims[a];
  }
  FlatAddress address{offset, {batchStride}};
  address.flatShape.append(dims.begin() + batch + q, dims.end());
  return address;
}

/// GatherElements' and ScatterElements' addressing: each index element
/// addresses `data` at its own position, but for `axis`, where it takes the
/// index (negative counts from the end): a row-major offset into the
/// flattened `data` (the index times the axis's stride plus an `iota` per
/// other dimension times its stride).
static FailureOr<FlatAddress> elementOffsets(NodeImporter &n, Value data,
                                             Value indices, int64_t axisAttr) {
  Type indexType = elementTypeOf(indices);
  if (failed(requireIndices(n, indices)))
    return failure();
  ArrayRef<int64_t> dims = shapeOf(data), indexDims = shapeOf(indices);
  int64_t rank = dims.size();
  if (static_cast<int64_t>(indexDims.size()) != rank || rank == 0)
    return n.emitError() << "indices must have the rank of data (" << rank
                         << "), got " << indices.getType();
  FailureOr<int64_t> axis = normalizeAxis(n, axisAttr, rank);
  if (failed(axis))
    return failure();
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indexDims[d] > dims[d])
      return n.emitError() << "indices dimension " << d << " (" << indexDims[d]
                           << ") exceeds data's (" << dims[d] << ")";
  SmallVector<int64_t> strides(rank);
  int64_t total = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    strides[d] = total;
    total *= dims[d];
  }
  SHARC_TRY(positive,
            wrapNegative(n, indices, n.scalar(indexType, double(dims[*axis]))));
  SHARC_TRY(
      offset,
      n.create<MulOp>(*positive, n.scalar(indexType, double(strides[*axis]))));
  Value sum = *offset;
  auto indexTensor = cast<RankedTensorType>(indices.getType());
  for (int64_t d = 0; d < rank; ++d) {
    if (d == *axis || indexDims[d] == 1)
      continue;
    SHARC_TRY(position, n.createTyped<IotaOp>(indexTensor, d));
    SHARC_TRY(scaled, n.create<MulOp>(*position,
                                      n.scalar(indexType, double(strides[d]))));
    SHARC_TRY(next, n.create<AddOp>(sum, *scaled));
    sum = *next;
  }
  return FlatAddress{sum, {total}};
}

/// GatherND and GatherElements: `gather` of the addressed rows (its
/// gradient adds into them).
template <bool elements>
static FailureOr<Results> importGatherAt(NodeImporter &n) {
  Value data = n.input(0);
  FailureOr<FlatAddress> address =
      elements ? elementOffsets(n, data, n.input(1), n.getInt("axis", 0))
               : tupleOffsets(n, data, n.input(1), n.getInt("batch_dims", 0));
  if (failed(address))
    return failure();
  SHARC_TRY(flat, n.reshape(data, address->flatShape));
  return wrap(n.create<GatherOp>(*flat, address->offsets, int64_t(0)));
}

/// ScatterND and ScatterElements with `reduction` none or add: the updates
/// added into zeros at the addressed rows (`scatter_add`); add adds that to
/// `data`, none takes it where a row was addressed (a second `scatter_add`
/// of ones counts them) and `data` elsewhere.  With none, repeated indices
/// add their updates (ONNX leaves the result undefined).
template <bool elements>
static FailureOr<Results> importScatterAt(NodeImporter &n) {
  Value data = n.input(0), updates = n.input(2);
  if (failed(requireFloat(n, data)))
    return failure();
  std::string reduction = n.getString("reduction", "none");
  if (reduction != "none" && reduction != "add")
    return n.emitError() << "unsupported reduction '" << reduction
                         << "' (none and add are supported)";
  FailureOr<FlatAddress> address =
      elements ? elementOffsets(n, data, n.input(1), n.getInt("axis", 0))
               : tupleOffsets(n, data, n.input(1), 0);
  if (failed(address))
    return failure();
  SmallVector<int64_t> updateShape(shapeOf(address->offsets));
  updateShape.append(address->flatShape.begin() + 1, address->flatShape.end());
  if (shapeOf(updates) != ArrayRef<int64_t>(updateShape)) {
    std::string expected;
    for (auto [d, size] : llvm::enumerate(updateShape))
      expected += (d ? "x" : "") + std::to_string(size);
    return n.emitError() << "updates must have shape " << expected << ", got "
                         << updates.getType();
  }
  Type type = elementTypeOf(data);
  SHARC_TRY(flat, n.reshape(data, address->flatShape));
  SHARC_TRY(zeros, n.broadcast(n.scalar(type, 0.0), address->flatShape));
  SHARC_TRY(added, n.create<ScatterAddOp>(*zeros, address->offsets, updates,
                                          int64_t(0)));
  Value result;
  if (reduction == "add") {
    SHARC_TRY(sum, n.create<AddOp>(*flat, *added));
    result = *sum;
  } else {
    SHARC_TRY(ones, n.broadcast(n.scalar(type, 1.0), updateShape));
    SHARC_TRY(count, n.create<ScatterAddOp>(*zeros, address->offsets, *ones,
                                            int64_t(0)));
    SHARC_TRY(hit, n.create<CompareOp>(*count, n.scalar(type, 0.0),
                                       ComparePredicate::gt));
    SHARC_TRY(chosen, n.create<SelectOp>(*hit, *added, *flat));
    result = *chosen;
  }
  return wrap(n.reshape(result, shapeOf(data)));
}

/// -x for floats, -1 - x for integers (which cannot overflow): the order
/// reversal that takes a minimum through `reduce {max}`.
static FailureOr<Value> reverseOrder(NodeImporter &n, Value x) {
  Type type = elementTypeOf(x);
  if (isa<FloatType>(type))
    return n.create<NegOp>(x);
  return n.create<SubOp>(n.scalar(type, -1.0), x);
}

/// ArgMax and ArgMin (int64): the first (or with select_last_index the
/// last) position along `axis` where `x` equals its maximum (of -x, -1 - x
/// for ArgMin); a NaN is the maximum, as in numpy.  The positions are an
/// `iota`, the others replaced by a sentinel past the end, reduced by `max`
/// (through the order reversal for the first).
template <bool isMax>
static FailureOr<Value> argExtreme(NodeImporter &n, Value x, int64_t axis,
                                   bool keep, bool last) {
  Type type = elementTypeOf(x);
  if (isa<IntegerType>(type) && type.getIntOrFloatBitWidth() == 1)
    return n.emitError() << "needs a numeric tensor, got " << x.getType();
  int64_t length = shapeOf(x)[axis];
  if (length == 0)
    return n.emitError() << "axis " << axis << " has no elements";
  Value y = x;
  if (!isMax) {
    SHARC_TRY(reversed, reverseOrder(n, x));
    y = *reversed;
  }
  SHARC_TRY(extreme, n.create<ReduceOp>(y, ReduceKind::max,
                                        ArrayRef<int64_t>{axis}, true));
  SHARC_TRY(hit, n.create<CompareOp>(y, *extreme, ComparePredicate::eq));
  Value hits = *hit;
  if (isa<FloatType>(type)) {
    SHARC_TRY(nan, n.create<CompareOp>(y, y, ComparePredicate::ne));
    SHARC_TRY(either, n.create<OrOp>(hits, *nan));
    hits = *either;
  }
  Type i64 = IntegerType::get(n.context(), 64);
  auto indexType = RankedTensorType::get(shapeOf(x), i64);
  SHARC_TRY(position, n.createTyped<IotaOp>(indexType, axis));
  if (last) {
    SHARC_TRY(candidate,
              n.create<SelectOp>(hits, *position, n.scalar(i64, -1.0)));
    return n.create<ReduceOp>(*candidate, ReduceKind::max,
                              ArrayRef<int64_t>{axis}, keep);
  }
  SHARC_TRY(candidate,
            n.create<SelectOp>(hits, *position, n.scalar(i64, double(length))));
  SHARC_TRY(reversed, reverseOrder(n, *candidate));
  SHARC_TRY(first, n.create<ReduceOp>(*reversed, ReduceKind::max,
                                      ArrayRef<int64_t>{axis}, keep));
  return reverseOrder(n, *first);
}

template <bool isMax>
static FailureOr<Results> importArgExtreme(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", 0), rankOf(x));
  if (failed(axis))
    return failure();
  return wrap(argExtreme<isMax>(n, x, *axis, n.getInt("keepdims", 1) != 0,
                                n.getInt("select_last_index", 0) != 0));
}

/// Hardmax: 1 at the first maximum along `axis`, 0 elsewhere.
static FailureOr<Results> importHardmax(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", -1), rankOf(x));
  if (failed(axis))
    return failure();
  SHARC_TRY(index, argExtreme<true>(n, x, *axis, true, false));
  auto indexType = RankedTensorType::get(shapeOf(x), elementTypeOf(*index));
  SHARC_TRY(position, n.createTyped<IotaOp>(indexType, *axis));
  SHARC_TRY(hit, n.create<CompareOp>(*position, *index, ComparePredicate::eq));
  return wrap(n.cast(*hit, elementTypeOf(x)));
}

/// OneHot: along the new axis, values[1] where the position equals the index
/// (negative indices count from `depth`), values[0] elsewhere; `depth`
/// must be a constant.
static FailureOr<Results> importOneHot(NodeImporter &n) {
  Value indices = n.input(0), values = n.input(2);
  FailureOr<Tensor> depthValue = n.requireConstant(1, "depth");
  if (failed(depthValue))
    return failure();
  if (depthValue->numElements() != 1)
    return n.emitError() << "depth must be one value";
  double depthDouble = depthValue->getDouble(0);
  if (!(depthDouble >= 1) || depthDouble > double(kMaxWindowValue))
    return n.emitError() << "depth must be in [1, " << kMaxWindowValue
                         << "], got " << depthDouble;
  int64_t depth = static_cast<int64_t>(depthDouble);
  if (tensorTypeOf(values).getNumElements() != 2)
    return n.emitError() << "values must hold [off, on], got "
                         << values.getType();
  int64_t rank = rankOf(indices) + 1;
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  Type i64 = IntegerType::get(n.context(), 64);
  Value index = indices;
  if (isa<FloatType>(elementTypeOf(indices))) {
    // Float indices are truncated, as the reference implementation does.
    SHARC_TRY(magnitude, n.create<AbsOp>(indices));
    SHARC_TRY(floored, n.create<FloorOp>(*magnitude));
    SHARC_TRY(negative, n.create<CompareOp>(
                            indices, n.scalar(elementTypeOf(indices), 0.0),
                            ComparePredicate::lt));
    SHARC_TRY(negated, n.create<NegOp>(*floored));
    SHARC_TRY(truncated, n.create<SelectOp>(*negative, *negated, *floored));
    index = *truncated;
  }
  SHARC_TRY(wide, n.cast(index, i64));
  SHARC_TRY(wrapped, wrapNegative(n, *wide, n.scalar(i64, double(depth))));
  SmallVector<int64_t> shape(shapeOf(indices)), expanded(shapeOf(indices));
  shape.insert(shape.begin() + *axis, depth);
  expanded.insert(expanded.begin() + *axis, 1);
  SHARC_TRY(column, n.reshape(*wrapped, expanded));
  SHARC_TRY(position,
            n.createTyped<IotaOp>(RankedTensorType::get(shape, i64), *axis));
  SHARC_TRY(hit, n.create<CompareOp>(*position, *column, ComparePredicate::eq));
  SHARC_TRY(flatValues, n.reshape(values, {2}));
  SHARC_TRY(off, sliceAlong(n, *flatValues, 0, 0, 1));
  SHARC_TRY(on, sliceAlong(n, *flatValues, 0, 1, 1));
  SHARC_TRY(offScalar, n.reshape(*off, {}));
  SHARC_TRY(onScalar, n.reshape(*on, {}));
  return wrap(n.create<SelectOp>(*hit, *onScalar, *offScalar));
}

/// Tile: each axis d of `x` viewed as [1, d], broadcast to [repeats, d] and
/// merged back into repeats x d (the whole tensor repeated, as Tile does;
/// the gradient sums the copies).  `repeats` must be a constant.
static FailureOr<Results> importTile(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<SmallVector<int64_t>> repeats = n.requireInts(1, "repeats");
  if (failed(repeats))
    return failure();
  ArrayRef<int64_t> dims = shapeOf(x);
  if (repeats->size() != dims.size())
    return n.emitError() << "repeats must hold one value per axis ("
                         << dims.size() << "), got " << repeats->size();
  SmallVector<int64_t> split, repeated, merged;
  for (auto [repeat, dim] : llvm::zip(*repeats, dims)) {
    if (repeat < 0 || repeat > kMaxWindowValue)
      return n.emitError() << "repeats must be in [0, " << kMaxWindowValue
                           << "], got " << repeat;
    split.append({1, dim});
    repeated.append({repeat, dim});
    merged.push_back(repeat * dim);
  }
  if (!checkedNumElements(repeated))
    return n.emitError() << "the tiled tensor would have more than "
                         << kMaxElements << " elements";
  SHARC_TRY(viewed, n.reshape(x, split));
  SHARC_TRY(broadcast, n.broadcast(*viewed, repeated));
  return wrap(n.reshape(*broadcast, merged));
}

/// Round: to the nearest integer, halves to even: floor(x), plus 1 above a
/// half or at a half when floor(x) is odd.
static FailureOr<Value> roundHalfEven(NodeImporter &n, Value x) {
  Type type = elementTypeOf(x);
  SHARC_TRY(floor, n.create<FloorOp>(x));
  SHARC_TRY(fraction, n.create<SubOp>(x, *floor));
  SHARC_TRY(up, n.create<AddOp>(*floor, n.scalar(type, 1.0)));
  SHARC_TRY(halfFloor, n.create<MulOp>(*floor, n.scalar(type, 0.5)));
  SHARC_TRY(halfFloored, n.create<FloorOp>(*halfFloor));
  SHARC_TRY(even, n.create<CompareOp>(*halfFloor, *halfFloored,
                                      ComparePredicate::eq));
  SHARC_TRY(atHalf, n.create<SelectOp>(*even, *floor, *up));
  Value half = n.scalar(type, 0.5);
  SHARC_TRY(below, n.create<CompareOp>(*fraction, half, ComparePredicate::lt));
  SHARC_TRY(above, n.create<CompareOp>(*fraction, half, ComparePredicate::gt));
  SHARC_TRY(notAbove, n.create<SelectOp>(*below, *floor, *atHalf));
  return n.create<SelectOp>(*above, *up, *notAbove);
}

static FailureOr<Results> importRound(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  return wrap(roundHalfEven(n, x));
}

/// Mod: a - b trunc(a / b) (fmod = 1, C's fmod; integer division truncates,
/// floats truncate through floor); with fmod = 0 (integers only) the
/// remainder takes the divisor's sign, as Python's %, by adding b where the
/// signs differ.
static FailureOr<Results> importMod(NodeImporter &n) {
  Value a = n.input(0), b = n.input(1);
  Type type = elementTypeOf(a);
  bool isFloat = isa<FloatType>(type);
  bool fmod = n.getInt("fmod", 0) != 0;
  // Mod-28 defines fmod = 0 for floats too: the remainder of floor division.
  if (isFloat && !fmod && n.opset() < 28)
    return n.emitError() << "fmod must be 1 for floating-point inputs "
                            "before opset 28";
  if (!isFloat && type.getIntOrFloatBitWidth() == 1)
    return n.emitError() << "needs numeric tensors, got " << a.getType();
  SHARC_TRY(quotient, n.create<DivOp>(a, b));
  Value truncated = *quotient;
  if (isFloat) {
    Value zero = n.scalar(type, 0.0);
    SHARC_TRY(negative,
              n.create<CompareOp>(*quotient, zero, ComparePredicate::lt));
    SHARC_TRY(negated, n.create<NegOp>(*quotient));
    SHARC_TRY(floorNegated, n.create<FloorOp>(*negated));
    SHARC_TRY(ceiling, n.create<NegOp>(*floorNegated));
    SHARC_TRY(floor, n.create<FloorOp>(*quotient));
    SHARC_TRY(chosen, n.create<SelectOp>(*negative, *ceiling, *floor));
    truncated = *chosen;
  }
  SHARC_TRY(product, n.create<MulOp>(b, truncated));
  SHARC_TRY(remainder, n.create<SubOp>(a, *product));
  if (fmod)
    return Results{*remainder};
  Value zero = n.scalar(type, 0.0);
  SHARC_TRY(nonzero,
            n.create<CompareOp>(*remainder, zero, ComparePredicate::ne));
  SHARC_TRY(remainderNegative,
            n.create<CompareOp>(*remainder, zero, ComparePredicate::lt));
  SHARC_TRY(divisorNegative,
            n.create<CompareOp>(b, zero, ComparePredicate::lt));
  SHARC_TRY(divisorPositive, n.create<NotOp>(*divisorNegative));
  SHARC_TRY(remainderPositive, n.create<NotOp>(*remainderNegative));
  SHARC_TRY(negativeOverPositive,
            n.create<AndOp>(*remainderNegative, *divisorPositive));
  SHARC_TRY(positiveOverNegative,
            n.create<AndOp>(*remainderPositive, *divisorNegative));
  SHARC_TRY(differ,
            n.create<OrOp>(*negativeOverPositive, *positiveOverNegative));
  SHARC_TRY(fix, n.create<AndOp>(*nonzero, *differ));
  SHARC_TRY(adjusted, n.create<AddOp>(*remainder, b));
  SHARC_TRY(result, n.create<SelectOp>(*fix, *adjusted, *remainder));
  if (!isFloat)
    return Results{*result};
  // A finite x over an infinite y (where b * trunc(a / b) is NaN): x when
  // their signs agree, else y (Mod-28, as numpy's mod).
  Value infinity = n.scalar(type, std::numeric_limits<double>::infinity());
  SHARC_TRY(absA, n.create<AbsOp>(a));
  SHARC_TRY(absB, n.create<AbsOp>(b));
  SHARC_TRY(finiteA,
            n.create<CompareOp>(*absA, infinity, ComparePredicate::lt));
  SHARC_TRY(infiniteB,
            n.create<CompareOp>(*absB, infinity, ComparePredicate::eq));
  SHARC_TRY(finiteOverInfinite, n.create<AndOp>(*finiteA, *infiniteB));
  SHARC_TRY(signs, n.create<MulOp>(a, b));
  SHARC_TRY(opposite, n.create<CompareOp>(*signs, zero, ComparePredicate::lt));
  SHARC_TRY(edge, n.create<SelectOp>(*opposite, b, a));
  return wrap(n.create<SelectOp>(*finiteOverInfinite, *edge, *result));
}

/// DepthToSpace and SpaceToDepth: a reshape that splits the block out of
/// the channels (or the spatial axes), a transpose that moves it, and a
/// reshape that merges it into the spatial axes (or the channels).
/// DepthToSpace's `mode` DCR takes the block from the channels' leading
/// part, CRD from their trailing part.
template <bool toSpace>
static FailureOr<Results> importDepthSpace(NodeImporter &n) {
  Value x = n.input(0);
  if (rankOf(x) != 4)
    return n.emitError() << "needs an (N, C, H, W) input, got " << x.getType();
  int64_t block = n.getInt("blocksize", 0);
  if (block < 1 || block > kMaxWindowValue)
    return n.emitError() << "blocksize must be positive, got " << block;
  int64_t batch = shapeOf(x)[0], channels = shapeOf(x)[1];
  int64_t height = shapeOf(x)[2], width = shapeOf(x)[3];
  SmallVector<int64_t> split, permutation, merged;
  if (toSpace) {
    if (channels % (block * block))
      return n.emitError() << "the " << channels
                           << " channels are not a multiple of blocksize^2 = "
                           << block * block;
    int64_t depth = channels / (block * block);
    std::string mode = n.getString("mode", "DCR");
    if (mode == "DCR") {
      split = {batch, block, block, depth, height, width};
      permutation = {0, 3, 4, 1, 5, 2};
    } else if (mode == "CRD") {
      split = {batch, depth, block, block, height, width};
      permutation = {0, 1, 4, 2, 5, 3};
    } else {
      return n.emitError() << "unsupported mode '" << mode << "'";
    }
    merged = {batch, depth, height * block, width * block};
  } else {
    if (height % block || width % block)
      return n.emitError() << "the spatial size " << height << "x" << width
                           << " is not a multiple of blocksize " << block;
    split = {batch, channels, height / block, block, width / block, block};
    // SpaceToDepth's `mode` (28): DCR puts the block before the channels,
    // CRD after them.
    std::string mode = n.getString("mode", "DCR");
    if (mode == "DCR")
      permutation = {0, 3, 5, 1, 2, 4};
    else if (mode == "CRD")
      permutation = {0, 1, 3, 5, 2, 4};
    else
      return n.emitError() << "unsupported mode '" << mode << "'";
    merged = {batch, channels * block * block, height / block, width / block};
  }
  SHARC_TRY(blocks, n.reshape(x, split));
  SHARC_TRY(moved, n.create<TransposeOp>(*blocks, permutation));
  return wrap(n.reshape(*moved, merged));
}

/// EyeLike: ones where column - row equals `k`, in `dtype` (default: the
/// input's type).
static FailureOr<Results> importEyeLike(NodeImporter &n) {
  Value x = n.input(0);
  if (rankOf(x) != 2)
    return n.emitError() << "needs a 2-D input, got " << x.getType();
  Type type = elementTypeOf(x);
  if (n.hasAttr("dtype")) {
    int64_t onnxType = n.getInt("dtype", 0);
    std::optional<DType> dtype = dtypeFromOnnx(onnxType);
    if (!dtype)
      return n.emitError() << "unsupported dtype " << onnxTypeName(onnxType);
    type = mlirType(*dtype, n.context());
  }
  Type i64 = IntegerType::get(n.context(), 64);
  auto positions = RankedTensorType::get(shapeOf(x), i64);
  SHARC_TRY(row, n.createTyped<IotaOp>(positions, int64_t(0)));
  SHARC_TRY(column, n.createTyped<IotaOp>(positions, int64_t(1)));
  SHARC_TRY(offset, n.create<SubOp>(*column, *row));
  SHARC_TRY(diagonal, n.create<CompareOp>(
                          *offset, n.scalar(i64, double(n.getInt("k", 0))),
                          ComparePredicate::eq));
  return wrap(n.cast(*diagonal, type));
}

/// (x - mean) / sqrt(variance + epsilon) over `axes` (kept), the variance
/// the mean of the squared deviations.
static FailureOr<Value> normalizeOver(NodeImporter &n, Value x,
                                      ArrayRef<int64_t> axes, double epsilon) {
  Type type = elementTypeOf(x);
  SHARC_TRY(mean, n.create<ReduceOp>(x, ReduceKind::mean, axes, true));
  SHARC_TRY(deviation, n.create<SubOp>(x, *mean));
  SHARC_TRY(square, n.create<MulOp>(*deviation, *deviation));
  SHARC_TRY(variance,
            n.create<ReduceOp>(*square, ReduceKind::mean, axes, true));
  Value spread = *variance;
  if (epsilon != 0) {
    SHARC_TRY(shifted, n.create<AddOp>(spread, n.scalar(type, epsilon)));
    spread = *shifted;
  }
  SHARC_TRY(deviationScale, n.create<SqrtOp>(spread));
  return n.create<DivOp>(*deviation, *deviationScale);
}

/// InstanceNormalization: each (sample, channel) normalized over its spatial
/// axes, then scale[C] and B[C] per channel.
static FailureOr<Results> importInstanceNorm(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = rankOf(x);
  if (rank < 3)
    return n.emitError() << "needs an (N, C, spatial...) input, got "
                         << x.getType();
  SmallVector<int64_t> axes = llvm::to_vector(llvm::seq<int64_t>(2, rank));
  SHARC_TRY(normalized,
            normalizeOver(n, x, axes,
                          n.getFloat("epsilon", static_cast<double>(1e-5f))));
  SmallVector<int64_t> perChannel(rank, 1);
  perChannel[1] = shapeOf(x)[1];
  SHARC_TRY(scale, n.reshape(n.input(1), perChannel));
  SHARC_TRY(bias, n.reshape(n.input(2), perChannel));
  SHARC_TRY(scaled, n.create<MulOp>(*normalized, *scale));
  return wrap(n.create<AddOp>(*scaled, *bias));
}

/// GroupNormalization: the channels in `num_groups` groups, each (sample,
/// group) normalized over its channels' values, then scale and bias per
/// channel (opset 21) or per group (opset 18, the definition 21 replaced).
/// 16-bit inputs are normalized in float (stash_type 1) and the result
/// converted back before the scale and bias, as the operator's function
/// body does.
static FailureOr<Results> importGroupNorm(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = rankOf(x);
  if (rank < 3)
    return n.emitError() << "needs an (N, C, spatial...) input, got "
                         << x.getType();
  if (!n.hasAttr("num_groups"))
    return n.emitError() << "needs the num_groups attribute";
  ArrayRef<int64_t> shape = shapeOf(x);
  int64_t groups = n.getInt("num_groups", 0), channels = shape[1];
  if (groups <= 0 || channels % groups != 0)
    return n.emitError() << "num_groups " << groups << " must divide the "
                         << channels << " channels";
  if (n.getInt("stash_type", 1) != 1)
    return n.emitError() << "stash_type " << n.getInt("stash_type", 1)
                         << " is not supported (1, float, is)";
  bool perGroup = n.opset() < 21;
  int64_t count = perGroup ? groups : channels;
  for (unsigned index : {1u, 2u})
    if (shapeOf(n.input(index)) != ArrayRef<int64_t>{count})
      return n.emitError() << (index == 1 ? "scale" : "bias")
                           << " must have shape [" << count << "] (per "
                           << (perGroup ? "group" : "channel") << " at opset "
                           << n.opset() << "), got "
                           << n.input(index).getType();
  Type type = elementTypeOf(x);
  bool narrow = type.getIntOrFloatBitWidth() == 16;
  Value wide = x;
  if (narrow) {
    SHARC_TRY(widened, n.cast(x, Float32Type::get(n.context())));
    wide = *widened;
  }
  int64_t rest = tensorTypeOf(x).getNumElements() / (shape[0] * groups);
  SHARC_TRY(grouped, n.reshape(wide, {shape[0], groups, rest}));
  SHARC_TRY(normalized,
            normalizeOver(n, *grouped, {2},
                          n.getFloat("epsilon", static_cast<double>(1e-5f))));
  Value y = *normalized;
  if (narrow) {
    SHARC_TRY(narrowed, n.cast(y, type));
    y = *narrowed;
  }
  SmallVector<int64_t> paramShape;
  if (perGroup) {
    paramShape = {1, groups, 1};
  } else {
    SHARC_TRY(ungrouped, n.reshape(y, shape));
    y = *ungrouped;
    paramShape.assign(rank, 1);
    paramShape[1] = channels;
  }
  SHARC_TRY(scale, n.reshape(n.input(1), paramShape));
  SHARC_TRY(bias, n.reshape(n.input(2), paramShape));
  SHARC_TRY(scaled, n.create<MulOp>(y, *scale));
  SHARC_TRY(shifted, n.create<AddOp>(*scaled, *bias));
  return wrap(n.reshape(*shifted, shape));
}

/// BatchNormalization over (N, C, spatial...): y = (x - mean) / sqrt(var +
/// epsilon) * scale + B per channel.  In training mode mean and var are the
/// batch's (population variance, over every axis but 1) and the running
/// statistics become input_mean * momentum + mean * (1 - momentum) (var
/// alike): outputs 1 and 2, and the new values of input_mean and input_var
/// when they are initializers (buffers: sharc.buffer).  In inference mode
/// mean and var are input_mean and input_var; as initializers they are
/// buffers the optimizer does not train, and the model gets a warning.
static FailureOr<Results> importBatchNorm(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = rankOf(x);
  if (rank < 2)
    return n.emitError() << "needs an (N, C, ...) input, got " << x.getType();
  int64_t channels = shapeOf(x)[1];
  const char *names[] = {"scale", "B", "input_mean", "input_var"};
  for (unsigned i = 1; i <= 4; ++i)
    if (shapeOf(n.input(i)) != ArrayRef<int64_t>{channels} ||
        elementTypeOf(n.input(i)) != elementTypeOf(x))
      return n.emitError() << names[i - 1] << " must be a " << channels
                           << "-element tensor of the input's type, got "
                           << n.input(i).getType();
  double epsilon = n.getFloat("epsilon", static_cast<double>(1e-5f));
  double momentum = n.getFloat("momentum", static_cast<double>(0.9f));
  bool training = n.getInt("training_mode", 0) != 0;
  Type type = elementTypeOf(x);
  SmallVector<int64_t> perChannel(rank, 1);
  perChannel[1] = channels;
  auto channelwise = [&](Value v) { return n.reshape(v, perChannel); };
  Value mean = n.input(3), variance = n.input(4);
  if (training) {
    SmallVector<int64_t> axes{0};
    llvm::append_range(axes, llvm::seq<int64_t>(2, rank));
    SHARC_TRY(batchMean, n.create<ReduceOp>(x, ReduceKind::mean, axes, false));
    SHARC_TRY(centred, n.create<SubOp>(x, *channelwise(*batchMean)));
    SHARC_TRY(square, n.create<MulOp>(*centred, *centred));
    SHARC_TRY(batchVar,
              n.create<ReduceOp>(*square, ReduceKind::mean, axes, false));
    mean = *batchMean;
    variance = *batchVar;
  } else {
    if (n.hasOutput(1) || n.hasOutput(2))
      return n.emitError() << "the running statistics outputs exist in "
                              "training mode only";
    if (failed(n.setBuffer(n.input(3), Value())) ||
        failed(n.setBuffer(n.input(4), Value())))
      return failure();
    if (isa<BlockArgument>(n.input(3)) && n.firstTime("inference-batchnorm"))
      mlir::emitWarning(n.loc())
          << "BatchNormalization in inference mode (training_mode 0) "
             "normalizes with its running statistics, which training leaves "
             "unchanged, not with each batch's as PyTorch's BatchNorm does "
             "when it trains: a model exported in eval mode, or by the dynamo "
             "exporter (which writes a training BatchNorm this way), does not "
             "train as PyTorch trains it; export the model in training mode "
             "with torch.onnx.export(..., dynamo=False, "
             "training=torch.onnx.TrainingMode.TRAINING)";
  }
  SHARC_TRY(meanC, channelwise(mean));
  SHARC_TRY(centred, n.create<SubOp>(x, *meanC));
  SHARC_TRY(shifted, n.create<AddOp>(variance, n.scalar(type, epsilon)));
  SHARC_TRY(deviation, n.create<SqrtOp>(*shifted));
  SHARC_TRY(deviationC, channelwise(*deviation));
  SHARC_TRY(normalized, n.create<DivOp>(*centred, *deviationC));
  SHARC_TRY(scaleC, channelwise(n.input(1)));
  SHARC_TRY(scaled, n.create<MulOp>(*normalized, *scaleC));
  SHARC_TRY(biasC, channelwise(n.input(2)));
  SHARC_TRY(y, n.create<AddOp>(*scaled, *biasC));
  Results results{*y};
  if (!training)
    return results;
  // The running statistics.
  for (auto [input, batch] : {std::pair{3u, mean}, std::pair{4u, variance}}) {
    SHARC_TRY(kept, n.create<MulOp>(n.input(input), n.scalar(type, momentum)));
    SHARC_TRY(added, n.create<MulOp>(batch, n.scalar(type, 1 - momentum)));
    SHARC_TRY(running, n.create<AddOp>(*kept, *added));
    if (failed(n.setBuffer(n.input(input), *running)))
      return failure();
    results.push_back(*running);
  }
  return results;
}

/// MeanVarianceNormalization: (x - mean) / sqrt(variance) over `axes`
/// (default 0, 2, 3), as ONNX's function body (no epsilon).
static FailureOr<Results> importMeanVarianceNorm(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  SmallVector<int64_t> given =
      n.getInts("axes").value_or(SmallVector<int64_t>{0, 2, 3});
  FailureOr<SmallVector<int64_t>> axes = normalizeAxes(n, given, rankOf(x));
  if (failed(axes))
    return failure();
  return wrap(normalizeOver(n, x, *axes, 0.0));
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

namespace {
/// How Resize computes one axis: each output position is the sum over taps k
/// of weights[i][k] * input[indices[i][k]] (indices clamped into the axis),
/// or `extrapolation` where `outside[i]` (tf_crop_and_resize).
struct ResizeAxis {
  int64_t taps = 0;
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<double>> weights;
  std::vector<bool> outside;
};

/// Resize's attributes that shape the taps of every axis.
struct ResizeOptions {
  std::string mode, transform, nearestMode;
  double cubicA = -0.75;
  bool excludeOutside = false, antialias = false;
};
} // namespace

/// The weights of the taps at fractional position `ratio` in (0, 1] (1 at
/// an input position), as ONNX's reference implementation defines them.
static std::vector<double> resizeWeights(const ResizeOptions &o, double ratio,
                                         double scale) {
  if (o.mode == "nearest") {
    bool second = ratio == 1                             ? true
                  : o.nearestMode == "round_prefer_ceil" ? ratio >= 0.5
                  : o.nearestMode == "floor"             ? false
                  : o.nearestMode == "ceil"              ? true
                                                         : ratio > 0.5;
    return {second ? 0.0 : 1.0, second ? 1.0 : 0.0};
  }
  double a = o.cubicA;
  if (o.mode == "linear" && !o.antialias)
    return {1 - ratio, ratio};
  if (o.mode == "cubic" && !o.antialias) {
    double r1 = ratio + 1, s = 1 - ratio, s1 = s + 1;
    return {((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
            ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * s1 - 5 * a) * s1 + 8 * a) * s1 - 4 * a};
  }
  // Antialiased (downsampling widens the filter by 1 / scale).
  scale = std::min(scale, 1.0);
  std::vector<double> weights;
  double sum = 0;
  auto cubic = [&](double x) {
    x = std::fabs(x);
    if (x <= 1)
      return ((a + 2) * x - (a + 3)) * x * x + 1;
    return x < 2 ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : 0.0;
  };
  int64_t start = o.mode == "linear"
                      ? static_cast<int64_t>(std::floor(-1 / scale) + 1)
                      : static_cast<int64_t>(std::floor(-2 / scale) + 1);
  for (int64_t i = start; i < 2 - start; ++i) {
    double x = (i - ratio) * scale;
    double w =
        o.mode == "linear" ? std::clamp(1 - std::fabs(x), 0.0, 1.0) : cubic(x);
    weights.push_back(w);
    sum += w;
  }
  for (double &w : weights)
    w /= sum;
  return weights;
}

/// The taps of one axis of `inWidth` positions resized to `outWidth` by
/// `scale` (roi: [start, end] for tf_crop_and_resize).
static ResizeAxis resizeAxis(const ResizeOptions &o, int64_t inWidth,
                             int64_t outWidth, double scale,
                             std::pair<double, double> roi) {
  ResizeAxis axis;
  double width = scale * double(inWidth);
  for (int64_t y = 0; y < outWidth; ++y) {
    double yd = double(y), x;
    bool outside = false;
    const std::string &t = o.transform;
    if (t == "align_corners")
      x = width == 1 ? 0.0 : yd * double(inWidth - 1) / (width - 1);
    else if (t == "asymmetric")
      x = yd / scale;
    else if (t == "tf_crop_and_resize") {
      x = width == 1 ? (roi.second - roi.first) * double(inWidth - 1) / 2
                     : yd * (roi.second - roi.first) * double(inWidth - 1) /
                           (width - 1);
      x += roi.first * double(inWidth - 1);
      outside = x < 0 || x > double(inWidth - 1);
    } else if (t == "pytorch_half_pixel")
      x = width == 1 ? -0.5 : (yd + 0.5) / scale - 0.5;
    else if (t == "half_pixel_symmetric")
      x = double(inWidth) / 2 * (1 - double(outWidth) / width) +
          (yd + 0.5) / scale - 0.5;
    else
      x = (yd + 0.5) / scale - 0.5;
    double floorX = std::floor(x);
    double ratio = x == floorX ? 1.0 : x - floorX;
    std::vector<double> weights = resizeWeights(o, ratio, scale);
    int64_t taps = weights.size(), pad = (taps + 1) / 2;
    // The `taps` positions nearest x, ties to the smaller (in the input
    // padded by `pad` at both ends, then clamped: edge padding).
    double padded = x + double(pad);
    double p = std::floor(padded), frac = padded - p;
    int64_t offset = taps % 2 == 0 ? (frac == 0 ? -(taps / 2) : -(taps / 2) + 1)
                                   : (frac <= 0.5 ? -((taps - 1) / 2)
                                                  : -((taps - 1) / 2) + 1);
    int64_t first = static_cast<int64_t>(p) + offset - pad;
    std::vector<int64_t> indices;
    double kept = 0;
    for (int64_t k = 0; k < taps; ++k) {
      int64_t index = first + k;
      if (o.excludeOutside && (index < 0 || index >= inWidth))
        weights[k] = 0;
      kept += weights[k];
      indices.push_back(std::clamp<int64_t>(index, 0, inWidth - 1));
    }
    if (o.excludeOutside && kept != 0)
      for (double &w : weights)
        w /= kept;
    axis.taps = std::max(axis.taps, taps);
    axis.indices.push_back(std::move(indices));
    axis.weights.push_back(std::move(weights));
    axis.outside.push_back(outside);
  }
  return axis;
}

/// Applies `axis` (its taps) along dimension `dim` of `x`.
static FailureOr<Value> applyResizeAxis(NodeImporter &n, Value x, int64_t dim,
                                        const ResizeAxis &axis,
                                        double extrapolation) {
  auto type = tensorTypeOf(x);
  int64_t outWidth = axis.indices.size();
  SmallVector<int64_t> columnShape(type.getRank(), 1);
  columnShape[dim] = outWidth;
  // Nearest taps are one-hot: one gather.
  bool oneHot = llvm::all_of(axis.weights, [](const std::vector<double> &w) {
    return llvm::count(w, 1.0) == 1 &&
           llvm::count(w, 0.0) + 1 == int64_t(w.size());
  });
  auto column = [&](auto value, DType dtype) {
    Tensor t(dtype, {outWidth});
    for (int64_t i = 0; i < outWidth; ++i)
      t.setDouble(i, value(i));
    return t;
  };
  Value sum;
  for (int64_t k = 0; k < (oneHot ? 1 : axis.taps); ++k) {
    Tensor indices = column(
        [&](int64_t i) {
          const std::vector<double> &w = axis.weights[i];
          int64_t tap =
              oneHot ? std::find(w.begin(), w.end(), 1.0) - w.begin() : k;
          return double(axis.indices[i][tap]);
        },
        DType::i64);
    SHARC_TRY(gathered, n.create<GatherOp>(x, n.constant(indices), dim));
    if (oneHot) {
      sum = *gathered;
      break;
    }
    std::optional<DType> dtype = dtypeOf(type.getElementType());
    Tensor weights =
        column([&](int64_t i) { return axis.weights[i][k]; }, *dtype);
    SHARC_TRY(w, n.reshape(n.constant(weights), columnShape));
    SHARC_TRY(term, n.create<MulOp>(*gathered, *w));
    if (!sum) {
      sum = *term;
      continue;
    }
    SHARC_TRY(added, n.create<AddOp>(sum, *term));
    sum = *added;
  }
  if (!llvm::is_contained(axis.outside, true))
    return sum;
  Tensor outside =
      column([&](int64_t i) { return axis.outside[i] ? 1.0 : 0.0; }, DType::i1);
  SHARC_TRY(mask, n.reshape(n.constant(outside), columnShape));
  return n.create<SelectOp>(
      *mask, n.scalar(type.getElementType(), extrapolation), sum);
}

/// Resize (nearest, linear, cubic; every coordinate transformation, antialias,
/// axes and keep_aspect_ratio_policy): separable, one axis at a time in
/// increasing order as ONNX's reference implementation, each output position
/// a weighted sum of a few input positions (gathers of constant indices,
/// times constant weights).  Its gradient is the gathers' (scatter-adds).
static FailureOr<Results> importResize(NodeImporter &n) {
  Value x = n.input(0);
  auto type = tensorTypeOf(x);
  int64_t rank = type.getRank();
  ResizeOptions o;
  o.mode = n.getString("mode", "nearest");
  o.transform = n.getString("coordinate_transformation_mode", "half_pixel");
  o.nearestMode = n.getString("nearest_mode", "round_prefer_floor");
  o.cubicA = n.getFloat("cubic_coeff_a", -0.75);
  o.excludeOutside = n.getInt("exclude_outside", 0) != 0;
  o.antialias = n.getInt("antialias", 0) != 0;
  double extrapolation = n.getFloat("extrapolation_value", 0.0);
  std::string policy = n.getString("keep_aspect_ratio_policy", "stretch");
  if (!llvm::is_contained({"nearest", "linear", "cubic"}, o.mode))
    return n.emitError() << "unsupported mode '" << o.mode << "'";
  if (!llvm::is_contained({"half_pixel", "pytorch_half_pixel", "align_corners",
                           "asymmetric", "tf_crop_and_resize"},
                          o.transform) &&
      (o.transform != "half_pixel_symmetric" || n.opset() < 19))
    return n.emitError() << "unsupported coordinate_transformation_mode '"
                         << o.transform << "'";
  if (!llvm::is_contained(
          {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"},
          o.nearestMode))
    return n.emitError() << "unsupported nearest_mode '" << o.nearestMode
                         << "'";
  if (!llvm::is_contained({"stretch", "not_larger", "not_smaller"}, policy))
    return n.emitError() << "unsupported keep_aspect_ratio_policy '" << policy
                         << "'";
  if (o.mode != "nearest" && !isa<FloatType>(type.getElementType()))
    return n.emitError() << o.mode << " interpolation needs a float input";
  if (o.mode == "nearest" && o.antialias)
    return n.emitError() << "antialias does not apply to mode 'nearest'";

  SmallVector<int64_t> axes = allAxes(rank);
  if (std::optional<SmallVector<int64_t>> given = n.getInts("axes")) {
    FailureOr<SmallVector<int64_t>> normalized = normalizeAxes(n, *given, rank);
    if (failed(normalized))
      return failure();
    axes = std::move(*normalized);
  }
  int64_t count = axes.size();
  // An input given as an empty tensor is absent.
  auto listOf = [&](unsigned index,
                    StringRef what) -> FailureOr<std::optional<Tensor>> {
    if (!n.hasInput(index))
      return std::optional<Tensor>();
    FailureOr<Tensor> value = n.requireConstant(index, what);
    if (failed(value))
      return failure();
    if (value->numElements() == 0)
      return std::optional<Tensor>();
    return std::optional<Tensor>(std::move(*value));
  };
  FailureOr<std::optional<Tensor>> roi = listOf(1, "roi"),
                                   scales = listOf(2, "scales"),
                                   sizes = listOf(3, "sizes");
  if (failed(roi) || failed(scales) || failed(sizes))
    return failure();
  if (scales->has_value() == sizes->has_value())
    return n.emitError() << "needs exactly one of scales and sizes";
  const Tensor &given = scales->has_value() ? **scales : **sizes;
  if (given.numElements() != count)
    return n.emitError() << (scales->has_value() ? "scales" : "sizes")
                         << " must hold " << count << " values, got "
                         << given.numElements();
  SmallVector<double> scale(rank, 1.0);
  SmallVector<int64_t> outShape(type.getShape());
  std::vector<std::pair<double, double>> roiOf(rank, {0.0, 1.0});
  if (roi->has_value()) {
    if ((*roi)->numElements() != 2 * count)
      return n.emitError() << "roi must hold 2 x " << count << " values";
    for (auto [j, d] : llvm::enumerate(axes))
      roiOf[d] = {(*roi)->getDouble(j), (*roi)->getDouble(count + j)};
  }
  if (scales->has_value()) {
    for (auto [j, d] : llvm::enumerate(axes)) {
      scale[d] = given.getDouble(j);
      if (!(scale[d] > 0))
        return n.emitError() << "scales must be positive, got " << scale[d];
      outShape[d] = static_cast<int64_t>(scale[d] * double(type.getDimSize(d)));
    }
  } else {
    for (auto [j, d] : llvm::enumerate(axes)) {
      if (given.getInt(j) < 0)
        return n.emitError() << "sizes must not be negative";
      if (type.getDimSize(d) == 0)
        return n.emitError() << "cannot resize axis " << d << " of 0 elements";
      outShape[d] = given.getInt(j);
      scale[d] = double(outShape[d]) / double(type.getDimSize(d));
    }
    if (policy != "stretch") {
      double common = scale[axes[0]];
      for (int64_t d : axes)
        common = policy == "not_larger" ? std::min(common, scale[d])
                                        : std::max(common, scale[d]);
      for (int64_t d : axes) {
        scale[d] = common;
        outShape[d] =
            static_cast<int64_t>(common * double(type.getDimSize(d)) + 0.5);
      }
    }
  }
  for (int64_t d = 0; d < rank; ++d)
    if (outShape[d] > kMaxWindowValue)
      return n.emitError() << "axis " << d << " would have " << outShape[d]
                           << " elements";
  if (!checkedNumElements(outShape))
    return n.emitError() << "the result would have more than " << kMaxElements
                         << " elements";

  Value y = x;
  for (int64_t d : axes) {
    int64_t inWidth = type.getDimSize(d);
    bool identity = std::fabs(scale[d] - 1.0) <= 1e-9 &&
                    outShape[d] == inWidth && roiOf[d].first == 0 &&
                    roiOf[d].second == 1;
    if (identity)
      continue;
    if (outShape[d] == 0 || inWidth == 0)
      return n.emitError() << "cannot resize axis " << d << " from " << inWidth
                           << " to " << outShape[d] << " elements";
    ResizeAxis axis = resizeAxis(o, inWidth, outShape[d], scale[d], roiOf[d]);
    SHARC_TRY(resized, applyResizeAxis(n, y, d, axis, extrapolation));
    y = *resized;
  }
  return Results{y};
}

/// Pad: `x`, sliced where a pad is negative, then in `constant` mode
/// inserted after the leading pads into the value (default 0) broadcast to
/// the padded shape; in `edge`, `reflect` and `wrap` modes each padded axis
/// in turn gets the slices the mode repeats concatenated before and after it
/// (as numpy.pad pads axis by axis).  `pads` and `axes` must be constants.
static FailureOr<Results> importPad(NodeImporter &n) {
  Value x = n.input(0);
  std::string mode = n.getString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" &&
      (mode != "wrap" || n.opset() < 19))
    return n.emitError() << "unsupported mode '" << mode << "'";
  int64_t rank = rankOf(x);
  FailureOr<SmallVector<int64_t>> pads = n.requireInts(1, "pads");
  if (failed(pads))
    return failure();
  SmallVector<int64_t> axes = allAxes(rank);
  if (n.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> given = n.requireInts(3, "axes");
    if (failed(given))
      return failure();
    FailureOr<SmallVector<int64_t>> normalized = normalizeAxes(n, *given, rank);
    if (failed(normalized))
      return failure();
    axes = std::move(*normalized);
  }
  int64_t count = axes.size();
  if (static_cast<int64_t>(pads->size()) != 2 * count)
    return n.emitError() << "pads must hold 2 x " << count << " values, got "
                         << pads->size();
  SmallVector<int64_t> begin(rank, 0), end(rank, 0);
  for (auto [j, axis] : llvm::enumerate(axes)) {
    begin[axis] = (*pads)[j];
    end[axis] = (*pads)[j + count];
  }
  // Negative pads remove elements: they are sliced off first.
  SmallVector<int64_t> start(rank, 0), shape(rank), kept(shapeOf(x)), at(rank),
      ones(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t dim = shapeOf(x)[d];
    int64_t dropFront = std::max<int64_t>(0, -begin[d]);
    int64_t dropBack = std::max<int64_t>(0, -end[d]);
    if (dropFront + dropBack > dim)
      return n.emitError() << "pads remove more than the " << dim
                           << " elements of axis " << d;
    kept[d] = dim - dropFront - dropBack;
    start[d] = dropFront;
    at[d] = std::max<int64_t>(0, begin[d]);
    shape[d] = kept[d] + at[d] + std::max<int64_t>(0, end[d]);
    if (shape[d] > kMaxWindowValue)
      return n.emitError() << "the padded axis " << d << " would have "
                           << shape[d] << " elements";
  }
  if (!checkedNumElements(shape))
    return n.emitError() << "the padded tensor would have more than "
                         << kMaxElements << " elements";
  Value source = x;
  if (ArrayRef<int64_t>(kept) != shapeOf(x)) {
    SHARC_TRY(sliced, n.createTyped<SliceOp>(tensorTypeOf(x).clone(kept), x,
                                             ArrayRef<int64_t>(start),
                                             ArrayRef<int64_t>(ones)));
    source = *sliced;
  }
  if (mode != "constant") {
    for (int64_t d = 0; d < rank; ++d) {
      int64_t before = at[d], after = std::max<int64_t>(0, end[d]);
      if (!before && !after)
        continue;
      int64_t length = kept[d];
      if (length == 0 ||
          (mode == "reflect" && std::max(before, after) >= length))
        return n.emitError()
               << "cannot pad axis " << d << " of " << length << " elements by "
               << before << " and " << after << " in mode '" << mode << "'";
      if (mode == "wrap" && std::max(before, after) > length)
        return n.emitError() << "cannot wrap axis " << d << " of " << length
                             << " elements by more than it holds";
      // The elements that go before and after, in their order.
      auto part = [&](bool leading, int64_t count) -> FailureOr<Value> {
        if (mode == "edge") {
          FailureOr<Value> edge =
              sliceAlong(n, source, d, leading ? 0 : length - 1, 1);
          if (failed(edge))
            return failure();
          SmallVector<int64_t> repeated(tensorTypeOf(source).getShape());
          repeated[d] = count;
          return n.broadcast(*edge, repeated);
        }
        if (mode == "reflect")
          return leading ? sliceAlong(n, source, d, count, count, -1)
                         : sliceAlong(n, source, d, length - 2, count, -1);
        return leading ? sliceAlong(n, source, d, length - count, count)
                       : sliceAlong(n, source, d, 0, count);
      };
      SmallVector<Value> pieces;
      if (before) {
        SHARC_TRY(leading, part(true, before));
        pieces.push_back(*leading);
      }
      pieces.push_back(source);
      if (after) {
        SHARC_TRY(trailing, part(false, after));
        pieces.push_back(*trailing);
      }
      SHARC_TRY(padded, n.create<ConcatOp>(ValueRange(pieces), d));
      source = *padded;
    }
    return Results{source};
  }
  Value value = n.scalar(elementTypeOf(x), 0.0);
  if (n.hasInput(2)) {
    Value given = n.input(2);
    if (tensorTypeOf(given).getNumElements() != 1)
      return n.emitError() << "constant_value must be one value, got "
                           << given.getType();
    SHARC_TRY(scalar, n.reshape(given, {}));
    value = *scalar;
  }
  SHARC_TRY(filled, n.broadcast(value, shape));
  return wrap(n.create<InsertSliceOp>(source, *filled, ArrayRef<int64_t>(at),
                                      ArrayRef<int64_t>(ones)));
}

static FailureOr<Results> importUnsqueeze(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<SmallVector<int64_t>> axes = n.requireInts(1, "axes");
  if (failed(axes))
    return failure();
  int64_t rank = rankOf(x) + axes->size();
  if (rank > kMaxRank)
    return n.emitError() << "the result would have rank " << rank;
  FailureOr<SmallVector<int64_t>> normalized = normalizeAxes(n, *axes, rank);
  if (failed(normalized))
    return failure();
  SmallVector<int64_t> shape;
  ArrayRef<int64_t> dims = shapeOf(x);
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(*normalized, d)) {
      shape.push_back(1);
    } else {
      shape.push_back(dims.front());
      dims = dims.drop_front();
    }
  }
  return wrap(n.reshape(x, shape));
}

static FailureOr<Results> importSqueeze(NodeImporter &n) {
  Value x = n.input(0);
  ArrayRef<int64_t> dims = shapeOf(x);
  SmallVector<int64_t> shape;
  if (n.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> axes = n.requireInts(1, "axes");
    if (failed(axes))
      return failure();
    FailureOr<SmallVector<int64_t>> normalized =
        normalizeAxes(n, *axes, dims.size());
    if (failed(normalized))
      return failure();
    for (auto [d, size] : llvm::enumerate(dims)) {
      if (!llvm::is_contained(*normalized, static_cast<int64_t>(d)))
        shape.push_back(size);
      else if (size != 1)
        return n.emitError()
               << "cannot squeeze axis " << d << " of size " << size;
    }
  } else {
    llvm::copy_if(dims, std::back_inserter(shape),
                  [](int64_t size) { return size != 1; });
  }
  return wrap(n.reshape(x, shape));
}

/// ONNX Reshape: 0 copies the input dimension (unless allowzero), one -1 is
/// inferred.
static FailureOr<Results> importReshape(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<SmallVector<int64_t>> target = n.requireInts(1, "shape");
  if (failed(target))
    return failure();
  bool allowZero = n.getInt("allowzero", 0) != 0;
  ArrayRef<int64_t> dims = shapeOf(x);
  SmallVector<int64_t> shape;
  std::optional<size_t> inferred;
  for (auto [index, size] : llvm::enumerate(*target)) {
    if (size == -1) {
      if (inferred)
        return n.emitError()
               << "shape " << formatShape(*target) << " has more than one -1";
      inferred = index;
      shape.push_back(1);
    } else if (size == 0 && !allowZero) {
      if (index >= dims.size())
        return n.emitError()
               << "shape " << formatShape(*target) << " copies dimension "
               << index << " of a rank-" << dims.size() << " input";
      shape.push_back(dims[index]);
    } else if (size < 0) {
      return n.emitError() << "shape " << formatShape(*target)
                           << " has a negative entry";
    } else {
      shape.push_back(size);
    }
  }
  if (inferred) {
    std::optional<int64_t> known = checkedNumElements(shape);
    int64_t total = tensorTypeOf(x).getNumElements();
    if ((allowZero && llvm::is_contained(*target, 0)) || !known ||
        *known == 0 || total % *known != 0)
      return n.emitError() << "cannot infer the -1 of shape "
                           << formatShape(*target) << " for input "
                           << x.getType();
    shape[*inferred] = total / *known;
  }
  return wrap(n.reshape(x, shape));
}

static FailureOr<Results> importFlatten(NodeImporter &n) {
  Value x = n.input(0);
  ArrayRef<int64_t> dims = shapeOf(x);
  int64_t rank = dims.size();
  int64_t axis = n.getInt("axis", 1);
  if (axis < -rank || axis > rank)
    return n.emitError() << "axis " << axis << " is out of range for rank "
                         << rank;
  if (axis < 0)
    axis += rank;
  std::optional<int64_t> outer = checkedNumElements(dims.take_front(axis));
  std::optional<int64_t> inner = checkedNumElements(dims.drop_front(axis));
  if (!outer || !inner)
    return n.emitError() << "cannot flatten " << x.getType();
  return wrap(n.reshape(x, {*outer, *inner}));
}

static FailureOr<Results> importTranspose(NodeImporter &n) {
  Value x = n.input(0);
  SmallVector<int64_t> permutation =
      llvm::to_vector(llvm::reverse(llvm::seq<int64_t>(0, rankOf(x))));
  if (std::optional<SmallVector<int64_t>> given = n.getInts("perm"))
    permutation = *given;
  return wrap(n.create<TransposeOp>(x, permutation));
}

/// The output shape is the broadcast of the input's and the given shape.
static FailureOr<Results> importExpand(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<SmallVector<int64_t>> target = n.requireInts(1, "shape");
  if (failed(target))
    return failure();
  FailureOr<SmallVector<int64_t>> shape = failure();
  if (llvm::none_of(*target, [](int64_t d) { return d < 0; }))
    shape = broadcastShapes(shapeOf(x), *target);
  if (failed(shape))
    return n.emitError() << "cannot expand " << formatShape(shapeOf(x))
                         << " to " << formatShape(*target);
  return wrap(n.broadcast(x, *shape));
}

static FailureOr<Results> importConcat(NodeImporter &n) {
  if (!n.hasAttr("axis"))
    return n.emitError() << "needs the 'axis' attribute";
  SmallVector<Value> inputs;
  for (unsigned i = 0; i < n.numInputs(); ++i) {
    if (!n.hasInput(i))
      return n.emitError() << "input #" << i << " is empty";
    inputs.push_back(n.input(i));
  }
  FailureOr<int64_t> axis =
      normalizeAxis(n, n.getInt("axis", 0), rankOf(inputs.front()));
  if (failed(axis))
    return failure();
  // Keep the joined size in range before the op's shape function adds up.
  int64_t joined = 0;
  for (Value input : inputs) {
    ArrayRef<int64_t> dims = shapeOf(input);
    if (static_cast<int64_t>(dims.size()) > *axis)
      joined += dims[*axis];
    if (joined > kMaxElements)
      return n.emitError() << "the result would be too large";
  }
  return wrap(n.create<ConcatOp>(ValueRange(inputs), *axis));
}

/// Sizes of the parts of a Split along a dimension of size `size`.
static FailureOr<SmallVector<int64_t>> splitSizes(NodeImporter &n,
                                                  int64_t size) {
  int64_t outputs = n.numOutputs();
  if (n.hasInput(1)) {
    if (n.hasAttr("num_outputs"))
      return n.emitError() << "takes either the 'split' input or the "
                              "'num_outputs' attribute, not both";
    FailureOr<SmallVector<int64_t>> sizes = n.requireInts(1, "split");
    if (failed(sizes))
      return failure();
    int64_t total = 0;
    for (int64_t part : *sizes) {
      if (part < 0 || part > size - total)
        return n.emitError() << "split sizes " << formatShape(*sizes)
                             << " exceed the dimension's size " << size;
      total += part;
    }
    if (static_cast<int64_t>(sizes->size()) != outputs || total != size)
      return n.emitError() << "split sizes " << formatShape(*sizes)
                           << " do not divide a dimension of size " << size
                           << " into " << outputs << " outputs";
    return sizes;
  }
  if (n.hasAttr("num_outputs")) {
    int64_t parts = n.getInt("num_outputs", 0);
    if (parts != outputs || parts < 1)
      return n.emitError() << "num_outputs is " << parts << " but the node has "
                           << outputs << " outputs";
    // Equal parts of ceil(size / parts); the last one may be smaller.
    int64_t chunk = (size + parts - 1) / parts;
    SmallVector<int64_t> sizes;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::clamp<int64_t>(size - i * chunk, 0, chunk));
    return sizes;
  }
  if (outputs < 1 || size % outputs != 0)
    return n.emitError() << "cannot split a dimension of size " << size
                         << " into " << outputs << " equal parts";
  return SmallVector<int64_t>(outputs, size / outputs);
}

static FailureOr<Results> importSplit(NodeImporter &n) {
  Value x = n.input(0);
  ArrayRef<int64_t> dims = shapeOf(x);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", 0), dims.size());
  if (failed(axis))
    return failure();
  FailureOr<SmallVector<int64_t>> sizes = splitSizes(n, dims[*axis]);
  if (failed(sizes))
    return failure();
  Results results;
  SmallVector<int64_t> start(dims.size(), 0), stride(dims.size(), 1);
  SmallVector<int64_t> shape(dims);
  for (int64_t size : *sizes) {
    shape[*axis] = size;
    FailureOr<Value> part = n.createTyped<SliceOp>(tensorTypeOf(x).clone(shape),
                                                   x, ArrayRef<int64_t>(start),
                                                   ArrayRef<int64_t>(stride));
    if (failed(part))
      return failure();
    results.push_back(*part);
    start[*axis] += size;
  }
  return results;
}

/// SplitToSequence: the pieces of `x` along `axis`, as sharc keeps a
/// sequence (its tensors, in the importer): of the sizes of the constant
/// `split` (one size: pieces of it, the last one smaller if need be), or of
/// size 1 without it (squeezed unless `keepdims`).
static FailureOr<Results> importSplitToSequence(NodeImporter &n) {
  Value x = n.input(0);
  ArrayRef<int64_t> dims = shapeOf(x);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", 0), dims.size());
  if (failed(axis))
    return failure();
  int64_t length = dims[*axis];
  SmallVector<int64_t> sizes;
  bool squeeze = false;
  if (n.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> split = n.requireInts(1, "split");
    if (failed(split))
      return failure();
    if (rankOf(n.input(1)) == 0) {
      int64_t size = split->front();
      if (size <= 0)
        return n.emitError() << "split must be positive, got " << size;
      for (int64_t at = 0; at < length; at += size)
        sizes.push_back(std::min(size, length - at));
    } else {
      int64_t total = 0;
      for (int64_t size : *split) {
        if (size < 0)
          return n.emitError() << "split sizes must not be negative";
        total += size;
      }
      if (total != length)
        return n.emitError() << "split sizes add up to " << total
                             << ", not the axis's " << length;
      sizes.assign(split->begin(), split->end());
    }
  } else {
    sizes.assign(length, 1);
    squeeze = n.getInt("keepdims", 1) == 0;
  }
  Results pieces;
  int64_t at = 0;
  for (int64_t size : sizes) {
    FailureOr<Value> piece = sliceAlong(n, x, *axis, at, size);
    if (failed(piece))
      return failure();
    at += size;
    if (squeeze) {
      SmallVector<int64_t> shape(dims);
      shape.erase(shape.begin() + *axis);
      piece = n.reshape(*piece, shape);
      if (failed(piece))
        return failure();
    }
    pieces.push_back(*piece);
  }
  return pieces;
}

/// SequenceAt: the tensor at the constant `position` (negative counts from
/// the end) of a sequence that SplitToSequence made.
static FailureOr<Results> importSequenceAt(NodeImporter &n) {
  ArrayRef<Value> sequence = n.sequenceInput();
  FailureOr<SmallVector<int64_t>> position = n.requireInts(1, "position");
  if (failed(position))
    return failure();
  if (position->size() != 1)
    return n.emitError() << "position must be one value";
  int64_t size = sequence.size(), at = position->front();
  if (at < -size || at >= size)
    return n.emitError() << "position " << at
                         << " is out of range for a sequence of " << size
                         << " tensors";
  return Results{sequence[at < 0 ? at + size : at]};
}

bool sharc::onnx_import::producesSequence(StringRef opType) {
  return opType == "SplitToSequence";
}

bool sharc::onnx_import::consumesSequence(StringRef opType) {
  return opType == "SequenceAt";
}

/// One dimension of an ONNX Slice after clamping: the first index read, the
/// stride and the number of elements.
struct SliceDim {
  int64_t start, stride, count;
};

static SliceDim clampSlice(int64_t begin, int64_t end, int64_t step,
                           int64_t size) {
  if (size == 0)
    return {0, step > 0 ? 1 : -1, 0};
  if (begin < 0)
    begin += size;
  if (end < 0)
    end += size;
  int64_t count;
  if (step > 0) {
    begin = std::clamp<int64_t>(begin, 0, size);
    end = std::clamp<int64_t>(end, 0, size);
    count = begin < end ? (end - begin - 1) / step + 1 : 0;
  } else {
    begin = std::clamp<int64_t>(begin, 0, size - 1);
    end = std::clamp<int64_t>(end, -1, size - 1);
    uint64_t magnitude = 0 - static_cast<uint64_t>(step);
    count = begin > end
                ? static_cast<int64_t>((begin - end - 1) / magnitude) + 1
                : 0;
  }
  return {count > 0 ? begin : 0, count > 1 ? step : (step > 0 ? 1 : -1), count};
}

static FailureOr<Results> importSlice(NodeImporter &n) {
  Value x = n.input(0);
  ArrayRef<int64_t> dims = shapeOf(x);
  FailureOr<SmallVector<int64_t>> starts = n.requireInts(1, "starts");
  if (failed(starts))
    return failure();
  FailureOr<SmallVector<int64_t>> ends = n.requireInts(2, "ends");
  if (failed(ends))
    return failure();
  SmallVector<int64_t> axes = allAxes(starts->size());
  SmallVector<int64_t> steps(starts->size(), 1);
  if (n.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> given = n.requireInts(3, "axes");
    if (failed(given))
      return failure();
    axes = std::move(*given);
  }
  if (n.hasInput(4)) {
    FailureOr<SmallVector<int64_t>> given = n.requireInts(4, "steps");
    if (failed(given))
      return failure();
    steps = std::move(*given);
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() ||
      steps.size() != starts->size())
    return n.emitError()
           << "starts, ends, axes and steps must have the same length";
  FailureOr<SmallVector<int64_t>> normalized =
      normalizeAxes(n, axes, dims.size());
  if (failed(normalized))
    return failure();
  SmallVector<int64_t> start(dims.size(), 0), stride(dims.size(), 1);
  SmallVector<int64_t> shape(dims);
  for (auto [index, axis] : llvm::enumerate(*normalized)) {
    if (steps[index] == 0)
      return n.emitError() << "step of axis " << axes[index] << " is 0";
    SliceDim dim =
        clampSlice((*starts)[index], (*ends)[index], steps[index], dims[axis]);
    start[axis] = dim.start;
    stride[axis] = dim.stride;
    shape[axis] = dim.count;
  }
  return wrap(n.createTyped<SliceOp>(tensorTypeOf(x).clone(shape), x,
                                     ArrayRef<int64_t>(start),
                                     ArrayRef<int64_t>(stride)));
}

static FailureOr<Results> importTrilu(NodeImporter &n) {
  int64_t diagonal = 0;
  if (n.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> k = n.requireInts(1, "k");
    if (failed(k))
      return failure();
    if (k->size() != 1)
      return n.emitError() << "k must be a scalar";
    diagonal = k->front();
  }
  return wrap(
      n.create<TriluOp>(n.input(0), n.getInt("upper", 1) != 0, diagonal));
}

//===----------------------------------------------------------------------===//
// Linear algebra, reductions, normalization, losses
//===----------------------------------------------------------------------===//

/// numpy matmul: a 1-D lhs gets a leading 1, a 1-D rhs a trailing 1, both
/// removed from the result.
static FailureOr<Results> importMatMul(NodeImporter &n) {
  Value lhs = n.input(0), rhs = n.input(1);
  int64_t lhsRank = rankOf(lhs), rhsRank = rankOf(rhs);
  if (lhsRank == 0 || rhsRank == 0)
    return n.emitError() << "operands must have rank >= 1, got "
                         << lhs.getType() << " and " << rhs.getType();
  if (lhsRank == 1) {
    FailureOr<Value> matrix = n.reshape(lhs, {1, shapeOf(lhs)[0]});
    if (failed(matrix))
      return failure();
    lhs = *matrix;
  }
  if (rhsRank == 1) {
    FailureOr<Value> matrix = n.reshape(rhs, {shapeOf(rhs)[0], 1});
    if (failed(matrix))
      return failure();
    rhs = *matrix;
  }
  FailureOr<Value> product = n.create<MatmulOp>(lhs, rhs, false, false);
  if (failed(product) || (lhsRank > 1 && rhsRank > 1))
    return wrap(product);
  SmallVector<int64_t> shape(shapeOf(*product));
  if (rhsRank == 1)
    shape.pop_back();
  if (lhsRank == 1)
    shape.erase(shape.end() - (rhsRank == 1 ? 1 : 2));
  return wrap(n.reshape(*product, shape));
}

/// alpha * op(A) op(B) + beta * C.
static FailureOr<Results> importGemm(NodeImporter &n) {
  Value a = n.input(0), b = n.input(1);
  if (rankOf(a) != 2 || rankOf(b) != 2)
    return n.emitError() << "A and B must be 2-D, got " << a.getType()
                         << " and " << b.getType();
  Type type = elementTypeOf(a);
  FailureOr<Value> result = n.create<MatmulOp>(a, b, n.getInt("transA", 0) != 0,
                                               n.getInt("transB", 0) != 0);
  if (failed(result))
    return failure();
  double alpha = n.getFloat("alpha", 1.0), beta = n.getFloat("beta", 1.0);
  if (alpha != 1.0) {
    result = n.create<MulOp>(*result, n.scalar(type, alpha));
    if (failed(result))
      return failure();
  }
  if (!n.hasInput(2))
    return Results{*result};
  Value c = n.input(2);
  if (!isBroadcastableTo(shapeOf(c), shapeOf(*result)))
    return n.emitError() << "C " << c.getType()
                         << " does not broadcast to the product "
                         << result->getType();
  if (beta != 1.0) {
    FailureOr<Value> scaled = n.create<MulOp>(c, n.scalar(type, beta));
    if (failed(scaled))
      return failure();
    c = *scaled;
  }
  return wrap(n.create<AddOp>(*result, c));
}

template <typename OpTy>
static FailureOr<Results> importSoftmax(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", -1), rankOf(x));
  if (failed(axis))
    return failure();
  return wrap(n.create<OpTy>(x, *axis));
}

/// The axes of a reduction, normalized, or none for a reduction that is the
/// identity (empty axes with noop_with_empty_axes).  ReduceSum takes its axes
/// as an input since opset 13, the other reductions since opset 18 (before:
/// the `axes` attribute); no axes means every axis.
static FailureOr<std::optional<SmallVector<int64_t>>>
reductionAxes(NodeImporter &n, bool axesInputSince13) {
  Value x = n.input(0);
  bool axesInput = axesInputSince13 || n.opset() >= 18;
  std::optional<SmallVector<int64_t>> axes;
  if (axesInput) {
    if (n.hasInput(1)) {
      FailureOr<SmallVector<int64_t>> given = n.requireInts(1, "axes");
      if (failed(given))
        return failure();
      axes = std::move(*given);
    }
  } else {
    if (n.numInputs() > 1)
      return n.emitError() << "takes its axes as an attribute before opset 18";
    axes = n.getInts("axes");
  }
  if (!axes || axes->empty()) {
    if (axesInput && n.getInt("noop_with_empty_axes", 0) != 0)
      return std::optional<SmallVector<int64_t>>();
    axes = allAxes(rankOf(x));
  }
  FailureOr<SmallVector<int64_t>> normalized =
      normalizeAxes(n, *axes, rankOf(x));
  if (failed(normalized))
    return failure();
  return std::optional<SmallVector<int64_t>>(std::move(*normalized));
}

/// The lowest value of `type`: -inf, or the integer type's minimum.
static double lowestOf(Type type) {
  if (isa<FloatType>(type))
    return -std::numeric_limits<double>::infinity();
  return -std::ldexp(1.0, int(type.getIntOrFloatBitWidth()) - 1);
}

/// The highest value of `type`: +inf, or the integer type's maximum.
static double highestOf(Type type) {
  if (isa<FloatType>(type))
    return std::numeric_limits<double>::infinity();
  return std::ldexp(1.0, int(type.getIntOrFloatBitWidth()) - 1) - 1;
}

/// A max (or, `largest` false, min) over an empty set of values is the
/// identity of the reduction (ONNX 18): -inf (+inf), or the integer type's
/// lowest (highest) value.  The result of reducing `x` over `axes` when one
/// of them has no elements; null otherwise.
static FailureOr<Value> emptyExtreme(NodeImporter &n, Value x,
                                     ArrayRef<int64_t> axes, bool keep,
                                     bool largest) {
  ArrayRef<int64_t> shape = shapeOf(x);
  if (llvm::none_of(axes, [&](int64_t axis) { return shape[axis] == 0; }))
    return Value();
  SmallVector<int64_t> result;
  for (auto [axis, size] : llvm::enumerate(shape))
    if (!llvm::is_contained(axes, int64_t(axis)))
      result.push_back(size);
    else if (keep)
      result.push_back(1);
  Type type = elementTypeOf(x);
  double identity = largest ? lowestOf(type) : highestOf(type);
  return n.broadcast(n.scalar(type, identity), result);
}

/// Bool reductions (opset 20) of max (any) and min (all) run on 0/1 as i32.
/// `import` reduces its i32 operand as the node says.
static FailureOr<Results>
reduceBool(NodeImporter &n,
           FailureOr<Results> (*import)(NodeImporter &, Value)) {
  Value x = n.input(0);
  Type i1 = elementTypeOf(x);
  SHARC_TRY(wide, n.cast(x, IntegerType::get(n.context(), 32)));
  FailureOr<Results> results = import(n, *wide);
  if (failed(results))
    return failure();
  // An empty max is the lowest i32: false, as is 0.
  SHARC_TRY(clamped, n.create<MaxOp>(results->front(),
                                     n.scalar(elementTypeOf(*wide), 0.0)));
  return wrap(n.cast(*clamped, i1));
}

template <ReduceKind kind>
static FailureOr<Results> reduceValue(NodeImporter &n, Value x) {
  FailureOr<std::optional<SmallVector<int64_t>>> axes =
      reductionAxes(n, kind == ReduceKind::sum);
  if (failed(axes))
    return failure();
  if (!*axes)
    return Results{x};
  bool keep = n.getInt("keepdims", 1) != 0;
  if (kind == ReduceKind::max) {
    SHARC_TRY(empty, emptyExtreme(n, x, **axes, keep, /*largest=*/true));
    if (*empty)
      return Results{*empty};
  }
  return wrap(n.create<ReduceOp>(x, kind, ArrayRef<int64_t>(**axes), keep));
}

template <ReduceKind kind>
static FailureOr<Results> importReduce(NodeImporter &n) {
  if (kind == ReduceKind::max && elementTypeOf(n.input(0)).isInteger(1))
    return reduceBool(n, reduceValue<kind>);
  return reduceValue<kind>(n, n.input(0));
}

/// The reductions ONNX defines on top of sum and max.
enum class ComposedReduction { min, sumSquare, l1, l2, logSum, logSumExp };

/// ReduceMin: the max of -x (floats) or of -1 - x (integers, which cannot
/// overflow), mapped back; ReduceSumSquare, ReduceL1, ReduceL2: sums of x x
/// or |x| (and the square root); ReduceLogSum: log of the sum;
/// ReduceLogSumExp: m + log(sum(e^(x - m))) with m the max (0 where the max
/// is infinite, so that infinities give infinities, not NaN).  Their
/// gradients are those of the ops.
template <ComposedReduction kind>
static FailureOr<Results> composedReduce(NodeImporter &n, Value x) {
  Type type = elementTypeOf(x);
  bool isFloat = isa<FloatType>(type);
  if (kind != ComposedReduction::min && failed(requireFloat(n, x)))
    return failure();
  FailureOr<std::optional<SmallVector<int64_t>>> axes =
      reductionAxes(n, /*axesInputSince13=*/false);
  if (failed(axes))
    return failure();
  bool keep = n.getInt("keepdims", 1) != 0;
  auto reduce = [&](Value value, ReduceKind reduction, bool keepDims) {
    if (!*axes)
      return FailureOr<Value>(value);
    return n.create<ReduceOp>(value, reduction, ArrayRef<int64_t>(**axes),
                              keepDims);
  };
  if (*axes && (kind == ComposedReduction::min ||
                kind == ComposedReduction::logSumExp)) {
    SHARC_TRY(empty, emptyExtreme(n, x, **axes, keep,
                                  kind == ComposedReduction::logSumExp));
    if (*empty)
      return Results{*empty};
  }
  switch (kind) {
  case ComposedReduction::min: {
    auto flip = [&](Value value) {
      return isFloat ? n.create<NegOp>(value)
                     : n.create<SubOp>(n.scalar(type, -1.0), value);
    };
    SHARC_TRY(flipped, flip(x));
    SHARC_TRY(max, reduce(*flipped, ReduceKind::max, keep));
    return wrap(flip(*max));
  }
  case ComposedReduction::sumSquare:
  case ComposedReduction::l2: {
    SHARC_TRY(square, n.create<MulOp>(x, x));
    SHARC_TRY(sum, reduce(*square, ReduceKind::sum, keep));
    if (kind == ComposedReduction::sumSquare)
      return Results{*sum};
    return wrap(n.create<SqrtOp>(*sum));
  }
  case ComposedReduction::l1: {
    SHARC_TRY(abs, n.create<AbsOp>(x));
    return wrap(reduce(*abs, ReduceKind::sum, keep));
  }
  case ComposedReduction::logSum: {
    SHARC_TRY(sum, reduce(x, ReduceKind::sum, keep));
    return wrap(n.create<LogOp>(*sum));
  }
  case ComposedReduction::logSumExp: {
    SHARC_TRY(max, reduce(x, ReduceKind::max, /*keepDims=*/true));
    double infinity = std::numeric_limits<double>::infinity();
    SHARC_TRY(magnitude, n.create<AbsOp>(*max));
    SHARC_TRY(infinite,
              n.create<CompareOp>(*magnitude, n.scalar(type, infinity),
                                  ComparePredicate::eq));
    SHARC_TRY(shift, n.create<SelectOp>(*infinite, n.scalar(type, 0.0), *max));
    SHARC_TRY(shifted, n.create<SubOp>(x, *shift));
    SHARC_TRY(exp, n.create<ExpOp>(*shifted));
    SHARC_TRY(sum, reduce(*exp, ReduceKind::sum, /*keepDims=*/true));
    SHARC_TRY(log, n.create<LogOp>(*sum));
    SHARC_TRY(result, n.create<AddOp>(*log, *shift));
    if (keep || !*axes)
      return Results{*result};
    // Drop the reduced axes, as the sum without keepdims would.
    SmallVector<int64_t> shape;
    for (auto [axis, size] : llvm::enumerate(shapeOf(x)))
      if (!llvm::is_contained(**axes, int64_t(axis)))
        shape.push_back(size);
    return wrap(n.reshape(*result, shape));
  }
  }
  llvm_unreachable("unknown reduction");
}

template <ComposedReduction kind>
static FailureOr<Results> importComposedReduce(NodeImporter &n) {
  if (kind == ComposedReduction::min && elementTypeOf(n.input(0)).isInteger(1))
    return reduceBool(n, composedReduce<kind>);
  return composedReduce<kind>(n, n.input(0));
}

/// Mean and InvStdDev have the stash type, as in ONNX's shape inference.
static FailureOr<Results> importLayerNorm(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", -1), rankOf(x));
  if (failed(axis))
    return failure();
  int64_t stashType = n.getInt("stash_type", onnx::TensorProto::FLOAT);
  std::optional<DType> stash = dtypeFromOnnx(stashType);
  if (!stash || !isFloat(*stash))
    return n.emitError() << "unsupported stash_type " << stashType;
  double epsilon = n.getFloat("epsilon", static_cast<double>(1e-5f));
  FailureOr<SmallVector<Value>> norm = n.createOp<LayerNormOp, 3>(
      x, n.input(1), n.input(2), *axis, llvm::APFloat(epsilon));
  if (failed(norm))
    return failure();
  Results results{(*norm)[0]};
  for (Value statistic : ArrayRef<Value>(*norm).drop_front()) {
    FailureOr<Value> converted =
        n.cast(statistic, mlirType(*stash, n.context()));
    if (failed(converted))
      return failure();
    results.push_back(*converted);
  }
  return results;
}

static FailureOr<LossReduction> lossReduction(NodeImporter &n) {
  std::string reduction = n.getString("reduction", "mean");
  if (reduction == "none")
    return LossReduction::none;
  if (reduction == "sum")
    return LossReduction::sum;
  if (reduction == "mean")
    return LossReduction::mean;
  return n.emitError() << "unsupported reduction '" << reduction << "'";
}

static IntegerAttr ignoreIndex(NodeImporter &n) {
  if (!n.hasAttr("ignore_index"))
    return {};
  return IntegerAttr::get(IntegerType::get(n.context(), 64),
                          n.getInt("ignore_index", 0));
}

/// cross_entropy on the logits; the optional log_prob output is
/// log_softmax(scores) along the class axis.
static FailureOr<Results> importSoftmaxCrossEntropy(NodeImporter &n) {
  FailureOr<LossReduction> reduction = lossReduction(n);
  if (failed(reduction))
    return failure();
  FailureOr<Value> loss = n.create<CrossEntropyOp>(
      n.input(0), n.input(1), n.input(2), *reduction, ignoreIndex(n));
  if (failed(loss))
    return failure();
  Results results{*loss};
  if (n.hasOutput(1)) {
    FailureOr<Value> logProb = n.create<LogSoftmaxOp>(n.input(0), int64_t(1));
    if (failed(logProb))
      return failure();
    results.push_back(*logProb);
  }
  return results;
}

static FailureOr<Results> importNegativeLogLikelihood(NodeImporter &n) {
  FailureOr<LossReduction> reduction = lossReduction(n);
  if (failed(reduction))
    return failure();
  return wrap(n.create<NllLossOp>(n.input(0), n.input(1), n.input(2),
                                  *reduction, ignoreIndex(n)));
}

/// Dropout.  Inference mode (`training_mode` absent or false, or a ratio of
/// 0): the identity and an all-true mask.  Training mode: a keep mask from
/// sharc.dropout_mask, keyed by the node's `seed` (0 without one), the step,
/// the global batch row and a stream of its own, and the kept elements
/// scaled by 1 / (1 - ratio).  Backward reads the same mask.
static FailureOr<Results> importDropout(NodeImporter &n) {
  Value x = n.input(0);
  auto type = tensorTypeOf(x);
  bool training = false;
  double ratio = 0.5;
  if (n.hasInput(2)) {
    FailureOr<Tensor> mode = n.requireConstant(2, "training_mode");
    if (failed(mode))
      return failure();
    if (mode->numElements() != 1)
      return n.emitError() << "training_mode must be a scalar";
    training = mode->getInt(0) != 0;
  }
  if (training && n.hasInput(1)) {
    FailureOr<Tensor> given = n.requireConstant(1, "ratio");
    if (failed(given))
      return failure();
    if (given->numElements() != 1)
      return n.emitError() << "ratio must be a scalar";
    ratio = given->getDouble(0);
  }
  if (training && !(ratio >= 0 && ratio < 1))
    return n.emitError() << "ratio must be in [0, 1), got "
                         << llvm::formatv("{0}", ratio);
  auto maskType =
      RankedTensorType::get(type.getShape(), IntegerType::get(n.context(), 1));
  if (!training || ratio == 0) {
    Results results{x};
    if (n.hasOutput(1)) {
      SHARC_TRY(mask, n.broadcast(n.scalar(maskType.getElementType(), 1.0),
                                  type.getShape()));
      results.push_back(*mask);
    }
    return results;
  }
  RandomKey key = n.randomKey();
  Builder b(n.context());
  SHARC_TRY(mask, n.createTyped<DropoutMaskOp>(
                      maskType, key.step, key.rows, b.getF64FloatAttr(ratio),
                      b.getI64IntegerAttr(n.getInt("seed", 0)),
                      b.getI64IntegerAttr(key.stream)));
  Type element = type.getElementType();
  SHARC_TRY(scaled, n.create<MulOp>(x, n.scalar(element, 1.0 / (1.0 - ratio))));
  SHARC_TRY(zeros, n.broadcast(n.scalar(element, 0.0), type.getShape()));
  SHARC_TRY(y, n.create<SelectOp>(*mask, *scaled, *zeros));
  Results results{*y};
  if (n.hasOutput(1))
    results.push_back(*mask);
  return results;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// The inputs of sharc's convolutions and pools are NCHW.
static LogicalResult requireImage(NodeImporter &n, Value x) {
  int64_t rank = rankOf(x);
  if (rank == 4)
    return success();
  if (rank == 3)
    return n.emitError() << "1-D " << n.node().op_type()
                         << " is not supported (sharc convolutions and pools "
                            "are 2-D)";
  return n.emitError() << "needs a 4-D (NCHW) input, got " << x.getType();
}

/// A 2-D window attribute with one value per spatial dimension (default 1).
static FailureOr<SmallVector<int64_t>> windowAttr(NodeImporter &n,
                                                  StringRef name) {
  std::optional<SmallVector<int64_t>> values = n.getInts(name);
  if (!values)
    return SmallVector<int64_t>{1, 1};
  if (values->size() != 2 || llvm::any_of(*values, [](int64_t v) {
        return v < 1 || v > kMaxWindowValue;
      }))
    return n.emitError() << "'" << name << "' must be 2 positive values, got "
                         << formatShape(*values);
  return std::move(*values);
}

/// Kernel, strides, dilations and padding [top, left, bottom, right] of a
/// 2-D window, with auto_pad resolved.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, padding;
};

static FailureOr<Window> resolveWindow(NodeImporter &n, Value input,
                                       ArrayRef<int64_t> kernel) {
  Window window;
  window.kernel.assign(kernel.begin(), kernel.end());
  if (kernel.size() != 2 || llvm::any_of(kernel, [](int64_t k) {
        return k < 1 || k > kMaxWindowValue;
      }))
    return n.emitError() << "invalid kernel shape " << formatShape(kernel);
  FailureOr<SmallVector<int64_t>> strides = windowAttr(n, "strides");
  if (failed(strides))
    return failure();
  FailureOr<SmallVector<int64_t>> dilations = windowAttr(n, "dilations");
  if (failed(dilations))
    return failure();
  window.strides = std::move(*strides);
  window.dilations = std::move(*dilations);
  window.padding.assign(4, 0);

  std::string autoPad = n.getString("auto_pad", "NOTSET");
  std::optional<SmallVector<int64_t>> pads = n.getInts("pads");
  if (pads && (pads->size() != 4 || llvm::any_of(*pads, [](int64_t p) {
                 return p < 0 || p > kMaxWindowValue;
               })))
    return n.emitError() << "'pads' must be 4 non-negative values, got "
                         << formatShape(*pads);
  if (autoPad == "NOTSET") {
    if (pads)
      window.padding = *pads;
    return window;
  }
  if (pads && llvm::any_of(*pads, [](int64_t p) { return p != 0; }))
    return n.emitError() << "'pads' cannot be combined with auto_pad "
                         << autoPad;
  if (autoPad == "VALID")
    return window;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return n.emitError() << "unsupported auto_pad '" << autoPad << "'";
  // SAME: the output has ceil(input / stride) elements; the odd padding
  // element goes at the end (SAME_UPPER) or the beginning (SAME_LOWER).
  for (int d = 0; d < 2; ++d) {
    int64_t size = shapeOf(input)[2 + d], stride = window.strides[d];
    int64_t output = (size + stride - 1) / stride;
    int64_t span = (kernel[d] - 1) * window.dilations[d] + 1;
    int64_t total = std::max<int64_t>((output - 1) * stride + span - size, 0);
    int64_t begin = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    window.padding[d] = begin;
    window.padding[d + 2] = total - begin;
  }
  return window;
}

static FailureOr<Results> importConv(NodeImporter &n) {
  Value x = n.input(0), weight = n.input(1);
  if (failed(requireImage(n, x)))
    return failure();
  if (rankOf(weight) != 4)
    return n.emitError() << "the weight must be 4-D (OIHW), got "
                         << weight.getType();
  ArrayRef<int64_t> kernel = shapeOf(weight).drop_front(2);
  std::optional<SmallVector<int64_t>> kernelShape = n.getInts("kernel_shape");
  if (kernelShape && ArrayRef<int64_t>(*kernelShape) != kernel)
    return n.emitError() << "kernel_shape " << formatShape(*kernelShape)
                         << " differs from the weight's "
                         << formatShape(kernel);
  FailureOr<Window> window = resolveWindow(n, x, kernel);
  if (failed(window))
    return failure();
  int64_t groups = n.getInt("group", 1);
  int64_t channels = shapeOf(x)[1];
  if (groups < 1 || groups > channels || channels % groups != 0)
    return n.emitError() << "group count " << groups << " does not divide the "
                         << channels << " input channels";
  return wrap(n.create<Conv2DOp>(x, weight, n.input(2),
                                 ArrayRef<int64_t>(window->strides),
                                 ArrayRef<int64_t>(window->padding),
                                 ArrayRef<int64_t>(window->dilations), groups));
}

/// ConvTranspose: conv2d's gradient with respect to its input
/// (`conv2d_input_grad`, its weight [C_in, C_out / group, KH, KW] read as a
/// conv2d's [O, C / groups, KH, KW]), plus B per channel.  The output has
/// stride (in - 1) + output_padding + (k - 1) dilation + 1 - pads along each
/// axis, or `output_shape`, whose padding is then derived as ONNX defines
/// (the odd element at the end, or for SAME_UPPER at the start); SAME_*
/// give in * stride.  Its gradient: conv2d for the input, conv2d's weight
/// gradient for the weight.
static FailureOr<Results> importConvTranspose(NodeImporter &n) {
  Value x = n.input(0), weight = n.input(1);
  if (failed(requireImage(n, x)))
    return failure();
  if (rankOf(weight) != 4)
    return n.emitError() << "the weight must be 4-D, got " << weight.getType();
  int64_t groups = n.getInt("group", 1);
  int64_t channels = shapeOf(x)[1];
  if (groups < 1 || channels % groups != 0 || shapeOf(weight)[0] != channels)
    return n.emitError() << "the weight " << weight.getType()
                         << " does not take the " << channels
                         << " input channels in " << groups << " groups";
  ArrayRef<int64_t> kernel = shapeOf(weight).drop_front(2);
  std::optional<SmallVector<int64_t>> kernelShape = n.getInts("kernel_shape");
  if (kernelShape && ArrayRef<int64_t>(*kernelShape) != kernel)
    return n.emitError() << "kernel_shape " << formatShape(*kernelShape)
                         << " differs from the weight's "
                         << formatShape(kernel);
  FailureOr<SmallVector<int64_t>> strides = windowAttr(n, "strides");
  FailureOr<SmallVector<int64_t>> dilations = windowAttr(n, "dilations");
  if (failed(strides) || failed(dilations))
    return failure();
  SmallVector<int64_t> extra =
      n.getInts("output_padding").value_or(SmallVector<int64_t>{0, 0});
  SmallVector<int64_t> pads =
      n.getInts("pads").value_or(SmallVector<int64_t>{0, 0, 0, 0});
  std::optional<SmallVector<int64_t>> outputShape = n.getInts("output_shape");
  std::string autoPad = n.getString("auto_pad", "NOTSET");
  if (extra.size() != 2 || pads.size() != 4 ||
      (outputShape && outputShape->size() != 2 && outputShape->size() != 4))
    return n.emitError() << "output_padding, pads and output_shape need one "
                            "value per spatial axis (pads two)";
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER")
    return n.emitError() << "unsupported auto_pad '" << autoPad << "'";
  SmallVector<int64_t> shape{shapeOf(x)[0], shapeOf(weight)[1] * groups, 0, 0};
  for (int d = 0; d < 2; ++d) {
    int64_t in = shapeOf(x)[2 + d], stride = (*strides)[d];
    int64_t span = (kernel[d] - 1) * (*dilations)[d] + 1;
    if (extra[d] < 0 || extra[d] >= std::max(stride, (*dilations)[d]))
      return n.emitError() << "output_padding " << formatShape(extra)
                           << " must be less than the stride or dilation";
    int64_t full = stride * (in - 1) + extra[d] + span;
    int64_t out = -1;
    if (outputShape)
      out = (*outputShape)[outputShape->size() - 2 + d];
    else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
      out = in * stride;
    if (out >= 0) {
      // A negative total (an output_shape beyond the full result) pads the
      // result with zeros.
      int64_t total = full - out;
      bool upper = autoPad == "SAME_UPPER";
      // Python's floor division, as ONNX's reference implementation.
      int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      pads[d] = upper ? half : total - half;
      pads[d + 2] = total - pads[d];
    } else if (autoPad == "VALID") {
      pads[d] = pads[d + 2] = 0;
    }
    if (!outputShape && (pads[d] < 0 || pads[d + 2] < 0))
      return n.emitError() << "pads must not be negative";
    shape[2 + d] = full - pads[d] - pads[d + 2];
    if (shape[2 + d] < 1 || shape[2 + d] > kMaxWindowValue)
      return n.emitError() << "the output would have " << shape[2 + d]
                           << " elements along axis " << 2 + d;
  }
  // Negative pads: the convolution with none there, placed into zeros.
  SmallVector<int64_t> kept(pads), inner(shape), at(4, 0), ones(4, 1);
  for (int d = 0; d < 2; ++d)
    for (int side : {d, d + 2}) {
      kept[side] = std::max<int64_t>(pads[side], 0);
      inner[2 + d] -= kept[side] - pads[side];
      if (side == d)
        at[2 + d] = kept[side] - pads[side];
    }
  auto type = tensorTypeOf(x);
  SHARC_TRY(conv, n.createTyped<Conv2DInputGradOp>(
                      type.clone(inner), x, weight, ArrayRef<int64_t>(*strides),
                      ArrayRef<int64_t>(kept), ArrayRef<int64_t>(*dilations),
                      groups));
  Value y = *conv;
  if (inner != shape) {
    SHARC_TRY(zeros, n.broadcast(n.scalar(type.getElementType(), 0.0), shape));
    SHARC_TRY(placed, n.createTyped<InsertSliceOp>(type.clone(shape), y, *zeros,
                                                   ArrayRef<int64_t>(at),
                                                   ArrayRef<int64_t>(ones)));
    y = *placed;
  }
  if (!n.hasInput(2))
    return Results{y};
  SHARC_TRY(bias, n.reshape(n.input(2), {1, shape[1], 1, 1}));
  return wrap(n.create<AddOp>(y, *bias));
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

namespace {
/// An Einsum operand as it is being reduced: its value and the label of each
/// dimension (letters, and for the dimensions "..." stands for labels from
/// kEllipsisLabel on, right-aligned across the operands).
struct Labelled {
  Value value;
  SmallVector<int> labels;
};
constexpr int kEllipsisLabel = 1000;
} // namespace

/// The labels of an Einsum term; "..." becomes `ellipsis` labels ending at
/// kEllipsisLabel + `total` (right-aligned).  Fails on other characters.
static FailureOr<SmallVector<int>>
einsumLabels(NodeImporter &n, StringRef term, int64_t ellipsis, int64_t total) {
  SmallVector<int> labels;
  bool seenEllipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.substr(i).starts_with("...")) {
      if (seenEllipsis)
        return n.emitError() << "'...' twice in the term '" << term << "'";
      seenEllipsis = true;
      for (int64_t k = 0; k < ellipsis; ++k)
        labels.push_back(kEllipsisLabel + int(total - ellipsis + k));
      i += 2;
    } else if (llvm::isAlpha(term[i])) {
      labels.push_back(term[i]);
    } else {
      return n.emitError() << "unexpected character '" << term[i]
                           << "' in the term '" << term << "'";
    }
  }
  return labels;
}

/// Sums `x` over the labels for which `drop` is true.
static FailureOr<Labelled> einsumSumOut(NodeImporter &n, Labelled x,
                                        llvm::function_ref<bool(int)> drop) {
  SmallVector<int64_t> axes;
  Labelled result{x.value, {}};
  for (auto [axis, label] : llvm::enumerate(x.labels))
    if (drop(label))
      axes.push_back(axis);
    else
      result.labels.push_back(label);
  if (axes.empty())
    return x;
  SHARC_TRY(sum, n.create<ReduceOp>(x.value, ReduceKind::sum,
                                    ArrayRef<int64_t>(axes), false));
  result.value = *sum;
  return result;
}

/// `x` with its dimensions in the order of `labels` (a permutation of its
/// own).
static FailureOr<Value> einsumPermute(NodeImporter &n, const Labelled &x,
                                      ArrayRef<int> labels) {
  SmallVector<int64_t> permutation;
  for (int label : labels)
    permutation.push_back(llvm::find(x.labels, label) - x.labels.begin());
  if (llvm::equal(permutation, llvm::seq<int64_t>(0, permutation.size())))
    return x.value;
  return n.create<TransposeOp>(x.value, permutation);
}

/// Einsum: each operand's repeated labels become diagonals (a gather of
/// every (n + 1)-th element), labels no other operand and not the output
/// has are summed out, the operands are contracted left to right (a
/// batched matmul over the labels both have: the shared ones the output or a
/// later operand keeps are its batch, the others its contraction), and the
/// result is summed and transposed to the output's labels ("->" given, or the
/// labels that appear once, sorted, after the "..." dimensions).  "..."
/// dimensions broadcast as numpy's.  The gradient is the ops'.
static FailureOr<Results> importEinsum(NodeImporter &n) {
  std::string equation;
  for (char c : n.getString("equation", ""))
    if (!llvm::isSpace(c))
      equation.push_back(c);
  StringRef lhs = equation, rhs;
  bool explicitOutput = false;
  if (size_t arrow = lhs.find("->"); arrow != StringRef::npos) {
    rhs = lhs.substr(arrow + 2);
    lhs = lhs.substr(0, arrow);
    explicitOutput = true;
  }
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != n.numInputs())
    return n.emitError() << "the equation '" << equation << "' has "
                         << terms.size() << " operand terms for "
                         << n.numInputs() << " inputs";
  for (unsigned i = 0; i < n.numInputs(); ++i)
    if (failed(requireFloat(n, n.input(i))))
      return failure();
  // The rank "..." stands for in each operand, and the largest.
  SmallVector<int64_t> ellipsis;
  int64_t total = 0;
  for (auto [i, term] : llvm::enumerate(terms)) {
    int64_t letters =
        llvm::count_if(term, [](char c) { return llvm::isAlpha(c); });
    int64_t rank = rankOf(n.input(i));
    bool has = term.contains("...");
    if (has ? rank < letters : rank != letters)
      return n.emitError() << "the term '" << term << "' does not fit input #"
                           << i << " of rank " << rank;
    ellipsis.push_back(has ? rank - letters : 0);
    total = std::max(total, ellipsis.back());
  }
  SmallVector<Labelled> operands;
  llvm::DenseMap<int, int64_t> sizes;
  llvm::DenseMap<int, int> counts;
  for (auto [i, term] : llvm::enumerate(terms)) {
    FailureOr<SmallVector<int>> labels =
        einsumLabels(n, term, ellipsis[i], total);
    if (failed(labels))
      return failure();
    for (auto [axis, label] : llvm::enumerate(*labels)) {
      int64_t size = shapeOf(n.input(i))[axis];
      auto [it, inserted] = sizes.try_emplace(label, size);
      if (!inserted && it->second != size) {
        // "..." dimensions broadcast; letters must agree.
        if (label < kEllipsisLabel || (it->second != 1 && size != 1))
          return n.emitError()
                 << "the label '"
                 << (label < kEllipsisLabel ? std::string(1, char(label))
                                            : std::string("..."))
                 << "' has sizes " << it->second << " and " << size;
        it->second = std::max(it->second, size);
      }
      ++counts[label];
    }
    operands.push_back({n.input(i), std::move(*labels)});
  }
  SmallVector<int> output;
  if (explicitOutput) {
    FailureOr<SmallVector<int>> labels = einsumLabels(n, rhs, total, total);
    if (failed(labels))
      return failure();
    output = std::move(*labels);
    for (int label : output)
      if (!sizes.count(label) || llvm::count(output, label) != 1)
        return n.emitError() << "the output term '" << rhs
                             << "' names a label no input has, or one twice";
  } else {
    for (int64_t k = 0; k < total; ++k)
      output.push_back(kEllipsisLabel + int(k));
    SmallVector<int> once;
    for (auto &[label, count] : counts)
      if (label < kEllipsisLabel && count == 1)
        once.push_back(label);
    llvm::sort(once);
    output.append(once);
  }

  // Diagonals of repeated labels.
  for (Labelled &x : operands) {
    for (size_t a = 0; a < x.labels.size(); ++a) {
      auto b = std::find(x.labels.begin() + a + 1, x.labels.end(), x.labels[a]);
      if (b == x.labels.end())
        continue;
      int label = x.labels[a];
      int64_t size = sizes[label];
      SmallVector<int> order;
      for (int other : x.labels)
        if (other != label)
          order.push_back(other);
      size_t kept = order.size();
      order.append({label, label});
      // Transpose the pair last, flatten it, and gather its diagonal.
      SmallVector<int64_t> permutation;
      for (size_t axis = 0; axis < x.labels.size(); ++axis)
        if (x.labels[axis] != label)
          permutation.push_back(axis);
      permutation.append({int64_t(a), int64_t(b - x.labels.begin())});
      if (llvm::count(x.labels, label) > 2)
        return n.emitError() << "a label three times in one term is not "
                                "supported";
      SHARC_TRY(moved, n.create<TransposeOp>(x.value, permutation));
      SmallVector<int64_t> flat(shapeOf(*moved).take_front(kept));
      flat.push_back(size * size);
      SHARC_TRY(flattened, n.reshape(*moved, flat));
      Tensor indices(DType::i64, {size});
      for (int64_t k = 0; k < size; ++k)
        indices.setDouble(k, double(k * (size + 1)));
      SHARC_TRY(diagonal, n.create<GatherOp>(*flattened, n.constant(indices),
                                             int64_t(kept)));
      order.pop_back();
      x = {*diagonal, order};
      a = -1; // Look again from the start.
    }
  }
  // Labels needed after operand `i`: by a later operand or the output.
  auto neededAfter = [&](size_t i, int label) {
    if (llvm::is_contained(output, label))
      return true;
    for (size_t j = i + 1; j < operands.size(); ++j)
      if (llvm::is_contained(operands[j].labels, label))
        return true;
    return false;
  };
  FailureOr<Labelled> current = einsumSumOut(
      n, operands[0], [&](int label) { return !neededAfter(0, label); });
  if (failed(current))
    return failure();
  for (size_t i = 1; i < operands.size(); ++i) {
    FailureOr<Labelled> right = einsumSumOut(n, operands[i], [&](int label) {
      return !neededAfter(i, label) &&
             !llvm::is_contained(current->labels, label);
    });
    if (failed(right))
      return failure();
    SmallVector<int> batch, left, contracted, rightOnly;
    for (int label : current->labels) {
      bool shared = llvm::is_contained(right->labels, label);
      if (!shared)
        left.push_back(label);
      else if (neededAfter(i, label))
        batch.push_back(label);
      else
        contracted.push_back(label);
    }
    for (int label : right->labels)
      if (!llvm::is_contained(current->labels, label))
        rightOnly.push_back(label);
    auto product = [&](ArrayRef<int> labels, const Labelled &x) {
      int64_t size = 1;
      for (int label : labels)
        size *=
            shapeOf(x.value)[llvm::find(x.labels, label) - x.labels.begin()];
      return size;
    };
    auto batchShape = [&](const Labelled &x) {
      SmallVector<int64_t> shape;
      for (int label : batch)
        shape.push_back(
            shapeOf(x.value)[llvm::find(x.labels, label) - x.labels.begin()]);
      return shape;
    };
    SmallVector<int> leftOrder(batch), rightOrder(batch);
    leftOrder.append(left.begin(), left.end());
    leftOrder.append(contracted.begin(), contracted.end());
    rightOrder.append(contracted.begin(), contracted.end());
    rightOrder.append(rightOnly.begin(), rightOnly.end());
    SHARC_TRY(leftMoved, einsumPermute(n, *current, leftOrder));
    SHARC_TRY(rightMoved, einsumPermute(n, *right, rightOrder));
    SmallVector<int64_t> leftShape = batchShape(*current),
                         rightShape = batchShape(*right);
    leftShape.append({product(left, *current), product(contracted, *current)});
    rightShape.append(
        {product(contracted, *right), product(rightOnly, *right)});
    SHARC_TRY(leftMatrix, n.reshape(*leftMoved, leftShape));
    SHARC_TRY(rightMatrix, n.reshape(*rightMoved, rightShape));
    SHARC_TRY(matrix,
              n.create<MatmulOp>(*leftMatrix, *rightMatrix, false, false));
    SmallVector<int64_t> shape;
    SmallVector<int> labels(batch);
    for (int label : batch)
      shape.push_back(sizes[label]);
    for (int label : left) {
      shape.push_back(sizes[label]);
      labels.push_back(label);
    }
    for (int label : rightOnly) {
      shape.push_back(sizes[label]);
      labels.push_back(label);
    }
    // Broadcast batch dimensions take their full size in the matmul.
    for (auto [k, label] : llvm::enumerate(batch))
      shape[k] = shapeOf(*matrix)[k];
    SHARC_TRY(unflattened, n.reshape(*matrix, shape));
    current = Labelled{*unflattened, labels};
  }
  FailureOr<Labelled> last = einsumSumOut(n, *current, [&](int label) {
    return !llvm::is_contained(output, label);
  });
  if (failed(last))
    return failure();
  // Output "..." dimensions an operand did not have (or had as 1) broadcast.
  for (int label : output)
    if (!llvm::is_contained(last->labels, label))
      return n.emitError() << "the output label has no input dimension";
  return wrap(einsumPermute(n, *last, output));
}

/// LRN: x / (bias + alpha / size * s)^beta, where s sums the squares of
/// `size` neighbouring channels (floor((size - 1) / 2) before, the rest
/// after, zeros beyond the ends): an average pool over the channel axis of
/// the squares, which counts the padding, times size.
static FailureOr<Results> importLRN(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = rankOf(x);
  if (rank < 3)
    return n.emitError() << "needs an (N, C, spatial...) input, got "
                         << x.getType();
  int64_t size = n.getInt("size", 0);
  if (size < 1 || size > kMaxWindowValue)
    return n.emitError() << "size must be positive, got " << size;
  double alpha = n.getFloat("alpha", double(1e-4f));
  double beta = n.getFloat("beta", double(0.75f));
  double bias = n.getFloat("bias", 1.0);
  ArrayRef<int64_t> shape = shapeOf(x);
  int64_t rest = 1;
  for (int64_t d : shape.drop_front(2))
    rest *= d;
  Type type = elementTypeOf(x);
  SHARC_TRY(square, n.create<MulOp>(x, x));
  SHARC_TRY(columns, n.reshape(*square, {shape[0], 1, shape[1], rest}));
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  SHARC_TRY(mean, n.create<AvgPool2DOp>(*columns, ArrayRef<int64_t>{size, 1},
                                        ArrayRef<int64_t>{1, 1},
                                        ArrayRef<int64_t>{before, 0, after, 0},
                                        false, true));
  SHARC_TRY(back, n.reshape(*mean, shape));
  // bias + alpha / size * (size * mean) = bias + alpha * mean.
  SHARC_TRY(scaled, n.create<MulOp>(*back, n.scalar(type, alpha)));
  SHARC_TRY(shifted, n.create<AddOp>(*scaled, n.scalar(type, bias)));
  SHARC_TRY(power, n.create<PowOp>(*shifted, n.scalar(type, beta)));
  return wrap(n.create<DivOp>(x, *power));
}

/// The pooling window of MaxPool / AveragePool (`kernel_shape` required).
static FailureOr<Window> poolWindow(NodeImporter &n) {
  if (failed(requireImage(n, n.input(0))))
    return failure();
  std::optional<SmallVector<int64_t>> kernel = n.getInts("kernel_shape");
  if (!kernel)
    return n.emitError() << "needs the 'kernel_shape' attribute";
  return resolveWindow(n, n.input(0), *kernel);
}

/// The Indices output is not supported; storage_order only affects it.
static FailureOr<Results> importMaxPool(NodeImporter &n) {
  FailureOr<Window> window = poolWindow(n);
  if (failed(window))
    return failure();
  return wrap(n.create<MaxPool2DOp>(
      n.input(0), ArrayRef<int64_t>(window->kernel),
      ArrayRef<int64_t>(window->strides), ArrayRef<int64_t>(window->padding),
      ArrayRef<int64_t>(window->dilations), n.getInt("ceil_mode", 0) != 0));
}

static FailureOr<Results> importAveragePool(NodeImporter &n) {
  FailureOr<Window> window = poolWindow(n);
  if (failed(window))
    return failure();
  if (llvm::any_of(window->dilations, [](int64_t d) { return d != 1; }))
    return n.emitError() << "dilated average pooling is not supported";
  return wrap(n.create<AvgPool2DOp>(
      n.input(0), ArrayRef<int64_t>(window->kernel),
      ArrayRef<int64_t>(window->strides), ArrayRef<int64_t>(window->padding),
      n.getInt("ceil_mode", 0) != 0, n.getInt("count_include_pad", 0) != 0));
}

/// GlobalAveragePool and GlobalMaxPool: the mean or the max over the spatial
/// dimensions, kept as size 1.
template <ReduceKind kind>
static FailureOr<Results> importGlobalPool(NodeImporter &n) {
  Value x = n.input(0);
  if (rankOf(x) < 3)
    return n.emitError() << "needs an (N, C, spatial...) input, got "
                         << x.getType();
  SmallVector<int64_t> axes = llvm::to_vector(llvm::seq<int64_t>(2, rankOf(x)));
  return wrap(n.create<ReduceOp>(x, kind, ArrayRef<int64_t>(axes), true));
}

//===----------------------------------------------------------------------===//
// Products, top-k, compression, sequence reversal
//===----------------------------------------------------------------------===//

/// ReduceProd: along each reduced axis, the first half times the second
/// (an odd last element carried to the next round) until one element is
/// left: log2 of the length rounds of `mul`, whose gradients make the
/// product's.  An empty axis gives 1.
static FailureOr<Results> importReduceProd(NodeImporter &n) {
  Value x = n.input(0);
  Type type = elementTypeOf(x);
  if (type.isInteger(1))
    return n.emitError() << "needs a numeric tensor, got " << x.getType();
  FailureOr<std::optional<SmallVector<int64_t>>> axes =
      reductionAxes(n, /*axesInputSince13=*/false);
  if (failed(axes))
    return failure();
  if (!*axes)
    return Results{x};
  Value y = x;
  for (int64_t axis : **axes) {
    int64_t length = shapeOf(y)[axis];
    if (length == 0) {
      SmallVector<int64_t> shape(shapeOf(y));
      shape[axis] = 1;
      SHARC_TRY(ones, n.broadcast(n.scalar(type, 1.0), shape));
      y = *ones;
    }
    for (; length > 1; length = (length + 1) / 2) {
      int64_t half = length / 2;
      SHARC_TRY(low, sliceAlong(n, y, axis, 0, half));
      SHARC_TRY(high, sliceAlong(n, y, axis, half, half));
      SHARC_TRY(product, n.create<MulOp>(*low, *high));
      Value next = *product;
      if (length % 2) {
        SHARC_TRY(last, sliceAlong(n, y, axis, 2 * half, 1));
        SHARC_TRY(joined,
                  n.create<ConcatOp>(ValueRange{*product, *last}, axis));
        next = *joined;
      }
      y = next;
    }
  }
  if (n.getInt("keepdims", 1) != 0)
    return Results{y};
  SmallVector<int64_t> shape;
  for (auto [axis, size] : llvm::enumerate(shapeOf(x)))
    if (!llvm::is_contained(**axes, int64_t(axis)))
      shape.push_back(size);
  return wrap(n.reshape(y, shape));
}

/// TopK (K a constant): K rounds, each taking the first position of the
/// largest (with `largest` 0, through the order reversal, the smallest)
/// value among the positions not yet taken, so that equal values come in
/// index order; the value is read as the sum of `x` selected at that
/// position, so its gradient reaches that element alone.  The results are
/// sorted whatever `sorted` says (ONNX allows any order without it).
static FailureOr<Results> importTopK(NodeImporter &n) {
  Value x = n.input(0);
  Type type = elementTypeOf(x);
  if (type.isInteger(1))
    return n.emitError() << "needs a numeric tensor, got " << x.getType();
  FailureOr<SmallVector<int64_t>> kValue = n.requireInts(1, "K");
  if (failed(kValue))
    return failure();
  if (kValue->size() != 1)
    return n.emitError() << "K must hold one value, got " << kValue->size();
  FailureOr<int64_t> axis = normalizeAxis(n, n.getInt("axis", -1), rankOf(x));
  if (failed(axis))
    return failure();
  int64_t k = kValue->front(), length = shapeOf(x)[*axis];
  if (k < 0 || k > length)
    return n.emitError() << "K is " << k << ", but axis " << *axis << " has "
                         << length << " elements";
  Type i64 = IntegerType::get(n.context(), 64);
  SmallVector<int64_t> resultShape(shapeOf(x));
  resultShape[*axis] = k;
  if (k == 0) {
    SHARC_TRY(values, n.broadcast(n.scalar(type, 0.0), resultShape));
    SHARC_TRY(indices, n.broadcast(n.scalar(i64, 0.0), resultShape));
    return Results{*values, *indices};
  }
  Value y = x;
  if (n.getInt("largest", 1) == 0) {
    SHARC_TRY(reversed, reverseOrder(n, x));
    y = *reversed;
  }
  auto indexType = RankedTensorType::get(shapeOf(x), i64);
  SHARC_TRY(position, n.createTyped<IotaOp>(indexType, *axis));
  SmallVector<int64_t, 1> axisList{*axis};
  ArrayRef<int64_t> axes(axisList);
  Value allowed;
  SmallVector<Value> values, indices;
  for (int64_t round = 0; round < k; ++round) {
    Value masked = y;
    if (allowed) {
      SHARC_TRY(kept,
                n.create<SelectOp>(allowed, y, n.scalar(type, lowestOf(type))));
      masked = *kept;
    }
    SHARC_TRY(best, n.create<ReduceOp>(masked, ReduceKind::max, axes, true));
    SHARC_TRY(hit, n.create<CompareOp>(masked, *best, ComparePredicate::eq));
    Value hits = *hit;
    if (isa<FloatType>(type)) {
      SHARC_TRY(nan, n.create<CompareOp>(masked, masked, ComparePredicate::ne));
      SHARC_TRY(either, n.create<OrOp>(hits, *nan));
      hits = *either;
    }
    if (allowed) {
      SHARC_TRY(both, n.create<AndOp>(hits, allowed));
      hits = *both;
    }
    SHARC_TRY(candidate, n.create<SelectOp>(hits, *position,
                                            n.scalar(i64, double(length))));
    SHARC_TRY(flipped, reverseOrder(n, *candidate));
    SHARC_TRY(last, n.create<ReduceOp>(*flipped, ReduceKind::max, axes, true));
    SHARC_TRY(first, reverseOrder(n, *last));
    SHARC_TRY(chosen,
              n.create<CompareOp>(*position, *first, ComparePredicate::eq));
    SHARC_TRY(picked, n.create<SelectOp>(*chosen, x, n.scalar(type, 0.0)));
    SHARC_TRY(value, n.create<ReduceOp>(*picked, ReduceKind::sum, axes, true));
    values.push_back(*value);
    indices.push_back(*first);
    SHARC_TRY(untaken, n.create<NotOp>(*chosen));
    if (allowed) {
      SHARC_TRY(both, n.create<AndOp>(allowed, *untaken));
      allowed = *both;
    } else {
      allowed = *untaken;
    }
  }
  Results results;
  for (ArrayRef<Value> parts :
       {ArrayRef<Value>(values), ArrayRef<Value>(indices)}) {
    if (parts.size() == 1) {
      results.push_back(parts.front());
      continue;
    }
    SHARC_TRY(joined, n.create<ConcatOp>(ValueRange(parts), *axis));
    results.push_back(*joined);
  }
  return results;
}

/// Compress (the condition a constant): a `gather` of the positions where
/// the condition holds, along `axis`, or of the flattened input without one.
static FailureOr<Results> importCompress(NodeImporter &n) {
  Value x = n.input(0);
  FailureOr<Tensor> condition = n.requireConstant(1, "condition");
  if (failed(condition))
    return failure();
  if (condition->rank() != 1)
    return n.emitError() << "condition must be 1-D, got rank "
                         << condition->rank();
  int64_t axis = 0;
  if (n.hasAttr("axis")) {
    FailureOr<int64_t> given = normalizeAxis(n, n.getInt("axis", 0), rankOf(x));
    if (failed(given))
      return failure();
    axis = *given;
  } else {
    int64_t count = tensorTypeOf(x).getNumElements();
    SHARC_TRY(flat, n.reshape(x, {count}));
    x = *flat;
  }
  int64_t length = shapeOf(x)[axis];
  if (condition->numElements() > length)
    return n.emitError() << "condition has " << condition->numElements()
                         << " values, but the axis has " << length
                         << " elements";
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < condition->numElements(); ++i)
    if (condition->getDouble(i) != 0)
      kept.push_back(i);
  Tensor positions(DType::i64, {int64_t(kept.size())});
  for (auto [i, position] : llvm::enumerate(kept))
    positions.setDouble(i, double(position));
  return wrap(n.create<GatherOp>(x, n.constant(positions), axis));
}

/// ReverseSequence: along the time axis, position t of batch entry b reads
/// sequence_lens[b] - 1 - t while t < sequence_lens[b], and t after (a
/// GatherElements of computed indices).
static FailureOr<Results> importReverseSequence(NodeImporter &n) {
  Value x = n.input(0), lengths = n.input(1);
  int64_t rank = rankOf(x);
  if (rank < 2)
    return n.emitError() << "needs an input of rank 2 or more, got "
                         << x.getType();
  int64_t batchAxis = n.getInt("batch_axis", 1),
          timeAxis = n.getInt("time_axis", 0);
  if (!((batchAxis == 0 && timeAxis == 1) || (batchAxis == 1 && timeAxis == 0)))
    return n.emitError() << "batch_axis and time_axis must be 0 and 1 (in "
                            "either order), got "
                         << batchAxis << " and " << timeAxis;
  if (failed(requireIndices(n, lengths)))
    return failure();
  int64_t batch = shapeOf(x)[batchAxis];
  if (shapeOf(lengths) != ArrayRef<int64_t>{batch})
    return n.emitError() << "sequence_lens must have shape [" << batch
                         << "], got " << lengths.getType();
  Type indexType = elementTypeOf(lengths);
  auto indicesType = RankedTensorType::get(shapeOf(x), indexType);
  SHARC_TRY(time, n.createTyped<IotaOp>(indicesType, timeAxis));
  SmallVector<int64_t> lengthShape(rank, 1);
  lengthShape[batchAxis] = batch;
  SHARC_TRY(length, n.reshape(lengths, lengthShape));
  SHARC_TRY(inside, n.create<CompareOp>(*time, *length, ComparePredicate::lt));
  SHARC_TRY(end, n.create<SubOp>(*length, n.scalar(indexType, 1.0)));
  SHARC_TRY(reversed, n.create<SubOp>(*end, *time));
  SHARC_TRY(index, n.create<SelectOp>(*inside, *reversed, *time));
  FailureOr<FlatAddress> address = elementOffsets(n, x, *index, timeAxis);
  if (failed(address))
    return failure();
  SHARC_TRY(flat, n.reshape(x, address->flatShape));
  SHARC_TRY(gathered, n.create<GatherOp>(*flat, address->offsets, int64_t(0)));
  return Results{*gathered};
}

//===----------------------------------------------------------------------===//
// Signal windows and the mel filter bank (constants)
//===----------------------------------------------------------------------===//

/// The element type of `output_datatype` (float by default).
static FailureOr<DType> outputDatatype(NodeImporter &n) {
  int64_t onnxType = n.getInt("output_datatype", onnx::TensorProto::FLOAT);
  std::optional<DType> dtype = dtypeFromOnnx(onnxType);
  if (!dtype)
    return n.emitError() << "unsupported output_datatype "
                         << onnxTypeName(onnxType);
  return *dtype;
}

/// A constant scalar input as a double.
static FailureOr<double> constantScalar(NodeImporter &n, unsigned index,
                                        StringRef what) {
  FailureOr<Tensor> value = n.requireConstant(index, what);
  if (failed(value))
    return failure();
  if (value->numElements() != 1)
    return n.emitError() << what << " must hold one value, got "
                         << value->numElements();
  return value->getDouble(0);
}

enum class WindowKind { hann, hamming, blackman };

/// HannWindow, HammingWindow and BlackmanWindow of a constant size, as
/// ONNX's reference defines them (N - 1 in the denominator unless periodic).
template <WindowKind kind>
static FailureOr<Results> importWindow(NodeImporter &n) {
  FailureOr<double> size = constantScalar(n, 0, "size");
  FailureOr<DType> dtype = outputDatatype(n);
  if (failed(size) || failed(dtype))
    return failure();
  if (!(*size >= 0) || *size > double(kMaxWindowValue) ||
      *size != std::floor(*size))
    return n.emitError() << "size must be a non-negative integer, got "
                         << *size;
  int64_t count = static_cast<int64_t>(*size);
  double period = n.getInt("periodic", 1) != 0 ? double(count) : count - 1.0;
  Tensor window(*dtype, {count});
  for (int64_t i = 0; i < count; ++i) {
    double t = period > 0 ? M_PI * double(i) / period : 0.0;
    double value = 1.0;
    switch (kind) {
    case WindowKind::hann:
      value = std::sin(t) * std::sin(t);
      break;
    case WindowKind::hamming:
      value = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(2 * t);
      break;
    case WindowKind::blackman:
      value = 0.42 - 0.5 * std::cos(2 * t) + 0.08 * std::cos(4 * t);
      break;
    }
    window.setDouble(i, value);
  }
  return Results{n.constant(window)};
}

/// MelWeightMatrix (every input a constant): the triangular filters of
/// ONNX's reference, [dft_length / 2 + 1, num_mel_bins].
static FailureOr<Results> importMelWeightMatrix(NodeImporter &n) {
  FailureOr<double> bins = constantScalar(n, 0, "num_mel_bins"),
                    dft = constantScalar(n, 1, "dft_length"),
                    rate = constantScalar(n, 2, "sample_rate"),
                    lower = constantScalar(n, 3, "lower_edge_hertz"),
                    upper = constantScalar(n, 4, "upper_edge_hertz");
  FailureOr<DType> dtype = outputDatatype(n);
  if (failed(bins) || failed(dft) || failed(rate) || failed(lower) ||
      failed(upper) || failed(dtype))
    return failure();
  if (!(*bins >= 1 && *bins <= 1 << 16) || !(*dft >= 1 && *dft <= 1 << 24) ||
      !(*rate > 0))
    return n.emitError() << "num_mel_bins, dft_length and sample_rate must "
                            "be positive (and num_mel_bins at most 65536, "
                            "dft_length at most 2^24)";
  if (!(*lower >= 0 && *lower < *upper && *upper <= *rate / 2))
    return n.emitError() << "needs 0 <= lower_edge_hertz < upper_edge_hertz "
                            "<= sample_rate / 2, got "
                         << *lower << " and " << *upper;
  int64_t melBins = int64_t(*bins), length = int64_t(*dft);
  int64_t spectrumBins = length / 2 + 1;
  auto toMel = [](double hertz) {
    return 2595.0 * std::log1p(hertz / 700.0) / std::log(10.0);
  };
  double lowMel = toMel(*lower), highMel = toMel(*upper);
  double step = (highMel - lowMel) / double(melBins + 2);
  std::vector<int64_t> edges(melBins + 2);
  for (int64_t i = 0; i < melBins + 2; ++i) {
    double hertz =
        700.0 * std::expm1((i * step + lowMel) / 2595.0 * std::log(10.0));
    edges[i] = int64_t(std::floor(double(length + 1) * hertz / *rate));
    if (edges[i] < 0 || edges[i] >= spectrumBins)
      return n.emitError() << "filter edge " << edges[i] << " lies outside the "
                           << spectrumBins << " spectrum bins";
  }
  Tensor matrix(*dtype, {spectrumBins, melBins});
  for (int64_t i = 0; i < melBins; ++i) {
    int64_t left = edges[i], center = edges[i + 1], right = edges[i + 2];
    if (center == left)
      matrix.setDouble(center * melBins + i, 1.0);
    else
      for (int64_t j = left; j <= center; ++j)
        matrix.setDouble(j * melBins + i,
                         double(j - left) / double(center - left));
    for (int64_t j = center; j < right; ++j)
      matrix.setDouble(j * melBins + i,
                       double(right - j) / double(right - center));
  }
  return Results{n.constant(matrix)};
}

/// DFT (dft_length and, from opset 20, axis constants): along the axis, the
/// signal (real, [..., 1], or complex, [..., 2]) cut or zero-padded to the
/// transform length L, times constant cosine and sine matrices:
/// Re = xr C + s xi S and Im = xi C - s xr S, with s = 1 forward and -1
/// inverse (then divided by L); `onesided` keeps the first L / 2 + 1
/// frequencies, and with `inverse` reads them as the half spectrum of a real
/// signal (numpy's irfft: the other half is their conjugate).  Its
/// gradient is the matmuls'.
static FailureOr<Results> importDFT(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = rankOf(x);
  ArrayRef<int64_t> shape = shapeOf(x);
  if (rank < 2 || (shape.back() != 1 && shape.back() != 2))
    return n.emitError() << "needs a signal of shape [..., 1] (real) or "
                            "[..., 2] (complex), got "
                         << x.getType();
  int64_t axisValue = n.getInt("axis", 1);
  if (n.opset() >= 20) {
    axisValue = -2;
    if (n.hasInput(2)) {
      FailureOr<SmallVector<int64_t>> given = n.requireInts(2, "axis");
      if (failed(given))
        return failure();
      if (given->size() != 1)
        return n.emitError() << "axis must hold one value";
      axisValue = given->front();
    }
  }
  FailureOr<int64_t> axis = normalizeAxis(n, axisValue, rank);
  if (failed(axis))
    return failure();
  if (*axis == rank - 1)
    return n.emitError() << "axis must not be the last (complex) axis";
  bool inverse = n.getInt("inverse", 0) != 0;
  bool onesided = n.getInt("onesided", 0) != 0;
  bool complexInput = shape.back() == 2;
  int64_t width = shape[*axis];
  int64_t length = inverse && onesided ? 2 * (width - 1) : width;
  if (n.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> given = n.requireInts(1, "dft_length");
    if (failed(given))
      return failure();
    if (given->size() != 1)
      return n.emitError() << "dft_length must hold one value";
    length = given->front();
  }
  if (length < 1 || length > (int64_t(1) << 16))
    return n.emitError() << "dft_length must be in [1, 65536], got " << length;
  if (!inverse && onesided && complexInput)
    return n.emitError() << "onesided needs a real signal";

  // The signal as [rows, width] real and imaginary parts, the axis last.
  SmallVector<int64_t> perm, permuted;
  for (int64_t d = 0; d < rank - 1; ++d)
    if (d != *axis)
      perm.push_back(d);
  perm.push_back(*axis);
  perm.push_back(rank - 1);
  for (int64_t d : perm)
    permuted.push_back(shape[d]);
  int64_t rows = 1;
  for (int64_t d = 0; d < rank - 2; ++d)
    rows *= permuted[d];
  bool identity = *axis == rank - 2;
  Value moved = x;
  if (!identity) {
    SHARC_TRY(transposed, n.create<TransposeOp>(x, ArrayRef<int64_t>(perm)));
    moved = *transposed;
  }
  SHARC_TRY(flat, n.reshape(moved, {rows, width, shape.back()}));
  // The input length the transform reads: L, or L / 2 + 1 frequencies.
  int64_t taken = inverse && onesided ? length / 2 + 1 : length;
  auto part = [&](int64_t index) -> FailureOr<Value> {
    SHARC_TRY(slice, sliceAlong(n, *flat, 2, index, 1));
    SHARC_TRY(matrix, n.reshape(*slice, {rows, width}));
    if (taken <= width)
      return sliceAlong(n, *matrix, 1, 0, taken);
    SHARC_TRY(zeros, n.broadcast(n.scalar(elementTypeOf(x), 0.0),
                                 {rows, taken - width}));
    return n.create<ConcatOp>(ValueRange{*matrix, *zeros}, int64_t(1));
  };
  SHARC_TRY(real, part(0));
  Value imaginary;
  if (complexInput) {
    SHARC_TRY(imag, part(1));
    imaginary = *imag;
  }
  // C[j][k] = cos(2 pi j k / L) and S[j][k] = sin(2 pi j k / L) over the
  // `taken` inputs j and `outputs` results k, scaled for the inverse.
  int64_t outputs = inverse && onesided ? length
                    : onesided          ? length / 2 + 1
                                        : length;
  DType dtype = *dtypeOf(elementTypeOf(x));
  Tensor cosines(dtype, {taken, outputs}), sines(dtype, {taken, outputs});
  for (int64_t j = 0; j < taken; ++j)
    for (int64_t k = 0; k < outputs; ++k) {
      // The angle's multiple of 2 pi / L reduced mod L, and its quarter
      // turns exact (sin(pi) is not 0 in floating point).
      int64_t turn = (j * k) % length;
      double angle = 2 * M_PI * double(turn) / double(length);
      double scale = inverse ? 1.0 / double(length) : 1.0;
      // The half spectrum counts each frequency but 0 and L / 2 twice.
      if (inverse && onesided && j != 0 && 2 * j != length)
        scale *= 2;
      double cosine = std::cos(angle), sine = std::sin(angle);
      if ((4 * turn) % length == 0) {
        int64_t quarter = 4 * turn / length;
        cosine = quarter == 0 ? 1 : quarter == 2 ? -1 : 0;
        sine = quarter == 1 ? 1 : quarter == 3 ? -1 : 0;
      }
      cosines.setDouble(j * outputs + k, scale * cosine);
      sines.setDouble(j * outputs + k, (inverse ? -scale : scale) * sine);
    }
  Value c = n.constant(cosines), s = n.constant(sines);
  auto product = [&](Value lhs, Value rhs) {
    return n.create<MatmulOp>(lhs, rhs, false, false);
  };
  SHARC_TRY(realCos, product(*real, c));
  SHARC_TRY(realSin, product(*real, s));
  Value outReal = *realCos, outImag;
  SHARC_TRY(negRealSin, n.create<NegOp>(*realSin));
  outImag = *negRealSin;
  if (imaginary) {
    SHARC_TRY(imagCos, product(imaginary, c));
    SHARC_TRY(imagSin, product(imaginary, s));
    SHARC_TRY(re, n.create<AddOp>(outReal, *imagSin));
    SHARC_TRY(im, n.create<AddOp>(*imagCos, outImag));
    outReal = *re;
    outImag = *im;
  }
  SmallVector<int64_t> resultPermuted(permuted);
  resultPermuted[rank - 2] = outputs;
  SmallVector<Value> parts{outReal};
  resultPermuted[rank - 1] = inverse && onesided ? 1 : 2;
  if (!(inverse && onesided))
    parts.push_back(outImag);
  SmallVector<Value> columns;
  for (Value p : parts) {
    SHARC_TRY(column, n.reshape(p, {rows, outputs, 1}));
    columns.push_back(*column);
  }
  Value joined = columns.front();
  if (columns.size() == 2) {
    SHARC_TRY(both, n.create<ConcatOp>(ValueRange(columns), int64_t(2)));
    joined = *both;
  }
  SHARC_TRY(unflat, n.reshape(joined, resultPermuted));
  if (identity)
    return Results{*unflat};
  SmallVector<int64_t> inversePerm(rank);
  for (int64_t d = 0; d < rank; ++d)
    inversePerm[perm[d]] = d;
  return wrap(n.create<TransposeOp>(*unflat, ArrayRef<int64_t>(inversePerm)));
}

//===----------------------------------------------------------------------===//
// GridSample
//===----------------------------------------------------------------------===//

/// `v` reflected by the nearer border of [low, high] until it lies inside, as
/// ONNX's reference does (a point `r` past a border by d = k * range + r
/// lands r inside the border k leaves it at).
static FailureOr<Value> reflectInto(NodeImporter &n, Value v, double low,
                                    double high) {
  Type type = elementTypeOf(v);
  auto c = [&](double value) { return n.scalar(type, value); };
  double range = high - low;
  if (range <= 0)
    return n.broadcast(c(low), shapeOf(v));
  SHARC_TRY(below, n.create<CompareOp>(v, c(low), ComparePredicate::lt));
  SHARC_TRY(above, n.create<CompareOp>(v, c(high), ComparePredicate::gt));
  SHARC_TRY(fromLow, n.create<SubOp>(c(low), v));
  SHARC_TRY(fromHigh, n.create<SubOp>(v, c(high)));
  SHARC_TRY(distance, n.create<SelectOp>(*below, *fromLow, *fromHigh));
  SHARC_TRY(ratio, n.create<DivOp>(*distance, c(range)));
  SHARC_TRY(turns, n.create<FloorOp>(*ratio));
  SHARC_TRY(whole, n.create<MulOp>(*turns, c(range)));
  SHARC_TRY(rest, n.create<SubOp>(*distance, *whole));
  SHARC_TRY(half, n.create<MulOp>(*turns, c(0.5)));
  SHARC_TRY(halfFloor, n.create<FloorOp>(*half));
  SHARC_TRY(even, n.create<CompareOp>(*half, *halfFloor, ComparePredicate::eq));
  SHARC_TRY(upFromLow, n.create<AddOp>(c(low), *rest));
  SHARC_TRY(downFromHigh, n.create<SubOp>(c(high), *rest));
  SHARC_TRY(belowResult, n.create<SelectOp>(*even, *upFromLow, *downFromHigh));
  SHARC_TRY(aboveResult, n.create<SelectOp>(*even, *downFromHigh, *upFromLow));
  SHARC_TRY(outsideResult,
            n.create<SelectOp>(*below, *belowResult, *aboveResult));
  SHARC_TRY(outside, n.create<OrOp>(*below, *above));
  return n.create<SelectOp>(*outside, *outsideResult, v);
}

/// `v` clamped into [low, high].
static FailureOr<Value> clampInto(NodeImporter &n, Value v, double low,
                                  double high) {
  Type type = elementTypeOf(v);
  SHARC_TRY(raised, n.create<MaxOp>(v, n.scalar(type, low)));
  return n.create<MinOp>(*raised, n.scalar(type, high));
}

namespace {
/// One input position a GridSample output reads along a spatial axis: its
/// index (a float holding an integer, within the axis) and weight (null for
/// 1).
struct GridTap {
  Value index, weight;
};
} // namespace

/// GridSample (nearest, linear, cubic; zeros, border, reflection padding;
/// N-D from opset 20), as ONNX's reference computes it: per spatial axis the
/// grid coordinate denormalized (align_corners or not), rounded half to
/// even for nearest, and outside [low, high] clamped (border) or reflected
/// (reflection); the taps around it with their linear or cubic (A = -0.75)
/// weights, each tap's index made readable (zeros: weight 0 outside;
/// border: clamped; reflection: reflected).  Every combination of the axes'
/// taps is a `gather` of rows of the input viewed as [N * spatial, C],
/// weighted and summed.  The gradient of X is the gathers'; the grid's
/// flows through the weights.
static FailureOr<Results> importGridSample(NodeImporter &n) {
  Value x = n.input(0), grid = n.input(1);
  if (failed(requireFloat(n, x)) || failed(requireFloat(n, grid)))
    return failure();
  int64_t rank = rankOf(x), spatial = rank - 2;
  if (rank < 3 || (n.opset() < 20 && rank != 4))
    return n.emitError() << "needs an (N, C, H, W) input"
                         << (n.opset() < 20 ? "" : " (or N-D)") << ", got "
                         << x.getType();
  ArrayRef<int64_t> xs = shapeOf(x), gs = shapeOf(grid);
  if (rankOf(grid) != rank || gs[0] != xs[0] || gs.back() != spatial)
    return n.emitError() << "grid must have shape [" << xs[0]
                         << ", output dims..., " << spatial << "], got "
                         << grid.getType();
  Type type = elementTypeOf(x);
  SHARC_TRY(coordinates, n.cast(grid, type));
  std::string mode =
      n.getString("mode", n.opset() >= 20 ? "linear" : "bilinear");
  // Opset 20 renamed bilinear and bicubic.
  bool renamed = n.opset() >= 20;
  if (mode == (renamed ? "linear" : "bilinear"))
    mode = "linear";
  else if (mode == (renamed ? "cubic" : "bicubic"))
    mode = "cubic";
  else if (mode != "nearest")
    return n.emitError() << "unsupported mode '" << mode << "' (opset "
                         << n.opset() << " has "
                         << (renamed ? "linear, cubic" : "bilinear, bicubic")
                         << " and nearest)";
  std::string padding = n.getString("padding_mode", "zeros");
  if (!llvm::is_contained({"zeros", "border", "reflection"}, padding))
    return n.emitError() << "unsupported padding_mode '" << padding << "'";
  bool align = n.getInt("align_corners", 0) != 0;
  auto c = [&](double value) { return n.scalar(type, value); };

  SmallVector<int64_t> outShape(gs.begin(), gs.end() - 1);
  SmallVector<SmallVector<GridTap>> taps(spatial);
  for (int64_t k = 0; k < spatial; ++k) {
    int64_t size = xs[2 + k];
    if (size == 0)
      return n.emitError() << "spatial axis " << 2 + k << " has no elements";
    double low = align ? 0.0 : -0.5;
    double high = align ? size - 1.0 : size - 0.5;
    // The grid's last axis holds (x, y, z, ...): the spatial axes reversed.
    SHARC_TRY(component,
              sliceAlong(n, *coordinates, rank - 1, spatial - 1 - k, 1));
    SHARC_TRY(g, n.reshape(*component, outShape));
    SHARC_TRY(shifted, n.create<AddOp>(*g, c(1.0)));
    FailureOr<Value> position = failure();
    if (align) {
      SHARC_TRY(halved, n.create<MulOp>(*shifted, c(0.5)));
      position = n.create<MulOp>(*halved, c(size - 1.0));
    } else {
      SHARC_TRY(scaled, n.create<MulOp>(*shifted, c(double(size))));
      SHARC_TRY(less, n.create<SubOp>(*scaled, c(1.0)));
      position = n.create<MulOp>(*less, c(0.5));
    }
    if (failed(position))
      return failure();
    Value p = *position;
    if (mode == "nearest") {
      SHARC_TRY(rounded, roundHalfEven(n, p));
      p = *rounded;
    }
    if (padding == "border") {
      SHARC_TRY(below, n.create<CompareOp>(p, c(low), ComparePredicate::lt));
      SHARC_TRY(above, n.create<CompareOp>(p, c(high), ComparePredicate::gt));
      SHARC_TRY(outside, n.create<OrOp>(*below, *above));
      SHARC_TRY(clamped, clampInto(n, p, 0.0, size - 1.0));
      SHARC_TRY(bordered, n.create<SelectOp>(*outside, *clamped, p));
      p = *bordered;
    } else if (padding == "reflection") {
      SHARC_TRY(reflected, reflectInto(n, p, low, high));
      p = *reflected;
    }
    SmallVector<GridTap> axisTaps;
    if (mode == "nearest") {
      axisTaps.push_back({p, Value()});
    } else {
      SHARC_TRY(base, n.create<FloorOp>(p));
      SHARC_TRY(t, n.create<SubOp>(p, *base));
      SmallVector<Value> weights;
      if (mode == "linear") {
        SHARC_TRY(rest, n.create<SubOp>(c(1.0), *t));
        weights = {*rest, *t};
      } else {
        // Keys' cubic convolution weights of the taps at -1, 0, 1, 2 (ONNX's
        // reference: A = -0.75, distances t + 1, t, 1 - t, 2 - t).
        const double a = -0.75;
        auto outer = [&](Value d) -> FailureOr<Value> {
          // ((a d - 5 a) d + 8 a) d - 4 a
          SHARC_TRY(p1, n.create<MulOp>(d, c(a)));
          SHARC_TRY(p2, n.create<SubOp>(*p1, c(5 * a)));
          SHARC_TRY(p3, n.create<MulOp>(*p2, d));
          SHARC_TRY(p4, n.create<AddOp>(*p3, c(8 * a)));
          SHARC_TRY(p5, n.create<MulOp>(*p4, d));
          return n.create<SubOp>(*p5, c(4 * a));
        };
        auto inner = [&](Value d) -> FailureOr<Value> {
          // ((a + 2) d - (a + 3)) d d + 1
          SHARC_TRY(p1, n.create<MulOp>(d, c(a + 2)));
          SHARC_TRY(p2, n.create<SubOp>(*p1, c(a + 3)));
          SHARC_TRY(p3, n.create<MulOp>(*p2, d));
          SHARC_TRY(p4, n.create<MulOp>(*p3, d));
          return n.create<AddOp>(*p4, c(1.0));
        };
        SHARC_TRY(plusOne, n.create<AddOp>(*t, c(1.0)));
        SHARC_TRY(oneMinus, n.create<SubOp>(c(1.0), *t));
        SHARC_TRY(twoMinus, n.create<SubOp>(c(2.0), *t));
        SHARC_TRY(w0, outer(*plusOne));
        SHARC_TRY(w1, inner(*t));
        SHARC_TRY(w2, inner(*oneMinus));
        SHARC_TRY(w3, outer(*twoMinus));
        weights = {*w0, *w1, *w2, *w3};
      }
      double first = mode == "linear" ? 0.0 : -1.0;
      for (auto [j, weight] : llvm::enumerate(weights)) {
        SHARC_TRY(index, n.create<AddOp>(*base, c(first + double(j))));
        axisTaps.push_back({*index, weight});
      }
    }
    // Make each tap's index readable.
    for (GridTap &tap : axisTaps) {
      if (padding == "zeros") {
        SHARC_TRY(atLeast,
                  n.create<CompareOp>(tap.index, c(0.0), ComparePredicate::ge));
        SHARC_TRY(atMost, n.create<CompareOp>(tap.index, c(size - 1.0),
                                              ComparePredicate::le));
        SHARC_TRY(inside, n.create<AndOp>(*atLeast, *atMost));
        Value one = tap.weight ? tap.weight : c(1.0);
        SHARC_TRY(weight, n.create<SelectOp>(*inside, one, c(0.0)));
        tap.weight = *weight;
      } else if (padding == "reflection") {
        SHARC_TRY(reflected, reflectInto(n, tap.index, low, high));
        SHARC_TRY(positive, n.create<MaxOp>(*reflected, c(0.0)));
        SHARC_TRY(truncated, n.create<FloorOp>(*positive));
        tap.index = *truncated;
      }
      SHARC_TRY(clamped, clampInto(n, tap.index, 0.0, size - 1.0));
      tap.index = *clamped;
    }
    taps[k] = std::move(axisTaps);
  }

  // X as rows [N * spatial, C]; each combination of taps a gather of rows.
  int64_t channels = xs[1], spatialSize = 1;
  SmallVector<int64_t> toRows{0}, strides(spatial);
  for (int64_t k = spatial - 1; k >= 0; --k) {
    strides[k] = spatialSize;
    spatialSize *= xs[2 + k];
  }
  for (int64_t d = 2; d < rank; ++d)
    toRows.push_back(d);
  toRows.push_back(1);
  SHARC_TRY(channelsLast, n.create<TransposeOp>(x, ArrayRef<int64_t>(toRows)));
  SHARC_TRY(rows, n.reshape(*channelsLast, {xs[0] * spatialSize, channels}));
  Type i64 = IntegerType::get(n.context(), 64);
  auto offsetType = RankedTensorType::get(outShape, i64);
  SHARC_TRY(batch, n.createTyped<IotaOp>(offsetType, int64_t(0)));
  SHARC_TRY(batchOffset,
            n.create<MulOp>(*batch, n.scalar(i64, double(spatialSize))));
  SmallVector<int64_t> weightShape(outShape);
  weightShape.push_back(1);
  Value sum;
  SmallVector<size_t> choice(spatial, 0);
  while (true) {
    Value offset = *batchOffset, weight;
    for (int64_t k = 0; k < spatial; ++k) {
      const GridTap &tap = taps[k][choice[k]];
      SHARC_TRY(index, n.cast(tap.index, i64));
      SHARC_TRY(scaled,
                n.create<MulOp>(*index, n.scalar(i64, double(strides[k]))));
      SHARC_TRY(added, n.create<AddOp>(offset, *scaled));
      offset = *added;
      if (tap.weight && weight) {
        SHARC_TRY(product, n.create<MulOp>(weight, tap.weight));
        weight = *product;
      } else if (tap.weight) {
        weight = tap.weight;
      }
    }
    SHARC_TRY(picked, n.create<GatherOp>(*rows, offset, int64_t(0)));
    Value term = *picked;
    if (weight) {
      SHARC_TRY(column, n.reshape(weight, weightShape));
      SHARC_TRY(weighted, n.create<MulOp>(term, *column));
      term = *weighted;
    }
    if (sum) {
      SHARC_TRY(total, n.create<AddOp>(sum, term));
      sum = *total;
    } else {
      sum = term;
    }
    int64_t k = spatial - 1;
    while (k >= 0 && ++choice[k] == taps[k].size())
      choice[k--] = 0;
    if (k < 0)
      break;
  }
  SmallVector<int64_t> toChannelsFirst{0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d)
    toChannelsFirst.push_back(d);
  return wrap(n.create<TransposeOp>(sum, ArrayRef<int64_t>(toChannelsFirst)));
}

//===----------------------------------------------------------------------===//
// ONNX's optimizer operators (domain ai.onnx.preview.training)
//===----------------------------------------------------------------------===//

enum class PreviewOptimizer { adagrad, momentum, adam };

/// Adagrad, Momentum and Adam: inputs R (the learning rate), T (the update
/// count), then the n tensors X, their gradients G and each state (H;
/// V; V and H); outputs the new X, then each new state, elementwise as
/// ONNX's reference computes them.
template <PreviewOptimizer kind>
static FailureOr<Results> importPreviewOptimizer(NodeImporter &n) {
  unsigned groups = kind == PreviewOptimizer::adam ? 4 : 3;
  unsigned tensors = n.numInputs() - 2;
  if (tensors == 0 || tensors % groups != 0)
    return n.emitError() << "takes R, T and " << groups
                         << " inputs per optimized tensor, got "
                         << n.numInputs() << " inputs";
  unsigned count = tensors / groups;
  if (n.numOutputs() > (groups - 1) * count)
    return n.emitError() << "has " << n.numOutputs() << " outputs; "
                         << (groups - 1) * count << " are defined";
  Value rate = n.input(0), step = n.input(1);
  if (failed(requireFloat(n, rate)) || rankOf(rate) != 0)
    return n.emitError() << "R must be a float scalar, got " << rate.getType();
  if (!isa<IntegerType>(elementTypeOf(step)) || rankOf(step) != 0)
    return n.emitError() << "T must be an integer scalar, got "
                         << step.getType();
  double norm = n.getFloat("norm_coefficient", 0.0);
  Results outputs((groups - 1) * count);
  for (unsigned i = 0; i < count; ++i) {
    Value x = n.input(2 + i), g = n.input(2 + count + i);
    if (failed(requireFloat(n, x)))
      return failure();
    for (unsigned j = 1; j < groups; ++j)
      if (n.input(2 + j * count + i).getType() != x.getType())
        return n.emitError()
               << "input " << 2 + j * count + i << " must have the type of X"
               << i << " (" << x.getType() << ")";
    Type type = elementTypeOf(x);
    auto c = [&](double value) { return n.scalar(type, value); };
    SHARC_TRY(r, n.cast(rate, type));
    SHARC_TRY(t, n.cast(step, type));
    // The gradient of the L2 term norm_coefficient / 2 |x|^2 added.
    FailureOr<Value> gr = g;
    if (norm != 0) {
      SHARC_TRY(decayed, n.create<MulOp>(c(norm), x));
      gr = n.create<AddOp>(*decayed, g);
      if (failed(gr))
        return failure();
    }
    SHARC_TRY(started, n.create<CompareOp>(*t, c(0.0), ComparePredicate::gt));
    if (kind == PreviewOptimizer::adagrad) {
      Value h = n.input(2 + 2 * count + i);
      SHARC_TRY(decay, n.create<MulOp>(*t, c(n.getFloat("decay_factor", 0))));
      SHARC_TRY(denominator, n.create<AddOp>(c(1.0), *decay));
      SHARC_TRY(lr, n.create<DivOp>(*r, *denominator));
      SHARC_TRY(square, n.create<MulOp>(*gr, *gr));
      SHARC_TRY(hNew, n.create<AddOp>(h, *square));
      SHARC_TRY(root, n.create<SqrtOp>(*hNew));
      SHARC_TRY(scale, n.create<AddOp>(*root, c(n.getFloat("epsilon", 0.0))));
      SHARC_TRY(scaled, n.create<MulOp>(*lr, *gr));
      SHARC_TRY(update, n.create<DivOp>(*scaled, *scale));
      SHARC_TRY(xNew, n.create<SubOp>(x, *update));
      outputs[i] = *xNew;
      outputs[count + i] = *hNew;
      continue;
    }
    double alpha = n.getFloat("alpha", 0.9), beta = n.getFloat("beta", 0.999);
    Value v = n.input(2 + 2 * count + i);
    if (kind == PreviewOptimizer::momentum) {
      std::string mode = n.getString("mode", "standard");
      if (mode != "standard" && mode != "nesterov")
        return n.emitError() << "unsupported mode '" << mode
                             << "' (standard and nesterov are defined)";
      SHARC_TRY(betaNow, n.create<SelectOp>(*started, c(beta), c(1.0)));
      SHARC_TRY(kept, n.create<MulOp>(c(alpha), v));
      SHARC_TRY(added, n.create<MulOp>(*betaNow, *gr));
      SHARC_TRY(vNew, n.create<AddOp>(*kept, *added));
      Value direction = *vNew;
      if (mode == "nesterov") {
        SHARC_TRY(ahead, n.create<MulOp>(c(alpha), *vNew));
        SHARC_TRY(sum, n.create<AddOp>(*gr, *ahead));
        direction = *sum;
      }
      SHARC_TRY(update, n.create<MulOp>(*r, direction));
      SHARC_TRY(xNew, n.create<SubOp>(x, *update));
      outputs[i] = *xNew;
      outputs[count + i] = *vNew;
      continue;
    }
    Value h = n.input(2 + 3 * count + i);
    SHARC_TRY(keptV, n.create<MulOp>(c(alpha), v));
    SHARC_TRY(addedV, n.create<MulOp>(c(1.0 - alpha), *gr));
    SHARC_TRY(vNew, n.create<AddOp>(*keptV, *addedV));
    SHARC_TRY(square, n.create<MulOp>(*gr, *gr));
    SHARC_TRY(keptH, n.create<MulOp>(c(beta), h));
    SHARC_TRY(addedH, n.create<MulOp>(c(1.0 - beta), *square));
    SHARC_TRY(hNew, n.create<AddOp>(*keptH, *addedH));
    SHARC_TRY(root, n.create<SqrtOp>(*hNew));
    SHARC_TRY(scale, n.create<AddOp>(*root, c(n.getFloat("epsilon", 0.0))));
    // r sqrt(1 - beta^t) / (1 - alpha^t) after the first step, r before.
    SHARC_TRY(betaT, n.create<PowOp>(c(beta), *t));
    SHARC_TRY(alphaT, n.create<PowOp>(c(alpha), *t));
    SHARC_TRY(betaRest, n.create<SubOp>(c(1.0), *betaT));
    SHARC_TRY(alphaRest, n.create<SubOp>(c(1.0), *alphaT));
    SHARC_TRY(betaRoot, n.create<SqrtOp>(*betaRest));
    SHARC_TRY(corrected, n.create<MulOp>(*r, *betaRoot));
    SHARC_TRY(correctedLr, n.create<DivOp>(*corrected, *alphaRest));
    SHARC_TRY(lr, n.create<SelectOp>(*started, *correctedLr, *r));
    SHARC_TRY(ratio, n.create<DivOp>(*vNew, *scale));
    SHARC_TRY(update, n.create<MulOp>(*lr, *ratio));
    SHARC_TRY(stepped, n.create<SubOp>(x, *update));
    double post = n.getFloat("norm_coefficient_post", 0);
    outputs[i] = *stepped;
    if (post != 0) {
      SHARC_TRY(shrunk, n.create<MulOp>(c(1.0 - post), *stepped));
      outputs[i] = *shrunk;
    }
    outputs[count + i] = *vNew;
    outputs[2 * count + i] = *hNew;
  }
  outputs.resize(n.numOutputs());
  return outputs;
}

/// The rule of `opType` in domain ai.onnx.preview.training, or null.
const OpRule *sharc::onnx_import::findPreviewTrainingRule(StringRef opType) {
  using Attr = onnx::AttributeProto;
  constexpr unsigned kVariadic = OpRule::kVariadic;
  static const llvm::StringMap<OpRule> rules{
      {"Adagrad",
       {1,
        5,
        kVariadic,
        kVariadic,
        {{"decay_factor", Attr::FLOAT},
         {"epsilon", Attr::FLOAT},
         {"norm_coefficient", Attr::FLOAT}},
        importPreviewOptimizer<PreviewOptimizer::adagrad>}},
      {"Momentum",
       {1,
        5,
        kVariadic,
        kVariadic,
        {{"alpha", Attr::FLOAT},
         {"beta", Attr::FLOAT},
         {"mode", Attr::STRING},
         {"norm_coefficient", Attr::FLOAT}},
        importPreviewOptimizer<PreviewOptimizer::momentum>}},
      {"Adam",
       {1,
        6,
        kVariadic,
        kVariadic,
        {{"alpha", Attr::FLOAT},
         {"beta", Attr::FLOAT},
         {"epsilon", Attr::FLOAT},
         {"norm_coefficient", Attr::FLOAT},
         {"norm_coefficient_post", Attr::FLOAT}},
        importPreviewOptimizer<PreviewOptimizer::adam>}},
  };
  auto it = rules.find(opType);
  return it == rules.end() ? nullptr : &it->second;
}

//===----------------------------------------------------------------------===//
// The rule table
//===----------------------------------------------------------------------===//

static llvm::StringMap<OpRule> buildRules() {
  using Attr = onnx::AttributeProto;
  constexpr unsigned kVariadic = OpRule::kVariadic;
  const std::vector<AttrSpec> reduceAttrs = {
      {"keepdims", Attr::INT},
      {"axes", Attr::INTS, 1, 17},
      {"noop_with_empty_axes", Attr::INT, 18}};
  const std::vector<AttrSpec> argAttrs = {{"axis", Attr::INT},
                                          {"keepdims", Attr::INT},
                                          {"select_last_index", Attr::INT}};
  const std::vector<AttrSpec> lossAttrs = {{"reduction", Attr::STRING},
                                           {"ignore_index", Attr::INT}};
  const std::vector<AttrSpec> poolAttrs = {
      {"auto_pad", Attr::STRING}, {"ceil_mode", Attr::INT},
      {"dilations", Attr::INTS},  {"kernel_shape", Attr::INTS},
      {"pads", Attr::INTS},       {"storage_order", Attr::INT},
      {"strides", Attr::INTS}};
  const std::vector<AttrSpec> rnnAttrs = {
      {"activation_alpha", Attr::FLOATS}, {"activation_beta", Attr::FLOATS},
      {"activations", Attr::STRINGS},     {"clip", Attr::FLOAT},
      {"direction", Attr::STRING},        {"hidden_size", Attr::INT},
      {"layout", Attr::INT, 14}};
  const std::vector<AttrSpec> windowAttrs = {{"output_datatype", Attr::INT},
                                             {"periodic", Attr::INT}};
  auto withAttrs = [](std::vector<AttrSpec> specs,
                      std::initializer_list<AttrSpec> more) {
    specs.insert(specs.end(), more);
    return specs;
  };
  return llvm::StringMap<OpRule>{
      // Elementwise.
      {"Add", {13, 2, 2, 1, {}, importBinary<AddOp>}},
      {"Sub", {13, 2, 2, 1, {}, importBinary<SubOp>}},
      {"Mul", {13, 2, 2, 1, {}, importBinary<MulOp>}},
      {"Div", {13, 2, 2, 1, {}, importBinary<DivOp>}},
      {"Pow", {13, 2, 2, 1, {}, importPow}},
      {"Neg", {13, 1, 1, 1, {}, importUnary<NegOp>}},
      {"Abs", {13, 1, 1, 1, {}, importUnary<AbsOp>}},
      {"Exp", {13, 1, 1, 1, {}, importUnary<ExpOp>}},
      {"Log", {13, 1, 1, 1, {}, importUnary<LogOp>}},
      {"Sqrt", {13, 1, 1, 1, {}, importUnary<SqrtOp>}},
      {"Reciprocal", {13, 1, 1, 1, {}, importReciprocal}},
      {"Erf", {13, 1, 1, 1, {}, importUnary<ErfOp>}},
      {"Tanh", {13, 1, 1, 1, {}, importUnary<TanhOp>}},
      {"Sigmoid", {13, 1, 1, 1, {}, importUnary<SigmoidOp>}},
      {"Relu", {13, 1, 1, 1, {}, importUnary<ReluOp>}},
      {"LeakyRelu", {13, 1, 1, 1, {{"alpha", Attr::FLOAT}}, importLeakyRelu}},
      {"Gelu", {20, 1, 1, 1, {{"approximate", Attr::STRING}}, importGelu}},
      {"Softplus", {13, 1, 1, 1, {}, importSoftplus}},
      {"Elu", {13, 1, 1, 1, {{"alpha", Attr::FLOAT}}, importElu}},
      {"Selu",
       {13,
        1,
        1,
        1,
        {{"alpha", Attr::FLOAT}, {"gamma", Attr::FLOAT}},
        importSelu}},
      {"Celu", {13, 1, 1, 1, {{"alpha", Attr::FLOAT}}, importCelu}},
      {"HardSigmoid",
       {13,
        1,
        1,
        1,
        {{"alpha", Attr::FLOAT}, {"beta", Attr::FLOAT}},
        importHardSigmoid}},
      {"HardSwish", {14, 1, 1, 1, {}, importHardSwish}},
      {"Softsign", {13, 1, 1, 1, {}, importSoftsign}},
      {"ThresholdedRelu",
       {13, 1, 1, 1, {{"alpha", Attr::FLOAT}}, importThresholdedRelu}},
      {"PRelu", {13, 2, 2, 1, {}, importPRelu}},
      {"Shrink",
       {13,
        1,
        1,
        1,
        {{"bias", Attr::FLOAT}, {"lambd", Attr::FLOAT}},
        importShrink}},
      {"Sin", {13, 1, 1, 1, {}, importUnary<SinOp>}},
      {"Asin", {13, 1, 1, 1, {}, importUnary<AsinOp>}},
      {"Acos", {13, 1, 1, 1, {}, importUnary<AcosOp>}},
      {"Atan", {13, 1, 1, 1, {}, importUnary<AtanOp>}},
      {"Asinh", {13, 1, 1, 1, {}, importUnary<AsinhOp>}},
      {"Acosh", {13, 1, 1, 1, {}, importUnary<AcoshOp>}},
      {"Atanh", {13, 1, 1, 1, {}, importUnary<AtanhOp>}},
      {"Cos", {13, 1, 1, 1, {}, importUnary<CosOp>}},
      {"Tan", {13, 1, 1, 1, {}, importTan}},
      {"Sinh", {13, 1, 1, 1, {}, importHyperbolic<SubOp>}},
      {"Cosh", {13, 1, 1, 1, {}, importHyperbolic<AddOp>}},
      {"Floor", {13, 1, 1, 1, {}, importUnary<FloorOp>}},
      {"Ceil", {13, 1, 1, 1, {}, importCeil}},
      {"Sign", {13, 1, 1, 1, {}, importSign}},
      {"IsNaN", {13, 1, 1, 1, {}, importIsNaN}},
      {"IsInf",
       {13,
        1,
        1,
        1,
        {{"detect_negative", Attr::INT}, {"detect_positive", Attr::INT}},
        importIsInf}},
      {"Sum", {13, 1, kVariadic, 1, {}, importSumOrMean<false>}},
      {"Mean", {13, 1, kVariadic, 1, {}, importSumOrMean<true>}},
      {"Max", {13, 1, kVariadic, 1, {}, importVariadic<MaxOp>}},
      {"Min", {13, 1, kVariadic, 1, {}, importVariadic<MinOp>}},
      {"Clip", {13, 1, 3, 1, {}, importClip}},
      {"Where", {13, 3, 3, 1, {}, importWhere}},
      {"Equal", {13, 2, 2, 1, {}, importCompare<ComparePredicate::eq>}},
      {"Less", {13, 2, 2, 1, {}, importCompare<ComparePredicate::lt>}},
      {"LessOrEqual", {13, 2, 2, 1, {}, importCompare<ComparePredicate::le>}},
      {"Greater", {13, 2, 2, 1, {}, importCompare<ComparePredicate::gt>}},
      {"GreaterOrEqual",
       {13, 2, 2, 1, {}, importCompare<ComparePredicate::ge>}},
      {"Not", {13, 1, 1, 1, {}, importUnary<NotOp>}},
      {"And", {13, 2, 2, 1, {}, importBinary<AndOp>}},
      {"Or", {13, 2, 2, 1, {}, importBinary<OrOp>}},
      {"Xor", {13, 2, 2, 1, {}, importXor}},
      {"Cast",
       {13,
        1,
        1,
        1,
        // round_mode (24) applies to float8e8m0 only, a type sharc lacks.
        {{"to", Attr::INT},
         {"saturate", Attr::INT, 19},
         {"round_mode", Attr::STRING, 24}},
        importCast}},
      {"CastLike",
       {15,
        2,
        2,
        1,
        {{"saturate", Attr::INT, 19}, {"round_mode", Attr::STRING, 24}},
        importCastLike}},
      {"Identity", {13, 1, 1, 1, {}, importIdentity}},
      // Constants and shape computations.
      {"Constant",
       {13,
        0,
        0,
        1,
        {{"value", Attr::TENSOR},
         {"value_float", Attr::FLOAT},
         {"value_floats", Attr::FLOATS},
         {"value_int", Attr::INT},
         {"value_ints", Attr::INTS}},
        importConstant}},
      {"ConstantOfShape",
       {13, 1, 1, 1, {{"value", Attr::TENSOR}}, importConstantOfShape}},
      {"Shape",
       {13,
        1,
        1,
        1,
        {{"start", Attr::INT, 15}, {"end", Attr::INT, 15}},
        importShape}},
      {"Size", {13, 1, 1, 1, {}, importSize}},
      // stash_type (27) makes float16/bfloat16 ranges count in float32; sharc
      // computes every range in double and rounds each element once.
      {"Range", {13, 3, 3, 1, {{"stash_type", Attr::INT, 27}}, importRange}},
      // Data movement.
      {"Gather", {13, 2, 2, 1, {{"axis", Attr::INT}}, importGather}},
      {"GatherND",
       {13, 2, 2, 1, {{"batch_dims", Attr::INT}}, importGatherAt<false>}},
      {"ArgMax", {13, 1, 1, 1, argAttrs, importArgExtreme<true>}},
      {"ArgMin", {13, 1, 1, 1, argAttrs, importArgExtreme<false>}},
      {"Hardmax", {13, 1, 1, 1, {{"axis", Attr::INT}}, importHardmax}},
      {"OneHot", {11, 3, 3, 1, {{"axis", Attr::INT}}, importOneHot}},
      {"Tile", {13, 2, 2, 1, {}, importTile}},
      {"DepthToSpace",
       {13,
        1,
        1,
        1,
        {{"blocksize", Attr::INT}, {"mode", Attr::STRING}},
        importDepthSpace<true>}},
      {"SpaceToDepth",
       {13,
        1,
        1,
        1,
        {{"blocksize", Attr::INT}, {"mode", Attr::STRING, 28}},
        importDepthSpace<false>}},
      {"EyeLike",
       {9, 1, 1, 1, {{"dtype", Attr::INT}, {"k", Attr::INT}}, importEyeLike}},
      {"BatchNormalization",
       {15,
        5,
        5,
        3,
        {{"epsilon", Attr::FLOAT},
         {"momentum", Attr::FLOAT},
         {"training_mode", Attr::INT}},
        importBatchNorm}},
      {"InstanceNormalization",
       {6, 3, 3, 1, {{"epsilon", Attr::FLOAT}}, importInstanceNorm}},
      {"MeanVarianceNormalization",
       {13, 1, 1, 1, {{"axes", Attr::INTS}}, importMeanVarianceNorm}},
      {"Round", {11, 1, 1, 1, {}, importRound}},
      {"Mod", {13, 2, 2, 1, {{"fmod", Attr::INT}}, importMod}},
      {"GatherElements",
       {13, 2, 2, 1, {{"axis", Attr::INT}}, importGatherAt<true>}},
      {"ScatterND",
       {13,
        3,
        3,
        1,
        {{"reduction", Attr::STRING, 16}},
        importScatterAt<false>}},
      {"ScatterElements",
       {13,
        3,
        3,
        1,
        {{"axis", Attr::INT}, {"reduction", Attr::STRING, 16}},
        importScatterAt<true>}},
      {"CumSum",
       {14,
        2,
        2,
        1,
        {{"exclusive", Attr::INT}, {"reverse", Attr::INT}},
        importCumSum}},
      {"Pad", {13, 2, 4, 1, {{"mode", Attr::STRING}}, importPad}},
      {"Resize",
       {13,
        1,
        4,
        1,
        {{"mode", Attr::STRING},
         {"coordinate_transformation_mode", Attr::STRING},
         {"nearest_mode", Attr::STRING},
         {"cubic_coeff_a", Attr::FLOAT},
         {"exclude_outside", Attr::INT},
         {"extrapolation_value", Attr::FLOAT},
         {"antialias", Attr::INT, 18},
         {"axes", Attr::INTS, 18},
         {"keep_aspect_ratio_policy", Attr::STRING, 18}},
        importResize}},
      {"Unsqueeze", {13, 2, 2, 1, {}, importUnsqueeze}},
      {"Squeeze", {13, 1, 2, 1, {}, importSqueeze}},
      {"Reshape", {13, 2, 2, 1, {{"allowzero", Attr::INT, 14}}, importReshape}},
      {"Flatten", {13, 1, 1, 1, {{"axis", Attr::INT}}, importFlatten}},
      {"Transpose", {13, 1, 1, 1, {{"perm", Attr::INTS}}, importTranspose}},
      {"Expand", {13, 2, 2, 1, {}, importExpand}},
      {"Concat", {13, 1, kVariadic, 1, {{"axis", Attr::INT}}, importConcat}},
      {"Split",
       {13,
        1,
        2,
        kVariadic,
        {{"axis", Attr::INT}, {"num_outputs", Attr::INT, 18}},
        importSplit}},
      {"Slice", {13, 3, 5, 1, {}, importSlice}},
      {"SplitToSequence",
       {11,
        1,
        2,
        1,
        {{"axis", Attr::INT}, {"keepdims", Attr::INT}},
        importSplitToSequence}},
      {"SequenceAt", {11, 2, 2, 1, {}, importSequenceAt}},
      {"Trilu", {14, 1, 2, 1, {{"upper", Attr::INT}}, importTrilu}},
      // Linear algebra, reductions, normalization, losses.
      {"MatMul", {13, 2, 2, 1, {}, importMatMul}},
      {"Gemm",
       {13,
        2,
        3,
        1,
        {{"alpha", Attr::FLOAT},
         {"beta", Attr::FLOAT},
         {"transA", Attr::INT},
         {"transB", Attr::INT}},
        importGemm}},
      {"Softmax",
       {13, 1, 1, 1, {{"axis", Attr::INT}}, importSoftmax<SoftmaxOp>}},
      {"LogSoftmax",
       {13, 1, 1, 1, {{"axis", Attr::INT}}, importSoftmax<LogSoftmaxOp>}},
      {"ReduceSum",
       {13,
        1,
        2,
        1,
        {{"keepdims", Attr::INT}, {"noop_with_empty_axes", Attr::INT}},
        importReduce<ReduceKind::sum>}},
      {"ReduceMean",
       {13, 1, 2, 1, reduceAttrs, importReduce<ReduceKind::mean>}},
      {"ReduceMax", {13, 1, 2, 1, reduceAttrs, importReduce<ReduceKind::max>}},
      {"ReduceMin",
       {13, 1, 2, 1, reduceAttrs,
        importComposedReduce<ComposedReduction::min>}},
      {"ReduceSumSquare",
       {13, 1, 2, 1, reduceAttrs,
        importComposedReduce<ComposedReduction::sumSquare>}},
      {"ReduceL1",
       {13, 1, 2, 1, reduceAttrs, importComposedReduce<ComposedReduction::l1>}},
      {"ReduceL2",
       {13, 1, 2, 1, reduceAttrs, importComposedReduce<ComposedReduction::l2>}},
      {"ReduceLogSum",
       {13, 1, 2, 1, reduceAttrs,
        importComposedReduce<ComposedReduction::logSum>}},
      {"ReduceLogSumExp",
       {13, 1, 2, 1, reduceAttrs,
        importComposedReduce<ComposedReduction::logSumExp>}},
      {"LayerNormalization",
       {17,
        2,
        3,
        3,
        {{"axis", Attr::INT},
         {"epsilon", Attr::FLOAT},
         {"stash_type", Attr::INT}},
        importLayerNorm}},
      {"SoftmaxCrossEntropyLoss",
       {13, 2, 3, 2, lossAttrs, importSoftmaxCrossEntropy}},
      {"NegativeLogLikelihoodLoss",
       {13, 2, 3, 1, lossAttrs, importNegativeLogLikelihood}},
      {"Dropout", {13, 1, 3, 2, {{"seed", Attr::INT}}, importDropout}},
      // Convolution and pooling.
      {"LRN",
       {13,
        1,
        1,
        1,
        {{"alpha", Attr::FLOAT},
         {"beta", Attr::FLOAT},
         {"bias", Attr::FLOAT},
         {"size", Attr::INT}},
        importLRN}},
      {"Einsum",
       {12, 1, kVariadic, 1, {{"equation", Attr::STRING}}, importEinsum}},
      {"ConvTranspose",
       {11,
        2,
        3,
        1,
        {{"auto_pad", Attr::STRING},
         {"dilations", Attr::INTS},
         {"group", Attr::INT},
         {"kernel_shape", Attr::INTS},
         {"output_padding", Attr::INTS},
         {"output_shape", Attr::INTS},
         {"pads", Attr::INTS},
         {"strides", Attr::INTS}},
        importConvTranspose}},
      {"Conv",
       {13,
        2,
        3,
        1,
        {{"auto_pad", Attr::STRING},
         {"dilations", Attr::INTS},
         {"group", Attr::INT},
         {"kernel_shape", Attr::INTS},
         {"pads", Attr::INTS},
         {"strides", Attr::INTS}},
        importConv}},
      {"MaxPool", {13, 1, 1, 2, poolAttrs, importMaxPool}},
      {"AveragePool",
       {13,
        1,
        1,
        1,
        {{"auto_pad", Attr::STRING},
         {"ceil_mode", Attr::INT},
         {"count_include_pad", Attr::INT},
         {"dilations", Attr::INTS, 19},
         {"kernel_shape", Attr::INTS},
         {"pads", Attr::INTS},
         {"strides", Attr::INTS}},
        importAveragePool}},
      {"ReduceProd", {13, 1, 2, 1, reduceAttrs, importReduceProd}},
      {"TopK",
       {13,
        2,
        2,
        2,
        {{"axis", Attr::INT}, {"largest", Attr::INT}, {"sorted", Attr::INT}},
        importTopK}},
      {"Compress", {13, 2, 2, 1, {{"axis", Attr::INT}}, importCompress}},
      {"ReverseSequence",
       {13,
        2,
        2,
        1,
        {{"batch_axis", Attr::INT}, {"time_axis", Attr::INT}},
        importReverseSequence}},
      {"Scatter",
       {9, 3, 3, 1, {{"axis", Attr::INT}}, importScatterAt<true>, true}},
      {"HannWindow",
       {17, 1, 1, 1, windowAttrs, importWindow<WindowKind::hann>}},
      {"HammingWindow",
       {17, 1, 1, 1, windowAttrs, importWindow<WindowKind::hamming>}},
      {"BlackmanWindow",
       {17, 1, 1, 1, windowAttrs, importWindow<WindowKind::blackman>}},
      {"GroupNormalization",
       {18,
        3,
        3,
        1,
        {{"epsilon", Attr::FLOAT},
         {"num_groups", Attr::INT},
         {"stash_type", Attr::INT, 21}},
        importGroupNorm}},
      {"GridSample",
       {16,
        2,
        2,
        1,
        {{"align_corners", Attr::INT},
         {"mode", Attr::STRING},
         {"padding_mode", Attr::STRING}},
        importGridSample}},
      {"DFT",
       {17,
        1,
        3,
        1,
        {{"axis", Attr::INT, 17, 19},
         {"inverse", Attr::INT},
         {"onesided", Attr::INT}},
        importDFT}},
      {"MelWeightMatrix",
       {17, 5, 5, 1, {{"output_datatype", Attr::INT}}, importMelWeightMatrix}},
      // Recurrent (OpImportersRecurrent.cpp).
      {"RNN", {13, 3, 6, 2, rnnAttrs, importRNN}},
      {"GRU",
       {13, 3, 6, 2, withAttrs(rnnAttrs, {{"linear_before_reset", Attr::INT}}),
        importGRU}},
      {"LSTM",
       {13, 3, 8, 3, withAttrs(rnnAttrs, {{"input_forget", Attr::INT}}),
        importLSTM}},
      {"GlobalAveragePool",
       {13, 1, 1, 1, {}, importGlobalPool<ReduceKind::mean>}},
      {"GlobalMaxPool", {13, 1, 1, 1, {}, importGlobalPool<ReduceKind::max>}},
  };
}

const OpRule *sharc::onnx_import::findOpRule(StringRef opType) {
  static const llvm::StringMap<OpRule> rules = buildRules();
  auto it = rules.find(opType);
  return it == rules.end() ? nullptr : &it->second;
}
