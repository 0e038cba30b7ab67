//===- EvalElementwise.cpp - elementwise sharc ops ------------------------===//
//
// Unary and broadcasting binary ops, comparisons, select and cast.  Floats are
// computed in double and rounded to the dtype once; integers are computed in
// 64-bit two's complement and wrapped to the dtype.
//
//===----------------------------------------------------------------------===//

#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"
#include "runtime/Math.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

namespace {

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename Fn> LogicalResult mapFloats(const OpCall &call, Fn fn) {
  ArrayRef<double> in = call.operand(0).floats();
  MutableArrayRef<double> out = call.result().floats();
  for (size_t i = 0; i < in.size(); ++i)
    out[i] = fn(in[i]);
  roundInPlace(call.result());
  return success();
}

template <typename FloatFn, typename IntFn>
LogicalResult mapNumeric(const OpCall &call, FloatFn floatFn, IntFn intFn) {
  if (call.operand(0).isFloat())
    return mapFloats(call, floatFn);
  ArrayRef<int64_t> in = call.operand(0).ints();
  MutableArrayRef<int64_t> out = call.result().ints();
  for (size_t i = 0; i < in.size(); ++i)
    out[i] = intFn(in[i]);
  wrapInPlace(call.result());
  return success();
}

/// -x with two's complement wrap-around.
int64_t wrappingNeg(int64_t x) {
  return static_cast<int64_t>(0 - static_cast<uint64_t>(x));
}

double gelu(double x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::tanh)
    return 0.5 * x *
           (1 + sharc::math::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

/// out[i] = fn(lhs[i'], rhs[i'']) with numpy broadcasting.
template <typename T, typename R, typename Fn>
void broadcastBinary(ArrayRef<T> lhs, ArrayRef<int64_t> lhsShape,
                     ArrayRef<T> rhs, ArrayRef<int64_t> rhsShape,
                     MutableArrayRef<R> out, ArrayRef<int64_t> outShape,
                     Fn fn) {
  SmallVector<int64_t> lhsStrides = broadcastStrides(lhsShape, outShape);
  SmallVector<int64_t> rhsStrides = broadcastStrides(rhsShape, outShape);
  stridedLoop<2>(outShape, {lhsStrides, rhsStrides}, {0, 0},
                 [&](int64_t o, std::array<int64_t, 2> at) {
                   out[o] = fn(lhs[at[0]], rhs[at[1]]);
                 });
}

/// A binary op on floats (computed in double, then rounded) or integers
/// (computed in int64, then wrapped).  `intFn` sets its `bool &` argument on a
/// run-time error, reported as `intError`.
template <typename FloatFn, typename IntFn>
LogicalResult binaryNumeric(const OpCall &call, FloatFn floatFn, IntFn intFn,
                            StringRef intError = "") {
  const Tensor &lhs = call.operand(0), &rhs = call.operand(1);
  Tensor &out = call.result();
  if (lhs.isFloat()) {
    broadcastBinary(lhs.floats(), lhs.shape(), rhs.floats(), rhs.shape(),
                    out.floats(), out.shape(), floatFn);
    roundInPlace(out);
    return success();
  }
  bool bad = false;
  broadcastBinary(lhs.ints(), lhs.shape(), rhs.ints(), rhs.shape(), out.ints(),
                  out.shape(),
                  [&](int64_t a, int64_t b) { return intFn(a, b, bad); });
  if (bad)
    return call.error() << intError;
  wrapInPlace(out);
  return success();
}

int64_t wrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
}
int64_t wrappingSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) -
                              static_cast<uint64_t>(b));
}
int64_t wrappingMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
}

/// Integer division truncating toward zero; INT64_MIN / -1 wraps.
int64_t truncatingDiv(int64_t a, int64_t b, bool &bad) {
  if (b == 0) {
    bad = true;
    return 0;
  }
  if (b == -1)
    return wrappingNeg(a);
  return a / b;
}

/// Integer power by repeated multiplication (wrapping).  A negative exponent
/// gives the truncated value of 1 / a^-e.
int64_t integerPow(int64_t base, int64_t exponent, bool &bad) {
  if (exponent < 0) {
    if (base == 0) {
      bad = true;
      return 0;
    }
    if (base == 1)
      return 1;
    if (base == -1)
      return exponent % 2 ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  for (uint64_t e = exponent; e; e >>= 1) {
    if (e & 1)
      result = wrappingMul(result, base);
    base = wrappingMul(base, base);
  }
  return result;
}

double floatMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::nan("");
  return a < b ? b : a;
}
double floatMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::nan("");
  return b < a ? b : a;
}

LogicalResult evalBool(const OpCall &call, bool isAnd) {
  const Tensor &lhs = call.operand(0), &rhs = call.operand(1);
  Tensor &out = call.result();
  broadcastBinary(lhs.ints(), lhs.shape(), rhs.ints(), rhs.shape(), out.ints(),
                  out.shape(), [&](int64_t a, int64_t b) {
                    return static_cast<int64_t>(isAnd ? a && b : a || b);
                  });
  return success();
}

LogicalResult evalCompare(const OpCall &call, ComparePredicate predicate) {
  const Tensor &lhs = call.operand(0), &rhs = call.operand(1);
  Tensor &out = call.result();
  auto run = [&](auto lhsData, auto rhsData, auto cmp) {
    broadcastBinary(lhsData, lhs.shape(), rhsData, rhs.shape(), out.ints(),
                    out.shape(), cmp);
  };
  // Dispatch on the predicate outside the element loop.
  auto dispatch = [&](auto lhsData, auto rhsData) {
    using T = typename decltype(lhsData)::value_type;
    switch (predicate) {
    case ComparePredicate::eq:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a == b; });
    case ComparePredicate::ne:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a != b; });
    case ComparePredicate::lt:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a < b; });
    case ComparePredicate::le:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a <= b; });
    case ComparePredicate::gt:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a > b; });
    case ComparePredicate::ge:
      return run(lhsData, rhsData, [](T a, T b) -> int64_t { return a >= b; });
    }
  };
  if (lhs.isFloat())
    dispatch(lhs.floats(), rhs.floats());
  else
    dispatch(lhs.ints(), rhs.ints());
  return success();
}

template <typename T>
void selectInto(const Tensor &cond, ArrayRef<T> onTrue,
                ArrayRef<int64_t> trueShape, ArrayRef<T> onFalse,
                ArrayRef<int64_t> falseShape, MutableArrayRef<T> out,
                ArrayRef<int64_t> outShape) {
  SmallVector<int64_t> condStrides = broadcastStrides(cond.shape(), outShape);
  SmallVector<int64_t> trueStrides = broadcastStrides(trueShape, outShape);
  SmallVector<int64_t> falseStrides = broadcastStrides(falseShape, outShape);
  ArrayRef<int64_t> c = cond.ints();
  stridedLoop<3>(outShape, {condStrides, trueStrides, falseStrides}, {0, 0, 0},
                 [&](int64_t o, std::array<int64_t, 3> at) {
                   out[o] = c[at[0]] ? onTrue[at[1]] : onFalse[at[2]];
                 });
}

LogicalResult evalSelect(const OpCall &call) {
  const Tensor &cond = call.operand(0), &onTrue = call.operand(1),
               &onFalse = call.operand(2);
  Tensor &out = call.result();
  if (out.isFloat())
    selectInto(cond, onTrue.floats(), onTrue.shape(), onFalse.floats(),
               onFalse.shape(), out.floats(), out.shape());
  else
    selectInto(cond, onTrue.ints(), onTrue.shape(), onFalse.ints(),
               onFalse.shape(), out.ints(), out.shape());
  return success();
}

} // namespace

std::optional<LogicalResult> eval::evalElementwiseOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      // Unary.
      .Case([&](NegOp) {
        return mapNumeric(
            call, [](double x) { return -x; }, wrappingNeg);
      })
      .Case([&](AbsOp) {
        return mapNumeric(
            call, [](double x) { return std::fabs(x); },
            [](int64_t x) { return x < 0 ? wrappingNeg(x) : x; });
      })
      .Case([&](ReluOp) {
        return mapNumeric(
            call, [](double x) { return x > 0 || std::isnan(x) ? x : 0.0; },
            [](int64_t x) { return x > 0 ? x : int64_t(0); });
      })
      .Case([&](ExpOp) {
        return mapFloats(call, [](double x) { return sharc::math::exp(x); });
      })
      .Case([&](LogOp) {
        return mapFloats(call, [](double x) { return std::log(x); });
      })
      .Case([&](SqrtOp) {
        return mapFloats(call, [](double x) { return std::sqrt(x); });
      })
      .Case([&](RsqrtOp) {
        return mapFloats(call, [](double x) { return 1 / std::sqrt(x); });
      })
      .Case([&](ErfOp) {
        return mapFloats(call, [](double x) { return std::erf(x); });
      })
      .Case([&](TanhOp) {
        return mapFloats(call, [](double x) { return sharc::math::tanh(x); });
      })
      .Case([&](SigmoidOp) {
        return mapFloats(call, [](double x) {
          return 1 / (1 + sharc::math::exp(-x));
        });
      })
      .Case([&](SinOp) {
        return mapFloats(call, [](double x) { return std::sin(x); });
      })
      .Case([&](CosOp) {
        return mapFloats(call, [](double x) { return std::cos(x); });
      })
      .Case([&](FloorOp) {
        return mapFloats(call, [](double x) { return std::floor(x); });
      })
      .Case([&](GeluOp op) {
        GeluApproximation approximation = op.getApproximation();
        return mapFloats(call,
                         [&](double x) { return gelu(x, approximation); });
      })
      .Case([&](NotOp) {
        ArrayRef<int64_t> in = call.operand(0).ints();
        MutableArrayRef<int64_t> out = call.result().ints();
        for (size_t i = 0; i < in.size(); ++i)
          out[i] = !in[i];
        return success();
      })
      .Case([&](CastOp) {
        call.result() = call.operand(0).convertTo(call.result().dtype());
        return success();
      })
      // Binary.
      .Case([&](AddOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a + b; },
            [](int64_t a, int64_t b, bool &) { return wrappingAdd(a, b); });
      })
      .Case([&](SubOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a - b; },
            [](int64_t a, int64_t b, bool &) { return wrappingSub(a, b); });
      })
      .Case([&](MulOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a * b; },
            [](int64_t a, int64_t b, bool &) { return wrappingMul(a, b); });
      })
      .Case([&](DivOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a / b; }, truncatingDiv,
            "integer division by zero");
      })
      .Case([&](PowOp) {
        return binaryNumeric(
            call, [](double a, double b) { return std::pow(a, b); }, integerPow,
            "integer zero raised to a negative power");
      })
      .Case([&](MaxOp) {
        return binaryNumeric(call, floatMax, [](int64_t a, int64_t b, bool &) {
          return std::max(a, b);
        });
      })
      .Case([&](MinOp) {
        return binaryNumeric(call, floatMin, [](int64_t a, int64_t b, bool &) {
          return std::min(a, b);
        });
      })
      .Case([&](AndOp) { return evalBool(call, /*isAnd=*/true); })
      .Case([&](OrOp) { return evalBool(call, /*isAnd=*/false); })
      .Case([&](CompareOp op) { return evalCompare(call, op.getPredicate()); })
      .Case([&](SelectOp) { return evalSelect(call); })
      .Default([](Operation *) { return Result(); });
}
