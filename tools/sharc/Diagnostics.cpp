//===- Diagnostics.cpp - user-facing diagnostic printing ------------------===//
//
// The CLI's error line and the MLIR diagnostic handler of Diagnostics.h.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

namespace sharc {

int fail(const llvm::Twine &message) {
  llvm::errs() << "sharc: error: " << message << "\n";
  return 1;
}

void warn(const llvm::Twine &message) {
  llvm::errs() << "sharc: warning: " << message << "\n";
}

namespace {
/// `bytes` in GB (MB below one GB), with one decimal.
std::string formatBytes(uint64_t bytes) {
  bool giga = bytes >= 1000000000;
  return llvm::formatv("{0:f1} {1}", double(bytes) / (giga ? 1e9 : 1e6),
                       giga ? "GB" : "MB")
      .str();
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

Progress::Progress(std::string what, uint64_t total)
    : what(std::move(what)), total(total),
      start(std::chrono::steady_clock::now()), next(start + kProgressQuiet) {
  const char *value = std::getenv("SHARC_PROGRESS_SECONDS");
  if (!value)
    return;
  double seconds;
  if (llvm::StringRef(value).getAsDouble(seconds) || !(seconds >= 0) ||
      seconds > 1e6) {
    static std::once_flag once;
    std::call_once(once, [&] {
      warn(llvm::Twine("SHARC_PROGRESS_SECONDS='") + value +
           "' is not a number of seconds from 0 to 1e6; ignored");
    });
    return;
  }
  interval = std::chrono::milliseconds(int64_t(seconds * 1000));
  next = start + interval;
}

Progress::~Progress() {
  if (printed)
    llvm::errs() << llvm::formatv("sharc: {0}: done, {1} ({2} bytes) in "
                                  "{3:f1} s\n",
                                  what, formatBytes(done), done,
                                  secondsSince(start));
}

void Progress::add(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  done += bytes;
  auto now = std::chrono::steady_clock::now();
  if (now < next)
    return;
  next = now + interval;
  printed = true;
  llvm::errs() << "sharc: " << what << ": " << formatBytes(done);
  if (total)
    llvm::errs() << " of " << formatBytes(total);
  llvm::errs() << llvm::formatv(" ({0:f0} s)\n", secondsSince(start));
}

std::string formatLocation(Location loc) {
  std::string file, node;
  unsigned line = 0, column = 0;
  loc->walk([&](Location inner) {
    if (auto name = dyn_cast<NameLoc>(inner)) {
      if (node.empty())
        node = name.getName().str();
    } else if (auto flc = dyn_cast<FileLineColLoc>(inner)) {
      if (file.empty()) {
        file = flc.getFilename().str();
        line = flc.getLine();
        column = flc.getColumn();
      }
    }
    return WalkResult::advance();
  });
  std::string result = file;
  if (!file.empty() && line != 0)
    result += ":" + std::to_string(line) + ":" + std::to_string(column);
  if (!node.empty())
    result += (result.empty() ? "" : ": ") + std::string("node '") + node + "'";
  return result;
}

static StringRef severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Note:
    return "note";
  case DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

static void printDiagnostic(Diagnostic &diag) {
  std::string where = formatLocation(diag.getLocation());
  llvm::errs() << (where.empty() ? "sharc" : where) << ": "
               << severityName(diag.getSeverity()) << ": " << diag << "\n";
  for (Diagnostic &note : diag.getNotes())
    printDiagnostic(note);
}

CliDiagnosticHandler::CliDiagnosticHandler(MLIRContext *context)
    : ScopedDiagnosticHandler(context) {
  setHandler([](Diagnostic &diag) {
    printDiagnostic(diag);
    return success();
  });
}

} // namespace sharc
