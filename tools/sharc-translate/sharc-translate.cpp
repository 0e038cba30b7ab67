//===- sharc-translate.cpp - sharc IR to C++/CUDA source ------------------===//
//
//   sharc-translate --emit-program [--target cpu|cuda] [--model NAME]
//                   [--sharc-version V --model-hash H --training-config T]
//                   IN.mlir
//
// The code generator as a translation (mlir-translate style): the
// `@train_step` of IN.mlir, as sharc-compile-pipeline leaves it, becomes the
// program source that `sharc compile` writes to OUTDIR/program.cpp (or
// program.cu); the two are byte-identical for the same IR.  The lit tests of
// test/codegen run it.
//
//===----------------------------------------------------------------------===//

#include "codegen/Emitter.h"
#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"

using namespace mlir;

static llvm::cl::opt<std::string>
    target("target", llvm::cl::desc("cpu (default) or cuda"),
           llvm::cl::init("cpu"));
static llvm::cl::opt<std::string>
    model("model",
          llvm::cl::desc("The model the program is recorded as compiled from"),
          llvm::cl::init(""));
// What `sharc compile` records for checkpoints (manifest.json's
// sharc_version, model_hash and training_config).
static llvm::cl::opt<std::string>
    sharcVersion("sharc-version",
                 llvm::cl::desc("The sharc version the program records"),
                 llvm::cl::init(""));
static llvm::cl::opt<std::string>
    modelHash("model-hash",
              llvm::cl::desc("The model hash the program records"),
              llvm::cl::init(""));
static llvm::cl::opt<std::string> trainingConfig(
    "training-config",
    llvm::cl::desc("The training configuration the program records (NAME "
                   "VALUE lines)"),
    llvm::cl::init(""));

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration emit(
      "emit-program", "Emit the @train_step of a compiled module as C++/CUDA",
      [](ModuleOp module, llvm::raw_ostream &os) -> LogicalResult {
        if (target != "cpu" && target != "cuda")
          return module.emitError()
                 << "--target must be cpu or cuda, not '" << target << "'";
        auto step = module.lookupSymbol<func::FuncOp>("train_step");
        if (!step)
          return module.emitError() << "no '@train_step' to emit";
        FailureOr<sharc::EmitOptions> options = sharc::programOptionsOf(step);
        if (failed(options))
          return failure();
        options->target = target;
        options->model = model;
        options->sharcVersion = sharcVersion;
        options->modelHash = modelHash;
        options->trainingConfig = trainingConfig;
        sharc::ProgramReport report;
        return sharc::emitProgram(step, *options, os, report);
      },
      [](DialectRegistry &registry) {
        registry.insert<sharc::SharcDialect, func::FuncDialect>();
      });
  return failed(mlirTranslateMain(argc, argv, "sharc translation tool"));
}
