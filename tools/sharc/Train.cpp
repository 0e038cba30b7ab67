//===- Train.cpp - sharc eval --train -------------------------------------===//
//
// Fills TrainingOptions from a DeepSpeed config and the command line (flags
// override the config), settles the batch sizes, runs the train pipeline on
// the model and then runs `@train_step` step after step on the evaluator,
// feeding each step's new parameters and optimizer state back in by their
// `sharc.param` / `sharc.state` attributes.  docs/cli.md documents the
// flags and the output.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Train.h"

#include "frontends/deepspeed/Config.h"
#include "ir/Evaluator.h"
#include "ir/SharcOps.h"
#include "passes/Passes.h"
#include "runtime/AtomicFile.h"
#include "runtime/Npy.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
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
                           cl::value_desc("file"), cl::sub(sub), cl::sub(compile),
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
  Flag<std::string> loss{"loss",
                         cl::desc("Output to minimise (default: the only "
                                  "scalar float output)"),
                         cl::value_desc("NAME"), cl::sub(sub), cl::sub(compile),
                         cl::cat(category)};
  Flag<std::string> freeze{"freeze",
                           cl::desc("Do not train parameters whose name or "
                                    "ONNX name matches"),
                           cl::value_desc("REGEX"), cl::sub(sub), cl::sub(compile),
                           cl::cat(category)};

  /// The value name of a flag of type T in the help.
  template <typename T> static cl::value_desc valueName() {
    return cl::value_desc(std::is_same_v<T, int64_t> ? "N" : "");
  }

  // The optimizer and schedule flags: the options of sharc-optimizer, with
  // --betas for beta1 and beta2.
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  Flag<TYPE> FIELD{NAME,           cl::desc(DESC " (" KEY ")"),                \
                   valueName<TYPE>(), cl::sub(sub),                            \
                   cl::sub(compile), cl::cat(category)};
#define SHARC_BETA_OPTION(FIELD, NAME, DESC, KEY)
#define SHARC_CHOICE_OPTION(FIELD, NAME, DESC, KEY)                            \
  Flag<std::string> FIELD{NAME,                   cl::desc(DESC " (" KEY ")"), \
                          cl::value_desc("NAME"), cl::sub(sub),                \
                          cl::sub(compile),       cl::cat(category)};
#include "ir/TrainingOptions.def"
  Flag<std::string> betas{"betas",
                          cl::desc("Adam: moment decays "
                                   "(optimizer.params.betas)"),
                          cl::value_desc("B1,B2"), cl::sub(sub), cl::sub(compile),
                          cl::cat(category)};

  /// Every flag but --train, in declaration order (--betas where beta1 and
  /// beta2 are).
  std::vector<cl::Option *> all() {
    std::vector<cl::Option *> result = {&steps,     &config, &dumpState,
                                        &dumpGrads, &loss,   &freeze};
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  result.push_back(&FIELD);
#define SHARC_BETA_OPTION(FIELD, NAME, DESC, KEY)                              \
  if (!llvm::is_contained(result, &betas))                                     \
    result.push_back(&betas);
#include "ir/TrainingOptions.def"
    return result;
  }
};

std::unique_ptr<TrainFlags> flags;

bool given(const cl::Option &flag) { return flag.getNumOccurrences() > 0; }

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
LogicalResult applyFlags(TrainingOptions &options) {
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
// Data
//===----------------------------------------------------------------------===//

/// Rows [start, start + count) of `source` along dim 0, wrapping around.
Tensor takeRows(const Tensor &source, int64_t start, int64_t count) {
  SmallVector<int64_t> shape(source.shape());
  int64_t rows = shape[0];
  int64_t rowSize = rows ? source.numElements() / rows : 0;
  shape[0] = count;
  Tensor result(source.dtype(), shape);
  for (int64_t r = 0; r < count; ++r) {
    int64_t from = ((start + r) % rows) * rowSize, to = r * rowSize;
    if (source.isFloat())
      std::copy_n(source.floats().begin() + from, rowSize,
                  result.floats().begin() + to);
    else
      std::copy_n(source.ints().begin() + from, rowSize,
                  result.ints().begin() + to);
  }
  return result;
}

/// Reads data input `name` from `path`: any number (> 0) of rows, each of
/// the shape and dtype of a row of `type`.
FailureOr<Tensor> readData(StringRef name, StringRef path,
                           RankedTensorType type) {
  FailureOr<Tensor> value = readNpyAs(name, path, type);
  if (failed(value))
    return failure();
  ArrayRef<int64_t> shape = value->shape(), expected = type.getShape();
  if (shape.empty() || shape[0] == 0 ||
      shape.drop_front() != expected.drop_front()) {
    std::string row = describeTensor(value->dtype(), expected.drop_front());
    fail("input '" + name + "' (" + path + "): shape " + value->describe() +
         " is not a non-empty stack of rows of " + row);
    return failure();
  }
  return value;
}

/// Writes `value` (bf16 as f32) to DIR/FILE in `files`, the set of files
/// being written.
LogicalResult writeTensor(rt::AtomicFileSet &files, StringRef dir,
                          StringRef file, const Tensor &value) {
  SmallString<256> path(dir);
  llvm::sys::path::append(path, file);
  Tensor stored =
      value.dtype() == DType::bf16 ? value.convertTo(DType::f32) : value;
  std::string error;
  if (!rt::writeNpy(files, path.str().str(), stored.toNpy(), error)) {
    fail(error);
    return failure();
  }
  return success();
}

/// Renames every file of `files` into place (all or none).
LogicalResult commitFiles(rt::AtomicFileSet &files) {
  std::string error;
  if (!files.commit(error)) {
    fail(error);
    return failure();
  }
  return success();
}

/// Creates DIR for `files` (removed again if the set fails).
LogicalResult createDirectory(rt::AtomicFileSet &files, StringRef dir) {
  std::string error;
  if (!files.createDirectories(dir.str(), error)) {
    fail(error);
    return failure();
  }
  return success();
}

std::string formatScalar(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

//===----------------------------------------------------------------------===//
// The training run
//===----------------------------------------------------------------------===//

StateAttr getStateAttr(func::FuncOp func, unsigned index) {
  return func.getArgAttrOfType<StateAttr>(index,
                                          SharcDialect::getStateAttrName());
}

std::optional<StringRef> outputName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(
          index, SharcDialect::getOutputAttrName()))
    return name.getValue();
  return std::nullopt;
}

/// The micro-batch size of `forward`: dim 0 of its data inputs, which must
/// agree.  `source` describes where it comes from.
FailureOr<int64_t> microBatchOf(func::FuncOp forward, std::string &source) {
  std::optional<int64_t> micro;
  for (unsigned i = 0, e = forward.getNumArguments(); i < e; ++i) {
    if (getParamAttr(forward, i))
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

} // namespace

FailureOr<TrainingOptions> sharc::resolveTrainingOptions(func::FuncOp forward,
                                                         bool compiled) {
  TrainingOptions options;
  BatchSizeConfig batch;
  if (given(flags->config)) {
    llvm::Expected<DeepSpeedConfig> config = readDeepSpeedConfig(flags->config);
    if (!config) {
      fail(llvm::toString(config.takeError()));
      return failure();
    }
    options = config->training;
    batch = config->batch;
  }
  options.function = forward.getSymName().str();
  if (failed(applyFlags(options)))
    return failure();
  if (options.worldSize > 1 && !compiled) {
    fail("world-size > 1 needs a compiled program (sharc compile), the "
         "evaluator CLI runs one rank");
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

namespace {

/// Evaluates `@<function>_grad` on every micro-batch of the step whose
/// arguments are `stepArgs` and writes the summed gradients to DIR.
LogicalResult dumpGradients(ModuleOp module, const TrainingOptions &options,
                            func::FuncOp step, ArrayRef<Tensor> stepArgs,
                            StringRef dir) {
  std::string gradName = options.function + "_grad";
  auto grad = module.lookupSymbol<func::FuncOp>(gradName);
  if (!grad) {
    fail("--dump-grads: the train pipeline left no @" + gradName);
    return failure();
  }
  // Current values by parameter name and data by input name.
  llvm::StringMap<const Tensor *> values;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (!getStateAttr(step, i))
      values[argumentName(step, i)] = &stepArgs[i];

  unsigned numArgs = grad.getNumArguments();
  auto seedType =
      cast<RankedTensorType>(grad.getArgument(numArgs - 1).getType());
  Tensor seed(*dtypeOf(seedType.getElementType()), {});
  seed.setDouble(0, 1.0 / double(options.gradAccum));

  std::vector<Tensor> sums;
  for (int64_t k = 0; k < options.gradAccum; ++k) {
    std::vector<Tensor> args;
    for (unsigned i = 0; i + 1 < numArgs; ++i) {
      const Tensor *value = values.lookup(argumentName(grad, i));
      if (!value) {
        fail("--dump-grads: no value for argument '" + argumentName(grad, i) +
             "' of @" + gradName);
        return failure();
      }
      if (getParamAttr(grad, i)) {
        args.push_back(*value);
        continue;
      }
      int64_t micro =
          cast<RankedTensorType>(grad.getArgument(i).getType()).getDimSize(0);
      args.push_back(takeRows(*value, k * micro, micro));
    }
    args.push_back(seed);
    FailureOr<std::vector<Tensor>> results = evaluate(grad, args);
    if (failed(results))
      return failure();
    if (sums.empty()) {
      sums = std::move(*results);
      continue;
    }
    for (unsigned r = 1, e = sums.size(); r < e; ++r)
      for (int64_t j = 0, n = sums[r].numElements(); j < n; ++j)
        sums[r].setDouble(j, sums[r].getDouble(j) + (*results)[r].getDouble(j));
  }

  // File names: the ONNX name of each gradient's parameter.
  llvm::StringMap<std::string> sourceOf;
  for (unsigned i = 0; i + 1 < numArgs; ++i)
    if (ParamAttr param = getParamAttr(grad, i))
      sourceOf[param.getName()] = param.getSource().str();
  rt::AtomicFileSet files;
  if (failed(createDirectory(files, dir)))
    return failure();
  std::vector<unsigned> written;
  std::vector<std::string> names;
  for (unsigned r = 1, e = sums.size(); r < e; ++r)
    if (auto name = grad.getResultAttrOfType<StringAttr>(
            r, SharcDialect::getGradAttrName())) {
      written.push_back(r);
      names.push_back(sourceOf[name.getValue()]);
    }
  std::vector<std::string> fileNames = rt::npyFileNames(names);
  for (auto [r, file] : llvm::zip(written, fileNames))
    if (failed(writeTensor(files, dir, file, sums[r])))
      return failure();
  return commitFiles(files);
}

/// Writes every parameter and state argument of `step` (their values in
/// `args`) to DIR: params as <ONNX name>.npy, state as <ONNX name>.<role>.npy
/// or <role>.npy (the step counter), file names made distinct by
/// rt::npyFileNames.
LogicalResult dumpState(func::FuncOp step, ArrayRef<Tensor> args,
                        StringRef dir) {
  llvm::StringMap<std::string> sourceOf;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (ParamAttr param = getParamAttr(step, i))
      sourceOf[param.getName()] = param.getSource().str();
  std::vector<unsigned> written;
  std::vector<std::string> names;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i) {
    if (ParamAttr param = getParamAttr(step, i))
      names.push_back(param.getSource().str());
    else if (StateAttr state = getStateAttr(step, i))
      names.push_back(state.getParam().empty()
                          ? state.getRole().str()
                          : sourceOf[state.getParam()] + "." +
                                state.getRole().str());
    else
      continue;
    written.push_back(i);
  }
  std::vector<std::string> fileNames = rt::npyFileNames(names);
  rt::AtomicFileSet files;
  if (failed(createDirectory(files, dir)))
    return failure();
  for (auto [i, file] : llvm::zip(written, fileNames))
    if (failed(writeTensor(files, dir, file, args[i])))
      return failure();
  return commitFiles(files);
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void sharc::registerTrainingFlags(cl::SubCommand &eval,
                                  cl::SubCommand &compile,
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

int sharc::runTraining(MLIRContext &context, LoadedModel &model,
                       const std::map<std::string, std::string> &inputs) {
  if (flags->steps < 1)
    return fail("--steps must be at least 1");
  FailureOr<TrainingOptions> options =
      resolveTrainingOptions(model.entry, /*compiled=*/false);
  if (failed(options))
    return 1;

  {
    PassManager pm(&context);
    if (failed(applyPassManagerCLOptions(pm)))
      return 1;
    DefaultTimingManager timingManager;
    applyDefaultTimingManagerCLOptions(timingManager);
    TimingScope timing = timingManager.getRootScope();
    pm.enableTiming(timing);
    buildTrainPipeline(pm, *options);
    if (failed(pm.run(*model.module)))
      return 1;
  }
  auto step = model.module->lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return fail("the train pipeline produced no @train_step");

  // Initial values: parameters from --input or the ONNX initializers,
  // optimizer state zero, data from the --input files.
  unsigned numArgs = step.getNumArguments();
  // Every argument of a step must fit in memory (a step's inputs hold
  // micro-batch x GAS rows).
  for (unsigned i = 0; i < numArgs; ++i) {
    auto type = cast<RankedTensorType>(step.getArgument(i).getType());
    if (std::optional<std::string> tooBig = checkEvaluatorMemory(type))
      return fail("cannot train on the evaluator: '" + argumentName(step, i) +
                  "' of the training step (" +
                  describeTensor(*dtypeOf(type.getElementType()),
                                 type.getShape()) +
                  "): " + *tooBig);
  }

  std::vector<Tensor> args(numArgs);
  std::vector<std::pair<unsigned, Tensor>> data;
  std::vector<std::string> dataPaths;
  std::vector<std::string> missing;
  llvm::StringSet<> used;
  for (unsigned i = 0; i < numArgs; ++i) {
    std::string name = argumentName(step, i);
    auto type = cast<RankedTensorType>(step.getArgument(i).getType());
    if (StateAttr state = getStateAttr(step, i)) {
      args[i] = Tensor(*dtypeOf(type.getElementType()), type.getShape());
      continue;
    }
    ParamAttr param = getParamAttr(step, i);
    auto it = inputs.find(name);
    if (it == inputs.end() && param)
      it = inputs.find(param.getSource().str());
    if (it != inputs.end()) {
      used.insert(it->first);
      FailureOr<Tensor> value = param ? readArgument(name, it->second, type)
                                      : readData(name, it->second, type);
      if (failed(value))
        return 1;
      if (param)
        args[i] = std::move(*value);
      else {
        data.emplace_back(i, std::move(*value));
        dataPaths.push_back(it->second);
      }
      continue;
    }
    auto known = model.parameters.find(name);
    if (param && known != model.parameters.end()) {
      args[i] = known->second;
      continue;
    }
    missing.push_back(name);
  }
  for (const auto &[name, path] : inputs)
    if (!used.contains(name)) {
      std::string expected;
      for (unsigned i = 0; i < numArgs; ++i)
        if (!getStateAttr(step, i))
          expected += (expected.empty() ? "" : ", ") + argumentName(step, i);
      return fail("--input " + name +
                  ": the model has no input or parameter of that name (it "
                  "has: " +
                  expected + ")");
    }
  if (!missing.empty())
    return fail("missing --input for " + llvm::join(missing, ", "));
  // Row k of every data input belongs to one sample, as in the training
  // binary's loader.
  for (auto [k, entry] : llvm::enumerate(data))
    if (entry.second.shape()[0] != data.front().second.shape()[0])
      return fail("input '" + argumentName(step, entry.first) + "' (" +
                  dataPaths[k] + ") has " + Twine(entry.second.shape()[0]) +
                  " rows but input '" +
                  argumentName(step, data.front().first) + "' (" +
                  dataPaths.front() + ") has " +
                  Twine(data.front().second.shape()[0]) +
                  "; every data input needs the same number of rows");
  // Where each result goes back in: equal sharc.param / sharc.state.
  std::vector<std::pair<unsigned, unsigned>> feedback;
  std::optional<unsigned> lossResult, lrResult;
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r) {
    for (StringRef attrName :
         {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()}) {
      Attribute attr = step.getResultAttr(r, attrName);
      if (!attr)
        continue;
      for (unsigned i = 0; i < numArgs; ++i)
        if (step.getArgAttr(i, attrName) == attr)
          feedback.emplace_back(r, i);
    }
    std::optional<StringRef> name = outputName(step, r);
    if (name == "loss")
      lossResult = r;
    else if (name == "lr")
      lrResult = r;
  }
  if (!lossResult || !lrResult)
    return fail("@train_step has no 'loss' or 'lr' result");

  for (int64_t k = 0; k < flags->steps; ++k) {
    for (auto &[index, stream] : data) {
      int64_t rows = cast<RankedTensorType>(step.getArgument(index).getType())
                         .getDimSize(0);
      args[index] = takeRows(stream, (k * rows) % stream.shape()[0], rows);
    }
    if (k + 1 == flags->steps && given(flags->dumpGrads) &&
        failed(dumpGradients(*model.module, *options, step, args,
                             flags->dumpGrads)))
      return 1;
    FailureOr<std::vector<Tensor>> results = evaluate(step, args);
    if (failed(results))
      return 1;
    llvm::outs() << "step " << k + 1 << " loss "
                 << formatScalar((*results)[*lossResult].getDouble(0)) << " lr "
                 << formatScalar((*results)[*lrResult].getDouble(0)) << "\n";
    llvm::outs().flush();
    for (auto [result, arg] : feedback)
      args[arg] = std::move((*results)[result]);
  }

  if (given(flags->dumpState) &&
      failed(dumpState(step, args, flags->dumpState)))
    return 1;
  return 0;
}
