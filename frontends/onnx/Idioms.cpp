//===- Idioms.cpp - Decomposed ops the importer puts back together --------===//
//
// Exporters write some ops as chains of elementary nodes: torch.onnx before
// opset 20 and Hugging Face's NewGELU write GELU as
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) or 0.5 x (1 + erf(x /
// sqrt 2)).  As a chain, every node rounds to the tensor's type, the fused
// kernel keeps the tanh for the backward pass, and a GEMM cannot take the
// activation as its epilogue.  recognizeIdioms() replaces each such chain by
// the one sharc.gelu it spells (computed in double and rounded once,
// docs/ir.md), as onnxruntime's Gelu fusions do.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/ImporterInternal.h"
#include "ir/SharcOps.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace sharc;

namespace {

/// Whether `value` is a constant equal to `expected` within a relative
/// `tolerance` (exporters print constants such as sqrt(2/pi) to float
/// precision, or fewer digits).
bool isConstant(Value value, double expected, double tolerance = 0) {
  std::optional<double> actual = splatValue(value);
  return actual && std::fabs(*actual - expected) <= tolerance * expected;
}

/// The leaves of the tree of sharc.mul ops at `value`, at most `limit` of
/// them (false if there are more).
bool productFactors(Value value, SmallVectorImpl<Value> &factors,
                    size_t limit) {
  if (auto mul = value.getDefiningOp<MulOp>())
    return productFactors(mul.getLhs(), factors, limit) &&
           productFactors(mul.getRhs(), factors, limit);
  factors.push_back(value);
  return factors.size() <= limit;
}

/// If `value` is `lhs OP rhs` with one side satisfying `isSide`, the other
/// side.
template <typename OpTy>
Value otherSide(Value value, function_ref<bool(Value)> isSide) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op)
    return Value();
  if (isSide(op.getLhs()))
    return op.getRhs();
  if (isSide(op.getRhs()))
    return op.getLhs();
  return Value();
}

/// Whether `value` is x^3: x * x * x in any grouping, or x ^ 3.
bool isCube(Value value, Value x) {
  if (auto pow = value.getDefiningOp<PowOp>())
    return pow.getLhs() == x && isConstant(pow.getRhs(), 3.0);
  SmallVector<Value, 3> factors;
  return productFactors(value, factors, 3) && factors.size() == 3 &&
         llvm::all_of(factors, [&](Value f) { return f == x; });
}

/// The x of tanh(sqrt(2/pi) (x + 0.044715 x^3)), given the tanh's operand.
Value tanhGeluInput(Value argument) {
  constexpr double kTolerance = 1e-6;
  Value sum = otherSide<MulOp>(argument, [](Value v) {
    return isConstant(v, std::sqrt(2.0 / M_PI), kTolerance);
  });
  auto add = sum ? sum.getDefiningOp<AddOp>() : AddOp();
  if (!add)
    return Value();
  for (auto [x, cubic] : {std::pair(add.getLhs(), add.getRhs()),
                          std::pair(add.getRhs(), add.getLhs())}) {
    Value cube = otherSide<MulOp>(
        cubic, [](Value v) { return isConstant(v, 0.044715, kTolerance); });
    if (cube && isCube(cube, x))
      return x;
  }
  return Value();
}

/// The x of erf(x / sqrt 2) or erf(x * (1 / sqrt 2)), given the erf's
/// operand.
Value erfGeluInput(Value argument) {
  constexpr double kTolerance = 1e-6;
  if (auto div = argument.getDefiningOp<DivOp>();
      div && isConstant(div.getRhs(), std::sqrt(2.0), kTolerance))
    return div.getLhs();
  return otherSide<MulOp>(argument, [](Value v) {
    return isConstant(v, 1.0 / std::sqrt(2.0), kTolerance);
  });
}

/// If the product at `root` is 0.5 x (1 + tanh(...)) or 0.5 x (1 +
/// erf(...)) of one x, in any order and grouping, with the type of x: x and
/// the approximation.
std::optional<std::pair<Value, GeluApproximation>> matchGelu(MulOp root) {
  SmallVector<Value, 3> factors;
  if (!productFactors(root.getResult(), factors, 3) || factors.size() != 3)
    return std::nullopt;
  // Which factor is 0.5, and which 1 + f(...).
  auto half =
      llvm::find_if(factors, [](Value v) { return isConstant(v, 0.5); });
  if (half == factors.end())
    return std::nullopt;
  factors.erase(half);
  for (auto [x, onePlus] :
       {std::pair(factors[0], factors[1]), std::pair(factors[1], factors[0])}) {
    if (x.getType() != root.getType())
      continue;
    Value f =
        otherSide<AddOp>(onePlus, [](Value v) { return isConstant(v, 1.0); });
    if (!f)
      continue;
    if (auto tanh = f.getDefiningOp<TanhOp>();
        tanh && tanhGeluInput(tanh.getOperand()) == x)
      return std::pair(x, GeluApproximation::tanh);
    if (auto erf = f.getDefiningOp<ErfOp>();
        erf && erfGeluInput(erf.getOperand()) == x)
      return std::pair(x, GeluApproximation::none);
  }
  return std::nullopt;
}

} // namespace

void sharc::onnx_import::recognizeIdioms(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    auto mul = dyn_cast<MulOp>(op);
    if (!mul || !isa<FloatType>(getElementTypeOrSelf(mul.getType())))
      continue;
    std::optional<std::pair<Value, GeluApproximation>> gelu = matchGelu(mul);
    if (!gelu)
      continue;
    OpBuilder builder(mul);
    Value replacement = GeluOp::create(builder, mul.getLoc(), mul.getType(),
                                       gelu->first, gelu->second);
    mul.getResult().replaceAllUsesWith(replacement);
    // The chain's ops, now unused, go with the importer's dead-op sweep.
  }
}
