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

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace sharc {

/// Prints "sharc: error: MESSAGE" and returns the exit status 1.
int fail(const llvm::Twine &message);

/// Prints "sharc: warning: MESSAGE" on standard error.
void warn(const llvm::Twine &message);

/// Progress lines on standard error for a stage that may take long (reading
/// a large model, writing its weights): nothing while the stage is younger
/// than kProgressQuiet, then "sharc: WHAT: 1.2 of 40.1 GB (12 s)" at most
/// every kProgressInterval, and a last line with the stage's time when it
/// ends, if any line was printed.  The environment variable
/// SHARC_PROGRESS_SECONDS=S sets both times to S seconds (0: a line for
/// every add()).  add() may be called from any thread.
class Progress {
public:
  static constexpr std::chrono::milliseconds kProgressQuiet{3000};
  static constexpr std::chrono::milliseconds kProgressInterval{5000};

  /// `total` bytes are expected; 0 when unknown (the lines then give the
  /// bytes so far).
  Progress(std::string what, uint64_t total = 0);
  ~Progress();
  Progress(const Progress &) = delete;
  Progress &operator=(const Progress &) = delete;

  /// Counts `bytes` more done; prints a line when one is due.
  void add(uint64_t bytes);

private:
  std::string what;
  uint64_t total, done = 0;
  bool printed = false;
  std::chrono::milliseconds interval = kProgressInterval;
  std::chrono::steady_clock::time_point start, next;
  std::mutex mutex;
};

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
