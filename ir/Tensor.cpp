//===- Tensor.cpp - host tensors for the evaluator ------------------------===//
//
// Element rounding, dtype conversions, and conversions from/to MLIR
// attributes and .npy arrays.
//
//===----------------------------------------------------------------------===//

#include "ir/Tensor.h"
#include "ir/SharcOps.h"

#include "runtime/Npy.h"

#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"
#include "llvm/ADT/bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir;
using namespace sharc;

//===----------------------------------------------------------------------===//
// DTypes and rounding
//===----------------------------------------------------------------------===//

std::optional<DType> sharc::dtypeOf(Type elementType) {
  if (elementType.isF64())
    return DType::f64;
  if (elementType.isF32())
    return DType::f32;
  if (elementType.isF16())
    return DType::f16;
  if (elementType.isBF16())
    return DType::bf16;
  if (elementType.isSignlessInteger(64))
    return DType::i64;
  if (elementType.isSignlessInteger(32))
    return DType::i32;
  if (elementType.isSignlessInteger(1))
    return DType::i1;
  return std::nullopt;
}

Type sharc::mlirType(DType type, MLIRContext *context) {
  switch (type) {
  case DType::f64:
    return Float64Type::get(context);
  case DType::f32:
    return Float32Type::get(context);
  case DType::f16:
    return Float16Type::get(context);
  case DType::bf16:
    return BFloat16Type::get(context);
  case DType::i64:
    return IntegerType::get(context, 64);
  case DType::i32:
    return IntegerType::get(context, 32);
  case DType::i1:
    return IntegerType::get(context, 1);
  }
  return Type();
}

/// Rounds to bfloat16 (8 exponent bits, 7 stored mantissa bits) in one
/// rounding, ties to even, independent of the floating-point environment.
static double roundToBFloat16(double value) {
  if (!std::isfinite(value) || value == 0)
    return value;
  constexpr double minNormal = 0x1p-126;
  constexpr double maxFinite = 0x1.fep127;
  if (std::fabs(value) < minNormal) {
    // Subnormal range: multiples of 2^-133.  Scaling by a power of two is
    // exact here, and so is the split into integer and fractional parts.
    double scaled = std::fabs(value) * 0x1p133;
    double whole = std::floor(scaled);
    double frac = scaled - whole;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(whole, 2.0) != 0))
      whole += 1;
    return std::copysign(whole * 0x1p-133, value);
  }
  // Normal range: drop the low 45 of the double's 52 mantissa bits; a carry
  // out of the mantissa correctly bumps the exponent.
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  constexpr int dropped = 52 - 7;
  uint64_t lsb = (bits >> dropped) & 1;
  bits += (uint64_t(1) << (dropped - 1)) - 1 + lsb;
  bits &= ~((uint64_t(1) << dropped) - 1);
  double rounded;
  std::memcpy(&rounded, &bits, sizeof(rounded));
  if (std::fabs(rounded) > maxFinite)
    return std::copysign(std::numeric_limits<double>::infinity(), value);
  return rounded;
}

double sharc::roundTo(DType type, double value) {
  switch (type) {
  case DType::f32:
    return static_cast<double>(static_cast<float>(value));
  case DType::f16:
    return static_cast<double>(static_cast<_Float16>(value));
  case DType::bf16:
    return roundToBFloat16(value);
  default:
    return value;
  }
}

int64_t sharc::wrapTo(DType type, int64_t value) {
  switch (type) {
  case DType::i32:
    return static_cast<int32_t>(static_cast<uint32_t>(value));
  case DType::i1:
    return value != 0;
  default:
    return value;
  }
}

/// Truncates toward zero, saturating to the int64 range; NaN gives 0.
static int64_t truncToInt64(double value) {
  if (std::isnan(value))
    return 0;
  if (value >= 0x1p63)
    return std::numeric_limits<int64_t>::max();
  if (value < -0x1p63)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

/// Converts an integer to float dtype `type` with a single rounding.
static double intToFloat(DType type, int64_t value) {
  if (value >= -(int64_t(1) << 53) && value <= (int64_t(1) << 53))
    return roundTo(type, static_cast<double>(value));
  const llvm::fltSemantics *semantics = &llvm::APFloat::IEEEdouble();
  switch (type) {
  case DType::f32:
    semantics = &llvm::APFloat::IEEEsingle();
    break;
  case DType::f16:
    semantics = &llvm::APFloat::IEEEhalf();
    break;
  case DType::bf16:
    semantics = &llvm::APFloat::BFloat();
    break;
  default:
    break;
  }
  llvm::APFloat result(*semantics);
  result.convertFromAPInt(llvm::APInt(64, value, /*isSigned=*/true),
                          /*IsSigned=*/true,
                          llvm::APFloat::rmNearestTiesToEven);
  bool losesInfo;
  result.convert(llvm::APFloat::IEEEdouble(),
                 llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return result.convertToDouble();
}

static double halfBitsToDouble(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof(half));
  return static_cast<double>(half);
}

static uint16_t doubleToHalfBits(double value) {
  _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

static double bfloatBitsToDouble(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return static_cast<double>(value);
}

/// `value` must already be a bf16 value (so the conversion to float is exact).
static uint16_t doubleToBfloatBits(double value) {
  float narrow = static_cast<float>(value);
  uint32_t wide;
  std::memcpy(&wide, &narrow, sizeof(wide));
  if (std::isnan(narrow))
    return 0x7fc0 | ((wide >> 16) & 0x8000);
  return static_cast<uint16_t>(wide >> 16);
}

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

Tensor::Tensor(DType type, ArrayRef<int64_t> shape)
    : type(type), dims(shape.begin(), shape.end()) {
  int64_t n = numElements();
  if (sharc::isFloat(type))
    floatData.assign(n, 0.0);
  else
    intData.assign(n, 0);
}

int64_t Tensor::numElements() const { return sharc::numElements(dims); }

double Tensor::getDouble(int64_t index) const {
  if (isFloat())
    return floatData[index];
  return static_cast<double>(intData[index]);
}

void Tensor::setDouble(int64_t index, double value) {
  if (isFloat())
    floatData[index] = roundTo(type, value);
  else if (type == DType::i1)
    intData[index] = value != 0;
  else
    intData[index] = wrapTo(type, truncToInt64(value));
}

int64_t Tensor::getInt(int64_t index) const {
  if (isFloat())
    return truncToInt64(floatData[index]);
  return intData[index];
}

Tensor Tensor::reshaped(ArrayRef<int64_t> shape) const {
  assert(sharc::numElements(shape) == numElements() &&
         "reshape must keep the element count");
  Tensor result = *this;
  result.dims.assign(shape.begin(), shape.end());
  return result;
}

RankedTensorType Tensor::mlirTensorType(MLIRContext *context) const {
  return RankedTensorType::get(dims, mlirType(type, context));
}

/// Decodes element `index` of a little-endian raw buffer of dtype `type`
/// (i1 as one byte per element) into `tensor` at `dest`.
static void decodeRaw(Tensor &tensor, const char *raw, int64_t index,
                      int64_t dest) {
  const char *p = raw + index * dtypeBytes(tensor.dtype());
  switch (tensor.dtype()) {
  case DType::f64: {
    double v;
    std::memcpy(&v, p, sizeof(v));
    tensor.floats()[dest] = v;
    return;
  }
  case DType::f32: {
    float v;
    std::memcpy(&v, p, sizeof(v));
    tensor.floats()[dest] = v;
    return;
  }
  case DType::f16:
  case DType::bf16: {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    tensor.floats()[dest] = tensor.dtype() == DType::f16
                                ? halfBitsToDouble(v)
                                : bfloatBitsToDouble(v);
    return;
  }
  case DType::i64: {
    int64_t v;
    std::memcpy(&v, p, sizeof(v));
    tensor.ints()[dest] = v;
    return;
  }
  case DType::i32: {
    int32_t v;
    std::memcpy(&v, p, sizeof(v));
    tensor.ints()[dest] = v;
    return;
  }
  case DType::i1:
    tensor.ints()[dest] = *p != 0;
    return;
  }
}

/// Fills `tensor` from a raw buffer holding either every element or, when
/// `splat`, a single one.
static void fillFromRaw(Tensor &tensor, ArrayRef<char> raw, bool splat) {
  int64_t n = tensor.numElements();
  for (int64_t i = 0; i < n; ++i)
    decodeRaw(tensor, raw.data(), splat ? 0 : i, i);
}

static double apFloatToDouble(llvm::APFloat value) {
  bool losesInfo;
  value.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
                &losesInfo);
  return value.convertToDouble();
}

std::optional<Tensor> Tensor::fromAttr(ElementsAttr attr) {
  auto shaped = dyn_cast<RankedTensorType>(attr.getType());
  if (!shaped || !shaped.hasStaticShape())
    return std::nullopt;
  std::optional<DType> dtype = dtypeOf(shaped.getElementType());
  if (!dtype)
    return std::nullopt;
  Tensor result(*dtype, shaped.getShape());
  int64_t n = result.numElements();

  if (auto dense = dyn_cast<DenseIntOrFPElementsAttr>(attr)) {
    if (*dtype == DType::i1) {
      int64_t i = 0;
      for (bool v : dense.getValues<bool>())
        result.intData[i++] = v;
      return result;
    }
    fillFromRaw(result, dense.getRawData(), dense.isSplat());
    return result;
  }

  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return std::nullopt;
    ArrayRef<char> data = blob->getData();
    if (static_cast<int64_t>(data.size()) !=
        n * static_cast<int64_t>(dtypeBytes(*dtype)))
      return std::nullopt;
    fillFromRaw(result, data, /*splat=*/false);
    return result;
  }

  // Any other ElementsAttr that can enumerate its values.
  int64_t i = 0;
  if (result.isFloat()) {
    auto values = attr.tryGetValues<llvm::APFloat>();
    if (!values)
      return std::nullopt;
    for (const llvm::APFloat &v : *values)
      result.floatData[i++] = apFloatToDouble(v);
    return result;
  }
  auto values = attr.tryGetValues<llvm::APInt>();
  if (!values)
    return std::nullopt;
  for (const llvm::APInt &v : *values)
    result.intData[i++] = *dtype == DType::i1 ? !v.isZero() : v.getSExtValue();
  return result;
}

DenseElementsAttr Tensor::toAttr(MLIRContext *context) const {
  RankedTensorType shaped = mlirTensorType(context);
  if (type == DType::i1) {
    SmallVector<bool> values(intData.begin(), intData.end());
    return DenseElementsAttr::get(shaped, ArrayRef<bool>(values));
  }
  PackedTensor packed = PackedTensor::pack(*this);
  return DenseElementsAttr::getFromRawBuffer(
      shaped, ArrayRef<char>(packed.bytes().data(), packed.bytes().size()));
}

Tensor Tensor::fromNpy(const rt::NpyArray &array) {
  DType dtype = DType::f32;
  switch (array.type) {
  case rt::NpyType::f64:
    dtype = DType::f64;
    break;
  case rt::NpyType::f32:
    dtype = DType::f32;
    break;
  case rt::NpyType::f16:
    dtype = DType::f16;
    break;
  case rt::NpyType::i64:
    dtype = DType::i64;
    break;
  case rt::NpyType::i32:
    dtype = DType::i32;
    break;
  case rt::NpyType::b1:
    dtype = DType::i1;
    break;
  }
  Tensor result(dtype, array.shape);
  // Decode only what the buffer holds (readNpy guarantees all of it).
  int64_t available = array.data.size() / dtypeBytes(dtype);
  for (int64_t i = 0, e = std::min(available, result.numElements()); i < e; ++i)
    decodeRaw(result, array.data.data(), i, i);
  return result;
}

/// How a .npy file stores elements of `type` (NumPy has no bfloat16: f32
/// holds each of its values exactly).
static rt::NpyType npyTypeOf(DType type) {
  switch (type) {
  case DType::f64:
    return rt::NpyType::f64;
  case DType::f32:
  case DType::bf16:
    return rt::NpyType::f32;
  case DType::f16:
    return rt::NpyType::f16;
  case DType::i64:
    return rt::NpyType::i64;
  case DType::i32:
    return rt::NpyType::i32;
  case DType::i1:
    return rt::NpyType::b1;
  }
  return rt::NpyType::f32;
}

rt::NpyArray Tensor::toNpy() const {
  PackedTensor packed =
      PackedTensor::pack(type == DType::bf16 ? convertTo(DType::f32) : *this);
  rt::NpyArray array;
  array.type = npyTypeOf(type);
  array.shape.assign(dims.begin(), dims.end());
  array.data.assign(packed.bytes().begin(), packed.bytes().end());
  return array;
}

Tensor Tensor::convertTo(DType to) const {
  Tensor result(to, dims);
  int64_t n = numElements();
  if (isFloat()) {
    for (int64_t i = 0; i < n; ++i)
      result.setDouble(i, floatData[i]);
    return result;
  }
  if (sharc::isFloat(to)) {
    for (int64_t i = 0; i < n; ++i)
      result.floatData[i] = intToFloat(to, intData[i]);
    return result;
  }
  for (int64_t i = 0; i < n; ++i)
    result.intData[i] = wrapTo(to, intData[i]);
  return result;
}

std::string sharc::describeTensor(DType type, ArrayRef<int64_t> shape) {
  std::string text = std::string(dtypeName(type)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string Tensor::describe() const { return describeTensor(type, dims); }

bool Tensor::operator==(const Tensor &other) const {
  if (type != other.type || dims != other.dims)
    return false;
  if (intData != other.intData || floatData.size() != other.floatData.size())
    return false;
  for (size_t i = 0; i < floatData.size(); ++i) {
    double a = floatData[i], b = other.floatData[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b))
        return false;
      continue;
    }
    if (a != b || std::signbit(a) != std::signbit(b))
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// PackedTensor
//===----------------------------------------------------------------------===//

static_assert(llvm::endianness::native == llvm::endianness::little,
              "PackedTensor and the .npy files hold little-endian bytes");

PackedTensor::PackedTensor(DType type, ArrayRef<int64_t> shape,
                           std::string bytes)
    : type(type), dims(shape.begin(), shape.end()), data(std::move(bytes)) {
  assert(data.size() == size_t(sharc::numElements(dims)) * dtypeBytes(type) &&
         "a packed tensor holds every element");
}

PackedTensor PackedTensor::pack(const Tensor &tensor) {
  int64_t n = tensor.numElements();
  std::string bytes(size_t(n) * dtypeBytes(tensor.dtype()), '\0');
  auto out = [&](auto value) {
    return reinterpret_cast<decltype(value) *>(bytes.data());
  };
  switch (tensor.dtype()) {
  case DType::f64:
    std::copy_n(tensor.floats().begin(), n, out(double()));
    break;
  case DType::f32:
    std::copy_n(tensor.floats().begin(), n, out(float()));
    break;
  case DType::f16:
  case DType::bf16: {
    uint16_t *bits = out(uint16_t());
    for (int64_t i = 0; i < n; ++i)
      bits[i] = tensor.dtype() == DType::f16
                    ? doubleToHalfBits(tensor.floats()[i])
                    : doubleToBfloatBits(tensor.floats()[i]);
    break;
  }
  case DType::i64:
    std::copy_n(tensor.ints().begin(), n, out(int64_t()));
    break;
  case DType::i32:
    std::copy_n(tensor.ints().begin(), n, out(int32_t()));
    break;
  case DType::i1:
    for (int64_t i = 0; i < n; ++i)
      bytes[i] = tensor.ints()[i] != 0;
    break;
  }
  return PackedTensor(tensor.dtype(), tensor.shape(), std::move(bytes));
}

Tensor PackedTensor::unpack() const {
  Tensor result(type, dims);
  fillFromRaw(result, ArrayRef<char>(data.data(), data.size()),
              /*splat=*/false);
  return result;
}

bool PackedTensor::writeNpy(const std::string &path, std::string &error) const {
  if (type == DType::bf16)
    return pack(unpack().convertTo(DType::f32)).writeNpy(path, error);
  return rt::writeNpy(path, npyTypeOf(type),
                      std::vector<int64_t>(dims.begin(), dims.end()),
                      data.data(), data.size(), error);
}
