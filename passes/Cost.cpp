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
/// Collectives, their waits, NVMe swaps, host transfers and shards: traffic
/// the planner counts on its own, no FLOPs.
bool isCommunication(Operation *op) {
  return isa<AllReduceOp, AllReduceStartOp, WaitOp, ReduceScatterOp,
             ReduceScatterStartOp, AllGatherOp, AllGatherStartOp, SwapInStartOp,
             SwapOutStartOp, TransferStartOp, ShardOp, BroadcastFromOp>(op);
}

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
        return isCommunication(other) ? 0 : out;
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

const MachineModel &sharc::machineModel(llvm::StringRef target) {
  // cpu: a rank of two AVX-512 cores (the machine of docs/recompute.md's
  // benchmark: ~150 GFLOP/s of fp32 GEMM, ~20 GB/s of memory traffic),
  // shared-memory collectives at ~5 GB/s, an SSD at ~2 GB/s; the runtime
  // held 3.5-4.7 MB beyond its plan at 2 ranks (docs/budget.md).
  static const MachineModel cpu{"a CPU rank (150 GFLOP/s, memory 20 GB/s, "
                                "collectives 5 GB/s, NVMe 2 GB/s)",
                                150e9,
                                20e9,
                                5e9,
                                2e9,
                                20e9,
                                8 << 20};
  // cuda: fp32 on an H100/H200-class GPU (~60 TFLOP/s, HBM ~4 TB/s),
  // NVLink ~200 GB/s per rank, NVMe ~5 GB/s, PCIe 5 ~50 GB/s; the CUDA
  // context, cuBLASLt's workspace and NCCL's buffers are assumed to take
  // 1 GiB (not measured yet).
  static const MachineModel cuda{
      "an H100/H200-class GPU (60 TFLOP/s fp32, HBM 4 TB/s, NVLink 200 GB/s, "
      "NVMe 5 GB/s, PCIe 50 GB/s)",
      60e12,
      4e12,
      200e9,
      5e9,
      50e9,
      int64_t(1) << 30};
  return target == "cuda" ? cuda : cpu;
}

double sharc::estimateComputeSeconds(func::FuncOp step,
                                     const MachineModel &machine) {
  double seconds = 0;
  step.walk([&](Operation *op) {
    // Fusions count as one op (their bodies are what flopsOf sums), loops
    // by their bodies.
    if (op->getNumRegions() != 0 && !isa<FusionOp>(op))
      return;
    if (op->getParentOfType<FusionOp>())
      return;
    int64_t repeats = 1;
    for (auto loop = op->getParentOfType<MicroBatchLoopOp>(); loop;
         loop = loop->getParentOfType<MicroBatchLoopOp>())
      repeats *= loop.getCount();
    int64_t flops = flopsOf(op), bytes = 0;
    if (isa<ReshapeOp, func::ReturnOp, ConstantOp>(op) || isCommunication(op)) {
      // Views, and the traffic the planner counts on its own.
      return;
    } else if (auto insert = dyn_cast<InsertSliceOp>(op)) {
      // Writes its source into the destination's memory.
      bytes = 2 * tensorBytes(insert->getOperand(1).getType());
    } else if (flops == 0) {
      // A copy (a slice, a concatenation, a transpose, a gather, a cast):
      // it reads about what it writes.
      for (Value result : op->getResults())
        bytes += 2 * tensorBytes(result.getType());
    } else {
      for (Value operand : op->getOperands())
        bytes += tensorBytes(operand.getType());
      for (Value result : op->getResults())
        bytes += tensorBytes(result.getType());
    }
    seconds += repeats * std::max(double(flops) / machine.flopsPerSecond,
                                  double(bytes) / machine.memoryBytesPerSecond);
  });
  return seconds;
}
