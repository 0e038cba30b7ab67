//===- TrainingOptions.h - what a training step does -----------*- C++ -*-===//
//
// Every choice that shapes the training step: which output is the loss, which
// parameters train, the optimizer and its hyper-parameters, the learning-rate
// schedule, gradient accumulation and clipping.  Filled from a DeepSpeed
// config and/or command-line flags by the CLI, or from pass-pipeline options
// by sharc-opt, and consumed by the autodiff and optimizer passes.  Defaults
// are DeepSpeed's (docs/semantics.md).  Plain C++: the config reader
// (frontends/deepspeed) fills it without depending on the passes.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_TRAININGOPTIONS_H
#define SHARC_IR_TRAININGOPTIONS_H

#include <cstdint>
#include <string>

namespace sharc {

enum class OptimizerKind { sgd, adam, adamw };

enum class SchedulerKind {
  none,
  warmupLR,
  warmupDecayLR,
  warmupCosineLR,
  oneCycle,
  lrRangeTest
};

/// Parameters of every supported schedule (DeepSpeed's names in comments);
/// only those of `kind` are used.
struct SchedulerOptions {
  SchedulerKind kind = SchedulerKind::none;
  // WarmupLR, WarmupDecayLR.
  double warmupMinLr = 0.0;      // warmup_min_lr
  double warmupMaxLr = 1e-3;     // warmup_max_lr
  int64_t warmupNumSteps = 1000; // warmup_num_steps
  bool warmupLinear = false;     // warmup_type: "linear" (true) or "log"
  int64_t totalNumSteps = 0;     // total_num_steps (WarmupDecayLR, Cosine)
  // WarmupCosineLR.
  double warmupMinRatio = 0.0; // warmup_min_ratio
  double cosMinRatio = 1e-4;   // cos_min_ratio
  // OneCycle.
  double cycleMinLr = 0.0;            // cycle_min_lr
  double cycleMaxLr = 0.0;            // cycle_max_lr
  double decayLrRate = 0.0;           // decay_lr_rate
  int64_t cycleFirstStepSize = 2000;  // cycle_first_step_size
  int64_t cycleSecondStepSize = -1;   // cycle_second_step_size (-1: = first)
  int64_t cycleFirstStairCount = 0;   // cycle_first_stair_count
  int64_t cycleSecondStairCount = -1; // cycle_second_stair_count (-1: = first)
  int64_t decayStepSize = 0;          // decay_step_size
  // OneCycle momentum: with Adam/AdamW, beta1 cycles inversely to the
  // learning rate and beta2 becomes 0.99 (DeepSpeed's default behaviour).
  bool cycleMomentum = true; // cycle_momentum
  double cycleMinMom = 0.8;  // cycle_min_mom
  double cycleMaxMom = 0.9;  // cycle_max_mom
  double decayMomRate = 0.0; // decay_mom_rate
  // LRRangeTest.
  double lrRangeTestMinLr = 1e-3;     // lr_range_test_min_lr
  double lrRangeTestStepRate = 1.0;   // lr_range_test_step_rate
  int64_t lrRangeTestStepSize = 2000; // lr_range_test_step_size
  bool lrRangeTestStaircase = false;  // lr_range_test_staircase
};

/// The dynamic loss scaler's settings: DeepSpeed's `fp16` keys, with
/// DeepSpeed's documented defaults.
struct LossScaleOptions {
  /// The largest initial_scale_power: 2^64 is already far beyond what any
  /// fp16 gradient survives (fp16's largest finite value is 65504).
  static constexpr int64_t kMaxInitialScalePower = 64;

  /// 2^initial_scale_power.
  double initialScale = 65536.0;
  /// loss_scale_window: clean steps between doublings.
  int64_t window = 1000;
  /// min_loss_scale.
  double minScale = 1.0;
  /// hysteresis (DeepSpeed's delayed_shift): overflows tolerated before the
  /// scale halves.
  int64_t hysteresis = 2;
  /// consecutive_hysteresis: a clean step refills the hysteresis.
  bool consecutiveHysteresis = false;
};

/// The element type a training step computes in.
enum class Precision { fp32, fp16, bf16 };

/// Where ZeRO offloads state (DeepSpeed's OffloadDeviceEnum).
enum class OffloadDevice { none, cpu, nvme };

/// Mixed precision: DeepSpeed's `fp16` and `bf16` blocks (docs/config.md).
struct PrecisionOptions {
  Precision precision = Precision::fp32;
  /// fp16.loss_scale: 0 for dynamic scaling, else a static scale.
  double staticLossScale = 0.0;
  /// The dynamic scaler (fp16 with loss_scale 0).
  LossScaleOptions lossScale;
  /// bf16.check_grad_overflow: a step whose gradients are not finite is
  /// skipped (DeepSpeed 0.19.8's default).
  bool bf16CheckOverflow = true;
};

struct TrainingOptions {
  /// The forward function (the importer's is "main").
  std::string function = "main";
  /// Name (sharc.output) of the loss; empty: the only scalar float output.
  std::string loss;
  /// Parameters whose sanitized or ONNX name matches this regex (searched,
  /// not anchored) are frozen; empty: all parameters train.
  std::string freeze;

  OptimizerKind optimizer = OptimizerKind::adamw;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  /// SGD only.
  double momentum = 0.0;
  bool nesterov = false;
  /// Adam/AdamW: bias correction of the moments (DeepSpeed default true).
  bool biasCorrection = true;
  /// Adam: decoupled weight decay (DeepSpeed's adam_w_mode, default true;
  /// always true for AdamW).
  bool adamWMode = true;

  /// The largest number of micro-batches per step and of ranks sharc
  /// accepts: far beyond any real job, and small enough that products of
  /// them with batch sizes and their reciprocals stay exact.
  static constexpr int64_t kMaxGradAccum = int64_t(1) << 31;
  static constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
  /// A bucket holds at most as many elements as a tensor may
  /// (sharc::kMaxElements, ir/SharcOps.h).
  static constexpr int64_t kMaxBucketSize = int64_t(1) << 40;

  /// Micro-batches per optimizer step (gradient_accumulation_steps).
  int64_t gradAccum = 1;
  /// Global-norm gradient clipping threshold; 0 disables clipping.
  double clip = 0.0;

  /// Data-parallel ranks: each runs its own @train_step on its own rows and
  /// the gradients are all-reduced (sum) before clipping.
  int64_t worldSize = 1;
  /// Elements per gradient all-reduce bucket (DeepSpeed's
  /// reduce_bucket_size).
  int64_t reduceBucketSize = 500000000;
  /// Elements per all-gather bucket of the updated ZeRO slices
  /// (zero_optimization.allgather_bucket_size).
  int64_t allgatherBucketSize = 500000000;
  /// ZeRO stage (zero_optimization.stage): 0, 1 for sharc-zero's
  /// partitioned optimizer state, 2 for partitioned gradients too, 3 for
  /// partitioned parameters too (docs/zero.md).
  int64_t zeroStage = 0;
  /// ZeRO-Offload: where the optimizer state and fp32 master weights live
  /// (zero_optimization.offload_optimizer.device; docs/offload.md).
  OffloadDevice offloadOptimizer = OffloadDevice::none;
  /// ZeRO-3 parameter offload (zero_optimization.offload_param.device).
  OffloadDevice offloadParam = OffloadDevice::none;
  /// Activation checkpointing (sharc-rematerialize; docs/recompute.md):
  /// "none", "layers" (each repeated layer's forward values recomputed in
  /// backward from the layer's input) or "auto" (the fewest recomputed
  /// FLOPs that bring the gradient function's activation memory within
  /// `activationMemory` bytes).
  std::string recompute = "none";
  int64_t activationMemory = 0;
  /// activation_checkpointing.cpu_checkpointing: the checkpoints kept in
  /// host memory (where the CPU target keeps everything; the CUDA target
  /// refuses it, not built yet).
  bool cpuCheckpointing = false;
  /// Whether the checkpoints move to host memory: cpuCheckpointing on the
  /// CUDA target (or the CPU target with --host-update); set by sharc
  /// compile.
  bool checkpointsOnHost = false;
  /// NVMe offload of the optimizer state: the folder under which each rank
  /// keeps its offloaded buffers in a folder of its own
  /// (zero_optimization.offload_optimizer.nvme_path; the training binary's
  /// --nvme-path overrides it at run time).
  std::string nvmePath;
  /// NVMe offload: read the next sub-group's state while the current one is
  /// updated (offload_optimizer.pipeline_read), and write each sub-group back
  /// while the next is updated (offload_optimizer.pipeline_write).  Unlike
  /// DeepSpeed, on by default, as overlapComm: the results are the same bits
  /// either way.
  bool pipelineRead = true;
  bool pipelineWrite = true;
  /// ZeRO sub-groups: the optimizer update of offloaded state runs over
  /// groups of consecutive parameters, each closed once it holds at least
  /// this many elements of this rank's slices (DeepSpeed's
  /// _create_fp16_sub_groups; zero_optimization.sub_group_size, default 1e9),
  /// so that only a sub-group or two of state is in memory at once.
  int64_t subGroupSize = 1000000000;
  /// DeepSpeed's `aio` block: how NVMe offload reads and writes.
  struct AioOptions {
    /// Bytes per I/O request (aio.block_size, default 1 MiB; a multiple of
    /// 4096).
    int64_t blockSize = 1048576;
    /// Requests in flight (aio.queue_depth, default 8).
    int64_t queueDepth = 8;
    /// Submit each request on its own (aio.single_submit, default false).
    bool singleSubmit = false;
    /// Submit new requests as earlier ones complete (aio.overlap_events,
    /// default true); false: submit a whole queue, then wait for all of it.
    bool overlapEvents = true;
  } aio;
  /// One of DeepSpeed's monitor blocks, `csv_monitor` (per-step CSV files)
  /// or `tensorboard` (an event file), in OUTPUT_PATH/JOB_NAME, written by
  /// rank 0 of the training binary and by sharc eval --train
  /// (runtime/Metrics.h, runtime/TensorBoard.h).
  struct MonitorOptions {
    bool enabled = false;
    /// output_path ("": the working directory).
    std::string outputPath;
    /// job_name.
    std::string jobName = "DeepSpeedJobName";
    /// The folder of the files: OUTPUT_PATH/JOB_NAME, or JOB_NAME.
    std::string folder() const {
      return outputPath.empty()         ? jobName
             : outputPath.back() == '/' ? outputPath + jobName
                                        : outputPath + "/" + jobName;
    }
  };
  MonitorOptions csvMonitor, tensorboard;
  /// The highest ZeRO stage implemented.
  static constexpr int64_t kMaxZeroStage = 3;
  /// ZeRO stage 3: parameters of at most this many elements are not
  /// partitioned; every rank keeps them whole
  /// (zero_optimization.stage3_param_persistence_threshold, DeepSpeed's
  /// default 1e5).
  int64_t paramPersistenceThreshold = 100000;
  /// ZeRO stage 3: a gathered parameter stays for its next use if the uses
  /// in between read at most this many elements of other gathered
  /// parameters; otherwise it is released and gathered again
  /// (zero_optimization.stage3_max_reuse_distance, DeepSpeed's default 1e9).
  int64_t maxReuseDistance = 1000000000;
  /// ZeRO stage 3: elements of parameter gathers started after each gather's
  /// wait (zero_optimization.stage3_prefetch_bucket_size, DeepSpeed's
  /// default 5e7; 0: no prefetch).
  int64_t prefetchBucketSize = 50000000;
  /// ZeRO stage 3: prefetch only while fewer elements of gathered parameters
  /// are live (zero_optimization.stage3_max_live_parameters, DeepSpeed's
  /// default 1e9).
  int64_t maxLiveParameters = 1000000000;
  /// Start each gradient all-reduce as soon as its bucket is complete and
  /// wait only where the sum is read, overlapping backward
  /// (zero_optimization.overlap_comm; sharc-schedule-collectives in the
  /// compile pipeline).  Unlike DeepSpeed, on by default: the results are
  /// the same bits either way.
  bool overlapComm = true;

  SchedulerOptions scheduler;
  PrecisionOptions mixedPrecision;
};

} // namespace sharc

#endif // SHARC_IR_TRAININGOPTIONS_H
