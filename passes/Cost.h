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

} // namespace sharc

#endif // SHARC_PASSES_COST_H
