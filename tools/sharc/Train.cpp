//===- Train.cpp - sharc eval --train -------------------------------------===//
//
// Runs the train pipeline on the model with the training options of
// Options.h and then runs `@train_step` step after step on the evaluator,
// feeding each step's new parameters and optimizer state back in by their
// `sharc.param` / `sharc.state` attributes.  docs/cli.md documents the
// flags and the output.
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Train.h"

#include "ir/Evaluator.h"
#include "ir/SharcOps.h"
#include "passes/Passes.h"
#include "runtime/AtomicFile.h"
#include "runtime/Checkpoint.h"
#include "runtime/Errors.h"
#include "runtime/Metrics.h"
#include "runtime/Npy.h"
#include "runtime/StateDir.h"
#include "tools/sharc/BuildConfig.h"
#include "tools/sharc/Diagnostics.h"
#include "tools/sharc/Options.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace mlir;
using namespace sharc;

namespace {

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

/// `value` as the step lines print it: 9 significant digits.
std::string formatScalar(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

//===----------------------------------------------------------------------===//
// The training run
//===----------------------------------------------------------------------===//

/// The `sharc.state` attribute of argument `index`, if any.
StateAttr getStateAttr(func::FuncOp func, unsigned index) {
  return func.getArgAttrOfType<StateAttr>(index,
                                          SharcDialect::getStateAttrName());
}

/// The model output name of result `index`, if it has one.
std::optional<StringRef> outputName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(
          index, SharcDialect::getOutputAttrName()))
    return name.getValue();
  return std::nullopt;
}

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

  int64_t stepCounter = 0;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (StateAttr state = getStateAttr(step, i);
        state && state.getRole() == "step")
      stepCounter = stepArgs[i].getInt(0);

  std::vector<Tensor> sums;
  for (int64_t k = 0; k < options.gradAccum; ++k) {
    std::vector<Tensor> args;
    for (unsigned i = 0; i + 1 < numArgs; ++i) {
      // Rank 0's micro-batch k holds global batch rows [k m, (k + 1) m).
      if (!getRandomKeyRole(grad, i).empty()) {
        auto type = cast<RankedTensorType>(grad.getArgument(i).getType());
        int64_t micro = type.getRank() ? type.getDimSize(0) : 0;
        args.push_back(randomKeyValue(type, stepCounter, k * micro));
        continue;
      }
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

/// The parameter and state arguments of `step` with their files in a saved
/// state: params as <ONNX name>.npy, state as <ONNX name>.<role>.npy or
/// <role>.npy (the step counter), made distinct by rt::npyFileNames -- the
/// names the training binaries use.
std::vector<std::pair<unsigned, std::string>> stateFiles(func::FuncOp step) {
  // The ONNX name (the sanitized one for a parameter without).
  llvm::StringMap<std::string> sourceOf;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (ParamAttr param = getParamAttr(step, i))
      sourceOf[param.getName()] = param.getSource().empty()
                                      ? param.getName().str()
                                      : param.getSource().str();
  std::vector<unsigned> arguments;
  std::vector<std::string> names;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i) {
    if (ParamAttr param = getParamAttr(step, i))
      names.push_back(sourceOf[param.getName()]);
    else if (StateAttr state = getStateAttr(step, i))
      names.push_back(state.getParam().empty()
                          ? state.getRole().str()
                          : sourceOf[state.getParam()] + "." +
                                state.getRole().str());
    else
      continue;
    arguments.push_back(i);
  }
  std::vector<std::pair<unsigned, std::string>> files;
  for (auto [i, file] : llvm::zip(arguments, rt::npyFileNames(names)))
    files.emplace_back(i, file);
  return files;
}

/// The type of argument `i` of `step` as a saved state holds it: whole,
/// for an argument that holds each rank's ZeRO slice.
RankedTensorType wholeType(func::FuncOp step, unsigned i) {
  if (SliceAttr slice = getSliceAttr(step, i))
    return slice.getWhole();
  return cast<RankedTensorType>(step.getArgument(i).getType());
}

/// Writes every parameter and state argument of `step` (their values in
/// rank 0's `rankArgs`) to DIR (stateFiles), with the index (whole tensors
/// only, so that a state saved in this folder before, partitioned, is not
/// read instead) and its `meta` lines.  An argument that holds each rank's
/// ZeRO slice of a tensor (`sharc.slice`) is written whole: the ranks'
/// slices in rank order, without the padding, in the whole tensor's shape.
LogicalResult writeState(func::FuncOp step,
                         ArrayRef<std::vector<Tensor>> rankArgs, StringRef dir,
                         const rt::MetaLines &meta) {
  ArrayRef<Tensor> args = rankArgs.front();
  auto whole = [&](unsigned i) -> Tensor {
    SliceAttr slice = getSliceAttr(step, i);
    if (!slice)
      return args[i];
    Tensor gathered(args[i].dtype(), slice.getWhole().getShape());
    int64_t size = slice.getSliceElements(), total = gathered.numElements();
    for (int64_t k = 0; k < total; ++k)
      gathered.setDouble(k, rankArgs[k / size][i].getDouble(k % size));
    return gathered;
  };
  rt::AtomicFileSet files;
  if (failed(createDirectory(files, dir)))
    return failure();
  rt::StateIndex index;
  index.saveId = llvm::hash_combine(
      dir, args.size(),
      std::chrono::steady_clock::now().time_since_epoch().count());
  index.meta = meta;
  std::string error;
  for (auto &[i, file] : stateFiles(step)) {
    Tensor value = whole(i);
    if (value.dtype() == DType::bf16)
      value = value.convertTo(DType::f32);
    index.whole.push_back(file);
    if (!rt::writeStateArray(files, dir.str(), file, value.toNpy(),
                             index.checksums, error)) {
      fail(error);
      return failure();
    }
  }
  if (!rt::writeText(files, rt::stateIndexPath(dir.str()),
                     rt::stateIndexText(index), error)) {
    fail(error);
    return failure();
  }
  return commitFiles(files);
}

/// Reads every parameter and state argument of `step` from the saved state
/// in DIR (its index `index`) into `args`, whole (each rank takes its slice
/// later).
LogicalResult readState(func::FuncOp step, StringRef dir,
                        const rt::StateIndex &index,
                        MutableArrayRef<Tensor> args) {
  for (auto &[i, file] : stateFiles(step)) {
    rt::NpyArray array;
    std::string error;
    if (!rt::readStateTensor(dir.str(), index, file, array, error)) {
      fail(error);
      return failure();
    }
    SmallString<256> path(dir);
    llvm::sys::path::append(path, file);
    RankedTensorType type = wholeType(step, i);
    FailureOr<Tensor> value =
        npyAs(argumentName(step, i), path.str(), array, type);
    if (failed(value))
      return failure();
    if (value->shape() != type.getShape()) {
      fail(path.str() + ": '" + argumentName(step, i) + "' expects " +
           describeTensor(value->dtype(), type.getShape()) + ", got " +
           value->describe());
      return failure();
    }
    args[i] = std::move(*value);
  }
  return success();
}

/// Writes the checkpoint after `stepsDone` steps into SAVE_DIR/step-N
/// (runtime/Checkpoint.h): into a hidden folder, renamed into place when
/// complete; then the checkpoints beyond --keep-last are removed.
LogicalResult saveCheckpoint(func::FuncOp step,
                             ArrayRef<std::vector<Tensor>> rankArgs,
                             const CheckpointFlags &checkpoints,
                             int64_t stepsDone, const rt::MetaLines &meta) {
  auto start = std::chrono::steady_clock::now();
  const std::string &saveDir = *checkpoints.saveDir;
  uint64_t id = llvm::hash_combine(
      saveDir, stepsDone,
      std::chrono::steady_clock::now().time_since_epoch().count());
  std::string partial = rt::partialCheckpointPath(saveDir, stepsDone, id);
  SmallString<256> target(saveDir);
  llvm::sys::path::append(target, rt::checkpointName(stepsDone));
  if (llvm::sys::fs::exists(partial))
    return fail("--save-dir: " + partial + ": exists"), failure();
  if (failed(writeState(step, rankArgs, partial, meta)))
    return failure();
  std::string error;
  std::vector<std::string> removed, warnings;
  if (!rt::commitCheckpoint(partial, target.str().str(), checkpoints.keepLast,
                            removed, warnings, error))
    return fail("--save-dir: " + error), failure();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  llvm::outs() << "checkpoint: step " << stepsDone << " saved in " << target
               << " (" << llvm::format("%.3f", seconds) << " s)";
  for (const std::string &path : removed)
    llvm::outs() << "; removed " << path;
  llvm::outs() << "\n";
  llvm::outs().flush();
  for (const std::string &message : warnings)
    llvm::errs() << "warning: --keep-last: " << message << "\n";
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

int sharc::runTraining(MLIRContext &context, LoadedModel &model,
                       const std::map<std::string, std::string> &inputs) {
  int64_t steps = trainingSteps();
  if (steps < 1)
    return fail("--steps must be at least 1");
  FailureOr<CheckpointFlags> checkpoints = checkpointFlags();
  if (failed(checkpoints))
    return 1;
  FailureOr<TrainingOptions> options = resolveTrainingOptions(model.entry);
  if (failed(options))
    return 1;
  std::string microSource;
  FailureOr<int64_t> microBatch = microBatchOf(model.entry, microSource);
  if (failed(microBatch))
    return 1;
  // What checkpoints record (runtime/Checkpoint.h), as the training
  // binaries record it.
  std::string configText = trainingConfigText(*options, *microBatch);
  rt::MetaLines identity = rt::resumeIdentity(model.modelHash, configText);
  auto stateMeta = [&](int64_t stepsDone) {
    return rt::stateMeta({stepsDone, SHARC_VERSION, model.path, model.modelHash,
                          configText, "evaluator", options->worldSize,
                          options->zeroStage, *microBatch, options->gradAccum});
  };

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
      return fail(
          "cannot train on the evaluator: '" + argumentName(step, i) +
          "' of the training step (" +
          describeTensor(*dtypeOf(type.getElementType()), type.getShape()) +
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
      for (int64_t j = 0, e = args[i].numElements(); j < e; ++j)
        args[i].setDouble(j, state.getInitValue());
      continue;
    }
    ParamAttr param = getParamAttr(step, i);
    // A partitioned parameter (ZeRO stage 3) is read whole; each rank takes
    // its slice below.
    if (SliceAttr slice = getSliceAttr(step, i))
      type = slice.getWhole();
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
      args[i] = known->second.unpack();
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
  // --resume: parameters, optimizer state and the step count from the
  // checkpoint, which must be of this model and configuration.
  int64_t firstStep = 0;
  bool resumed = false;
  if (checkpoints->resume) {
    std::string dir, error;
    rt::StateIndex index;
    if (!rt::findResumePoint(*checkpoints->resume, dir, error) ||
        !rt::readStateIndex(dir, index, error) ||
        !rt::checkResumable(dir, index, identity, error))
      return fail(error);
    for (unsigned i = 0; i < numArgs; ++i)
      if (getParamAttr(step, i) && used.contains(argumentName(step, i)))
        return fail("--input " + argumentName(step, i) +
                    ": with --resume the parameters come from the checkpoint");
    const std::string *saved = index.findMeta("step");
    if (!saved || !llvm::to_integer(*saved, firstStep, 10) || firstStep < 0)
      return fail(rt::stateIndexPath(dir) +
                  ": no step count (meta step) in the checkpoint");
    if (failed(readState(step, dir, index, args)))
      return 1;
    llvm::erase_if(missing, [&](const std::string &name) {
      for (unsigned i = 0; i < numArgs; ++i)
        if (getParamAttr(step, i) && argumentName(step, i) == name)
          return true;
      return false;
    });
    resumed = true;
    const std::string *ranksSaved = index.findMeta("world-size");
    const std::string *stageSaved = index.findMeta("zero-stage");
    llvm::outs() << "resume: from " << dir << " (step " << firstStep
                 << "; saved by " << (ranksSaved ? *ranksSaved : "?")
                 << " rank(s) at ZeRO stage "
                 << (stageSaved ? *stageSaved : "?") << ")\n";
  }
  if (!missing.empty())
    return fail("missing --input for " + llvm::join(missing, ", "));
  // Row k of every data input belongs to one sample, as in the training
  // binary's loader.
  for (auto [k, entry] : llvm::enumerate(data))
    if (entry.second.shape()[0] != data.front().second.shape()[0])
      return fail("input '" + argumentName(step, entry.first) + "' (" +
                  dataPaths[k] + ") has " + Twine(entry.second.shape()[0]) +
                  " rows but input '" + argumentName(step, data.front().first) +
                  "' (" + dataPaths.front() + ") has " +
                  Twine(data.front().second.shape()[0]) +
                  "; every data input needs the same number of rows");
  // Where each result goes back in: equal sharc.param / sharc.state.
  std::vector<std::pair<unsigned, unsigned>> feedback;
  std::optional<unsigned> lossResult, lrResult, gradNormResult, scaleResult,
      overflowResult, atMinResult;
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r) {
    if (std::optional<unsigned> updated = getUpdatedArgument(step, r))
      feedback.emplace_back(r, *updated);
    std::optional<StringRef> name = outputName(step, r);
    if (name == "loss")
      lossResult = r;
    else if (name == "lr")
      lrResult = r;
    else if (name == "grad_norm")
      gradNormResult = r;
    else if (name == "loss_scale")
      scaleResult = r;
    else if (name == "overflow")
      overflowResult = r;
    else if (name == "at_min_scale")
      atMinResult = r;
  }
  if (!lossResult || !lrResult)
    return fail("@train_step has no 'loss' or 'lr' result");

  std::optional<std::string> gradsDir = dumpGradsDir();
  int64_t ranks = options->worldSize;
  if (gradsDir && ranks > 1)
    return fail("--dump-grads needs one rank (--world-size 1)");
  // Every simulated rank holds its own copy of the state; rank r trains on
  // its block of each step's global batch, as the training binary's loader
  // shards it (docs/runtime.md, "Sharding rule").
  std::vector<std::vector<Tensor>> rankArgs(ranks, args);
  // Whole values of partitioned arguments: the parameters (ZeRO stage 3),
  // and after --resume the optimizer state too.
  for (unsigned i = 0; i < numArgs; ++i)
    if (SliceAttr slice = getSliceAttr(step, i);
        slice && (getParamAttr(step, i) || resumed))
      for (int64_t r = 0; r < ranks; ++r) {
        // Rank r's elements [r s, r s + s) of the whole, zero past its end.
        int64_t size = slice.getSliceElements();
        Tensor mine(args[i].dtype(), {size});
        for (int64_t k = 0; k < size; ++k)
          if (int64_t from = r * size + k; from < args[i].numElements())
            mine.setDouble(k, args[i].getDouble(from));
        rankArgs[r][i] = std::move(mine);
      }
  // --metrics: the binaries' JSON lines (runtime/Metrics.h), the throughput
  // in their unit (tokens for a token-sequence input, else samples).
  // DeepSpeed's monitors come from the config.
  rt::StepLog log;
  if (std::string error; !log.open(
          metricsPath().value_or(""),
          options->csvMonitor.enabled ? options->csvMonitor.folder() : "",
          options->tensorboard.enabled ? options->tensorboard.folder() : "",
          error))
    return fail(error);
  int64_t rowElements = 1;
  std::string throughputKey = "samples_per_s";
  for (auto &[index, stream] : data) {
    auto type = cast<RankedTensorType>(step.getArgument(index).getType());
    if (type.getRank() >= 2 && isa<IntegerType>(type.getElementType())) {
      rowElements = type.getNumElements() / type.getDimSize(0);
      throughputKey = "tokens_per_s";
      break;
    }
  }
  for (int64_t k = firstStep; k < firstStep + steps; ++k) {
    auto stepStart = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < ranks; ++r)
      for (auto &[index, stream] : data) {
        int64_t rows = cast<RankedTensorType>(step.getArgument(index).getType())
                           .getDimSize(0);
        rankArgs[r][index] = takeRows(
            stream, (k * rows * ranks + r * rows) % stream.shape()[0], rows);
      }
    if (k + 1 == firstStep + steps && gradsDir &&
        failed(dumpGradients(*model.module, *options, step, rankArgs[0],
                             *gradsDir)))
      return 1;
    std::vector<std::vector<Tensor>> allResults;
    if (ranks == 1) {
      FailureOr<std::vector<Tensor>> single = evaluate(step, rankArgs[0]);
      if (failed(single))
        return 1;
      allResults.push_back(std::move(*single));
    } else {
      FailureOr<std::vector<std::vector<Tensor>>> multi =
          evaluateRanks(step, rankArgs);
      if (failed(multi))
        return 1;
      allResults = std::move(*multi);
    }
    // The ranks agree on the loss (its all-reduced mean) and the scale.
    std::vector<Tensor> *results = &allResults.front();
    llvm::outs() << "step " << k + 1 << " loss "
                 << formatScalar((*results)[*lossResult].getDouble(0)) << " lr "
                 << formatScalar((*results)[*lrResult].getDouble(0));
    if (scaleResult)
      llvm::outs() << " scale "
                   << formatScalar((*results)[*scaleResult].getDouble(0));
    if (overflowResult && (*results)[*overflowResult].getDouble(0) != 0)
      llvm::outs() << " skipped";
    llvm::outs() << "\n";
    llvm::outs().flush();
    if (log.isOpen()) {
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - stepStart)
                           .count();
      rt::StepMetrics record;
      record.step = k + 1;
      record.loss = (*results)[*lossResult].getDouble(0);
      record.lr = (*results)[*lrResult].getDouble(0);
      if (gradNormResult)
        record.gradNorm = (*results)[*gradNormResult].getDouble(0);
      if (scaleResult)
        record.scale = (*results)[*scaleResult].getDouble(0);
      record.skipped =
          overflowResult && (*results)[*overflowResult].getDouble(0) != 0;
      record.milliseconds = seconds * 1e3;
      record.throughputKey = throughputKey;
      int64_t rows = data.empty()
                         ? 0
                         : cast<RankedTensorType>(
                               step.getArgument(data.front().first).getType())
                               .getDimSize(0);
      record.throughput =
          seconds > 0 ? double(rows * ranks * rowElements) / seconds : 0.0;
      if (std::string error; !log.record(record, rows * ranks, error))
        return fail(error);
    }
    if (atMinResult && (*results)[*atMinResult].getDouble(0) != 0)
      return fail(rt::lossScaleAtMinimumMessage(
          k + 1, (*results)[*scaleResult].getDouble(0)));
    for (int64_t r = 0; r < ranks; ++r)
      for (auto [result, arg] : feedback)
        rankArgs[r][arg] = std::move(allResults[r][result]);
    // Checkpoints: every --save-every steps (counted from the start of
    // training) and after the last step.
    if (checkpoints->saveDir &&
        (k + 1 == firstStep + steps ||
         (checkpoints->saveEvery && (k + 1) % checkpoints->saveEvery == 0)) &&
        failed(saveCheckpoint(step, rankArgs, *checkpoints, k + 1,
                              stateMeta(k + 1))))
      return 1;
  }

  if (std::string error; !log.sync(error))
    return fail(error);
  std::optional<std::string> stateDir = dumpStateDir();
  if (stateDir && failed(writeState(step, rankArgs, *stateDir,
                                    stateMeta(firstStep + steps))))
    return 1;
  return 0;
}
