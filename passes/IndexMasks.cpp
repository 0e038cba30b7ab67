//===- IndexMasks.cpp - sharc-index-masks ---------------------------------===//
//
// Attention's causal mask is a constant of T x T elements that only says
// whether a column is past its row.  Stored, it is a table in the program's
// source (a 1024 x 1024 mask: 6.8 MB of C++ text, 1 MB at run time) that
// every softmax reads; as an index predicate, `column - row >= k`, the kernel
// that reads it computes it from the element's position.  This pass finds
// such constants and rewrites each use into that predicate (docs/passes.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"
#include "passes/AutodiffRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>

namespace sharc {
#define GEN_PASS_DEF_INDEXMASKS
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// A constant whose elements over its last two dimensions (row r, column c)
/// are `c - r >= diagonal ? onTrue : onFalse`, the same for every index of
/// the dimensions before them.
struct TriangleMask {
  int64_t diagonal;
  double onTrue, onFalse;
};

/// The triangle `value` is, if it is one (two distinct values, both halves
/// present in some row).
std::optional<TriangleMask> matchTriangle(DenseElementsAttr value) {
  auto type = cast<RankedTensorType>(value.getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  int64_t square = rows * cols, count = type.getNumElements();
  if (square < 2)
    return std::nullopt;
  std::vector<double> elements;
  elements.reserve(count);
  if (type.getElementType().isInteger(1))
    for (bool element : value.getValues<bool>())
      elements.push_back(element);
  else
    for (const APFloat &element : value.getValues<APFloat>()) {
      bool losesInfo;
      APFloat wide = element;
      wide.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                   &losesInfo);
      elements.push_back(wide.convertToDouble());
    }
  auto at = [&](int64_t index) { return elements[index]; };
  // The value in the top-right corner is the one where c - r is largest.
  double onTrue = at(cols - 1);
  std::optional<double> onFalse;
  for (int64_t i = 0; i < count && !onFalse; ++i)
    if (at(i) != onTrue)
      onFalse = at(i);
  if (!onFalse || std::isnan(onTrue) || std::isnan(*onFalse))
    return std::nullopt;
  // The diagonal from a row whose mask starts inside it.
  std::optional<int64_t> diagonal;
  for (int64_t r = 0; r < rows && !diagonal; ++r)
    for (int64_t c = 1; c < cols; ++c)
      if (at(r * cols + c) == onTrue && at(r * cols + c - 1) != onTrue) {
        diagonal = c - r;
        break;
      }
  if (!diagonal)
    return std::nullopt;
  for (int64_t i = 0; i < count; ++i) {
    int64_t r = (i % square) / cols, c = i % cols;
    double expected = c - r >= *diagonal ? onTrue : *onFalse;
    // Signed zeros differ as masks may not: compare bits through the value
    // and its sign.
    if (at(i) != expected || std::signbit(at(i)) != std::signbit(expected))
      return std::nullopt;
  }
  return TriangleMask{*diagonal, onTrue, *onFalse};
}

/// The mask computed at `shape` (into which the constant broadcasts):
/// `iota(c) - iota(r) >= diagonal`, then selected between the two values
/// unless the constant is i1.
Value buildMask(ImplicitLocOpBuilder &b, const TriangleMask &mask, Type element,
                ArrayRef<int64_t> shape) {
  auto indexType = RankedTensorType::get(shape, b.getI64Type());
  int64_t rank = shape.size();
  Value col = IotaOp::create(b, indexType, rank - 1);
  Value row = IotaOp::create(b, indexType, rank - 2);
  auto scalar = [&](Type type, double value) {
    return autodiff::buildSplat(b, RankedTensorType::get({}, type), value);
  };
  // One statement per op: C++ leaves the order of arguments' evaluation
  // open, and the IR's order should not depend on the host compiler.
  Value offset = SubOp::create(b, col, row);
  Value diagonal = scalar(b.getI64Type(), mask.diagonal);
  Value cond = CompareOp::create(b, offset, diagonal, ComparePredicate::ge);
  if (element.isInteger(1) && mask.onTrue == 1)
    return cond;
  Value onTrue = scalar(element, mask.onTrue);
  Value onFalse = scalar(element, mask.onFalse);
  return SelectOp::create(b, cond, onTrue, onFalse);
}

struct IndexMasksPass : sharc::impl::IndexMasksBase<IndexMasksPass> {
  using IndexMasksBase::IndexMasksBase;

  void runOnOperation() override {
    getOperation().walk([&](ConstantOp constant) {
      auto type = dyn_cast<RankedTensorType>(constant.getType());
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!type || !dense || dense.isSplat() || type.getRank() < 2)
        return;
      Type element = type.getElementType();
      if (!element.isInteger(1) && !isa<FloatType>(element))
        return;
      std::optional<TriangleMask> mask = matchTriangle(dense);
      if (!mask)
        return;
      // One predicate per use, built just before its reader: at an
      // elementwise reader's iteration shape (so that sharc-fuse puts it in
      // that reader's fusion; shared, it would be stored at that shape for
      // the others), at the constant's shape for any other reader.
      for (OpOperand &use : llvm::make_early_inc_range(constant->getUses())) {
        Operation *user = use.getOwner();
        SmallVector<int64_t> shape(type.getShape());
        if (isFusibleElementwiseOp(user) && user->getNumResults() == 1)
          if (auto result =
                  dyn_cast<RankedTensorType>(user->getResult(0).getType());
              result && result.getRank() >= type.getRank() &&
              isBroadcastableTo(type.getShape(), result.getShape()))
            shape.assign(result.getShape().begin(), result.getShape().end());
        ImplicitLocOpBuilder builder(constant.getLoc(), user);
        use.set(buildMask(builder, *mask, element, shape));
      }
      if (constant->use_empty())
        constant->erase();
    });
  }
};

} // namespace
