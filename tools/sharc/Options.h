//===- Options.h - the training flags of the sharc CLI ----------*- C++ -*-===//
//
// The training flags of `sharc eval --train` and `sharc compile` and their
// resolution: a DeepSpeed config (--config) with the flags over it, checked
// against the optimizer and schedule and with the batch sizes settled, as
// the TrainingOptions both commands build the training step from.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_OPTIONS_H
#define SHARC_TOOLS_SHARC_OPTIONS_H

#include "ir/TrainingOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <optional>
#include <string>

namespace sharc {

/// Registers the training flags of `eval` and `compile` in `category`; call
/// once, before parsing the command line.
void registerTrainingFlags(llvm::cl::SubCommand &eval,
                           llvm::cl::SubCommand &compile,
                           llvm::cl::OptionCategory &category);

/// The training options from --config and the flags, with the batch sizes
/// settled against the micro-batch of `forward` (dim 0 of its inputs) and
/// --world-size ranks.  Prints the error and fails on bad options.  With
/// `budgetSearch` (sharc compile --memory-budget), --nvme-path may name the
/// folder of NVMe offload without asking for it (the search may choose it).
mlir::FailureOr<TrainingOptions>
resolveTrainingOptions(mlir::func::FuncOp forward, bool budgetSearch = false);

/// True when --train was given.
bool trainingRequested();

/// The first training flag given on the command line, if any (an error
/// without --train).
std::optional<std::string> givenTrainingFlag();

/// The micro-batch of `forward`: dimension 0 of its data inputs, which must
/// agree (`source` names where it was read); prints the error and fails
/// otherwise.
mlir::FailureOr<int64_t> microBatchOf(mlir::func::FuncOp forward,
                                      std::string &source);

/// Whether the training flag `name` (without dashes) is on the command line.
bool trainingFlagGiven(llvm::StringRef name);

/// The micro-batch the --config file sets (train_micro_batch_size_per_gpu,
/// or derived from train_batch_size by DeepSpeed's rules at --world-size
/// and --grad-accum), which binds a model's dynamic batch dimension; none
/// without a config or when the config does not set it.  A config that
/// does not read is an error (printed).
mlir::FailureOr<std::optional<int64_t>> configuredMicroBatch();

/// The training configuration a checkpoint records and a resumed run must
/// have equal (runtime/Checkpoint.h): one "NAME VALUE" line per option that
/// changes what the steps compute -- the optimizer and its parameters, the
/// schedule, clipping, the loss, the frozen parameters, the precision and
/// loss scaling, and the global batch (micro-batch x GAS x world size) --
/// but not how they are laid out (world size, ZeRO stage, offload,
/// recomputation, buckets, micro-batch and GAS themselves).
std::string trainingConfigText(const TrainingOptions &options,
                               int64_t microBatch);

/// The number of steps `sharc eval --train` runs (--steps; 1 by default).
int64_t trainingSteps();

/// The folder of --dump-state, when given.
std::optional<std::string> dumpStateDir();

/// `sharc eval --train`'s checkpoint flags (runtime/Checkpoint.h).
struct CheckpointFlags {
  /// --save-dir, --resume.
  std::optional<std::string> saveDir, resume;
  /// --save-every (0: only after the last step), --keep-last (0: all).
  int64_t saveEvery = 0, keepLast = 0;
};

/// The checkpoint flags, checked (the error is printed).
mlir::FailureOr<CheckpointFlags> checkpointFlags();

/// The file of --metrics (runtime/Metrics.h), when given.
std::optional<std::string> metricsPath();

/// The folder of --dump-grads, when given.
std::optional<std::string> dumpGradsDir();

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_OPTIONS_H
