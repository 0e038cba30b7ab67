//===- Diagnostics.cpp - user-facing diagnostic printing ------------------===//
//
// The CLI's error line and the MLIR diagnostic handler of Diagnostics.h.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace sharc {

int fail(const llvm::Twine &message) {
  llvm::errs() << "sharc: error: " << message << "\n";
  return 1;
}

void warn(const llvm::Twine &message) {
  llvm::errs() << "sharc: warning: " << message << "\n";
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
