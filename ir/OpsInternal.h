//===- OpsInternal.h - Helpers of the op verifiers --------------*- C++ -*-===//
//
// Private to ir/: what SharcOps.cpp and SharcOpsTensor.cpp share.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_OPSINTERNAL_H
#define SHARC_IR_OPSINTERNAL_H

#include "ir/SharcOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace sharc::detail {

inline mlir::RankedTensorType tensorType(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// Prints `shape` as "[d0, d1, ...]" for diagnostics.
inline std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

} // namespace sharc::detail

#endif // SHARC_IR_OPSINTERNAL_H
