//===- Exporter.h - Writing a model back with trained weights ---*- C++ -*-===//
//
// `sharc export`: the ONNX model a run was compiled from, written again with
// the values of a saved state (a checkpoint) in place of its float
// initializers, for inference with onnxruntime or any ONNX runtime.  The
// graph, the opsets, the other initializers and the metadata are kept as
// they are.  Above 2 GiB of initializers (protobuf's limit), or when asked,
// the initializers go to an external data file next to the model
// (`TRAINED.onnx.data`, ONNX's external-data format: location, offset,
// length).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_ONNX_EXPORTER_H
#define SHARC_FRONTENDS_ONNX_EXPORTER_H

#include "runtime/Npy.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/FunctionExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace sharc {

struct ExportOptions {
  /// Keep every initializer of at least 1 KiB in the external data file,
  /// whatever the model's size.
  bool externalData = false;
  /// The state was trained with --untie-initializers: every Identity node
  /// that reads a float initializer becomes an initializer of its own (its
  /// output's name, its trained value).
  bool untieInitializers = false;
  /// The model's hash the values must come from (ImportedModel::modelHash;
  /// empty: not checked).
  std::string expectedModelHash;
};

/// What exportTrainedModel wrote.
struct ExportSummary {
  int64_t replaced = 0, kept = 0;
  uint64_t replacedBytes = 0;
  /// The external data file, empty when there is none.
  std::string externalDataPath;
};

/// Reads the float initializer `name` (its ONNX name) of the trained state:
/// the array, or an error message.
using TrainedValueFn = llvm::function_ref<bool(
    const std::string &name, rt::NpyArray &value, std::string &error)>;

/// Writes the model at `modelPath` to `outputPath` with every float
/// initializer (the parameters) taken from `trainedValue`, converted to the
/// initializer's element type, its shape checked; the output (and its
/// external data file) replace any previous ones together or not at all.
/// Errors are emitted at the file they concern.
mlir::LogicalResult
exportTrainedModel(llvm::StringRef modelPath, llvm::StringRef outputPath,
                   TrainedValueFn trainedValue, const ExportOptions &options,
                   mlir::MLIRContext &context, ExportSummary &summary);

} // namespace sharc

#endif // SHARC_FRONTENDS_ONNX_EXPORTER_H
