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

using sharc::math::wrapAdd;
using sharc::math::wrapMul;
using sharc::math::wrapNeg;
using sharc::math::wrapSub;

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
            call, [](double x) { return -x; }, wrapNeg);
      })
      .Case([&](AbsOp) {
        return mapNumeric(
            call, [](double x) { return std::fabs(x); },
            [](int64_t x) { return x < 0 ? wrapNeg(x) : x; });
      })
      .Case([&](ReluOp) {
        return mapNumeric(call, sharc::math::relu,
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
        return mapFloats(call, [](double x) { return sharc::math::erf(x); });
      })
      .Case([&](TanhOp) {
        return mapFloats(call, [](double x) { return sharc::math::tanh(x); });
      })
      .Case([&](SigmoidOp) { return mapFloats(call, sharc::math::sigmoid); })
      .Case([&](AsinOp) {
        return mapFloats(call, [](double x) { return std::asin(x); });
      })
      .Case([&](AcosOp) {
        return mapFloats(call, [](double x) { return std::acos(x); });
      })
      .Case([&](AtanOp) {
        return mapFloats(call, [](double x) { return std::atan(x); });
      })
      .Case([&](AsinhOp) {
        return mapFloats(call, [](double x) { return std::asinh(x); });
      })
      .Case([&](AcoshOp) {
        return mapFloats(call, [](double x) { return std::acosh(x); });
      })
      .Case([&](AtanhOp) {
        return mapFloats(call, [](double x) { return std::atanh(x); });
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
        return op.getApproximation() == GeluApproximation::tanh
                   ? mapFloats(call, sharc::math::geluTanh)
                   : mapFloats(call, sharc::math::geluErf);
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
            [](int64_t a, int64_t b, bool &) { return wrapAdd(a, b); });
      })
      .Case([&](SubOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a - b; },
            [](int64_t a, int64_t b, bool &) { return wrapSub(a, b); });
      })
      .Case([&](MulOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a * b; },
            [](int64_t a, int64_t b, bool &) { return wrapMul(a, b); });
      })
      .Case([&](DivOp) {
        return binaryNumeric(
            call, [](double a, double b) { return a / b; },
            sharc::math::truncDiv, "integer division by zero");
      })
      .Case([&](PowOp) {
        return binaryNumeric(
            call, [](double a, double b) { return std::pow(a, b); },
            sharc::math::ipow, "integer zero raised to a negative power");
      })
      .Case([&](MaxOp) {
        return binaryNumeric(
            call, sharc::math::maxNan,
            [](int64_t a, int64_t b, bool &) { return std::max(a, b); });
      })
      .Case([&](MinOp) {
        return binaryNumeric(
            call, sharc::math::minNan,
            [](int64_t a, int64_t b, bool &) { return std::min(a, b); });
      })
      .Case([&](AndOp) { return evalBool(call, /*isAnd=*/true); })
      .Case([&](OrOp) { return evalBool(call, /*isAnd=*/false); })
      .Case([&](CompareOp op) { return evalCompare(call, op.getPredicate()); })
      .Case([&](SelectOp) { return evalSelect(call); })
      .Default([](Operation *) { return Result(); });
}
