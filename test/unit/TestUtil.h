//===- TestUtil.h - helpers of the sharc unit tests -------------*- C++ -*-===//

#ifndef SHARC_TEST_UNIT_TESTUTIL_H
#define SHARC_TEST_UNIT_TESTUTIL_H

#include "ir/Evaluator.h"
#include "ir/Tensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace sharc {
/// Lets gtest print tensors in failure messages.
void PrintTo(const Tensor &tensor, std::ostream *os);
} // namespace sharc

namespace sharc::test {

/// A fixture with a context that loads the sharc and func dialects and
/// captures every diagnostic into `diagnostics`.
class IRTest : public ::testing::Test {
protected:
  IRTest();

  /// Parses `text` and returns its function `name` (null after reporting a
  /// test failure when parsing fails).
  mlir::func::FuncOp parse(llvm::StringRef text, llvm::StringRef name = "main");
  /// Parses `text` and evaluates @main, expecting success.
  std::vector<Tensor> run(llvm::StringRef text, std::vector<Tensor> args);
  /// Parses `text` and evaluates @main, expecting failure; returns the
  /// diagnostics.
  std::string runFailing(llvm::StringRef text, std::vector<Tensor> args);

  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  std::string diagnostics;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
};

/// The MLIR spelling of a tensor type, e.g. "tensor<2x3xf32>".
std::string tensorType(llvm::ArrayRef<int64_t> shape, llvm::StringRef element);

/// A value of a randomly generated test function: its SSA name, shape and
/// element type ("f32", "i1", ...).
struct GeneratedValue {
  std::string name;
  std::vector<int64_t> shape;
  std::string element;

  std::string type() const { return tensorType(shape, element); }
  bool isFloat() const { return element[0] == 'f'; }
};

/// The text of `func.func @main(ARGS) -> (...)` with `body` (lines of ops)
/// returning `returned`.
std::string mainFunction(const std::string &args, const std::string &body,
                         llvm::ArrayRef<const GeneratedValue *> returned);

/// A random straight-line function @main of exp, add, mul, broadcast, cast
/// and constants, each op reading random earlier values (two arguments,
/// the last value and some others returned).
std::string randomStraightLineFunction(std::mt19937 &rng);

/// `text` with each "$i" replaced by `args[i]` (i < 10).
std::string substitute(llvm::StringRef text, llvm::ArrayRef<std::string> args);

/// A tensor with the given elements (stored with setDouble).
Tensor makeTensor(DType type, llvm::ArrayRef<int64_t> shape,
                  llvm::ArrayRef<double> values);
/// A tensor of uniform random values in [low, high), rounded to the dtype
/// (integers: truncated).
Tensor randomTensor(DType type, llvm::ArrayRef<int64_t> shape, unsigned seed,
                    double low = -1, double high = 1);

/// Expects every element of `actual` to be within `tolerance` (absolute plus
/// relative) of `expected`; NaN matches NaN.
void expectClose(const Tensor &actual, llvm::ArrayRef<double> expected,
                 double tolerance, const char *what = "");

/// `@main_grad` of loss = sum(x * (w + c)) + b * b (x: 2x3, trainable w: 3 and
/// b: scalar, frozen c: 3) in the shape sharc-autodiff produces, with the
/// gradients of seed * loss written by hand, in element type `element`.
std::string toyGradModel(llvm::StringRef element);

/// Row-major linear index of `index` in `shape`.
int64_t linearIndex(llvm::ArrayRef<int64_t> shape,
                    llvm::ArrayRef<int64_t> index);

} // namespace sharc::test

#endif // SHARC_TEST_UNIT_TESTUTIL_H
