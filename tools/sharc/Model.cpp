//===- Model.cpp - loading a model for the sharc CLI ----------------------===//
//
// Parses --input-shape, imports an ONNX model or parses a .mlir file, checks
// that every shape is static and finds the entry function; reads argument
// values from .npy files against the entry's types.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Model.h"

#include "frontends/onnx/Importer.h"
#include "ir/SharcOps.h"
#include "runtime/Npy.h"
#include "tools/sharc/Diagnostics.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace sharc;

/// Parses every "NAME=2x3x4" (or "NAME=" for a scalar) of `specs` into
/// `options`.
static LogicalResult parseInputShapes(ArrayRef<std::string> specs,
                                      ImportOptions &options) {
  for (const std::string &spec : specs) {
    auto [name, dims] = StringRef(spec).split('=');
    if (name.empty() || !StringRef(spec).contains('=')) {
      fail("--input-shape expects NAME=D0xD1x..., got '" + spec + "'");
      return failure();
    }
    SmallVector<int64_t> shape;
    SmallVector<StringRef> parts;
    if (!dims.empty())
      dims.split(parts, 'x');
    for (StringRef part : parts) {
      int64_t value;
      if (part.getAsInteger(10, value) || value < 0) {
        fail("--input-shape " + spec + ": '" + part +
             "' is not a non-negative dimension");
        return failure();
      }
      shape.push_back(value);
    }
    options.inputShapes[name] = shape;
  }
  return success();
}

FailureOr<LoadedModel> sharc::loadModel(MLIRContext &context, StringRef path,
                                        ArrayRef<std::string> inputShapes,
                                        bool shapesOnly,
                                        const ImportHints &hints) {
  ImportOptions options;
  options.shapesOnly = shapesOnly;
  options.batchSize = hints.batchSize;
  options.untieInitializers = hints.untieInitializers;
  for (const auto &entry : hints.dataShapes)
    options.dataShapes[entry.getKey()] = entry.getValue();
  if (failed(parseInputShapes(inputShapes, options)))
    return failure();
  LoadedModel model;
  model.path = path.str();
  model.hints = hints;
  if (path.ends_with(".mlir")) {
    if (!inputShapes.empty()) {
      fail("--input-shape applies to ONNX models only");
      return failure();
    }
    llvm::sys::fs::file_status status;
    if (std::error_code ec = llvm::sys::fs::status(path, status)) {
      fail("cannot read '" + path + "': " + ec.message());
      return failure();
    }
    if (status.type() != llvm::sys::fs::file_type::regular_file) {
      fail("'" + path + "' is not a regular file");
      return failure();
    }
    llvm::SourceMgr sourceMgr;
    std::string error;
    auto file = openInputFile(path, &error);
    if (!file) {
      fail(error);
      return failure();
    }
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    model.module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!model.module)
      return failure();
    model.modelHash = llvm::utohexstr(
        llvm::xxh3_64bits(
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())->getBuffer()),
        /*LowerCase=*/true, /*Width=*/16);
  } else {
    Progress reading(("reading " + path).str());
    options.onRead = [&](uint64_t bytes) { reading.add(bytes); };
    auto imported = importOnnxFile(path, context, options);
    options.onRead = nullptr; // It refers to `reading`.
    if (failed(imported))
      return failure();
    model.module = std::move(imported->module);
    for (auto &[name, value] : imported->parameters)
      model.parameters[name] = std::move(value);
    model.modelHash = imported->modelHash;
  }
  if (failed(verifyStaticShapes(*model.module)))
    return failure();
  auto funcs = model.module->getOps<func::FuncOp>();
  for (func::FuncOp func : funcs)
    if (func.getSymName() == options.functionName)
      model.entry = func;
  if (!model.entry && std::distance(funcs.begin(), funcs.end()) == 1)
    model.entry = *funcs.begin();
  if (!model.entry) {
    fail(path + ": no function named '" + options.functionName +
         "' and not exactly one function");
    return failure();
  }
  return model;
}

std::string sharc::argumentName(func::FuncOp func, unsigned index) {
  if (ParamAttr param = getParamAttr(func, index))
    return param.getName().str();
  if (auto name = func.getArgAttrOfType<StringAttr>(
          index, SharcDialect::getInputAttrName()))
    return name.str();
  StringRef role = getRandomKeyRole(func, index);
  if (!role.empty())
    return ("sharc." + role).str();
  return "arg" + std::to_string(index);
}

Tensor sharc::randomKeyValue(RankedTensorType type, int64_t step,
                             int64_t firstRow) {
  Tensor value(DType::i64, type.getShape());
  for (int64_t i = 0, e = value.numElements(); i < e; ++i)
    value.setDouble(i, double(type.getRank() ? firstRow + i : step));
  return value;
}

FailureOr<Tensor> sharc::readNpyAs(StringRef name, StringRef path,
                                   RankedTensorType type) {
  rt::NpyArray array;
  std::string error;
  if (!rt::readNpy(path.str(), array, error)) {
    fail(error);
    return failure();
  }
  return npyAs(name, path, array, type);
}

FailureOr<Tensor> sharc::npyAs(StringRef name, StringRef path,
                               const rt::NpyArray &array,
                               RankedTensorType type) {
  Tensor value = Tensor::fromNpy(array);
  std::optional<DType> want = dtypeOf(type.getElementType());
  if (!want) {
    fail("input '" + name + "': unsupported element type");
    return failure();
  }
  if (value.dtype() != *want) {
    // NumPy has no bfloat16: bf16 inputs are given as float32.
    if (!(*want == DType::bf16 && value.dtype() == DType::f32)) {
      fail("input '" + name + "' (" + path + "): file holds " +
           dtypeName(value.dtype()) + ", the model expects " +
           dtypeName(*want));
      return failure();
    }
    value = value.convertTo(*want);
  }
  return value;
}

FailureOr<Tensor> sharc::readArgument(StringRef name, StringRef path,
                                      RankedTensorType type) {
  FailureOr<Tensor> value = readNpyAs(name, path, type);
  if (failed(value))
    return failure();
  if (value->shape() != type.getShape()) {
    fail("input '" + name + "' (" + path + "): shape " + value->describe() +
         " does not match the model's " +
         describeTensor(value->dtype(), type.getShape()));
    return failure();
  }
  return value;
}
