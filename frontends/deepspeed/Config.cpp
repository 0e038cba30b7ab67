//===- Config.cpp - DeepSpeed configuration files -------------------------===//
//
// The keys and their meaning follow DeepSpeed v0.16
// (deepspeed/runtime/config.py, constants.py, lr_schedules.py and
// zero/config.py); docs/config.md documents every rule implemented here.
//
//===----------------------------------------------------------------------===//

#include "frontends/deepspeed/Config.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

using namespace llvm;

namespace sharc {
namespace {

//===----------------------------------------------------------------------===//
// Where each key is in the file
//===----------------------------------------------------------------------===//

/// Line and column (1-based) of a position in the file.
struct Position {
  unsigned line = 0, column = 0;
};

/// Where a key's value is: the position of the key (of the value for array
/// elements) and the value's source text.
struct SourceEntry {
  Position position;
  StringRef text;
};

/// Where values are in text that llvm::json accepted, by their path
/// ("optimizer.params.betas", "optimizer.params.betas[0]"), and the first key
/// repeated within one object (DeepSpeed rejects those; llvm::json keeps the
/// last).  Paths are looked up by scanning the text again (only error
/// messages need them): recording every path up front would take memory
/// quadratic in the file's size (a long key above many values).  The
/// recursion is bounded by checkLimits.
class SourceMap {
public:
  explicit SourceMap(StringRef text) : text(text) {
    lineStarts.push_back(0);
    for (size_t i = 0, e = text.size(); i < e; ++i)
      if (text[i] == '\n')
        lineStarts.push_back(i + 1);
    size_t pos = 0;
    SmallVector<std::string, 8> chain;
    findDuplicate(pos, chain);
  }

  /// The entry of `path`, if the file has that path.
  std::optional<SourceEntry> lookup(StringRef path) const {
    size_t pos = 0;
    return lookupBelow(pos, path, /*root=*/true, StringRef::npos);
  }

  /// The entry of `path` or, failing that, of its closest ancestor.
  std::optional<SourceEntry> find(StringRef path) const {
    while (true) {
      if (std::optional<SourceEntry> entry = lookup(path))
        return entry;
      size_t parent = path.find_last_of(".[");
      if (parent == StringRef::npos)
        return std::nullopt;
      path = path.take_front(parent);
    }
  }

  /// Path and position of the first repeated key, if any.
  std::optional<std::pair<std::string, Position>> duplicate;

  /// Line and column of the byte at `offset`.
  Position positionOf(size_t offset) const {
    auto next = llvm::upper_bound(lineStarts, offset);
    size_t lineIndex = next - lineStarts.begin() - 1;
    return {unsigned(lineIndex + 1),
            unsigned(offset - lineStarts[lineIndex] + 1)};
  }

private:
  void skipSpace(size_t &pos) const {
    while (pos < text.size() && isSpace(text[pos]))
      ++pos;
  }

  /// Consumes a string starting at its opening quote; returns whether it
  /// holds escapes.
  bool skipString(size_t &pos) const {
    bool escaped = false;
    for (++pos; pos < text.size() && text[pos] != '"';) {
      escaped |= text[pos] == '\\';
      pos += text[pos] == '\\' ? 2 : 1;
    }
    ++pos;
    return escaped;
  }

  /// Consumes a key starting at its opening quote; returns its value
  /// (escapes decoded, as in json::Object's keys and so in the paths).
  std::string key(size_t &pos) const {
    size_t start = pos;
    bool escaped = skipString(pos);
    StringRef quoted = text.slice(start, pos);
    if (!escaped)
      return quoted.drop_front().drop_back().str();
    Expected<json::Value> value = json::parse(quoted);
    if (!value) {
      consumeError(value.takeError());
      return quoted.str();
    }
    return value->getAsString().value_or("").str();
  }

  /// Calls `member(keyOffset, key)` for each member of the object at `pos`
  /// (the member consumes its value), or `element(index)` for each element of
  /// the array at `pos`, or skips a scalar.  Stops early when the callback
  /// returns true; returns whether one did.
  template <typename Member, typename Element>
  bool visit(size_t &pos, Member member, Element element) const {
    skipSpace(pos);
    if (pos >= text.size())
      return false;
    char open = text[pos];
    if (open == '"') {
      skipString(pos);
      return false;
    }
    if (open != '{' && open != '[') {
      while (pos < text.size() && !StringRef(",]} \t\r\n").contains(text[pos]))
        ++pos;
      return false;
    }
    ++pos;
    char close = open == '{' ? '}' : ']';
    unsigned index = 0;
    while (true) {
      skipSpace(pos);
      if (pos >= text.size())
        return false;
      if (text[pos] == close) {
        ++pos;
        return false;
      }
      if (text[pos] == ',') {
        ++pos;
        continue;
      }
      if (open == '[') {
        if (element(index++))
          return true;
        continue;
      }
      size_t keyOffset = pos;
      std::string name = key(pos);
      skipSpace(pos);
      ++pos; // ':'
      if (member(keyOffset, name))
        return true;
    }
  }

  /// Skips the value at `pos`.
  void skip(size_t &pos) const {
    visit(
        pos,
        [&](size_t, StringRef) {
          skip(pos);
          return false;
        },
        [&](unsigned) {
          skip(pos);
          return false;
        });
  }

  /// Looks for `rest` (what remains of the path) in the value at `pos`, whose
  /// key starts at `keyOffset` (npos: the value's own start).
  std::optional<SourceEntry> lookupBelow(size_t &pos, StringRef rest, bool root,
                                         size_t keyOffset) const {
    skipSpace(pos);
    size_t start = pos;
    if (rest.empty() && !root) {
      skip(pos);
      return SourceEntry{
          positionOf(keyOffset == StringRef::npos ? start : keyOffset),
          text.slice(start, pos)};
    }
    std::optional<SourceEntry> found;
    // A child is on the path when `rest` continues with its key or index and
    // then ends or goes on with '.' or '['; the search descends into it (a
    // key may contain '.', so a child on the path may still not hold it).
    auto child = [&](bool matches, StringRef after, size_t childKeyOffset) {
      if (!matches || (!after.empty() && after[0] != '.' && after[0] != '[')) {
        skip(pos);
        return false;
      }
      found = lookupBelow(pos, after, /*root=*/false, childKeyOffset);
      return found.has_value();
    };
    visit(
        pos,
        [&](size_t childKeyOffset, StringRef key) {
          StringRef after = rest;
          bool matches =
              (root || after.consume_front(".")) && after.consume_front(key);
          return child(matches, after, childKeyOffset);
        },
        [&](unsigned index) {
          StringRef after = rest;
          bool matches = after.consume_front("[" + std::to_string(index) + "]");
          return child(matches, after, StringRef::npos);
        });
    return found;
  }

  /// Records the first key given twice in one object, in the value at `pos`
  /// whose path is `chain` joined.
  void findDuplicate(size_t &pos, SmallVectorImpl<std::string> &chain) {
    StringSet<> seen;
    visit(
        pos,
        [&](size_t keyOffset, StringRef key) {
          chain.push_back((chain.empty() ? "" : ".") + key.str());
          if (!seen.insert(key).second && !duplicate)
            duplicate = {llvm::join(chain, ""), positionOf(keyOffset)};
          findDuplicate(pos, chain);
          chain.pop_back();
          return duplicate.has_value();
        },
        [&](unsigned index) {
          chain.push_back("[" + std::to_string(index) + "]");
          findDuplicate(pos, chain);
          chain.pop_back();
          return duplicate.has_value();
        });
  }

  StringRef text;
  std::vector<size_t> lineStarts;
};

//===----------------------------------------------------------------------===//
// Value descriptions
//===----------------------------------------------------------------------===//

std::string formatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

/// `source`, the text of a value in the file, shortened when long.
std::string shorten(StringRef source) {
  std::string text = source.str();
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

StringRef kindName(const json::Value &value) {
  switch (value.kind()) {
  case json::Value::Null:
    return "null";
  case json::Value::Boolean:
    return "a boolean";
  case json::Value::Number:
    return "a number";
  case json::Value::String:
    return "a string";
  case json::Value::Array:
    return "an array";
  case json::Value::Object:
    return "an object";
  }
  llvm_unreachable("unknown JSON kind");
}

/// An allowed interval of numbers.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool loOpen = false, hiOpen = false;

  bool contains(double value) const {
    return (loOpen ? value > lo : value >= lo) &&
           (hiOpen ? value < hi : value <= hi);
  }

  /// "a number >= 0", "a number in [0, 1)", "an integer >= 1".
  std::string describe(bool integer) const {
    std::string what = integer ? "an integer" : "a number";
    bool hasLo = std::isfinite(lo), hasHi = std::isfinite(hi);
    if (hasLo && hasHi)
      return what + " in " + (loOpen ? "(" : "[") + formatNumber(lo) + ", " +
             formatNumber(hi) + (hiOpen ? ")" : "]");
    if (hasLo)
      return what + (loOpen ? " > " : " >= ") + formatNumber(lo);
    if (hasHi)
      return what + (hiOpen ? " < " : " <= ") + formatNumber(hi);
    return what;
  }
};

const Range nonNegative{0.0};
const Range positive{0.0, std::numeric_limits<double>::infinity(), true};
const Range unitInterval{0.0, 1.0};
const Range beta{0.0, 1.0, false, true};
const Range atLeastOne{1.0};
const Range atLeastMinusOne{-1.0};

/// The closest of `known` to `key` by edit distance, if close enough to be a
/// plausible misspelling.
std::optional<StringRef> closest(StringRef key, ArrayRef<StringRef> known) {
  std::optional<StringRef> best;
  unsigned bestDistance = std::max<size_t>(2, key.size() / 3) + 1;
  for (StringRef candidate : known) {
    unsigned distance = key.edit_distance_insensitive(
        candidate, /*AllowReplacements=*/true, bestDistance);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  return best;
}

/// Keys of an object in sorted order, so that the first error reported does
/// not depend on hashing.
SmallVector<StringRef> sortedKeys(const json::Object &object) {
  SmallVector<StringRef> keys;
  for (const auto &entry : object)
    keys.push_back(entry.first);
  llvm::sort(keys);
  return keys;
}

std::string childPath(StringRef parent, StringRef key) {
  return parent.empty() ? key.str() : (parent + "." + key).str();
}

//===----------------------------------------------------------------------===//
// DeepSpeed keys sharc does not implement yet
//===----------------------------------------------------------------------===//

/// When a not-yet-supported key is harmless: its value leaves the feature off.
enum class OffWhen {
  never,        // any use is rejected
  enabledFalse, // an object whose "enabled" is false or absent
  isFalse,      // the boolean false
  isOne,        // the number 1
  isNull,       // null
};

struct LaterKey {
  StringLiteral key;
  StringLiteral feature;
  OffWhen off;
};

// Top-level keys of DeepSpeed's config.py / constants.py and of its feature
// configs (monitor, profiler, autotuning, elasticity, compression, data
// efficiency, ...).
const LaterKey laterKeys[] = {
    {"amp", "Apex AMP mixed precision", OffWhen::enabledFalse},
    {"zero_force_ds_cpu_optimizer", "ZeRO-Offload's CPU optimizer",
     OffWhen::never},
    {"steps_per_print", "periodic progress reports", OffWhen::never},
    {"wall_clock_breakdown", "timing breakdowns", OffWhen::isFalse},
    {"memory_breakdown", "memory breakdowns", OffWhen::isFalse},
    {"flops_profiler", "the FLOPs profiler", OffWhen::enabledFalse},
    {"communication_data_type", "a communication data type", OffWhen::isNull},
    {"seq_parallel_communication_data_type",
     "a sequence-parallel communication data type", OffWhen::never},
    {"prescale_gradients", "gradient prescaling", OffWhen::isFalse},
    {"gradient_predivide_factor", "gradient predivision", OffWhen::isOne},
    {"sparse_gradients", "sparse gradients", OffWhen::isFalse},
    {"disable_allgather", "disabling all-gather", OffWhen::isFalse},
    {"dump_state", "dumping DeepSpeed's state", OffWhen::isFalse},
    {"sparse_attention", "sparse attention", OffWhen::never},
    {"pipeline", "pipeline parallelism", OffWhen::never},
    {"wandb", "Weights & Biases monitoring", OffWhen::enabledFalse},
    {"comet", "Comet monitoring", OffWhen::enabledFalse},
    {"comms_logger", "the communication logger", OffWhen::enabledFalse},
    {"autotuning", "autotuning", OffWhen::enabledFalse},
    {"eigenvalue", "eigenvalue computation", OffWhen::enabledFalse},
    {"progressive_layer_drop", "progressive layer drop", OffWhen::enabledFalse},
    {"curriculum_learning", "curriculum learning", OffWhen::enabledFalse},
    {"data_efficiency", "data efficiency", OffWhen::enabledFalse},
    {"elasticity", "elastic training", OffWhen::enabledFalse},
    {"hybrid_engine", "the hybrid engine", OffWhen::enabledFalse},
    {"nebula", "Nebula checkpointing", OffWhen::enabledFalse},
    {"checkpoint", "checkpoint options", OffWhen::never},
    {"data_types", "gradient-accumulation data types", OffWhen::never},
    {"compression_training", "compression training", OffWhen::never},
    {"quantize_training", "quantization-aware training", OffWhen::enabledFalse},
    {"weight_quantization", "weight quantization", OffWhen::never},
    {"dataloader_drop_last", "dropping the last incomplete batch",
     OffWhen::isFalse},
    {"vocabulary_size", "vocabulary-size alignment checks", OffWhen::never},
};

const StringLiteral supportedTopKeys[] = {"train_batch_size",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "gradient_clipping",
                                          "optimizer",
                                          "scheduler"};

/// Keys of zero_optimization that sharc reads (sub_group_size at every stage,
/// allgather_bucket_size, reduce_scatter and allgather_partitions from stage 1
/// on, the stage-3 knobs and their aliases at stage 3).
const StringLiteral zeroReadKeys[] = {"stage",
                                      "reduce_bucket_size",
                                      "overlap_comm",
                                      "sub_group_size",
                                      "reduce_scatter",
                                      "allgather_partitions",
                                      "allgather_bucket_size",
                                      "stage3_param_persistence_threshold",
                                      "param_persistence_threshold",
                                      "stage3_max_reuse_distance",
                                      "max_reuse_distance",
                                      "stage3_prefetch_bucket_size",
                                      "prefetch_bucket_size",
                                      "stage3_max_live_parameters",
                                      "max_live_parameters"};

/// Keys of DeepSpeed 0.19.8's DeepSpeedZeroConfig (runtime/zero/config.py,
/// names and aliases) that tune how ZeRO stages 2 and 3 (or options of
/// stage 1 that only change speed) partition, gather and check: DeepSpeed
/// uses none of them at stage 0, and sharc none at stages 0 to 2
/// (`contiguous_gradients` is moot with sharc's static arena).
const StringLiteral zeroPartitioningKeys[] = {
    "contiguous_gradients",
    "use_multi_rank_bucket_allreduce",
    "compute_grad_norm",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "model_persistence_threshold",
    "stage3_model_persistence_threshold",
    "gather_16bit_weights_on_model_save",
    "stage3_gather_16bit_weights_on_model_save",
    "module_granularity_threshold",
    "stage3_module_granularity_threshold",
    "use_all_reduce_for_fetch_params",
    "stage3_use_all_reduce_for_fetch_params",
    "allgather_sequential",
    "stage3_allgather_sequential",
    "stage3_gather_fp16_weights_on_model_save",
    "ignore_unused_parameters",
    "legacy_stage1",
    "round_robin_gradients",
    "parameter_alignment",
    "memory_efficient_linear",
    "pipeline_loading_checkpoint",
    "override_module_apply",
    "log_trace_cache_warnings",
    "enable_sanity_checks",
    "save_muon_momentum_buffer_in_memory",
    "leaf_module"};

/// Keys of zero_optimization that DeepSpeed deprecated, and their successors.
struct DeprecatedKey {
  StringLiteral key;
  StringLiteral replacement;
  /// The key of zero_optimization it sets ("" for none).
  StringLiteral successor;
};
const DeprecatedKey deprecatedZeroKeys[] = {
    {"cpu_offload",
     "zero_optimization.offload_optimizer: {\"device\": \"cpu\"} when true",
     "offload_optimizer"},
    {"cpu_offload_param",
     "zero_optimization.offload_param: {\"device\": \"cpu\"} when true",
     "offload_param"},
    {"cpu_offload_use_pin_memory",
     "\"pin_memory\" inside zero_optimization.offload_optimizer / "
     "offload_param (it has no effect of its own)",
     ""},
};

/// Keys of DeepSpeed 0.19.8's offload blocks (runtime/zero/offload_config.py).
const StringLiteral offloadOptimizerKeys[] = {
    "device",        "nvme_path",         "buffer_count", "pin_memory",
    "pipeline_read", "pipeline_write",    "fast_init",    "ratio",
    "super_offload", "cpuadam_cores_perc"};
const StringLiteral offloadParamKeys[] = {"device",       "nvme_path",
                                          "buffer_count", "buffer_size",
                                          "max_in_cpu",   "pin_memory"};

/// Keys of DeepSpeed 0.19.8's `aio` block (runtime/swap_tensor/constants.py),
/// and thread_count, intra_op_parallelism's name in earlier releases.
const StringLiteral aioKeys[] = {
    "block_size",     "queue_depth", "intra_op_parallelism", "single_submit",
    "overlap_events", "use_gds",     "thread_count"};

/// What NVMe offload aligns every request's offset, length and memory to
/// (O_DIRECT; rt::kSwapAlignment in runtime/Program.h).
constexpr int64_t kAioAlignment = 4096;
/// The largest aio.block_size: Linux moves at most 2 GiB - 4 KiB per read or
/// write, so larger requests would come back short.
constexpr int64_t kMaxAioBlockSize = int64_t(1) << 30;
/// The largest aio.queue_depth (io_uring's queues hold at most 32768
/// entries; DeepSpeed's default is 8).
constexpr int64_t kMaxAioQueueDepth = 4096;

//===----------------------------------------------------------------------===//
// Optimizers and schedules
//===----------------------------------------------------------------------===//

/// DeepSpeed's own optimizers (matched case-insensitively) and common
/// torch.optim ones that sharc does not implement yet.
const StringLiteral laterOptimizers[] = {
    "Adagrad",  "Lamb",    "OneBitAdam", "ZeroOneAdam", "OneBitLamb",
    "MuAdam",   "MuAdamW", "MuSGD",      "Lion",        "RMSprop",
    "Adadelta", "Adamax",  "NAdam",      "RAdam",       "ASGD",
    "Rprop",    "LBFGS",   "SparseAdam"};

const StringLiteral adamParams[] = {
    "lr",          "betas",   "eps",        "weight_decay",  "bias_correction",
    "adam_w_mode", "amsgrad", "torch_adam", "max_grad_norm", "set_grad_none"};
const StringLiteral sgdParams[] = {
    "lr",       "momentum", "dampening",      "weight_decay", "nesterov",
    "maximize", "foreach",  "differentiable", "fused"};

const StringLiteral warmupParams[] = {"warmup_min_lr", "warmup_max_lr",
                                      "warmup_num_steps", "warmup_type",
                                      "last_batch_iteration"};
const StringLiteral warmupDecayParams[] = {
    "warmup_min_lr", "warmup_max_lr",        "warmup_num_steps",
    "warmup_type",   "last_batch_iteration", "total_num_steps"};
const StringLiteral warmupCosineParams[] = {
    "total_num_steps", "warmup_min_ratio", "warmup_num_steps",
    "cos_min_ratio",   "warmup_type",      "last_batch_iteration"};
const StringLiteral oneCycleParams[] = {"cycle_min_lr",
                                        "cycle_max_lr",
                                        "decay_lr_rate",
                                        "cycle_first_step_size",
                                        "cycle_second_step_size",
                                        "cycle_first_stair_count",
                                        "cycle_second_stair_count",
                                        "decay_step_size",
                                        "cycle_momentum",
                                        "cycle_min_mom",
                                        "cycle_max_mom",
                                        "decay_mom_rate",
                                        "last_batch_iteration"};
const StringLiteral lrRangeTestParams[] = {
    "lr_range_test_min_lr", "lr_range_test_step_rate",
    "lr_range_test_step_size", "lr_range_test_staircase",
    "last_batch_iteration"};

/// DeepSpeed's schedules: scheduler.type, the kind, its parameters.
struct ScheduleType {
  StringLiteral name;
  SchedulerKind kind;
  ArrayRef<StringLiteral> params;
};
const ScheduleType scheduleTypes[] = {
    {"WarmupLR", SchedulerKind::warmupLR, warmupParams},
    {"WarmupDecayLR", SchedulerKind::warmupDecayLR, warmupDecayParams},
    {"WarmupCosineLR", SchedulerKind::warmupCosineLR, warmupCosineParams},
    {"OneCycle", SchedulerKind::oneCycle, oneCycleParams},
    {"LRRangeTest", SchedulerKind::lrRangeTest, lrRangeTestParams},
};

/// The schedules' floating-point parameters: key, field, allowed values.
struct RealScheduleParam {
  StringLiteral name;
  double SchedulerOptions::*field;
  const Range *range;
};
const RealScheduleParam realScheduleParams[] = {
    {"warmup_min_lr", &SchedulerOptions::warmupMinLr, &nonNegative},
    {"warmup_max_lr", &SchedulerOptions::warmupMaxLr, &nonNegative},
    {"warmup_min_ratio", &SchedulerOptions::warmupMinRatio, &unitInterval},
    {"cos_min_ratio", &SchedulerOptions::cosMinRatio, &unitInterval},
    {"cycle_min_lr", &SchedulerOptions::cycleMinLr, &nonNegative},
    {"cycle_max_lr", &SchedulerOptions::cycleMaxLr, &nonNegative},
    {"decay_lr_rate", &SchedulerOptions::decayLrRate, &nonNegative},
    {"lr_range_test_min_lr", &SchedulerOptions::lrRangeTestMinLr, &nonNegative},
    {"lr_range_test_step_rate", &SchedulerOptions::lrRangeTestStepRate,
     &nonNegative},
    {"cycle_min_mom", &SchedulerOptions::cycleMinMom, &beta},
    {"cycle_max_mom", &SchedulerOptions::cycleMaxMom, &beta},
    {"decay_mom_rate", &SchedulerOptions::decayMomRate, &nonNegative},
};

/// The schedules' integer parameters; those marked nullable accept null for
/// "same as the first half of the cycle" (DeepSpeed's None, stored as -1).
struct IntegerScheduleParam {
  StringLiteral name;
  int64_t SchedulerOptions::*field;
  const Range *range;
  bool nullable;
};
const IntegerScheduleParam integerScheduleParams[] = {
    {"warmup_num_steps", &SchedulerOptions::warmupNumSteps, &nonNegative,
     false},
    {"total_num_steps", &SchedulerOptions::totalNumSteps, &atLeastOne, false},
    {"cycle_first_step_size", &SchedulerOptions::cycleFirstStepSize,
     &atLeastOne, false},
    {"cycle_second_step_size", &SchedulerOptions::cycleSecondStepSize,
     &atLeastOne, true},
    {"cycle_first_stair_count", &SchedulerOptions::cycleFirstStairCount,
     &nonNegative, false},
    {"cycle_second_stair_count", &SchedulerOptions::cycleSecondStairCount,
     &nonNegative, true},
    {"decay_step_size", &SchedulerOptions::decayStepSize, &nonNegative, false},
    {"lr_range_test_step_size", &SchedulerOptions::lrRangeTestStepSize,
     &atLeastOne, false},
};

template <size_t N>
SmallVector<StringRef> refs(const StringLiteral (&list)[N]) {
  return SmallVector<StringRef>(std::begin(list), std::end(list));
}

//===----------------------------------------------------------------------===//
// The reader
//===----------------------------------------------------------------------===//

class ConfigReader {
public:
  ConfigReader(StringRef fileName, const SourceMap &source,
               DeepSpeedConfig &config)
      : fileName(fileName), source(source), config(config),
        options(config.training), defaultNvmePath(options.nvmePath) {}

  Error read(const json::Value &root);

private:
  /// "FILE:LINE:COL: PATH: message" (position of the key when known).
  Error fail(StringRef path, const Twine &message) const {
    std::string where = fileName.str();
    if (std::optional<SourceEntry> entry = source.find(path))
      where += formatv(":{0}:{1}", entry->position.line, entry->position.column)
                   .str();
    return createStringError(inconvertibleErrorCode(),
                             where + ": " + path + ": " + message);
  }

  /// Records a warning "FILE:LINE:COL: PATH: message".
  void warn(StringRef path, const Twine &message) {
    std::string where = fileName.str();
    if (std::optional<SourceEntry> entry = source.find(path))
      where += formatv(":{0}:{1}", entry->position.line, entry->position.column)
                   .str();
    config.warnings.push_back(where + ": " + path.str() + ": " + message.str());
  }

  /// The value of `path` as written in the file.
  std::string render(StringRef path, const json::Value &value) const {
    if (std::optional<SourceEntry> entry = source.lookup(path))
      return shorten(entry->text);
    return shorten(formatv("{0}", value).str());
  }

  Error unknownKey(StringRef path, StringRef key, ArrayRef<StringRef> known,
                   bool listKnown) const {
    std::string message = "unknown key";
    if (std::optional<StringRef> guess = closest(key, known))
      message += "; did you mean '" + guess->str() + "'?";
    if (listKnown)
      message += " (known keys: " + llvm::join(known, ", ") + ")";
    return fail(path, message);
  }

  Error wrongType(StringRef path, const json::Value &value,
                  StringRef expected) const {
    std::string message =
        "expected " + expected.str() + ", got " + render(path, value);
    bool numeric = expected.contains("number") || expected.contains("integer");
    if (value.kind() != json::Value::Number || !numeric)
      message += " (" + kindName(value).str() + ")";
    if (std::optional<StringRef> text = value.getAsString();
        text && *text == "auto")
      message += "; 'auto' is filled in by the Hugging Face Trainer's "
                 "DeepSpeed integration, not by DeepSpeed itself";
    return fail(path, message);
  }

  Expected<double> number(StringRef path, const json::Value &value,
                          const Range &range) const {
    std::optional<double> number = value.getAsNumber();
    // 1e999 reads as infinity: no setting takes one.
    if (!number || !range.contains(*number) || !std::isfinite(*number))
      return wrongType(path, value, range.describe(false));
    return *number;
  }

  Expected<int64_t> integer(StringRef path, const json::Value &value,
                            const Range &range) const {
    std::optional<int64_t> number = value.getAsInteger();
    if (!number || !range.contains(double(*number)))
      return wrongType(path, value, range.describe(true));
    return *number;
  }

  Expected<bool> boolean(StringRef path, const json::Value &value) const {
    if (std::optional<bool> flag = value.getAsBoolean())
      return *flag;
    return wrongType(path, value, "a boolean (true or false)");
  }

  Expected<StringRef> string(StringRef path, const json::Value &value) const {
    if (std::optional<StringRef> text = value.getAsString())
      return *text;
    return wrongType(path, value, "a string");
  }

  Expected<const json::Object *> object(StringRef path,
                                        const json::Value &value) const {
    if (const json::Object *object = value.getAsObject())
      return object;
    return wrongType(path, value, "an object");
  }

  /// Reads an optional positive integer (null: absent).
  Error batchSize(const json::Object &top, StringRef key,
                  std::optional<int64_t> &out) const {
    const json::Value *value = top.get(key);
    if (!value || value->kind() == json::Value::Null)
      return Error::success();
    Expected<int64_t> size = integer(key, *value, atLeastOne);
    if (!size)
      return size.takeError();
    out = *size;
    return Error::success();
  }

  Error checkTopKey(StringRef key, const json::Value &value);
  Error readFp16(const json::Value &value);
  Error readBf16(StringRef key, const json::Value &value);
  Error checkPrecision();
  Error readZero(const json::Value &value);
  Error readOffload(StringRef key, const json::Value &value);
  Error readAio(const json::Value &value);
  Error readActivationCheckpointing(const json::Value &value);
  Error readMonitor(StringRef key, const json::Value &value);
  Error readOptimizer(const json::Value &value);
  Error readAdamParams(StringRef path, const json::Object &params);
  Error readSgdParams(StringRef path, const json::Object &params);
  Error readScheduler(const json::Value &value);
  Error readScheduleParam(StringRef path, StringRef key,
                          const json::Value &value);

  StringRef fileName;
  const SourceMap &source;
  DeepSpeedConfig &config;
  TrainingOptions &options;
  /// The optimizer type as written in the config ("AdamW" by default).
  std::string optimizerName = "AdamW";
  /// The `enabled` of the fp16 and bf16 blocks, and the key of the latter
  /// ("bf16", or its old name "bfloat16").
  bool fp16Enabled = false, bf16Enabled = false;
  std::string bf16Key = "bf16";
  /// The path of the nvme_path key of the offload block with device nvme
  /// that set options.nvmePath, if any (sharc keeps a rank's files in one
  /// folder: a second such block must name the same).
  std::string nvmePathKey;
  /// The folder the defaults name (the CLI's --nvme-path), if any.
  std::string defaultNvmePath;
};

Error ConfigReader::read(const json::Value &root) {
  const json::Object *top = root.getAsObject();
  if (!top)
    return createStringError(inconvertibleErrorCode(),
                             fileName +
                                 ": expected a JSON object at the top "
                                 "level, got " +
                                 kindName(root));
  for (StringRef key : sortedKeys(*top))
    if (Error error = checkTopKey(key, *top->get(key)))
      return error;
  if (Error error = checkPrecision())
    return error;

  if (Error error =
          batchSize(*top, "train_batch_size", config.batch.trainBatchSize))
    return error;
  if (Error error = batchSize(*top, "train_micro_batch_size_per_gpu",
                              config.batch.microBatchPerGpu))
    return error;
  if (Error error = batchSize(*top, "gradient_accumulation_steps",
                              config.batch.gradAccumSteps))
    return error;
  // DeepSpeed 0.19.8 clips at 1.0 when the config names no threshold
  // (runtime/constants.py, GRADIENT_CLIPPING_DEFAULT), fp32 training
  // included; releases before it defaulted to 0.
  options.clip = kDeepSpeedDefaultClip;
  if (const json::Value *value = top->get("gradient_clipping")) {
    Expected<double> clip = number("gradient_clipping", *value, nonNegative);
    if (!clip)
      return clip.takeError();
    options.clip = *clip;
  }
  if (const json::Value *value = top->get("optimizer"))
    if (Error error = readOptimizer(*value))
      return error;
  if (const json::Value *value = top->get("scheduler"))
    if (Error error = readScheduler(*value))
      return error;
  return Error::success();
}

/// Rejects unknown, deprecated and not-yet-supported top-level keys.
Error ConfigReader::checkTopKey(StringRef key, const json::Value &value) {
  if (llvm::is_contained(supportedTopKeys, key))
    return Error::success();
  if (key == "zero_optimization")
    return readZero(value);
  if (key == "fp16")
    return readFp16(value);
  if (key == "bf16" || key == "bfloat16")
    return readBf16(key, value);
  if (key == "aio")
    return readAio(value);
  if (key == "activation_checkpointing")
    return readActivationCheckpointing(value);
  if (key == "csv_monitor" || key == "tensorboard")
    return readMonitor(key, value);
  // DeepSpeed lets a client optimizer (one it did not build from the
  // config) run under ZeRO only with this set; sharc always builds the
  // optimizer from the config or the flags, so either value means the same.
  if (key == "zero_allow_untested_optimizer") {
    Expected<bool> parsed = boolean(key, value);
    return parsed ? Error::success() : parsed.takeError();
  }
  for (const DeprecatedKey &deprecated : deprecatedZeroKeys)
    if (key == deprecated.key)
      return fail(key, "a deprecated key of zero_optimization, not of the "
                       "top level; DeepSpeed replaced it with " +
                           deprecated.replacement);
  for (const LaterKey &later : laterKeys) {
    if (key != later.key)
      continue;
    bool off = false;
    switch (later.off) {
    case OffWhen::never:
      break;
    case OffWhen::enabledFalse: {
      Expected<const json::Object *> block = object(key, value);
      if (!block)
        return block.takeError();
      const json::Value *enabled = (*block)->get("enabled");
      if (!enabled) {
        off = true;
        break;
      }
      Expected<bool> flag = boolean(childPath(key, "enabled"), *enabled);
      if (!flag)
        return flag.takeError();
      off = !*flag;
      break;
    }
    case OffWhen::isFalse:
      off = value.getAsBoolean() == std::optional<bool>(false);
      break;
    case OffWhen::isOne:
      off = value.getAsNumber() == std::optional<double>(1.0);
      break;
    case OffWhen::isNull:
      off = value.kind() == json::Value::Null;
      break;
    }
    if (off)
      return Error::success();
    // Weights & Biases logs to its web service, which a training run here
    // cannot reach: never supported (the other monitors and --metrics log
    // locally).
    if (key == "wandb")
      return fail(key, "not supported: Weights & Biases logs to its network "
                       "service; use tensorboard or csv_monitor, or the "
                       "training binary's --metrics FILE.jsonl "
                       "(tools/plot-metrics.py plots them)");
    return fail(key, "not supported yet (" + later.feature + ")");
  }
  SmallVector<StringRef> known = refs(supportedTopKeys);
  for (const LaterKey &later : laterKeys)
    known.push_back(later.key);
  known.push_back("zero_optimization");
  known.append({"fp16", "bf16", "bfloat16", "aio", "activation_checkpointing",
                "csv_monitor", "tensorboard"});
  return unknownKey(key, key, known, /*listKnown=*/false);
}

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

// DeepSpeed 0.19.8's DeepSpeedFP16Config and DeepSpeedBF16Config
// (runtime/precision_config.py), key for key.
const StringLiteral fp16Keys[] = {"enabled",
                                  "auto_cast",
                                  "loss_scale",
                                  "initial_scale_power",
                                  "loss_scale_window",
                                  "hysteresis",
                                  "consecutive_hysteresis",
                                  "min_loss_scale",
                                  "fp16_master_weights_and_grads"};
const StringLiteral bf16Keys[] = {
    "enabled", "immediate_grad_update", "check_grad_overflow",
    "bf16_master_weights_and_grads", "bf16_optimizer_states"};

/// torch.optim.AdamW's weight decay, which DeepSpeed's torch_adam gets when
/// the config sets none.
constexpr double kTorchAdamWDefaultWeightDecay = 0.01;

Error ConfigReader::readFp16(const json::Value &value) {
  Expected<const json::Object *> block = object("fp16", value);
  if (!block)
    return block.takeError();
  PrecisionOptions &precision = options.mixedPrecision;
  LossScaleOptions &scaler = precision.lossScale;
  for (StringRef key : sortedKeys(**block)) {
    std::string path = childPath("fp16", key);
    const json::Value &item = *(*block)->get(key);
    if (!llvm::is_contained(fp16Keys, key))
      return unknownKey(path, key, refs(fp16Keys), /*listKnown=*/true);
    if (key == "enabled" || key == "consecutive_hysteresis" ||
        key == "auto_cast" || key == "fp16_master_weights_and_grads") {
      Expected<bool> flag = boolean(path, item);
      if (!flag)
        return flag.takeError();
      if (key == "enabled")
        fp16Enabled = *flag;
      else if (key == "consecutive_hysteresis")
        scaler.consecutiveHysteresis = *flag;
      else if (*flag)
        return fail(path, key == "auto_cast"
                              ? "not supported (sharc casts inside the "
                                "training step, never the inputs)"
                              : "not supported (master weights stay fp32)");
      continue;
    }
    if (key == "loss_scale") {
      Expected<double> scale = number(path, item, nonNegative);
      if (!scale)
        return scale.takeError();
      precision.staticLossScale = *scale;
      continue;
    }
    // initial_scale_power, loss_scale_window, hysteresis, min_loss_scale:
    // integers, as DeepSpeed declares them.
    Range range =
        key == "initial_scale_power"
            ? Range{0.0, double(LossScaleOptions::kMaxInitialScalePower)}
            : atLeastOne;
    Expected<int64_t> parsed = integer(path, item, range);
    if (!parsed)
      return parsed.takeError();
    if (key == "initial_scale_power")
      scaler.initialScale = std::ldexp(1.0, int(*parsed));
    else if (key == "loss_scale_window")
      scaler.window = *parsed;
    else if (key == "hysteresis")
      scaler.hysteresis = *parsed;
    else
      scaler.minScale = double(*parsed);
  }
  return Error::success();
}

Error ConfigReader::readBf16(StringRef key, const json::Value &value) {
  bf16Key = key.str();
  Expected<const json::Object *> block = object(key, value);
  if (!block)
    return block.takeError();
  for (StringRef name : sortedKeys(**block)) {
    std::string path = childPath(key, name);
    if (!llvm::is_contained(bf16Keys, name))
      return unknownKey(path, name, refs(bf16Keys), /*listKnown=*/true);
    Expected<bool> flag = boolean(path, *(*block)->get(name));
    if (!flag)
      return flag.takeError();
    if (name == "enabled")
      bf16Enabled = *flag;
    else if (name == "check_grad_overflow")
      options.mixedPrecision.bf16CheckOverflow = *flag;
    else if (*flag)
      return fail(path, name == "immediate_grad_update"
                            ? "not supported (ZeRO's immediate bf16 update)"
                            : "not supported (master weights and optimizer "
                              "state stay fp32)");
  }
  return Error::success();
}

Error ConfigReader::checkPrecision() {
  if (fp16Enabled && bf16Enabled)
    return fail(bf16Key, "bfloat16 and fp16 modes cannot be simultaneously "
                         "enabled (as in DeepSpeed)");
  if (fp16Enabled)
    options.mixedPrecision.precision = Precision::fp16;
  else if (bf16Enabled)
    options.mixedPrecision.precision = Precision::bf16;
  return Error::success();
}

/// zero_optimization.offload_optimizer / offload_param: null or an object
/// of DeepSpeed's keys (each checked, an unknown one named with a guess);
/// `device` none, cpu or nvme (which needs `nvme_path` unless the reader's
/// defaults have one; both blocks on NVMe name the same folder).  Where the
/// state goes is recorded; whether the stage and the target allow it is
/// checked once the flags are applied (resolveTrainingOptions in
/// tools/sharc).
Error ConfigReader::readOffload(StringRef key, const json::Value &value) {
  std::string path = childPath("zero_optimization", key);
  if (value.kind() == json::Value::Null)
    return Error::success();
  Expected<const json::Object *> block = object(path, value);
  if (!block)
    return block.takeError();
  bool optimizer = key == "offload_optimizer";
  SmallVector<StringRef> known =
      optimizer ? refs(offloadOptimizerKeys) : refs(offloadParamKeys);
  OffloadDevice device = OffloadDevice::none;
  std::string blockPath;
  for (StringRef name : sortedKeys(**block)) {
    std::string itemPath = childPath(path, name);
    const json::Value &item = *(*block)->get(name);
    if (!llvm::is_contained(known, name))
      return unknownKey(itemPath, name, known, /*listKnown=*/true);
    if (name == "device") {
      Expected<StringRef> text = string(itemPath, item);
      if (!text)
        return text.takeError();
      if (*text == "cpu")
        device = OffloadDevice::cpu;
      else if (*text == "nvme")
        device = OffloadDevice::nvme;
      else if (*text != "none")
        return fail(itemPath, "expected \"none\", \"cpu\" or \"nvme\", got " +
                                  render(itemPath, item));
    } else if (name == "nvme_path") {
      // DeepSpeed's Optional[Path]: null is absent.
      if (item.kind() == json::Value::Null)
        continue;
      Expected<StringRef> text = string(itemPath, item);
      if (!text)
        return text.takeError();
      if (text->empty())
        return fail(itemPath, "expected the path of a folder, got \"\"");
      if (text->contains('\0'))
        return fail(itemPath, "a path cannot hold the character NUL");
      blockPath = text->str();
    } else if (name == "ratio" || name == "cpuadam_cores_perc") {
      Expected<double> parsed = number(itemPath, item, Range{0.0, 1.0});
      if (!parsed)
        return parsed.takeError();
      if (name == "ratio" && *parsed != 1.0)
        return fail(itemPath, "offloading part of the optimizer state "
                              "(ratio below 1) is not supported yet");
    } else if (name == "buffer_count" || name == "buffer_size" ||
               name == "max_in_cpu") {
      // Accepted without effect: sharc plans the swap buffers statically in
      // the arena.
      if (Expected<int64_t> parsed =
              integer(itemPath, item, Range{0.0, 1099511627776.0});
          !parsed)
        return parsed.takeError();
    } else {
      // pin_memory, pipeline_read, pipeline_write, fast_init, super_offload.
      Expected<bool> parsed = boolean(itemPath, item);
      if (!parsed)
        return parsed.takeError();
      if (name == "super_offload" && *parsed)
        return fail(itemPath, "not supported yet (SuperOffload)");
      if (name == "pipeline_read")
        options.pipelineRead = *parsed;
      else if (name == "pipeline_write")
        options.pipelineWrite = *parsed;
      // pin_memory and fast_init have no effect: there is no pinned memory
      // on the CPU target, and the state files are written whole.
    }
  }
  // Read whatever the device, as DeepSpeed does; used with device nvme only
  // (the optimizer's is the one `sharc config` shows otherwise).
  std::string pathKey = childPath(path, "nvme_path");
  if (device == OffloadDevice::nvme) {
    if (blockPath.empty() && defaultNvmePath.empty())
      return fail(pathKey,
                  "required with device \"nvme\": the folder under which "
                  "each rank keeps its offloaded " +
                      Twine(optimizer ? "optimizer state" : "parameters"));
    if (!blockPath.empty() && !nvmePathKey.empty() &&
        blockPath != options.nvmePath)
      return fail(pathKey, "'" + blockPath + "' is not " + nvmePathKey + " ('" +
                               options.nvmePath +
                               "'): sharc keeps a rank's offloaded "
                               "parameters and optimizer state in one folder");
    if (!blockPath.empty()) {
      options.nvmePath = blockPath;
      nvmePathKey = pathKey;
    }
  } else if (optimizer && !blockPath.empty() && nvmePathKey.empty()) {
    options.nvmePath = blockPath;
  }
  (optimizer ? options.offloadOptimizer : options.offloadParam) = device;
  return Error::success();
}

/// The top-level `aio` block (DeepSpeed 0.19.8's get_aio_config): how NVMe
/// offload reads and writes.  null is DeepSpeed's defaults; every key is
/// checked whatever the offload device.
Error ConfigReader::readAio(const json::Value &value) {
  if (value.kind() == json::Value::Null)
    return Error::success();
  Expected<const json::Object *> block = object("aio", value);
  if (!block)
    return block.takeError();
  TrainingOptions::AioOptions &aio = options.aio;
  SmallVector<StringRef> known = refs(aioKeys);
  for (StringRef name : sortedKeys(**block)) {
    std::string path = childPath("aio", name);
    const json::Value &item = *(*block)->get(name);
    // The guess and the list leave out thread_count (the last, deprecated).
    if (!llvm::is_contained(known, name))
      return unknownKey(path, name, ArrayRef(known).drop_back(),
                        /*listKnown=*/true);
    if (name == "block_size") {
      std::optional<int64_t> bytes = item.getAsInteger();
      if (!bytes)
        return wrongType(path, item, "an integer (bytes)");
      if (*bytes < kAioAlignment || *bytes % kAioAlignment != 0)
        return fail(path, "expected a multiple of " + Twine(kAioAlignment) +
                              " bytes, got " + render(path, item) +
                              ": NVMe offload reads and writes with O_DIRECT, "
                              "whose requests must be aligned to " +
                              Twine(kAioAlignment) + " bytes");
      if (*bytes > kMaxAioBlockSize)
        return fail(path, "expected at most " + Twine(kMaxAioBlockSize) +
                              " bytes (1 GiB) per request, got " +
                              render(path, item));
      aio.blockSize = *bytes;
    } else if (name == "queue_depth") {
      Expected<int64_t> depth =
          integer(path, item, Range{1.0, double(kMaxAioQueueDepth)});
      if (!depth)
        return depth.takeError();
      aio.queueDepth = *depth;
    } else if (name == "intra_op_parallelism" || name == "thread_count") {
      Expected<int64_t> threads = integer(path, item, atLeastOne);
      if (!threads)
        return threads.takeError();
      if (name == "thread_count")
        warn(path, "deprecated: DeepSpeed 0.19.8 ignores it silently (its name "
                   "is now intra_op_parallelism); sharc reads it as "
                   "aio.intra_op_parallelism");
      if (*threads != 1)
        return fail(path, "not supported: sharc submits every request of a "
                          "transfer to one io_uring queue; its parallelism "
                          "is queue_depth (only 1 is accepted, got " +
                              render(path, item) + ")");
    } else {
      // single_submit, overlap_events, use_gds.
      Expected<bool> flag = boolean(path, item);
      if (!flag)
        return flag.takeError();
      if (name == "single_submit")
        aio.singleSubmit = *flag;
      else if (name == "overlap_events")
        aio.overlapEvents = *flag;
      else if (*flag)
        return fail(path, "not supported (GPUDirect Storage): sharc reads "
                          "and writes NVMe through host memory");
    }
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Activation checkpointing
//===----------------------------------------------------------------------===//

// DeepSpeed 0.19.8's DeepSpeedActivationCheckpointingConfig
// (runtime/activation_checkpointing/config.py), key for key.
const StringLiteral activationCheckpointingKeys[] = {
    "partition_activations",
    "contiguous_memory_optimization",
    "cpu_checkpointing",
    "number_checkpoints",
    "synchronize_checkpoint_boundary",
    "profile"};

/// DeepSpeed checkpoints the layers its users wrap in
/// deepspeed.checkpointing.checkpoint and this block says how; sharc finds
/// the layers itself, so the block turns on --recompute layers
/// (docs/recompute.md).  A key that is on and has no meaning in a compiled
/// step is refused with the reason.
Error ConfigReader::readActivationCheckpointing(const json::Value &value) {
  StringRef key = "activation_checkpointing";
  if (value.kind() == json::Value::Null)
    return Error::success();
  Expected<const json::Object *> block = object(key, value);
  if (!block)
    return block.takeError();
  for (StringRef name : sortedKeys(**block)) {
    std::string path = childPath(key, name);
    const json::Value &item = *(*block)->get(name);
    if (!llvm::is_contained(activationCheckpointingKeys, name))
      return unknownKey(path, name, refs(activationCheckpointingKeys),
                        /*listKnown=*/true);
    if (name == "number_checkpoints") {
      // DeepSpeed sizes its contiguous checkpoint buffers with it; sharc's
      // checkpoints live in the planned arena, sized from the graph.
      if (item.kind() == json::Value::Null)
        continue;
      Expected<int64_t> count = integer(path, item, atLeastOne);
      if (!count)
        return count.takeError();
      config.checkpointing.number = *count;
      continue;
    }
    Expected<bool> flag = boolean(path, item);
    if (!flag)
      return flag.takeError();
    if (name == "contiguous_memory_optimization") {
      // sharc's arena is one contiguous, planned buffer either way.
      config.checkpointing.contiguous = *flag;
      continue;
    }
    if (name == "partition_activations") {
      // DeepSpeed splits each checkpoint across the tensor-model-parallel
      // group (mpu), whose ranks hold the same activations; sharc's ranks
      // are data-parallel only, DeepSpeed's mp_size 1, where the partition
      // is the whole tensor.
      config.checkpointing.partition = *flag;
      continue;
    }
    if (name == "cpu_checkpointing") {
      // The checkpoints in host memory: the CPU target's memory already;
      // the CUDA target refuses it (runCompile).
      options.cpuCheckpointing = *flag;
      continue;
    }
    if (!*flag)
      continue;
    if (name == "synchronize_checkpoint_boundary")
      return fail(path, "has no meaning in a compiled step: there is no "
                        "checkpoint boundary for the host to synchronize "
                        "the device at (DeepSpeed's torch.cuda.synchronize)");
    return fail(path, "not supported (timing each checkpoint's forward and "
                      "backward; sharc compile --report gives what is "
                      "recomputed, the remark its FLOPs)");
  }
  options.recompute = "layers";
  return Error::success();
}

const StringLiteral monitorKeys[] = {"enabled", "output_path", "job_name"};

/// DeepSpeed's CSVConfig and TensorBoardConfig, which have the same keys.
Error ConfigReader::readMonitor(StringRef key, const json::Value &value) {
  Expected<const json::Object *> block = object(key, value);
  if (!block)
    return block.takeError();
  TrainingOptions::MonitorOptions &monitor =
      key == "tensorboard" ? options.tensorboard : options.csvMonitor;
  for (StringRef name : sortedKeys(**block)) {
    std::string path = childPath(key, name);
    const json::Value &item = *(*block)->get(name);
    if (!llvm::is_contained(monitorKeys, name))
      return unknownKey(path, name, refs(monitorKeys), /*listKnown=*/true);
    if (name == "enabled") {
      Expected<bool> flag = boolean(path, item);
      if (!flag)
        return flag.takeError();
      monitor.enabled = *flag;
      continue;
    }
    Expected<StringRef> text = string(path, item);
    if (!text)
      return text.takeError();
    if (name == "job_name" && text->empty())
      return fail(path, "must not be empty (it names the folder)");
    (name == "output_path" ? monitor.outputPath : monitor.jobName) =
        text->str();
  }
  return Error::success();
}

Error ConfigReader::readZero(const json::Value &value) {
  Expected<const json::Object *> zero = object("zero_optimization", value);
  if (!zero)
    return zero.takeError();
  // DeepSpeed 0.19.8 maps its deprecated offload keys with a warning, and so
  // does sharc; a deprecated key with its successor is DeepSpeed's error.
  for (const DeprecatedKey &deprecated : deprecatedZeroKeys) {
    std::string path = childPath("zero_optimization", deprecated.key);
    const json::Value *item = (*zero)->get(deprecated.key);
    if (!item)
      continue;
    bool on = false;
    if (item->kind() != json::Value::Null) {
      Expected<bool> parsed = boolean(path, *item);
      if (!parsed)
        return parsed.takeError();
      on = *parsed;
    }
    StringRef successor = deprecated.successor;
    if (!successor.empty() && (*zero)->get(successor))
      return fail(path, "cannot be given with its replacement, "
                        "zero_optimization." +
                            successor + " (as in DeepSpeed)");
    warn(path, "deprecated; DeepSpeed 0.19.8 reads it as " +
                   Twine(deprecated.replacement) + ", and so does sharc");
    if (on && successor == "offload_optimizer")
      options.offloadOptimizer = OffloadDevice::cpu;
    if (on && successor == "offload_param")
      options.offloadParam = OffloadDevice::cpu;
  }
  // Every other key must be one of DeepSpeed's (0.19.8 rejects unknown keys
  // too), and a feature sharc lacks must be off.
  for (StringRef key : sortedKeys(**zero)) {
    std::string path = childPath("zero_optimization", key);
    const json::Value &item = *(*zero)->get(key);
    if (llvm::is_contained(zeroReadKeys, key) ||
        llvm::is_contained(zeroPartitioningKeys, key) ||
        llvm::any_of(deprecatedZeroKeys, [&](const DeprecatedKey &deprecated) {
          return deprecated.key == key;
        }))
      continue;
    bool off;
    if (key == "offload_param" || key == "offload_optimizer") {
      if (Error error = readOffload(key, item))
        return error;
      continue;
    } else if (key == "zenflow") {
      off = item.kind() == json::Value::Null;
    } else if (key == "zero_hpz_partition_size") {
      off = item.getAsInteger() == std::optional<int64_t>(1);
    } else if (key.starts_with("zero_quantized_")) {
      off = item.getAsBoolean() == std::optional<bool>(false);
    } else {
      SmallVector<StringRef> known = refs(zeroReadKeys);
      llvm::append_range(known, refs(zeroPartitioningKeys));
      known.append({"offload_param", "offload_optimizer", "zenflow",
                    "zero_hpz_partition_size", "zero_quantized_weights",
                    "zero_quantized_nontrainable_weights",
                    "zero_quantized_gradients"});
      return unknownKey(path, key, known, /*listKnown=*/false);
    }
    if (!off)
      return fail(path, "not supported yet (" +
                            Twine(key.starts_with("offload") ? "ZeRO offload"
                                  : key == "zenflow"         ? "ZenFlow"
                                                             : "ZeRO++") +
                            ")");
  }
  int64_t stage = 0;
  if (const json::Value *stageValue = (*zero)->get("stage")) {
    Expected<int64_t> parsed =
        integer("zero_optimization.stage", *stageValue, Range{0.0, 3.0});
    if (!parsed)
      return parsed.takeError();
    stage = *parsed;
  }
  // A count of elements in [least, 2^40], when the key is there.
  auto readElements = [&](StringRef key, double least,
                          int64_t &field) -> Error {
    const json::Value *count = (*zero)->get(key);
    if (!count)
      return Error::success();
    Expected<int64_t> parsed = integer(
        childPath("zero_optimization", key), *count,
        Range{least, static_cast<double>(TrainingOptions::kMaxBucketSize)});
    if (!parsed)
      return parsed.takeError();
    field = *parsed;
    return Error::success();
  };
  auto readBucketSize = [&](StringRef key, int64_t &field) {
    return readElements(key, 1.0, field);
  };
  // The elements per sub-group of the offloaded optimizer update (NVMe
  // offload); DeepSpeed reads it at every stage.
  if (Error error = readBucketSize("sub_group_size", options.subGroupSize))
    return error;
  // The bucket size of the gradient all-reduce (sharc-data-parallel) or
  // reduce-scatter (sharc-zero).
  if (Error error =
          readBucketSize("reduce_bucket_size", options.reduceBucketSize))
    return error;
  // Overlap of the gradient all-reduce with backward (sharc compile); null
  // is DeepSpeed's "the stage's default".
  if (const json::Value *overlap = (*zero)->get("overlap_comm");
      overlap && overlap->kind() != json::Value::Null) {
    Expected<bool> parsed = boolean("zero_optimization.overlap_comm", *overlap);
    if (!parsed)
      return parsed.takeError();
    options.overlapComm = *parsed;
  }
  options.zeroStage = stage;
  if (stage == 0)
    return Error::success();
  // Stage 1 (sharc-zero): the gradients are reduce-scattered and the
  // updated slices all-gathered, in buckets.
  if (Error error =
          readBucketSize("allgather_bucket_size", options.allgatherBucketSize))
    return error;
  // Stage 3's knobs (DeepSpeed's names and their aliases), in elements;
  // DeepSpeed reads them at stage 3 only.
  if (stage >= 3)
    for (auto [key, alias, field] :
         {std::tuple("stage3_param_persistence_threshold",
                     "param_persistence_threshold",
                     &options.paramPersistenceThreshold),
          std::tuple("stage3_max_reuse_distance", "max_reuse_distance",
                     &options.maxReuseDistance),
          std::tuple("stage3_prefetch_bucket_size", "prefetch_bucket_size",
                     &options.prefetchBucketSize),
          std::tuple("stage3_max_live_parameters", "max_live_parameters",
                     &options.maxLiveParameters)})
      for (StringRef name : {key, alias})
        if (Error error = readElements(name, 0.0, *field))
          return error;
  for (StringRef key : {"reduce_scatter", "allgather_partitions"}) {
    const json::Value *value = (*zero)->get(key);
    if (!value)
      continue;
    std::string path = childPath("zero_optimization", key);
    Expected<bool> parsed = boolean(path, *value);
    if (!parsed)
      return parsed.takeError();
    if (!*parsed)
      return fail(path, key == "reduce_scatter"
                            ? "false is not supported yet (sharc "
                              "reduce-scatters the gradients)"
                            : "false is not supported yet (sharc "
                              "all-gathers the updated partitions)");
  }
  return Error::success();
}

Error ConfigReader::readOptimizer(const json::Value &value) {
  Expected<const json::Object *> optimizer = object("optimizer", value);
  if (!optimizer)
    return optimizer.takeError();
  const StringRef optimizerKeys[] = {"type", "params", "legacy_fusion"};
  for (StringRef key : sortedKeys(**optimizer)) {
    std::string path = childPath("optimizer", key);
    if (!llvm::is_contained(optimizerKeys, key))
      return unknownKey(path, key, optimizerKeys, /*listKnown=*/true);
    if (key == "legacy_fusion") {
      Expected<bool> fusion = boolean(path, *(*optimizer)->get(key));
      if (!fusion)
        return fusion.takeError();
      if (*fusion)
        return fail(path, "not supported yet (legacy fusion, fp16 only)");
    }
  }

  const json::Value *typeValue = (*optimizer)->get("type");
  if (!typeValue)
    return fail("optimizer", "missing 'type' (one of Adam, AdamW, SGD)");
  Expected<StringRef> type = string("optimizer.type", *typeValue);
  if (!type)
    return type.takeError();
  optimizerName = type->str();
  std::string lower = type->lower();
  if (lower == "adam") {
    options.optimizer = OptimizerKind::adam;
  } else if (lower == "adamw") {
    options.optimizer = OptimizerKind::adamw;
  } else if (lower == "sgd") {
    options.optimizer = OptimizerKind::sgd;
  } else {
    for (StringRef later : laterOptimizers)
      if (later.equals_insensitive(*type))
        return fail("optimizer.type",
                    "optimizer '" + *type +
                        "' is not supported yet (supported: Adam, AdamW, SGD)");
    const StringRef supported[] = {"Adam", "AdamW", "SGD"};
    std::string message = "unknown optimizer '" + type->str() + "'";
    if (std::optional<StringRef> guess = closest(*type, supported))
      message += "; did you mean '" + guess->str() + "'?";
    return fail("optimizer.type", message + " (supported: Adam, AdamW, SGD)");
  }

  const json::Value *paramsValue = (*optimizer)->get("params");
  if (!paramsValue)
    return Error::success();
  Expected<const json::Object *> params =
      object("optimizer.params", *paramsValue);
  if (!params)
    return params.takeError();
  if (options.optimizer == OptimizerKind::sgd)
    return readSgdParams("optimizer.params", **params);
  return readAdamParams("optimizer.params", **params);
}

Error ConfigReader::readAdamParams(StringRef path, const json::Object &params) {
  bool torchAdam = false;
  for (StringRef key : sortedKeys(params)) {
    std::string keyPath = childPath(path, key);
    const json::Value &value = *params.get(key);
    if (!llvm::is_contained(adamParams, key)) {
      if (llvm::is_contained(sgdParams, key))
        return fail(keyPath,
                    "'" + key + "' is an SGD parameter; " + optimizerName +
                        " takes: " + llvm::join(refs(adamParams), ", "));
      return unknownKey(keyPath, key, refs(adamParams), /*listKnown=*/true);
    }
    if (key == "lr" || key == "eps" || key == "weight_decay") {
      Expected<double> parsed =
          number(keyPath, value, key == "eps" ? positive : nonNegative);
      if (!parsed)
        return parsed.takeError();
      (key == "lr"    ? options.lr
       : key == "eps" ? options.eps
                      : options.weightDecay) = *parsed;
    } else if (key == "betas") {
      const json::Array *betas = value.getAsArray();
      if (!betas || betas->size() != 2)
        return wrongType(keyPath, value, "an array of two numbers in [0, 1)");
      for (unsigned i = 0; i < 2; ++i) {
        Expected<double> parsed =
            number((keyPath + "[" + Twine(i) + "]").str(), (*betas)[i], beta);
        if (!parsed)
          return parsed.takeError();
        (i == 0 ? options.beta1 : options.beta2) = *parsed;
      }
    } else if (key == "bias_correction" || key == "adam_w_mode") {
      Expected<bool> flag = boolean(keyPath, value);
      if (!flag)
        return flag.takeError();
      // DeepSpeed: type AdamW always uses decoupled weight decay.
      if (key == "bias_correction")
        options.biasCorrection = *flag;
      else if (options.optimizer == OptimizerKind::adam)
        options.adamWMode = *flag;
    } else if (key == "amsgrad") {
      Expected<bool> flag = boolean(keyPath, value);
      if (!flag)
        return flag.takeError();
      if (*flag)
        return fail(keyPath, "the AMSGrad variant is not supported (neither "
                             "by DeepSpeed's FusedAdam)");
    } else if (key == "torch_adam" || key == "set_grad_none") {
      // Implementation choices of DeepSpeed with the same arithmetic.
      Expected<bool> flag = boolean(keyPath, value);
      if (!flag)
        return flag.takeError();
      torchAdam |= key == "torch_adam" && *flag;
    } else if (key == "max_grad_norm") {
      return fail(keyPath, "not supported; use the top-level "
                           "'gradient_clipping' (DeepSpeed ignores "
                           "max_grad_norm in fp32 training)");
    }
  }
  // With torch_adam DeepSpeed builds torch.optim.AdamW from these params, so
  // an unset weight_decay is torch's default, 0.01 (engine.py,
  // get_optimizer_configuration); FusedAdam's is 0.
  if (torchAdam && !params.get("weight_decay") &&
      (options.optimizer == OptimizerKind::adamw || options.adamWMode))
    options.weightDecay = kTorchAdamWDefaultWeightDecay;
  return Error::success();
}

Error ConfigReader::readSgdParams(StringRef path, const json::Object &params) {
  for (StringRef key : sortedKeys(params)) {
    std::string keyPath = childPath(path, key);
    const json::Value &value = *params.get(key);
    if (!llvm::is_contained(sgdParams, key)) {
      if (llvm::is_contained(adamParams, key))
        return fail(keyPath, "'" + key + "' is an Adam parameter; SGD takes: " +
                                 llvm::join(refs(sgdParams), ", "));
      return unknownKey(keyPath, key, refs(sgdParams), /*listKnown=*/true);
    }
    if (key == "lr" || key == "momentum" || key == "weight_decay" ||
        key == "dampening") {
      Expected<double> parsed = number(keyPath, value, nonNegative);
      if (!parsed)
        return parsed.takeError();
      if (key == "dampening") {
        if (*parsed != 0.0)
          return fail(keyPath, "momentum dampening is not supported yet "
                               "(only 0)");
        continue;
      }
      (key == "lr"         ? options.lr
       : key == "momentum" ? options.momentum
                           : options.weightDecay) = *parsed;
    } else {
      Expected<bool> flag = boolean(keyPath, value);
      if (!flag)
        return flag.takeError();
      if (key == "nesterov")
        options.nesterov = *flag;
      else if (key == "maximize" && *flag)
        return fail(keyPath, "maximizing the loss is not supported");
      // foreach, differentiable, fused: how torch computes, not what.
    }
  }
  return Error::success();
}

Error ConfigReader::readScheduler(const json::Value &value) {
  Expected<const json::Object *> scheduler = object("scheduler", value);
  if (!scheduler)
    return scheduler.takeError();
  const StringRef schedulerKeys[] = {"type", "params"};
  for (StringRef key : sortedKeys(**scheduler))
    if (!llvm::is_contained(schedulerKeys, key))
      return unknownKey(childPath("scheduler", key), key, schedulerKeys,
                        /*listKnown=*/true);

  SmallVector<StringRef> names;
  for (const ScheduleType &t : scheduleTypes)
    names.push_back(t.name);
  const json::Value *typeValue = (*scheduler)->get("type");
  if (!typeValue)
    return fail("scheduler",
                "missing 'type' (one of " + llvm::join(names, ", ") + ")");
  Expected<StringRef> type = string("scheduler.type", *typeValue);
  if (!type)
    return type.takeError();
  SchedulerOptions &schedule = options.scheduler;
  SmallVector<StringRef> known;
  const ScheduleType *chosen = llvm::find_if(
      scheduleTypes, [&](const ScheduleType &t) { return t.name == *type; });
  if (chosen == std::end(scheduleTypes)) {
    std::string message = "unknown scheduler '" + type->str() + "'";
    if (std::optional<StringRef> guess = closest(*type, names))
      message += "; did you mean '" + guess->str() + "'?";
    return fail("scheduler.type",
                message + " (supported: " + llvm::join(names, ", ") + ")");
  }
  schedule.kind = chosen->kind;
  known.assign(chosen->params.begin(), chosen->params.end());

  const json::Object empty;
  const json::Object *params = &empty;
  if (const json::Value *paramsValue = (*scheduler)->get("params")) {
    Expected<const json::Object *> parsed =
        object("scheduler.params", *paramsValue);
    if (!parsed)
      return parsed.takeError();
    params = *parsed;
  }
  for (StringRef key : sortedKeys(*params)) {
    std::string path = childPath("scheduler.params", key);
    if (!llvm::is_contained(known, key)) {
      std::string message =
          "unknown key '" + key.str() + "' for " + type->str();
      if (std::optional<StringRef> guess = closest(key, known))
        message += "; did you mean '" + guess->str() + "'?";
      return fail(path, message + " (" + *type +
                            " takes: " + llvm::join(known, ", ") + ")");
    }
    if (Error error = readScheduleParam(path, key, *params->get(key)))
      return error;
  }

  // Parameters DeepSpeed's constructors require.
  SmallVector<StringRef, 2> required;
  if (schedule.kind == SchedulerKind::warmupDecayLR ||
      schedule.kind == SchedulerKind::warmupCosineLR)
    required.push_back("total_num_steps");
  if (schedule.kind == SchedulerKind::oneCycle)
    required.append({"cycle_min_lr", "cycle_max_lr"});
  for (StringRef key : required)
    if (!params->get(key))
      return fail("scheduler.params", *type + " requires '" + key + "'");

  return Error::success();
}

Error ConfigReader::readScheduleParam(StringRef path, StringRef key,
                                      const json::Value &value) {
  SchedulerOptions &schedule = options.scheduler;
  for (const RealScheduleParam &param : realScheduleParams) {
    if (key != param.name)
      continue;
    Expected<double> parsed = number(path, value, *param.range);
    if (!parsed)
      return parsed.takeError();
    schedule.*param.field = *parsed;
    return Error::success();
  }
  for (const IntegerScheduleParam &param : integerScheduleParams) {
    if (key != param.name)
      continue;
    if (param.nullable && value.kind() == json::Value::Null) {
      schedule.*param.field = -1;
      return Error::success();
    }
    Expected<int64_t> parsed = integer(path, value, *param.range);
    if (!parsed)
      return parsed.takeError();
    schedule.*param.field = *parsed;
    return Error::success();
  }
  if (key == "warmup_type") {
    Expected<StringRef> type = string(path, value);
    if (!type)
      return type.takeError();
    if (*type != "log" && *type != "linear")
      return fail(path,
                  "expected \"log\" or \"linear\", got " + render(path, value));
    schedule.warmupLinear = *type == "linear";
    return Error::success();
  }
  if (key == "lr_range_test_staircase") {
    Expected<bool> flag = boolean(path, value);
    if (!flag)
      return flag.takeError();
    schedule.lrRangeTestStaircase = *flag;
    return Error::success();
  }
  if (key == "last_batch_iteration") {
    Expected<int64_t> last = integer(path, value, atLeastMinusOne);
    if (!last)
      return last.takeError();
    if (*last != -1)
      return fail(path, "resuming a schedule is not supported yet (only -1, "
                        "the start)");
    return Error::success();
  }
  if (key == "cycle_momentum") {
    Expected<bool> flag = boolean(path, value);
    if (!flag)
      return flag.takeError();
    schedule.cycleMomentum = *flag;
    return Error::success();
  }
  llvm_unreachable("every scheduler parameter is handled above");
}

/// Turns llvm::json's "[LINE:COL, byte=N]: message" into
/// "FILE:LINE:COL: invalid JSON: message".
Error jsonError(StringRef fileName, Error error) {
  std::string text = toString(std::move(error));
  StringRef rest = text;
  unsigned line, column;
  if (rest.consume_front("[") && !rest.consumeInteger(10, line) &&
      rest.consume_front(":") && !rest.consumeInteger(10, column)) {
    auto [_, message] = rest.split("]: ");
    return createStringError(inconvertibleErrorCode(),
                             formatv("{0}:{1}:{2}: invalid JSON: {3}", fileName,
                                     line, column, message));
  }
  return createStringError(inconvertibleErrorCode(),
                           fileName + ": invalid JSON: " + text);
}

/// Rejects text beyond the limits of Config.h, before llvm::json::parse
/// sees it.  Counts nesting and array elements outside strings without
/// checking the syntax (the parser does that), within the first
/// kMaxConfigBytes and before checking the size, so that a file over the size
/// limit is reported where it goes wrong if it can be (a 100 MB array at its
/// position).
Error checkLimits(StringRef text, StringRef fileName) {
  auto failAt = [&](size_t offset, const Twine &message) {
    StringRef before = text.take_front(offset);
    size_t lineStart = before.find_last_of('\n') + 1; // npos + 1 == 0
    return createStringError(
        inconvertibleErrorCode(),
        formatv("{0}:{1}:{2}: {3} (the limit of a DeepSpeed config)", fileName,
                before.count('\n') + 1, offset - lineStart + 1, message.str()));
  };
  struct Open {
    size_t offset;
    bool array;
    size_t commas = 0;
  };
  SmallVector<Open, 8> open;
  for (size_t pos = 0, e = std::min(text.size(), kMaxConfigBytes); pos < e;
       ++pos) {
    switch (text[pos]) {
    case '"':
      for (++pos; pos < e && text[pos] != '"';)
        pos += text[pos] == '\\' ? 2 : 1;
      break;
    case '[':
    case '{':
      if (open.size() == kMaxConfigDepth)
        return failAt(pos, "JSON nested more than " + Twine(kMaxConfigDepth) +
                               " levels deep");
      open.push_back({pos, text[pos] == '['});
      break;
    case ']':
    case '}':
      if (!open.empty())
        open.pop_back();
      break;
    case ',':
      if (!open.empty() && open.back().array &&
          ++open.back().commas == kMaxConfigArrayElements)
        return failAt(open.back().offset, "an array of more than " +
                                              Twine(kMaxConfigArrayElements) +
                                              " elements");
      break;
    }
  }
  if (text.size() > kMaxConfigBytes)
    return createStringError(
        inconvertibleErrorCode(),
        formatv("{0}: more than {1} bytes (the limit of a DeepSpeed config)",
                fileName, kMaxConfigBytes));
  return Error::success();
}

} // namespace

Expected<DeepSpeedConfig>
parseDeepSpeedConfig(StringRef text, StringRef fileName,
                     const TrainingOptions &defaults) {
  if (Error error = checkLimits(text, fileName))
    return std::move(error);
  Expected<json::Value> root = json::parse(text);
  if (!root)
    return jsonError(fileName, root.takeError());
  SourceMap source(text);
  if (source.duplicate) {
    auto &[path, position] = *source.duplicate;
    return createStringError(inconvertibleErrorCode(),
                             formatv("{0}:{1}:{2}: {3}: key given twice",
                                     fileName, position.line, position.column,
                                     path));
  }
  DeepSpeedConfig config;
  config.training = defaults;
  ConfigReader reader(fileName, source, config);
  if (Error error = reader.read(*root))
    return std::move(error);
  return config;
}

Expected<DeepSpeedConfig> readDeepSpeedConfig(StringRef path,
                                              const TrainingOptions &defaults) {
  auto cannotRead = [&](Error error) {
    std::error_code code = errorToErrorCode(std::move(error));
    return createStringError(code, "cannot read config '" + path +
                                       "': " + code.message());
  };
  Expected<sys::fs::file_t> file = sys::fs::openNativeFileForRead(path);
  if (!file)
    return cannotRead(file.takeError());
  // One byte past the limit is enough to reject the file.
  SmallString<0> text;
  constexpr size_t chunk = 64 * 1024;
  while (text.size() <= kMaxConfigBytes) {
    size_t size = text.size();
    text.resize_for_overwrite(size + chunk);
    Expected<size_t> read = sys::fs::readNativeFile(
        *file, MutableArrayRef<char>(text.data() + size, chunk));
    if (!read) {
      sys::fs::closeFile(*file);
      return cannotRead(read.takeError());
    }
    text.truncate(size + *read);
    if (*read == 0)
      break;
  }
  sys::fs::closeFile(*file);
  return parseDeepSpeedConfig(text, path, defaults);
}

Expected<BatchSizes> resolveBatchSizes(const BatchSizeConfig &given,
                                       int64_t worldSize,
                                       int64_t modelMicroBatch,
                                       StringRef microBatchSource) {
  auto failWith = [](const Twine &message) {
    return createStringError(inconvertibleErrorCode(), message);
  };
  int64_t micro = modelMicroBatch;
  std::string modelMicro =
      formatv("the model's micro-batch ({0}) is {1}", microBatchSource, micro);
  if (given.microBatchPerGpu && *given.microBatchPerGpu != micro)
    return failWith("train_micro_batch_size_per_gpu is " +
                    Twine(*given.microBatchPerGpu) + " but " + modelMicro);
  std::string world = formatv("world size {0}", worldSize);
  // Products with an overflow check: a config may give any 64-bit size.
  auto times = [](int64_t a, int64_t b) -> std::optional<int64_t> {
    int64_t product;
    if (MulOverflow(a, b, product))
      return std::nullopt;
    return product;
  };

  // The micro-batch is always known, so DeepSpeed's rules reduce to: given
  // train_batch_size, derive (or check) gradient_accumulation_steps;
  // otherwise derive train_batch_size (gradient_accumulation_steps default
  // 1).
  if (!given.trainBatchSize) {
    int64_t gas = given.gradAccumSteps.value_or(1);
    std::optional<int64_t> perRank = times(micro, gas);
    std::optional<int64_t> train =
        perRank ? times(*perRank, worldSize) : std::nullopt;
    if (!train)
      return failWith(formatv(
          "gradient_accumulation_steps {0} * the micro-batch {1} * {2} is "
          "more rows per step than a 64-bit integer holds",
          gas, micro, world));
    return BatchSizes{*train, micro, gas};
  }
  int64_t train = *given.trainBatchSize;
  if (given.gradAccumSteps) {
    int64_t gas = *given.gradAccumSteps;
    std::optional<int64_t> microBatches = times(gas, worldSize);
    if (microBatches && times(*microBatches, micro) == train)
      return BatchSizes{train, micro, gas};
    if (given.microBatchPerGpu)
      return failWith(formatv(
          "inconsistent batch sizes: train_batch_size {0} != "
          "train_micro_batch_size_per_gpu {1} * gradient_accumulation_steps "
          "{2} * {3}",
          train, micro, gas, world));
    if (!microBatches || train % *microBatches != 0)
      return failWith(formatv("inconsistent batch sizes: train_batch_size {0} "
                              "is not divisible by "
                              "gradient_accumulation_steps {1} * {2}",
                              train, gas, world));
    return failWith(formatv(
        "inconsistent batch sizes: train_batch_size {0} / "
        "(gradient_accumulation_steps {1} * {2}) gives a micro-batch of {3}, "
        "but {4}",
        train, gas, world, train / *microBatches, modelMicro));
  }
  std::optional<int64_t> rows = times(micro, worldSize);
  if (!rows || train % *rows != 0)
    return failWith(formatv(
        "inconsistent batch sizes: train_batch_size {0} is not a multiple of "
        "the micro-batch {1} ({2}) * {3}, so gradient_accumulation_steps "
        "cannot be derived",
        train, micro, microBatchSource, world));
  return BatchSizes{train, micro, train / *rows};
}

Expected<BatchSizes> deriveBatchSizes(const BatchSizeConfig &given,
                                      int64_t worldSize) {
  auto failWith = [](const Twine &message) {
    return createStringError(inconvertibleErrorCode(), message);
  };
  std::optional<int64_t> train = given.trainBatchSize,
                         micro = given.microBatchPerGpu,
                         gas = given.gradAccumSteps;
  std::string world = formatv("world size {0}", worldSize);
  // A quotient that must be exact.
  auto divide = [&](int64_t total, int64_t by,
                    StringRef what) -> Expected<int64_t> {
    if (by <= 0 || total % by != 0 || total / by < 1)
      return failWith(formatv("inconsistent batch sizes: train_batch_size {0} "
                              "is not divisible by {1} ({2}), so {3} cannot "
                              "be derived",
                              total, by, world, what));
    return total / by;
  };
  if (train && !micro) {
    int64_t steps = gas.value_or(1);
    Expected<int64_t> derived =
        divide(*train, steps * worldSize, "train_micro_batch_size_per_gpu");
    if (!derived)
      return derived.takeError();
    micro = *derived;
    gas = steps;
  } else if (train && !gas) {
    Expected<int64_t> derived =
        divide(*train, *micro * worldSize, "gradient_accumulation_steps");
    if (!derived)
      return derived.takeError();
    gas = *derived;
  } else if (!train && micro) {
    gas = gas.value_or(1);
    int64_t product;
    if (MulOverflow(*micro, *gas, product) ||
        MulOverflow(product, worldSize, product))
      return failWith("train_micro_batch_size_per_gpu * "
                      "gradient_accumulation_steps * the world size is more "
                      "rows per step than a 64-bit integer holds");
    train = product;
  } else if (!train) {
    return failWith("either train_batch_size or "
                    "train_micro_batch_size_per_gpu needs to be given (as "
                    "DeepSpeed requires)");
  }
  int64_t product;
  if (MulOverflow(*micro, *gas, product) ||
      MulOverflow(product, worldSize, product) || product != *train)
    return failWith(formatv("inconsistent batch sizes: train_batch_size {0} "
                            "!= train_micro_batch_size_per_gpu {1} * "
                            "gradient_accumulation_steps {2} * {3}",
                            *train, *micro, *gas, world));
  return BatchSizes{*train, *micro, *gas};
}

json::Value resolvedConfig(const DeepSpeedConfig &config,
                           const BatchSizes &sizes, int64_t worldSize) {
  const TrainingOptions &o = config.training;
  json::Object root;
  root["world_size"] = worldSize;
  root["train_batch_size"] = sizes.trainBatchSize;
  root["train_micro_batch_size_per_gpu"] = sizes.microBatchPerGpu;
  root["gradient_accumulation_steps"] = sizes.gradAccumSteps;
  root["gradient_clipping"] = o.clip;

  const PrecisionOptions &mixed = o.mixedPrecision;
  const LossScaleOptions &scaler = mixed.lossScale;
  root["fp16"] =
      json::Object{{"enabled", mixed.precision == Precision::fp16},
                   {"loss_scale", mixed.staticLossScale},
                   {"initial_scale_power",
                    int64_t(std::lround(std::log2(scaler.initialScale)))},
                   {"loss_scale_window", scaler.window},
                   {"hysteresis", scaler.hysteresis},
                   {"consecutive_hysteresis", scaler.consecutiveHysteresis},
                   {"min_loss_scale", scaler.minScale}};
  root["bf16"] = json::Object{{"enabled", mixed.precision == Precision::bf16},
                              {"check_grad_overflow", mixed.bf16CheckOverflow}};

  json::Object params{{"lr", o.lr}, {"weight_decay", o.weightDecay}};
  if (o.optimizer == OptimizerKind::sgd) {
    params["momentum"] = o.momentum;
    params["nesterov"] = o.nesterov;
  } else {
    params["betas"] = json::Array{o.beta1, o.beta2};
    params["eps"] = o.eps;
    params["bias_correction"] = o.biasCorrection;
    params["adam_w_mode"] = o.adamWMode;
  }
  root["optimizer"] =
      json::Object{{"type", o.optimizer == OptimizerKind::sgd    ? "SGD"
                            : o.optimizer == OptimizerKind::adam ? "Adam"
                                                                 : "AdamW"},
                   {"params", std::move(params)}};

  const SchedulerOptions &schedule = o.scheduler;
  const ScheduleType *chosen =
      llvm::find_if(scheduleTypes, [&](const ScheduleType &t) {
        return t.kind == schedule.kind;
      });
  ArrayRef<StringLiteral> keys;
  StringRef type;
  if (chosen != std::end(scheduleTypes))
    keys = chosen->params, type = chosen->name;
  if (type.empty()) {
    root["scheduler"] = nullptr;
  } else {
    json::Object values;
    for (StringRef key : keys) {
      for (const RealScheduleParam &param : realScheduleParams)
        if (key == param.name)
          values[key] = schedule.*param.field;
      for (const IntegerScheduleParam &param : integerScheduleParams)
        if (key == param.name)
          values[key] = param.nullable && schedule.*param.field < 0
                            ? json::Value(nullptr)
                            : json::Value(schedule.*param.field);
      if (key == "warmup_type")
        values[key] = schedule.warmupLinear ? "linear" : "log";
      if (key == "lr_range_test_staircase")
        values[key] = schedule.lrRangeTestStaircase;
      if (key == "cycle_momentum")
        values[key] = schedule.cycleMomentum;
      if (key == "last_batch_iteration")
        values[key] = -1;
    }
    root["scheduler"] =
        json::Object{{"type", type}, {"params", std::move(values)}};
  }

  auto device = [](OffloadDevice where) {
    return json::Object{{"device", where == OffloadDevice::cpu    ? "cpu"
                                   : where == OffloadDevice::nvme ? "nvme"
                                                                  : "none"}};
  };
  // pipeline_read and pipeline_write are sharc's (on unless the config turns
  // them off), not DeepSpeed's defaults (off): the same bits either way.
  // One folder for both blocks (readOffload): the optimizer's shows it unless
  // only the parameters go to NVMe.
  auto nvmePathOf = [&](bool shown) {
    return shown && !o.nvmePath.empty() ? json::Value(o.nvmePath)
                                        : json::Value(nullptr);
  };
  json::Object offloadOptimizer = device(o.offloadOptimizer);
  offloadOptimizer["nvme_path"] =
      nvmePathOf(o.offloadOptimizer == OffloadDevice::nvme ||
                 o.offloadParam != OffloadDevice::nvme);
  offloadOptimizer["pipeline_read"] = o.pipelineRead;
  offloadOptimizer["pipeline_write"] = o.pipelineWrite;
  json::Object zero{{"stage", o.zeroStage},
                    {"reduce_bucket_size", o.reduceBucketSize},
                    {"allgather_bucket_size", o.allgatherBucketSize},
                    {"overlap_comm", o.overlapComm},
                    {"reduce_scatter", true},
                    {"allgather_partitions", true},
                    {"sub_group_size", o.subGroupSize},
                    {"offload_optimizer", std::move(offloadOptimizer)},
                    {"offload_param", device(o.offloadParam)}};
  zero["offload_param"].getAsObject()->try_emplace(
      "nvme_path", nvmePathOf(o.offloadParam == OffloadDevice::nvme));
  if (o.zeroStage >= 3) {
    zero["stage3_param_persistence_threshold"] = o.paramPersistenceThreshold;
    zero["stage3_max_reuse_distance"] = o.maxReuseDistance;
    zero["stage3_prefetch_bucket_size"] = o.prefetchBucketSize;
    zero["stage3_max_live_parameters"] = o.maxLiveParameters;
  }
  root["zero_optimization"] = std::move(zero);
  // DeepSpeed's activation checkpointing block as sharc resolves it
  // (readActivationCheckpointing), and the policy the pass runs.
  root["activation_checkpointing"] = json::Object{
      {"partition_activations", config.checkpointing.partition},
      {"contiguous_memory_optimization", config.checkpointing.contiguous},
      {"cpu_checkpointing", o.cpuCheckpointing},
      {"number_checkpoints", config.checkpointing.number >= 1
                                 ? json::Value(config.checkpointing.number)
                                 : json::Value(nullptr)},
      {"synchronize_checkpoint_boundary", false},
      {"profile", false}};
  // DeepSpeed's CSVConfig and TensorBoardConfig, defaults filled in.
  for (auto [key, monitor] : {std::pair{"csv_monitor", &o.csvMonitor},
                              std::pair{"tensorboard", &o.tensorboard}})
    root[key] = json::Object{{"enabled", monitor->enabled},
                             {"output_path", monitor->outputPath},
                             {"job_name", monitor->jobName}};
  root["recompute"] = o.recompute;
  if (o.recompute == "auto")
    root["activation_memory"] = o.activationMemory;
  // DeepSpeed's aio_config, defaults filled in (intra_op_parallelism and
  // use_gds take only their defaults in sharc).
  root["aio"] = json::Object{{"block_size", o.aio.blockSize},
                             {"queue_depth", o.aio.queueDepth},
                             {"intra_op_parallelism", 1},
                             {"single_submit", o.aio.singleSubmit},
                             {"overlap_events", o.aio.overlapEvents},
                             {"use_gds", false}};
  return root;
}

} // namespace sharc
