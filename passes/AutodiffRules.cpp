//===- AutodiffRules.cpp - gradient rules of the sharc ops ----------------===//
//
// One vector-Jacobian product per differentiable op.  Each rule reads the
// op's operands and results (which the backward computation may reuse) and
// the adjoints of its results, and emits the adjoint contributions of its
// operands.  Broadcasting ops sum their contributions back to each operand's
// shape with buildUnbroadcast.  docs/autodiff.md has the math.
//
//===----------------------------------------------------------------------===//

#include "passes/AutodiffRules.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>
#include <numeric>
#include <optional>

using namespace mlir;
using namespace sharc;
using namespace sharc::autodiff;

namespace {

RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// True when `value` is a float constant with no zero element.
bool isNonZeroConstant(Value value) {
  DenseFPElementsAttr attr;
  if (!matchPattern(value, m_Constant(&attr)))
    return false;
  return llvm::none_of(attr.getValues<APFloat>(),
                       [](const APFloat &v) { return v.isZero(); });
}

/// IR helpers of the backward computation.  Arithmetic broadcasts like the
/// sharc ops; rank-0 constants stretch to any shape.
class Emitter {
public:
  explicit Emitter(ImplicitLocOpBuilder &b) : b(b) {}

  /// A rank-0 constant of `like`'s element type.
  Value scalar(Value like, double value) {
    return buildSplat(
        b, RankedTensorType::get({}, typeOf(like).getElementType()), value);
  }
  Value zeros(RankedTensorType type) { return buildSplat(b, type, 0.0); }

  Value add(Value x, Value y) { return AddOp::create(b, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, x, y); }
  Value neg(Value x) { return NegOp::create(b, x); }
  Value scale(Value x, double factor) { return mul(x, scalar(x, factor)); }
  Value exp(Value x) { return ExpOp::create(b, x); }

  Value compare(Value x, Value y, ComparePredicate predicate) {
    return CompareOp::create(b, x, y, predicate);
  }
  Value compare(Value x, ComparePredicate predicate, double value) {
    return compare(x, scalar(x, value), predicate);
  }
  Value select(Value condition, Value onTrue, Value onFalse) {
    return SelectOp::create(b, condition, onTrue, onFalse);
  }
  /// `value` where `condition` holds, zero elsewhere (broadcasting).
  Value where(Value condition, Value value) {
    return select(condition, value, scalar(value, 0.0));
  }
  /// 1 where `condition` holds, 0 elsewhere, as `like`'s element type.
  Value indicator(Value condition, Value like) {
    return select(condition, scalar(like, 1.0), scalar(like, 0.0));
  }

  Value reduce(Value x, ReduceKind kind, ArrayRef<int64_t> axes,
               bool keepDims) {
    return ReduceOp::create(b, x, kind, axes, keepDims);
  }
  Value matmul(Value x, Value y, bool transposeX, bool transposeY) {
    return MatmulOp::create(b, x, y, transposeX, transposeY);
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    auto type = typeOf(x);
    if (type.getShape() == shape)
      return x;
    return ReshapeOp::create(
        b, RankedTensorType::get(shape, type.getElementType()), x);
  }
  Value broadcastTo(Value x, ArrayRef<int64_t> shape) {
    auto type = typeOf(x);
    if (type.getShape() == shape)
      return x;
    return BroadcastOp::create(
        b, RankedTensorType::get(shape, type.getElementType()), x);
  }
  Value unbroadcast(Value grad, Value operand) {
    return buildUnbroadcast(b, grad, typeOf(operand));
  }

  ImplicitLocOpBuilder &b;
};

/// The operands and result adjoints of one op being differentiated; rules
/// set `grads[i]` for the wanted operands.
struct Rule {
  Emitter &e;
  Operation *op;
  ArrayRef<Value> resultGrads;
  ArrayRef<bool> wanted;
  SmallVectorImpl<Value> &grads;

  Value x(unsigned i = 0) const { return op->getOperand(i); }
  Value z(unsigned i = 0) const { return op->getResult(i); }
  Value g(unsigned i = 0) const { return resultGrads[i]; }
  /// Sets operand i's contribution when it is wanted, building it lazily.
  template <typename Fn> void set(unsigned i, Fn build) {
    if (wanted[i])
      grads[i] = build();
  }
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// d/dx of an elementwise unary op as a function of x, the result z and the
/// adjoint g: the operand's adjoint is g * derivative (or a direct formula).
void unaryRule(Rule &r) {
  Emitter &e = r.e;
  Value x = r.x(), z = r.z(), g = r.g();
  Value grad =
      llvm::TypeSwitch<Operation *, Value>(r.op)
          .Case([&](NegOp) { return e.neg(g); })
          .Case([&](AbsOp) {
            // sign(x) * g, zero at 0 (PyTorch).
            return e.select(
                e.compare(x, ComparePredicate::gt, 0.0), g,
                e.where(e.compare(x, ComparePredicate::lt, 0.0), e.neg(g)));
          })
          .Case([&](ReluOp) {
            // z > 0 exactly where x > 0: reading the result leaves the
            // pre-activation dead, so act(matmul + bias) is one GEMM.
            return e.where(e.compare(z, ComparePredicate::gt, 0.0), g);
          })
          .Case([&](ExpOp) { return e.mul(g, z); })
          .Case([&](LogOp) { return e.div(g, x); })
          .Case([&](SqrtOp) { return e.div(e.scale(g, 0.5), z); })
          .Case([&](RsqrtOp) {
            // d/dx x^-1/2 = -1/2 x^-3/2 = -z / (2x).
            return e.scale(e.div(e.mul(g, z), x), -0.5);
          })
          .Case([&](ErfOp) {
            return e.mul(
                g, e.scale(e.exp(e.neg(e.mul(x, x))), 2.0 / std::sqrt(M_PI)));
          })
          .Case([&](TanhOp) { return e.sub(g, e.mul(e.mul(g, z), z)); })
          .Case([&](SigmoidOp) {
            return e.mul(e.mul(g, z), e.sub(e.scalar(z, 1.0), z));
          })
          .Case([&](SinOp) { return e.mul(g, CosOp::create(e.b, x)); })
          .Case([&](CosOp) { return e.neg(e.mul(g, SinOp::create(e.b, x))); })
          // asin' = 1 / sqrt(1 - x^2), acos' its negation, atan' =
          // 1 / (1 + x^2); asinh' = 1 / sqrt(x^2 + 1), acosh' =
          // 1 / sqrt(x^2 - 1), atanh' = 1 / (1 - x^2).
          .Case([&](AsinOp) {
            return e.div(
                g, SqrtOp::create(e.b, e.sub(e.scalar(x, 1.0), e.mul(x, x))));
          })
          .Case([&](AcosOp) {
            return e.neg(e.div(
                g, SqrtOp::create(e.b, e.sub(e.scalar(x, 1.0), e.mul(x, x)))));
          })
          .Case([&](AtanOp) {
            return e.div(g, e.add(e.scalar(x, 1.0), e.mul(x, x)));
          })
          .Case([&](AsinhOp) {
            return e.div(
                g, SqrtOp::create(e.b, e.add(e.mul(x, x), e.scalar(x, 1.0))));
          })
          .Case([&](AcoshOp) {
            return e.div(
                g, SqrtOp::create(e.b, e.sub(e.mul(x, x), e.scalar(x, 1.0))));
          })
          .Case([&](AtanhOp) {
            return e.div(g, e.sub(e.scalar(x, 1.0), e.mul(x, x)));
          })
          .Case([&](GeluOp op) -> Value {
            if (op.getApproximation() == GeluApproximation::none) {
              // Phi(x) + x phi(x).
              Value cdf = e.scale(
                  e.add(e.scalar(x, 1.0),
                        ErfOp::create(e.b, e.scale(x, 1.0 / std::sqrt(2.0)))),
                  0.5);
              Value pdf = e.scale(e.exp(e.scale(e.mul(x, x), -0.5)),
                                  1.0 / std::sqrt(2.0 * M_PI));
              return e.mul(g, e.add(cdf, e.mul(x, pdf)));
            }
            // t = tanh(c (x + a x^3)):
            // 1/2 (1 + t) + 1/2 x (1 - t^2) c (1 + 3 a x^2).
            constexpr double a = 0.044715;
            double c = std::sqrt(2.0 / M_PI);
            Value x2 = e.mul(x, x);
            Value t = TanhOp::create(
                e.b, e.scale(e.add(x, e.scale(e.mul(x2, x), a)), c));
            Value one = e.scalar(x, 1.0);
            Value inner = e.add(one, e.scale(x2, 3 * a));
            Value slope =
                e.mul(e.mul(x, e.sub(one, e.mul(t, t))), e.scale(inner, c));
            return e.mul(g, e.scale(e.add(e.add(one, t), slope), 0.5));
          })
          .Case([&](CastOp) -> Value {
            return CastOp::create(e.b, typeOf(x), g);
          });
  r.grads[0] = grad;
}

/// Binary broadcasting arithmetic: full-shape contributions, then unbroadcast.
void binaryRule(Rule &r) {
  Emitter &e = r.e;
  Value x = r.x(0), y = r.x(1), z = r.z(), g = r.g();
  llvm::TypeSwitch<Operation *>(r.op)
      .Case([&](AddOp) {
        r.set(0, [&] { return e.unbroadcast(g, x); });
        r.set(1, [&] { return e.unbroadcast(g, y); });
      })
      .Case([&](SubOp) {
        r.set(0, [&] { return e.unbroadcast(g, x); });
        r.set(1, [&] { return e.neg(e.unbroadcast(g, y)); });
      })
      .Case([&](MulOp) {
        r.set(0, [&] { return e.unbroadcast(e.mul(g, y), x); });
        r.set(1, [&] { return e.unbroadcast(e.mul(g, x), y); });
      })
      .Case([&](DivOp) {
        r.set(0, [&] { return e.unbroadcast(e.div(g, y), x); });
        // d(x/y)/dy = -z/y.
        r.set(1,
              [&] { return e.neg(e.unbroadcast(e.div(e.mul(g, z), y), y)); });
      })
      .Case([&](PowOp) {
        // y x^(y-1), zero where y == 0 (PyTorch).
        r.set(0, [&] {
          Value slope =
              e.mul(y, PowOp::create(e.b, x, e.sub(y, e.scalar(y, 1.0))));
          if (!isNonZeroConstant(y))
            slope = e.select(e.compare(y, ComparePredicate::eq, 0.0),
                             e.scalar(y, 0.0), slope);
          return e.unbroadcast(e.mul(g, slope), x);
        });
        // z log(x), zero where x == 0 and y >= 0 (PyTorch).
        r.set(1, [&] {
          Value slope = e.mul(z, LogOp::create(e.b, x));
          Value flat =
              AndOp::create(e.b, e.compare(x, ComparePredicate::eq, 0.0),
                            e.compare(y, ComparePredicate::ge, 0.0));
          slope = e.select(flat, e.scalar(y, 0.0), slope);
          return e.unbroadcast(e.mul(g, slope), y);
        });
      })
      .Case<MaxOp, MinOp>([&](Operation *op) {
        // x's share: 1 where it wins, 1/2 on ties, 0 where y wins
        // (torch.maximum/minimum); y gets the rest.
        ComparePredicate wins =
            isa<MaxOp>(op) ? ComparePredicate::gt : ComparePredicate::lt;
        Value share =
            e.select(e.compare(x, y, ComparePredicate::eq), e.scalar(g, 0.5),
                     e.indicator(e.compare(x, y, wins), g));
        Value toX = e.mul(g, share);
        r.set(0, [&] { return e.unbroadcast(toX, x); });
        r.set(1, [&] { return e.unbroadcast(e.sub(g, toX), y); });
      });
}

void selectRule(Rule &r) {
  Emitter &e = r.e;
  Value condition = r.x(0), g = r.g();
  r.set(1, [&] { return e.unbroadcast(e.where(condition, g), r.x(1)); });
  r.set(2, [&] {
    return e.unbroadcast(e.select(condition, e.scalar(g, 0.0), g), r.x(2));
  });
}

//===----------------------------------------------------------------------===//
// Linear algebra, reductions, normalization
//===----------------------------------------------------------------------===//

void matmulRule(Rule &r, MatmulOp op) {
  Emitter &e = r.e;
  Value a = op.getLhs(), b = op.getRhs(), g = r.g();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  // With op(M) = M or M^T: z = op(a) op(b), so d op(a) = g op(b)^T and
  // d op(b) = op(a)^T g; a transposed operand takes the transpose.
  r.set(0, [&] {
    Value grad = ta ? e.matmul(b, g, tb, true) : e.matmul(g, b, false, !tb);
    return e.unbroadcast(grad, a);
  });
  r.set(1, [&] {
    auto at = typeOf(a), bt = typeOf(b);
    if (bt.getRank() == 2 && at.getRank() > 2 && !ta) {
      // A matrix applied to a batch (a linear layer): fold the batch into
      // the rows, so one product sums over it.
      int64_t k = at.getShape().back();
      int64_t rows = at.getNumElements() / std::max<int64_t>(k, 1);
      Value flatA = e.reshape(a, {rows, k});
      Value flatG = e.reshape(g, {rows, typeOf(g).getShape().back()});
      return tb ? e.matmul(flatG, flatA, true, false)
                : e.matmul(flatA, flatG, true, false);
    }
    Value grad = tb ? e.matmul(g, a, true, ta) : e.matmul(a, g, !ta, false);
    return e.unbroadcast(grad, b);
  });
}

void reduceRule(Rule &r, ReduceOp op) {
  Emitter &e = r.e;
  Value x = op.getOperand();
  ArrayRef<int64_t> shape = typeOf(x).getShape();
  ArrayRef<int64_t> axes = op.getAxes();
  SmallVector<int64_t> kept(shape);
  int64_t count = 1;
  for (int64_t axis : axes) {
    count *= shape[axis];
    kept[axis] = 1;
  }
  Value g = e.reshape(r.g(), kept);
  switch (op.getKind()) {
  case ReduceKind::sum:
    r.grads[0] = e.broadcastTo(g, shape);
    return;
  case ReduceKind::mean:
    r.grads[0] =
        e.broadcastTo(e.scale(g, 1.0 / static_cast<double>(count)), shape);
    return;
  case ReduceKind::max: {
    // Split evenly among the positions equal to the maximum (torch.amax).
    Value hit = e.indicator(
        e.compare(x, e.reshape(op.getResult(), kept), ComparePredicate::eq), x);
    Value hits = e.reduce(hit, ReduceKind::sum, axes, /*keepDims=*/true);
    r.grads[0] = e.mul(hit, e.div(g, hits));
    return;
  }
  }
}

void softmaxRule(Rule &r, int64_t axis, bool log) {
  Emitter &e = r.e;
  Value z = r.z(), g = r.g();
  if (log) {
    // g - softmax(x) * sum(g).
    Value total = e.reduce(g, ReduceKind::sum, {axis}, true);
    r.grads[0] = e.sub(g, e.mul(e.exp(z), total));
    return;
  }
  // z * (g - sum(g * z)).
  Value dot = e.reduce(e.mul(g, z), ReduceKind::sum, {axis}, true);
  r.grads[0] = e.mul(z, e.sub(g, dot));
}

void layerNormRule(Rule &r, LayerNormOp op) {
  Emitter &e = r.e;
  Value x = op.getOperand(), scale = op.getScale();
  Value gy = r.g(0), gMean = r.g(1), gInvStd = r.g(2);
  auto type = typeOf(x);
  SmallVector<int64_t> axes;
  int64_t size = 1;
  for (int64_t d = op.getAxis(); d < type.getRank(); ++d) {
    axes.push_back(d);
    size *= type.getDimSize(d);
  }
  double inverseSize = 1.0 / static_cast<double>(size);
  Value invStd = op.getInvStd();
  Value xhat = e.mul(e.sub(x, op.getMean()), invStd);
  if (gy) {
    r.set(1, [&] { return e.unbroadcast(e.mul(gy, xhat), scale); });
    if (Value bias = op.getBias())
      r.set(2, [&] { return e.unbroadcast(gy, bias); });
  }
  r.set(0, [&] {
    Value grad;
    auto accumulate = [&](Value term) {
      grad = grad ? e.add(grad, term) : term;
    };
    if (gy) {
      // inv_std * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)).
      Value gxhat = e.mul(gy, scale);
      Value mean1 = e.reduce(gxhat, ReduceKind::mean, axes, true);
      Value mean2 = e.reduce(e.mul(gxhat, xhat), ReduceKind::mean, axes, true);
      accumulate(e.mul(invStd, e.sub(e.sub(gxhat, mean1), e.mul(xhat, mean2))));
    }
    if (gMean)
      accumulate(e.broadcastTo(e.scale(gMean, inverseSize), type.getShape()));
    if (gInvStd) {
      // d inv_std / dx = -inv_std^2 xhat / size.
      Value factor = e.mul(gInvStd, e.mul(invStd, invStd));
      accumulate(e.mul(e.scale(factor, -inverseSize), xhat));
    }
    return grad;
  });
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void dataRule(Rule &r) {
  Emitter &e = r.e;
  Value g = r.g();
  llvm::TypeSwitch<Operation *>(r.op)
      .Case([&](ReshapeOp op) {
        r.grads[0] = e.reshape(g, typeOf(op.getOperand()).getShape());
      })
      .Case([&](TransposeOp op) {
        ArrayRef<int64_t> perm = op.getPermutation();
        SmallVector<int64_t> inverse(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          inverse[p] = i;
        r.grads[0] = TransposeOp::create(e.b, g, inverse);
      })
      .Case([&](BroadcastOp op) {
        r.grads[0] = e.unbroadcast(g, op.getOperand());
      })
      .Case([&](SliceOp op) {
        r.grads[0] =
            InsertSliceOp::create(e.b, g, e.zeros(typeOf(op.getOperand())),
                                  op.getStart(), op.getStride());
      })
      .Case([&](InsertSliceOp op) {
        auto source = typeOf(op.getSource());
        r.set(0, [&] {
          return SliceOp::create(e.b, source, g, op.getStart(), op.getStride());
        });
        r.set(1, [&] {
          return InsertSliceOp::create(e.b, e.zeros(source), g, op.getStart(),
                                       op.getStride());
        });
      })
      .Case([&](ConcatOp op) {
        int64_t axis = op.getAxis();
        int64_t rank = typeOf(g).getRank();
        int64_t offset = 0;
        for (auto [i, input] : llvm::enumerate(op.getInputs())) {
          auto type = typeOf(input);
          SmallVector<int64_t> start(rank, 0), stride(rank, 1);
          start[axis] = offset;
          r.set(i,
                [&] { return SliceOp::create(e.b, type, g, start, stride); });
          offset += type.getDimSize(axis);
        }
      })
      .Case([&](GatherOp op) {
        r.grads[0] = ScatterAddOp::create(e.b, e.zeros(typeOf(op.getData())),
                                          op.getIndices(), g, op.getAxis());
      })
      .Case([&](ScatterAddOp op) {
        r.set(0, [&] { return g; });
        r.set(2, [&] {
          return GatherOp::create(e.b, g, op.getIndices(), op.getAxis());
        });
      })
      .Case([&](TriluOp op) {
        r.grads[0] = TriluOp::create(e.b, g, op.getUpper(), op.getDiagonal());
      });
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// nll_loss (`fromLogits` false) and cross_entropy (true).  Per position p
/// with target t and weight w_t (0 where ignored), loss_p = -w_t lp[t] with
/// lp the input (nll_loss) or log_softmax(logits) (cross_entropy); the
/// reduction combines them (mean: divided by W = sum of w_t).
void lossRule(Rule &r, Value input, Value target, Value weight,
              LossReduction reduction, std::optional<int64_t> ignoreIndex,
              bool fromLogits) {
  Emitter &e = r.e;
  Value g = r.g();
  auto inputType = typeOf(input), targetType = typeOf(target);
  // [N, 1, d...]: a per-position value next to the class dimension.
  SmallVector<int64_t> keptShape(targetType.getShape());
  keptShape.insert(keptShape.begin() + 1, 1);

  // Positions whose target is not ignored (an ignore_index the target type
  // cannot hold matches nothing).
  Value valid;
  unsigned width = targetType.getElementTypeBitWidth();
  if (ignoreIndex && llvm::isIntN(width, *ignoreIndex)) {
    Type element = targetType.getElementType();
    Value ignored = ConstantOp::create(
        e.b, DenseElementsAttr::get(RankedTensorType::get({}, element),
                                    IntegerAttr::get(element, *ignoreIndex)));
    valid = e.compare(target, ignored, ComparePredicate::ne);
  }
  Value safeTarget =
      valid ? e.select(valid, target, e.scalar(target, 0.0)) : target;
  // w_t per position; null stands for 1 everywhere.
  Value weights;
  if (weight)
    weights = GatherOp::create(e.b, weight, safeTarget, 0);
  if (valid)
    weights = e.select(valid, weights ? weights : e.scalar(input, 1.0),
                       e.scalar(input, 0.0));
  // d(result . g)/d(loss_p): g per position, or the scalar g (/ W).
  Value perPosition = g;
  if (reduction == LossReduction::mean) {
    SmallVector<int64_t> all(targetType.getRank());
    std::iota(all.begin(), all.end(), 0);
    Value total =
        weights
            ? e.reduce(weights, ReduceKind::sum, all, false)
            : e.scalar(input, static_cast<double>(targetType.getNumElements()));
    perPosition = e.div(g, total);
  }
  Value isTarget = e.compare(
      IotaOp::create(e.b,
                     RankedTensorType::get(inputType.getShape(),
                                           targetType.getElementType()),
                     1),
      e.reshape(target, keptShape), ComparePredicate::eq);

  r.set(0, [&] {
    // d loss_p / d lp[c] = -w_t [c == t]; through log_softmax,
    // d lp[t] / d x[c] = [c == t] - softmax(x)[c].
    Value coefficient =
        e.neg(weights ? e.mul(weights, perPosition) : perPosition);
    if (typeOf(coefficient).getRank() > 0)
      coefficient = e.reshape(coefficient, keptShape);
    Value grad = e.where(isTarget, coefficient);
    if (fromLogits)
      grad = e.sub(grad, e.mul(coefficient, SoftmaxOp::create(e.b, input, 1)));
    return grad;
  });
  if (!weight)
    return;
  r.set(2, [&] {
    // d result / d w_c = sum over valid p with t = c of -lp[t] (- result for
    // mean) times perPosition.
    Value logProbs = fromLogits ? LogSoftmaxOp::create(e.b, input, 1) : input;
    Value targetLogProb =
        e.reduce(e.where(isTarget, logProbs), ReduceKind::sum, {1}, false);
    Value slope = e.neg(targetLogProb);
    if (reduction == LossReduction::mean)
      slope = e.sub(slope, r.z());
    slope = e.mul(slope, perPosition);
    if (valid)
      slope = e.where(valid, slope);
    return ScatterAddOp::create(e.b, e.zeros(typeOf(weight)), safeTarget, slope,
                                0);
  });
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

void windowRule(Rule &r) {
  Emitter &e = r.e;
  Value g = r.g();
  llvm::TypeSwitch<Operation *>(r.op)
      .Case([&](Conv2DOp op) {
        r.set(0, [&] {
          return Conv2DInputGradOp::create(
              e.b, typeOf(op.getInput()), g, op.getWeight(), op.getStrides(),
              op.getPadding(), op.getDilations(), op.getGroups());
        });
        r.set(1, [&] {
          return Conv2DWeightGradOp::create(
              e.b, typeOf(op.getWeight()), op.getInput(), g, op.getStrides(),
              op.getPadding(), op.getDilations(), op.getGroups());
        });
        if (op.getBias())
          r.set(2, [&] {
            return e.reduce(g, ReduceKind::sum, {0, 2, 3}, false);
          });
      })
      .Case([&](Conv2DInputGradOp op) {
        // The transposed convolution's gradients: conv2d of g (its input),
        // and conv2d's weight gradient with g as the input.
        r.set(0, [&] {
          return Conv2DOp::create(e.b, g, op.getWeight(), Value(),
                                  op.getStrides(), op.getPadding(),
                                  op.getDilations(), op.getGroups());
        });
        r.set(1, [&] {
          return Conv2DWeightGradOp::create(e.b, typeOf(op.getWeight()), g,
                                            op.getOutputGrad(), op.getStrides(),
                                            op.getPadding(), op.getDilations(),
                                            op.getGroups());
        });
      })
      .Case([&](MaxPool2DOp op) {
        r.grads[0] = MaxPool2DGradOp::create(
            e.b, op.getInput(), g, op.getKernel(), op.getStrides(),
            op.getPadding(), op.getDilations(), op.getCeilMode());
      })
      .Case([&](AvgPool2DOp op) {
        r.grads[0] = AvgPool2DGradOp::create(
            e.b, typeOf(op.getInput()), g, op.getKernel(), op.getStrides(),
            op.getPadding(), op.getCeilMode(), op.getCountIncludePad());
      });
}

/// The gradient rule of `op`, if it has one: the one list of the
/// differentiable ops.
std::optional<std::function<void(Rule &)>> ruleOf(Operation *op) {
  using Fn = std::function<void(Rule &)>;
  using Result = std::optional<Fn>;
  return llvm::TypeSwitch<Operation *, Result>(op)
      // Piecewise constant: no contribution.
      .Case([](FloorOp) { return Fn([](Rule &) {}); })
      .Case<NegOp, AbsOp, ReluOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ErfOp, TanhOp,
            SigmoidOp, SinOp, CosOp, AsinOp, AcosOp, AtanOp, AsinhOp, AcoshOp,
            AtanhOp, GeluOp, CastOp>([](Operation *) { return Fn(unaryRule); })
      .Case<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp>(
          [](Operation *) { return Fn(binaryRule); })
      .Case([](SelectOp) { return Fn(selectRule); })
      .Case([](MatmulOp) {
        return Fn([](Rule &r) { matmulRule(r, cast<MatmulOp>(r.op)); });
      })
      .Case([](ReduceOp) {
        return Fn([](Rule &r) { reduceRule(r, cast<ReduceOp>(r.op)); });
      })
      .Case([](SoftmaxOp) {
        return Fn([](Rule &r) {
          softmaxRule(r, cast<SoftmaxOp>(r.op).getAxis(), /*log=*/false);
        });
      })
      .Case([](LogSoftmaxOp) {
        return Fn([](Rule &r) {
          softmaxRule(r, cast<LogSoftmaxOp>(r.op).getAxis(), /*log=*/true);
        });
      })
      .Case([](LayerNormOp) {
        return Fn([](Rule &r) { layerNormRule(r, cast<LayerNormOp>(r.op)); });
      })
      .Case<ReshapeOp, TransposeOp, BroadcastOp, SliceOp, InsertSliceOp,
            ConcatOp, GatherOp, ScatterAddOp, TriluOp>(
          [](Operation *) { return Fn(dataRule); })
      .Case([](NllLossOp) {
        return Fn([](Rule &r) {
          auto loss = cast<NllLossOp>(r.op);
          lossRule(r, loss.getInput(), loss.getTarget(), loss.getWeight(),
                   loss.getReduction(), loss.getIgnoreIndex(),
                   /*fromLogits=*/false);
        });
      })
      .Case([](CrossEntropyOp) {
        return Fn([](Rule &r) {
          auto loss = cast<CrossEntropyOp>(r.op);
          lossRule(r, loss.getLogits(), loss.getTarget(), loss.getWeight(),
                   loss.getReduction(), loss.getIgnoreIndex(),
                   /*fromLogits=*/true);
        });
      })
      .Case<Conv2DOp, Conv2DInputGradOp, MaxPool2DOp, AvgPool2DOp>(
          [](Operation *) { return Fn(windowRule); })
      .Default([](Operation *) { return Result(); });
}

} // namespace

bool autodiff::hasGradientRule(Operation *op) { return ruleOf(op).has_value(); }

void autodiff::buildOperandGrads(ImplicitLocOpBuilder &builder, Operation *op,
                                 ArrayRef<Value> resultGrads,
                                 ArrayRef<bool> wanted,
                                 SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(op->getNumOperands(), Value());
  std::optional<std::function<void(Rule &)>> rule = ruleOf(op);
  assert(rule && "buildOperandGrads needs an op with a gradient rule");
  Emitter e(builder);
  Rule r{e, op, resultGrads, wanted, operandGrads};
  (*rule)(r);
}

Value autodiff::buildSplat(ImplicitLocOpBuilder &builder, RankedTensorType type,
                           double value) {
  Type element = type.getElementType();
  Attribute scalar =
      isa<FloatType>(element)
          ? Attribute(FloatAttr::get(element, value))
          : Attribute(IntegerAttr::get(element, static_cast<int64_t>(value)));
  return ConstantOp::create(builder, DenseElementsAttr::get(type, scalar));
}

Value autodiff::buildUnbroadcast(ImplicitLocOpBuilder &builder, Value grad,
                                 RankedTensorType type) {
  ArrayRef<int64_t> from = typeOf(grad).getShape(), to = type.getShape();
  size_t leading = from.size() - to.size();
  SmallVector<int64_t> axes;
  for (size_t d = 0; d < from.size(); ++d)
    if (d < leading || (to[d - leading] == 1 && from[d] != 1))
      axes.push_back(d);
  Value sum = grad;
  if (!axes.empty())
    sum = ReduceOp::create(builder, grad, ReduceKind::sum, axes,
                           /*keep_dims=*/false);
  if (typeOf(sum).getShape() != to)
    sum = ReshapeOp::create(builder, type, sum);
  return sum;
}
