//===- ImporterInternal.h - pieces shared by the ONNX importer --*- C++ -*-===//
//
// Private to frontends/onnx: tensor decoding (initializers, tensor
// attributes, external data), the per-node view that the op rules of
// OpImporters.cpp use to read inputs and attributes and to build sharc ops,
// and the table of op rules.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_ONNX_IMPORTERINTERNAL_H
#define SHARC_FRONTENDS_ONNX_IMPORTERINTERNAL_H

#include "ir/SharcOps.h"
#include "ir/Tensor.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sharc::onnx_import {

/// Largest results folded into constants at import, by element kind, and the
/// most elements folded in one import (bounds the memory a model can claim).
inline constexpr int64_t kMaxFoldedFloatElements = int64_t(1) << 20;
inline constexpr int64_t kMaxFoldedIntElements = int64_t(1) << 24;
inline constexpr int64_t kFoldBudget = int64_t(1) << 26;

/// "[2, 3]", for diagnostics.
std::string formatShape(llvm::ArrayRef<int64_t> shape);

/// The sharc dtype of ONNX element type `onnxType`, if sharc supports it.
std::optional<DType> dtypeFromOnnx(int64_t onnxType);
/// ONNX's name of element type `onnxType` ("uint8"), for diagnostics.
std::string onnxTypeName(int64_t onnxType);

/// Reads the ONNX model at `path` (binary, or text for .onnxtxt/.onnxtext;
/// a regular file of at most 2 GiB) into `model`, calling `onRead` (if set)
/// with each run of bytes read; errors are emitted at the file.
mlir::LogicalResult
readModelProto(llvm::StringRef path, mlir::MLIRContext &context,
               onnx::ModelProto &model,
               const std::function<void(uint64_t)> &onRead = {});

/// Replaces the chains of elementary ops that exporters write for GELU
/// (tanh or erf form, any order and grouping of the products) in `block` by
/// sharc.gelu ops; the chains' ops are left unused (Idioms.cpp).
void recognizeIdioms(mlir::Block &block);

/// The folder external data of the model at `path` is relative to.
std::string modelBaseDir(llvm::StringRef path);

/// ImportedModel::modelHash of `model` (imported with
/// ImportOptions::untieInitializers = `untied`).
std::string modelHashOf(const onnx::ModelProto &model, bool untied = false);

/// Decodes TensorProtos, resolving external data relative to the model's
/// directory.
class TensorReader {
public:
  /// An empty `baseDir` forbids external data; `onRead` (if set) is called
  /// with the size of each external data slice read.
  explicit TensorReader(llvm::StringRef baseDir,
                        std::function<void(uint64_t)> onRead = {})
      : baseDir(baseDir), onRead(std::move(onRead)) {}

  /// Decodes `proto`; `what` names it in diagnostics ("initializer 'w'").
  mlir::FailureOr<Tensor> read(const onnx::TensorProto &proto,
                               mlir::Location loc,
                               const llvm::Twine &what) const;
  /// The elements of `proto`, checked as read() checks them, as they are
  /// stored; its raw data is moved out of `proto`, not copied (its
  /// raw_data is left empty).
  mlir::FailureOr<PackedTensor> take(onnx::TensorProto &proto,
                                     mlir::Location loc,
                                     const llvm::Twine &what) const;

  /// The element type and shape of `proto`, checked as read() checks them,
  /// without reading its values (ImportOptions::shapesOnly).
  mlir::FailureOr<std::pair<DType, llvm::SmallVector<int64_t>>>
  header(const onnx::TensorProto &proto, mlir::Location loc,
         const llvm::Twine &what) const;

  /// Reads the `expectedBytes` bytes of external data of `proto`.
  mlir::FailureOr<std::string> readExternal(const onnx::TensorProto &proto,
                                            uint64_t expectedBytes,
                                            mlir::Location loc,
                                            const llvm::Twine &what) const;

private:
  /// read() and take(): with `rawData`, the bytes are taken from it.
  mlir::FailureOr<PackedTensor> pack(const onnx::TensorProto &proto,
                                     mlir::Location loc,
                                     const llvm::Twine &what,
                                     std::string *rawData) const;

  std::string baseDir;
  std::function<void(uint64_t)> onRead;
};

/// An attribute an op rule understands, and the opsets in which it exists.
struct AttrSpec {
  const char *name;
  onnx::AttributeProto::AttributeType type;
  int64_t sinceOpset = 1;
  int64_t untilOpset = INT64_MAX;
};

class NodeImporter;

/// What a random op of the model is keyed by (NodeImporter::randomKey).
struct RandomKey {
  mlir::Value step, rows;
  uint32_t stream;
};

/// The values of a node's outputs, in order (null where not produced).
using Results = llvm::SmallVector<mlir::Value, 3>;

/// How one ONNX operator imports.  The dispatcher checks input and output
/// counts and attribute names/types against the rule before calling
/// `import`.
struct OpRule {
  /// Unbounded input/output count.
  static constexpr unsigned kVariadic = ~0u;

  /// Oldest default-domain opset for which this rule is right.  A rule with
  /// 13 also imports models of older opsets whose definition of the operator
  /// is the one of opset 13.
  int64_t sinceOpset;
  /// The first `minInputs` inputs must be present.
  unsigned minInputs;
  unsigned maxInputs;
  unsigned maxOutputs;
  std::vector<AttrSpec> attributes;
  mlir::FailureOr<Results> (*import)(NodeImporter &node);
  /// A deprecated operator whose rule implements its last definition, for
  /// models of any opset that has it.
  bool deprecated = false;
};

/// The rule of default-domain operator `opType`, or null.
const OpRule *findOpRule(llvm::StringRef opType);
/// ONNX's domain of training operators (Adagrad, Momentum, Adam).
inline constexpr const char *kPreviewTrainingDomain =
    "ai.onnx.preview.training";

/// The rule of `opType` in domain kPreviewTrainingDomain (opset 1), or null.
const OpRule *findPreviewTrainingRule(llvm::StringRef opType);

/// One ONNX node being imported: its resolved inputs, validated attributes,
/// and builders that verify each sharc op they create and fold it into a
/// `sharc.constant` when all its operands are constants.  Errors are emitted
/// at the node's location.
class NodeImporter {
public:
  /// `foldBudget` is the number of elements constant folding may still
  /// produce in this import; folding decrements it.
  NodeImporter(mlir::OpBuilder &builder, const TensorReader &reader,
               const onnx::NodeProto &node, int64_t opset, mlir::Location loc,
               llvm::SmallVector<mlir::Value> inputs, int64_t &foldBudget)
      : builder(builder), reader(reader), proto(node), opsetVersion(opset),
        location(loc), inputs(std::move(inputs)), foldBudget(foldBudget) {}

  const onnx::NodeProto &node() const { return proto; }
  /// The opset whose definition of the operator applies: the model's, or 13
  /// for an older model (whose definition of the operator is unchanged).
  int64_t opset() const { return opsetVersion; }
  mlir::Location loc() const { return location; }
  mlir::MLIRContext *context() const { return builder.getContext(); }
  mlir::InFlightDiagnostic emitError() const {
    return mlir::emitError(location);
  }

  //===--- Inputs and outputs ---------------------------------------------===//

  unsigned numInputs() const { return inputs.size(); }
  /// Input `index`, or null when absent (beyond the list or named "").
  mlir::Value input(unsigned index) const {
    return index < inputs.size() ? inputs[index] : mlir::Value();
  }
  bool hasInput(unsigned index) const {
    return static_cast<bool>(input(index));
  }
  unsigned numOutputs() const { return proto.output_size(); }
  /// True when output `index` is named (its value is wanted).
  bool hasOutput(unsigned index) const {
    return index < numOutputs() && !proto.output(index).empty();
  }

  /// The value of input `index` when it is a constant.
  std::optional<Tensor> constantInput(unsigned index) const;
  /// Like constantInput, but a non-constant input is an error; `what` names
  /// the input ("shape").
  mlir::FailureOr<Tensor> requireConstant(unsigned index,
                                          llvm::StringRef what) const;
  /// A constant integer scalar or 1-D input as a list.
  mlir::FailureOr<llvm::SmallVector<int64_t>>
  requireInts(unsigned index, llvm::StringRef what) const;

  //===--- Attributes (types checked before the rule runs) ----------------===//

  /// Checks every attribute against `specs` at this node's opset.
  mlir::LogicalResult checkAttributes(llvm::ArrayRef<AttrSpec> specs) const;
  bool hasAttr(llvm::StringRef name) const { return findAttr(name); }
  int64_t getInt(llvm::StringRef name, int64_t defaultValue) const;
  double getFloat(llvm::StringRef name, double defaultValue) const;
  std::string getString(llvm::StringRef name,
                        llvm::StringRef defaultValue) const;
  std::optional<llvm::SmallVector<int64_t>> getInts(llvm::StringRef name) const;
  std::optional<llvm::SmallVector<std::string>>
  getStrings(llvm::StringRef name) const;
  std::optional<llvm::SmallVector<double>>
  getFloats(llvm::StringRef name) const;
  const onnx::TensorProto *getTensor(llvm::StringRef name) const;
  /// Decodes a tensor attribute or other TensorProto of this node.
  mlir::FailureOr<Tensor> readTensor(const onnx::TensorProto &tensor,
                                     const llvm::Twine &what) const {
    return reader.read(tensor, location, what);
  }

  //===--- Building -------------------------------------------------------===//

  /// A sharc.constant holding `value`.
  mlir::Value constant(const Tensor &value);
  /// A rank-0 constant of `elementType` holding `value` (rounded/truncated).
  mlir::Value scalar(mlir::Type elementType, double value);
  mlir::FailureOr<mlir::Value> reshape(mlir::Value value,
                                       llvm::ArrayRef<int64_t> shape);
  /// Numpy-broadcasts `value` to `shape` (no op when the shape is equal).
  mlir::FailureOr<mlir::Value> broadcast(mlir::Value value,
                                         llvm::ArrayRef<int64_t> shape);
  /// Converts to `elementType` (no op when it already has it).
  mlir::FailureOr<mlir::Value> cast(mlir::Value value, mlir::Type elementType);

  /// Builds an OpTy whose result types are inferred; returns its results.
  template <typename OpTy, unsigned NumResults = 1, typename... Args>
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> createOp(Args &&...args) {
    mlir::OperationState state(location, OpTy::getOperationName());
    llvm::SmallVector<mlir::Type> placeholders(NumResults,
                                               builder.getNoneType());
    OpTy::build(builder, state, mlir::TypeRange(placeholders),
                std::forward<Args>(args)...);
    state.types.clear();
    if (failed(OpTy::inferReturnTypes(context(), location, state.operands,
                                      state.attributes.getDictionary(context()),
                                      state.getRawProperties(), state.regions,
                                      state.types)))
      return mlir::failure();
    return finish(state);
  }

  /// Builds a single-result OpTy whose result type is inferred.
  template <typename OpTy, typename... Args>
  mlir::FailureOr<mlir::Value> create(Args &&...args) {
    auto results = createOp<OpTy>(std::forward<Args>(args)...);
    if (failed(results))
      return mlir::failure();
    return results->front();
  }

  /// Builds a single-result OpTy with result type `resultType`.
  template <typename OpTy, typename... Args>
  mlir::FailureOr<mlir::Value> createTyped(mlir::Type resultType,
                                           Args &&...args) {
    mlir::OperationState state(location, OpTy::getOperationName());
    OpTy::build(builder, state, mlir::TypeRange(resultType),
                std::forward<Args>(args)...);
    auto results = finish(state);
    if (failed(results))
      return mlir::failure();
    return results->front();
  }

  /// Sequences (SplitToSequence's output, SequenceAt's first input) live only
  /// in the importer, as the list of their tensors: the tensors of input 0
  /// when it is a sequence.
  llvm::ArrayRef<mlir::Value> sequenceInput() const { return sequence; }
  void setSequenceInput(llvm::SmallVector<mlir::Value> tensors) {
    sequence = std::move(tensors);
  }

  /// The values a random op is keyed by (sharc.dropout_mask): the function
  /// arguments of the step counter and the batch rows, added on first use,
  /// and a stream number of its own.
  RandomKey randomKey() const { return keySource(); }
  void setRandomKeySource(std::function<RandomKey()> source) {
    keySource = std::move(source);
  }

  /// Makes `value`, when it is a parameter argument (a BatchNormalization's
  /// running statistic), a buffer (`sharc.buffer`): the optimizer does not
  /// train it, and `update` (when not null) is its new value, a result of
  /// the function.  An error when another node updates it too.
  mlir::LogicalResult setBuffer(mlir::Value value, mlir::Value update) const {
    return bufferSink(value, update);
  }
  void setBufferSink(
      std::function<mlir::LogicalResult(mlir::Value, mlir::Value)> sink) {
    bufferSink = std::move(sink);
  }
  /// True the first time this import asks for `key` (one warning per model).
  bool firstTime(llvm::StringRef key) const { return onceSink(key); }
  void setOnceSink(std::function<bool(llvm::StringRef)> sink) {
    onceSink = std::move(sink);
  }

private:
  /// Creates the op of `state`, verifies it and folds it when its operands
  /// are constants and its results are small enough (and within budget).
  mlir::FailureOr<llvm::SmallVector<mlir::Value>>
  finish(mlir::OperationState &state);
  const onnx::AttributeProto *findAttr(llvm::StringRef name) const;

  mlir::OpBuilder &builder;
  const TensorReader &reader;
  const onnx::NodeProto &proto;
  int64_t opsetVersion;
  mlir::Location location;
  llvm::SmallVector<mlir::Value> inputs;
  llvm::SmallVector<mlir::Value> sequence;
  std::function<RandomKey()> keySource;
  std::function<mlir::LogicalResult(mlir::Value, mlir::Value)> bufferSink;
  std::function<bool(llvm::StringRef)> onceSink;
  int64_t &foldBudget;
};

/// Whether `opType`'s first output is a sequence (its Results are the
/// sequence's tensors), and whether its first input is one.
bool producesSequence(llvm::StringRef opType);
bool consumesSequence(llvm::StringRef opType);

/// The static type of a value built by the importer.
inline mlir::RankedTensorType tensorTypeOf(mlir::Value value) {
  return llvm::cast<mlir::RankedTensorType>(value.getType());
}

//===--- Helpers shared by the op rules -----------------------------------===//

inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value value) {
  return tensorTypeOf(value).getShape();
}
inline int64_t rankOf(mlir::Value value) {
  return tensorTypeOf(value).getRank();
}
inline mlir::Type elementTypeOf(mlir::Value value) {
  return tensorTypeOf(value).getElementType();
}
/// One value as a rule's results.
inline mlir::FailureOr<Results> wrap(mlir::FailureOr<mlir::Value> value) {
  if (mlir::failed(value))
    return mlir::failure();
  return Results{*value};
}

/// The value of a chain of steps, or the first failure.
#define SHARC_TRY(var, expr)                                                   \
  mlir::FailureOr<mlir::Value> var = (expr);                                   \
  if (mlir::failed(var))                                                       \
  return mlir::failure()

/// Maps `axis` from [-rank, rank) to [0, rank); an error otherwise.
mlir::FailureOr<int64_t> normalizeAxis(NodeImporter &n, int64_t axis,
                                       int64_t rank);
/// An error unless `value` is a floating-point tensor.
mlir::LogicalResult requireFloat(NodeImporter &n, mlir::Value value);
/// Elements [start, start + count * stride) of `x` along `axis` (a negative
/// stride walks backwards from `start`).
mlir::FailureOr<mlir::Value> sliceAlong(NodeImporter &n, mlir::Value x,
                                        int64_t axis, int64_t start,
                                        int64_t count, int64_t stride = 1);

/// The recurrent operators (OpImportersRecurrent.cpp).
mlir::FailureOr<Results> importRNN(NodeImporter &n);
mlir::FailureOr<Results> importGRU(NodeImporter &n);
mlir::FailureOr<Results> importLSTM(NodeImporter &n);

} // namespace sharc::onnx_import

#endif // SHARC_FRONTENDS_ONNX_IMPORTERINTERNAL_H
