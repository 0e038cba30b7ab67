//===- Buckets.h - bucketing of gradient collectives ------------*- C++ -*-===//
//
// Private to passes/: how sharc-data-parallel and sharc-zero group
// consecutive gradients (or parameter slices) into collective buckets.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_BUCKETS_H
#define SHARC_PASSES_BUCKETS_H

#include "mlir/IR/Types.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <utility>

namespace sharc {

/// Cuts items [0, count) into buckets [begin, end) of consecutive items of
/// one element type (`typeOf(i)`) while their sizes (`sizeOf(i)` elements)
/// add up to at most `bucketSize`; an item larger than that is a bucket of
/// its own.
template <typename SizeOf, typename TypeOf>
llvm::SmallVector<std::pair<size_t, size_t>>
bucketRanges(size_t count, SizeOf sizeOf, TypeOf typeOf, int64_t bucketSize) {
  llvm::SmallVector<std::pair<size_t, size_t>> result;
  size_t begin = 0;
  int64_t elements = 0;
  for (size_t i = 0; i < count; ++i) {
    int64_t size = sizeOf(i);
    if (i > begin && (elements + size > bucketSize ||
                      mlir::Type(typeOf(i)) != mlir::Type(typeOf(begin)))) {
      result.push_back({begin, i});
      begin = i;
      elements = 0;
    }
    elements += size;
  }
  if (begin < count)
    result.push_back({begin, count});
  return result;
}

} // namespace sharc

#endif // SHARC_PASSES_BUCKETS_H
