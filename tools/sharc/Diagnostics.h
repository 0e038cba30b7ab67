//===- Diagnostics.h - user-facing diagnostic printing ----------*- C++ -*-===//
//
// Prints MLIR diagnostics for people running the sharc CLI: locations built by
// the ONNX importer (node name + model file) read as
// "model.onnx: node 'name': error: message".  Also the CLI's own errors
// ("sharc: error: message"), which every command prints through `fail`.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_DIAGNOSTICS_H
#define SHARC_TOOLS_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/Twine.h"

#include <string>

namespace sharc {

/// Prints "sharc: error: MESSAGE" and returns the exit status 1.
int fail(const llvm::Twine &message);

/// Prints "sharc: warning: MESSAGE" on standard error.
void warn(const llvm::Twine &message);

/// Renders `loc` as "file:line:col", "file" (line 0) or
/// "file: node 'name'", whichever the location holds.
std::string formatLocation(mlir::Location loc);

/// Installs a handler on `context` that prints every diagnostic to stderr in
/// the format above (notes attached to a diagnostic are printed after it).
class CliDiagnosticHandler : public mlir::ScopedDiagnosticHandler {
public:
  explicit CliDiagnosticHandler(mlir::MLIRContext *context);
};

} // namespace sharc

#endif // SHARC_TOOLS_DIAGNOSTICS_H
