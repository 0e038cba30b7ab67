//===- GradCheckTest.cpp - sharc-autodiff against finite differences ------===//
//
// Every gradient rule is checked the same way: a small f64 function whose
// parameters feed the op and whose loss is sum(op(...) * random weights) is
// differentiated by the pass; @main_grad, run on the evaluator, must match
// central finite differences of @main (also run on the evaluator) to a
// relative error below 1e-6 per gradient tensor.  Random data stays away from
// the points where an op is not differentiable (ties, kinks).  The same
// function in f32, run through sharc-mixed-precision (f16 and bf16) and the
// pass, must match the f64 gradient at the same 16-bit arguments within a
// bound counted from the rounding steps of the rule (RoundingSteps).  The
// tie conventions and the new ops are checked against values worked out by
// hand.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ir/SharcOps.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <regex>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

/// A function argument: a parameter (named like its SSA value) or an input.
struct Arg {
  std::string name;
  Tensor value;
  bool param = true;
};

Arg param(std::string name, Tensor value) { return {name, value, true}; }
Arg input(std::string name, Tensor value) { return {name, value, false}; }

/// The MLIR type of a tensor.
std::string typeOf(const Tensor &t) {
  return tensorType(t.shape(), dtypeName(t.dtype()));
}

constexpr double kSeed = 0.75;

/// The rounding steps behind the error bound of checkMixedPrecision, in
/// units of u, the unit roundoff of the 16-bit type (2^-11 for f16, 2^-8
/// for bf16).  To first order, each rounding to 16 bits of a value that a
/// gradient element depends on adds at most u times its amplification to
/// that element's relative error, so their count bounds the normwise
/// relative error ||g16 - g64|| / ||g64||.  The weights of the loss
/// sum(out * weights) have two bits fewer than the 16-bit type, so the
/// adjoint of %out (seed 0.75 times the weights) is exact, as are the
/// 16-bit inputs, and the evaluator rounds each op's result once: what is
/// counted is the op's own backward rule (AutodiffRules.cpp) run in 16 bits.
///
/// `terms` are the roundings of each output element's contribution to a
/// gradient, `sum` those of the sum of the contributions (unbroadcast,
/// accumulation, the cast back to the 16-bit compute copy), relative to the
/// sum itself.  Per rule, as `terms` or "sum" `sum`:
///  0  neg, abs, relu, floor, cast, reshape, transpose, slice, concat,
///     trilu, insert_slice, scatter_add: the adjoint copied, negated,
///     selected or zero, exactly;
///  sum 1  add, sub, max, min, select (the shares 1, 1/2, 0 are exact),
///     broadcast: the unbroadcast sum; gather, max_pool2d, avg_pool2d,
///     conv2d: the grad op accumulates (repeated indices, overlapping
///     windows, a convolution) and rounds once;
///  sum 1  softmax, log_softmax, layer_norm, reduce, cross_entropy, nll_loss:
///     the fp32 policy (docs/passes.md) runs the rule in f32 on the exact
///     adjoint, so the one rounding is the gradient's where it returns to
///     the operand's 16-bit compute copy (<= u, plus kF32Slack);
///  1  log: g / x;  2  exp (z, g * z), sqrt (z, g/2 / z), sin and cos
///     (cos x, g * cos x);  3  rsqrt (z, g * z, / x);
///  1 + sum 1  mul (g * y), matmul (a batch-broadcast operand sums 16-bit
///     GEMM results; a GEMM accumulates in f32 and rounds once);
///  3 + sum 1  div (for y: z, g * z, / y);
///  5 + sum 1  pow: 4.73, as y - 1 is rounded before x^(y-1), an exponent
///     error amplified by |ln x| |y - 1| <= 1.73 for x in [0.5, 2] and y in
///     [-1.5, 1.5], plus x^(y-1), y *, and g *;
///  7  erf: 6.25, as the rounding of x * x becomes x^2 u <= 2.25 u in
///     exp(-x^2), plus exp, the 16-bit constant 2/sqrt(pi) and two products;
///  10 sigmoid, g z (1 - z): 9.39, as 1 - z cancels: z's error counts
///     |1 - 2z| / (1 - z) <= 6.39 times for |x| <= 2, plus three roundings;
///  20 tanh, g - g z z: 19.14, as the product's error (z twice and two
///     roundings) is amplified by z^2 / (1 - z^2) = sinh^2 x <= 4.53 for
///     |x| <= 1.5, plus the difference;
///  22 gelu: its derivative has a zero (x = -0.75), so only a normwise
///     bound holds.  1 + erf and 1 - t^2 cancel, but every term is O(1): an
///     element's error is at most 5.08 u |g| (exact form, 11 roundings) or
///     10.82 u |g| (tanh form, 20) for |x| <= 3, and ||g gelu'(x)|| is
///     0.52 ||g|| and 0.68 ||g|| on the test's data (gelu' has RMS 0.72
///     over [-3, 3]): at most 2 times that.
/// (The fractional counts come from perturbing each rounding of a rule in
/// turn over the data range of its test.)  A function of several ops adds
/// up its ops' counts, and one term step for each computed value an op
/// reads (a 16-bit result, or a policy op's f32 result cast down).
///
/// checkMixedPrecision expects (terms k + sum) u + kF32Slack to bound the
/// error, where k >= 1 is the condition number of the sum (sumConditions:
/// its terms can cancel in an unbroadcast or a GEMM), computed only when
/// the bound with k = 1 is exceeded.
struct RoundingSteps {
  double terms = 0, sum = 0;
};

/// The rounding steps of `op`'s rule (see RoundingSteps).
RoundingSteps roundingSteps(Operation *op) {
  auto steps = [](double terms, double sum) {
    return [=](Operation *) { return RoundingSteps{terms, sum}; };
  };
  return llvm::TypeSwitch<Operation *, RoundingSteps>(op)
      .Case<NegOp, AbsOp, ReluOp, FloorOp, CastOp, ReshapeOp, TransposeOp,
            SliceOp, ConcatOp, TriluOp, InsertSliceOp, ScatterAddOp, ConstantOp,
            CompareOp>(steps(0, 0))
      .Case<AddOp, SubOp, MaxOp, MinOp, SelectOp, BroadcastOp, GatherOp,
            MaxPool2DOp, AvgPool2DOp, Conv2DOp, Conv2DInputGradOp>(steps(0, 1))
      .Case<SoftmaxOp, LogSoftmaxOp, LayerNormOp, ReduceOp, CrossEntropyOp,
            NllLossOp>(steps(0, 1))
      .Case<LogOp>(steps(1, 0))
      .Case<ExpOp, SqrtOp, SinOp, CosOp>(steps(2, 0))
      // 1 - x x (or x x +- 1), its square root and the division.
      .Case<AsinOp, AcosOp, AsinhOp, AcoshOp>(steps(6, 0))
      // 1 +- x x and the division.
      .Case<AtanOp, AtanhOp>(steps(4, 0))
      .Case<RsqrtOp>(steps(3, 0))
      .Case<MulOp, MatmulOp>(steps(1, 1))
      .Case<DivOp>(steps(3, 1))
      .Case<PowOp>(steps(5, 1))
      .Case<ErfOp>(steps(7, 0))
      .Case<SigmoidOp>(steps(10, 0))
      .Case<TanhOp>(steps(20, 0))
      .Case<GeluOp>(steps(22, 0))
      .Default([](Operation *op) {
        ADD_FAILURE() << "no rounding steps for "
                      << op->getName().getStringRef().str();
        return RoundingSteps();
      });
}

/// The rounding steps of `main` (as mainText builds it, in f32): those of
/// the ops that depend on a parameter, and a term step for each value
/// computed by the body that they read.
RoundingSteps mixedPrecisionSteps(func::FuncOp main) {
  Block &block = main.getBody().front();
  llvm::DenseSet<Value> dependent;
  for (BlockArgument arg : block.getArguments())
    if (main.getArgAttr(arg.getArgNumber(), "sharc.param"))
      dependent.insert(arg);
  SmallVector<Operation *> ops;
  for (Operation &op : block)
    ops.push_back(&op);
  RoundingSteps steps;
  // The body: all but the loss (mul, reduce, return).
  for (Operation *op : ArrayRef(ops).drop_back(3)) {
    if (llvm::none_of(op->getOperands(),
                      [&](Value v) { return dependent.contains(v); }))
      continue;
    dependent.insert(op->result_begin(), op->result_end());
    RoundingSteps own = roundingSteps(op);
    steps.terms += own.terms;
    steps.sum += own.sum;
    for (Value operand : op->getOperands())
      if (Operation *producer = operand.getDefiningOp();
          producer && !isa<ConstantOp>(producer) &&
          isa<FloatType>(cast<ShapedType>(operand.getType()).getElementType()))
        ++steps.terms;
  }
  return steps;
}

/// What f32 arithmetic adds to the normwise relative error of a gradient:
/// 256 f32 unit roundoffs (the policy ops' rules in f32, GEMMs accumulating
/// in f32), 1/32 of f16's u.
constexpr double kF32Slack = 0x1p-16;

/// `value` rounded to `bits` significant bits (nearest, ties to even).
double roundToBits(double value, int bits) {
  int exponent;
  double fraction = std::frexp(value, &exponent);
  return std::ldexp(std::nearbyint(std::ldexp(fraction, bits)),
                    exponent - bits);
}

/// `body` (IR whose float tensors are f64) with every f64 tensor type made
/// f32, and every f64 hexadecimal literal written as the f32 of the same
/// value (they are the constants of the test bodies: -inf); scalar f64
/// attributes (`epsilon = 1.0e-5 : f64`) keep their type.
std::string withF32Tensors(StringRef body) {
  static const std::regex type(R"(tensor<((\d+x)*)f64>)");
  std::string text = std::regex_replace(body.str(), type, "tensor<$1f32>");
  static const std::regex hex("0x([0-9A-Fa-f]{16})");
  std::string out;
  std::sregex_iterator it(text.begin(), text.end(), hex), end;
  size_t last = 0;
  for (; it != end; ++it) {
    uint64_t bits = std::stoull((*it)[1].str(), nullptr, 16);
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    float narrow = static_cast<float>(value);
    EXPECT_EQ(static_cast<double>(narrow), value) << "inexact in f32";
    uint32_t narrowBits;
    std::memcpy(&narrowBits, &narrow, sizeof(narrowBits));
    char spelled[16];
    std::snprintf(spelled, sizeof(spelled), "0x%08X", narrowBits);
    out += text.substr(last, it->position() - last) + spelled;
    last = it->position() + it->length();
  }
  return out + text.substr(last);
}

class GradCheck : public IRTest {
protected:
  /// Random f64 values in [low, high).
  Tensor random(ArrayRef<int64_t> shape, double low = -1, double high = 1) {
    return randomTensor(DType::f64, shape, rng(), low, high);
  }
  /// Random f64 values with magnitudes in [0.2, 1) and random signs.
  Tensor awayFromZero(ArrayRef<int64_t> shape) {
    Tensor t = random(shape, 0.2, 1);
    std::bernoulli_distribution negative(0.5);
    for (double &v : t.floats())
      if (negative(rng))
        v = -v;
    return t;
  }
  Tensor ints(ArrayRef<int64_t> shape, ArrayRef<double> values) {
    return makeTensor(DType::i64, shape, values);
  }

  /// Builds @main(args..., %weights) -> loss = sum(%out * %weights), where
  /// `body` computes `%out` of shape `outShape`.
  std::string mainText(ArrayRef<Arg> args, StringRef body,
                       ArrayRef<int64_t> outShape, StringRef element = "f64") {
    std::string out = tensorType(outShape, element);
    std::string text = "func.func @main(";
    for (const Arg &arg : args) {
      text += "%" + arg.name + ": " + typeOf(arg.value);
      text += arg.param ? " {sharc.param = #sharc.param<\"" + arg.name +
                              "\", \"model." + arg.name + "\">}, "
                        : " {sharc.input = \"" + arg.name + "\"}, ";
    }
    text += "%weights: " + out + " {sharc.input = \"weights\"})\n";
    text += "    -> (" + tensorType({}, element) +
            " {sharc.output = \"loss\"}) {\n";
    text += body.str() + "\n";
    std::string axes;
    for (size_t d = 0; d < outShape.size(); ++d)
      axes += (d ? ", " : ": ") + std::to_string(d);
    text += substitute(R"(
  %weighted = sharc.mul %out, %weights : ($0, $0) -> $0
  %loss = sharc.reduce %weighted {kind = #sharc.reduce_kind<sum>, axes = array<i64$1>} : ($0) -> $2
  return %loss : $2
})",
                       {out, axes, tensorType({}, element)});
    return text;
  }

  /// Runs sharc-autodiff on `text`, after sharc-mixed-precision with dtype
  /// `precision` when one is given (the order of the training pipeline);
  /// returns @main's module, or null after reporting a failure.
  ModuleOp differentiate(StringRef text, const AutodiffOptions &options,
                         StringRef precision = "") {
    func::FuncOp main = parse(text);
    if (!main)
      return {};
    auto module = main->getParentOfType<ModuleOp>();
    PassManager pm(&context);
    if (!precision.empty()) {
      MixedPrecisionOptions mixed;
      mixed.dtype = precision.str();
      pm.addPass(createMixedPrecision(mixed));
    }
    pm.addPass(createAutodiff(options));
    if (failed(pm.run(module))) {
      ADD_FAILURE() << "sharc-autodiff failed:\n" << diagnostics << text.str();
      return {};
    }
    return module;
  }

  /// Differentiates the function built from `args`, `body` and `outShape`
  /// and compares every gradient with central differences.
  void check(std::vector<Arg> args, StringRef body, ArrayRef<int64_t> outShape,
             AutodiffOptions options = {}) {
    args.push_back(input("weights", random(outShape)));
    std::string text = mainText(ArrayRef(args).drop_back(), body, outShape);
    ModuleOp module = differentiate(text, options);
    if (!module)
      return;
    auto main = module.lookupSymbol<func::FuncOp>("main");
    auto grad = module.lookupSymbol<func::FuncOp>("main_grad");
    ASSERT_TRUE(grad);
    std::vector<Tensor> values;
    for (const Arg &arg : args)
      values.push_back(arg.value);
    auto loss = [&]() {
      FailureOr<std::vector<Tensor>> r = evaluate(main, values);
      EXPECT_TRUE(succeeded(r)) << diagnostics;
      return succeeded(r) ? (*r)[0].getDouble(0) : NAN;
    };
    std::vector<Tensor> gradArgs = values;
    gradArgs.push_back(makeTensor(DType::f64, {}, {kSeed}));
    FailureOr<std::vector<Tensor>> results = evaluate(grad, gradArgs);
    ASSERT_TRUE(succeeded(results)) << diagnostics << text;
    EXPECT_EQ((*results)[0].getDouble(0), loss()) << "loss of @main_grad";

    for (unsigned r = 1; r < results->size(); ++r) {
      std::string name =
          grad.getResultAttrOfType<StringAttr>(r, "sharc.grad").str();
      auto it =
          llvm::find_if(args, [&](const Arg &a) { return a.name == name; });
      ASSERT_NE(it, args.end()) << name;
      Tensor &p = values[it - args.begin()];
      const Tensor &actual = (*results)[r];
      ASSERT_EQ(actual.shape(), p.shape()) << name;
      double diff = 0, norm = 0, actualNorm = 0;
      for (int64_t k = 0; k < p.numElements(); ++k) {
        double v = p.getDouble(k);
        double h = 1e-6 * std::max(1.0, std::fabs(v));
        p.setDouble(k, v + h);
        double plusAt = p.getDouble(k), plus = loss();
        p.setDouble(k, v - h);
        double minusAt = p.getDouble(k), minus = loss();
        p.setDouble(k, v);
        double expected = kSeed * (plus - minus) / (plusAt - minusAt);
        double a = actual.getDouble(k);
        diff += (a - expected) * (a - expected);
        norm += expected * expected;
        actualNorm += a * a;
      }
      if (norm == 0)
        EXPECT_LE(std::sqrt(actualNorm), 1e-12) << "gradient of " << name;
      else
        EXPECT_LT(std::sqrt(diff / norm), 1e-6)
            << "gradient of " << name << "\n"
            << text;
    }
    checkedGradients += results->size() - 1;
    for (DType half : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(dtypeName(half));
      checkMixedPrecision(half, args, body, outShape, options, grad);
    }
  }

  /// Builds the function of `check` in f32, runs sharc-mixed-precision with
  /// dtype `half` and then sharc-autodiff, as the training pipeline does,
  /// and compares its gradients with those of `grad64` (the f64 @main_grad)
  /// evaluated at the same arguments: every float argument rounded to `half`
  /// (the weights to two bits fewer: see RoundingSteps), integer ones as
  /// they are.
  void checkMixedPrecision(DType half, ArrayRef<Arg> args, StringRef body,
                           ArrayRef<int64_t> outShape,
                           const AutodiffOptions &options,
                           func::FuncOp grad64) {
    // Significand bits, and the unit roundoff.
    int bits = half == DType::f16 ? 11 : 8;
    double u = std::ldexp(1.0, -bits);
    std::vector<Arg> narrow;
    std::vector<Tensor> values64, values32;
    for (const Arg &arg : args) {
      Tensor rounded = arg.value;
      // The weights, last: 0.75 times them is exact in 16 bits.
      if (&arg == &args.back())
        for (double &v : rounded.floats())
          v = roundToBits(v, bits - 2);
      if (rounded.isFloat())
        rounded = rounded.convertTo(half).convertTo(arg.value.dtype());
      values64.push_back(rounded);
      values32.push_back(rounded.isFloat() ? rounded.convertTo(DType::f32)
                                           : rounded);
      narrow.push_back({arg.name, values32.back(), arg.param});
    }
    std::string text = mainText(ArrayRef(narrow).drop_back(),
                                withF32Tensors(body), outShape, "f32");
    func::FuncOp forward = parse(text);
    if (!forward)
      return;
    RoundingSteps steps = mixedPrecisionSteps(forward);
    ModuleOp module = differentiate(text, options, dtypeName(half));
    if (!module)
      return;
    auto grad = module.lookupSymbol<func::FuncOp>("main_grad");
    ASSERT_TRUE(grad);
    values64.push_back(makeTensor(DType::f64, {}, {kSeed}));
    values32.push_back(makeTensor(DType::f32, {}, {kSeed}));
    FailureOr<std::vector<Tensor>> expected = evaluate(grad64, values64);
    ASSERT_TRUE(succeeded(expected)) << diagnostics;
    FailureOr<std::vector<Tensor>> actual = evaluate(grad, values32);
    ASSERT_TRUE(succeeded(actual)) << diagnostics << text;
    ASSERT_EQ(actual->size(), expected->size());
    std::vector<double> conditions;
    for (unsigned r = 1; r < actual->size(); ++r) {
      std::string name =
          grad.getResultAttrOfType<StringAttr>(r, "sharc.grad").str();
      ASSERT_EQ(name,
                grad64.getResultAttrOfType<StringAttr>(r, "sharc.grad").str());
      const Tensor &a = (*actual)[r], &e = (*expected)[r];
      ASSERT_EQ(a.dtype(), DType::f32) << name;
      ASSERT_EQ(a.shape(), e.shape()) << name;
      // The gradient comes back to f32 through the cast of the parameter's
      // 16-bit compute copy: it is a 16-bit value (not one computed in f32).
      EXPECT_EQ(a.convertTo(half).convertTo(DType::f32), a)
          << "gradient of " << name << " is not a " << dtypeName(half)
          << " value";
      double diff = 0, norm = 0;
      for (int64_t k = 0; k < a.numElements(); ++k) {
        double d = a.getDouble(k) - e.getDouble(k);
        diff += d * d;
        norm += e.getDouble(k) * e.getDouble(k);
      }
      if (norm == 0) {
        EXPECT_EQ(diff, 0) << "gradient of " << name;
        continue;
      }
      double error = std::sqrt(diff / norm);
      // A sum whose terms cancel amplifies the terms' errors by its
      // condition number (computed when a bound without it is exceeded).
      double condition = 1;
      auto bound = [&] {
        return (steps.terms * condition + steps.sum) * u + kF32Slack;
      };
      if (error > bound() && steps.terms > 0) {
        if (conditions.empty())
          conditions = sumConditions(grad64, values64, *expected);
        condition = conditions[r];
      }
      EXPECT_LE(error, bound())
          << "gradient of " << name << ": " << error / u << " u; bound ("
          << steps.terms << " * " << condition << " + " << steps.sum << ") u, "
          << condition << " the condition number of the sum\n"
          << text;
    }
  }

  /// The condition numbers of the gradients `grads` of `grad` at `values`
  /// (weights next to last) as sums over the output's elements: each is
  /// g = sum_i w_i c_i with c_i the gradient for the weights e_i, and
  /// sum_i |w_i c_i| bounds what its terms' relative errors add up to;
  /// returns ||sum_i |w_i c_i| || / ||g|| per gradient (1 for the loss).
  std::vector<double> sumConditions(func::FuncOp grad,
                                    std::vector<Tensor> values,
                                    ArrayRef<Tensor> grads) {
    Tensor &weights = values[values.size() - 2];
    Tensor w = weights;
    std::vector<std::vector<double>> absolute(grads.size());
    for (unsigned r = 0; r < grads.size(); ++r)
      absolute[r].assign(grads[r].numElements(), 0);
    for (int64_t i = 0; i < w.numElements(); ++i) {
      for (int64_t k = 0; k < w.numElements(); ++k)
        weights.setDouble(k, k == i ? 1 : 0);
      FailureOr<std::vector<Tensor>> c = evaluate(grad, values);
      if (failed(c)) {
        ADD_FAILURE() << diagnostics;
        return std::vector<double>(grads.size(), 1);
      }
      for (unsigned r = 1; r < grads.size(); ++r)
        for (int64_t k = 0; k < grads[r].numElements(); ++k)
          absolute[r][k] += std::fabs(w.getDouble(i) * (*c)[r].getDouble(k));
    }
    std::vector<double> conditions(grads.size(), 1);
    for (unsigned r = 1; r < grads.size(); ++r) {
      double sum = 0, norm = 0;
      for (int64_t k = 0; k < grads[r].numElements(); ++k) {
        sum += absolute[r][k] * absolute[r][k];
        norm += grads[r].getDouble(k) * grads[r].getDouble(k);
      }
      conditions[r] = std::sqrt(sum / norm);
    }
    return conditions;
  }

  std::mt19937 rng{20240611};
  /// Gradients compared so far (a test can insist that some were).
  unsigned checkedGradients = 0;
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, UnaryOps) {
  struct Case {
    const char *op;
    double low, high; // 0, 0: away from zero
  };
  const Case cases[] = {
      {"neg", -1, 1},      {"abs", 0, 0},       {"relu", 0, 0},
      {"exp", -1, 1},      {"log", 0.5, 2},     {"sqrt", 0.5, 2},
      {"rsqrt", 0.5, 2},   {"erf", -1.5, 1.5},  {"tanh", -1.5, 1.5},
      {"sigmoid", -2, 2},  {"sin", -2, 2},      {"cos", -2, 2},
      {"asin", -0.8, 0.8}, {"acos", -0.8, 0.8}, {"atan", -2, 2},
      {"asinh", -2, 2},    {"acosh", 1.2, 3},   {"atanh", -0.8, 0.8},
      {"floor", -2.7, 2.7}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.op);
    Tensor x =
        c.low == c.high ? awayFromZero({3, 4}) : random({3, 4}, c.low, c.high);
    check({param("x", x)},
          substitute("  %out = sharc.$0 %x : tensor<3x4xf64>", {c.op}), {3, 4});
  }
  EXPECT_EQ(checkedGradients, std::size(cases));
}

TEST_F(GradCheck, Gelu) {
  for (const char *approximation : {"none", "tanh"}) {
    SCOPED_TRACE(approximation);
    check({param("x", random({2, 5}, -3, 3))},
          substitute("  %out = sharc.gelu %x {approximation = "
                     "#sharc.gelu_approximation<$0>} : tensor<2x5xf64>",
                     {approximation}),
          {2, 5});
  }
}

TEST_F(GradCheck, Cast) {
  // f32 parameter, f64 computation: differences of the f64 loss are exact
  // enough, and the gradient is rounded to f32 once.
  Tensor x = randomTensor(DType::f32, {2, 3}, rng(), -1, 1);
  check({param("x", x)}, R"(
  %c = sharc.cast %x : tensor<2x3xf32> to tensor<2x3xf64>
  %out = sharc.exp %c : tensor<2x3xf64>)",
        {2, 3});
}

TEST_F(GradCheck, BinaryOpsBroadcast) {
  struct Shapes {
    std::vector<int64_t> lhs, rhs, out;
  };
  const Shapes shapes[] = {{{3, 1}, {4}, {3, 4}},
                           {{2, 3, 4}, {3, 1}, {2, 3, 4}},
                           {{}, {3}, {3}},
                           {{2, 1, 4}, {2, 3, 1}, {2, 3, 4}}};
  for (const char *op : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
    for (const Shapes &s : shapes) {
      SCOPED_TRACE(std::string(op) + " " + tensorType(s.lhs, "f64") + " " +
                   tensorType(s.rhs, "f64"));
      std::string name = op;
      Tensor lhs = name == "pow" ? random(s.lhs, 0.5, 2) : random(s.lhs);
      Tensor rhs = name == "div"   ? awayFromZero(s.rhs)
                   : name == "pow" ? random(s.rhs, -1.5, 1.5)
                                   : random(s.rhs);
      std::string body =
          substitute("  %out = sharc.$0 %x, %y : ($1, $2) -> $3",
                     {op, tensorType(s.lhs, "f64"), tensorType(s.rhs, "f64"),
                      tensorType(s.out, "f64")});
      check({param("x", lhs), param("y", rhs)}, body, s.out);
    }
  }
}

TEST_F(GradCheck, PowConstantAndZeroExponents) {
  // x^2 with a constant exponent (decomposed layer norms), and exponents
  // that are exactly zero (the gradient of x there is 0).
  check({param("x", awayFromZero({3, 4}))}, R"(
  %two = sharc.constant dense<2.0> : tensor<f64>
  %out = sharc.pow %x, %two : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xf64>)",
        {3, 4});
  check({param("x", random({4}, 0.5, 2)),
         param("y", makeTensor(DType::f64, {4}, {0, 1.5, 0, -0.5}))},
        "  %out = sharc.pow %x, %y : (tensor<4xf64>, tensor<4xf64>) -> "
        "tensor<4xf64>",
        {4});
}

TEST_F(GradCheck, Select) {
  check({input("c", random({3, 4})), param("x", random({3, 1})),
         param("y", random({4}))},
        R"(
  %zero = sharc.constant dense<0.0> : tensor<f64>
  %cond = sharc.compare %c, %zero {predicate = #sharc.predicate<gt>} : (tensor<3x4xf64>, tensor<f64>) -> tensor<3x4xi1>
  %out = sharc.select %cond, %x, %y : (tensor<3x4xi1>, tensor<3x1xf64>, tensor<4xf64>) -> tensor<3x4xf64>)",
        {3, 4});
}

//===----------------------------------------------------------------------===//
// Linear algebra, reductions, normalization
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, Matmul) {
  struct Case {
    std::vector<int64_t> lhs, rhs, out;
    bool transposeLhs, transposeRhs;
  };
  const Case cases[] = {
      {{3, 4}, {4, 5}, {3, 5}, false, false},
      {{4, 3}, {4, 5}, {3, 5}, true, false},
      {{3, 4}, {5, 4}, {3, 5}, false, true},
      {{4, 3}, {5, 4}, {3, 5}, true, true},
      // Batch broadcasting in both directions.
      {{2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}, false, false},
      {{3, 4, 3}, {2, 1, 5, 4}, {2, 3, 3, 5}, true, true},
      // A weight matrix applied to a batch (the folded case), both layouts.
      {{2, 3, 4}, {4, 5}, {2, 3, 5}, false, false},
      {{2, 3, 4}, {5, 4}, {2, 3, 5}, false, true},
      {{2, 4, 3}, {5, 4}, {2, 3, 5}, true, true},
      // A matrix times a batch.
      {{3, 4}, {2, 4, 5}, {2, 3, 5}, false, false},
  };
  for (const Case &c : cases) {
    std::string body = substitute(
        "  %out = sharc.matmul %x, %y {transpose_lhs = $0, transpose_rhs = "
        "$1} : ($2, $3) -> $4",
        {c.transposeLhs ? "true" : "false", c.transposeRhs ? "true" : "false",
         tensorType(c.lhs, "f64"), tensorType(c.rhs, "f64"),
         tensorType(c.out, "f64")});
    SCOPED_TRACE(body);
    check({param("x", random(c.lhs)), param("y", random(c.rhs))}, body, c.out);
  }
}

TEST_F(GradCheck, Reduce) {
  struct Case {
    const char *kind, *axes, *keepDims;
    std::vector<int64_t> out;
  };
  const Case cases[] = {
      {"sum", "0, 2", "false", {3}},       {"sum", "1", "true", {2, 1, 4}},
      {"mean", "0, 2", "true", {1, 3, 1}}, {"mean", "0, 1, 2", "false", {}},
      {"max", "2", "false", {2, 3}},       {"max", "0, 1", "true", {1, 1, 4}},
      {"sum", "", "false", {2, 3, 4}}};
  for (const Case &c : cases) {
    std::string body = substitute(
        "  %out = sharc.reduce %x {kind = #sharc.reduce_kind<$0>, axes = "
        "array<i64$1>, keep_dims = $2} : (tensor<2x3x4xf64>) -> $3",
        {c.kind, *c.axes ? std::string(": ") + c.axes : "", c.keepDims,
         tensorType(c.out, "f64")});
    SCOPED_TRACE(body);
    check({param("x", random({2, 3, 4}))}, body, c.out);
  }
}

TEST_F(GradCheck, Softmax) {
  for (const char *op : {"softmax", "log_softmax"})
    for (int axis : {1, 2}) {
      std::string body =
          substitute("  %out = sharc.$0 %x {axis = $1} : tensor<2x3x4xf64>",
                     {op, std::to_string(axis)});
      SCOPED_TRACE(body);
      check({param("x", random({2, 3, 4}, -2, 2))}, body, {2, 3, 4});
    }
}

TEST_F(GradCheck, LayerNorm) {
  // Scale over both normalized dims, bias broadcast from the last one.
  check({param("x", random({2, 3, 4}, -2, 2)), param("s", random({3, 4})),
         param("b", random({4}))},
        R"(
  %out, %mean, %inv_std = sharc.layer_norm %x, %s, %b {axis = 1, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf64>, tensor<3x4xf64>, tensor<4xf64>) -> (tensor<2x3x4xf64>, tensor<2x1x1xf64>, tensor<2x1x1xf64>))",
        {2, 3, 4});
  // No bias; the statistics are used too.
  check({param("x", random({3, 5}, -2, 2)), param("s", random({5}))}, R"(
  %y, %mean, %inv_std = sharc.layer_norm %x, %s {axis = 1, epsilon = 1.0e-3 : f64} : (tensor<3x5xf64>, tensor<5xf64>) -> (tensor<3x5xf64>, tensor<3x1xf64>, tensor<3x1xf64>)
  %m = sharc.mul %mean, %inv_std : (tensor<3x1xf64>, tensor<3x1xf64>) -> tensor<3x1xf64>
  %out = sharc.add %y, %m : (tensor<3x5xf64>, tensor<3x1xf64>) -> tensor<3x5xf64>)",
        {3, 5});
  // Only the statistics.
  check({param("x", random({3, 5}, -2, 2)), input("s", random({5}))}, R"(
  %y, %mean, %inv_std = sharc.layer_norm %x, %s {axis = 1, epsilon = 1.0e-3 : f64} : (tensor<3x5xf64>, tensor<5xf64>) -> (tensor<3x5xf64>, tensor<3x1xf64>, tensor<3x1xf64>)
  %out = sharc.sub %inv_std, %mean : (tensor<3x1xf64>, tensor<3x1xf64>) -> tensor<3x1xf64>)",
        {3, 1});
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, ReshapeTransposeBroadcast) {
  check({param("x", random({2, 6}))},
        "  %out = sharc.reshape %x : tensor<2x6xf64> to tensor<3x2x2xf64>",
        {3, 2, 2});
  check({param("x", random({2, 3, 4}))},
        "  %out = sharc.transpose %x {permutation = array<i64: 2, 0, 1>} : "
        "(tensor<2x3x4xf64>) -> tensor<4x2x3xf64>",
        {4, 2, 3});
  check({param("x", random({3, 1}))},
        "  %out = sharc.broadcast %x : tensor<3x1xf64> to tensor<2x3x4xf64>",
        {2, 3, 4});
}

TEST_F(GradCheck, SliceAndConcat) {
  check({param("x", random({4, 7}))},
        "  %out = sharc.slice %x {start = array<i64: 3, 1>, stride = "
        "array<i64: -2, 3>} : tensor<4x7xf64> to tensor<2x2xf64>",
        {2, 2});
  check({param("x", random({2, 3})), input("y", random({2, 1})),
         param("z", random({2, 2}))},
        "  %out = sharc.concat %x, %y, %z {axis = 1} : (tensor<2x3xf64>, "
        "tensor<2x1xf64>, tensor<2x2xf64>) -> tensor<2x6xf64>",
        {2, 6});
}

TEST_F(GradCheck, Gather) {
  // Repeated and negative indices along axis 1.
  check({param("x", random({2, 5, 3})),
         input("i", ints({2, 3}, {0, 4, -1, 2, 0, 0}))},
        "  %out = sharc.gather %x, %i {axis = 1} : (tensor<2x5x3xf64>, "
        "tensor<2x3xi64>) -> tensor<2x2x3x3xf64>",
        {2, 2, 3, 3});
}

TEST_F(GradCheck, Trilu) {
  for (const char *attrs : {"upper = true, diagonal = 1", "upper = false",
                            "upper = false, diagonal = -1"}) {
    SCOPED_TRACE(attrs);
    check(
        {param("x", random({2, 3, 4}))},
        substitute("  %out = sharc.trilu %x {$0} : tensor<2x3x4xf64>", {attrs}),
        {2, 3, 4});
  }
}

TEST_F(GradCheck, InsertSliceAndScatterAdd) {
  check({param("x", random({2, 2})), param("d", random({4, 5}))},
        "  %out = sharc.insert_slice %x into %d {start = array<i64: 3, 0>, "
        "stride = array<i64: -2, 4>} : tensor<2x2xf64> into tensor<4x5xf64>",
        {4, 5});
  check({param("d", random({4, 2})), input("i", ints({3}, {1, -1, 1})),
         param("u", random({3, 2}))},
        "  %out = sharc.scatter_add %d, %i, %u {axis = 0} : (tensor<4x2xf64>, "
        "tensor<3xi64>, tensor<3x2xf64>) -> tensor<4x2xf64>",
        {4, 2});
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, Losses) {
  // [N=3, C=4, d=2]; target 1 is ignored where ignore_index = 1.
  Tensor target = ints({3, 2}, {0, 1, 3, 2, 1, 3});
  for (const char *op : {"nll_loss", "cross_entropy"})
    for (const char *reduction : {"none", "sum", "mean"})
      for (bool weighted : {false, true})
        for (bool ignore : {false, true}) {
          std::vector<int64_t> out;
          if (reduction == std::string("none"))
            out = {3, 2};
          std::string body = substitute(
              "  %out = sharc.$0 %x, %t$1 {reduction = "
              "#sharc.loss_reduction<$2>$3} : (tensor<3x4x2xf64>, "
              "tensor<3x2xi64>$4) -> $5",
              {op, weighted ? ", %w" : "", reduction,
               ignore ? ", ignore_index = 1 : i64" : "",
               weighted ? ", tensor<4xf64>" : "", tensorType(out, "f64")});
          SCOPED_TRACE(body);
          std::vector<Arg> args{param("x", random({3, 4, 2}, -2, 2)),
                                input("t", target)};
          if (weighted)
            args.push_back(param("w", random({4}, 0.5, 2)));
          check(args, body, out);
        }
  // An ignore_index outside the classes, on a target without spatial dims.
  check({param("x", random({3, 5}, -2, 2)), input("t", ints({3}, {4, -100, 0})),
         param("w", random({5}, 0.5, 2))},
        "  %out = sharc.cross_entropy %x, %t, %w {reduction = "
        "#sharc.loss_reduction<mean>, ignore_index = -100 : i64} : "
        "(tensor<3x5xf64>, tensor<3xi64>, tensor<5xf64>) -> tensor<f64>",
        {});
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, Conv2D) {
  // groups, strides, asymmetric padding and dilations, with a bias.
  check({param("x", random({2, 4, 7, 6})), param("w", random({6, 2, 3, 2})),
         param("b", random({6}))},
        "  %out = sharc.conv2d %x, %w, %b {strides = array<i64: 2, 1>, "
        "padding = array<i64: 1, 0, 2, 1>, dilations = array<i64: 2, 1>, "
        "groups = 2} : (tensor<2x4x7x6xf64>, tensor<6x2x3x2xf64>, "
        "tensor<6xf64>) -> tensor<2x6x3x6xf64>",
        {2, 6, 3, 6});
  // Plain, without bias; the stride leaves the last rows unread.
  check({param("x", random({1, 3, 6, 6})), param("w", random({2, 3, 3, 3}))},
        "  %out = sharc.conv2d %x, %w {strides = array<i64: 2, 2>, padding = "
        "array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : "
        "(tensor<1x3x6x6xf64>, tensor<2x3x3x3xf64>) -> tensor<1x2x2x2xf64>",
        {1, 2, 2, 2});
}

TEST_F(GradCheck, Conv2DInputGrad) {
  // The transposed convolution (ONNX ConvTranspose): groups, strides,
  // asymmetric padding and dilations; the result one row longer than the
  // convolution's reach (output padding).
  check({param("dy", random({2, 6, 3, 6})), param("w", random({6, 2, 3, 2}))},
        "  %out = sharc.conv2d_input_grad %dy, %w {strides = array<i64: 2, "
        "1>, padding = array<i64: 1, 0, 2, 1>, dilations = array<i64: 2, 1>, "
        "groups = 2} : (tensor<2x6x3x6xf64>, tensor<6x2x3x2xf64>) -> "
        "tensor<2x4x7x6xf64>",
        {2, 4, 7, 6});
}

TEST_F(GradCheck, Pooling) {
  check({param("x", random({2, 2, 7, 6}))},
        "  %out = sharc.max_pool2d %x {kernel = array<i64: 3, 2>, strides = "
        "array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 0>, dilations = "
        "array<i64: 1, 2>, ceil_mode = true} : (tensor<2x2x7x6xf64>) -> "
        "tensor<2x2x4x3xf64>",
        {2, 2, 4, 3});
  for (const char *countPad : {"false", "true"}) {
    std::string body = substitute(
        "  %out = sharc.avg_pool2d %x {kernel = array<i64: 3, 2>, strides = "
        "array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 0>, ceil_mode = true, "
        "count_include_pad = $0} : (tensor<2x2x7x6xf64>) -> "
        "tensor<2x2x4x4xf64>",
        {countPad});
    SCOPED_TRACE(body);
    check({param("x", random({2, 2, 7, 6}))}, body, {2, 2, 4, 4});
  }
}

//===----------------------------------------------------------------------===//
// Whole functions
//===----------------------------------------------------------------------===//

TEST_F(GradCheck, TiedEmbedding) {
  // The table embeds the tokens and, transposed, is the output head.
  check({param("e", random({6, 3})),
         input("i", ints({2, 4}, {0, 5, 2, 5, 1, 0, 0, 3})),
         param("g", random({3}, 0.5, 1.5))},
        R"(
  %x = sharc.gather %e, %i {axis = 0} : (tensor<6x3xf64>, tensor<2x4xi64>) -> tensor<2x4x3xf64>
  %h = sharc.mul %x, %g : (tensor<2x4x3xf64>, tensor<3xf64>) -> tensor<2x4x3xf64>
  %out = sharc.matmul %h, %e {transpose_rhs = true} : (tensor<2x4x3xf64>, tensor<6x3xf64>) -> tensor<2x4x6xf64>)",
        {2, 4, 6});
}

TEST_F(GradCheck, AttentionBlock) {
  // A pre-norm causal self-attention block and a GELU MLP, ending in a
  // cross-entropy: the ops of the GPT model, composed.
  check({param("x", random({2, 4, 6}, -1, 1)),
         param("s", random({6}, 0.5, 1.5)), param("b", random({6})),
         param("wq", random({6, 6})), param("wk", random({6, 6})),
         param("w1", random({6, 8})), param("w2", random({8, 5})),
         input("t", ints({2, 4}, {1, 4, 0, 2, 3, 3, 1, 0}))},
        R"(
  %n, %mean, %inv = sharc.layer_norm %x, %s, %b {axis = 2, epsilon = 1.0e-5 : f64} : (tensor<2x4x6xf64>, tensor<6xf64>, tensor<6xf64>) -> (tensor<2x4x6xf64>, tensor<2x4x1xf64>, tensor<2x4x1xf64>)
  %q = sharc.matmul %n, %wq : (tensor<2x4x6xf64>, tensor<6x6xf64>) -> tensor<2x4x6xf64>
  %k = sharc.matmul %n, %wk : (tensor<2x4x6xf64>, tensor<6x6xf64>) -> tensor<2x4x6xf64>
  %scores = sharc.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x6xf64>, tensor<2x4x6xf64>) -> tensor<2x4x4xf64>
  %ones = sharc.constant dense<true> : tensor<4x4xi1>
  %lowerf = sharc.cast %ones : tensor<4x4xi1> to tensor<4x4xf64>
  %lower = sharc.trilu %lowerf {upper = false} : tensor<4x4xf64>
  %zero = sharc.constant dense<0.0> : tensor<f64>
  %mask = sharc.compare %lower, %zero {predicate = #sharc.predicate<ne>} : (tensor<4x4xf64>, tensor<f64>) -> tensor<4x4xi1>
  %ninf = sharc.constant dense<0xFFF0000000000000> : tensor<f64>
  %masked = sharc.select %mask, %scores, %ninf : (tensor<4x4xi1>, tensor<2x4x4xf64>, tensor<f64>) -> tensor<2x4x4xf64>
  %p = sharc.softmax %masked {axis = 2} : tensor<2x4x4xf64>
  %ctx = sharc.matmul %p, %n : (tensor<2x4x4xf64>, tensor<2x4x6xf64>) -> tensor<2x4x6xf64>
  %r = sharc.add %x, %ctx : (tensor<2x4x6xf64>, tensor<2x4x6xf64>) -> tensor<2x4x6xf64>
  %h = sharc.matmul %r, %w1 : (tensor<2x4x6xf64>, tensor<6x8xf64>) -> tensor<2x4x8xf64>
  %a = sharc.gelu %h {approximation = #sharc.gelu_approximation<tanh>} : tensor<2x4x8xf64>
  %logits = sharc.matmul %a, %w2 : (tensor<2x4x8xf64>, tensor<8x5xf64>) -> tensor<2x4x5xf64>
  %flat = sharc.reshape %logits : tensor<2x4x5xf64> to tensor<8x5xf64>
  %tf = sharc.reshape %t : tensor<2x4xi64> to tensor<8xi64>
  %out = sharc.cross_entropy %flat, %tf {reduction = #sharc.loss_reduction<mean>} : (tensor<8x5xf64>, tensor<8xi64>) -> tensor<f64>)",
        {});
  EXPECT_EQ(checkedGradients, 7u);
}

TEST_F(GradCheck, FrozenParameters) {
  // The regex matches the ONNX name of %w1 ("model.w1") and the sanitized
  // name of %b: neither gets a gradient.
  AutodiffOptions options;
  options.freeze = "model\\.w1|^b$";
  check({param("x", random({2, 3})), param("w1", random({3, 3})),
         param("b", random({3}))},
        R"(
  %h = sharc.matmul %x, %w1 : (tensor<2x3xf64>, tensor<3x3xf64>) -> tensor<2x3xf64>
  %out = sharc.add %h, %b : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>)",
        {2, 3}, options);
  EXPECT_EQ(checkedGradients, 1u);
}

TEST_F(GradCheck, UnreachedParameterHasZeroGradient) {
  check({param("x", random({3})), param("unused", random({2})),
         param("blocked", random({3}))},
        R"(
  %i = sharc.cast %blocked : tensor<3xf64> to tensor<3xi64>
  %f = sharc.cast %i : tensor<3xi64> to tensor<3xf64>
  %out = sharc.add %x, %f : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>)",
        {3});
  EXPECT_EQ(checkedGradients, 3u);
  EXPECT_NE(diagnostics.find("does not depend on trainable parameter 'unused'"),
            std::string::npos)
      << diagnostics;
  EXPECT_NE(diagnostics.find("trainable parameter 'blocked'"),
            std::string::npos)
      << diagnostics;
}

TEST_F(GradCheck, Float32MatchesFloat64) {
  // The same MLP in f32 and f64: the f32 gradients are the f64 ones to f32
  // accuracy (no rule computes in a wider or narrower type by accident).
  const char *text = R"(
func.func @main(%x: tensor<4x3x$0> {sharc.input = "x"},
                %w: tensor<5x3x$0> {sharc.param = #sharc.param<"w", "w">},
                %t: tensor<4xi64> {sharc.input = "t"})
    -> (tensor<$0> {sharc.output = "loss"}) {
  %h = sharc.matmul %x, %w {transpose_rhs = true} : (tensor<4x3x$0>, tensor<5x3x$0>) -> tensor<4x5x$0>
  %a = sharc.tanh %h : tensor<4x5x$0>
  %loss = sharc.cross_entropy %a, %t {reduction = #sharc.loss_reduction<mean>} : (tensor<4x5x$0>, tensor<4xi64>) -> tensor<$0>
  return %loss : tensor<$0>
})";
  Tensor x = random({4, 3}), w = random({5, 3});
  Tensor t = ints({4}, {0, 4, 2, 2});
  std::vector<Tensor> grads;
  for (DType type : {DType::f64, DType::f32}) {
    ModuleOp module = differentiate(
        substitute(text, {std::string(dtypeName(type))}), AutodiffOptions());
    ASSERT_TRUE(module);
    auto grad = module.lookupSymbol<func::FuncOp>("main_grad");
    FailureOr<std::vector<Tensor>> r =
        evaluate(grad, {x.convertTo(type), w.convertTo(type), t,
                        makeTensor(type, {}, {1.0})});
    ASSERT_TRUE(succeeded(r)) << diagnostics;
    grads.push_back((*r)[1]);
  }
  std::vector<double> expected(grads[0].floats().begin(),
                               grads[0].floats().end());
  expectClose(grads[1], expected, 1e-5, "f32 gradient");
}

//===----------------------------------------------------------------------===//
// Tie conventions and the gradient ops, against values worked out by hand
//===----------------------------------------------------------------------===//

/// Runs @main_grad of `text` (params only, seed 1) and returns the gradients.
class GradValues : public GradCheck {
protected:
  std::vector<Tensor> gradients(StringRef text, std::vector<Tensor> args) {
    ModuleOp module = differentiate(text, AutodiffOptions());
    if (!module)
      return {};
    args.push_back(makeTensor(DType::f64, {}, {1.0}));
    FailureOr<std::vector<Tensor>> r =
        evaluate(module.lookupSymbol<func::FuncOp>("main_grad"), args);
    EXPECT_TRUE(succeeded(r)) << diagnostics;
    if (failed(r))
      return {};
    return std::vector<Tensor>(r->begin() + 1, r->end());
  }
};

TEST_F(GradValues, MaxMinSplitTiesEvenly) {
  // torch.maximum/minimum: a tie gives half of the gradient to each side.
  for (const char *op : {"max", "min"}) {
    std::vector<Tensor> g = gradients(substitute(R"(
func.func @main(%x: tensor<3xf64> {sharc.param = #sharc.param<"x", "x">},
                %y: tensor<3xf64> {sharc.param = #sharc.param<"y", "y">})
    -> (tensor<f64> {sharc.output = "loss"}) {
  %m = sharc.$0 %x, %y : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  %loss = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<3xf64>) -> tensor<f64>
  return %loss : tensor<f64>
})",
                                                 {op}),
                                      {makeTensor(DType::f64, {3}, {1, 2, 3}),
                                       makeTensor(DType::f64, {3}, {1, 5, 0})});
    ASSERT_EQ(g.size(), 2u);
    bool isMax = op == std::string("max");
    expectClose(g[0], {0.5, isMax ? 0.0 : 1.0, isMax ? 1.0 : 0.0}, 0, op);
    expectClose(g[1], {0.5, isMax ? 1.0 : 0.0, isMax ? 0.0 : 1.0}, 0, op);
  }
}

TEST_F(GradValues, ReduceMaxSplitsTiesEvenly) {
  // torch.amax: the gradient is shared by every position holding the max.
  std::vector<Tensor> g =
      gradients(R"(
func.func @main(%x: tensor<2x3xf64> {sharc.param = #sharc.param<"x", "x">})
    -> (tensor<f64> {sharc.output = "loss"}) {
  %m = sharc.reduce %x {kind = #sharc.reduce_kind<max>, axes = array<i64: 1>} : (tensor<2x3xf64>) -> tensor<2xf64>
  %loss = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2xf64>) -> tensor<f64>
  return %loss : tensor<f64>
})",
                {makeTensor(DType::f64, {2, 3}, {4, 1, 4, 0, 2, -1})});
  ASSERT_EQ(g.size(), 1u);
  expectClose(g[0], {0.5, 0, 0.5, 0, 1, 0}, 0, "amax");
}

TEST_F(GradValues, MaxPoolRoutesTiesToTheFirstMaximum) {
  // PyTorch's max_pool2d: the first maximum in the window (row-major) gets
  // the whole gradient; overlapping windows accumulate.  Both windows hold
  // several 7s and pick element 1.
  std::vector<Tensor> g =
      gradients(R"(
func.func @main(%x: tensor<1x1x2x3xf64> {sharc.param = #sharc.param<"x", "x">})
    -> (tensor<f64> {sharc.output = "loss"}) {
  %m = sharc.max_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x2x3xf64>) -> tensor<1x1x1x2xf64>
  %loss = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3>} : (tensor<1x1x1x2xf64>) -> tensor<f64>
  return %loss : tensor<f64>
})",
                {makeTensor(DType::f64, {1, 1, 2, 3}, {1, 7, 7, 7, 2, 7})});
  ASSERT_EQ(g.size(), 1u);
  expectClose(g[0], {0, 2, 0, 0, 0, 0}, 0, "max_pool2d");
}

TEST_F(GradValues, ScatterAddAndInsertSliceEvaluate) {
  std::vector<Tensor> r =
      run(R"(
func.func @main(%d: tensor<3x2xf64>, %i: tensor<2x3xi32>, %u: tensor<2x3x2xf64>,
                %s: tensor<2xf64>) -> (tensor<3x2xf64>, tensor<5xf64>) {
  %0 = sharc.scatter_add %d, %i, %u {axis = 0} : (tensor<3x2xf64>, tensor<2x3xi32>, tensor<2x3x2xf64>) -> tensor<3x2xf64>
  %z = sharc.constant dense<9.0> : tensor<5xf64>
  %1 = sharc.insert_slice %s into %z {start = array<i64: 4>, stride = array<i64: -3>} : tensor<2xf64> into tensor<5xf64>
  return %0, %1 : tensor<3x2xf64>, tensor<5xf64>
})",
          {makeTensor(DType::f64, {3, 2}, {1, 2, 3, 4, 5, 6}),
           makeTensor(DType::i32, {2, 3}, {2, -1, 0, 1, 1, 2}),
           makeTensor(DType::f64, {2, 3, 2},
                      {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}),
           makeTensor(DType::f64, {2}, {-1, -2})});
  ASSERT_EQ(r.size(), 2u);
  // Index -1 is row 2; repeated rows accumulate.
  expectClose(r[0],
              {1 + 50, 2 + 60, 3 + 70 + 90, 4 + 80 + 100, 5 + 10 + 30 + 110,
               6 + 20 + 40 + 120},
              0, "scatter_add");
  expectClose(r[1], {9, -2, 9, 9, -1}, 0, "insert_slice");
}

} // namespace
