//===- Compile.h - sharc compile --------------------------------*- C++ -*-===//
//
// Compiling a model's training step to a training binary: the flags of
// `sharc compile` besides the training flags of Options.h, and the command
// (Compile.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_COMPILE_H
#define SHARC_TOOLS_SHARC_COMPILE_H

#include "tools/sharc/Model.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

namespace sharc {

/// Registers the flags of `compile` (besides the training flags).
void registerCompileFlags(llvm::cl::SubCommand &compile,
                          llvm::cl::OptionCategory &category);

/// `sharc compile`: builds, emits and links the training program of `model`
/// into `outDir`.  Returns the exit status.
/// True when the command line asks `sharc compile --plan`: the model is
/// then loaded with its parameters' shapes only (ImportOptions::shapesOnly).
bool compileReadsShapesOnly();

int runCompile(mlir::MLIRContext &context, LoadedModel &model,
               llvm::StringRef modelPath,
               llvm::ArrayRef<std::string> inputShapes, llvm::StringRef outDir);

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_COMPILE_H
