//===- Options.cpp - the training flags of the sharc CLI ------------------===//
//
// Fills TrainingOptions from a DeepSpeed config and the command line (flags
// override the config), checks that every flag given applies to the chosen
// optimizer and schedule, and settles the batch sizes.  docs/cli.md
// documents the flags.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Options.h"

#include "frontends/deepspeed/Config.h"
#include "ir/SharcOps.h"
#include "passes/Passes.h"
#include "tools/sharc/Diagnostics.h"
#include "tools/sharc/Model.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Regex.h"

#include <charconv>
#include <cmath>
#include <memory>
#include <type_traits>

using namespace mlir;
using namespace sharc;
namespace cl = llvm::cl;

//===----------------------------------------------------------------------===//
// Flags
//===----------------------------------------------------------------------===//

namespace {

/// The training flags of `sharc eval` and `sharc compile`.  Scheduler flags
/// carry the names of the sharc-optimizer pass options (DeepSpeed's keys in
/// kebab-case).  --train, --steps and the dump flags are the evaluator's only.
struct TrainFlags {
  TrainFlags(cl::SubCommand &sub, cl::SubCommand &compile,
             cl::OptionCategory &category)
      : sub(sub), compile(compile), category(category) {}

  cl::SubCommand &sub;
  cl::SubCommand &compile;
  cl::OptionCategory &category;

  template <typename T> using Flag = cl::opt<T>;

  Flag<bool> train{"train",
                   cl::desc("Build the training step and run --steps steps "
                            "of it on the evaluator"),
                   cl::sub(sub), cl::cat(category)};
  Flag<int64_t> steps{"steps",
                      cl::desc("Training steps to run (default 1)"),
                      cl::value_desc("N"),
                      cl::init(1),
                      cl::sub(sub),
                      cl::cat(category)};
  Flag<std::string> config{"config",
                           cl::desc("DeepSpeed config (ds_config.json); "
                                    "flags override it"),
                           cl::value_desc("file"),
                           cl::sub(sub),
                           cl::sub(compile),
                           cl::cat(category)};
  Flag<std::string> dumpState{
      "dump-state",
      cl::desc("After the last step, write every parameter and optimizer "
               "state tensor as DIR/<name>.npy"),
      cl::value_desc("DIR"), cl::sub(sub), cl::cat(category)};
  Flag<std::string> dumpGrads{
      "dump-grads",
      cl::desc("Write the gradient of the last step's loss (summed over its "
               "micro-batches, before clipping) as DIR/<param>.npy"),
      cl::value_desc("DIR"), cl::sub(sub), cl::cat(category)};
  Flag<std::string> saveDir{
      "save-dir",
      cl::desc("Write checkpoints as DIR/step-N (every --save-every steps "
               "and after the last), each complete or not at all"),
      cl::value_desc("DIR"), cl::sub(sub), cl::cat(category)};
  Flag<int64_t> saveEvery{
      "save-every",
      cl::desc("With --save-dir: a checkpoint every K steps (counted from "
               "the start of training)"),
      cl::value_desc("K"),
      cl::init(0),
      cl::sub(sub),
      cl::cat(category)};
  Flag<int64_t> keepLast{
      "keep-last",
      cl::desc("With --save-dir: keep the newest M checkpoints (default: "
               "all)"),
      cl::value_desc("M"),
      cl::init(0),
      cl::sub(sub),
      cl::cat(category)};
  Flag<std::string> resume{
      "resume",
      cl::desc("Continue from DIR's newest checkpoint (or DIR itself), "
               "which must be of this model and training configuration"),
      cl::value_desc("DIR"), cl::sub(sub), cl::cat(category)};
  Flag<std::string> metrics{
      "metrics",
      cl::desc("Append a JSON line per step (loss, lr, scale, ms, "
               "throughput) to FILE"),
      cl::value_desc("FILE.jsonl"), cl::sub(sub), cl::cat(category)};
  Flag<std::string> loss{"loss",
                         cl::desc("Output to minimise (default: the only "
                                  "scalar float output)"),
                         cl::value_desc("NAME"),
                         cl::sub(sub),
                         cl::sub(compile),
                         cl::cat(category)};
  Flag<std::string> freeze{"freeze",
                           cl::desc("Do not train parameters whose name or "
                                    "ONNX name matches"),
                           cl::value_desc("REGEX"),
                           cl::sub(sub),
                           cl::sub(compile),
                           cl::cat(category)};

  /// The value name of a flag of type T in the help.
  template <typename T> static cl::value_desc valueName() {
    return cl::value_desc(std::is_same_v<T, int64_t> ? "N" : "");
  }

  // The optimizer and schedule flags: the options of sharc-optimizer, with
  // --betas for beta1 and beta2.
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  Flag<TYPE> FIELD{NAME,                                                       \
                   cl::desc(DESC " (" KEY ")"),                                \
                   valueName<TYPE>(),                                          \
                   cl::sub(sub),                                               \
                   cl::sub(compile),                                           \
                   cl::cat(category)};
#define SHARC_BETA_OPTION(FIELD, NAME, DESC, KEY)
#define SHARC_CHOICE_OPTION(FIELD, NAME, DESC, KEY)                            \
  Flag<std::string> FIELD{NAME,                                                \
                          cl::desc(DESC " (" KEY ")"),                         \
                          cl::value_desc("NAME"),                              \
                          cl::sub(sub),                                        \
                          cl::sub(compile),                                    \
                          cl::cat(category)};
#include "ir/TrainingOptions.def"
  /// A flag of both commands (eval --train and compile).
  template <typename T>
  Flag<T> commonFlag(const char *name, const char *desc,
                     const char *value = nullptr) {
    return Flag<T>(llvm::StringRef(name), cl::desc(desc),
                   value ? cl::value_desc(value) : valueName<T>(), cl::sub(sub),
                   cl::sub(compile), cl::cat(category));
  }
  Flag<std::string> precision = commonFlag<std::string>(
      "precision",
      "Compute precision: fp32, fp16 or bf16 (16 bits: compute in 16 bits "
      "with fp32 master weights; fp16.enabled, bf16.enabled)",
      "fp32|fp16|bf16");
  // ZeRO-Offload (docs/offload.md).
  Flag<std::string> offloadOptimizer = commonFlag<std::string>(
      "offload-optimizer",
      "Where the fp32 master weights and optimizer state live: none, cpu or "
      "nvme (zero_optimization.offload_optimizer.device; nvme needs "
      "--nvme-path)",
      "none|cpu|nvme");
  Flag<std::string> offloadParam = commonFlag<std::string>(
      "offload-param",
      "ZeRO stage 3: where the parameters live: none or cpu "
      "(zero_optimization.offload_param.device; nvme needs --nvme-path)",
      "none|cpu|nvme");
  Flag<std::string> nvmePath = commonFlag<std::string>(
      "nvme-path",
      "With --offload-optimizer or --offload-param nvme: the folder under "
      "which each rank keeps what it offloads in a folder of its own "
      "(zero_optimization.offload_optimizer.nvme_path, "
      "offload_param.nvme_path)",
      "DIR");
  Flag<std::string> recompute = commonFlag<std::string>(
      "recompute",
      "Activation checkpointing: none, layers (backward recomputes each "
      "repeated layer's forward values from the layer's input instead of "
      "keeping them) or auto (the fewest recomputed FLOPs within "
      "--activation-memory; sharc-rematerialize)",
      "none|layers|auto");
  Flag<int64_t> activationMemory = commonFlag<int64_t>(
      "activation-memory",
      "With --recompute auto: the most bytes the training step's forward "
      "and backward values may take at once on a rank (docs/recompute.md)",
      "BYTES");
  Flag<int64_t> subGroupSize = commonFlag<int64_t>(
      "sub-group-size",
      "NVMe offload: the optimizer update runs over sub-groups of "
      "consecutive parameters of at least N elements of this rank's slices "
      "(zero_optimization.sub_group_size; default 1000000000)");
  Flag<bool> pipelineRead = commonFlag<bool>(
      "pipeline-read",
      "NVMe offload: read the next sub-group's state while the current one "
      "is updated (zero_optimization.offload_optimizer.pipeline_read; "
      "default on)");
  Flag<bool> pipelineWrite = commonFlag<bool>(
      "pipeline-write",
      "NVMe offload: write each sub-group's state back while the next one "
      "is updated (zero_optimization.offload_optimizer.pipeline_write; "
      "default on)");
  // The loss scaler (fp16 only) and bf16's overflow check.
  Flag<double> lossScale = commonFlag<double>(
      "loss-scale", "fp16: a static loss scale; 0 scales dynamically "
                    "(fp16.loss_scale)");
  Flag<int64_t> initialScalePower = commonFlag<int64_t>(
      "initial-scale-power", "fp16: the first dynamic scale is 2^N "
                             "(fp16.initial_scale_power)");
  Flag<int64_t> lossScaleWindow = commonFlag<int64_t>(
      "loss-scale-window", "fp16: clean steps before the scale doubles "
                           "(fp16.loss_scale_window)");
  Flag<int64_t> hysteresis = commonFlag<int64_t>(
      "hysteresis", "fp16: overflows tolerated before the scale halves "
                    "(fp16.hysteresis)");
  Flag<bool> consecutiveHysteresis = commonFlag<bool>(
      "consecutive-hysteresis", "fp16: a clean step refills the hysteresis "
                                "(fp16.consecutive_hysteresis)");
  Flag<double> minLossScale =
      commonFlag<double>("min-loss-scale", "fp16: the smallest dynamic scale "
                                           "(fp16.min_loss_scale)");
  Flag<bool> checkGradOverflow = commonFlag<bool>(
      "check-grad-overflow", "bf16: skip a step whose gradients are not "
                             "finite (bf16.check_grad_overflow; default on)");
  Flag<std::string> betas{"betas",
                          cl::desc("Adam: moment decays "
                                   "(optimizer.params.betas)"),
                          cl::value_desc("B1,B2"),
                          cl::sub(sub),
                          cl::sub(compile),
                          cl::cat(category)};

  /// Every flag but --train, in declaration order (--betas where beta1 and
  /// beta2 are).
  std::vector<cl::Option *> all() {
    std::vector<cl::Option *> result = {&steps,
                                        &config,
                                        &dumpState,
                                        &dumpGrads,
                                        &saveDir,
                                        &saveEvery,
                                        &keepLast,
                                        &resume,
                                        &metrics,
                                        &loss,
                                        &freeze,
                                        &precision,
                                        &offloadOptimizer,
                                        &offloadParam,
                                        &nvmePath,
                                        &subGroupSize,
                                        &pipelineRead,
                                        &pipelineWrite,
                                        &recompute,
                                        &activationMemory};
    result.insert(result.end(),
                  {&lossScale, &initialScalePower, &lossScaleWindow,
                   &hysteresis, &consecutiveHysteresis, &minLossScale,
                   &checkGradOverflow});
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  result.push_back(&FIELD);
#define SHARC_BETA_OPTION(FIELD, NAME, DESC, KEY)                              \
  if (!llvm::is_contained(result, &betas))                                     \
    result.push_back(&betas);
#include "ir/TrainingOptions.def"
    return result;
  }
};

/// The flags, made by registerTrainingFlags.
std::unique_ptr<TrainFlags> flags;

/// True when `flag` was given on the command line.
bool given(const cl::Option &flag) { return flag.getNumOccurrences() > 0; }

/// Sets `field` to the value of `flag` when it was given.
template <typename T> void override(const cl::opt<T> &flag, T &field) {
  if (given(flag))
    field = flag;
}

/// The schedule named `name`: DeepSpeed's type names and the pass-option
/// spellings (warmup-lr, ...), in any case.
std::optional<SchedulerKind> parseScheduler(StringRef name) {
  std::string key;
  for (char c : name.lower())
    if (c != '-' && c != '_')
      key += c;
  return llvm::StringSwitch<std::optional<SchedulerKind>>(key)
      .Case("none", SchedulerKind::none)
      .Case("warmuplr", SchedulerKind::warmupLR)
      .Case("warmupdecaylr", SchedulerKind::warmupDecayLR)
      .Case("warmupcosinelr", SchedulerKind::warmupCosineLR)
      .Case("onecycle", SchedulerKind::oneCycle)
      .Case("lrrangetest", SchedulerKind::lrRangeTest)
      .Default(std::nullopt);
}

/// Applies the command-line flags over `options` (defaults or the config's)
/// and checks that each flag given applies to the chosen optimizer and
/// schedule.
LogicalResult applyFlags(TrainingOptions &options, bool budgetSearch) {
  TrainFlags &f = *flags;
  override(f.loss, options.loss);
  override(f.freeze, options.freeze);
  std::string regexError;
  if (given(f.freeze) && !llvm::Regex(options.freeze).isValid(regexError)) {
    fail("--freeze '" + options.freeze +
         "' is not a valid regex: " + regexError);
    return failure();
  }
  if (given(f.optimizer)) {
    std::optional<OptimizerKind> kind =
        parseOptimizerKind(StringRef(f.optimizer).lower());
    if (!kind) {
      fail("--optimizer '" + f.optimizer + "': expected sgd, adam or adamw");
      return failure();
    }
    options.optimizer = *kind;
  }
  // Every flag of a number or a switch (options.gradAccum is settled with the
  // batch sizes afterwards); the choices and --betas follow.
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  override(f.FIELD, options.FIELD);
#define SHARC_SCHEDULE_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  override(f.FIELD, options.scheduler.FIELD);
#define SHARC_BETA_OPTION(FIELD, NAME, DESC, KEY)
#define SHARC_CHOICE_OPTION(FIELD, NAME, DESC, KEY)
#include "ir/TrainingOptions.def"
  if (given(f.betas)) {
    auto [first, second] = StringRef(f.betas).split(',');
    if (first.trim().empty() || second.trim().empty() ||
        !llvm::to_float(first.trim(), options.beta1) ||
        !llvm::to_float(second.trim(), options.beta2)) {
      fail("--betas expects two numbers B1,B2, got '" + f.betas + "'");
      return failure();
    }
  }

  PrecisionOptions &precision = options.mixedPrecision;
  if (given(f.precision)) {
    std::optional<Precision> chosen =
        llvm::StringSwitch<std::optional<Precision>>(f.precision)
            .Case("fp32", Precision::fp32)
            .Case("fp16", Precision::fp16)
            .Case("bf16", Precision::bf16)
            .Default(std::nullopt);
    if (!chosen) {
      fail("--precision '" + f.precision + "': expected fp32, fp16 or bf16");
      return failure();
    }
    precision.precision = *chosen;
  }
  for (auto [flag, field] :
       {std::pair(&f.offloadOptimizer, &options.offloadOptimizer),
        std::pair(&f.offloadParam, &options.offloadParam)}) {
    if (!given(*flag))
      continue;
    std::optional<OffloadDevice> device =
        llvm::StringSwitch<std::optional<OffloadDevice>>(*flag)
            .Case("none", OffloadDevice::none)
            .Case("cpu", OffloadDevice::cpu)
            .Case("nvme", OffloadDevice::nvme)
            .Default(std::nullopt);
    if (!device) {
      fail("--" + flag->ArgStr + " '" + *flag +
           "': expected none, cpu or nvme");
      return failure();
    }
    *field = *device;
  }
  // NVMe offload of the optimizer state or the parameters: the folder,
  // sub-groups and pipelining (docs/offload.md).
  bool nvme = options.offloadOptimizer == OffloadDevice::nvme ||
              options.offloadParam == OffloadDevice::nvme;
  if (given(f.nvmePath)) {
    if (f.nvmePath.empty()) {
      fail("--nvme-path expects a folder, got an empty string");
      return failure();
    }
    if (!nvme && !budgetSearch) {
      fail("--nvme-path needs --offload-optimizer nvme or --offload-param "
           "nvme (or device \"nvme\" in zero_optimization.offload_optimizer "
           "or offload_param in the config), or --memory-budget: it is "
           "where NVMe offload keeps what it offloads");
      return failure();
    }
    options.nvmePath = f.nvmePath;
  }
  if (nvme && options.nvmePath.empty()) {
    fail(std::string(options.offloadOptimizer == OffloadDevice::nvme
                         ? "--offload-optimizer"
                         : "--offload-param") +
         " nvme needs --nvme-path DIR (or the nvme_path of "
         "zero_optimization's offload block in the config): the folder under "
         "which each rank keeps what it offloads");
    return failure();
  }
  if (given(f.recompute)) {
    if (f.recompute != "none" && f.recompute != "layers" &&
        f.recompute != "auto") {
      fail("--recompute '" + f.recompute + "': expected none, layers or auto");
      return failure();
    }
    options.recompute = f.recompute;
  }
  if (given(f.activationMemory)) {
    if (f.activationMemory < 1) {
      fail("--activation-memory must be a positive number of bytes, got " +
           Twine(f.activationMemory));
      return failure();
    }
    options.activationMemory = f.activationMemory;
  }
  if ((options.recompute == "auto") != (options.activationMemory > 0)) {
    fail(options.recompute == "auto"
             ? "--recompute auto needs --activation-memory BYTES: the most "
               "bytes the step's forward and backward values may take at "
               "once on a rank"
             : "--activation-memory applies to --recompute auto only");
    return failure();
  }
  if (given(f.subGroupSize)) {
    if (f.subGroupSize < 1 ||
        f.subGroupSize > TrainingOptions::kMaxBucketSize) {
      fail("--sub-group-size must be in [1, " +
           Twine(TrainingOptions::kMaxBucketSize) + "], got " +
           Twine(int64_t(f.subGroupSize)));
      return failure();
    }
    options.subGroupSize = f.subGroupSize;
  }
  override(f.pipelineRead, options.pipelineRead);
  override(f.pipelineWrite, options.pipelineWrite);
  LossScaleOptions &scaler = precision.lossScale;
  override(f.lossScale, precision.staticLossScale);
  override(f.lossScaleWindow, scaler.window);
  override(f.hysteresis, scaler.hysteresis);
  override(f.consecutiveHysteresis, scaler.consecutiveHysteresis);
  override(f.minLossScale, scaler.minScale);
  override(f.checkGradOverflow, precision.bf16CheckOverflow);
  if (given(f.initialScalePower)) {
    if (f.initialScalePower < 0 ||
        f.initialScalePower > LossScaleOptions::kMaxInitialScalePower) {
      fail("--initial-scale-power must be in [0, " +
           Twine(LossScaleOptions::kMaxInitialScalePower) + "], got " +
           Twine(int64_t(f.initialScalePower)));
      return failure();
    }
    scaler.initialScale = std::ldexp(1.0, int(f.initialScalePower));
  }
  // The scaler's flags apply to fp16 (its dynamic ones to dynamic scaling),
  // the overflow check to bf16.
  bool fp16 = precision.precision == Precision::fp16;
  bool dynamic = fp16 && precision.staticLossScale == 0;
  std::pair<cl::Option *, bool> precisionFlags[] = {
      {&f.lossScale, fp16},
      {&f.initialScalePower, dynamic},
      {&f.lossScaleWindow, dynamic},
      {&f.hysteresis, dynamic},
      {&f.consecutiveHysteresis, dynamic},
      {&f.minLossScale, dynamic},
      {&f.checkGradOverflow, precision.precision == Precision::bf16}};
  StringRef precisionName = precision.precision == Precision::fp16   ? "fp16"
                            : precision.precision == Precision::bf16 ? "bf16"
                                                                     : "fp32";
  for (auto [flag, applies] : precisionFlags) {
    if (!given(*flag) || applies)
      continue;
    if (fp16 && flag != &f.checkGradOverflow)
      fail("--" + flag->ArgStr +
           " does not apply to a static loss scale (fp16.loss_scale > 0)");
    else
      fail("--" + flag->ArgStr + " does not apply to --precision " +
           precisionName +
           (flag == &f.checkGradOverflow ? "; it is bf16's"
                                         : "; it sets fp16's loss scaler"));
    return failure();
  }

  SchedulerOptions &schedule = options.scheduler;
  if (given(f.scheduler)) {
    std::optional<SchedulerKind> kind = parseScheduler(f.scheduler);
    if (!kind) {
      fail("--scheduler '" + f.scheduler +
           "': expected WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
           "LRRangeTest or none");
      return failure();
    }
    schedule.kind = *kind;
  }
  if (given(f.warmupType)) {
    if (f.warmupType != "log" && f.warmupType != "linear") {
      fail("--warmup-type '" + f.warmupType + "': expected log or linear");
      return failure();
    }
    schedule.warmupLinear = f.warmupType == "linear";
  }

  // A flag that the chosen optimizer or schedule would ignore is a mistake.
  bool sgd = options.optimizer == OptimizerKind::sgd;
  std::pair<cl::Option *, bool> optimizerFlags[] = {
      {&f.momentum, sgd}, {&f.nesterov, sgd},        {&f.betas, !sgd},
      {&f.eps, !sgd},     {&f.biasCorrection, !sgd}, {&f.adamWMode, !sgd}};
  for (auto [flag, applies] : optimizerFlags)
    if (given(*flag) && !applies) {
      fail("--" + flag->ArgStr + " does not apply to the " +
           stringifyOptimizerKind(options.optimizer) + " optimizer");
      return failure();
    }
  using K = SchedulerKind;
  std::pair<cl::Option *, std::vector<K>> scheduleFlags[] = {
      {&f.warmupMinLr, {K::warmupLR, K::warmupDecayLR}},
      {&f.warmupMaxLr, {K::warmupLR, K::warmupDecayLR}},
      {&f.warmupNumSteps, {K::warmupLR, K::warmupDecayLR, K::warmupCosineLR}},
      {&f.warmupType, {K::warmupLR, K::warmupDecayLR, K::warmupCosineLR}},
      {&f.totalNumSteps, {K::warmupDecayLR, K::warmupCosineLR}},
      {&f.warmupMinRatio, {K::warmupCosineLR}},
      {&f.cosMinRatio, {K::warmupCosineLR}},
      {&f.cycleMinLr, {K::oneCycle}},
      {&f.cycleMaxLr, {K::oneCycle}},
      {&f.decayLrRate, {K::oneCycle}},
      {&f.cycleFirstStepSize, {K::oneCycle}},
      {&f.cycleSecondStepSize, {K::oneCycle}},
      {&f.cycleFirstStairCount, {K::oneCycle}},
      {&f.cycleSecondStairCount, {K::oneCycle}},
      {&f.decayStepSize, {K::oneCycle}},
      {&f.cycleMomentum, {K::oneCycle}},
      {&f.cycleMinMom, {K::oneCycle}},
      {&f.cycleMaxMom, {K::oneCycle}},
      {&f.decayMomRate, {K::oneCycle}},
      {&f.lrRangeTestMinLr, {K::lrRangeTest}},
      {&f.lrRangeTestStepRate, {K::lrRangeTest}},
      {&f.lrRangeTestStepSize, {K::lrRangeTest}},
      {&f.lrRangeTestStaircase, {K::lrRangeTest}},
  };
  for (auto &[flag, kinds] : scheduleFlags)
    if (given(*flag) && !llvm::is_contained(kinds, schedule.kind)) {
      fail("--" + flag->ArgStr + " does not apply to the schedule '" +
           stringifySchedulerKind(schedule.kind) +
           "'; choose one with --scheduler or scheduler.type");
      return failure();
    }
  return success();
}

//===----------------------------------------------------------------------===//
// Batch sizes
//===----------------------------------------------------------------------===//

/// The micro-batch size of `forward`: dim 0 of its data inputs, which must
/// agree.  `source` describes where it comes from.
} // namespace

FailureOr<int64_t> sharc::microBatchOf(func::FuncOp forward,
                                       std::string &source) {
  std::optional<int64_t> micro;
  for (unsigned i = 0, e = forward.getNumArguments(); i < e; ++i) {
    if (getParamAttr(forward, i) || !getRandomKeyRole(forward, i).empty())
      continue;
    std::string name = argumentName(forward, i);
    auto type = cast<RankedTensorType>(forward.getArgument(i).getType());
    if (type.getRank() == 0) {
      fail("input '" + name +
           "' is a scalar; training splits every data input along dim 0");
      return failure();
    }
    if (!micro) {
      micro = type.getDimSize(0);
      source = "dim 0 of input '" + name + "'";
    } else if (type.getDimSize(0) != *micro) {
      fail("inputs disagree on the micro-batch size: " + source + " is " +
           Twine(*micro) + ", dim 0 of input '" + name + "' is " +
           Twine(type.getDimSize(0)));
      return failure();
    }
  }
  if (!micro) {
    fail("the model has no data inputs to train on");
    return failure();
  }
  return *micro;
}

/// The --config file, read (its error printed).  With --nvme-path, a config
/// that offloads to NVMe needs no nvme_path.
static FailureOr<DeepSpeedConfig> readGivenConfig() {
  TrainingOptions defaults;
  if (given(flags->nvmePath))
    defaults.nvmePath = flags->nvmePath;
  llvm::Expected<DeepSpeedConfig> config =
      readDeepSpeedConfig(flags->config, defaults);
  if (!config) {
    fail(llvm::toString(config.takeError()));
    return failure();
  }
  return std::move(*config);
}

FailureOr<TrainingOptions> sharc::resolveTrainingOptions(func::FuncOp forward,
                                                         bool budgetSearch) {
  TrainingOptions options;
  BatchSizeConfig batch;
  if (given(flags->config)) {
    FailureOr<DeepSpeedConfig> config = readGivenConfig();
    if (failed(config))
      return failure();
    options = config->training;
    batch = config->batch;
    for (const std::string &warning : config->warnings)
      warn(warning);
  }
  options.function = forward.getSymName().str();
  if (failed(applyFlags(options, budgetSearch)))
    return failure();
  // ZeRO-Offload moves what ZeRO partitions: the optimizer state from stage
  // 1 on, the parameters at stage 3 only (as in DeepSpeed).
  std::string configPrefix = given(flags->config) ? flags->config + ": " : "";
  if (options.offloadParam != OffloadDevice::none && options.zeroStage < 3) {
    fail(configPrefix +
         "zero_optimization.offload_param (--offload-param) needs ZeRO stage "
         "3 (DeepSpeed "
         "offloads parameters at stage 3 only); this run is at stage " +
         std::to_string(options.zeroStage));
    return failure();
  }
  if (options.offloadOptimizer != OffloadDevice::none &&
      options.zeroStage < 1) {
    fail(configPrefix +
         "zero_optimization.offload_optimizer (--offload-optimizer) needs ZeRO "
         "stage 1, 2 or 3 "
         "(ZeRO-Offload moves the partitioned optimizer state); this run is "
         "at stage 0");
    return failure();
  }
  if (given(flags->gradAccum))
    batch.gradAccumSteps = flags->gradAccum;
  if (batch.gradAccumSteps && *batch.gradAccumSteps < 1) {
    fail("--grad-accum must be at least 1");
    return failure();
  }

  std::string source;
  FailureOr<int64_t> micro = microBatchOf(forward, source);
  if (failed(micro))
    return failure();
  llvm::Expected<BatchSizes> sizes =
      resolveBatchSizes(batch, options.worldSize, *micro, source);
  if (!sizes) {
    std::string prefix = given(flags->config) ? flags->config + ": " : "";
    fail(prefix + llvm::toString(sizes.takeError()));
    return failure();
  }
  options.gradAccum = sizes->gradAccumSteps;
  auto emitError = [&] {
    InFlightDiagnostic diag =
        mlir::emitError(UnknownLoc::get(forward.getContext()));
    diag.attachNote() << "an option is set by the flag of its name (--betas "
                         "for beta1 and beta2) or by its DeepSpeed config key";
    return diag;
  };
  if (failed(verifyTrainingOptions(options, emitError)))
    return failure();
  return options;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void sharc::registerTrainingFlags(cl::SubCommand &eval, cl::SubCommand &compile,
                                  cl::OptionCategory &category) {
  flags = std::make_unique<TrainFlags>(eval, compile, category);
}

bool sharc::trainingRequested() { return flags->train; }

std::optional<std::string> sharc::givenTrainingFlag() {
  for (cl::Option *flag : flags->all())
    if (given(*flag))
      return flag->ArgStr.str();
  return std::nullopt;
}

bool sharc::trainingFlagGiven(StringRef name) {
  for (cl::Option *flag : flags->all())
    if (flag->ArgStr == name)
      return given(*flag);
  return false;
}

FailureOr<std::optional<int64_t>> sharc::configuredMicroBatch() {
  if (!given(flags->config))
    return std::optional<int64_t>();
  FailureOr<DeepSpeedConfig> config = readGivenConfig();
  if (failed(config))
    return failure();
  BatchSizeConfig batch = config->batch;
  if (given(flags->gradAccum))
    batch.gradAccumSteps = flags->gradAccum;
  if (!batch.microBatchPerGpu && !batch.trainBatchSize)
    return std::optional<int64_t>();
  int64_t worldSize = given(flags->worldSize) ? flags->worldSize.getValue()
                                              : config->training.worldSize;
  llvm::Expected<BatchSizes> sizes = deriveBatchSizes(batch, worldSize);
  if (!sizes) {
    // Reported with the model's micro-batch by resolveTrainingOptions.
    llvm::consumeError(sizes.takeError());
    return std::optional<int64_t>();
  }
  return std::optional<int64_t>(sizes->microBatchPerGpu);
}

std::string sharc::trainingConfigText(const TrainingOptions &options,
                                      int64_t microBatch) {
  std::string text;
  auto line = [&](StringRef name, const auto &value) {
    using T = std::decay_t<decltype(value)>;
    std::string shown;
    if constexpr (std::is_same_v<T, bool>)
      shown = value ? "true" : "false";
    else if constexpr (std::is_same_v<T, double>) {
      // The shortest text that reads back as the same double.
      char buffer[40];
      shown.assign(buffer,
                   std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
    } else if constexpr (std::is_integral_v<T>)
      shown = std::to_string(value);
    else
      shown = value;
    text += name.str() + " " + (shown.empty() ? "-" : shown) + "\n";
  };
  OptimizerOptions optimizer(options);
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  if (StringRef(NAME) != "grad-accum")                                         \
    line(NAME, optimizer.FIELD);
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"
  line("loss", options.loss);
  line("freeze", options.freeze);
  line("train-batch-size", microBatch * options.gradAccum * options.worldSize);
  const PrecisionOptions &precision = options.mixedPrecision;
  line("precision",
       std::string(precision.precision == Precision::fp16   ? "fp16"
                   : precision.precision == Precision::bf16 ? "bf16"
                                                            : "fp32"));
  line("loss-scale", precision.staticLossScale);
  line("initial-scale", precision.lossScale.initialScale);
  line("loss-scale-window", precision.lossScale.window);
  line("min-loss-scale", precision.lossScale.minScale);
  line("hysteresis", precision.lossScale.hysteresis);
  line("consecutive-hysteresis", precision.lossScale.consecutiveHysteresis);
  line("check-grad-overflow", precision.bf16CheckOverflow);
  return text;
}

int64_t sharc::trainingSteps() { return flags->steps; }

std::optional<std::string> sharc::dumpStateDir() {
  if (!given(flags->dumpState))
    return std::nullopt;
  return flags->dumpState.getValue();
}

FailureOr<CheckpointFlags> sharc::checkpointFlags() {
  CheckpointFlags result;
  if (given(flags->saveDir))
    result.saveDir = flags->saveDir.getValue();
  if (given(flags->resume))
    result.resume = flags->resume.getValue();
  result.saveEvery = flags->saveEvery;
  result.keepLast = flags->keepLast;
  for (auto [flag, value] : {std::pair{"--save-every", result.saveEvery},
                             std::pair{"--keep-last", result.keepLast}}) {
    if (value < 0 || (value == 0 && (flag == StringRef("--save-every")
                                         ? given(flags->saveEvery)
                                         : given(flags->keepLast)))) {
      fail(Twine(flag) + " must be a positive integer, got " + Twine(value));
      return failure();
    }
    if (value > 0 && !result.saveDir) {
      fail(Twine(flag) + " needs --save-dir DIR");
      return failure();
    }
  }
  for (const std::optional<std::string> *dir :
       {&result.saveDir, &result.resume})
    if (*dir && (*dir)->empty()) {
      fail(Twine(dir == &result.saveDir ? "--save-dir" : "--resume") +
           ": empty directory name");
      return failure();
    }
  return result;
}

std::optional<std::string> sharc::metricsPath() {
  if (!given(flags->metrics))
    return std::nullopt;
  return flags->metrics.getValue();
}

std::optional<std::string> sharc::dumpGradsDir() {
  if (!given(flags->dumpGrads))
    return std::nullopt;
  return flags->dumpGrads.getValue();
}
