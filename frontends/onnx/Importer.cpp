//===- Importer.cpp - ONNX to sharc IR: model, graph and nodes ------------===//
//
// Reads the model (binary protobuf or text format), checks the opset, turns
// graph inputs and float initializers into function arguments, sorts the
// nodes topologically and imports each with its rule from OpImporters.cpp
// (a model older than opset 13 only where ONNX's schemas show that the
// operator's definition is the one of opset 13).
// Every op built for a node is verified on creation and folded into a
// constant when its operands are constants, so shape computations disappear.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Importer.h"

#include "frontends/onnx/ImporterInternal.h"
#include "frontends/onnx/OpSchemas.h"
#include "frontends/onnx/TextFormat.h"
#include "ir/Evaluator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <queue>

using namespace mlir;
using namespace sharc;
using namespace sharc::onnx_import;

//===----------------------------------------------------------------------===//
// Shapes and element types
//===----------------------------------------------------------------------===//

std::string sharc::onnx_import::formatShape(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

std::optional<DType> sharc::onnx_import::dtypeFromOnnx(int64_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::DOUBLE:
    return DType::f64;
  case onnx::TensorProto::FLOAT:
    return DType::f32;
  case onnx::TensorProto::FLOAT16:
    return DType::f16;
  case onnx::TensorProto::BFLOAT16:
    return DType::bf16;
  case onnx::TensorProto::INT64:
    return DType::i64;
  case onnx::TensorProto::INT32:
    return DType::i32;
  case onnx::TensorProto::BOOL:
    return DType::i1;
  default:
    return std::nullopt;
  }
}

std::string sharc::onnx_import::onnxTypeName(int64_t onnxType) {
  if (onnxType < INT_MIN || onnxType > INT_MAX ||
      !onnx::TensorProto::DataType_IsValid(static_cast<int>(onnxType)))
    return "type #" + std::to_string(onnxType);
  return llvm::StringRef(
             onnx::TensorProto::DataType_Name(
                 static_cast<onnx::TensorProto::DataType>(onnxType)))
      .lower();
}

/// The default-domain opsets whose operator definitions sharc implements.
/// Older opsets import where an operator's definition is unchanged since.
static constexpr int64_t kMinOpset = 13;
static constexpr int64_t kMaxOpset = 28;

/// The element types sharc accepts, as ONNX names them.
static constexpr const char *kSupportedTypes =
    "double, float, float16, bfloat16, int64, int32 and bool";

//===----------------------------------------------------------------------===//
// TensorReader
//===----------------------------------------------------------------------===//

static double halfBitsToDouble(const llvm::fltSemantics &semantics,
                               uint16_t bits) {
  return llvm::APFloat(semantics, llvm::APInt(16, bits)).convertToDouble();
}

/// Number of values `proto` holds in the typed field used for `type`.
static int64_t typedFieldSize(const onnx::TensorProto &proto, DType type) {
  switch (type) {
  case DType::f64:
    return proto.double_data_size();
  case DType::f32:
    return proto.float_data_size();
  case DType::f16:
  case DType::bf16:
  case DType::i32:
  case DType::i1:
    return proto.int32_data_size();
  case DType::i64:
    return proto.int64_data_size();
  }
  return 0;
}

/// Copies the typed field of `proto` into `tensor` (sizes already checked).
static void decodeTyped(const onnx::TensorProto &proto, Tensor &tensor) {
  int64_t count = tensor.numElements();
  for (int64_t i = 0; i < count; ++i) {
    switch (tensor.dtype()) {
    case DType::f64:
      tensor.floats()[i] = proto.double_data(i);
      break;
    case DType::f32:
      tensor.floats()[i] = proto.float_data(i);
      break;
    case DType::f16:
      tensor.floats()[i] =
          halfBitsToDouble(llvm::APFloat::IEEEhalf(),
                           static_cast<uint16_t>(proto.int32_data(i)));
      break;
    case DType::bf16:
      tensor.floats()[i] = halfBitsToDouble(
          llvm::APFloat::BFloat(), static_cast<uint16_t>(proto.int32_data(i)));
      break;
    case DType::i64:
      tensor.ints()[i] = proto.int64_data(i);
      break;
    case DType::i32:
      tensor.ints()[i] = proto.int32_data(i);
      break;
    case DType::i1:
      tensor.ints()[i] = proto.int32_data(i) != 0;
      break;
    }
  }
}

FailureOr<std::pair<DType, SmallVector<int64_t>>>
TensorReader::header(const onnx::TensorProto &proto, Location loc,
                     const Twine &what) const {
  std::optional<DType> dtype = dtypeFromOnnx(proto.data_type());
  if (!dtype)
    return emitError(loc) << what << " has unsupported element type "
                          << onnxTypeName(proto.data_type())
                          << " (sharc supports " << kSupportedTypes << ")";
  if (proto.has_segment())
    return emitError(loc) << what << " is segmented, which is not supported";
  SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  if (!checkedNumElements(shape))
    return emitError(loc) << what << " has an invalid or too large shape "
                          << formatShape(shape);
  return std::make_pair(*dtype, shape);
}

FailureOr<Tensor> TensorReader::read(const onnx::TensorProto &proto,
                                     Location loc, const Twine &what) const {
  FailureOr<PackedTensor> packed = pack(proto, loc, what, nullptr);
  if (failed(packed))
    return failure();
  return packed->unpack();
}

FailureOr<PackedTensor> TensorReader::take(onnx::TensorProto &proto,
                                           Location loc,
                                           const Twine &what) const {
  return pack(proto, loc, what,
              proto.has_raw_data() ? proto.mutable_raw_data() : nullptr);
}

FailureOr<PackedTensor> TensorReader::pack(const onnx::TensorProto &proto,
                                           Location loc, const Twine &what,
                                           std::string *rawData) const {
  auto typeAndShape = header(proto, loc, what);
  if (failed(typeAndShape))
    return failure();
  auto &[dtype, shape] = *typeAndShape;
  int64_t count = *checkedNumElements(shape);
  uint64_t expectedBytes = static_cast<uint64_t>(count) * dtypeBytes(dtype);

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    FailureOr<std::string> bytes =
        readExternal(proto, expectedBytes, loc, what);
    if (failed(bytes))
      return failure();
    return PackedTensor(dtype, shape, std::move(*bytes));
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != expectedBytes)
      return emitError(loc) << what << " has " << proto.raw_data().size()
                            << " bytes of raw data, but its shape "
                            << formatShape(shape) << " needs " << expectedBytes;
    if (rawData)
      return PackedTensor(dtype, shape, std::move(*rawData));
    return PackedTensor(dtype, shape, proto.raw_data());
  }
  int64_t given = typedFieldSize(proto, dtype);
  if (given != count)
    return emitError(loc) << what << " has " << given
                          << " values, but its shape " << formatShape(shape)
                          << " needs " << count;
  Tensor tensor(dtype, shape);
  decodeTyped(proto, tensor);
  return PackedTensor::pack(tensor);
}

FailureOr<std::string>
TensorReader::readExternal(const onnx::TensorProto &proto,
                           uint64_t expectedBytes, Location loc,
                           const Twine &what) const {
  if (baseDir.empty())
    return emitError(loc) << what
                          << " uses external data, which is not allowed here";
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const onnx::StringStringEntryProto &entry : proto.external_data()) {
    StringRef key = entry.key(), value = entry.value();
    if (key == "location") {
      location = value;
    } else if (key == "offset" || key == "length") {
      uint64_t number;
      if (value.getAsInteger(10, number))
        return emitError(loc) << what << " has an invalid external-data " << key
                              << " '" << value << "'";
      if (key == "offset")
        offset = number;
      else
        length = number;
    }
  }
  if (location.empty())
    return emitError(loc) << what
                          << " uses external data but gives no location";
  namespace path = llvm::sys::path;
  bool escapes = path::is_absolute(location) ||
                 path::is_absolute(location, path::Style::windows) ||
                 llvm::is_contained(location, '\0');
  for (auto it = path::begin(location), end = path::end(location);
       !escapes && it != end; ++it)
    escapes = *it == "..";
  if (escapes)
    return emitError(loc) << what << ": external data location '" << location
                          << "' is outside the model's directory";

  SmallString<256> file(baseDir);
  path::append(file, location);
  SmallString<256> realFile, realBase;
  if (std::error_code ec = llvm::sys::fs::real_path(file, realFile))
    return emitError(loc) << what << ": cannot open external data file '"
                          << file << "': " << ec.message();
  if (std::error_code ec = llvm::sys::fs::real_path(baseDir, realBase))
    return emitError(loc) << what << ": cannot resolve the model directory '"
                          << baseDir << "': " << ec.message();
  if (!path::is_separator(realBase.back()))
    realBase += path::get_separator();
  StringRef inside = realFile.str();
  if (!inside.consume_front(realBase) || inside.empty())
    return emitError(loc) << what << ": external data file '" << file
                          << "' resolves outside the model's directory";
  if (!llvm::sys::fs::is_regular_file(realFile))
    return emitError(loc) << what << ": external data '" << file
                          << "' is not a regular file";
  uint64_t fileSize;
  if (std::error_code ec = llvm::sys::fs::file_size(realFile, fileSize))
    return emitError(loc) << what << ": cannot read external data file '"
                          << file << "': " << ec.message();
  if (offset > fileSize || (length && *length > fileSize - offset))
    return emitError(loc) << what << ": external data (offset " << offset
                          << ", length " << (length ? *length : 0)
                          << ") extends past the end of '" << file << "' ("
                          << fileSize << " bytes)";
  uint64_t size = length ? *length : fileSize - offset;
  if (size != expectedBytes)
    return emitError(loc) << what << " has " << size
                          << " bytes of external data, but needs "
                          << expectedBytes;
  if (size == 0)
    return std::string();
  auto buffer = llvm::MemoryBuffer::getFileSlice(realFile, size, offset);
  if (!buffer)
    return emitError(loc) << what << ": cannot read external data file '"
                          << file << "': " << buffer.getError().message();
  std::string bytes = (*buffer)->getBuffer().str();
  if (onRead)
    onRead(size);
  return bytes;
}

//===----------------------------------------------------------------------===//
// NodeImporter
//===----------------------------------------------------------------------===//

std::optional<Tensor> NodeImporter::constantInput(unsigned index) const {
  Value value = input(index);
  auto constant = value ? value.getDefiningOp<ConstantOp>() : ConstantOp();
  if (!constant)
    return std::nullopt;
  return Tensor::fromAttr(constant.getValue());
}

FailureOr<Tensor> NodeImporter::requireConstant(unsigned index,
                                                StringRef what) const {
  std::optional<Tensor> value = constantInput(index);
  if (!value)
    return emitError() << what << " (input #" << index << " '"
                       << proto.input(index)
                       << "') must be a constant computable at import time";
  return std::move(*value);
}

FailureOr<SmallVector<int64_t>>
NodeImporter::requireInts(unsigned index, StringRef what) const {
  FailureOr<Tensor> value = requireConstant(index, what);
  if (failed(value))
    return failure();
  if ((value->dtype() != DType::i64 && value->dtype() != DType::i32) ||
      value->rank() > 1)
    return emitError() << what
                       << " must be an integer scalar or 1-D tensor, got "
                       << value->describe();
  return SmallVector<int64_t>(value->ints());
}

/// The type of `attr`, inferred from the field that is set when the model
/// leaves it undefined (as old exporters did).
static onnx::AttributeProto::AttributeType
effectiveType(const onnx::AttributeProto &attr) {
  if (attr.type() != onnx::AttributeProto::UNDEFINED)
    return attr.type();
  if (attr.has_f())
    return onnx::AttributeProto::FLOAT;
  if (attr.has_i())
    return onnx::AttributeProto::INT;
  if (attr.has_s())
    return onnx::AttributeProto::STRING;
  if (attr.has_t())
    return onnx::AttributeProto::TENSOR;
  if (attr.has_g())
    return onnx::AttributeProto::GRAPH;
  if (attr.floats_size())
    return onnx::AttributeProto::FLOATS;
  if (attr.ints_size())
    return onnx::AttributeProto::INTS;
  if (attr.strings_size())
    return onnx::AttributeProto::STRINGS;
  return onnx::AttributeProto::UNDEFINED;
}

static std::string attrTypeName(onnx::AttributeProto::AttributeType type) {
  return llvm::StringRef(onnx::AttributeProto::AttributeType_Name(type))
      .lower();
}

LogicalResult NodeImporter::checkAttributes(ArrayRef<AttrSpec> specs) const {
  llvm::StringSet<> seen;
  for (const onnx::AttributeProto &attr : proto.attribute()) {
    const std::string &name = attr.name();
    if (!seen.insert(name).second)
      return emitError() << "attribute '" << name << "' is given twice";
    if (!attr.ref_attr_name().empty())
      return emitError() << "attribute '" << name
                         << "' refers to a function attribute, which is "
                            "only allowed inside functions";
    const AttrSpec *spec = llvm::find_if(specs, [&](const AttrSpec &s) {
      return name == s.name && opsetVersion >= s.sinceOpset &&
             opsetVersion <= s.untilOpset;
    });
    if (spec == specs.end())
      return emitError() << "unsupported attribute '" << name << "'";
    if (effectiveType(attr) != spec->type)
      return emitError() << "attribute '" << name << "' must be of type "
                         << attrTypeName(spec->type) << ", got "
                         << attrTypeName(effectiveType(attr));
  }
  return success();
}

const onnx::AttributeProto *NodeImporter::findAttr(StringRef name) const {
  for (const onnx::AttributeProto &attr : proto.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t NodeImporter::getInt(StringRef name, int64_t defaultValue) const {
  const onnx::AttributeProto *attr = findAttr(name);
  return attr ? attr->i() : defaultValue;
}

double NodeImporter::getFloat(StringRef name, double defaultValue) const {
  const onnx::AttributeProto *attr = findAttr(name);
  return attr ? attr->f() : defaultValue;
}

std::string NodeImporter::getString(StringRef name,
                                    StringRef defaultValue) const {
  const onnx::AttributeProto *attr = findAttr(name);
  return attr ? attr->s() : defaultValue.str();
}

std::optional<SmallVector<int64_t>>
NodeImporter::getInts(StringRef name) const {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr)
    return std::nullopt;
  return SmallVector<int64_t>(attr->ints().begin(), attr->ints().end());
}

std::optional<SmallVector<std::string>>
NodeImporter::getStrings(StringRef name) const {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr)
    return std::nullopt;
  return SmallVector<std::string>(attr->strings().begin(),
                                  attr->strings().end());
}

std::optional<SmallVector<double>>
NodeImporter::getFloats(StringRef name) const {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr)
    return std::nullopt;
  return SmallVector<double>(attr->floats().begin(), attr->floats().end());
}

const onnx::TensorProto *NodeImporter::getTensor(StringRef name) const {
  const onnx::AttributeProto *attr = findAttr(name);
  return attr ? &attr->t() : nullptr;
}

Value NodeImporter::constant(const Tensor &value) {
  DenseElementsAttr attr = value.toAttr(context());
  return ConstantOp::create(builder, location, attr.getType(), attr);
}

Value NodeImporter::scalar(Type elementType, double value) {
  Tensor tensor(*dtypeOf(elementType), {});
  tensor.setDouble(0, value);
  return constant(tensor);
}

FailureOr<Value> NodeImporter::reshape(Value value, ArrayRef<int64_t> shape) {
  RankedTensorType type = tensorTypeOf(value);
  if (type.getShape() == shape)
    return value;
  std::optional<int64_t> count = checkedNumElements(shape);
  if (!count || *count != type.getNumElements())
    return emitError() << "cannot reshape " << formatShape(type.getShape())
                       << " (" << type.getNumElements() << " elements) to "
                       << formatShape(shape);
  return createTyped<ReshapeOp>(
      RankedTensorType::get(shape, type.getElementType()), value);
}

FailureOr<Value> NodeImporter::broadcast(Value value, ArrayRef<int64_t> shape) {
  RankedTensorType type = tensorTypeOf(value);
  if (type.getShape() == shape)
    return value;
  if (!checkedNumElements(shape) || !isBroadcastableTo(type.getShape(), shape))
    return emitError() << "cannot broadcast " << formatShape(type.getShape())
                       << " to " << formatShape(shape);
  return createTyped<BroadcastOp>(
      RankedTensorType::get(shape, type.getElementType()), value);
}

FailureOr<Value> NodeImporter::cast(Value value, Type elementType) {
  RankedTensorType type = tensorTypeOf(value);
  if (type.getElementType() == elementType)
    return value;
  return createTyped<CastOp>(type.clone(elementType), value);
}

/// The number of elements folding `op` touches (operands and results), or
/// std::nullopt when one of them is too large to fold.
static std::optional<int64_t> foldedElements(Operation *op) {
  int64_t total = 0;
  auto fits = [&](Type type) {
    auto tensor = cast<RankedTensorType>(type);
    int64_t limit = isa<FloatType>(tensor.getElementType())
                        ? kMaxFoldedFloatElements
                        : kMaxFoldedIntElements;
    total += tensor.getNumElements();
    return tensor.getNumElements() <= limit;
  };
  if (!llvm::all_of(op->getOperandTypes(), fits) ||
      !llvm::all_of(op->getResultTypes(), fits))
    return std::nullopt;
  return total;
}

FailureOr<SmallVector<Value>> NodeImporter::finish(OperationState &state) {
  Operation *op = builder.create(state);
  if (failed(mlir::verify(op))) {
    op->erase();
    return failure();
  }
  for (Type type : op->getResultTypes()) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !checkedNumElements(tensor.getShape())) {
      op->erase();
      return emitError() << "result type " << type << " is too large";
    }
  }
  SmallVector<Value> results(op->getResults());
  std::optional<int64_t> elements = foldedElements(op);
  if (isa<ConstantOp>(op) || !elements || *elements > foldBudget)
    return results;
  std::vector<Tensor> operands;
  for (Value operand : op->getOperands()) {
    auto defining = operand.getDefiningOp<ConstantOp>();
    std::optional<Tensor> value =
        defining ? Tensor::fromAttr(defining.getValue()) : std::nullopt;
    if (!value)
      return results;
    operands.push_back(std::move(*value));
  }
  foldBudget -= *elements;
  FailureOr<std::vector<Tensor>> folded = evaluateOp(op, operands);
  if (failed(folded)) {
    op->erase();
    return failure();
  }
  for (auto [index, value] : llvm::enumerate(*folded)) {
    if (index >= results.size() ||
        value.mlirTensorType(context()) != results[index].getType()) {
      op->erase();
      return emitError() << "constant folding of '" << state.name
                         << "' gave a result of the wrong type";
    }
    results[index] = constant(value);
  }
  op->erase();
  return results;
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

namespace {

/// Imports one ModelProto into a module holding one func.func.
class GraphImporter {
public:
  GraphImporter(MLIRContext &context, StringRef sourceName, StringRef baseDir,
                const ImportOptions &options)
      : context(context), reader(baseDir, options.onRead), options(options),
        fileLoc(FileLineColLoc::get(&context, sourceName, 0, 0)) {}

  /// Imports `model`, taking its initializers' raw data (moved into
  /// ImportedModel::parameters, not copied).
  FailureOr<ImportedModel> import(onnx::ModelProto &model);

private:
  LogicalResult readOpset(const onnx::ModelProto &model);
  FailureOr<RankedTensorType> inputType(const onnx::ValueInfoProto &input);
  /// Topological order of the graph's nodes (stable for sorted graphs).
  FailureOr<SmallVector<int>> sortNodes(const onnx::GraphProto &graph);
  LogicalResult importNode(const onnx::NodeProto &node, int index,
                           OpBuilder &builder);
  FailureOr<Results> runRule(const onnx::NodeProto &node, Location loc,
                             OpBuilder &builder);
  /// In a model older than kMinOpset, checks that ONNX defines `opType` at
  /// the model's opset as at kMinOpset, so that its rule applies.
  LogicalResult checkOlderOpset(const std::string &opType, Location loc) const;
  LogicalResult checkOutput(const onnx::ValueInfoProto &output, Value value);

  std::string nodeLabel(const onnx::NodeProto &node, int index) const;
  Location nodeLoc(const onnx::NodeProto &node, int index) const;
  /// "OpType (opset N): ", the prefix of node diagnostics (located at the
  /// node, so the location names the node and the file).
  std::string describeNode(const onnx::NodeProto &node) const;
  Location namedLoc(StringRef name) const {
    return NameLoc::get(StringAttr::get(&context, name), fileLoc);
  }

  MLIRContext &context;
  TensorReader reader;
  const ImportOptions &options;
  Location fileLoc;
  int64_t opset = 0;
  /// The version of ai.onnx.preview.training the model imports (0: none).
  int64_t previewTrainingOpset = 0;
  int64_t foldBudget = kFoldBudget;
  /// ONNX value name -> its value in the function being built.
  llvm::StringMap<Value> values;
  /// Sequence values: their tensors, in order.
  llvm::StringMap<SmallVector<Value>> sequences;
  /// The function's entry block, its data inputs' rows (dim 0 of the first
  /// data input with dimensions; 1 without one), the random ops' key
  /// arguments once a node asked for them, and how many random ops there
  /// are (each its own stream).
  Block *entry = nullptr;
  int64_t batchRows = 1;
  Value randomStep, randomRows;
  uint32_t numRandomOps = 0;
  /// Buffers the forward pass updates (argument, new value), in order, and
  /// the keys of the warnings given once.
  SmallVector<std::pair<BlockArgument, Value>> bufferUpdates;
  llvm::StringSet<> warned;
};

} // namespace

std::string GraphImporter::nodeLabel(const onnx::NodeProto &node,
                                     int index) const {
  if (!node.name().empty())
    return node.name();
  return node.op_type() + "_" + std::to_string(index);
}

Location GraphImporter::nodeLoc(const onnx::NodeProto &node, int index) const {
  return namedLoc(nodeLabel(node, index));
}

std::string GraphImporter::describeNode(const onnx::NodeProto &node) const {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return node.domain() + "." + node.op_type() + ": ";
  return node.op_type() + " (opset " + std::to_string(opset) + "): ";
}

LogicalResult GraphImporter::readOpset(const onnx::ModelProto &model) {
  std::optional<int64_t> version;
  for (const onnx::OperatorSetIdProto &entry : model.opset_import()) {
    if (entry.domain() == kPreviewTrainingDomain)
      previewTrainingOpset = entry.version();
    if (!entry.domain().empty() && entry.domain() != "ai.onnx")
      continue;
    if (version && *version != entry.version())
      return emitError(fileLoc) << "the model imports the default ONNX opset "
                                   "twice, as versions "
                                << *version << " and " << entry.version();
    version = entry.version();
  }
  // A model of ONNX's optimizer operators alone needs no default opset; a
  // default-domain node in it is an error (runRule).
  if (!version && previewTrainingOpset)
    return success();
  if (!version)
    return emitError(fileLoc)
           << "the model imports no version of the default ONNX opset";
  if (*version < 1)
    return emitError(fileLoc) << "the model uses ONNX opset " << *version
                              << ", which does not exist (opsets start at 1)";
  if (*version > kMaxOpset)
    return emitError(fileLoc) << "the model uses ONNX opset " << *version
                              << "; sharc supports opsets up to " << kMaxOpset;
  opset = *version;
  return success();
}

FailureOr<RankedTensorType>
GraphImporter::inputType(const onnx::ValueInfoProto &input) {
  const std::string &name = input.name();
  if (!input.type().has_tensor_type())
    return emitError(fileLoc) << "graph input '" << name << "' is not a tensor";
  const onnx::TypeProto::Tensor &tensor = input.type().tensor_type();
  std::optional<DType> dtype = dtypeFromOnnx(tensor.elem_type());
  if (!dtype)
    return emitError(fileLoc)
           << "graph input '" << name << "' has unsupported element type "
           << onnxTypeName(tensor.elem_type()) << " (sharc supports "
           << kSupportedTypes << ")";
  SmallVector<int64_t> shape;
  auto given = options.inputShapes.find(name);
  if (given != options.inputShapes.end()) {
    shape = given->second;
    if (tensor.has_shape() &&
        tensor.shape().dim_size() != static_cast<int>(shape.size()))
      return emitError(fileLoc)
             << "graph input '" << name << "' has rank "
             << tensor.shape().dim_size() << ", but the shape given for it, "
             << formatShape(shape) << ", has rank " << shape.size();
  } else {
    if (!tensor.has_shape())
      return emitError(fileLoc) << "graph input '" << name
                                << "' has no shape; give its static shape "
                                   "(--input-shape "
                                << name << "=D0xD1...)";
    auto data = options.dataShapes.find(name);
    for (auto [index, dim] : llvm::enumerate(tensor.shape().dim())) {
      if (dim.has_dim_value() && dim.dim_value() >= 0) {
        shape.push_back(dim.dim_value());
        continue;
      }
      // A dynamic dimension: the batch, or the data's.
      if (index == 0 && options.batchSize) {
        shape.push_back(*options.batchSize);
        continue;
      }
      if (data != options.dataShapes.end() &&
          data->second.size() ==
              static_cast<size_t>(tensor.shape().dim_size()) &&
          data->second[index] >= 0) {
        shape.push_back(data->second[index]);
        continue;
      }
      return emitError(fileLoc)
             << "graph input '" << name << "' has dynamic dimension " << index
             << (dim.dim_param().empty() ? "" : " ('") << dim.dim_param()
             << (dim.dim_param().empty() ? "" : "')")
             << "; give its static shape (--input-shape " << name
             << "=D0xD1...)"
             << (index == 0 ? " or, for training, the micro-batch "
                              "(train_micro_batch_size_per_gpu in --config)"
                            : "");
    }
  }
  if (!checkedNumElements(shape))
    return emitError(fileLoc)
           << "graph input '" << name << "' has an invalid or too large shape "
           << formatShape(shape);
  return RankedTensorType::get(shape, mlirType(*dtype, &context));
}

FailureOr<SmallVector<int>>
GraphImporter::sortNodes(const onnx::GraphProto &graph) {
  int numNodes = graph.node_size();
  llvm::StringMap<int> producer;
  for (int i = 0; i < numNodes; ++i) {
    for (const std::string &output : graph.node(i).output()) {
      if (output.empty())
        continue;
      if (values.count(output))
        return emitError(nodeLoc(graph.node(i), i))
               << describeNode(graph.node(i)) << "output '" << output
               << "' redefines a graph input or initializer";
      auto [it, inserted] = producer.try_emplace(output, i);
      if (!inserted)
        return emitError(nodeLoc(graph.node(i), i))
               << describeNode(graph.node(i)) << "output '" << output
               << "' is also produced by node '"
               << nodeLabel(graph.node(it->second), it->second) << "'";
    }
  }
  std::vector<SmallVector<int>> users(numNodes);
  std::vector<int> pending(numNodes, 0);
  for (int i = 0; i < numNodes; ++i) {
    for (const std::string &input : graph.node(i).input()) {
      if (input.empty() || values.count(input))
        continue;
      auto it = producer.find(input);
      if (it == producer.end())
        return emitError(nodeLoc(graph.node(i), i))
               << describeNode(graph.node(i)) << "input '" << input
               << "' is never produced (it is not a graph input, an "
                  "initializer or a node output)";
      users[it->second].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < numNodes; ++i)
    if (pending[i] == 0)
      ready.push(i);
  SmallVector<int> order;
  std::vector<bool> done(numNodes, false);
  while (!ready.empty()) {
    int next = ready.top();
    ready.pop();
    order.push_back(next);
    done[next] = true;
    for (int user : users[next])
      if (--pending[user] == 0)
        ready.push(user);
  }
  if (static_cast<int>(order.size()) == numNodes)
    return order;

  // Walk producers from a node that never became ready until a node
  // repeats: that node lies on a cycle.
  int current = llvm::find(done, false) - done.begin();
  std::vector<bool> visited(numNodes, false);
  while (!visited[current]) {
    visited[current] = true;
    for (const std::string &input : graph.node(current).input()) {
      auto it = producer.find(input);
      if (!input.empty() && !values.count(input) && it != producer.end() &&
          !done[it->second]) {
        current = it->second;
        break;
      }
    }
  }
  return emitError(nodeLoc(graph.node(current), current))
         << describeNode(graph.node(current))
         << "the graph has a cycle through this node";
}

LogicalResult GraphImporter::checkOlderOpset(const std::string &opType,
                                             Location loc) const {
  int64_t defined = 0, current = 0;
  std::string error;
  if (!lookUpSinceVersion(opType, opset, defined, error) ||
      !lookUpSinceVersion(opType, kMinOpset, current, error))
    return emitError(loc) << error;
  if (defined == 0)
    return emitError(loc) << "ONNX opset " << opset << " has no operator '"
                          << opType << "'";
  if (defined != current)
    return emitError(loc) << "this model's opset defines " << opType << "-"
                          << defined
                          << ", which sharc does not support (sharc "
                             "implements the definitions in force from opset "
                          << kMinOpset << " to " << kMaxOpset
                          << "); re-export the model at opset " << kMinOpset
                          << " or later";
  return success();
}

FailureOr<Results> GraphImporter::runRule(const onnx::NodeProto &node,
                                          Location loc, OpBuilder &builder) {
  StringRef domain = node.domain();
  bool preview = domain == kPreviewTrainingDomain;
  if (!domain.empty() && domain != "ai.onnx" && !preview)
    return emitError(loc) << "operator domain '" << domain
                          << "' is not supported (sharc imports the default "
                             "ONNX domain and "
                          << kPreviewTrainingDomain << ")";
  if (preview && previewTrainingOpset != 1)
    return emitError(loc) << "the model does not import version 1 of "
                          << kPreviewTrainingDomain;
  if (!preview && opset == 0)
    return emitError(loc)
           << "the model imports no version of the default ONNX opset";
  const OpRule *rule = preview ? findPreviewTrainingRule(node.op_type())
                               : findOpRule(node.op_type());
  if (!rule)
    return emitError(loc) << "unsupported ONNX operator '" << node.op_type()
                          << "'";
  if (!preview && rule->sinceOpset > kMinOpset && opset < rule->sinceOpset)
    return emitError(loc) << "'" << node.op_type() << "' needs opset "
                          << rule->sinceOpset << " or newer";
  if (!preview && !rule->deprecated && opset < kMinOpset &&
      failed(checkOlderOpset(node.op_type(), loc)))
    return failure();
  unsigned numInputs = node.input_size();
  if (numInputs > rule->maxInputs)
    return emitError(loc) << "takes at most " << rule->maxInputs
                          << " inputs, got " << numInputs;
  if (numInputs < rule->minInputs)
    return emitError(loc) << "needs at least " << rule->minInputs
                          << " inputs, got " << numInputs;
  if (static_cast<unsigned>(node.output_size()) > rule->maxOutputs)
    return emitError(loc) << "has " << node.output_size()
                          << " outputs; at most " << rule->maxOutputs
                          << " are supported";
  SmallVector<Value> inputs;
  SmallVector<Value> sequence;
  for (auto [index, name] : llvm::enumerate(node.input())) {
    if (name.empty() && index < rule->minInputs)
      return emitError(loc) << "required input #" << index << " is missing";
    if (index == 0 && consumesSequence(node.op_type())) {
      auto found = sequences.find(name);
      if (found == sequences.end())
        return emitError(loc) << "input '" << name
                              << "' is not a sequence that SplitToSequence "
                                 "made";
      sequence = found->second;
      inputs.push_back(Value());
      continue;
    }
    Value value = name.empty() ? Value() : values.lookup(name);
    if (!name.empty() && !value && sequences.count(name))
      return emitError(loc) << "input '" << name
                            << "' is a sequence, which sharc only reads "
                               "with SequenceAt";
    if (!name.empty() && !value)
      return emitError(loc) << "input '" << name << "' has no value";
    inputs.push_back(value);
  }
  NodeImporter importer(builder, reader, node, std::max(opset, kMinOpset), loc,
                        std::move(inputs), foldBudget);
  importer.setSequenceInput(std::move(sequence));
  importer.setRandomKeySource([this]() {
    // The key arguments come after every other argument, step then rows.
    if (!randomStep) {
      auto func = cast<func::FuncOp>(entry->getParentOp());
      auto i64 = IntegerType::get(&context, 64);
      Builder b(&context);
      for (auto [role, type] :
           {std::pair<StringRef, Type>{"step", RankedTensorType::get({}, i64)},
            {"rows", RankedTensorType::get({batchRows}, i64)}}) {
        NamedAttribute attr(SharcDialect::getRandomKeyAttrName(),
                            b.getStringAttr(role));
        (void)func.insertArgument(func.getNumArguments(), type,
                                  b.getDictionaryAttr(attr), fileLoc);
      }
      randomStep = entry->getArgument(func.getNumArguments() - 2);
      randomRows = entry->getArgument(func.getNumArguments() - 1);
    }
    return RandomKey{randomStep, randomRows, numRandomOps++};
  });
  importer.setBufferSink([this](Value value, Value update) -> LogicalResult {
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg || arg.getOwner() != entry)
      return success();
    auto func = cast<func::FuncOp>(entry->getParentOp());
    if (!getParamAttr(func, arg.getArgNumber()))
      return success();
    func.setArgAttr(arg.getArgNumber(), SharcDialect::getBufferAttrName(),
                    UnitAttr::get(&context));
    if (!update)
      return success();
    if (llvm::any_of(bufferUpdates,
                     [&](const auto &entry) { return entry.first == arg; }))
      return emitError(update.getLoc())
             << "running statistic '"
             << getParamAttr(func, arg.getArgNumber()).getSource()
             << "' is updated by two BatchNormalization nodes";
    bufferUpdates.push_back({arg, update});
    return success();
  });
  importer.setOnceSink(
      [this](StringRef key) { return warned.insert(key).second; });
  if (failed(importer.checkAttributes(rule->attributes)))
    return failure();
  return rule->import(importer);
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node, int index,
                                        OpBuilder &builder) {
  Location loc = nodeLoc(node, index);
  SmallVector<std::string> errors;
  FailureOr<Results> results = failure();
  {
    // Collect the errors of the node's rule and of the ops it builds, and
    // report them as one error that names the node.
    ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Error)
        return failure();
      errors.push_back(diag.str());
      return success();
    });
    results = runRule(node, loc, builder);
  }
  if (failed(results)) {
    InFlightDiagnostic diag = emitError(loc) << describeNode(node);
    if (errors.empty())
      diag << "import failed";
    else
      diag << llvm::join(errors, "; ");
    return failure();
  }
  if (producesSequence(node.op_type())) {
    if (!node.output(0).empty())
      sequences[node.output(0)].assign(results->begin(), results->end());
    return success();
  }
  for (auto [output, name] : llvm::enumerate(node.output())) {
    if (name.empty())
      continue;
    if (output >= results->size() || !(*results)[output])
      return emitError(loc) << describeNode(node) << "output #" << output
                            << " ('" << name << "') is not supported";
    values[name] = (*results)[output];
  }
  return success();
}

LogicalResult GraphImporter::checkOutput(const onnx::ValueInfoProto &output,
                                         Value value) {
  if (!output.type().has_tensor_type() ||
      output.type().tensor_type().elem_type() == onnx::TensorProto::UNDEFINED)
    return success();
  int32_t declared = output.type().tensor_type().elem_type();
  std::optional<DType> dtype = dtypeFromOnnx(declared);
  Type computed = tensorTypeOf(value).getElementType();
  if (!dtype || mlirType(*dtype, &context) != computed)
    return emitError(fileLoc)
           << "graph output '" << output.name() << "' is declared "
           << onnxTypeName(declared) << " but computes " << computed;
  return success();
}

/// `name` reduced to [A-Za-z0-9_], not starting with a digit, and made
/// unique among `used`.
static std::string sanitizeName(StringRef name, llvm::StringSet<> &used) {
  std::string base;
  for (char c : name)
    base.push_back(llvm::isAlnum(c) || c == '_' ? c : '_');
  if (base.empty() || llvm::isDigit(base.front()))
    base.insert(base.begin(), '_');
  std::string candidate = base;
  for (int suffix = 1; !used.insert(candidate).second; ++suffix)
    candidate = base + "_" + std::to_string(suffix);
  return candidate;
}

FailureOr<ImportedModel> GraphImporter::import(onnx::ModelProto &model) {
  if (!model.has_graph())
    return emitError(fileLoc) << "not a valid ONNX model: it has no graph";
  if (failed(readOpset(model)))
    return failure();
  const onnx::GraphProto &graph = model.graph();
  if (graph.sparse_initializer_size())
    return emitError(fileLoc) << "sparse initializers are not supported";

  // Initializers, then the graph inputs that are not initializers.  A float
  // initializer is a trainable parameter (a function argument); with
  // shapesOnly its values are not read.
  struct Initializer {
    DType dtype;
    SmallVector<int64_t> shape;
    std::optional<PackedTensor> value;
    bool isFloat() const { return sharc::isFloat(dtype); }
  };
  llvm::StringSet<> initializerNames;
  std::vector<Initializer> initializers;
  initializers.reserve(graph.initializer_size());
  for (onnx::TensorProto &init :
       *model.mutable_graph()->mutable_initializer()) {
    if (init.name().empty())
      return emitError(fileLoc)
             << "the graph has an initializer without a name";
    if (!initializerNames.insert(init.name()).second)
      return emitError(fileLoc)
             << "initializer '" << init.name() << "' is defined twice";
    std::string what = "initializer '" + init.name() + "'";
    auto typeAndShape = reader.header(init, fileLoc, what);
    if (failed(typeAndShape))
      return failure();
    Initializer entry{typeAndShape->first, typeAndShape->second, {}};
    if (!options.shapesOnly || !entry.isFloat()) {
      FailureOr<PackedTensor> value = reader.take(init, fileLoc, what);
      if (failed(value))
        return failure();
      entry.value = std::move(*value);
    }
    initializers.push_back(std::move(entry));
  }
  SmallVector<const onnx::ValueInfoProto *> inputs;
  llvm::StringSet<> inputNames;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (initializerNames.contains(input.name()))
      continue;
    if (input.name().empty())
      return emitError(fileLoc) << "the graph has an input without a name";
    if (!inputNames.insert(input.name()).second)
      return emitError(fileLoc)
             << "graph input '" << input.name() << "' is declared twice";
    inputs.push_back(&input);
  }
  for (const auto &entry : options.inputShapes)
    if (!inputNames.contains(entry.getKey()))
      return emitError(fileLoc) << "a shape is given for '" << entry.getKey()
                                << "', which is not a graph input of the model";

  SmallVector<Type> argTypes;
  for (const onnx::ValueInfoProto *input : inputs) {
    FailureOr<RankedTensorType> type = inputType(*input);
    if (failed(type))
      return failure();
    argTypes.push_back(*type);
  }
  SmallVector<int> parameterInits;
  llvm::StringMap<int> floatInit;
  for (auto [index, init] : llvm::enumerate(initializers)) {
    if (!init.isFloat())
      continue;
    parameterInits.push_back(index);
    floatInit[graph.initializer(index).name()] = index;
    argTypes.push_back(
        RankedTensorType::get(init.shape, mlirType(init.dtype, &context)));
  }
  // Initializers merged by value (torch.onnx.export in eval mode): Identity
  // nodes that read a float initializer.  Warned about, or untied: each
  // output a parameter of its own.
  struct TiedCopy {
    int init;
    int node;
    std::string name;
  };
  SmallVector<TiedCopy> tiedCopies;
  llvm::MapVector<int, SmallVector<std::string>> tiedNames;
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    if (node.op_type() != "Identity" || node.domain() != "" ||
        node.input_size() != 1 || node.output_size() != 1)
      continue;
    auto it = floatInit.find(node.input(0));
    if (it == floatInit.end() || node.output(0).empty())
      continue;
    tiedCopies.push_back({it->second, int(index), node.output(0)});
    tiedNames[it->second].push_back(node.output(0));
  }
  if (!tiedCopies.empty() && !options.untieInitializers) {
    InFlightDiagnostic warning = emitWarning(fileLoc);
    warning << "initializers merged by value: ";
    for (auto [position, entry] : llvm::enumerate(tiedNames))
      warning << (position ? "; " : "") << "'"
              << graph.initializer(entry.first).name() << "' is also "
              << llvm::join(llvm::map_range(entry.second,
                                            [](const std::string &name) {
                                              return "'" + name + "'";
                                            }),
                            ", ");
    warning << " (through Identity nodes). torch.onnx.export in eval mode "
               "merges initializers with equal values, so training ties "
               "these parameters where PyTorch trains them separately; "
               "export with training=torch.onnx.TrainingMode.TRAINING, or "
               "pass --untie-initializers to give each its own copy";
  }
  // torch.onnx's dynamo exporter with its ONNX optimizer on (the default)
  // folds constants into initializers named val_N, merges initializers of
  // equal values and drops additions of zero: the file no longer holds the
  // model's parameters as PyTorch trains them, and says nothing of it.  Its
  // folded constants are the visible sign.
  if (model.producer_name() == "pytorch") {
    SmallVector<std::string> folded;
    for (int index : parameterInits) {
      StringRef name = graph.initializer(index).name();
      if (name.consume_front("val_") && !name.empty() &&
          llvm::all_of(name, llvm::isDigit))
        folded.push_back("'" + graph.initializer(index).name() + "'");
    }
    if (!folded.empty()) {
      size_t shown = std::min<size_t>(folded.size(), 4);
      emitWarning(fileLoc)
          << "float initializers named like the constants that torch.onnx's "
             "ONNX optimizer folds ("
          << llvm::join(ArrayRef<std::string>(folded).take_front(shown), ", ")
          << (folded.size() > shown
                  ? ", and " + std::to_string(folded.size() - shown) + " more"
                  : std::string())
          << "): sharc trains every float initializer, and that optimizer "
             "also merges initializers of equal values and drops additions "
             "of zero, so this file does not train as PyTorch trains the "
             "model; export with torch.onnx.export(..., dynamo=True, "
             "optimize=False)";
    }
  }
  if (!options.untieInitializers)
    tiedCopies.clear();
  for (const TiedCopy &copy : tiedCopies) {
    const Initializer &init = initializers[copy.init];
    argTypes.push_back(
        RankedTensorType::get(init.shape, mlirType(init.dtype, &context)));
  }

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  OpBuilder builder(module->getBodyRegion());
  auto func = func::FuncOp::create(builder, fileLoc, options.functionName,
                                   builder.getFunctionType(argTypes, {}));
  entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (unsigned index = 0; index < inputs.size(); ++index)
    if (auto type =
            dyn_cast<RankedTensorType>(entry->getArgument(index).getType());
        type && type.getRank() > 0) {
      batchRows = type.getDimSize(0);
      break;
    }

  for (auto [index, input] : llvm::enumerate(inputs)) {
    func.setArgAttr(index, SharcDialect::getInputAttrName(),
                    builder.getStringAttr(input->name()));
    values[input->name()] = entry->getArgument(index);
  }
  ImportedModel imported;
  imported.parameters.reserve(parameterInits.size() + tiedCopies.size());
  llvm::StringSet<> usedNames;
  for (auto [position, init] : llvm::enumerate(parameterInits)) {
    unsigned argIndex = inputs.size() + position;
    const std::string &source = graph.initializer(init).name();
    std::string name = sanitizeName(source, usedNames);
    func.setArgAttr(argIndex, SharcDialect::getParamAttrName(),
                    ParamAttr::get(&context, name, source));
    values[source] = entry->getArgument(argIndex);
    // Moved, unless an untied copy still needs it.
    if (initializers[init].value)
      imported.parameters.emplace_back(
          name, llvm::any_of(tiedCopies,
                             [&](const TiedCopy &copy) {
                               return copy.init == int(init);
                             })
                    ? *initializers[init].value
                    : std::move(*initializers[init].value));
  }
  // The untied copies: parameters after the initializers', their values
  // copies of the merged one.
  llvm::DenseSet<int> untiedNodes;
  for (auto [position, copy] : llvm::enumerate(tiedCopies)) {
    unsigned argIndex = inputs.size() + parameterInits.size() + position;
    std::string name = sanitizeName(copy.name, usedNames);
    func.setArgAttr(argIndex, SharcDialect::getParamAttrName(),
                    ParamAttr::get(&context, name, copy.name));
    untiedNodes.insert(copy.node);
    if (const std::optional<PackedTensor> &value =
            initializers[copy.init].value)
      imported.parameters.emplace_back(name, *value);
  }
  for (auto [index, init] : llvm::enumerate(initializers)) {
    if (init.isFloat())
      continue;
    DenseElementsAttr attr = init.value->unpack().toAttr(&context);
    const std::string &name = graph.initializer(index).name();
    values[name] =
        ConstantOp::create(builder, namedLoc(name), attr.getType(), attr);
  }

  FailureOr<SmallVector<int>> order = sortNodes(graph);
  if (failed(order))
    return failure();
  // The untied copies replace their Identity nodes' outputs.
  for (auto [position, copy] : llvm::enumerate(tiedCopies))
    values[copy.name] =
        entry->getArgument(inputs.size() + parameterInits.size() + position);
  for (int index : *order)
    if (!untiedNodes.contains(index) &&
        failed(importNode(graph.node(index), index, builder)))
      return failure();

  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &output : graph.output()) {
    Value value = values.lookup(output.name());
    if (!value && sequences.count(output.name()))
      return emitError(fileLoc) << "graph output '" << output.name()
                                << "' is a sequence; sharc's graph outputs "
                                   "are tensors";
    if (!value)
      return emitError(fileLoc) << "graph output '" << output.name()
                                << "' is not produced by any node";
    if (failed(checkOutput(output, value)))
      return failure();
    results.push_back(value);
  }
  // The buffers' new values follow the graph's outputs.
  for (auto &[arg, update] : bufferUpdates)
    results.push_back(update);
  func::ReturnOp::create(builder, fileLoc, results);
  func.setFunctionType(builder.getFunctionType(entry->getArgumentTypes(),
                                               ValueRange(results).getTypes()));
  for (auto [index, update] : llvm::enumerate(bufferUpdates))
    func.setResultAttr(graph.output_size() + index,
                       SharcDialect::getParamAttrName(),
                       getParamAttr(func, update.first.getArgNumber()));
  for (auto [index, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(index, SharcDialect::getOutputAttrName(),
                       builder.getStringAttr(output.name()));

  recognizeIdioms(*entry);
  // Drop what folding and recognizeIdioms left unused (shape computations,
  // their constants, the chains of ops that spelled a GELU).
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(entry->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  if (failed(mlir::verify(*module)))
    return failure();
  imported.module = std::move(module);
  return imported;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/// A hash of what `model` computes: its opsets, every node (serialized:
/// operator, attributes, names of inputs and outputs), each initializer's
/// name, type and shape (not its values), and the graph inputs' names and
/// element types and the outputs' names.  Neither the weights nor the input
/// dimensions (symbolic or bound) change it.
std::string sharc::onnx_import::modelHashOf(const onnx::ModelProto &model,
                                            bool untied) {
  const onnx::GraphProto &graph = model.graph();
  // Untied parameters make another model (other parameters).
  std::string text = untied ? "untied\n" : "";
  llvm::raw_string_ostream os(text);
  for (const auto &opset : model.opset_import())
    os << "opset " << opset.domain() << " " << opset.version() << "\n";
  for (const onnx::NodeProto &node : graph.node()) {
    std::string bytes;
    node.SerializeToString(&bytes);
    os << "node " << bytes.size() << " " << bytes << "\n";
  }
  for (const onnx::TensorProto &init : graph.initializer()) {
    os << "initializer " << init.name() << " " << init.data_type();
    for (int64_t dim : init.dims())
      os << " " << dim;
    os << "\n";
  }
  for (const onnx::ValueInfoProto &input : graph.input())
    os << "input " << input.name() << " "
       << input.type().tensor_type().elem_type() << "\n";
  for (const onnx::ValueInfoProto &output : graph.output())
    os << "output " << output.name() << "\n";
  return llvm::utohexstr(llvm::xxh3_64bits(os.str()), /*LowerCase=*/true,
                         /*Width=*/16);
}

static FailureOr<ImportedModel>
importModel(onnx::ModelProto &model, StringRef sourceName, StringRef baseDir,
            MLIRContext &context, const ImportOptions &options) {
  context.loadDialect<func::FuncDialect, SharcDialect>();
  FailureOr<ImportedModel> imported =
      GraphImporter(context, sourceName, baseDir, options).import(model);
  if (succeeded(imported))
    imported->modelHash = modelHashOf(model, options.untieInitializers);
  return imported;
}

FailureOr<ImportedModel>
sharc::importOnnxBytes(StringRef bytes, StringRef sourceName, StringRef baseDir,
                       MLIRContext &context, const ImportOptions &options) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return emitError(FileLineColLoc::get(&context, sourceName, 0, 0))
           << "not a valid ONNX model (the protobuf does not parse)";
  return importModel(model, sourceName, baseDir, context, options);
}

namespace {
/// A stream that reports how far `in` has been read, for progress lines.
class CountingStream : public google::protobuf::io::ZeroCopyInputStream {
public:
  CountingStream(google::protobuf::io::ZeroCopyInputStream &in,
                 const std::function<void(uint64_t)> &onRead)
      : in(in), onRead(onRead) {}
  bool Next(const void **data, int *size) override {
    bool more = in.Next(data, size);
    report();
    return more;
  }
  void BackUp(int count) override { in.BackUp(count); }
  bool Skip(int count) override {
    bool more = in.Skip(count);
    report();
    return more;
  }
  int64_t ByteCount() const override { return in.ByteCount(); }

private:
  /// Reports the bytes past the furthest point reported so far (a BackUp
  /// makes the parser read some bytes twice).
  void report() {
    int64_t at = in.ByteCount();
    if (at > reported && onRead)
      onRead(uint64_t(at - reported));
    reported = std::max(reported, at);
  }

  google::protobuf::io::ZeroCopyInputStream &in;
  const std::function<void(uint64_t)> &onRead;
  int64_t reported = 0;
};
} // namespace

LogicalResult sharc::onnx_import::readModelProto(
    StringRef path, MLIRContext &context, onnx::ModelProto &model,
    const std::function<void(uint64_t)> &onRead) {
  Location loc = FileLineColLoc::get(&context, path, 0, 0);
  // A device or a pipe could be read forever; protobuf reads at most 2 GiB
  // (larger models keep their weights in external data files).
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status))
    return emitError(loc) << "cannot read '" << path << "': " << ec.message();
  if (status.type() != llvm::sys::fs::file_type::regular_file)
    return emitError(loc) << "'" << path << "' is not a regular file";
  if (status.getSize() > uint64_t(INT32_MAX))
    return emitError(loc) << "'" << path << "' has " << status.getSize()
                          << " bytes, more than the 2 GiB a protobuf can "
                             "hold (keep the weights in external data files)";
  StringRef extension = llvm::sys::path::extension(path);
  if (extension == ".onnxtxt" || extension == ".onnxtext") {
    auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return emitError(loc)
             << "cannot read '" << path << "': " << buffer.getError().message();
    std::string error;
    if (!onnx_import::parseOnnxText((*buffer)->getBuffer().str(), model, error))
      return emitError(loc) << "not a valid ONNX text model: " << error;
    return success();
  }
  // Parsed from the file in blocks: the protobuf's copy of the weights is
  // the only one in memory (an image of the file next to it would double
  // the compiler's peak for a large model).
  int fd;
  if (std::error_code ec = llvm::sys::fs::openFileForRead(path, fd))
    return emitError(loc) << "cannot read '" << path << "': " << ec.message();
  google::protobuf::io::FileInputStream stream(fd, /*block_size=*/1 << 20);
  stream.SetCloseOnDelete(true);
  CountingStream counted(stream, onRead);
  if (!model.ParseFromZeroCopyStream(&counted)) {
    if (stream.GetErrno())
      return emitError(loc) << "cannot read '" << path
                            << "': " << std::strerror(stream.GetErrno());
    return emitError(loc)
           << "not a valid ONNX model (the protobuf does not parse)";
  }
  return success();
}

std::string sharc::onnx_import::modelBaseDir(StringRef path) {
  StringRef baseDir = llvm::sys::path::parent_path(path);
  return baseDir.empty() ? "." : baseDir.str();
}

FailureOr<ImportedModel> sharc::importOnnxFile(StringRef path,
                                               MLIRContext &context,
                                               const ImportOptions &options) {
  onnx::ModelProto model;
  if (failed(onnx_import::readModelProto(path, context, model, options.onRead)))
    return failure();
  return importModel(model, path, onnx_import::modelBaseDir(path), context,
                     options);
}
