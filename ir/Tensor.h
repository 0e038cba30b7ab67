//===- Tensor.h - host tensors for the evaluator ------------------*- C++
//-*-===//
//
// The value type of the reference evaluator, of imported ONNX initializers and
// of .npy inputs/outputs.  Floating-point elements are held as double, always
// already rounded to the precision of the tensor's dtype (f32, f16 or bf16
// round-to-nearest-even), so that every op computes in double and rounds its
// result exactly once.  Integer and boolean elements are held as int64_t,
// wrapped to the dtype's width.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_TENSOR_H
#define SHARC_IR_TENSOR_H

#include "runtime/DType.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sharc {
namespace rt {
struct NpyArray;
} // namespace rt

/// Element types of sharc tensors: one enum with the runtime's
/// (runtime/DType.h).
using rt::DType;
using rt::dtypeBytes;
using rt::dtypeName;
using rt::isFloat;

/// The DType of an MLIR element type, if sharc supports it.
std::optional<DType> dtypeOf(mlir::Type elementType);
/// The MLIR element type of `type`.
mlir::Type mlirType(DType type, mlir::MLIRContext *context);
/// Rounds `value` to the nearest value representable in float dtype `type`
/// (round to nearest, ties to even; overflow gives infinity).
double roundTo(DType type, double value);
/// Wraps `value` to integer dtype `type` (two's complement; i1 is value != 0).
int64_t wrapTo(DType type, int64_t value);

/// "f32[2, 3]": how diagnostics name a tensor's type.
std::string describeTensor(DType type, llvm::ArrayRef<int64_t> shape);

/// A dense, row-major host tensor.
class Tensor {
public:
  Tensor() = default;
  /// A zero-filled tensor.
  Tensor(DType type, llvm::ArrayRef<int64_t> shape);

  DType dtype() const { return type; }
  llvm::ArrayRef<int64_t> shape() const { return dims; }
  int64_t rank() const { return dims.size(); }
  int64_t numElements() const;
  bool isFloat() const { return sharc::isFloat(type); }

  /// Float storage (float dtypes only).
  llvm::MutableArrayRef<double> floats() { return floatData; }
  llvm::ArrayRef<double> floats() const { return floatData; }
  /// Integer storage (integer and i1 dtypes only).
  llvm::MutableArrayRef<int64_t> ints() { return intData; }
  llvm::ArrayRef<int64_t> ints() const { return intData; }

  /// Element `index` (row-major) as a double, whatever the dtype.
  double getDouble(int64_t index) const;
  /// Stores `value` at `index`, rounding/truncating it to the dtype.  For
  /// integer dtypes the value truncates toward zero, saturates to the int64
  /// range (NaN gives 0) and wraps to the dtype; i1 stores value != 0.
  void setDouble(int64_t index, double value);
  /// Element `index` as an int64 (floats truncate toward zero).
  int64_t getInt(int64_t index) const;

  /// Same elements, new shape (element counts must agree).
  Tensor reshaped(llvm::ArrayRef<int64_t> shape) const;

  /// The tensor's MLIR type.
  mlir::RankedTensorType mlirTensorType(mlir::MLIRContext *context) const;
  /// Converts from/to MLIR attributes (ElementsAttr of a supported type).
  static std::optional<Tensor> fromAttr(mlir::ElementsAttr attr);
  mlir::DenseElementsAttr toAttr(mlir::MLIRContext *context) const;

  /// Converts from/to .npy arrays.  A bf16 tensor is stored as f32 (exact);
  /// reading into a bf16 tensor is done by the caller with `convertTo`.
  static Tensor fromNpy(const rt::NpyArray &array);
  rt::NpyArray toNpy() const;

  /// Element-wise conversion to `type` (the `sharc.cast` semantics).
  Tensor convertTo(DType type) const;

  /// "f32[2, 3]".
  std::string describe() const;

  /// Same dtype, shape and elements; floats compare by value and sign of
  /// zero, and any NaN equals any NaN.
  bool operator==(const Tensor &other) const;

private:
  DType type = DType::f32;
  llvm::SmallVector<int64_t, 4> dims;
  std::vector<double> floatData;
  std::vector<int64_t> intData;
};

/// A tensor held as its element type stores it: row-major host-order bytes,
/// f16 and bf16 as their 16 bits, i1 one byte per element (the layout of
/// ONNX's raw_data on the little-endian hosts sharc runs on).  The compiler
/// carries a model's parameters this way from the ONNX file to the weight
/// files: a Tensor holds every f32 as a double, twice the bytes, and a
/// GPT-2-sized model's parameters are 650 MB of f32.
class PackedTensor {
public:
  PackedTensor() = default;
  /// `bytes` (taken over, not copied) must hold every element.
  PackedTensor(DType type, llvm::ArrayRef<int64_t> shape, std::string bytes);
  PackedTensor(const PackedTensor &) = default;
  PackedTensor &operator=(const PackedTensor &) = default;
  /// noexcept, so that containers move their elements' bytes when they
  /// grow (SmallVector's own move is not noexcept).
  PackedTensor(PackedTensor &&) noexcept = default;
  PackedTensor &operator=(PackedTensor &&) noexcept = default;
  /// The bytes of `tensor`'s elements.
  static PackedTensor pack(const Tensor &tensor);

  DType dtype() const { return type; }
  llvm::ArrayRef<int64_t> shape() const { return dims; }
  llvm::StringRef bytes() const { return data; }

  /// The elements decoded into a Tensor (the evaluator's form).
  Tensor unpack() const;
  /// Writes the elements to `path` as a .npy file (atomically, rt::writeNpy),
  /// stored as Tensor::toNpy stores them (bf16 widened to f32, exactly).  On
  /// failure `error` reads "PATH: reason".
  bool writeNpy(const std::string &path, std::string &error) const;

private:
  DType type = DType::f32;
  llvm::SmallVector<int64_t, 4> dims;
  std::string data;
};

} // namespace sharc

#endif // SHARC_IR_TENSOR_H
