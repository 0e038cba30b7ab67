//===- sharc.cpp - the sharc command-line interface -----------------------===//
//
//   sharc import MODEL.onnx [--input-shape NAME=DIMS]... [-o OUT.mlir]
//   sharc eval MODEL.onnx|IN.mlir --input NAME=FILE.npy ... [--output-dir DIR]
//   sharc eval MODEL.onnx --train --steps N --input NAME=FILE.npy ...
//              [--config ds_config.json] [training flags] [--dump-state DIR]
//   sharc compile MODEL.onnx --target cpu|cuda [training flags] -o OUTDIR
//   sharc consolidate STATE_DIR -o OUT_DIR
//   sharc config ds_config.json [--world-size N]
//
// The command line and its dispatch, and the commands `import`, plain
// `eval`, `consolidate` and `config`.  Model loading (Model.h) and the training
// flags (Options.h) are shared with `eval --train` (Train.h) and `compile`
// (Compile.h).
//
//===----------------------------------------------------------------------===//

#include "frontends/deepspeed/Config.h"
#include "frontends/onnx/Exporter.h"
#include "ir/Evaluator.h"
#include "ir/SharcOps.h"
#include "runtime/AtomicFile.h"
#include "runtime/Blas.h"
#include "runtime/Npy.h"
#include "runtime/StateDir.h"
#include "tools/sharc/Compile.h"
#include "tools/sharc/Diagnostics.h"
#include "tools/sharc/Model.h"
#include "tools/sharc/Options.h"
#include "tools/sharc/Train.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>

using namespace mlir;
using namespace sharc;
namespace cl = llvm::cl;

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

static cl::OptionCategory sharcCategory("sharc options");

static cl::SubCommand importCommand("import",
                                    "Import an ONNX model and print sharc IR");
static cl::SubCommand
    evalCommand("eval",
                "Run a model on the reference evaluator and print its outputs");

static cl::SubCommand
    compileCommand("compile",
                   "Compile a model's training step to a training binary");

static cl::SubCommand consolidateCommand(
    "consolidate",
    "Write the whole tensors of a saved state whose ZeRO partitions each "
    "rank saved (what DeepSpeed's zero_to_fp32 does)");

static cl::SubCommand
    exportCommand("export",
                  "Write the model again with the trained weights of a saved "
                  "state (a checkpoint), for inference");

static cl::SubCommand
    configCommand("config",
                  "Print a DeepSpeed config as sharc resolves it (defaults "
                  "filled in, batch sizes derived, deprecated keys mapped)");

static cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                       cl::desc("<ds_config.json>"),
                                       cl::sub(configCommand));

static cl::opt<int64_t>
    configWorldSize("world-size",
                    cl::desc("The number of ranks the batch sizes are "
                             "derived for (default 1)"),
                    cl::init(1), cl::sub(configCommand),
                    cl::cat(sharcCategory));

static cl::opt<std::string> statePath(cl::Positional, cl::Required,
                                      cl::desc("<state directory>"),
                                      cl::sub(consolidateCommand),
                                      cl::sub(exportCommand));

static cl::opt<std::string>
    exportModel("model", cl::Required,
                cl::desc("The ONNX model the state was trained from"),
                cl::value_desc("MODEL.onnx"), cl::sub(exportCommand),
                cl::cat(sharcCategory));

static cl::opt<bool> exportExternalData(
    "external-data",
    cl::desc("Keep the initializers in OUT.data next to the model (always "
             "above 2 GiB)"),
    cl::sub(exportCommand), cl::cat(sharcCategory));

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx | input.mlir>"),
                                      cl::sub(importCommand),
                                      cl::sub(evalCommand),
                                      cl::sub(compileCommand));

static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of a graph input: NAME=D0xD1x... "
                         "(NAME= for a scalar)"),
                cl::value_desc("NAME=DIMS"), cl::sub(importCommand),
                cl::sub(evalCommand), cl::sub(compileCommand),
                cl::cat(sharcCategory));

static cl::opt<std::string>
    outputPath("o",
               cl::desc("import: output file (default: standard output); "
                        "compile: output directory"),
               cl::value_desc("path"), cl::init("-"), cl::sub(importCommand),
               cl::sub(compileCommand), cl::sub(consolidateCommand),
               cl::sub(exportCommand), cl::cat(sharcCategory));

static cl::list<std::string>
    inputFiles("input",
               cl::desc("Value of a model input or parameter: NAME=FILE.npy"),
               cl::value_desc("NAME=FILE.npy"), cl::sub(evalCommand),
               cl::cat(sharcCategory));

static cl::opt<bool> untieInitializers(
    "untie-initializers",
    cl::desc("Give each use of an initializer that torch.onnx.export merged "
             "by value (through Identity nodes) a parameter of its own"),
    cl::sub(importCommand), cl::sub(evalCommand), cl::sub(compileCommand),
    cl::sub(exportCommand), cl::cat(sharcCategory));

static cl::opt<std::string>
    outputDir("output-dir", cl::desc("Write every output as DIR/NAME.npy"),
              cl::value_desc("DIR"), cl::sub(evalCommand),
              cl::cat(sharcCategory));

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The model of the command line (the positional argument and
/// --input-shape).
static FailureOr<LoadedModel> loadGivenModel(MLIRContext &context) {
  // Dynamic input dimensions: the batch from the config's micro-batch when
  // training, the others from the --input files (dimension 0 too, for
  // inference).
  ImportHints hints;
  hints.untieInitializers = untieInitializers;
  bool training = compileCommand || (evalCommand && trainingRequested());
  if (training) {
    FailureOr<std::optional<int64_t>> micro = configuredMicroBatch();
    if (failed(micro))
      return failure();
    hints.batchSize = *micro;
  }
  if (evalCommand)
    for (const std::string &spec : inputFiles) {
      size_t equals = spec.find('=');
      rt::NpyArray array;
      std::string error;
      if (equals == std::string::npos ||
          !rt::readNpy(spec.substr(equals + 1), array, error))
        continue; // reported where the inputs are read
      llvm::SmallVector<int64_t> shape(array.shape.begin(), array.shape.end());
      // A training input holds any number of rows: not the batch.
      if (training && !shape.empty())
        shape.front() = -1;
      hints.dataShapes[spec.substr(0, equals)] = shape;
    }
  return sharc::loadModel(context, modelPath, inputShapes,
                          compileCommand && compileReadsShapesOnly(), hints);
}

/// The user-facing name of result `index`: its model output name or
/// "result<index>".
static std::string resultName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(
          index, SharcDialect::getOutputAttrName()))
    return name.str();
  // A buffer's new value (BatchNorm's running statistics in training mode)
  // is named after the initializer it updates.
  if (auto param = func.getResultAttrOfType<ParamAttr>(
          index, SharcDialect::getParamAttrName()))
    return param.getSource().str();
  return "result" + std::to_string(index);
}

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

static int runImport(MLIRContext &context) {
  auto model = loadGivenModel(context);
  if (failed(model))
    return 1;
  std::string text;
  llvm::raw_string_ostream os(text);
  model->module->print(os);
  os << "\n";
  if (outputPath == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      std::error_code ec = llvm::outs().error();
      llvm::outs().clear_error();
      return fail("cannot write the standard output: " + ec.message());
    }
    return 0;
  }
  // The file is replaced whole or not at all.
  rt::AtomicFile file;
  std::string error;
  if (!file.create(outputPath, error) ||
      !file.write(text.data(), text.size(), error) || !file.commit(error))
    return fail(error);
  return 0;
}

static void printScalar(const Tensor &value, llvm::raw_ostream &os) {
  char buffer[64];
  if (value.isFloat())
    std::snprintf(buffer, sizeof(buffer), "%.*g",
                  value.dtype() == DType::f64 ? 17 : 9, value.getDouble(0));
  else
    std::snprintf(buffer, sizeof(buffer), "%lld", (long long)value.getInt(0));
  os << buffer;
}

static int runEval(MLIRContext &context) {
  auto model = loadGivenModel(context);
  if (failed(model))
    return 1;
  func::FuncOp func = model->entry;

  // Collect --input values by name (a name may hold '=').
  std::vector<std::string> argumentNames;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    argumentNames.push_back(argumentName(func, i));
    if (ParamAttr param = getParamAttr(func, i))
      argumentNames.push_back(param.getSource().str());
  }
  std::map<std::string, std::string> given;
  for (const std::string &spec : inputFiles) {
    std::string name, path, error;
    if (!rt::splitInputSpec(spec, argumentNames, name, path, error))
      return fail("--input " + error);
    if (!given.emplace(name, path).second)
      return fail("--input " + name + " is given twice");
  }
  if (trainingRequested()) {
    if (!outputDir.empty())
      return fail("--output-dir does not apply to --train; use --dump-state");
    return runTraining(context, *model, given);
  }
  if (std::optional<std::string> flag = givenTrainingFlag())
    return fail("--" + *flag + " applies to training only; add --train");

  std::vector<Tensor> args;
  std::vector<std::string> missing;
  std::map<std::string, bool> used;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    std::string name = argumentName(func, i);
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    auto it = given.find(name);
    if (it == given.end())
      if (ParamAttr param = getParamAttr(func, i))
        it = given.find(param.getSource().str());
    if (it != given.end()) {
      used[it->first] = true;
      auto value = readArgument(name, it->second, type);
      if (failed(value))
        return 1;
      args.push_back(std::move(*value));
      continue;
    }
    auto known = model->parameters.find(name);
    if (known != model->parameters.end()) {
      args.push_back(known->second.unpack());
      continue;
    }
    // Dropout's masks default to those of step 0 on batch rows 0, 1, ...
    if (!getRandomKeyRole(func, i).empty()) {
      args.push_back(randomKeyValue(type, /*step=*/0, /*firstRow=*/0));
      continue;
    }
    missing.push_back(name);
    args.emplace_back();
  }
  for (auto &[name, path] : given)
    if (!used.count(name)) {
      std::string expected;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        expected += (i ? ", " : "") + argumentName(func, i);
      return fail("--input " + name +
                  ": the model has no input or parameter "
                  "of that name (it has: " +
                  expected + ")");
    }
  if (!missing.empty())
    return fail("missing --input for " + llvm::join(missing, ", "));

  auto results = evaluate(func, args);
  if (failed(results))
    return 1;

  // Every output file is written before any replaces its previous version;
  // a failure leaves neither them nor a directory the set created.
  rt::AtomicFileSet files;
  std::string error;
  if (!outputDir.empty() && !files.createDirectories(outputDir, error))
    return fail(error);
  std::vector<std::string> names;
  for (unsigned i = 0, e = results->size(); i < e; ++i)
    names.push_back(resultName(func, i));
  std::vector<std::string> fileNames = rt::npyFileNames(names);
  for (unsigned i = 0, e = results->size(); i < e; ++i) {
    const Tensor &value = (*results)[i];
    const std::string &name = names[i];
    if (value.rank() == 0) {
      llvm::outs() << name << " = ";
      printScalar(value, llvm::outs());
      llvm::outs() << "\n";
    } else {
      llvm::outs() << name << " " << value.describe() << "\n";
    }
    if (outputDir.empty())
      continue;
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, fileNames[i]);
    Tensor stored =
        value.dtype() == DType::bf16 ? value.convertTo(DType::f32) : value;
    if (!rt::writeNpy(files, path.str().str(), stored.toNpy(), error))
      return fail(error);
  }
  if (!files.commit(error))
    return fail(error);
  return 0;
}

/// `sharc consolidate STATE -o OUT`: every tensor of the saved state in
/// STATE (runtime/StateDir.h) written whole into OUT, the partitioned ones
/// reassembled from their ranks' slices, with an index of whole tensors: a
/// state any stage and world size resumes from, whose parameter files are
/// the fp32 weights.  OUT's files are replaced together or not at all.
static int runConsolidate() {
  if (outputPath == "-" || outputPath.empty())
    return fail("consolidate: give the output directory with -o");
  rt::StateIndex index;
  std::string error;
  if (!rt::readStateIndex(statePath, index, error))
    return fail(error);
  if (!index.present)
    return fail(statePath + ": no " + rt::stateIndexPath(statePath) +
                ": not a state saved by sharc (a folder of whole tensors "
                "needs no consolidation)");
  if (llvm::sys::fs::equivalent(statePath, outputPath))
    return fail("consolidate: the output directory is the state's own (" +
                outputPath + ")");
  std::vector<std::string> files = index.whole;
  for (const auto &entry : index.sliced)
    files.push_back(entry.first);
  rt::AtomicFileSet out;
  if (!out.createDirectories(outputPath, error))
    return fail(error);
  uint64_t bytes = 0;
  for (const std::string &file : files) {
    rt::NpyArray array;
    if (!rt::readStateTensor(statePath, index, file, array, error))
      return fail(error);
    bytes += array.data.size();
    llvm::SmallString<256> path(outputPath);
    llvm::sys::path::append(path, file);
    if (!rt::writeNpy(out, path.str().str(), array, error))
      return fail(error);
  }
  rt::StateIndex whole;
  whole.saveId = index.saveId;
  whole.whole = files;
  if (!rt::writeText(out, rt::stateIndexPath(outputPath),
                     rt::stateIndexText(whole), error) ||
      !out.commit(error))
    return fail(error);
  llvm::outs() << "sharc: wrote " << outputPath << ": " << files.size()
               << " tensors, " << bytes << " bytes";
  if (!index.sliced.empty())
    llvm::outs() << " (" << index.sliced.size()
                 << " reassembled from the slices of " << index.ranks
                 << " ranks)";
  llvm::outs() << "\n";
  return 0;
}

/// `sharc export STATE --model MODEL -o OUT`: MODEL with the trained values
/// of the saved state in STATE (frontends/onnx/Exporter.h), each float
/// initializer from the state's file of its ONNX name (the partitioned ones
/// reassembled from their ranks' slices).  A state that records its model's
/// hash must be of MODEL.
static int runExport(MLIRContext &context) {
  if (outputPath == "-" || outputPath.empty())
    return fail("export: give the output model with -o");
  if (llvm::sys::fs::equivalent(exportModel, outputPath))
    return fail("export: -o " + outputPath +
                " is the model itself; write "
                "the trained model to another file");
  if (!llvm::sys::fs::is_directory(statePath))
    return fail("export: " + statePath + ": not a saved state's folder");
  rt::StateIndex index;
  std::string error;
  if (!rt::readStateIndex(statePath, index, error))
    return fail(error);
  ExportOptions options;
  options.externalData = exportExternalData;
  options.untieInitializers = untieInitializers;
  if (const std::string *hash = index.findMeta("model-hash"))
    options.expectedModelHash = *hash;
  // The state's file of each initializer, as the runtime names it; two
  // initializers whose names give one file cannot be told apart.
  std::map<std::string, std::string> fileOwner;
  auto trainedValue = [&](const std::string &name, rt::NpyArray &value,
                          std::string &message) {
    std::string file = rt::npyFileNames({name}).front();
    auto [owner, fresh] = fileOwner.emplace(file, name);
    if (!fresh) {
      message = "its file name '" + file + "' is also initializer '" +
                owner->second + "''s; the state cannot tell them apart";
      return false;
    }
    return rt::readStateTensor(statePath, index, file, value, message);
  };
  ExportSummary summary;
  if (failed(exportTrainedModel(exportModel, outputPath, trainedValue, options,
                                context, summary)))
    return 1;
  llvm::outs() << "sharc: wrote " << outputPath << ": " << summary.replaced
               << " trained initializers (" << summary.replacedBytes
               << " bytes) from " << statePath;
  if (const std::string *step = index.findMeta("step"))
    llvm::outs() << " (step " << *step << ")";
  if (summary.kept)
    llvm::outs() << ", " << summary.kept << " kept as they were";
  if (!summary.externalDataPath.empty())
    llvm::outs() << "; external data in " << summary.externalDataPath;
  llvm::outs() << "\n";
  return 0;
}

/// `text` (JSON) with every number outside strings written in the fewest
/// digits that read back as the same double (0.9, not llvm::json's
/// 0.90000000000000002), as Python prints DeepSpeed's values.
static std::string withShortestNumbers(llvm::StringRef text) {
  std::string out;
  bool inString = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (inString) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        inString = false;
      ++i;
      continue;
    }
    if (c == '"') {
      inString = true;
      out += c;
      ++i;
      continue;
    }
    if (c == '-' || llvm::isDigit(c)) {
      size_t end = text.find_first_not_of("0123456789+-.eE", i);
      std::string token = text.slice(i, end).str();
      double value = std::strtod(token.c_str(), nullptr);
      char buffer[64];
      auto [last, error] =
          std::to_chars(buffer, buffer + sizeof(buffer), value);
      out += error == std::errc() ? std::string(buffer, last) : token;
      i = end == llvm::StringRef::npos ? text.size() : end;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

/// `sharc config FILE [--world-size N]`: the config as sharc reads it, in
/// DeepSpeed's keys, as JSON on standard output (its warnings on standard
/// error), or the error that training with it would report.
static int runConfig() {
  if (configWorldSize < 1 || configWorldSize > TrainingOptions::kMaxWorldSize)
    return fail("--world-size must be between 1 and " +
                llvm::Twine(TrainingOptions::kMaxWorldSize) + ", got " +
                llvm::Twine(int64_t(configWorldSize)));
  llvm::Expected<DeepSpeedConfig> config = readDeepSpeedConfig(configPath);
  if (!config)
    return fail(llvm::toString(config.takeError()));
  for (const std::string &warning : config->warnings)
    warn(warning);
  llvm::Expected<BatchSizes> sizes =
      deriveBatchSizes(config->batch, configWorldSize);
  if (!sizes)
    return fail(configPath + ": " + llvm::toString(sizes.takeError()));
  llvm::outs() << withShortestNumbers(
                      llvm::formatv("{0:2}", resolvedConfig(*config, *sizes,
                                                            configWorldSize))
                          .str())
               << "\n";
  return 0;
}

int main(int argc, char **argv) {
  // First: it may run this process again (the evaluator must multiply with
  // the kernels the training binaries use).
  sharc::rt::ensureBlasKernels(argv);
  llvm::InitLLVM init(argc, argv);
  registerTrainingFlags(evalCommand, compileCommand, sharcCategory);
  registerCompileFlags(compileCommand, sharcCategory);
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  registerAsmPrinterCLOptions();
  cl::HideUnrelatedOptions(sharcCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "sharc: a compiler for training steps\n\n"
      "  sharc import MODEL.onnx [--input-shape NAME=DIMS]... [-o OUT.mlir]\n"
      "  sharc eval MODEL.onnx|IN.mlir --input NAME=FILE.npy ... "
      "[--output-dir DIR]\n"
      "  sharc eval MODEL.onnx --train --steps N --input NAME=FILE.npy ... "
      "[--config F] [training flags] [--dump-state DIR]\n"
      "  sharc compile MODEL.onnx --target cpu|cuda [--config F] [training "
      "flags] -o OUTDIR [--report]\n"
      "  sharc consolidate STATE_DIR -o OUT_DIR\n"
      "  sharc export STATE_DIR --model MODEL.onnx -o TRAINED.onnx "
      "[--external-data]\n"
      "  sharc config ds_config.json [--world-size N]\n");

  DialectRegistry registry;
  registry.insert<SharcDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Errors name the ONNX file and node; a dump of the whole IR function an
  // error is attached to would bury that (sharc-opt still prints it).
  context.printOpOnDiagnostic(false);
  CliDiagnosticHandler diagnostics(&context);

  if (consolidateCommand)
    return runConsolidate();
  if (exportCommand)
    return runExport(context);
  if (configCommand)
    return runConfig();
  if (importCommand)
    return runImport(context);
  if (evalCommand)
    return runEval(context);
  if (compileCommand) {
    FailureOr<LoadedModel> model = loadGivenModel(context);
    if (failed(model))
      return 1;
    return runCompile(context, *model, modelPath, inputShapes, outputPath);
  }
  return fail("no command given; run 'sharc --help'");
}
