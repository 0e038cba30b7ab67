//===- DType.h - The element types of sharc -------------------*- C++ -*-===//
//
// One enum for the element types of tensors everywhere: the evaluator's
// tensors (ir/Tensor.h), the buffers of a compiled program
// (runtime/Program.h), GEMMs and collectives.  Plain C++ with no MLIR in it,
// so that the runtime and the generated code include it too.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_DTYPE_H
#define SHARC_RUNTIME_DTYPE_H

#include <cstddef>

namespace sharc::rt {

/// Element types.  f16 and bf16 are stored as raw 16-bit values (Float16.h);
/// i1 is one byte (0 or 1).
enum class DType { f64, f32, f16, bf16, i64, i32, i1 };

/// Bytes per element of `type` in memory and in the raw encodings that MLIR
/// dense attributes, ONNX raw_data and .npy use (i1: one byte).
constexpr size_t dtypeBytes(DType type) {
  switch (type) {
  case DType::f64:
  case DType::i64:
    return 8;
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::f16:
  case DType::bf16:
    return 2;
  case DType::i1:
    return 1;
  }
  return 0;
}

/// "f64", "f32", "f16", "bf16", "i64", "i32" or "i1".
constexpr const char *dtypeName(DType type) {
  switch (type) {
  case DType::f64:
    return "f64";
  case DType::f32:
    return "f32";
  case DType::f16:
    return "f16";
  case DType::bf16:
    return "bf16";
  case DType::i64:
    return "i64";
  case DType::i32:
    return "i32";
  case DType::i1:
    return "i1";
  }
  return "?";
}

/// True for f64, f32, f16 and bf16.
constexpr bool isFloat(DType type) {
  return type == DType::f64 || type == DType::f32 || type == DType::f16 ||
         type == DType::bf16;
}

} // namespace sharc::rt

#endif // SHARC_RUNTIME_DTYPE_H
