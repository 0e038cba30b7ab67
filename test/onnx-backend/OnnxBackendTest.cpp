//===- OnnxBackendTest.cpp - ONNX backend node tests, evaluated ----------===//
//
// Runs the node test cases of ONNX's own backend test suite (the Debian
// package libonnx-testdata: DATA/<case>/model.onnx with
// test_data_set_*/input_N.pb and output_N.pb TensorProtos) through the ONNX
// importer and the reference evaluator, and compares every output with the
// expected tensor.
//
// A case runs when every node of its graph (subgraphs included) is an op
// the importer has a rule for (its rule table, findOpRule); other cases are
// counted as skipped.  Cases named
// in excluded.txt (`case_name  reason` per line) are not run; the list is
// printed with the reasons.
//
// sharc shapes are static.  Where an ONNX op takes a tensor that determines a
// result shape (Reshape's shape, Slice's starts, Unsqueeze's axes, ...) as an
// input, the backend cases feed it as a graph input; the runner then embeds
// that input's value from input_N.pb as a constant of the graph, as a
// static-shape backend's caller would (see `shapeOperands` and
// `embedConstant`).  All other inputs stay function arguments.
//
// Every case runs in a child process, so that a crash or a hang in one case is
// reported as that case's failure and the others still run.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Importer.h"
#include "frontends/onnx/ImporterInternal.h"
#include "ir/Evaluator.h"
#include "ir/SharcOps.h"
#include "ir/Tensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sharc;

#ifndef SHARC_ONNX_BACKEND_EXCLUDED
#define SHARC_ONNX_BACKEND_EXCLUDED "test/onnx-backend/excluded.txt"
#endif

namespace {

/// Operand positions whose values a static-shape compiler needs at compile
/// time: they determine a result shape (or, for Dropout, whether and how much
/// it drops).  Graph inputs used there are embedded as constants.
const std::map<std::string, std::vector<int>> &shapeOperands() {
  static const std::map<std::string, std::vector<int>> table = {
      {"Reshape", {1}},         {"Expand", {1}},
      {"Slice", {1, 2, 3, 4}},  {"Unsqueeze", {1}},
      {"Squeeze", {1}},         {"Split", {1}},
      {"ReduceSum", {1}},       {"ReduceMean", {1}},
      {"ReduceMax", {1}},       {"ConstantOfShape", {0}},
      {"Range", {0, 1, 2}},     {"Trilu", {1}},
      {"Dropout", {1, 2}},      {"ReduceMin", {1}},
      {"ReduceSumSquare", {1}}, {"ReduceL1", {1}},
      {"ReduceL2", {1}},        {"ReduceLogSum", {1}},
      {"ReduceLogSumExp", {1}}, {"CumSum", {1}},
      {"Pad", {1, 3}},          {"Tile", {1}},
      {"OneHot", {1}},          {"Resize", {1, 2, 3}},
      {"ReduceProd", {1}},      {"TopK", {1}},
      {"Compress", {1}},        {"DFT", {1, 2}},
      {"HannWindow", {0}},      {"HammingWindow", {0}},
      {"BlackmanWindow", {0}},  {"MelWeightMatrix", {0, 1, 2, 3, 4}},
  };
  return table;
}

struct Options {
  std::string dataDir = "/usr/share/libonnx-testdata/data/node";
  std::string excludedFile = SHARC_ONNX_BACKEND_EXCLUDED;
  std::string filter;
  bool verbose = false;
  bool fork = true;
  unsigned timeoutSeconds = 120;
};

//===----------------------------------------------------------------------===//
// TensorProto -> sharc::Tensor
//===----------------------------------------------------------------------===//

double halfToDouble(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1f;
  int mantissa = bits & 0x3ff;
  double value;
  if (exponent == 0)
    value = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    value = mantissa ? NAN : INFINITY;
  else
    value = std::ldexp(mantissa + 1024, exponent - 25);
  return (bits & 0x8000) ? -value : value;
}

double bfloat16ToDouble(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

std::optional<DType> dtypeOfOnnx(int type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
    return DType::f32;
  case onnx::TensorProto::DOUBLE:
    return DType::f64;
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

std::string onnxTypeName(int type) {
  if (onnx::TensorProto::DataType_IsValid(type))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(type));
  return "type " + std::to_string(type);
}

/// The first element type of a graph input or output that sharc's tensors
/// do not have (int8, the unsigned integers, strings, float8...), by name.
std::optional<std::string> unsupportedElementType(const onnx::GraphProto &g) {
  for (const auto *values : {&g.input(), &g.output()})
    for (const onnx::ValueInfoProto &value : *values) {
      if (!value.type().has_tensor_type())
        continue;
      int type = value.type().tensor_type().elem_type();
      if (type != onnx::TensorProto::UNDEFINED && !dtypeOfOnnx(type))
        return onnxTypeName(type);
    }
  return std::nullopt;
}

/// Converts `proto` to a Tensor.  `declaredType` is the ONNX element type the
/// graph declares for the value: ONNX 1.12 stores bfloat16 test tensors as
/// UINT16 bit patterns, which are read as bfloat16 when the graph says so.
std::optional<Tensor> tensorFromProto(const onnx::TensorProto &proto,
                                      int declaredType, std::string &error) {
  int type = proto.data_type();
  bool bf16Bits = type == onnx::TensorProto::UINT16 &&
                  declaredType == onnx::TensorProto::BFLOAT16;
  if (bf16Bits)
    type = onnx::TensorProto::BFLOAT16;
  std::optional<DType> dtype = dtypeOfOnnx(type);
  if (!dtype) {
    error = "tensor '" + proto.name() + "' has element type " +
            onnxTypeName(type) + ", which sharc does not support";
    return std::nullopt;
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    error = "tensor '" + proto.name() + "' uses external data";
    return std::nullopt;
  }
  llvm::SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  Tensor tensor(*dtype, shape);
  int64_t count = tensor.numElements();

  auto sizeError = [&](int64_t have) {
    error = "tensor '" + proto.name() + "' holds " + std::to_string(have) +
            " elements, its shape needs " + std::to_string(count);
    return std::nullopt;
  };
  auto store = [&](int64_t index, double floatValue, int64_t intValue) {
    if (tensor.isFloat())
      tensor.floats()[index] = floatValue;
    else
      tensor.ints()[index] = wrapTo(*dtype, intValue);
  };

  if (proto.has_raw_data()) {
    const std::string &raw = proto.raw_data();
    size_t width = 0;
    switch (type) {
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::INT64:
      width = 8;
      break;
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
      width = 4;
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      width = 2;
      break;
    default:
      width = 1;
      break;
    }
    if (raw.size() != size_t(count) * width)
      return sizeError(raw.size() / width);
    const char *bytes = raw.data();
    for (int64_t i = 0; i < count; ++i) {
      const char *p = bytes + i * width;
      switch (type) {
      case onnx::TensorProto::DOUBLE: {
        double v;
        std::memcpy(&v, p, 8);
        store(i, v, 0);
        break;
      }
      case onnx::TensorProto::FLOAT: {
        float v;
        std::memcpy(&v, p, 4);
        store(i, v, 0);
        break;
      }
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        store(i,
              type == onnx::TensorProto::FLOAT16 ? halfToDouble(v)
                                                 : bfloat16ToDouble(v),
              0);
        break;
      }
      case onnx::TensorProto::INT64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        store(i, 0, v);
        break;
      }
      case onnx::TensorProto::INT32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        store(i, 0, v);
        break;
      }
      default: // BOOL
        store(i, 0, *p != 0);
        break;
      }
    }
    return tensor;
  }

  switch (type) {
  case onnx::TensorProto::FLOAT:
    if (proto.float_data_size() != count)
      return sizeError(proto.float_data_size());
    for (int64_t i = 0; i < count; ++i)
      store(i, proto.float_data(i), 0);
    break;
  case onnx::TensorProto::DOUBLE:
    if (proto.double_data_size() != count)
      return sizeError(proto.double_data_size());
    for (int64_t i = 0; i < count; ++i)
      store(i, proto.double_data(i), 0);
    break;
  case onnx::TensorProto::INT64:
    if (proto.int64_data_size() != count)
      return sizeError(proto.int64_data_size());
    for (int64_t i = 0; i < count; ++i)
      store(i, 0, proto.int64_data(i));
    break;
  default: // INT32, BOOL, FLOAT16, BFLOAT16 live in int32_data.
    if (proto.int32_data_size() != count)
      return sizeError(proto.int32_data_size());
    for (int64_t i = 0; i < count; ++i) {
      int32_t v = proto.int32_data(i);
      if (type == onnx::TensorProto::FLOAT16)
        store(i, halfToDouble(uint16_t(v)), 0);
      else if (type == onnx::TensorProto::BFLOAT16)
        store(i, bfloat16ToDouble(uint16_t(v)), 0);
      else
        store(i, 0, v);
    }
    break;
  }
  return tensor;
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

/// Relative tolerance for a float dtype: 1e-4 for f32/f64, and about one
/// unit in the last place for the 16-bit types (references computed in a
/// different order or precision may differ by one rounding).
double relativeTolerance(DType type) {
  switch (type) {
  case DType::f16:
    return 1e-3;
  case DType::bf16:
    return 1e-2;
  default:
    return 1e-4;
  }
}

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  return "[" +
         llvm::join(llvm::map_range(
                        shape, [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

std::string formatDouble(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

/// Empty when `actual` matches `expected`, else why not.
std::string compareTensors(const Tensor &actual, const Tensor &expected) {
  if (actual.dtype() != expected.dtype())
    return "is " + actual.describe() + ", expected " + expected.describe();
  if (actual.shape() != expected.shape())
    return "is " + actual.describe() + ", expected " + expected.describe();
  int64_t count = expected.numElements();
  int64_t mismatches = 0, first = -1;
  if (expected.isFloat()) {
    double scale = 1;
    for (double e : expected.floats())
      if (std::isfinite(e))
        scale = std::max(scale, std::fabs(e));
    double rtol = relativeTolerance(expected.dtype());
    double atol = rtol / 10 * scale;
    for (int64_t i = 0; i < count; ++i) {
      double a = actual.floats()[i], e = expected.floats()[i];
      bool ok;
      if (std::isnan(e))
        ok = std::isnan(a);
      else if (std::isinf(e))
        ok = a == e;
      else
        ok = std::isfinite(a) && std::fabs(a - e) <= atol + rtol * std::fabs(e);
      if (!ok && mismatches++ == 0)
        first = i;
    }
  } else {
    for (int64_t i = 0; i < count; ++i)
      if (actual.ints()[i] != expected.ints()[i] && mismatches++ == 0)
        first = i;
  }
  if (!mismatches)
    return "";
  // Row-major index of the first mismatch.
  llvm::SmallVector<int64_t> index(expected.rank());
  for (int64_t d = expected.rank() - 1, rest = first; d >= 0; --d) {
    index[d] = rest % expected.shape()[d];
    rest /= expected.shape()[d];
  }
  return std::to_string(mismatches) + " of " + std::to_string(count) +
         " elements differ; first at " + shapeString(index) + ": got " +
         formatDouble(actual.getDouble(first)) + ", expected " +
         formatDouble(expected.getDouble(first));
}

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

bool readFile(const std::string &path, std::string &contents) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return false;
  contents = (*buffer)->getBuffer().str();
  return true;
}

void collectOps(const onnx::GraphProto &graph, std::set<std::string> &ops) {
  for (const onnx::NodeProto &node : graph.node()) {
    if (node.domain().empty() || node.domain() == "ai.onnx")
      ops.insert(node.op_type());
    else
      ops.insert(node.domain() + "." + node.op_type());
    for (const onnx::AttributeProto &attr : node.attribute()) {
      if (attr.has_g())
        collectOps(attr.g(), ops);
      for (const onnx::GraphProto &sub : attr.graphs())
        collectOps(sub, ops);
    }
  }
}

/// Sorted file names `prefix<N>.pb` in `dir`, in order of N.
std::vector<std::string> numberedFiles(const std::string &dir,
                                       llvm::StringRef prefix) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!name.consume_front(prefix) || !name.consume_back(".pb"))
      continue;
    int number;
    if (!name.getAsInteger(10, number))
      found.emplace_back(number, it->path());
  }
  llvm::sort(found);
  std::vector<std::string> paths;
  for (auto &[number, path] : found)
    paths.push_back(path);
  return paths;
}

std::vector<std::string> subdirectories(const std::string &dir,
                                        llvm::StringRef prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.starts_with(prefix) && llvm::sys::fs::is_directory(it->path()))
      names.push_back(name.str());
  }
  llvm::sort(names);
  return names;
}

/// The element type the graph declares for value `name`, or 0.
int declaredElemType(const onnx::GraphProto &graph, const std::string &name) {
  auto search = [&](const auto &values) -> int {
    for (const onnx::ValueInfoProto &value : values)
      if (value.name() == name && value.type().has_tensor_type())
        return value.type().tensor_type().elem_type();
    return 0;
  };
  if (int type = search(graph.input()))
    return type;
  return search(graph.output());
}

/// The version of the default ONNX opset that `model` imports, or 0.
int64_t defaultOpset(const onnx::ModelProto &model) {
  for (const onnx::OperatorSetIdProto &entry : model.opset_import())
    if (entry.domain().empty() || entry.domain() == "ai.onnx")
      return entry.version();
  return 0;
}

bool isFloatType(int type) {
  return type == onnx::TensorProto::FLOAT ||
         type == onnx::TensorProto::DOUBLE ||
         type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::BFLOAT16;
}

/// Makes `value` (named as the graph input it replaces) a constant of the
/// graph: a Constant node, appended to `nodes`, in a model of opset 13 or
/// newer.  sharc imports older models only where an operator's definition is
/// unchanged since, which excludes Constant (changed at opsets 12 and 13);
/// there a non-float value becomes an initializer (sharc imports non-float
/// initializers as constants) and a one-element float value a ConstantOfShape
/// node (unchanged from opset 9 to 19).
bool embedConstant(const onnx::TensorProto &value, int64_t opset,
                   onnx::GraphProto &graph, std::vector<onnx::NodeProto> &nodes,
                   std::string &error) {
  if (opset < 13 && !isFloatType(value.data_type())) {
    *graph.add_initializer() = value;
    return true;
  }
  onnx::NodeProto node;
  node.set_name("runner_constant_" + value.name());
  node.add_output(value.name());
  onnx::AttributeProto *attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  *attr->mutable_t() = value;
  if (opset >= 13) {
    node.set_op_type("Constant");
    nodes.push_back(node);
    return true;
  }
  int64_t count = 1;
  for (int64_t dim : value.dims())
    count *= dim;
  if (count != 1) {
    error = "cannot embed float tensor '" + value.name() + "' of " +
            std::to_string(count) + " elements in an opset-" +
            std::to_string(opset) + " model";
    return false;
  }
  onnx::TensorProto shape;
  shape.set_name("runner_shape_" + value.name());
  shape.set_data_type(onnx::TensorProto::INT64);
  shape.add_dims(value.dims_size());
  for (int64_t dim : value.dims())
    shape.add_int64_data(dim);
  *graph.add_initializer() = shape;
  node.set_op_type("ConstantOfShape");
  node.add_input(shape.name());
  attr->mutable_t()->clear_dims();
  attr->mutable_t()->add_dims(1);
  nodes.push_back(node);
  return true;
}

/// Runs one test data set of a case.  Returns an empty string on success,
/// else the reason for the failure.
std::string runDataSet(const onnx::ModelProto &original,
                       const std::string &caseDir, const std::string &caseName,
                       const std::string &dataDir, const Options &options,
                       std::string &notes) {
  onnx::ModelProto model = original;
  onnx::GraphProto &graph = *model.mutable_graph();

  // Graph inputs that the data set feeds (initializers excluded).
  std::set<std::string> initializers;
  for (const onnx::TensorProto &init : graph.initializer())
    initializers.insert(init.name());
  std::vector<std::string> inputNames;
  for (const onnx::ValueInfoProto &input : graph.input())
    if (!initializers.count(input.name()))
      inputNames.push_back(input.name());

  std::vector<std::string> inputFiles = numberedFiles(dataDir, "input_");
  std::vector<std::string> outputFiles = numberedFiles(dataDir, "output_");
  if (inputFiles.size() != inputNames.size())
    return "the graph has " + std::to_string(inputNames.size()) +
           " inputs, the data set " + std::to_string(inputFiles.size());
  if (outputFiles.size() != size_t(graph.output_size()))
    return "the graph has " + std::to_string(graph.output_size()) +
           " outputs, the data set " + std::to_string(outputFiles.size());

  auto readProto = [](const std::string &path, onnx::TensorProto &proto,
                      std::string &error) {
    std::string bytes;
    if (!readFile(path, bytes) || !proto.ParseFromString(bytes)) {
      error = "cannot read a TensorProto from " + path;
      return false;
    }
    return true;
  };

  // Inputs used as shape operands become constants.
  std::set<std::string> shapeInputs;
  for (const onnx::NodeProto &node : graph.node()) {
    auto it = shapeOperands().find(node.op_type());
    if (it == shapeOperands().end())
      continue;
    for (int index : it->second)
      if (index < node.input_size() &&
          llvm::is_contained(inputNames, node.input(index)))
        shapeInputs.insert(node.input(index));
  }

  std::vector<std::pair<std::string, Tensor>> runtimeInputs;
  std::vector<onnx::NodeProto> constantNodes;
  for (size_t i = 0; i < inputNames.size(); ++i) {
    onnx::TensorProto proto;
    std::string error;
    if (!readProto(inputFiles[i], proto, error))
      return error;
    if (shapeInputs.count(inputNames[i])) {
      proto.set_name(inputNames[i]);
      if (!embedConstant(proto, defaultOpset(model), graph, constantNodes,
                         error))
        return "input " + std::to_string(i) + ": " + error;
      continue;
    }
    std::optional<Tensor> tensor = tensorFromProto(
        proto, declaredElemType(original.graph(), inputNames[i]), error);
    if (!tensor)
      return "input " + std::to_string(i) + ": " + error;
    runtimeInputs.emplace_back(inputNames[i], std::move(*tensor));
  }

  if (!shapeInputs.empty()) {
    auto *inputs = graph.mutable_input();
    for (int i = inputs->size() - 1; i >= 0; --i)
      if (shapeInputs.count(inputs->Get(i).name()))
        inputs->DeleteSubrange(i, 1);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (onnx::NodeProto &node : constantNodes)
      *nodes.Add() = node;
    for (const onnx::NodeProto &node : graph.node())
      *nodes.Add() = node;
    graph.mutable_node()->Swap(&nodes);
    notes += "embedded as constants: " +
             llvm::join(std::vector<std::string>(shapeInputs.begin(),
                                                 shapeInputs.end()),
                        ", ");
  }

  std::vector<Tensor> expected;
  for (size_t i = 0; i < outputFiles.size(); ++i) {
    onnx::TensorProto proto;
    std::string error;
    if (!readProto(outputFiles[i], proto, error))
      return error;
    std::optional<Tensor> tensor = tensorFromProto(
        proto, declaredElemType(original.graph(), graph.output(i).name()),
        error);
    if (!tensor)
      return "output " + std::to_string(i) + ": " + error;
    expected.push_back(std::move(*tensor));
  }

  // Import.
  mlir::MLIRContext context;
  context.disableMultithreading();
  context.loadDialect<SharcDialect, mlir::func::FuncDialect>();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    if (!diagnostics.empty())
      os << " | ";
    os << diag.getLocation() << ": " << diag.str();
    for (const mlir::Diagnostic &note : diag.getNotes())
      os << " (note: " << note.str() << ")";
    return mlir::success();
  });

  ImportOptions importOptions;
  for (auto &[name, tensor] : runtimeInputs)
    importOptions.inputShapes[name] =
        llvm::SmallVector<int64_t>(tensor.shape());
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return "cannot serialize the rewritten model";
  mlir::FailureOr<ImportedModel> imported = importOnnxBytes(
      bytes, caseName + "/model.onnx", caseDir, context, importOptions);
  if (mlir::failed(imported))
    return "import failed: " + diagnostics;
  auto func = (*imported).module->lookupSymbol<mlir::func::FuncOp>(
      importOptions.functionName);
  if (!func)
    return "import produced no function '" + importOptions.functionName + "'";

  std::vector<Tensor> args;
  for (auto &[name, tensor] : runtimeInputs)
    args.push_back(tensor);
  for (auto &[name, value] : (*imported).parameters)
    args.push_back(value.unpack());
  if (func.getNumArguments() != args.size())
    return "the function takes " + std::to_string(func.getNumArguments()) +
           " arguments; " + std::to_string(runtimeInputs.size()) +
           " inputs and " + std::to_string((*imported).parameters.size()) +
           " parameters were given";

  mlir::FailureOr<std::vector<Tensor>> results = evaluate(func, args);
  if (mlir::failed(results))
    return "evaluation failed: " + diagnostics;
  if (results->size() != expected.size())
    return "evaluation gave " + std::to_string(results->size()) +
           " results, expected " + std::to_string(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    std::string mismatch = compareTensors((*results)[i], expected[i]);
    if (!mismatch.empty())
      return "output '" + graph.output(i).name() + "' " + mismatch;
  }
  return "";
}

/// Runs every data set of one case in this process.  Empty on success.
std::string runCase(const onnx::ModelProto &model, const std::string &caseDir,
                    const std::string &caseName, const Options &options,
                    std::string &notes) {
  std::vector<std::string> dataSets = subdirectories(caseDir, "test_data_set_");
  if (dataSets.empty())
    return "no test_data_set_* directory";
  for (const std::string &dataSet : dataSets) {
    std::string error = runDataSet(model, caseDir, caseName,
                                   caseDir + "/" + dataSet, options, notes);
    if (!error.empty())
      return dataSets.size() > 1 ? dataSet + ": " + error : error;
  }
  return "";
}

/// Writes all of `text` to `fd`.
void writeAll(int fd, const std::string &text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0)
      return;
    done += n;
  }
}

/// Runs one case in a child process.  Returns an empty string on success.
std::string runCaseIsolated(const onnx::ModelProto &model,
                            const std::string &caseDir,
                            const std::string &caseName, const Options &options,
                            std::string &notes) {
  if (!options.fork)
    return runCase(model, caseDir, caseName, options, notes);

  int resultPipe[2];
  if (pipe(resultPipe) != 0)
    return "cannot create a pipe";
  FILE *errors = std::tmpfile();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = fork();
  if (child < 0)
    return "cannot fork";
  if (child == 0) {
    close(resultPipe[0]);
    if (errors)
      dup2(fileno(errors), STDERR_FILENO);
    std::string childNotes;
    std::string error = runCase(model, caseDir, caseName, options, childNotes);
    // Protocol: "P" or "F", the notes, a NUL, the failure reason.
    writeAll(resultPipe[1],
             (error.empty() ? "P" : "F") + childNotes + '\0' + error);
    close(resultPipe[1]);
    _exit(0);
  }
  close(resultPipe[1]);

  std::string message;
  bool timedOut = false;
  char buffer[4096];
  struct pollfd pfd = {resultPipe[0], POLLIN, 0};
  int waitedMs = 0;
  for (;;) {
    int ready = poll(&pfd, 1, 1000);
    if (ready == 0) {
      waitedMs += 1000;
      if (waitedMs >= int(options.timeoutSeconds) * 1000) {
        timedOut = true;
        kill(child, SIGKILL);
        break;
      }
      continue;
    }
    if (ready < 0)
      continue;
    ssize_t n = read(resultPipe[0], buffer, sizeof(buffer));
    if (n <= 0)
      break;
    message.append(buffer, n);
  }
  close(resultPipe[0]);
  int status = 0;
  waitpid(child, &status, 0);

  std::string childErrors;
  if (errors) {
    std::rewind(errors);
    while (size_t n = std::fread(buffer, 1, sizeof(buffer), errors))
      childErrors.append(buffer, n);
    std::fclose(errors);
    // Keep the last line(s) only, on one line.
    llvm::StringRef text = llvm::StringRef(childErrors).trim();
    if (text.size() > 400)
      text = text.take_back(400);
    childErrors = text.str();
    std::replace(childErrors.begin(), childErrors.end(), '\n', ' ');
  }

  if (timedOut)
    return "timed out after " + std::to_string(options.timeoutSeconds) + " s";
  if (WIFSIGNALED(status))
    return "crashed with signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")" +
           (childErrors.empty() ? "" : ": " + childErrors);
  if (message.empty())
    return "exited without a result (status " +
           std::to_string(WEXITSTATUS(status)) + ")" +
           (childErrors.empty() ? "" : ": " + childErrors);
  size_t nul = message.find('\0');
  if (nul == std::string::npos)
    return "truncated result from the child process";
  notes = message.substr(1, nul - 1);
  if (message[0] == 'P')
    return "";
  return message.substr(nul + 1);
}

/// Reads excluded.txt: `case_name  reason` per line, `#` comments.
bool readExcluded(const std::string &path,
                  std::map<std::string, std::string> &excluded,
                  std::vector<std::string> &errors) {
  std::string contents;
  if (!readFile(path, contents)) {
    errors.push_back("cannot read the exclusion list " + path);
    return false;
  }
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(contents).split(lines, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    llvm::StringRef line = lines[i].trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    size_t space = line.find_first_of(" \t");
    llvm::StringRef name = line.take_front(space);
    llvm::StringRef reason =
        space == llvm::StringRef::npos ? "" : line.drop_front(space).trim();
    std::string where = path + ":" + std::to_string(i + 1) + ": ";
    if (reason.empty())
      errors.push_back(where + "'" + name.str() + "' has no reason");
    else if (!excluded.emplace(name.str(), reason.str()).second)
      errors.push_back(where + "'" + name.str() + "' is listed twice");
  }
  return true;
}

void usage() {
  llvm::errs()
      << "usage: sharc-onnx-backend-test [--data DIR] [--excluded FILE] "
         "[--filter SUBSTR] [--timeout SECONDS] [--no-fork] [-v]\n"
         "Runs ONNX's backend node tests through the importer and the "
         "reference evaluator.\n";
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) {
        llvm::errs() << "error: " << arg << " needs a value\n";
        std::exit(2);
      }
      out = argv[++i];
    };
    if (arg == "--data")
      value(options.dataDir);
    else if (arg == "--excluded")
      value(options.excludedFile);
    else if (arg == "--filter")
      value(options.filter);
    else if (arg == "--timeout") {
      std::string seconds;
      value(seconds);
      if (llvm::StringRef(seconds).getAsInteger(10, options.timeoutSeconds) ||
          options.timeoutSeconds == 0) {
        llvm::errs() << "error: bad --timeout value '" << seconds << "'\n";
        return 2;
      }
    } else if (arg == "-v" || arg == "--verbose")
      options.verbose = true;
    else if (arg == "--no-fork")
      options.fork = false;
    else if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else {
      llvm::errs() << "error: unknown argument '" << arg << "'\n";
      usage();
      return 2;
    }
  }

  if (!llvm::sys::fs::is_directory(options.dataDir)) {
    llvm::errs() << "error: " << options.dataDir
                 << " is not a directory (install libonnx-testdata or pass "
                    "--data)\n";
    return 2;
  }
  std::map<std::string, std::string> excluded;
  std::vector<std::string> listErrors;
  if (!readExcluded(options.excludedFile, excluded, listErrors)) {
    llvm::errs() << "error: " << listErrors.front() << "\n";
    return 2;
  }

  std::vector<std::string> cases = subdirectories(options.dataDir, "");
  std::set<std::string> seenExcluded;
  std::vector<std::pair<std::string, std::string>> excludedRun;
  std::vector<std::string> skipped;
  int passed = 0, failed = 0;

  for (const std::string &caseName : cases) {
    if (!options.filter.empty() &&
        caseName.find(options.filter) == std::string::npos)
      continue;
    std::string caseDir = options.dataDir + "/" + caseName;
    std::string bytes;
    onnx::ModelProto model;
    if (!readFile(caseDir + "/model.onnx", bytes))
      continue; // Not a test case directory.
    if (!model.ParseFromString(bytes)) {
      llvm::outs() << "FAIL " << caseName
                   << ": cannot parse model.onnx as a ModelProto\n";
      ++failed;
      continue;
    }
    std::set<std::string> ops;
    collectOps(model.graph(), ops);
    std::vector<std::string> unsupported;
    for (const std::string &op : ops) {
      llvm::StringRef name = op;
      bool preview = name.consume_front(onnx_import::kPreviewTrainingDomain) &&
                     name.consume_front(".");
      if (preview ? !onnx_import::findPreviewTrainingRule(name)
                  : !onnx_import::findOpRule(op))
        unsupported.push_back(op);
    }

    auto excludedIt = excluded.find(caseName);
    if (excludedIt != excluded.end())
      seenExcluded.insert(caseName);
    if (!unsupported.empty()) {
      skipped.push_back(caseName);
      if (excludedIt != excluded.end())
        listErrors.push_back("excluded case '" + caseName +
                             "' uses unsupported ops and would be skipped "
                             "anyway; remove it from the list");
      if (options.verbose)
        llvm::outs() << "skip " << caseName << ": uses "
                     << llvm::join(unsupported, ", ") << "\n";
      continue;
    }
    if (excludedIt != excluded.end()) {
      excludedRun.emplace_back(caseName, excludedIt->second);
      continue;
    }
    // Element types sharc does not have exclude a case without a list.
    if (std::optional<std::string> type =
            unsupportedElementType(model.graph())) {
      excludedRun.emplace_back(caseName, "element type " + *type +
                                             " (sharc's tensors are "
                                             "f64/f32/f16/bf16/i64/i32/i1)");
      continue;
    }

    std::string notes;
    std::string error =
        runCaseIsolated(model, caseDir, caseName, options, notes);
    if (error.empty()) {
      ++passed;
      if (options.verbose)
        llvm::outs() << "PASS " << caseName
                     << (notes.empty() ? "" : " (" + notes + ")") << "\n";
    } else {
      ++failed;
      llvm::outs() << "FAIL " << caseName << ": " << error
                   << (options.verbose && !notes.empty() ? " (" + notes + ")"
                                                         : "")
                   << "\n";
    }
    llvm::outs().flush();
  }

  if (options.filter.empty())
    for (auto &[name, reason] : excluded)
      if (!seenExcluded.count(name))
        listErrors.push_back("excluded case '" + name + "' is not a case in " +
                             options.dataDir);
  for (const std::string &error : listErrors) {
    llvm::outs() << "FAIL excluded.txt: " << error << "\n";
    ++failed;
  }

  llvm::outs() << "\nExcluded (" << excludedRun.size() << "):\n";
  for (auto &[name, reason] : excludedRun)
    llvm::outs() << "  " << name << ": " << reason << "\n";
  llvm::outs() << skipped.size()
               << " cases skipped: they use ops the importer does not "
                  "support"
               << (options.verbose ? "" : " (-v lists them)") << "\n";
  llvm::outs() << passed << " passed, " << failed << " failed, "
               << skipped.size() << " skipped\n";
  llvm::outs().flush();
  return failed ? 1 : 0;
}
