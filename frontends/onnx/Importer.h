//===- Importer.h - ONNX to sharc IR ------------------------------*- C++
//-*-===//
//
// Reads an ONNX model (binary protobuf, or ONNX's text format) and builds a
// func.func of sharc ops: arguments are the graph inputs followed by one
// argument per float initializer (marked with #sharc.param), results are the
// graph outputs.  Graph-input arguments carry `sharc.input = "onnx name"` and
// results `sharc.output = "onnx name"`.  Shapes are static; symbolic input
// dimensions get their values from ImportOptions::inputShapes.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_ONNX_IMPORTER_H
#define SHARC_FRONTENDS_ONNX_IMPORTER_H

#include "ir/Tensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sharc {

struct ImportOptions {
  /// Static shapes for graph inputs, by input name (overrides the model's
  /// dimensions, required for symbolic ones).
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Binds dimension 0 of every graph input that has it dynamic (symbolic
  /// or unknown) and no `inputShapes` entry: the micro-batch of a training
  /// run (the config's train_micro_batch_size_per_gpu).
  std::optional<int64_t> batchSize;
  /// The shapes of the data the inputs will be given (`sharc eval`'s
  /// --input files), by input name: a dynamic dimension of an input without
  /// an `inputShapes` entry takes the data's (after `batchSize` for
  /// dimension 0).
  llvm::StringMap<llvm::SmallVector<int64_t>> dataShapes;
  /// torch.onnx.export in eval mode merges initializers with equal values
  /// into one, which the other uses reach through Identity nodes named after
  /// their own parameters (every fresh LayerNorm's weight and bias).  The
  /// importer warns about it; with this set, each such Identity output
  /// becomes a parameter of its own (a copy of the value, under the
  /// Identity's output name), as PyTorch trains them.
  bool untieInitializers = false;
  /// Name of the generated function.
  std::string functionName = "main";
  /// Planning without weights: the float initializers (the parameters) are
  /// not read, only their element types and shapes (their external data may
  /// be absent), and ImportedModel::parameters stays empty.
  bool shapesOnly = false;
  /// Called with the count of each run of bytes read from the model: the
  /// .onnx file as the protobuf parses it, then each parameter's external
  /// data (progress reports for large models).
  std::function<void(uint64_t bytes)> onRead;
};

/// An imported model: the module, and the initial value of every parameter
/// argument in argument order (name = the #sharc.param's sanitized name).
struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// As the model stores them (no f32 widened to double).
  std::vector<std::pair<std::string, PackedTensor>> parameters;
  /// 16 hex digits: a hash of what the model computes, from its graph
  /// without the initializers' values or the input dimensions (checkpoints
  /// record it; a resume compares it).
  std::string modelHash;
};

/// Imports the model at `path`.  Files ending in `.onnxtxt` or `.onnxtext`
/// are parsed with ONNX's text-format parser, anything else as a binary
/// ModelProto.  Errors are emitted as diagnostics (located at
/// `path:node-name` where a node is at fault) and give failure; no partial
/// module is returned.
mlir::FailureOr<ImportedModel> importOnnxFile(llvm::StringRef path,
                                              mlir::MLIRContext &context,
                                              const ImportOptions &options);

/// Imports a serialized ModelProto held in memory (used by the fuzzer).
/// External data is resolved relative to `baseDir`; an empty `baseDir`
/// forbids external data.
mlir::FailureOr<ImportedModel> importOnnxBytes(llvm::StringRef bytes,
                                               llvm::StringRef sourceName,
                                               llvm::StringRef baseDir,
                                               mlir::MLIRContext &context,
                                               const ImportOptions &options);

} // namespace sharc

#endif // SHARC_FRONTENDS_ONNX_IMPORTER_H
