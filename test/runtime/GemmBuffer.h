//===- GemmBuffer.h - Host buffers of any GEMM element type -----*- C++ -*-===//
//
// The element storage of the GEMM tests (GemmTest.cpp, GemmCudaCheck.cpp):
// raw bytes of f32, f64, f16 or bf16 elements, read and written as doubles.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TEST_RUNTIME_GEMMBUFFER_H
#define SHARC_TEST_RUNTIME_GEMMBUFFER_H

#include "runtime/Communicator.h"
#include "runtime/Float16.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace sharc::rt::test {

/// `count` elements of `type`, addressed as doubles.
struct Buffer {
  Buffer(DType type, int64_t count)
      : type(type), bytes(size_t(count) * dtypeBytes(type)) {}

  /// Stores `value` rounded to the element type.
  void set(int64_t i, double value) {
    switch (type) {
    case DType::f32: {
      float f = float(value);
      std::memcpy(&bytes[i * 4], &f, 4);
      return;
    }
    case DType::f64:
      std::memcpy(&bytes[i * 8], &value, 8);
      return;
    default: {
      uint16_t h = type == DType::f16 ? floatToHalf(float(value))
                                      : floatToBFloat16(float(value));
      std::memcpy(&bytes[i * 2], &h, 2);
      return;
    }
    }
  }

  double get(int64_t i) const {
    switch (type) {
    case DType::f32: {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, &bytes[i * 8], 8);
      return d;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      return type == DType::f16 ? halfToFloat(h) : bfloat16ToFloat(h);
    }
    }
  }

  void *data() { return bytes.data(); }
  int64_t count() const { return int64_t(bytes.size() / dtypeBytes(type)); }

  DType type;
  std::vector<unsigned char> bytes;
};

} // namespace sharc::rt::test

#endif // SHARC_TEST_RUNTIME_GEMMBUFFER_H
