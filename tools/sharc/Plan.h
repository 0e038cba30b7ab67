//===- Plan.h - planning a training program, and within a budget -*- C++
//-*-===//
//
// What `sharc compile` plans before it writes anything: the train and
// compile pipelines on a model, the emitted program and its report
// (planProgram), and --memory-budget's search over ZeRO stage, offload,
// micro-batch and recomputation for the fastest plan that fits
// (searchMemoryBudget).  docs/budget.md documents the search.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_PLAN_H
#define SHARC_TOOLS_SHARC_PLAN_H

#include "codegen/Emitter.h"
#include "ir/TrainingOptions.h"
#include "tools/sharc/Model.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace sharc {

/// The compile flags a plan depends on besides the training options.
struct PlanSettings {
  bool cuda = false;
  bool fuse = true;
  /// --overlap-comm when given (else the options' overlapComm).
  std::optional<bool> overlapComm;
  /// --host-update.
  bool hostUpdate = false;
  /// The model's hash (LoadedModel::modelHash), which the program records
  /// for checkpoints.
  std::string modelHash;
};

/// A planned training program: the pipelines run, the program emitted.
struct PlannedProgram {
  TrainingOptions options;
  EmitOptions emit;
  ProgramReport report;
  std::string source;
  /// Where ZeRO-Offload puts things (runCompile's report says so): the
  /// optimizer state and the parameters on NVMe; the host layout of the
  /// CUDA target (or --host-update); the optimizer update on the host; the
  /// parameter slices in host memory; CPU offload on the CPU target, which
  /// moves nothing.
  bool nvme = false, paramNvme = false, hostLayout = false, hostUpdate = false,
       paramsOnHost = false, offload = false;
  /// The estimated seconds of one step (compute, collectives, NVMe and
  /// PCIe traffic on the target's machineModel, added up).
  double estimatedSeconds = 0;
};

/// The bytes of device memory a rank holds (on the CPU target, host
/// memory): the arena, the communicator's staging and every persistent
/// buffer neither offloaded to NVMe nor kept in host memory.
int64_t deviceBytes(const ProgramReport &report);

/// The bytes of a rank that --memory-budget bounds, as the binary plans
/// them (its summary line: each persistent buffer at its pool alignment,
/// the arena, the communication staging): on the CUDA target its device
/// memory; on the CPU target, whose device memory is the host's, that and
/// its host buffers and host arena.
int64_t budgetedBytes(const PlannedProgram &plan);

/// Adds the compile pipeline (and, with `train`, the train pipeline before
/// it) to `pm`, runs it on `module` and emits the program; the module is
/// changed.  `timing`, if given, times the emission.
mlir::FailureOr<PlannedProgram>
planProgram(mlir::PassManager &pm, mlir::ModuleOp module,
            const TrainingOptions &options, const PlanSettings &settings,
            llvm::StringRef modelPath, bool train,
            mlir::TimingScope *timing = nullptr);

/// The dimensions of the search a flag fixes (the flag's value is kept).
struct FixedDimensions {
  bool zeroStage = false, offload = false, microBatch = false,
       recompute = false;
};

/// --memory-budget: plans `model` (loaded with `inputShapes`) for every
/// candidate of ZeRO stage (all four on 2 or more ranks), offload (NVMe
/// with a folder for it; the CPU on the CUDA target), micro-batch (with
/// gradient accumulation at the same rows per step: models whose batch
/// dimension `--input-shape` sets) and recomputation (none, layers, auto at
/// the limit that fits) not fixed by `fixed`, starting from `base`; prints
/// every candidate's memory and estimated step time to `os` and returns the
/// fastest that fits `budget` bytes per rank, or fails saying what the
/// smallest needs.
mlir::FailureOr<PlannedProgram> searchMemoryBudget(
    mlir::MLIRContext &context, LoadedModel &model, llvm::StringRef modelPath,
    llvm::ArrayRef<std::string> inputShapes, bool shapesOnly,
    const TrainingOptions &base, const PlanSettings &settings,
    const FixedDimensions &fixed, int64_t budget, llvm::raw_ostream &os);

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_PLAN_H
