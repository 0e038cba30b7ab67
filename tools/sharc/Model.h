//===- Model.h - loading a model for the sharc CLI --------------*- C++ -*-===//
//
// What every command of the sharc CLI starts from: a model, ONNX or sharc IR
// (.mlir), loaded into a module with its entry function and the values of
// its parameters; and how the commands name the entry's arguments and read
// their values from .npy files.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_MODEL_H
#define SHARC_TOOLS_SHARC_MODEL_H

#include "ir/Tensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <map>
#include <optional>
#include <string>

namespace sharc {

/// How an ONNX model is imported besides --input-shape: what binds its
/// dynamic input dimensions (ImportOptions::batchSize, dataShapes) and
/// --untie-initializers (ImportOptions::untieInitializers).
struct ImportHints {
  std::optional<int64_t> batchSize;
  llvm::StringMap<llvm::SmallVector<int64_t>> dataShapes;
  bool untieInitializers = false;
};

/// A model ready to evaluate: the module, its entry function and the values
/// of its parameters known so far (from the ONNX initializers).
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp entry;
  std::map<std::string, PackedTensor> parameters;
  /// What checkpoints record of the model (16 hex digits): the importer's
  /// hash of an ONNX graph (ImportedModel::modelHash), or of a .mlir file's
  /// text.
  std::string modelHash;
  /// The file it was loaded from.
  std::string path;
  /// How it was imported (a reload at another shape imports it alike).
  ImportHints hints;
};

/// Loads the model at `path` into `context`: a file ending in .mlir is parsed
/// as sharc IR, anything else is imported as ONNX with the static shapes of
/// `inputShapes` (--input-shape NAME=D0xD1x..., ONNX only).  The entry is
/// @main, or the module's only function.  Prints the error and fails when the
/// model cannot be read or has no static shapes or entry.  With
/// `shapesOnly` (ONNX), the parameters' values are not read
/// (ImportOptions::shapesOnly) and LoadedModel::parameters stays empty.

mlir::FailureOr<LoadedModel> loadModel(mlir::MLIRContext &context,
                                       llvm::StringRef path,
                                       llvm::ArrayRef<std::string> inputShapes,
                                       bool shapesOnly = false,
                                       const ImportHints &hints = {});

/// The user-facing name of argument `index`: its parameter name, its model
/// input name, "sharc.step" or "sharc.rows" for the random ops' key, or
/// "arg<index>".
std::string argumentName(mlir::func::FuncOp func, unsigned index);

/// The value of a random-key argument of `type` (sharc.random_key): the
/// step counter `step` for a scalar, rows firstRow, firstRow + 1, ...
/// otherwise.
Tensor randomKeyValue(mlir::RankedTensorType type, int64_t step,
                      int64_t firstRow);

/// Reads `path` as a tensor of `type`'s element type (bf16 may be given as
/// f32); the shape is not checked.
mlir::FailureOr<Tensor> readNpyAs(llvm::StringRef name, llvm::StringRef path,
                                  mlir::RankedTensorType type);

/// Reads `path` as a value for argument `name` of type `type`.
/// `array`, read from `path`, as a tensor of `type`'s element type (f32
/// for bf16: NumPy has none), the shape unchecked; an error names `name`.
mlir::FailureOr<Tensor> npyAs(llvm::StringRef name, llvm::StringRef path,
                              const rt::NpyArray &array,
                              mlir::RankedTensorType type);

mlir::FailureOr<Tensor> readArgument(llvm::StringRef name, llvm::StringRef path,
                                     mlir::RankedTensorType type);

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_MODEL_H
