//===- TestUtil.cpp - helpers of the sharc unit tests ---------------------===//

#include "TestUtil.h"

#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"

#include <cmath>
#include <random>

using namespace mlir;

void sharc::PrintTo(const Tensor &tensor, std::ostream *os) {
  *os << tensor.describe() << " {";
  for (int64_t i = 0; i < tensor.numElements() && i < 16; ++i)
    *os << (i ? ", " : "") << tensor.getDouble(i);
  *os << (tensor.numElements() > 16 ? ", ...}" : "}");
}

namespace sharc::test {

std::string tensorType(ArrayRef<int64_t> shape, StringRef element) {
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += std::to_string(d) + "x";
  return text + element.str() + ">";
}

IRTest::IRTest() {
  context.loadDialect<SharcDialect, func::FuncDialect>();
  handler = std::make_unique<ScopedDiagnosticHandler>(
      &context, [this](Diagnostic &diag) {
        diagnostics += diag.str();
        for (Diagnostic &note : diag.getNotes())
          diagnostics += " [note: " + note.str() + "]";
        diagnostics += "\n";
        return success();
      });
}

func::FuncOp IRTest::parse(StringRef text, StringRef name) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module) {
    ADD_FAILURE() << "parse failed:\n" << diagnostics << "\n" << text.str();
    return {};
  }
  auto func = module->lookupSymbol<func::FuncOp>(name);
  if (!func)
    ADD_FAILURE() << "no function @" << name.str();
  modules.push_back(std::move(module));
  return func;
}

std::vector<Tensor> IRTest::run(StringRef text, std::vector<Tensor> args) {
  func::FuncOp func = parse(text);
  if (!func)
    return {};
  FailureOr<std::vector<Tensor>> results = evaluate(func, args);
  if (failed(results)) {
    ADD_FAILURE() << "evaluation failed:\n" << diagnostics;
    return {};
  }
  return *results;
}

std::string IRTest::runFailing(StringRef text, std::vector<Tensor> args) {
  func::FuncOp func = parse(text);
  if (!func)
    return "";
  diagnostics.clear();
  EXPECT_TRUE(failed(evaluate(func, args))) << "evaluation should fail";
  return diagnostics;
}

std::string substitute(StringRef text, ArrayRef<std::string> args) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] >= '0' &&
        text[i + 1] <= '9' && size_t(text[i + 1] - '0') < args.size()) {
      out += args[text[i + 1] - '0'];
      ++i;
      continue;
    }
    out += text[i];
  }
  return out;
}

Tensor makeTensor(DType type, ArrayRef<int64_t> shape,
                  ArrayRef<double> values) {
  Tensor t(type, shape);
  EXPECT_EQ(t.numElements(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(i, values[i]);
  return t;
}

Tensor randomTensor(DType type, ArrayRef<int64_t> shape, unsigned seed,
                    double low, double high) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(low, high);
  Tensor t(type, shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.setDouble(i, dist(gen));
  return t;
}

void expectClose(const Tensor &actual, ArrayRef<double> expected,
                 double tolerance, const char *what) {
  ASSERT_EQ(actual.numElements(), static_cast<int64_t>(expected.size()))
      << what;
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    double a = actual.getDouble(i), e = expected[i];
    bool ok =
        std::isnan(e)
            ? std::isnan(a)
            : (a == e || std::fabs(a - e) <= tolerance * (1 + std::fabs(e)));
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected "
                    << e;
  }
}

int64_t linearIndex(ArrayRef<int64_t> shape, ArrayRef<int64_t> index) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    linear = linear * shape[d] + index[d];
  return linear;
}

std::string toyGradModel(StringRef element) {
  return substitute(R"mlir(
func.func @main_grad(
    %w: tensor<3x$0> {sharc.param = #sharc.param<"w", "fc.weight">},
    %x: tensor<2x3x$0> {sharc.input = "x"},
    %c: tensor<3x$0> {sharc.param = #sharc.param<"c", "frozen">},
    %b: tensor<$0> {sharc.param = #sharc.param<"b", "fc.bias">},
    %seed: tensor<$0> {sharc.input = "loss_seed"})
    -> (tensor<$0> {sharc.output = "out"}, tensor<3x$0> {sharc.grad = "w"},
        tensor<$0> {sharc.grad = "b"}) {
  %wc = sharc.add %w, %c : (tensor<3x$0>, tensor<3x$0>) -> tensor<3x$0>
  %xw = sharc.mul %x, %wc : (tensor<2x3x$0>, tensor<3x$0>) -> tensor<2x3x$0>
  %s = sharc.reduce %xw
      {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>}
      : (tensor<2x3x$0>) -> tensor<$0>
  %bb = sharc.mul %b, %b : (tensor<$0>, tensor<$0>) -> tensor<$0>
  %loss = sharc.add %s, %bb : (tensor<$0>, tensor<$0>) -> tensor<$0>
  %xs = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>}
      : (tensor<2x3x$0>) -> tensor<3x$0>
  %dw = sharc.mul %xs, %seed : (tensor<3x$0>, tensor<$0>) -> tensor<3x$0>
  %b2 = sharc.add %b, %b : (tensor<$0>, tensor<$0>) -> tensor<$0>
  %db = sharc.mul %b2, %seed : (tensor<$0>, tensor<$0>) -> tensor<$0>
  return %loss, %dw, %db : tensor<$0>, tensor<3x$0>, tensor<$0>
}
)mlir",
                    {element.str()});
}

} // namespace sharc::test

std::string sharc::test::randomStraightLineFunction(std::mt19937 &rng) {
  auto pick = [&](size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  };
  const char *elements[] = {"f16", "f32", "f64"};
  auto randomShape = [&] {
    std::vector<int64_t> shape(pick(3));
    for (int64_t &dim : shape)
      dim = 1 + pick(40);
    return shape;
  };

  std::vector<GeneratedValue> values;
  std::string args;
  for (int i = 0; i < 2; ++i) {
    values.push_back(
        {"%arg" + std::to_string(i), randomShape(), elements[pick(3)]});
    args += (i ? ", " : "") + values.back().name + ": " + values.back().type();
  }

  std::string body;
  size_t count = 1 + pick(30);
  for (size_t i = 0; i < count; ++i) {
    const GeneratedValue &x = values[pick(values.size())];
    GeneratedValue result{"%v" + std::to_string(i), x.shape, x.element};
    std::string line = "  " + result.name + " = ";
    switch (pick(5)) {
    case 0:
      line += "sharc.exp " + x.name + " : " + x.type();
      break;
    case 1: {
      std::vector<const GeneratedValue *> sameType;
      for (const GeneratedValue &value : values)
        if (value.type() == x.type())
          sameType.push_back(&value);
      const GeneratedValue &y = *sameType[pick(sameType.size())];
      line += std::string(pick(2) ? "sharc.add " : "sharc.mul ") + x.name +
              ", " + y.name + " : (" + x.type() + ", " + y.type() + ") -> " +
              x.type();
      break;
    }
    case 2:
      result.shape.insert(result.shape.begin(), 1 + pick(4));
      line += "sharc.broadcast " + x.name + " : " + x.type() + " to " +
              result.type();
      break;
    case 3:
      result.element = elements[pick(3)];
      line +=
          "sharc.cast " + x.name + " : " + x.type() + " to " + result.type();
      break;
    default:
      result.shape = randomShape();
      line += "sharc.constant dense<1.0> : " + result.type();
      break;
    }
    body += line + "\n";
    values.push_back(result);
  }

  std::vector<const GeneratedValue *> returned = {&values.back()};
  for (size_t i = 2; i + 1 < values.size(); ++i)
    if (pick(4) == 0)
      returned.push_back(&values[i]);
  return mainFunction(args, body, returned);
}

std::string
sharc::test::mainFunction(const std::string &args, const std::string &body,
                          llvm::ArrayRef<const GeneratedValue *> returned) {
  std::string names, types;
  for (const GeneratedValue *value : returned) {
    names += (names.empty() ? "" : ", ") + value->name;
    types += (types.empty() ? "" : ", ") + value->type();
  }
  return "func.func @main(" + args + ") -> (" + types + ") {\n" + body +
         "  return " + names + " : " + types + "\n}\n";
}
