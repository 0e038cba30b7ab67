//===- Cost.cpp - what ops cost: FLOPs and bytes --------------------------===//

#include "passes/Cost.h"

#include "ir/SharcOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace sharc;

int64_t sharc::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() ||
      !tensor.getElementType().isIntOrFloat())
    return 0;
  return tensor.getNumElements() * ((tensor.getElementTypeBitWidth() + 7) / 8);
}

namespace {
int64_t elementsOf(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.hasStaticShape() ? type.getNumElements() : 0;
}
} // namespace

int64_t sharc::flopsOf(Operation *op) {
  if (op->getNumResults() == 0)
    return 0;
  int64_t out = elementsOf(op->getResult(0));
  return llvm::TypeSwitch<Operation *, int64_t>(op)
      .Case([&](MatmulOp matmul) -> int64_t {
        auto lhs = cast<RankedTensorType>(matmul.getLhs().getType());
        int64_t k =
            lhs.getDimSize(lhs.getRank() - (matmul.getTransposeLhs() ? 2 : 1));
        return 2 * out * k;
      })
      .Case([&](Conv2DOp conv) -> int64_t {
        // Each output element: a dot product over C/groups x kh x kw.
        auto weight = cast<RankedTensorType>(conv.getWeight().getType());
        return 2 * out * weight.getDimSize(1) * weight.getDimSize(2) *
               weight.getDimSize(3);
      })
      .Case<Conv2DInputGradOp, Conv2DWeightGradOp>([&](Operation *grad) {
        // As many multiply-adds as the forward convolution: the output
        // gradient's elements times the weight's per-output-channel size.
        int64_t outputGrad = elementsOf(grad->getOperand(0));
        auto weight = dyn_cast<RankedTensorType>(
            isa<Conv2DInputGradOp>(grad) ? grad->getOperand(1).getType()
                                         : grad->getResult(0).getType());
        int64_t perOutput = weight && weight.hasStaticShape()
                                ? weight.getNumElements() / weight.getDimSize(0)
                                : 1;
        return 2 * outputGrad * perOutput;
      })
      .Case<ReduceOp, NllLossOp, CrossEntropyOp, MaxPool2DOp, AvgPool2DOp,
            MaxPool2DGradOp, AvgPool2DGradOp>(
          [&](Operation *reduce) { return elementsOf(reduce->getOperand(0)); })
      // max, subtract, exp, sum, divide (log-softmax: a log instead).
      .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *) { return 5 * out; })
      // mean, variance, normalise, scale and shift.
      .Case([&](LayerNormOp) { return 8 * out; })
      .Case<ReshapeOp, TransposeOp, BroadcastOp, SliceOp, InsertSliceOp,
            ConcatOp, GatherOp, ConstantOp, IotaOp, TriluOp, CastOp>(
          [&](Operation *) -> int64_t { return 0; })
      .Default([&](Operation *other) -> int64_t {
        // Collectives, swaps and transfers compute nothing; the rest are
        // element-wise (one op per element; fusions count their bodies).
        if (other->getDialect() != op->getContext()->getLoadedDialect(
                                       SharcDialect::getDialectNamespace()))
          return 0;
        if (other->getNumRegions() != 0) {
          // A fusion (or loop): its body's ops.
          int64_t total = 0;
          for (Region &region : other->getRegions())
            region.walk([&](Operation *inner) {
              if (inner->getParentOp() == other)
                total += flopsOf(inner);
            });
          return total;
        }
        return isa<AllReduceOp, AllReduceStartOp, WaitOp, ReduceScatterOp,
                   ReduceScatterStartOp, AllGatherOp, AllGatherStartOp,
                   SwapInStartOp, SwapOutStartOp, TransferStartOp, ShardOp,
                   BroadcastFromOp>(other)
                   ? 0
                   : out;
      });
}

int64_t sharc::peakLiveBytes(func::FuncOp func) {
  Block &body = func.getBody().front();
  llvm::DenseMap<Operation *, unsigned> index;
  for (Operation &op : body)
    index[&op] = index.size();
  // freed[i]: bytes whose last reader is op i.
  SmallVector<int64_t> freed(index.size() + 1, 0);
  int64_t live = 0, peak = 0;
  for (Operation &op : body) {
    unsigned at = index.lookup(&op);
    for (Value result : op.getResults()) {
      int64_t bytes = tensorBytes(result.getType());
      unsigned last = at;
      for (Operation *user : result.getUsers())
        if (Operation *reader = body.findAncestorOpInBlock(*user))
          last = std::max(last, index.lookup(reader));
      live += bytes;
      freed[last] += bytes;
    }
    peak = std::max(peak, live);
    live -= freed[at];
  }
  return peak;
}
