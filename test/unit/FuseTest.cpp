//===- FuseTest.cpp - sharc-fuse on random elementwise DAGs ---------------===//
//
// Fuses random functions of elementwise ops (broadcasting shapes, several
// element types, splat and non-splat constants, a few reductions and
// broadcasts in between, several outputs) and checks that the result
// verifies, that every elementwise op is inside a sharc.fusion, that the
// evaluator gives bitwise identical results before and after fusion, and
// that fusing again changes nothing.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ir/SharcOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <cstring>
#include <random>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

/// Generates random elementwise functions.  Every value's shape broadcasts
/// to one base shape, so any two values broadcast together.
class DagGenerator {
public:
  explicit DagGenerator(unsigned seed) : rng(seed) {}

  std::string generate();

private:
  size_t pick(size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  }
  /// A shape that broadcasts to `base`: a suffix with some dims set to 1.
  std::vector<int64_t> subShape() {
    std::vector<int64_t> shape(base.end() - pick(base.size() + 1), base.end());
    for (int64_t &dim : shape)
      if (pick(3) == 0)
        dim = 1;
    return shape;
  }
  /// A random value satisfying `filter`, or null.
  template <typename Filter> const GeneratedValue *pickValue(Filter &&filter) {
    std::vector<const GeneratedValue *> matching;
    for (const GeneratedValue &value : values)
      if (filter(value))
        matching.push_back(&value);
    return matching.empty() ? nullptr : matching[pick(matching.size())];
  }
  /// A splat literal of `element`.
  std::string literal(const std::string &element) {
    if (element == "i1")
      return pick(2) ? "true" : "false";
    if (element == "i32")
      return std::to_string(static_cast<int>(pick(7)) - 3);
    const char *floats[] = {"0.5", "-1.25", "2.0", "0.0", "3.0", "-0.75"};
    return floats[pick(6)];
  }
  std::string fresh() { return "%v" + std::to_string(counter++); }
  /// Appends one op; false when the chosen kind does not apply.
  bool addOp();

  std::mt19937 rng;
  std::vector<int64_t> base;
  std::vector<GeneratedValue> values;
  std::string body;
  int counter = 0;
};

const char *const kElements[] = {"f32", "f64", "f16", "i32", "i1"};

bool DagGenerator::addOp() {
  std::string name = fresh();
  auto emit = [&](const std::string &text, GeneratedValue result) {
    body += "  " + name + " = " + text + "\n";
    result.name = name;
    values.push_back(result);
    return true;
  };
  auto binaryType = [](const GeneratedValue &x, const GeneratedValue &y,
                       const std::string &element) {
    SmallVector<int64_t> shape = *broadcastShapes(x.shape, y.shape);
    return GeneratedValue{"", {shape.begin(), shape.end()}, element};
  };
  auto functional = [](std::initializer_list<const GeneratedValue *> operands,
                       const GeneratedValue &result) {
    std::string text = " : (";
    bool first = true;
    for (const GeneratedValue *operand : operands) {
      text += (first ? "" : ", ") + operand->type();
      first = false;
    }
    return text + ") -> " + result.type();
  };

  switch (pick(12)) {
  case 0:
  case 1: { // unary float function
    const GeneratedValue *x =
        pickValue([](const GeneratedValue &v) { return v.isFloat(); });
    if (!x)
      return false;
    const char *ops[] = {"exp",  "log",     "sqrt", "rsqrt", "erf",
                         "tanh", "sigmoid", "sin",  "cos",   "floor"};
    return emit(std::string("sharc.") + ops[pick(10)] + " " + x->name + " : " +
                    x->type(),
                *x);
  }
  case 2: { // numeric unary, gelu
    const GeneratedValue *x =
        pickValue([](const GeneratedValue &v) { return v.element != "i1"; });
    if (!x)
      return false;
    if (x->isFloat() && pick(4) == 0)
      return emit(
          "sharc.gelu " + x->name +
              (pick(2) ? " {approximation = #sharc.gelu_approximation<tanh>}"
                       : "") +
              " : " + x->type(),
          *x);
    const char *ops[] = {"neg", "abs", "relu"};
    return emit(std::string("sharc.") + ops[pick(3)] + " " + x->name + " : " +
                    x->type(),
                *x);
  }
  case 3:
  case 4:
  case 5: { // arithmetic
    const GeneratedValue *x =
        pickValue([](const GeneratedValue &v) { return v.element != "i1"; });
    if (!x)
      return false;
    const GeneratedValue *y = pickValue(
        [&](const GeneratedValue &v) { return v.element == x->element; });
    std::vector<const char *> ops = {"add", "sub", "mul", "max", "min"};
    if (x->isFloat()) {
      ops.push_back("div");
      ops.push_back("pow");
    }
    GeneratedValue result = binaryType(*x, *y, x->element);
    return emit(std::string("sharc.") + ops[pick(ops.size())] + " " + x->name +
                    ", " + y->name + functional({x, y}, result),
                result);
  }
  case 6: { // logic
    const GeneratedValue *x =
        pickValue([](const GeneratedValue &v) { return v.element == "i1"; });
    if (!x)
      return false;
    if (pick(3) == 0)
      return emit("sharc.not " + x->name + " : " + x->type(), *x);
    const GeneratedValue *y =
        pickValue([](const GeneratedValue &v) { return v.element == "i1"; });
    GeneratedValue result = binaryType(*x, *y, "i1");
    return emit(std::string(pick(2) ? "sharc.and " : "sharc.or ") + x->name +
                    ", " + y->name + functional({x, y}, result),
                result);
  }
  case 7: { // compare
    const GeneratedValue *x = &values[pick(values.size())];
    const GeneratedValue *y = pickValue(
        [&](const GeneratedValue &v) { return v.element == x->element; });
    const char *predicates[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    GeneratedValue result = binaryType(*x, *y, "i1");
    return emit("sharc.compare " + x->name + ", " + y->name +
                    " {predicate = #sharc.predicate<" + predicates[pick(6)] +
                    ">}" + functional({x, y}, result),
                result);
  }
  case 8: { // select
    const GeneratedValue *c =
        pickValue([](const GeneratedValue &v) { return v.element == "i1"; });
    if (!c)
      return false;
    const GeneratedValue *a = &values[pick(values.size())];
    const GeneratedValue *b = pickValue(
        [&](const GeneratedValue &v) { return v.element == a->element; });
    GeneratedValue result = binaryType(binaryType(*c, *a, ""), *b, a->element);
    return emit("sharc.select " + c->name + ", " + a->name + ", " + b->name +
                    functional({c, a, b}, result),
                result);
  }
  case 9: { // cast
    const GeneratedValue *x = &values[pick(values.size())];
    GeneratedValue result{"", x->shape, kElements[pick(5)]};
    return emit("sharc.cast " + x->name + " : " + x->type() + " to " +
                    result.type(),
                result);
  }
  case 10: { // constants
    GeneratedValue result{"", subShape(), kElements[pick(5)]};
    int64_t n = numElements(result.shape);
    if (result.shape.size() != 1 || n < 2 || pick(2))
      return emit("sharc.constant dense<" + literal(result.element) +
                      "> : " + result.type(),
                  result);
    std::string elements;
    for (int64_t i = 0; i < n; ++i)
      elements += (i ? ", " : "") + literal(result.element);
    return emit("sharc.constant dense<[" + elements + "]> : " + result.type(),
                result);
  }
  default: { // not elementwise: reduce (keep_dims) or broadcast to the base
    const GeneratedValue *x = pickValue([](const GeneratedValue &v) {
      return v.isFloat() && !v.shape.empty();
    });
    if (!x)
      return false;
    if (pick(2)) {
      GeneratedValue result{"", base, x->element};
      return emit("sharc.broadcast " + x->name + " : " + x->type() + " to " +
                      result.type(),
                  result);
    }
    size_t axis = pick(x->shape.size());
    GeneratedValue result = *x;
    result.shape[axis] = 1;
    return emit("sharc.reduce " + x->name + " {kind = #sharc.reduce_kind<" +
                    (pick(2) ? "sum" : "max") +
                    ">, axes = array<i64: " + std::to_string(axis) +
                    ">, keep_dims = true}" + functional({x}, result),
                result);
  }
  }
}

std::string DagGenerator::generate() {
  base.assign(pick(4), 0);
  for (int64_t &dim : base)
    dim = 1 + pick(4);

  std::string args;
  size_t numArgs = 1 + pick(4);
  for (size_t i = 0; i < numArgs; ++i) {
    // Mostly floats, so that chains are long.
    const char *element = pick(3) ? kElements[pick(3)] : kElements[pick(5)];
    values.push_back({"%arg" + std::to_string(i), subShape(), element});
    args += (i ? ", " : "") + values.back().name + ": " + values.back().type();
  }
  size_t count = 3 + pick(25);
  while (count > 0)
    if (addOp())
      --count;

  std::vector<const GeneratedValue *> returned = {&values.back()};
  for (size_t i = numArgs; i + 1 < values.size(); ++i)
    if (pick(5) == 0)
      returned.push_back(&values[i]);
  return mainFunction(args, body, returned);
}

/// Random arguments of `func`: floats in [-2, 2), i32 in [-4, 4), i1 0 or 1.
std::vector<Tensor> randomArgs(func::FuncOp func, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> args;
  for (Type type : func.getArgumentTypes()) {
    auto tensor = cast<RankedTensorType>(type);
    DType dtype = *dtypeOf(tensor.getElementType());
    Tensor value(dtype, tensor.getShape());
    for (int64_t i = 0; i < value.numElements(); ++i)
      value.setDouble(
          i, dtype == DType::i1
                 ? double(rng() % 2)
                 : (dtype == DType::i32
                        ? double(int(rng() % 8) - 4)
                        : std::uniform_real_distribution<double>(-2, 2)(rng)));
    args.push_back(std::move(value));
  }
  return args;
}

/// True when `a` and `b` have the same type, shape and bits.
bool bitwiseEqual(const Tensor &a, const Tensor &b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return false;
  if (a.isFloat())
    return std::memcmp(a.floats().data(), b.floats().data(),
                       a.floats().size() * sizeof(double)) == 0;
  return a.ints() == b.ints();
}

std::string print(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

class FuseTest : public IRTest {
protected:
  /// Runs sharc-fuse on the module of `func`, expecting success.
  void fuse(func::FuncOp func, bool singletons) {
    PassManager pm(&context);
    pm.addPass(createFusePass(singletons));
    ASSERT_TRUE(succeeded(pm.run(func->getParentOfType<ModuleOp>())))
        << diagnostics;
    ASSERT_TRUE(succeeded(verify(func->getParentOfType<ModuleOp>())))
        << diagnostics;
  }
};

TEST_F(FuseTest, RandomElementwiseDags) {
  int fusedOps = 0, multiOpFusions = 0, multiResultFusions = 0;
  for (unsigned trial = 0; trial < 200; ++trial) {
    std::string text = DagGenerator(1000 + trial).generate();
    bool singletons = trial % 4 != 0;
    SCOPED_TRACE("trial " + std::to_string(trial) +
                 (singletons ? "" : " (no singletons)") + "\n" + text);
    func::FuncOp original = parse(text);
    func::FuncOp fused = parse(text);
    ASSERT_TRUE(original && fused);
    fuse(fused, singletons);
    std::string once = print(fused->getParentOp());

    for (Operation &op : fused.getBody().front()) {
      if (auto fusion = dyn_cast<FusionOp>(op)) {
        int members = 0;
        for (Operation &inner : fusion.getBody().front().without_terminator())
          members += isFusibleElementwiseOp(&inner);
        fusedOps += members;
        multiOpFusions += members > 1;
        multiResultFusions += fusion.getNumResults() > 1;
        continue;
      }
      if (singletons) {
        EXPECT_FALSE(isFusibleElementwiseOp(&op))
            << "unfused op: " << print(&op) << "\n"
            << once;
      }
    }

    std::vector<Tensor> args = randomArgs(original, trial);
    FailureOr<std::vector<Tensor>> expected = evaluate(original, args);
    ASSERT_TRUE(succeeded(expected)) << diagnostics;
    FailureOr<std::vector<Tensor>> actual = evaluate(fused, args);
    ASSERT_TRUE(succeeded(actual)) << diagnostics << once;
    ASSERT_EQ(expected->size(), actual->size());
    for (size_t i = 0; i < expected->size(); ++i)
      EXPECT_TRUE(bitwiseEqual((*expected)[i], (*actual)[i]))
          << "result #" << i << ": " << (*actual)[i].describe()
          << " differs from the unfused " << (*expected)[i].describe() << "\n"
          << once;

    // Fusing fused IR changes nothing and stays valid.
    fuse(fused, singletons);
    EXPECT_EQ(print(fused->getParentOp()), once);
  }
  // The generator exercises real grouping.
  EXPECT_GT(multiOpFusions, 100);
  EXPECT_GT(multiResultFusions, 20);
  EXPECT_GT(fusedOps, 1000);
}

TEST_F(FuseTest, ExistingFusionsAreKept) {
  const char *text = R"(
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %f = sharc.fusion %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> {
  ^bb0(%x: tensor<2x3xf32>, %y: tensor<3xf32>):
    %c = sharc.constant dense<2.0> : tensor<f32>
    %s = sharc.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %m = sharc.mul %s, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    sharc.yield %m : tensor<2x3xf32>
  }
  %e = sharc.exp %f : tensor<2x3xf32>
  %n = sharc.neg %e : tensor<2x3xf32>
  %r = sharc.reduce %n {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>, keep_dims = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  %t = sharc.sub %f, %r : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  return %n, %t : tensor<2x3xf32>, tensor<2x3xf32>
}
)";
  func::FuncOp original = parse(text);
  func::FuncOp fused = parse(text);
  ASSERT_TRUE(original && fused);
  fuse(fused, true);
  int fusions = 0;
  for (Operation &op : fused.getBody().front()) {
    EXPECT_FALSE(isFusibleElementwiseOp(&op)) << print(&op);
    fusions += isa<FusionOp>(op);
  }
  // The existing fusion, exp + neg, and sub.
  EXPECT_EQ(fusions, 3) << print(fused);
  std::vector<Tensor> args = randomArgs(original, 7);
  std::vector<Tensor> expected = *evaluate(original, args);
  std::vector<Tensor> actual = *evaluate(fused, args);
  ASSERT_EQ(actual.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(bitwiseEqual(expected[i], actual[i]));
  // The existing fusion evaluates like its body written out.
  Tensor a = args[0], b = args[1];
  for (int64_t i = 0; i < 6; ++i) {
    float sum = static_cast<float>(a.getDouble(i) + b.getDouble(i % 3));
    float exp = static_cast<float>(std::exp(double(sum * 2.0f)));
    EXPECT_EQ(actual[0].getDouble(i), -double(exp));
  }
}

TEST_F(FuseTest, MultiBlockFunctionIsAnError) {
  func::FuncOp func = parse(R"(
func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
^bb1:
  %b = sharc.neg %a : tensor<2xf32>
  return %b : tensor<2xf32>
}
)");
  ASSERT_TRUE(func);
  PassManager pm(&context);
  pm.addPass(createFusePass());
  EXPECT_TRUE(failed(pm.run(func->getParentOfType<ModuleOp>())));
  EXPECT_NE(diagnostics.find("fusion needs a single block"), std::string::npos)
      << diagnostics;
}

} // namespace
