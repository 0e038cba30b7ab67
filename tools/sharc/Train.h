//===- Train.h - sharc eval --train -----------------------------*- C++ -*-===//
//
// Training on the reference evaluator: the training flags of `sharc eval`,
// the DeepSpeed config, the train pipeline and the step loop (Train.cpp),
// and the helpers of sharc.cpp that both commands share.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_TRAIN_H
#define SHARC_TOOLS_SHARC_TRAIN_H

#include "ir/Tensor.h"
#include "ir/TrainingOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/CommandLine.h"

#include <map>
#include <string>

namespace sharc {

//===----------------------------------------------------------------------===//
// Shared with sharc.cpp
//===----------------------------------------------------------------------===//

/// Prints "sharc: error: MESSAGE" and returns the exit status 1.
int fail(const llvm::Twine &message);

/// A model ready to evaluate: the module, its entry function and the values
/// of its parameters known so far (from the ONNX initializers).
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp entry;
  std::map<std::string, Tensor> parameters;
};

/// The user-facing name of argument `index`: its parameter name, its model
/// input name, or "arg<index>".
std::string argumentName(mlir::func::FuncOp func, unsigned index);

/// Reads `path` as a tensor of `type`'s element type (bf16 may be given as
/// f32); the shape is not checked.
mlir::FailureOr<Tensor> readNpyAs(llvm::StringRef name, llvm::StringRef path,
                                  mlir::RankedTensorType type);

/// Reads `path` as a value for argument `name` of type `type`.
mlir::FailureOr<Tensor> readArgument(llvm::StringRef name, llvm::StringRef path,
                                     mlir::RankedTensorType type);

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

/// Registers the training flags of `eval` and `compile` in `category`; call
/// once, before parsing the command line.
void registerTrainingFlags(llvm::cl::SubCommand &eval,
                           llvm::cl::SubCommand &compile,
                           llvm::cl::OptionCategory &category);

/// The training options from --config and the flags, with the batch sizes
/// settled against the micro-batch of `forward` (dim 0 of its inputs) and
/// --world-size ranks, which only a compiled program (`compiled`) may set
/// above 1.  Prints the error and fails on bad options.
mlir::FailureOr<TrainingOptions> resolveTrainingOptions(mlir::func::FuncOp forward,
                                                        bool compiled);

/// True when --train was given.
bool trainingRequested();

/// The first training flag given on the command line, if any (an error
/// without --train).
std::optional<std::string> givenTrainingFlag();

/// `sharc eval --train`: builds the training step of `model` and runs the
/// requested number of steps on the evaluator.  `inputs` maps --input names
/// to .npy paths: data inputs (streamed by rows) and initial parameter
/// values.  Returns the exit status.
int runTraining(mlir::MLIRContext &context, LoadedModel &model,
                const std::map<std::string, std::string> &inputs);

//===----------------------------------------------------------------------===//
// Compiling (Compile.cpp)
//===----------------------------------------------------------------------===//

/// Registers the flags of `compile` (besides the training flags).
void registerCompileFlags(llvm::cl::SubCommand &compile,
                          llvm::cl::OptionCategory &category);

/// `sharc compile`: builds, emits and links the training program of `model`
/// into `outDir`.  Returns the exit status.
int runCompile(mlir::MLIRContext &context, LoadedModel &model,
               llvm::StringRef modelPath, llvm::StringRef outDir);

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_TRAIN_H
