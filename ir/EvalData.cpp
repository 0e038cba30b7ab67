//===- EvalData.cpp - constants and data movement -------------------------===//
//
// constant, iota, reshape, transpose, broadcast, slice, insert_slice, concat,
// gather, scatter_add, trilu, and the random keep masks of dropout_mask and
// the batch rows they are keyed by (sample_rows).  Only scatter_add computes
// new values (and rounds them once).
//
//===----------------------------------------------------------------------===//

#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"
#include "runtime/Random.h"

#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

namespace {

LogicalResult evalConstant(const OpCall &call, ConstantOp op) {
  std::optional<Tensor> value = Tensor::fromAttr(op.getValue());
  if (!value)
    return call.error() << "cannot read the constant's value "
                           "(unsupported attribute or missing resource data)";
  call.result() = std::move(*value);
  return success();
}

LogicalResult evalIota(const OpCall &call, IotaOp op) {
  Tensor &out = call.result();
  int64_t dimension = op.getDimension();
  int64_t size = out.shape()[dimension];
  int64_t stride = product(out.shape(), dimension + 1, out.rank());
  for (int64_t i = 0, e = out.numElements(); i < e; ++i)
    out.setDouble(i, static_cast<double>((i / stride) % size));
  return success();
}

LogicalResult evalTranspose(const OpCall &call, TransposeOp op) {
  const Tensor &in = call.operand(0);
  SmallVector<int64_t> inStrides = rowMajorStrides(in.shape());
  SmallVector<int64_t> strides;
  for (int64_t p : op.getPermutation())
    strides.push_back(inStrides[p]);
  copyStrided(in, call.result(), strides, 0);
  return success();
}

LogicalResult evalSlice(const OpCall &call, SliceOp op) {
  const Tensor &in = call.operand(0);
  SmallVector<int64_t> inStrides = rowMajorStrides(in.shape());
  SmallVector<int64_t> strides;
  int64_t base = 0;
  for (auto [d, start, stride] :
       llvm::enumerate(op.getStart(), op.getStride())) {
    base += start * inStrides[d];
    strides.push_back(stride * inStrides[d]);
  }
  copyStrided(in, call.result(), strides, base);
  return success();
}

LogicalResult evalInsertSlice(const OpCall &call, InsertSliceOp op) {
  const Tensor &source = call.operand(0);
  Tensor &out = call.result();
  out = call.operand(1);
  SmallVector<int64_t> outStrides = rowMajorStrides(out.shape());
  SmallVector<int64_t> strides;
  int64_t base = 0;
  for (auto [d, start, stride] :
       llvm::enumerate(op.getStart(), op.getStride())) {
    base += start * outStrides[d];
    strides.push_back(stride * outStrides[d]);
  }
  auto scatter = [&](auto src, auto dst) {
    stridedLoop<1>(
        source.shape(), {strides}, {base},
        [&](int64_t i, std::array<int64_t, 1> at) { dst[at[0]] = src[i]; });
  };
  if (out.isFloat())
    scatter(source.floats(), out.floats());
  else
    scatter(source.ints(), out.ints());
  return success();
}

LogicalResult evalConcat(const OpCall &call, ConcatOp op) {
  Tensor &out = call.result();
  int64_t axis = op.getAxis();
  int64_t outer = product(out.shape(), 0, axis);
  int64_t inner = product(out.shape(), axis + 1, out.rank());
  int64_t outRow = out.shape()[axis] * inner;
  int64_t offset = 0;
  for (const Tensor *in : call.operands) {
    int64_t row = in->shape()[axis] * inner;
    for (int64_t o = 0; o < outer; ++o)
      copyElements(*in, o * row, out, o * outRow + offset, row);
    offset += row;
  }
  return success();
}

LogicalResult evalGather(const OpCall &call, GatherOp op) {
  const Tensor &data = call.operand(0), &indices = call.operand(1);
  Tensor &out = call.result();
  int64_t axis = op.getAxis();
  int64_t outer = product(data.shape(), 0, axis);
  int64_t size = data.shape()[axis];
  int64_t inner = product(data.shape(), axis + 1, data.rank());
  ArrayRef<int64_t> index = indices.ints();
  int64_t count = index.size();
  for (int64_t j = 0; j < count; ++j)
    if (index[j] < -size || index[j] >= size)
      return call.error() << "gather index " << index[j] << " (at position "
                          << j << ") is out of range for dimension " << axis
                          << " of size " << size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t i = index[j] < 0 ? index[j] + size : index[j];
      copyElements(data, (o * size + i) * inner, out, (o * count + j) * inner,
                   inner);
    }
  return success();
}

LogicalResult evalScatterAdd(const OpCall &call, ScatterAddOp op) {
  const Tensor &indices = call.operand(1), &updates = call.operand(2);
  Tensor &out = call.result();
  out = call.operand(0);
  int64_t axis = op.getAxis();
  int64_t outer = product(out.shape(), 0, axis);
  int64_t size = out.shape()[axis];
  int64_t inner = product(out.shape(), axis + 1, out.rank());
  ArrayRef<int64_t> index = indices.ints();
  int64_t count = index.size();
  for (int64_t j = 0; j < count; ++j)
    if (index[j] < -size || index[j] >= size)
      return call.error() << "scatter_add index " << index[j]
                          << " (at position " << j
                          << ") is out of range for dimension " << axis
                          << " of size " << size;
  ArrayRef<double> src = updates.floats();
  MutableArrayRef<double> dst = out.floats();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t i = index[j] < 0 ? index[j] + size : index[j];
      const double *from = &src[(o * count + j) * inner];
      double *to = &dst[(o * size + i) * inner];
      for (int64_t k = 0; k < inner; ++k)
        to[k] += from[k];
    }
  roundInPlace(out);
  return success();
}

LogicalResult evalTrilu(const OpCall &call, TriluOp op) {
  const Tensor &in = call.operand(0);
  Tensor &out = call.result();
  int64_t rows = in.shape()[in.rank() - 2], cols = in.shape().back();
  int64_t batches = product(in.shape(), 0, in.rank() - 2);
  // Any diagonal beyond +-(rows + cols) keeps everything or nothing.
  int64_t diagonal = std::clamp(static_cast<int64_t>(op.getDiagonal()),
                                -(rows + cols), rows + cols);
  bool upper = op.getUpper();
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < rows; ++i) {
      // Kept columns: j >= i + diagonal (upper) or j <= i + diagonal (lower).
      int64_t begin = upper ? std::clamp(i + diagonal, int64_t(0), cols) : 0;
      int64_t end =
          upper ? cols : std::clamp(i + diagonal + 1, int64_t(0), cols);
      int64_t row = (b * rows + i) * cols;
      copyElements(in, row + begin, out, row + begin, end - begin);
    }
  return success();
}

/// Also the reference of the generated kernels: element j of block b is
/// bit j % 4 of group j / 4 of row rows[b] (runtime/Random.h).
LogicalResult evalDropoutMask(const OpCall &call, DropoutMaskOp op) {
  Tensor &out = call.result();
  const Tensor &rows = call.operand(1);
  int64_t count = out.numElements(), numRows = rows.numElements();
  bool blocked = count % numRows == 0;
  int64_t perRow = blocked ? count / numRows : count;
  auto step = static_cast<uint64_t>(call.operand(0).getInt(0));
  auto seed = static_cast<uint64_t>(op.getSeed());
  auto stream = static_cast<uint32_t>(op.getStream());
  uint64_t threshold =
      random::dropoutThreshold(op.getRatio().convertToDouble());
  for (int64_t b = 0, e = blocked ? numRows : 1; b < e; ++b) {
    auto row = blocked ? static_cast<uint64_t>(rows.getInt(b)) : 0;
    for (int64_t j = 0; j < perRow; j += 4) {
      unsigned bits =
          random::dropoutKeepBits(seed, stream, step, row, j / 4, threshold);
      for (int64_t k = j; k < std::min(j + 4, perRow); ++k)
        out.setDouble(b * perRow + k, (bits >> (k - j)) & 1);
    }
  }
  return success();
}

} // namespace

std::optional<LogicalResult> eval::evalDataOp(const OpCall &call) {
  using Result = std::optional<LogicalResult>;
  return llvm::TypeSwitch<Operation *, Result>(call.op)
      .Case([&](ConstantOp op) { return evalConstant(call, op); })
      .Case([&](IotaOp op) { return evalIota(call, op); })
      .Case([&](DropoutMaskOp op) { return evalDropoutMask(call, op); })
      .Case([&](SampleRowsOp) {
        Tensor &out = call.result();
        int64_t count = out.numElements();
        for (int64_t i = 0; i < count; ++i)
          out.setDouble(i, double(call.rank * count + i));
        return success();
      })
      .Case([&](ReshapeOp) {
        call.result() = call.operand(0).reshaped(call.result().shape());
        return success();
      })
      .Case([&](TransposeOp op) { return evalTranspose(call, op); })
      .Case([&](BroadcastOp) {
        const Tensor &in = call.operand(0);
        copyStrided(in, call.result(),
                    broadcastStrides(in.shape(), call.result().shape()), 0);
        return success();
      })
      .Case([&](SliceOp op) { return evalSlice(call, op); })
      .Case([&](InsertSliceOp op) { return evalInsertSlice(call, op); })
      .Case([&](ConcatOp op) { return evalConcat(call, op); })
      .Case([&](GatherOp op) { return evalGather(call, op); })
      .Case([&](ScatterAddOp op) { return evalScatterAdd(call, op); })
      .Case([&](TriluOp op) { return evalTrilu(call, op); })
      .Case([&](GradientsOp) {
        // The identity on one rank.
        for (auto [k, result] : llvm::enumerate(call.results))
          result = call.operand(k);
        return success();
      })
      .Default([](Operation *) { return Result(); });
}
