//===- Plan.cpp - planning a training program, and within a budget --------===//
//
// planProgram runs the pipelines and the emitter on a model; the
// --memory-budget search plans every candidate configuration that way and
// keeps the fastest that fits (docs/budget.md).
//
//===----------------------------------------------------------------------===//

#include "tools/sharc/Plan.h"

#include "passes/Cost.h"
#include "passes/Passes.h"
#include "runtime/Program.h"
#include "tools/sharc/BuildConfig.h"
#include "tools/sharc/Diagnostics.h"
#include "tools/sharc/Options.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace sharc;

int64_t sharc::deviceBytes(const ProgramReport &report) {
  int64_t bytes = report.arenaBytes + report.stagingBytes;
  for (const ReportBuffer &buffer : report.buffers)
    if (!buffer.offloaded && !buffer.inHost)
      bytes += buffer.bytes;
  return bytes;
}

int64_t sharc::budgetedBytes(const PlannedProgram &plan) {
  // As the binary plans it (its summary line): each buffer's pool bytes.
  bool cpu = plan.emit.target != "cuda";
  const ProgramReport &report = plan.report;
  int64_t bytes = report.arenaBytes + report.stagingBytes;
  for (const ReportBuffer &buffer : report.buffers)
    if (!buffer.offloaded && (!buffer.inHost || cpu))
      bytes += rt::bufferPoolBytes(buffer.bytes);
  if (cpu)
    bytes += report.hostArenaBytes;
  return bytes;
}

FailureOr<PlannedProgram> sharc::planProgram(PassManager &pm, ModuleOp module,
                                             const TrainingOptions &options,
                                             const PlanSettings &settings,
                                             StringRef modelPath, bool train,
                                             TimingScope *timing) {
  PlannedProgram plan;
  plan.options = options;
  plan.nvme = options.offloadOptimizer == OffloadDevice::nvme;
  plan.paramNvme = options.offloadParam == OffloadDevice::nvme;
  // ZeRO-Offload, the CUDA target's way: the optimizer state in host memory
  // (cpu) or read from its files into host memory (nvme), its update on the
  // host, and at stage 3 the parameter slices the gathers read in host
  // memory (offload_param cpu) or read from their files into host memory
  // (offload_param nvme).  On the CPU target only with --host-update
  // (otherwise CPU offload moves nothing there, and NVMe offload reads into
  // the arena).
  bool anyOffload = options.offloadOptimizer != OffloadDevice::none ||
                    options.offloadParam != OffloadDevice::none;
  plan.hostLayout = anyOffload && (settings.cuda || settings.hostUpdate);
  plan.hostUpdate =
      plan.hostLayout && options.offloadOptimizer != OffloadDevice::none;
  plan.paramsOnHost =
      plan.hostLayout && options.offloadParam == OffloadDevice::cpu;
  plan.offload =
      !plan.hostLayout && (options.offloadOptimizer == OffloadDevice::cpu ||
                           options.offloadParam == OffloadDevice::cpu);

  if (train)
    buildTrainPipeline(pm, options);
  buildCompilePipeline(
      pm, settings.fuse, settings.overlapComm.value_or(options.overlapComm),
      {options.maxReuseDistance, options.prefetchBucketSize,
       options.maxLiveParameters},
      {.device = plan.nvme         ? OffloadDevice::nvme
                 : plan.hostUpdate ? OffloadDevice::cpu
                                   : OffloadDevice::none,
       .hostUpdate = plan.hostLayout && (plan.nvme || plan.paramNvme),
       .paramDevice = plan.paramNvme      ? OffloadDevice::nvme
                      : plan.paramsOnHost ? OffloadDevice::cpu
                                          : OffloadDevice::none,
       .subGroupSize = options.subGroupSize,
       .pipelineRead = options.pipelineRead,
       .pipelineWrite = options.pipelineWrite});
  if (failed(pm.run(module)))
    return failure();
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  FailureOr<EmitOptions> programOptions = programOptionsOf(step);
  if (failed(programOptions))
    return failure();
  plan.emit = *programOptions;
  plan.emit.target = settings.cuda ? "cuda" : "cpu";
  plan.emit.model = modelPath.str();
  plan.emit.nvmePath = options.nvmePath;
  plan.emit.aioBlockSize = options.aio.blockSize;
  plan.emit.aioQueueDepth = options.aio.queueDepth;
  plan.emit.aioSingleSubmit = options.aio.singleSubmit;
  plan.emit.aioOverlapEvents = options.aio.overlapEvents;
  plan.emit.sharcVersion = SHARC_VERSION;
  plan.emit.modelHash = settings.modelHash;
  plan.emit.trainingConfig = trainingConfigText(options, plan.emit.microBatch);
  if (options.csvMonitor.enabled)
    plan.emit.csvMonitorFolder = options.csvMonitor.folder();
  if (options.tensorboard.enabled)
    plan.emit.tensorboardFolder = options.tensorboard.folder();
  const MachineModel &machine = machineModel(plan.emit.target);
  double compute = estimateComputeSeconds(step, machine);
  {
    std::optional<TimingScope> emitTiming;
    if (timing)
      emitTiming.emplace(timing->nest("emit-program"));
    llvm::raw_string_ostream os(plan.source);
    if (failed(emitProgram(step, plan.emit, os, plan.report)))
      return failure();
  }
  uint64_t collective = 0;
  for (uint64_t bytes : plan.report.collectiveBytes)
    collective += bytes;
  plan.estimatedSeconds =
      compute + double(collective) / machine.collectiveBytesPerSecond +
      double(plan.report.swapReadBytes + plan.report.swapWriteBytes) /
          machine.nvmeBytesPerSecond +
      double(plan.report.transferBytes) / machine.pcieBytesPerSecond;
  return plan;
}

//===----------------------------------------------------------------------===//
// --memory-budget
//===----------------------------------------------------------------------===//

namespace {

/// One configuration the search plans.
struct Candidate {
  TrainingOptions options;
  /// Rows per micro-batch (the model's when not searched).
  int64_t micro = 0;
  /// Its plan's figures, once planned (bytes 0: not planned, `why` says).
  int64_t bytes = 0;
  double seconds = 0;
  std::string why;
};

std::string offloadName(OffloadDevice device) {
  return device == OffloadDevice::cpu    ? "cpu"
         : device == OffloadDevice::nvme ? "nvme"
                                         : "none";
}

/// A candidate's configuration as the table and the messages name it.
std::string describe(const Candidate &candidate) {
  const TrainingOptions &o = candidate.options;
  std::string text = "ZeRO stage " + std::to_string(o.zeroStage) +
                     ", offload " + offloadName(o.offloadOptimizer);
  if (o.offloadParam != OffloadDevice::none)
    text += " (parameters " + offloadName(o.offloadParam) + ")";
  text += ", micro-batch " + std::to_string(candidate.micro) + " x " +
          std::to_string(o.gradAccum) + ", recompute " + o.recompute;
  if (o.recompute == "auto")
    text += " within " + std::to_string(o.activationMemory) + " bytes";
  return text;
}

/// `shapes` (NAME=D0xD1x...) with every D0 replaced by `micro`.
std::vector<std::string> withMicroBatch(ArrayRef<std::string> shapes,
                                        int64_t micro) {
  std::vector<std::string> result;
  for (const std::string &spec : shapes) {
    StringRef text(spec);
    auto [name, dims] = text.split('=');
    auto [first, rest] = dims.split('x');
    std::string changed = (name + "=" + Twine(micro)).str();
    if (dims.contains('x'))
      changed += ("x" + rest).str();
    result.push_back(first.empty() ? spec : changed);
  }
  return result;
}

} // namespace

FailureOr<PlannedProgram> sharc::searchMemoryBudget(
    MLIRContext &context, LoadedModel &model, StringRef modelPath,
    ArrayRef<std::string> inputShapes, bool shapesOnly,
    const TrainingOptions &base, const PlanSettings &settings,
    const FixedDimensions &fixed, int64_t budget, llvm::raw_ostream &os) {
  const MachineModel &machine = machineModel(settings.cuda ? "cuda" : "cpu");
  // What the runtime holds outside any plan counts against the budget: a
  // plan fits in what is left, `room`.
  int64_t reserve = machine.runtimeReserveBytes;
  int64_t room = budget - reserve;
  os << "plan: --memory-budget " << budget << " bytes per rank: " << room
     << " for the plan, " << reserve << " for the runtime outside it; "
     << base.worldSize << " rank(s); step times estimated for " << machine.name
     << "\n";

  // The candidates' passes would each say what they did (the remarks and
  // warnings of sharc-rematerialize, ...): the table says it once.  Errors
  // still show.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &diagnostic) {
    return success(diagnostic.getSeverity() == DiagnosticSeverity::Remark ||
                   diagnostic.getSeverity() == DiagnosticSeverity::Warning);
  });
  std::optional<PlannedProgram> best;
  std::vector<Candidate> tried;
  size_t chosen = 0;
  auto consider = [&](Candidate &candidate, FailureOr<PlannedProgram> plan) {
    if (failed(plan)) {
      candidate.why = "does not plan (the error above)";
    } else {
      candidate.bytes = budgetedBytes(*plan);
      candidate.seconds = plan->estimatedSeconds;
      if (candidate.bytes <= room &&
          (!best || candidate.seconds < best->estimatedSeconds ||
           (candidate.seconds == best->estimatedSeconds &&
            candidate.bytes < budgetedBytes(*best)))) {
        best = std::move(*plan);
        chosen = tried.size();
      }
    }
    tried.push_back(candidate);
  };

  // The micro-batches: the model's (dimension 0 of its first data input),
  // and with --input-shape (a model whose batch dimension is free) every
  // divisor of the rows a rank takes per step, with the accumulation that
  // keeps them.
  std::string source;
  FailureOr<int64_t> modelMicro = microBatchOf(model.entry, source);
  if (failed(modelMicro))
    return failure();
  int64_t rows = *modelMicro * base.gradAccum;
  SmallVector<std::pair<int64_t, std::vector<std::string>>> micros = {
      {*modelMicro, {}}};
  if (!fixed.microBatch && !inputShapes.empty())
    for (int64_t micro = rows; micro >= 1; --micro)
      if (rows % micro == 0 && micro != micros.front().first)
        micros.push_back({micro, withMicroBatch(inputShapes, micro)});

  SmallVector<int64_t> stages;
  if (fixed.zeroStage || base.worldSize < 2)
    stages.push_back(base.zeroStage);
  else
    stages.append({0, 1, 2, 3});

  for (auto &[micro, shapes] : micros) {
    // The model at this micro-batch (the given one for the first).
    std::optional<LoadedModel> reloaded;
    if (!shapes.empty()) {
      FailureOr<LoadedModel> loaded =
          loadModel(context, modelPath, shapes, shapesOnly, model.hints);
      if (failed(loaded)) {
        Candidate skipped{base, micro};
        skipped.options.gradAccum = rows / micro;
        skipped.why = "the model does not import at this micro-batch";
        tried.push_back(skipped);
        continue;
      }
      reloaded = std::move(*loaded);
    }
    ModuleOp source = reloaded ? *reloaded->module : *model.module;
    for (int64_t stage : stages) {
      // Offload: as given when fixed; else none, and what saves this
      // rank's memory at this stage: NVMe with a folder for it, the CPU on
      // the CUDA target (whose device memory is not the host's).
      SmallVector<std::pair<OffloadDevice, OffloadDevice>> offloads;
      if (fixed.offload) {
        offloads.push_back({base.offloadOptimizer, base.offloadParam});
      } else {
        offloads.push_back({OffloadDevice::none, OffloadDevice::none});
        for (OffloadDevice device : {OffloadDevice::cpu, OffloadDevice::nvme}) {
          if (device == OffloadDevice::cpu && !settings.cuda)
            continue;
          if (device == OffloadDevice::nvme && base.nvmePath.empty())
            continue;
          if (stage >= 1)
            offloads.push_back({device, OffloadDevice::none});
          if (stage == 3)
            offloads.push_back({device, device});
        }
      }
      for (auto [optimizer, param] : offloads) {
        TrainingOptions options = base;
        options.zeroStage = stage;
        options.offloadOptimizer = optimizer;
        options.offloadParam = param;
        options.gradAccum = rows / micro;
        options.recompute = "none";
        options.activationMemory = 0;
        // The train pipeline once; each recomputation policy on a copy.
        OwningOpRef<ModuleOp> trained = source.clone();
        {
          PassManager pm(&context);
          buildTrainPipeline(pm, options);
          if (failed(pm.run(*trained))) {
            Candidate failedCandidate{options, micro};
            consider(failedCandidate, failure());
            continue;
          }
        }
        auto planWith = [&](StringRef policy, int64_t limit) {
          Candidate candidate{options, micro};
          candidate.options.recompute = policy.str();
          candidate.options.activationMemory = limit;
          OwningOpRef<ModuleOp> copy = trained->clone();
          PassManager pm(&context);
          if (policy != "none")
            pm.addPass(createRematerialize({options.function, policy.str(),
                                            limit, options.checkpointsOnHost}));
          consider(candidate, planProgram(pm, *copy, candidate.options,
                                          settings, modelPath, false));
          return tried.back();
        };
        if (fixed.recompute) {
          planWith(base.recompute, base.activationMemory);
          continue;
        }
        Candidate none = planWith("none", 0);
        if (!none.bytes || none.bytes <= room)
          continue;
        planWith("layers", 0);
        // Auto: first at the limit whose fall in activation memory (the
        // pass's estimate) is the excess over the budget; the arena falls
        // less than the estimate, so if that is over, at the least the pass
        // reaches, and if that fits, halfway between the two, twice
        // (fewer FLOPs recomputed the higher the limit).
        auto grad =
            trained->lookupSymbol<func::FuncOp>(options.function + "_grad");
        FailureOr<std::pair<int64_t, int64_t>> range =
            grad ? activationMemoryRange(grad)
                 : FailureOr<std::pair<int64_t, int64_t>>(failure());
        if (failed(range))
          continue;
        auto [most, least] = *range;
        int64_t over = std::max<int64_t>(
            least, std::min(most - 1, most - (none.bytes - room)));
        Candidate first = planWith("auto", over);
        if (!first.bytes || first.bytes <= room || over == least)
          continue;
        Candidate floor = planWith("auto", least);
        if (!floor.bytes || floor.bytes > room)
          continue;
        int64_t fits = least;
        for (int step = 0; step < 2; ++step) {
          int64_t middle = fits + (over - fits) / 2;
          if (middle == fits || middle == over)
            break;
          Candidate half = planWith("auto", middle);
          if (half.bytes && half.bytes <= room)
            fits = middle;
          else
            over = middle;
        }
      }
    }
  }

  // The table.
  os << llvm::formatv(
      "plan: {0,5} {1,-12} {2,-13} {3,-18} {4,14} {5,10}  {6}\n", "stage",
      "offload", "micro x GAS", "recompute", "bytes/rank", "est. ms", "");
  const Candidate *smallest = nullptr;
  for (const Candidate &candidate : tried) {
    const TrainingOptions &o = candidate.options;
    std::string offload = offloadName(o.offloadOptimizer);
    if (o.offloadParam != OffloadDevice::none)
      offload += "+param";
    std::string recompute = o.recompute;
    if (o.recompute == "auto")
      recompute += " " + std::to_string(o.activationMemory);
    std::string batch =
        std::to_string(candidate.micro) + " x " + std::to_string(o.gradAccum);
    bool isChosen = best && &candidate == &tried[chosen];
    if (!candidate.bytes) {
      os << llvm::formatv("plan: {0,5} {1,-12} {2,-13} {3,-18} {4,14} {5,10}  "
                          "{6}\n",
                          o.zeroStage, offload, batch, recompute, "-", "-",
                          candidate.why);
      continue;
    }
    if (!smallest || candidate.bytes < smallest->bytes)
      smallest = &candidate;
    os << llvm::formatv(
        "plan: {0,5} {1,-12} {2,-13} {3,-18} {4,14} {5,10:f1}  {6}\n",
        o.zeroStage, offload, batch, recompute, candidate.bytes,
        candidate.seconds * 1e3,
        isChosen ? "<- chosen"
        : candidate.bytes > room
            ? "over by " + std::to_string(candidate.bytes - room)
            : std::string("fits"));
  }
  os.flush();
  if (!best) {
    if (!smallest) {
      fail("--memory-budget: no configuration could be planned");
      return failure();
    }
    fail("--memory-budget " + Twine(budget) +
         ": nothing fits; the smallest plan (" + describe(*smallest) +
         ") needs " + Twine(smallest->bytes) +
         " bytes per rank and the "
         "runtime " +
         Twine(reserve) + " outside it, " +
         Twine(smallest->bytes + reserve - budget) + " bytes over");
    return failure();
  }
  os << "plan: chosen: " << describe(tried[chosen]) << ", "
     << tried[chosen].bytes << " bytes per rank, estimated "
     << llvm::formatv("{0:f1}", tried[chosen].seconds * 1e3)
     << " ms per step\n";
  os.flush();
  return std::move(*best);
}
