//===- Passes.h - sharc passes ------------------------------------*- C++ -*-===//

#ifndef SHARC_PASSES_PASSES_H
#define SHARC_PASSES_PASSES_H

#include "ir/SharcOps.h"
#include "passes/TrainingOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <optional>

namespace sharc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

//===----------------------------------------------------------------------===//
// Training options
//===----------------------------------------------------------------------===//

/// The optimizer named `name` ("sgd", "adam", "adamw"), if any.
std::optional<OptimizerKind> parseOptimizerKind(llvm::StringRef name);
/// The pass-option spelling of `kind`.
llvm::StringRef stringifyOptimizerKind(OptimizerKind kind);
/// The schedule named `name` ("none", "warmup-lr", "warmup-decay-lr",
/// "warmup-cosine-lr", "one-cycle", "lr-range-test"), if any.
std::optional<SchedulerKind> parseSchedulerKind(llvm::StringRef name);
/// The pass-option spelling of `kind`.
llvm::StringRef stringifySchedulerKind(SchedulerKind kind);

/// Checks the optimizer, gradient and schedule settings of `options` (value
/// ranges, combinations); reports the first problem through `emitError`.
mlir::LogicalResult
verifyTrainingOptions(const TrainingOptions &options,
                      llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

//===----------------------------------------------------------------------===//
// Training step
//===----------------------------------------------------------------------===//

/// Adds `@train_step` to `module` (docs/training.md): one call of
/// `@<options.function>_grad` per micro-batch, gradient accumulation,
/// clipping, the learning-rate schedule and the optimizer update, as
/// docs/optimizers.md describes.  Invalid options or an unexpected gradient
/// function are reported as errors.
mlir::FailureOr<mlir::func::FuncOp>
buildTrainStep(mlir::ModuleOp module, const TrainingOptions &options);

/// The sharc-optimizer pass with the optimizer and schedule settings of
/// `options`.
std::unique_ptr<mlir::Pass> createOptimizerPass(const TrainingOptions &options);

/// sharc-autodiff then sharc-optimizer with `options`, then canonicalize and
/// CSE: forward function in, `@train_step` out.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainingOptions &options);

/// Registers `sharc-train-pipeline`, whose options are those of the two
/// passes.
void registerSharcPipelines();

} // namespace sharc

#endif // SHARC_PASSES_PASSES_H
