//===- SharcOpsTensor.cpp - verifiers of the tensor ops -------------------===//
//
// Shape functions, verifiers, folders and canonicalizations of the linear
// algebra, reduction, normalization, data movement, loss, convolution and
// pooling ops (the elementwise, fusion, loop and collective ops are in
// SharcOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "ir/OpsInternal.h"
#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace sharc;
using namespace sharc::detail;

//===----------------------------------------------------------------------===//
// Linear algebra, reductions, normalization
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto lhs = tensorType(adaptor.getLhs());
  auto rhs = tensorType(adaptor.getRhs());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc, "matmul operands must have rank >= 2, got ",
                             lhs, " and ", rhs);
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "matmul element types differ: ", lhs, " and ",
                             rhs);
  ArrayRef<int64_t> ls = lhs.getShape(), rs = rhs.getShape();
  int64_t m = ls[ls.size() - 2], kl = ls.back();
  if (adaptor.getTransposeLhs())
    std::swap(m, kl);
  int64_t kr = rs[rs.size() - 2], n = rs.back();
  if (adaptor.getTransposeRhs())
    std::swap(kr, n);
  if (kl != kr)
    return emitOptionalError(loc, "matmul contraction sizes differ: ", kl,
                             " vs ", kr, " (", lhs, " x ", rhs, ")");
  auto batch = broadcastShapes(ls.drop_back(2), rs.drop_back(2));
  if (failed(batch))
    return emitOptionalError(
        loc, "matmul batch dimensions do not broadcast: ", lhs, " x ", rhs);
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  results.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto type = tensorType(adaptor.getOperand());
  int64_t rank = type.getRank();
  SmallVector<bool> reduced(rank, false);
  for (int64_t axis : adaptor.getAxes()) {
    if (axis < 0 || axis >= rank)
      return emitOptionalError(loc, "reduction axis ", axis,
                               " is out of range for rank ", rank);
    if (reduced[axis])
      return emitOptionalError(loc, "reduction axis ", axis, " is repeated");
    reduced[axis] = true;
  }
  if (adaptor.getKind() == ReduceKind::mean &&
      !isa<FloatType>(type.getElementType()))
    return emitOptionalError(loc, "mean reduction needs a float tensor");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      shape.push_back(type.getDimSize(i));
    else if (adaptor.getKeepDims())
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

template <typename OpTy> static LogicalResult verifySoftmaxAxis(OpTy op) {
  int64_t rank = op.getType().getRank();
  if (op.getAxis() < 0 || op.getAxis() >= rank)
    return op.emitOpError()
           << "axis " << op.getAxis() << " is out of range for rank " << rank;
  return success();
}
LogicalResult SoftmaxOp::verify() { return verifySoftmaxAxis(*this); }
LogicalResult LogSoftmaxOp::verify() { return verifySoftmaxAxis(*this); }

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto type = tensorType(adaptor.getOperand());
  int64_t rank = type.getRank();
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "layer_norm axis ", axis,
                             " is out of range for rank ", rank);
  ArrayRef<int64_t> normalized = type.getShape().drop_front(axis);
  for (Value v : {adaptor.getScale(), adaptor.getBias()}) {
    if (!v)
      continue;
    auto t = tensorType(v);
    if (t.getElementType() != type.getElementType())
      return emitOptionalError(loc, "layer_norm scale/bias element type ", t,
                               " differs from the operand's ", type);
    if (!isBroadcastableTo(t.getShape(), normalized))
      return emitOptionalError(loc, "layer_norm scale/bias shape ", t,
                               " does not broadcast to the normalized shape");
  }
  SmallVector<int64_t> statShape(type.getShape());
  for (int64_t i = axis; i < rank; ++i)
    statShape[i] = 1;
  auto stat = RankedTensorType::get(statShape, type.getElementType());
  results.append({type, stat, stat});
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = tensorType(getOperand());
  if (in.getElementType() != getType().getElementType())
    return emitOpError() << "element type changes from " << in << " to "
                         << getType();
  if (in.getNumElements() != getType().getNumElements())
    return emitOpError() << "cannot reshape " << in << " ("
                         << in.getNumElements() << " elements) to " << getType()
                         << " (" << getType().getNumElements() << " elements)";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getOperand()))
    return dense.reshape(getType());
  return {};
}

namespace {

/// True when `permutation` swaps the last two dimensions and keeps the others
/// (the transpose a matmul can read through its transpose flags).
bool swapsMatrixDims(ArrayRef<int64_t> permutation) {
  int64_t rank = permutation.size();
  if (rank < 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (permutation[d] != d)
      return false;
  return permutation[rank - 2] == rank - 1 && permutation[rank - 1] == rank - 2;
}

/// matmul(transpose(x), y) -> matmul(x, y) with transpose_lhs flipped; the
/// same for the rhs.
struct FoldTransposedOperands : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    Value lhs = op.getLhs(), rhs = op.getRhs();
    bool transposeLhs = op.getTransposeLhs(),
         transposeRhs = op.getTransposeRhs();
    auto fold = [](Value &operand, bool &flag) {
      auto transpose = operand.getDefiningOp<TransposeOp>();
      if (!transpose || !swapsMatrixDims(transpose.getPermutation()))
        return false;
      operand = transpose.getOperand();
      flag = !flag;
      return true;
    };
    bool changed = fold(lhs, transposeLhs);
    changed |= fold(rhs, transposeRhs);
    if (!changed)
      return failure();
    rewriter.replaceOpWithNewOp<MatmulOp>(op, op.getType(), lhs, rhs,
                                          transposeLhs, transposeRhs);
    return success();
  }
};

/// transpose(matmul(a, b)) over the matrix dimensions, the matmul used only
/// there -> matmul(b, a) with each operand's transpose flag flipped.
struct TransposeOfMatmul : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto matmul = op.getOperand().getDefiningOp<MatmulOp>();
    if (!matmul || !matmul->hasOneUse() ||
        !swapsMatrixDims(op.getPermutation()))
      return failure();
    rewriter.replaceOpWithNewOp<MatmulOp>(
        op, op.getType(), matmul.getRhs(), matmul.getLhs(),
        !matmul.getTransposeRhs(), !matmul.getTransposeLhs());
    return success();
  }
};

/// A tensor of zeros: a splat +0 constant, or the broadcast of one.
bool isZeros(Value value) {
  if (auto broadcast = value.getDefiningOp<BroadcastOp>())
    value = broadcast.getOperand();
  auto constant = value.getDefiningOp<ConstantOp>();
  auto attr =
      constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
  if (!attr || !attr.isSplat())
    return false;
  if (isa<FloatType>(attr.getElementType())) {
    APFloat zero = attr.getSplatValue<APFloat>();
    return zero.isZero() && !zero.isNegative();
  }
  return attr.getSplatValue<APInt>().isZero();
}

/// A box written by a unit-stride insert_slice.
struct Piece {
  Value source;
  SmallVector<int64_t> start;
  ArrayRef<int64_t> shape;
};

/// The pieces of `value` when it is a chain of unit-stride insert_slices,
/// each used once, into zeros (returned in `zeros`).
LogicalResult collectPieces(Value value, SmallVectorImpl<Piece> &pieces,
                            Value &zeros) {
  while (auto insert = value.getDefiningOp<InsertSliceOp>()) {
    if (!insert->hasOneUse() ||
        llvm::any_of(insert.getStride(), [](int64_t s) { return s != 1; }))
      return failure();
    pieces.push_back(
        {insert.getSource(), SmallVector<int64_t>(insert.getStart()),
         cast<RankedTensorType>(insert.getSource().getType()).getShape()});
    value = insert.getDest();
  }
  if (!isZeros(value))
    return failure();
  zeros = value;
  return success();
}

bool overlap(const Piece &a, const Piece &b) {
  for (size_t d = 0; d < a.start.size(); ++d)
    if (a.start[d] + a.shape[d] <= b.start[d] ||
        b.start[d] + b.shape[d] <= a.start[d])
      return false;
  return true;
}

/// The axis along which disjoint `pieces` tile a tensor of `shape` (each
/// spanning every other dimension), if there is one.
std::optional<int64_t> tilingAxis(ArrayRef<Piece> pieces,
                                  ArrayRef<int64_t> shape) {
  for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis) {
    int64_t covered = 0;
    bool spans = true;
    for (const Piece &piece : pieces) {
      for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
        if (d != axis && (piece.start[d] != 0 || piece.shape[d] != shape[d]))
          spans = false;
      covered += piece.shape[axis];
    }
    if (spans && covered == shape[axis])
      return axis;
  }
  return std::nullopt;
}

/// add(insert_slice(a into 0), insert_slice(b into 0)) with disjoint slices
/// -> insert_slice(b into insert_slice(a into 0)), or concat(a, b) when the
/// slices tile the result.  (A -0 in a slice stays -0, where 0 + -0 is +0.)
struct AddDisjointSlices : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getLhs().getType() != op.getType() ||
        op.getRhs().getType() != op.getType())
      return failure();
    SmallVector<Piece> pieces;
    Value zeros, otherZeros;
    if (failed(collectPieces(op.getLhs(), pieces, zeros)) ||
        failed(collectPieces(op.getRhs(), pieces, otherZeros)))
      return failure();
    for (size_t i = 0; i < pieces.size(); ++i)
      for (size_t j = i + 1; j < pieces.size(); ++j)
        if (overlap(pieces[i], pieces[j]))
          return failure();
    ArrayRef<int64_t> shape = op.getType().getShape();
    if (std::optional<int64_t> axis = tilingAxis(pieces, shape)) {
      llvm::sort(pieces, [&](const Piece &a, const Piece &b) {
        return a.start[*axis] < b.start[*axis];
      });
      SmallVector<Value> sources;
      for (const Piece &piece : pieces)
        sources.push_back(piece.source);
      rewriter.replaceOpWithNewOp<ConcatOp>(op, op.getType(), sources, *axis);
      return success();
    }
    Value result = zeros;
    SmallVector<int64_t> ones(shape.size(), 1);
    for (const Piece &piece : pieces)
      result = InsertSliceOp::create(rewriter, op.getLoc(), op.getType(),
                                     piece.source, result, piece.start, ones);
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

/// The value of a float tensor that is one constant everywhere: a splat
/// constant, its broadcast, or the sum, difference or product of two such
/// (computed as the evaluator does: in double, rounded to the element type;
/// the autodiff of x^2 builds its exponent 2 - 1 that way).
std::optional<double> sharc::splatValue(Value value, int depth) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  auto element = type ? dyn_cast<FloatType>(type.getElementType()) : nullptr;
  if (!element || depth > 4)
    return std::nullopt;
  Operation *op = value.getDefiningOp();
  if (auto broadcast = dyn_cast_or_null<BroadcastOp>(op))
    return splatValue(broadcast.getOperand(), depth + 1);
  if (auto constant = dyn_cast_or_null<ConstantOp>(op)) {
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!attr || !attr.isSplat())
      return std::nullopt;
    return attr.getSplatValue<APFloat>().convertToDouble();
  }
  if (!isa_and_nonnull<AddOp, SubOp, MulOp>(op))
    return std::nullopt;
  std::optional<double> lhs = splatValue(op->getOperand(0), depth + 1),
                        rhs = splatValue(op->getOperand(1), depth + 1);
  if (!lhs || !rhs)
    return std::nullopt;
  double exact = isa<AddOp>(op)   ? *lhs + *rhs
                 : isa<SubOp>(op) ? *lhs - *rhs
                                  : *lhs * *rhs;
  APFloat rounded(exact);
  bool lost;
  rounded.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                  &lost);
  return rounded.convertToDouble();
}

namespace {

/// pow(x, 2) -> x * x and pow(x, 1) -> x for a float x and an exponent that
/// is one constant everywhere (splatValue), when it does not change x's shape.
struct PowOfSmallConstant : OpRewritePattern<PowOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PowOp op,
                                PatternRewriter &rewriter) const override {
    Value base = op.getLhs();
    if (base.getType() != op.getType() ||
        !isa<FloatType>(op.getType().getElementType()))
      return failure();
    std::optional<double> exponent = splatValue(op.getRhs());
    if (!exponent)
      return failure();
    double value = *exponent;
    if (value == 1.0) {
      rewriter.replaceOp(op, base);
      return success();
    }
    if (value != 2.0)
      return failure();
    rewriter.replaceOpWithNewOp<MulOp>(op, op.getType(), base, base);
    return success();
  }
};

} // namespace

void PowOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<PowOfSmallConstant>(context);
}

void AddOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<AddDisjointSlices>(context);
}

void MatmulOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                           MLIRContext *context) {
  patterns.add<FoldTransposedOperands>(context);
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<TransposeOfMatmul>(context);
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto type = tensorType(adaptor.getOperand());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if ((int64_t)perm.size() != type.getRank())
    return emitOptionalError(loc, "permutation has ", perm.size(),
                             " entries for rank ", type.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= type.getRank() || seen[p])
      return emitOptionalError(loc, "invalid permutation [", perm, "]");
    seen[p] = true;
    shape.push_back(type.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = tensorType(getOperand());
  if (in.getElementType() != getType().getElementType())
    return emitOpError() << "element type changes from " << in << " to "
                         << getType();
  if (!isBroadcastableTo(in.getShape(), getType().getShape()))
    return emitOpError() << in << " does not broadcast to " << getType();
  return success();
}

/// Checks the strided window shared by slice and insert_slice: `part`'s
/// index i along dimension d is `full`'s index start[d] + i * stride[d].
/// `access` names what the op does there ("reads", "writes").
static LogicalResult verifyStridedWindow(Operation *op, RankedTensorType full,
                                         RankedTensorType part,
                                         ArrayRef<int64_t> start,
                                         ArrayRef<int64_t> stride,
                                         StringRef access) {
  int64_t rank = full.getRank();
  if (full.getElementType() != part.getElementType())
    return op->emitOpError()
           << "element types differ: " << full << " and " << part;
  if (part.getRank() != rank || (int64_t)start.size() != rank ||
      (int64_t)stride.size() != rank)
    return op->emitOpError() << "operand, result, start and stride must all "
                                "have rank "
                             << rank;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = part.getDimSize(d);
    if (stride[d] == 0)
      return op->emitOpError() << "stride of dimension " << d << " is zero";
    if (size == 0)
      continue;
    int64_t last = start[d] + (size - 1) * stride[d];
    if (start[d] < 0 || start[d] >= full.getDimSize(d) || last < 0 ||
        last >= full.getDimSize(d))
      return op->emitOpError()
             << "dimension " << d << " " << access << " indices " << start[d]
             << " to " << last << ", outside [0, " << full.getDimSize(d) << ")";
  }
  return success();
}

LogicalResult SliceOp::verify() {
  auto in = tensorType(getOperand());
  if (in.getElementType() != getType().getElementType())
    return emitOpError() << "element type changes from " << in << " to "
                         << getType();
  return verifyStridedWindow(*this, in, getType(), getStart(), getStride(),
                             "reads");
}

LogicalResult InsertSliceOp::verify() {
  return verifyStridedWindow(*this, getType(), tensorType(getSource()),
                             getStart(), getStride(), "writes");
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = tensorType(inputs.front());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= first.getRank())
    return emitOptionalError(loc, "concat axis ", axis,
                             " is out of range for rank ", first.getRank());
  SmallVector<int64_t> shape(first.getShape());
  for (Value v : inputs.drop_front()) {
    auto t = tensorType(v);
    bool ok = t.getElementType() == first.getElementType() &&
              t.getRank() == first.getRank();
    for (int64_t d = 0; ok && d < t.getRank(); ++d)
      ok = d == axis || t.getDimSize(d) == first.getDimSize(d);
    if (!ok)
      return emitOptionalError(loc, "concat inputs ", inputs.getTypes(),
                               " differ outside axis ", axis);
    shape[axis] += t.getDimSize(axis);
  }
  results.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto data = tensorType(adaptor.getData());
  auto indices = tensorType(adaptor.getIndices());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "gather axis ", axis,
                             " is out of range for rank ", data.getRank());
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  results.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

LogicalResult ScatterAddOp::verify() {
  RankedTensorType dest = getType();
  auto indices = tensorType(getIndices());
  auto updates = tensorType(getUpdates());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= dest.getRank())
    return emitOpError() << "axis " << axis << " is out of range for rank "
                         << dest.getRank();
  SmallVector<int64_t> shape(dest.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, dest.getShape().drop_front(axis + 1));
  auto expected = RankedTensorType::get(shape, dest.getElementType());
  if (updates != expected)
    return emitOpError() << "updates " << updates << " must be " << expected
                         << " (dest[:axis] ++ indices ++ dest[axis+1:])";
  return success();
}

LogicalResult TriluOp::verify() {
  if (getType().getRank() < 2)
    return emitOpError() << "needs rank >= 2, got " << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Randomness
//===----------------------------------------------------------------------===//

LogicalResult DropoutMaskOp::verify() {
  double ratio = getRatio().convertToDouble();
  if (!(ratio >= 0 && ratio < 1))
    return emitOpError() << "ratio must be in [0, 1), got " << ratio;
  if (getStream() < 0 || getStream() > int64_t(UINT32_MAX))
    return emitOpError() << "stream must be in [0, 2^32), got " << getStream();
  if (getStep().getType().getRank() != 0)
    return emitOpError() << "step must be a scalar, got "
                         << getStep().getType();
  auto rows = getRows().getType();
  if (rows.getRank() != 1 || rows.getDimSize(0) == 0)
    return emitOpError() << "rows must be a non-empty 1-D tensor, got " << rows;
  // The counter holds a position's group of 4 in 32 bits.
  int64_t count = getType().getNumElements();
  int64_t perRow =
      count % rows.getDimSize(0) ? count : count / rows.getDimSize(0);
  if (perRow > (int64_t(1) << 34))
    return emitOpError() << "a row of " << perRow
                         << " elements is more than the 2^34 one mask "
                            "counter covers";
  return success();
}

LogicalResult SampleRowsOp::verify() {
  if (getType().getRank() != 1)
    return emitOpError() << "needs a 1-D result, got " << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// Shared shape function of nll_loss and cross_entropy.
static LogicalResult inferLoss(std::optional<Location> loc, Value input,
                               Value target, Value weight,
                               LossReduction reduction,
                               SmallVectorImpl<Type> &results) {
  auto in = tensorType(input);
  auto tg = tensorType(target);
  if (in.getRank() < 2)
    return emitOptionalError(loc, "loss input must be [N, C, ...], got ", in);
  SmallVector<int64_t> expected{in.getDimSize(0)};
  llvm::append_range(expected, in.getShape().drop_front(2));
  if (tg.getShape() != ArrayRef<int64_t>(expected))
    return emitOptionalError(loc, "loss target shape ", tg,
                             " does not match input ", in,
                             " (expected [N, d1, ...])");
  if (weight) {
    auto w = tensorType(weight);
    if (w.getRank() != 1 || w.getDimSize(0) != in.getDimSize(1) ||
        w.getElementType() != in.getElementType())
      return emitOptionalError(loc, "loss weight ", w,
                               " must be a [C] tensor of the input type");
  }
  if (reduction == LossReduction::none)
    results.push_back(RankedTensorType::get(expected, in.getElementType()));
  else
    results.push_back(RankedTensorType::get({}, in.getElementType()));
  return success();
}

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  return inferLoss(loc, adaptor.getInput(), adaptor.getTarget(),
                   adaptor.getWeight(), adaptor.getReduction(), results);
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &results) {
  return inferLoss(loc, adaptor.getLogits(), adaptor.getTarget(),
                   adaptor.getWeight(), adaptor.getReduction(), results);
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Checks the window attributes of a 2-D conv/pool and computes the output
/// spatial sizes.
static FailureOr<SmallVector<int64_t>>
inferWindow(std::optional<Location> loc, RankedTensorType input,
            ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
            ArrayRef<int64_t> padding, ArrayRef<int64_t> dilations,
            bool ceilMode) {
  if (input.getRank() != 4)
    return emitOptionalError(loc, "expected an NCHW input, got ", input);
  if (kernel.size() != 2 || strides.size() != 2 || dilations.size() != 2 ||
      padding.size() != 4)
    return emitOptionalError(loc, "2-D windows need 2 kernel sizes, 2 "
                                  "strides, 2 dilations and 4 paddings");
  SmallVector<int64_t> out;
  for (int d = 0; d < 2; ++d) {
    if (kernel[d] < 1 || strides[d] < 1 || dilations[d] < 1 || padding[d] < 0 ||
        padding[d + 2] < 0)
      return emitOptionalError(loc, "window sizes, strides and dilations "
                                    "must be positive, paddings non-negative");
    int64_t size =
        windowOutputSize(input.getDimSize(2 + d), kernel[d], strides[d],
                         padding[d], padding[d + 2], dilations[d], ceilMode);
    if (size < 1)
      return emitOptionalError(loc, "window of size ", kernel[d],
                               " does not fit input ", input);
    out.push_back(size);
  }
  return out;
}

/// The result type of a conv2d of `in` by `w` (bias `[O]` if given) with
/// these attributes; shared by conv2d and the verifiers of its gradients.
static FailureOr<RankedTensorType>
inferConv2D(std::optional<Location> loc, RankedTensorType in,
            RankedTensorType w, RankedTensorType bias, int64_t groups,
            ArrayRef<int64_t> strides, ArrayRef<int64_t> padding,
            ArrayRef<int64_t> dilations) {
  if (w.getRank() != 4 || w.getElementType() != in.getElementType())
    return emitOptionalError(loc,
                             "conv weight must be OIHW of the input "
                             "type, got ",
                             w);
  if (in.getRank() != 4)
    return emitOptionalError(loc, "expected an NCHW input, got ", in);
  if (groups < 1 || in.getDimSize(1) % groups || w.getDimSize(0) % groups ||
      w.getDimSize(1) * groups != in.getDimSize(1))
    return emitOptionalError(loc, "conv channels do not match: input ", in,
                             ", weight ", w, ", groups ", groups);
  if (bias && (bias.getRank() != 1 || bias.getDimSize(0) != w.getDimSize(0)))
    return emitOptionalError(loc, "conv bias must be [", w.getDimSize(0),
                             "], got ", bias);
  auto spatial = inferWindow(loc, in, w.getShape().drop_front(2), strides,
                             padding, dilations, false);
  if (failed(spatial))
    return failure();
  return RankedTensorType::get(
      {in.getDimSize(0), w.getDimSize(0), (*spatial)[0], (*spatial)[1]},
      in.getElementType());
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  Value bias = adaptor.getBias();
  auto type = inferConv2D(
      loc, tensorType(adaptor.getInput()), tensorType(adaptor.getWeight()),
      bias ? tensorType(bias) : RankedTensorType(), adaptor.getGroups(),
      adaptor.getStrides(), adaptor.getPadding(), adaptor.getDilations());
  if (failed(type))
    return failure();
  results.push_back(*type);
  return success();
}

/// Checks that the output gradient of a convolution or pooling gradient op
/// has the type of the forward op's result, `expected`.
static LogicalResult verifyOutputGrad(Operation *op,
                                      FailureOr<RankedTensorType> expected,
                                      Value outputGrad) {
  if (failed(expected))
    return failure();
  if (*expected != outputGrad.getType())
    return op->emitOpError()
           << "output gradient " << outputGrad.getType()
           << " does not match the forward result " << *expected;
  return success();
}

LogicalResult Conv2DInputGradOp::verify() {
  return verifyOutputGrad(
      *this,
      inferConv2D(getLoc(), getType(), tensorType(getWeight()), {}, getGroups(),
                  getStrides(), getPadding(), getDilations()),
      getOutputGrad());
}

LogicalResult Conv2DWeightGradOp::verify() {
  return verifyOutputGrad(*this,
                          inferConv2D(getLoc(), tensorType(getInput()),
                                      getType(), {}, getGroups(), getStrides(),
                                      getPadding(), getDilations()),
                          getOutputGrad());
}

LogicalResult MaxPool2DOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto in = tensorType(adaptor.getInput());
  auto spatial = inferWindow(loc, in, adaptor.getKernel(), adaptor.getStrides(),
                             adaptor.getPadding(), adaptor.getDilations(),
                             adaptor.getCeilMode());
  if (failed(spatial))
    return failure();
  results.push_back(RankedTensorType::get(
      {in.getDimSize(0), in.getDimSize(1), (*spatial)[0], (*spatial)[1]},
      in.getElementType()));
  return success();
}

LogicalResult AvgPool2DOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto in = tensorType(adaptor.getInput());
  int64_t ones[2] = {1, 1};
  auto spatial = inferWindow(loc, in, adaptor.getKernel(), adaptor.getStrides(),
                             adaptor.getPadding(), ones, adaptor.getCeilMode());
  if (failed(spatial))
    return failure();
  results.push_back(RankedTensorType::get(
      {in.getDimSize(0), in.getDimSize(1), (*spatial)[0], (*spatial)[1]},
      in.getElementType()));
  return success();
}

/// The pooled NCHW type of `in` for the given window.
static FailureOr<RankedTensorType>
inferPool(std::optional<Location> loc, RankedTensorType in,
          ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
          ArrayRef<int64_t> padding, ArrayRef<int64_t> dilations,
          bool ceilMode) {
  auto spatial =
      inferWindow(loc, in, kernel, strides, padding, dilations, ceilMode);
  if (failed(spatial))
    return failure();
  return RankedTensorType::get(
      {in.getDimSize(0), in.getDimSize(1), (*spatial)[0], (*spatial)[1]},
      in.getElementType());
}

LogicalResult MaxPool2DGradOp::verify() {
  return verifyOutputGrad(*this,
                          inferPool(getLoc(), getType(), getKernel(),
                                    getStrides(), getPadding(), getDilations(),
                                    getCeilMode()),
                          getOutputGrad());
}

LogicalResult AvgPool2DGradOp::verify() {
  int64_t ones[2] = {1, 1};
  return verifyOutputGrad(*this,
                          inferPool(getLoc(), getType(), getKernel(),
                                    getStrides(), getPadding(), ones,
                                    getCeilMode()),
                          getOutputGrad());
}
