//===- EvalLinalg.cpp - matmul, reductions, normalization, losses ---------===//
//
// matmul (through BLAS), reduce, softmax, log_softmax, layer_norm, nll_loss
// and cross_entropy.  Sums accumulate in double; each result is rounded to
// its dtype once.
//
//===----------------------------------------------------------------------===//

#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"
#include "runtime/Float16.h"
#include "runtime/Gemm.h"
#include "runtime/GemmBf16.h"
#include "runtime/Math.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <limits>
#include <type_traits>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// The geometry of one (batched) matmul.
struct MatmulShape {
  int64_t m, n, k;
  bool transposeLhs, transposeRhs;
  /// Stored column counts (leading dimensions) of the lhs and rhs matrices.
  int64_t lhsCols, rhsCols;
};

/// The batch dimensions of a matmul's operands and result, with the trailing
/// ones along which the rhs is broadcast (and the untransposed lhs is not)
/// folded into the rows: a stack of lhs matrices times one rhs is one taller
/// GEMM, as the code generator calls it (codegen/EmitLinalg.cpp), so that the
/// BLAS sees the same shapes and rounds the same way.
struct MatmulBatch {
  SmallVector<int64_t> lhs, rhs, out;
};

MatmulBatch foldBatch(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
                      MatmulShape &s) {
  MatmulBatch batch{SmallVector<int64_t>(lhs.shape().drop_back(2)),
                    SmallVector<int64_t>(rhs.shape().drop_back(2)),
                    SmallVector<int64_t>(out.shape().drop_back(2))};
  auto trailing = [](ArrayRef<int64_t> dims, size_t outRank, size_t d) {
    // Dimension d of the result, right-aligned in `dims` (1 where absent).
    size_t missing = outRank - dims.size();
    return d < missing ? int64_t(1) : dims[d - missing];
  };
  if (s.transposeLhs)
    return batch;
  size_t rank = batch.out.size();
  size_t keep = rank;
  while (keep > 0) {
    size_t d = keep - 1;
    if (trailing(batch.rhs, rank, d) != 1 ||
        trailing(batch.lhs, rank, d) != batch.out[d])
      break;
    s.m *= batch.out[d];
    --keep;
  }
  auto truncate = [&](SmallVector<int64_t> &dims) {
    size_t missing = rank - dims.size();
    dims.resize(keep > missing ? keep - missing : 0);
  };
  truncate(batch.lhs);
  truncate(batch.rhs);
  batch.out.resize(keep);
  return batch;
}

/// Calls `fn(lhsOffset, rhsOffset, outOffset)` for each matrix of the
/// broadcast batch.
template <typename Fn>
void forEachBatch(const MatmulBatch &shapes, const MatmulShape &s, Fn fn) {
  ArrayRef<int64_t> batch = shapes.out;
  SmallVector<int64_t> lhsStrides = broadcastStrides(shapes.lhs, batch);
  SmallVector<int64_t> rhsStrides = broadcastStrides(shapes.rhs, batch);
  for (int64_t &stride : lhsStrides)
    stride *= s.m * s.k;
  for (int64_t &stride : rhsStrides)
    stride *= s.k * s.n;
  stridedLoop<2>(batch, {lhsStrides, rhsStrides}, {0, 0},
                 [&](int64_t b, std::array<int64_t, 2> at) {
                   fn(at[0], at[1], b * s.m * s.n);
                 });
}

/// C = op(A) op(B) for one batch, by the BLAS calls the runtime's gemm()
/// makes (runtime/Gemm.h): blocks of rt::gemmRowBlock(m) rows, each its own
/// call on one BLAS thread, so that every sum is added in the same order.
template <typename T>
void gemm(const MatmulShape &s, const T *a, const T *b, T *c) {
  // OpenBLAS's own threading would change the sums.
  static const bool singleThreaded = (openblas_set_num_threads(1), true);
  (void)singleThreaded;
  auto transA = s.transposeLhs ? CblasTrans : CblasNoTrans;
  auto transB = s.transposeRhs ? CblasTrans : CblasNoTrans;
  int64_t lda = std::max<int64_t>(1, s.lhsCols);
  int64_t ldb = std::max<int64_t>(1, s.rhsCols);
  int64_t ldc = std::max<int64_t>(1, s.n);
  const int64_t block = rt::gemmRowBlock(s.m);
  for (int64_t row = 0; row < s.m; row += block) {
    int64_t rows = std::min(block, s.m - row);
    // Row r of op(A) is row r of A, or column r of A when transposed.
    const T *blockA = a + (s.transposeLhs ? row : row * s.lhsCols);
    if constexpr (std::is_same_v<T, double>)
      cblas_dgemm(CblasRowMajor, transA, transB, rows, s.n, s.k, 1.0, blockA,
                  lda, b, ldb, 0.0, c + row * s.n, ldc);
    else
      cblas_sgemm(CblasRowMajor, transA, transB, rows, s.n, s.k, 1.0f, blockA,
                  lda, b, ldb, 0.0f, c + row * s.n, ldc);
  }
}

/// Integer matmul with two's complement wrap-around.
void integerMatmul(const MatmulShape &s, const int64_t *a, const int64_t *b,
                   int64_t *c) {
  int64_t aRow = s.transposeLhs ? 1 : s.lhsCols;
  int64_t aCol = s.transposeLhs ? s.lhsCols : 1;
  int64_t bRow = s.transposeRhs ? 1 : s.rhsCols;
  int64_t bCol = s.transposeRhs ? s.rhsCols : 1;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t p = 0; p < s.k; ++p) {
      uint64_t x = a[i * aRow + p * aCol];
      for (int64_t j = 0; j < s.n; ++j)
        c[i * s.n + j] = static_cast<int64_t>(
            static_cast<uint64_t>(c[i * s.n + j]) +
            x * static_cast<uint64_t>(b[p * bRow + j * bCol]));
    }
}

LogicalResult evalMatmul(const OpCall &call, MatmulOp op) {
  const Tensor &lhs = call.operand(0), &rhs = call.operand(1);
  Tensor &out = call.result();
  MatmulShape s;
  s.transposeLhs = op.getTransposeLhs();
  s.transposeRhs = op.getTransposeRhs();
  s.lhsCols = lhs.shape().back();
  s.rhsCols = rhs.shape().back();
  s.m = out.shape()[out.rank() - 2];
  s.n = out.shape().back();
  s.k = s.transposeLhs ? lhs.shape()[lhs.rank() - 2] : s.lhsCols;
  if (out.numElements() == 0 || s.k == 0)
    return success();
  MatmulBatch shapes = foldBatch(lhs, rhs, out, s);

  if (!out.isFloat()) {
    forEachBatch(shapes, s, [&](int64_t a, int64_t b, int64_t c) {
      integerMatmul(s, &lhs.ints()[a], &rhs.ints()[b], &out.ints()[c]);
    });
    wrapInPlace(out);
    return success();
  }
  if (out.dtype() == DType::bf16 && rt::bf16GemmNative()) {
    // On the CPU's bf16 instructions, block by block as the runtime's gemm()
    // (runtime/GemmBf16.h): f32 sums rounded once.
    std::vector<uint16_t> a(lhs.numElements()), b(rhs.numElements());
    llvm::transform(lhs.floats(), a.begin(),
                    [](double x) { return rt::floatToBFloat16(float(x)); });
    llvm::transform(rhs.floats(), b.begin(),
                    [](double x) { return rt::floatToBFloat16(float(x)); });
    std::vector<float> c(out.numElements());
    const int64_t block = rt::gemmRowBlock(s.m);
    std::string error;
    bool failed = false;
    forEachBatch(shapes, s, [&](int64_t ao, int64_t bo, int64_t co) {
      for (int64_t row = 0; row < s.m && !failed; row += block)
        failed = !rt::bf16Product(
            s.transposeLhs, s.transposeRhs, std::min(block, s.m - row), s.n,
            s.k, &a[ao + (s.transposeLhs ? row : row * s.lhsCols)], s.lhsCols,
            &b[bo], s.rhsCols, &c[co + row * s.n], s.n, error);
    });
    if (failed)
      return call.error() << error;
    llvm::copy(c, out.floats().begin());
    roundInPlace(out);
    return success();
  }
  if (out.dtype() == DType::f32 || out.dtype() == DType::f16 ||
      out.dtype() == DType::bf16) {
    // f16 and bf16 operands (exact in float) are multiplied in f32 with f32
    // accumulation, as the GEMM libraries do, and the result rounded once.
    std::vector<float> a(lhs.floats().begin(), lhs.floats().end());
    std::vector<float> b(rhs.floats().begin(), rhs.floats().end());
    std::vector<float> c(out.numElements());
    forEachBatch(shapes, s, [&](int64_t ao, int64_t bo, int64_t co) {
      gemm<float>(s, &a[ao], &b[bo], &c[co]);
    });
    llvm::copy(c, out.floats().begin());
    roundInPlace(out);
    return success();
  }
  // f64 accumulates in double.
  forEachBatch(shapes, s, [&](int64_t a, int64_t b, int64_t c) {
    gemm<double>(s, &lhs.floats()[a], &rhs.floats()[b], &out.floats()[c]);
  });
  roundInPlace(out);
  return success();
}

//===----------------------------------------------------------------------===//
// reduce
//===----------------------------------------------------------------------===//

/// acc[j] = combine(acc[j], in[i]) for every element i of `in`, j being its
/// position in the reduced tensor (whose element strides are `accStrides`).
template <typename T, typename Combine>
void reduceInto(ArrayRef<T> in, ArrayRef<int64_t> shape,
                ArrayRef<int64_t> accStrides, std::vector<T> &acc,
                Combine combine) {
  stridedLoop<1>(shape, {accStrides}, {0},
                 [&](int64_t i, std::array<int64_t, 1> at) {
                   acc[at[0]] = combine(acc[at[0]], in[i]);
                 });
}

/// acc[o] = the sum of the elements of float tensor `in` that reduce into
/// output element o (row-major over the kept axes): the reduced elements in
/// row-major order of the reduced axes, added in sharc::math::laneSum's
/// order, as the generated reduce kernels add them.
void sumReduced(const Tensor &in, ArrayRef<int64_t> axes,
                std::vector<double> &acc) {
  ArrayRef<int64_t> shape = in.shape();
  SmallVector<int64_t> strides = rowMajorStrides(shape);
  llvm::SmallDenseSet<int64_t> reduced(axes.begin(), axes.end());
  SmallVector<int64_t> keptShape, keptStrides, sumShape, sumStrides;
  for (auto [axis, size] : llvm::enumerate(shape)) {
    bool isReduced = reduced.contains(int64_t(axis));
    (isReduced ? sumShape : keptShape).push_back(size);
    (isReduced ? sumStrides : keptStrides).push_back(strides[axis]);
  }
  std::vector<int64_t> offsets;
  stridedLoop<1>(
      sumShape, {sumStrides}, {0},
      [&](int64_t, std::array<int64_t, 1> at) { offsets.push_back(at[0]); });
  ArrayRef<double> x = in.floats();
  stridedLoop<1>(
      keptShape, {keptStrides}, {0}, [&](int64_t o, std::array<int64_t, 1> at) {
        acc[o] = sharc::math::laneSum(int64_t(offsets.size()), [&](int64_t r) {
          return x[at[0] + offsets[r]];
        });
      });
}

LogicalResult evalReduce(const OpCall &call, ReduceOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  SmallVector<int64_t> keptShape(in.shape());
  int64_t count = 1;
  for (int64_t axis : op.getAxes()) {
    count *= keptShape[axis];
    keptShape[axis] = 1;
  }
  SmallVector<int64_t> accStrides = broadcastStrides(keptShape, in.shape());
  ReduceKind kind = op.getKind();
  if (kind == ReduceKind::max && count == 0 && out.numElements() > 0)
    return call.error() << "max reduction over an empty dimension";

  if (in.isFloat()) {
    std::vector<double> acc(out.numElements(),
                            kind == ReduceKind::max ? -kInfinity : 0.0);
    if (kind == ReduceKind::max)
      reduceInto(
          in.floats(), in.shape(), accStrides, acc,
          [](double a, double x) { return std::isnan(x) || x > a ? x : a; });
    else
      sumReduced(in, op.getAxes(), acc);
    if (kind == ReduceKind::mean)
      for (double &v : acc)
        v /= static_cast<double>(count);
    llvm::copy(acc, out.floats().begin());
    roundInPlace(out);
    return success();
  }
  std::vector<int64_t> acc(
      out.numElements(),
      kind == ReduceKind::max ? std::numeric_limits<int64_t>::min() : 0);
  if (kind == ReduceKind::max)
    reduceInto(in.ints(), in.shape(), accStrides, acc,
               [](int64_t a, int64_t x) { return std::max(a, x); });
  else
    reduceInto(in.ints(), in.shape(), accStrides, acc,
               [](int64_t a, int64_t x) {
                 return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                             static_cast<uint64_t>(x));
               });
  llvm::copy(acc, out.ints().begin());
  wrapInPlace(out);
  return success();
}

//===----------------------------------------------------------------------===//
// softmax, log_softmax, layer_norm
//===----------------------------------------------------------------------===//

LogicalResult evalSoftmax(const OpCall &call, int64_t axis, bool log) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  int64_t outer = product(in.shape(), 0, axis);
  int64_t length = in.shape()[axis];
  int64_t inner = product(in.shape(), axis + 1, in.rank());
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = out.floats();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * length * inner + i;
      double max = -kInfinity;
      for (int64_t c = 0; c < length; ++c)
        max = std::max(max, x[base + c * inner]);
      double sum = sharc::math::laneSum(length, [&](int64_t c) {
        return sharc::math::exp(x[base + c * inner] - max);
      });
      double logSum = std::log(sum);
      for (int64_t c = 0; c < length; ++c) {
        double shifted = x[base + c * inner] - max;
        y[base + c * inner] =
            log ? shifted - logSum : sharc::math::exp(shifted) / sum;
      }
    }
  roundInPlace(out);
  return success();
}

/// The elements of `t` broadcast to `shape`, or `fill` everywhere if `t` is
/// null.
std::vector<double> expandTo(const Tensor *t, ArrayRef<int64_t> shape,
                             double fill) {
  std::vector<double> values(sharc::numElements(shape), fill);
  if (!t)
    return values;
  ArrayRef<double> src = t->floats();
  SmallVector<int64_t> strides = broadcastStrides(t->shape(), shape);
  stridedLoop<1>(
      shape, {strides}, {0},
      [&](int64_t o, std::array<int64_t, 1> at) { values[o] = src[at[0]]; });
  return values;
}

LogicalResult evalLayerNorm(const OpCall &call, LayerNormOp op) {
  const Tensor &in = call.operand(0);
  int64_t axis = op.getAxis();
  double epsilon = op.getEpsilon().convertToDouble();
  ArrayRef<int64_t> normalized = in.shape().drop_front(axis);
  std::vector<double> scale = expandTo(&call.operand(1), normalized, 1.0);
  std::vector<double> bias = expandTo(
      call.operands.size() > 2 ? call.operands[2] : nullptr, normalized, 0.0);
  int64_t rows = product(in.shape(), 0, axis);
  int64_t size = scale.size();
  ArrayRef<double> x = in.floats();
  MutableArrayRef<double> y = call.result(0).floats();
  MutableArrayRef<double> means = call.result(1).floats();
  MutableArrayRef<double> invStds = call.result(2).floats();
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = &x[r * size];
    double sum = sharc::math::laneSum(size, [&](int64_t j) { return row[j]; });
    double mean = sum / size;
    double squares = sharc::math::laneSum(
        size, [&](int64_t j) { return (row[j] - mean) * (row[j] - mean); });
    double invStd = 1 / std::sqrt(squares / size + epsilon);
    for (int64_t j = 0; j < size; ++j)
      y[r * size + j] = (row[j] - mean) * invStd * scale[j] + bias[j];
    means[r] = mean;
    invStds[r] = invStd;
  }
  for (unsigned i = 0; i < 3; ++i)
    roundInPlace(call.result(i));
  return success();
}

//===----------------------------------------------------------------------===//
// nll_loss, cross_entropy
//===----------------------------------------------------------------------===//

/// Shared by nll_loss (`fromLogits` false: the input holds log-probabilities)
/// and cross_entropy (`fromLogits` true: log_softmax over axis 1 first).
LogicalResult evalLoss(const OpCall &call, LossReduction reduction,
                       std::optional<uint64_t> ignoreIndex, bool fromLogits) {
  const Tensor &input = call.operand(0), &target = call.operand(1);
  const Tensor *weight = call.operands.size() > 2 ? call.operands[2] : nullptr;
  Tensor &out = call.result();
  int64_t batch = input.shape()[0], classes = input.shape()[1];
  int64_t spatial = product(input.shape(), 2, input.rank());
  ArrayRef<double> x = input.floats();
  ArrayRef<int64_t> targets = target.ints();
  double total = 0, weightSum = 0;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t d = 0; d < spatial; ++d) {
      int64_t position = n * spatial + d;
      int64_t t = targets[position];
      if (ignoreIndex && t == static_cast<int64_t>(*ignoreIndex))
        continue;
      if (t < 0 || t >= classes)
        return call.error()
               << "target " << t << " at position " << position
               << " is not a class index in [0, " << classes << ")";
      // Element c of this example's class vector.
      auto at = [&](int64_t c) { return x[(n * classes + c) * spatial + d]; };
      double logProb = at(t);
      if (fromLogits) {
        double max = -kInfinity;
        for (int64_t c = 0; c < classes; ++c)
          max = std::max(max, at(c));
        double sum = sharc::math::laneSum(
            classes, [&](int64_t c) { return sharc::math::exp(at(c) - max); });
        logProb = at(t) - max - std::log(sum);
      }
      double w = weight ? weight->floats()[t] : 1.0;
      double loss = -logProb * w;
      if (reduction == LossReduction::none)
        out.floats()[position] = loss;
      total += loss;
      weightSum += w;
    }
  if (reduction == LossReduction::sum)
    out.floats()[0] = total;
  else if (reduction == LossReduction::mean)
    out.floats()[0] = total / weightSum;
  roundInPlace(out);
  return success();
}

} // namespace

std::optional<LogicalResult> eval::evalLinalgOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      .Case([&](MatmulOp op) { return evalMatmul(call, op); })
      .Case([&](ReduceOp op) { return evalReduce(call, op); })
      .Case([&](SoftmaxOp op) {
        return evalSoftmax(call, op.getAxis(), /*log=*/false);
      })
      .Case([&](LogSoftmaxOp op) {
        return evalSoftmax(call, op.getAxis(), /*log=*/true);
      })
      .Case([&](LayerNormOp op) { return evalLayerNorm(call, op); })
      .Case([&](NllLossOp op) {
        return evalLoss(call, op.getReduction(), op.getIgnoreIndex(),
                        /*fromLogits=*/false);
      })
      .Case([&](CrossEntropyOp op) {
        return evalLoss(call, op.getReduction(), op.getIgnoreIndex(),
                        /*fromLogits=*/true);
      })
      .Default([](Operation *) { return Result(); });
}
