//===- Config.h - DeepSpeed configuration files -----------------*- C++ -*-===//
//
// Reads a DeepSpeed `ds_config.json` into TrainingOptions: the batch sizes,
// gradient clipping, the optimizer and the learning-rate schedule, with
// DeepSpeed's key names, defaults and batch-size derivation rules.  DeepSpeed
// keys for features sharc does not implement yet are recognised and rejected
// (unless their value leaves the feature off), unknown keys are errors that
// suggest the closest known key, and wrong types or out-of-range values name
// the key's full path.  docs/config.md is the reference.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_DEEPSPEED_CONFIG_H
#define SHARC_FRONTENDS_DEEPSPEED_CONFIG_H

#include "ir/TrainingOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sharc {

/// The batch-size keys of a DeepSpeed config as given (nullopt: absent or
/// null).
struct BatchSizeConfig {
  std::optional<int64_t> trainBatchSize;   // train_batch_size
  std::optional<int64_t> microBatchPerGpu; // train_micro_batch_size_per_gpu
  std::optional<int64_t> gradAccumSteps;   // gradient_accumulation_steps
};

/// What a DeepSpeed config says.
struct DeepSpeedConfig {
  /// The defaults passed to the reader with every key of the config applied.
  /// `gradAccum` is left alone: it is settled by resolveBatchSizes.
  TrainingOptions training;
  BatchSizeConfig batch;
  /// activation_checkpointing's keys that do not change the step
  /// (contiguous_memory_optimization, partition_activations,
  /// number_checkpoints; 0: null), for `sharc config`.
  struct {
    bool contiguous = false;
    bool partition = false;
    int64_t number = 0;
  } checkpointing;
  /// What the config says that still works but should change, as
  /// "FILE:LINE:COL: PATH: message" (deprecated keys DeepSpeed maps).
  std::vector<std::string> warnings;
};

/// The clipping threshold of a config without `gradient_clipping`: DeepSpeed
/// 0.19.8's default (runtime/constants.py), which clips fp32 training too.
constexpr double kDeepSpeedDefaultClip = 1.0;

/// Limits on a config file, far beyond what DeepSpeed configs hold (a few
/// kilobytes, objects nested four deep, arrays of two numbers): they stop a
/// hostile or mistaken file (a gigabyte array, 50,000 nested '[') before
/// llvm::json::parse, which recurses once per level of nesting and keeps
/// every value, exhausts the stack or the memory.
constexpr size_t kMaxConfigBytes = 1 << 20;
constexpr unsigned kMaxConfigDepth = 64;
constexpr size_t kMaxConfigArrayElements = 1000;

/// Parses `text`, the contents of the config file `fileName` (used in
/// messages), over `defaults`.  Errors read "FILE: KEY.PATH: message", or
/// "FILE:LINE:COL: invalid JSON: message"; a file beyond the limits above is
/// an error naming the limit.  Optimizer state offloaded to NVMe needs
/// offload_optimizer.nvme_path unless `defaults.nvmePath` names a folder
/// (the CLI's --nvme-path).
llvm::Expected<DeepSpeedConfig>
parseDeepSpeedConfig(llvm::StringRef text, llvm::StringRef fileName,
                     const TrainingOptions &defaults = TrainingOptions());

/// Reads and parses the config file at `path` (reading stops after
/// kMaxConfigBytes + 1 bytes: a device or a pipe may never end).
llvm::Expected<DeepSpeedConfig>
readDeepSpeedConfig(llvm::StringRef path,
                    const TrainingOptions &defaults = TrainingOptions());

/// The three batch sizes, consistent: train = micro × GAS × world size.
struct BatchSizes {
  int64_t trainBatchSize;
  int64_t microBatchPerGpu;
  int64_t gradAccumSteps;
};

/// Completes `given` by DeepSpeed's derivation rules for `worldSize` ranks
/// and checks train_batch_size = micro × GAS × worldSize.  The micro-batch is
/// fixed by the model (`modelMicroBatch`, described in messages by
/// `microBatchSource`, e.g. "dim 0 of input 'x'"): a configured or derived
/// micro-batch that differs from it is an error.
llvm::Expected<BatchSizes> resolveBatchSizes(const BatchSizeConfig &given,
                                             int64_t worldSize,
                                             int64_t modelMicroBatch,
                                             llvm::StringRef microBatchSource);

/// The three batch sizes by DeepSpeed 0.19.8's rules from the config alone
/// (runtime/config.py, _set_batch_related_parameters), for `worldSize` ranks:
/// the missing ones derived from those given (gradient_accumulation_steps
/// defaults to 1), then train = micro × GAS × worldSize checked.  `sharc
/// config` uses it; training fixes the micro-batch by the model
/// (resolveBatchSizes).
llvm::Expected<BatchSizes> deriveBatchSizes(const BatchSizeConfig &given,
                                            int64_t worldSize);

/// `config` resolved, in DeepSpeed's keys: every setting sharc reads, the
/// defaults filled in, the batch sizes `sizes` for `worldSize` ranks, the
/// deprecated keys mapped (what `sharc config` prints, as DeepSpeed prints
/// its configuration at start-up).
llvm::json::Value resolvedConfig(const DeepSpeedConfig &config,
                                 const BatchSizes &sizes, int64_t worldSize);

} // namespace sharc

#endif // SHARC_FRONTENDS_DEEPSPEED_CONFIG_H
