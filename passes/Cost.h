//===- Cost.h - what ops cost: FLOPs and bytes ------------------*- C++ -*-===//
//
// The cost model the planning passes share: the floating-point operations an
// op performs and the bytes a tensor takes, from types alone.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_COST_H
#define SHARC_PASSES_COST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace sharc {

/// The bytes a value of `type` takes: a static ranked tensor's elements
/// times their size in bytes; 0 for anything else.
int64_t tensorBytes(mlir::Type type);

/// The floating-point operations `op` performs: 2·M·N·K per product of a
/// matmul (and its batch), 2 per multiply-add of a convolution and its
/// gradients, a few per element for normalisations, softmax and losses, one
/// per result element for element-wise ops, none for data movement
/// (reshape, transpose, slice, gather, collectives).
int64_t flopsOf(mlir::Operation *op);

/// The most bytes the values `func`'s body computes take at once, running
/// its top-level ops in order: a value is held from the op defining it to
/// its last reader (a value nothing reads, for its op only); the arguments
/// are not counted.  The planning passes' estimate of a function's working
/// memory (sharc-plan-memory's arena, before fusion and in-place reuse).
int64_t peakLiveBytes(mlir::func::FuncOp func);

/// The rates a step-time estimate assumes of a rank's machine.
struct MachineModel {
  /// What the figures describe, for the planner's output.
  const char *name;
  double flopsPerSecond;
  /// Device memory: what an op reads and writes.
  double memoryBytesPerSecond;
  /// A rank's share of a collective (its bytes per step, sent or
  /// received).
  double collectiveBytesPerSecond;
  double nvmeBytesPerSecond;
  /// Host <-> device copies (ZeRO-Offload to the CPU on the CUDA target).
  double pcieBytesPerSecond;
  /// What a rank's process holds outside its plan while it runs (MPI's
  /// shared-memory buffers, thread stacks; on a GPU the CUDA context,
  /// cuBLASLt's workspace, NCCL's buffers): counted against a memory budget.
  int64_t runtimeReserveBytes;
};

/// The assumed machines of the targets: "cpu" (a few cores of a server CPU
/// with an SSD, ranks on one host) and "cuda" (an H100/H200-class GPU,
/// fp32 GEMMs, NVLink within a node).  docs/recompute.md gives the figures.
const MachineModel &machineModel(llvm::StringRef target);

/// The seconds the ops of `step` (after the compile pipeline) take on
/// `machine`, each op at the slower of its FLOPs and the bytes it reads and
/// writes (a roofline), an op in a micro-batch loop once per iteration.
double estimateComputeSeconds(mlir::func::FuncOp step,
                              const MachineModel &machine);

} // namespace sharc

#endif // SHARC_PASSES_COST_H
