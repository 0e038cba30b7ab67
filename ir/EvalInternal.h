//===- EvalInternal.h - shared pieces of the evaluator ----------*- C++ -*-===//
//
// Private to the evaluator's source files: the description of one op being
// evaluated, the evaluators of each op family, and the strided loop that
// broadcasting, transposition and slicing share.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_EVALINTERNAL_H
#define SHARC_IR_EVALINTERNAL_H

#include "ir/Collectives.h"
#include "ir/Tensor.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

#include <array>
#include <optional>

namespace sharc::eval {

/// One op being evaluated.  `results` are zero-filled tensors of the op's
/// result types, to be filled (or replaced) by the op's evaluator.
struct OpCall {
  mlir::Operation *op;
  llvm::ArrayRef<const Tensor *> operands;
  llvm::MutableArrayRef<Tensor> results;
  CollectiveGroup *group;
  int rank;

  const Tensor &operand(unsigned index) const { return *operands[index]; }
  Tensor &result(unsigned index = 0) const { return results[index]; }
  /// Emits an error at the op (noting the rank in multi-rank runs).
  mlir::InFlightDiagnostic error() const;
};

/// Evaluators of the op families.  Each returns std::nullopt when `call.op`
/// is not one of its ops.
std::optional<mlir::LogicalResult> evalElementwiseOp(const OpCall &call);
std::optional<mlir::LogicalResult> evalDataOp(const OpCall &call);
std::optional<mlir::LogicalResult> evalLinalgOp(const OpCall &call);
std::optional<mlir::LogicalResult> evalNNOp(const OpCall &call);
std::optional<mlir::LogicalResult> evalCollectiveOp(const OpCall &call);

/// Rounds every element of a float tensor to its dtype (no-op for f64).
void roundInPlace(Tensor &tensor);
/// Wraps every element of an integer tensor to its dtype.
void wrapInPlace(Tensor &tensor);

/// Strides, one per dimension of `to`, for reading a contiguous tensor of
/// shape `from` numpy-broadcast to `to` (0 along broadcast dimensions).
llvm::SmallVector<int64_t> broadcastStrides(llvm::ArrayRef<int64_t> from,
                                            llvm::ArrayRef<int64_t> to);

/// Visits every index of `shape` in row-major order, calling
/// `fn(linear, offsets)` where `linear` is the row-major position and
/// `offsets[k] = bases[k] + sum_d index[d] * strides[k][d]`.  Dimensions
/// that can be merged are merged first, so the inner loop is long.
template <size_t K, typename Fn>
void stridedLoop(llvm::ArrayRef<int64_t> shape,
                 std::array<llvm::ArrayRef<int64_t>, K> strides,
                 std::array<int64_t, K> bases, Fn &&fn) {
  llvm::SmallVector<int64_t, 6> dims;
  std::array<llvm::SmallVector<int64_t, 6>, K> merged;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0)
      return;
    if (shape[d] == 1)
      continue;
    bool mergeable = !dims.empty();
    for (size_t k = 0; k < K && mergeable; ++k)
      mergeable = merged[k].back() == strides[k][d] * shape[d];
    if (mergeable) {
      dims.back() *= shape[d];
      for (size_t k = 0; k < K; ++k)
        merged[k].back() = strides[k][d];
      continue;
    }
    dims.push_back(shape[d]);
    for (size_t k = 0; k < K; ++k)
      merged[k].push_back(strides[k][d]);
  }
  if (dims.empty()) {
    fn(int64_t(0), bases);
    return;
  }
  int64_t rank = dims.size();
  int64_t inner = dims.back();
  std::array<int64_t, K> innerStride;
  for (size_t k = 0; k < K; ++k)
    innerStride[k] = merged[k].back();
  llvm::SmallVector<int64_t, 6> counter(rank - 1, 0);
  std::array<int64_t, K> offsets = bases;
  int64_t total = 1;
  for (int64_t d : dims)
    total *= d;
  for (int64_t linear = 0; linear < total; linear += inner) {
    std::array<int64_t, K> at = offsets;
    for (int64_t j = 0; j < inner; ++j) {
      fn(linear + j, at);
      for (size_t k = 0; k < K; ++k)
        at[k] += innerStride[k];
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k)
        offsets[k] += merged[k][d];
      if (++counter[d] < dims[d])
        break;
      for (size_t k = 0; k < K; ++k)
        offsets[k] -= merged[k][d] * dims[d];
      counter[d] = 0;
    }
  }
}

/// Copies `in` into `out` (same dtype), reading element `base + sum_d
/// index[d] * strides[d]` for each index of `out`'s shape.
void copyStrided(const Tensor &in, Tensor &out, llvm::ArrayRef<int64_t> strides,
                 int64_t base);

/// Copies `count` elements of `in` from position `from` to `out` (same
/// dtype) at position `to`.
void copyElements(const Tensor &in, int64_t from, Tensor &out, int64_t to,
                  int64_t count);

/// Product of the dimensions of `shape` in [begin, end).
int64_t product(llvm::ArrayRef<int64_t> shape, size_t begin, size_t end);

} // namespace sharc::eval

#endif // SHARC_IR_EVALINTERNAL_H
