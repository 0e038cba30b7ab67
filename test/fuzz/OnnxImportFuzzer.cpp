//===- OnnxImportFuzzer.cpp - libFuzzer target for the ONNX importer --------===//
//
// Feeds arbitrary bytes to the importer as a serialized ModelProto.  The
// importer must either fail with a diagnostic or produce a module that
// verifies; anything else (a crash, a sanitizer report, an invalid module) is
// a bug.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Importer.h"
#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::DialectRegistry registry;
  registry.insert<sharc::SharcDialect, mlir::func::FuncDialect>();
  // A fresh context per input keeps memory flat over long runs.
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });

  sharc::ImportOptions options;
  auto model = sharc::importOnnxBytes(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.onnx",
      /*baseDir=*/"", context, options);
  if (mlir::succeeded(model) && mlir::failed(mlir::verify(*model->module))) {
    std::fprintf(stderr, "importer produced a module that does not verify\n");
    std::abort();
  }
  return 0;
}
