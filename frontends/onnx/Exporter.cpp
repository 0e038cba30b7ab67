//===- Exporter.cpp - Writing a model back with trained weights -----------===//

#include "frontends/onnx/Exporter.h"

#include "frontends/onnx/ImporterInternal.h"
#include "ir/Tensor.h"
#include "runtime/AtomicFile.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/Path.h"

#include <climits>
#include <cstring>

using namespace mlir;
using namespace sharc;

namespace {

/// Initializers below this size stay in the model when the others go to
/// the external data file (onnx.save_model's default threshold).
constexpr size_t kExternalThreshold = 1024;

/// Above this many bytes of initializers the model cannot be one protobuf
/// (2 GiB, less room for the graph).
constexpr uint64_t kInlineLimit = uint64_t(INT32_MAX) - (uint64_t(64) << 20);

bool isFloatType(int32_t type) {
  return type == onnx::TensorProto::FLOAT ||
         type == onnx::TensorProto::DOUBLE ||
         type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::BFLOAT16;
}

/// `value` (a trained array) as the raw little-endian bytes of an
/// initializer of `type` and `shape`, rounded to nearest even where the
/// type is narrower.
FailureOr<std::string> rawBytes(const rt::NpyArray &value, DType type,
                                ArrayRef<int64_t> shape, Location loc,
                                const Twine &what) {
  Tensor tensor = Tensor::fromNpy(value);
  if (tensor.shape() != shape)
    return emitError(loc) << what << ": the trained value has shape "
                          << onnx_import::formatShape(tensor.shape())
                          << ", the initializer "
                          << onnx_import::formatShape(shape);
  if (!tensor.isFloat())
    return emitError(loc) << what << ": the trained value is not a float array";
  if (tensor.dtype() != type)
    tensor = tensor.convertTo(type);
  if (type != DType::bf16) {
    rt::NpyArray array = tensor.toNpy();
    return std::string(array.data.data(), array.data.size());
  }
  // NumPy has no bfloat16: the top half of each (exactly rounded) float.
  std::string bytes(size_t(tensor.numElements()) * 2, '\0');
  for (int64_t i = 0, e = tensor.numElements(); i < e; ++i) {
    float f = static_cast<float>(tensor.getDouble(i));
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    uint16_t high = static_cast<uint16_t>(bits >> 16);
    std::memcpy(&bytes[size_t(i) * 2], &high, sizeof(high));
  }
  return bytes;
}

/// Puts `bytes` into `proto` as its data: inline (raw_data), or appended to
/// the external data file `data` at `offset`.
LogicalResult setData(onnx::TensorProto &proto, std::string bytes,
                      rt::AtomicFile *data, const std::string &location,
                      uint64_t &offset, Location loc) {
  proto.clear_float_data();
  proto.clear_double_data();
  proto.clear_int32_data();
  proto.clear_int64_data();
  proto.clear_uint64_data();
  proto.clear_external_data();
  proto.clear_raw_data();
  if (!data || bytes.size() < kExternalThreshold) {
    proto.set_data_location(onnx::TensorProto::DEFAULT);
    proto.set_raw_data(std::move(bytes));
    return success();
  }
  std::string error;
  if (!data->write(bytes.data(), bytes.size(), error))
    return emitError(loc) << error;
  proto.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char *key, const std::string &value) {
    onnx::StringStringEntryProto *entry = proto.add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", std::to_string(bytes.size()));
  offset += bytes.size();
  return success();
}

} // namespace

LogicalResult sharc::exportTrainedModel(StringRef modelPath,
                                        StringRef outputPath,
                                        TrainedValueFn trainedValue,
                                        const ExportOptions &options,
                                        MLIRContext &context,
                                        ExportSummary &summary) {
  Location modelLoc = FileLineColLoc::get(&context, modelPath, 0, 0);
  Location outputLoc = FileLineColLoc::get(&context, outputPath, 0, 0);
  onnx::ModelProto model;
  if (failed(onnx_import::readModelProto(modelPath, context, model)))
    return failure();
  std::string hash = onnx_import::modelHashOf(model, options.untieInitializers);
  if (!options.expectedModelHash.empty() && hash != options.expectedModelHash)
    return emitError(modelLoc)
           << "the trained values were saved from another model (model hash "
           << options.expectedModelHash << ", this model's " << hash
           << (options.untieInitializers ? " untied" : "")
           << "; a state trained with --untie-initializers is exported "
              "with it)";
  onnx_import::TensorReader reader(onnx_import::modelBaseDir(modelPath));
  onnx::GraphProto &graph = *model.mutable_graph();
  if (options.untieInitializers) {
    // Each Identity that reads a float initializer becomes an initializer
    // of its own (values below), as the importer untied it.
    std::map<std::string, const onnx::TensorProto *> floats;
    for (const onnx::TensorProto &init : graph.initializer())
      if (isFloatType(init.data_type()))
        floats[init.name()] = &init;
    std::vector<onnx::TensorProto> copies;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (const onnx::NodeProto &node : graph.node()) {
      auto it = node.op_type() == "Identity" && node.domain().empty() &&
                        node.input_size() == 1 && node.output_size() == 1
                    ? floats.find(node.input(0))
                    : floats.end();
      if (it == floats.end() || node.output(0).empty()) {
        *kept.Add() = node;
        continue;
      }
      onnx::TensorProto copy;
      copy.set_name(node.output(0));
      copy.set_data_type(it->second->data_type());
      *copy.mutable_dims() = it->second->dims();
      copy.set_raw_data(std::string()); // filled from the state below
      copies.push_back(std::move(copy));
    }
    graph.mutable_node()->Swap(&kept);
    for (onnx::TensorProto &copy : copies)
      *graph.add_initializer() = std::move(copy);
  }

  // The bytes of the initializers decide where they go.
  uint64_t total = 0;
  for (const onnx::TensorProto &init : graph.initializer()) {
    auto header =
        reader.header(init, modelLoc, "initializer '" + init.name() + "'");
    if (failed(header))
      return failure();
    int64_t elements = 1;
    for (int64_t size : header->second)
      elements *= size;
    total += uint64_t(elements) * dtypeBytes(header->first);
  }
  bool external = options.externalData || total > kInlineLimit;

  rt::AtomicFileSet files;
  std::string error;
  rt::AtomicFile *data = nullptr;
  std::string location;
  if (external) {
    summary.externalDataPath = (outputPath + ".data").str();
    location = llvm::sys::path::filename(summary.externalDataPath).str();
    if (!(data = files.add(summary.externalDataPath, error)))
      return emitError(outputLoc) << error;
  }
  uint64_t offset = 0;
  for (onnx::TensorProto &init : *graph.mutable_initializer()) {
    std::string what = "initializer '" + init.name() + "'";
    auto header = reader.header(init, modelLoc, what);
    if (failed(header))
      return failure();
    auto [type, shape] = *header;
    if (isFloatType(init.data_type())) {
      rt::NpyArray value;
      if (!trainedValue(init.name(), value, error))
        return emitError(modelLoc) << what << ": " << error;
      FailureOr<std::string> bytes =
          rawBytes(value, type, shape, modelLoc, what);
      if (failed(bytes))
        return failure();
      summary.replacedBytes += bytes->size();
      ++summary.replaced;
      if (failed(setData(init, std::move(*bytes), data, location, offset,
                         outputLoc)))
        return failure();
      continue;
    }
    ++summary.kept;
    // Kept as it is, but its external data travels with the new model.
    if (init.data_location() == onnx::TensorProto::EXTERNAL) {
      int64_t elements = 1;
      for (int64_t size : shape)
        elements *= size;
      FailureOr<std::string> bytes = reader.readExternal(
          init, uint64_t(elements) * dtypeBytes(type), modelLoc, what);
      if (failed(bytes) || failed(setData(init, std::move(*bytes), data,
                                          location, offset, outputLoc)))
        return failure();
    }
  }

  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return emitError(outputLoc)
           << "the model does not fit in one protobuf (2 GiB); export with "
              "--external-data";
  rt::AtomicFile *out = files.add(outputPath.str(), error);
  if (!out || !out->write(bytes.data(), bytes.size(), error) ||
      !files.commit(error))
    return emitError(outputLoc) << error;
  return success();
}
