//===- Metrics.h - Per-step metrics as JSON lines ---------------*- C++ -*-===//
//
// `--metrics FILE.jsonl` of the training binaries and `sharc eval --train`:
// one JSON object per step, appended as the run goes, for scripts and
// tools/plot-metrics.py:
//
//   {"step": 12, "loss": 4.20929623, "lr": 0.00189278926,
//    "grad_norm": 1.83420116, "scale": 65536, "skipped": false, "ms": 0.496,
//    "tokens_per_s": 129124.4, "peak_memory_bytes": 18743296,
//    "time": 1796448812.123}
//
// `grad_norm` (the gradients' global L2 norm before clipping) where a
// parameter trains; `scale` only for a loss-scaled program; `tokens_per_s` or
// `samples_per_s` (the step line's unit); `peak_memory_bytes` where it is
// measured; a loss that is not finite is null.  The file is opened for
// appending (a resumed run continues it; O_NOFOLLOW: a symbolic link is
// refused), each line is one checked write() of a complete line, and sync()
// flushes it to the disk (at every checkpoint and at the end), so a crash
// leaves whole lines only.
//
// POSIX and the C++17 standard library only: the training binaries link it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_METRICS_H
#define SHARC_RUNTIME_METRICS_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sharc::rt {

/// One step's metrics.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0, lr = 0;
  /// The gradients' global L2 norm before clipping (none when nothing
  /// trains).
  std::optional<double> gradNorm;
  std::optional<double> scale;
  bool skipped = false;
  double milliseconds = 0;
  /// "tokens_per_s" or "samples_per_s" and its value.
  std::string throughputKey = "samples_per_s";
  double throughput = 0;
  std::optional<uint64_t> peakMemoryBytes;
};

/// The JSON line of `metrics` (with its newline), `time` seconds since the
/// epoch.
std::string metricsLine(const StepMetrics &metrics, double time);

/// A file appended to as a run goes (the metrics, the CSV monitor's files):
/// opened for appending and created if missing (O_NOFOLLOW: a symbolic link
/// is refused, as is anything but a regular file); each append is checked
/// and whole; sync() flushes to the disk.  Errors read "PATH: reason".
class AppendFile {
public:
  AppendFile() = default;
  AppendFile(const AppendFile &) = delete;
  AppendFile &operator=(const AppendFile &) = delete;
  ~AppendFile();

  /// `exclusive`: create the file, refusing one that exists.
  bool open(const std::string &path, std::string &error,
            bool exclusive = false);
  bool isOpen() const { return fd >= 0; }
  /// Whether the file held nothing when it was opened.
  bool wasEmpty() const { return initialSize == 0; }

  bool append(const std::string &text, std::string &error);
  bool sync(std::string &error);

private:
  std::string path;
  int fd = -1;
  unsigned long long initialSize = 0;
  /// Bytes appended by this process (for the write-limit test hook).
  unsigned long long written = 0;
};

/// `--metrics FILE.jsonl`: metricsLine per step, stamped with the time.
class MetricsFile {
public:
  bool open(const std::string &path, std::string &error) {
    return file.open(path, error);
  }
  bool isOpen() const { return file.isOpen(); }
  bool append(const StepMetrics &metrics, std::string &error);
  bool sync(std::string &error) { return file.sync(error); }

private:
  AppendFile file;
};

/// `value` as Python's repr() writes a float (and so DeepSpeed's CSV
/// monitor): the shortest digits that read back as `value`, in fixed
/// notation with at least one decimal for exponents -4 to 15 (`0.003`,
/// `65536.0`), else in scientific notation (`1e-05`, `1.5e+16`); `inf`,
/// `-inf`, `nan`.
std::string pythonFloatText(double value);

/// One of DeepSpeed's monitors (`csv_monitor`, `tensorboard`): named scalar
/// events (`Train/Samples/lr`) at a step counted in samples, as DeepSpeed's
/// engine writes them (monitor/monitor.py's write_events).
class Monitor {
public:
  virtual ~Monitor();
  /// Appends the event `name` = `value` at `samples`.
  virtual bool write(const std::string &name, double value, int64_t samples,
                     std::string &error) = 0;
  /// Flushes what was written to the disk.
  virtual bool sync(std::string &error) = 0;

protected:
  /// Creates a monitor's folder (and its parents) if needed; errors read
  /// "FOLDER: reason".
  static bool makeFolder(const std::string &folder, std::string &error);
};

/// DeepSpeed's `csv_monitor` (monitor/csv_monitor.py, DeepSpeed 0.19.8): in
/// FOLDER, one file per event, `Train_Samples_lr.csv` and so on, each a
/// header row `step,NAME` and rows `SAMPLES,VALUE` (the global samples
/// trained so far, the value as Python writes it), CRLF line ends as
/// Python's csv module writes them.  A file continued by a resumed run gets
/// no second header (where DeepSpeed writes one per process).
class CsvMonitor : public Monitor {
public:
  /// Creates FOLDER (and its parents) if needed.
  bool open(const std::string &folder, std::string &error);

  /// Appends the row of event `name` (`Train/Samples/lr`, its file
  /// `Train_Samples_lr.csv`, its header `lr`).
  bool write(const std::string &name, double value, int64_t samples,
             std::string &error) override;

  bool sync(std::string &error) override;

private:
  std::string folder;
  std::vector<std::pair<std::string, std::unique_ptr<AppendFile>>> files;
};

/// The events of global step `step` (1-based) of `globalBatch` rows:
/// DeepSpeed 0.19.8's engine writes after each step the learning rate and,
/// under fp16, the loss scale as they are after the step (the next step's)
/// at the samples trained so far (`Train/Samples/lr`, `.../loss_scale`).
/// Those are the values step `step` used, so its metrics give the row of
/// step `step` - 1; the row of a run's last step is written by the run
/// that resumes from it.  The loss goes to `Train/Samples/train_loss` (the
/// name of DeepSpeed's pipeline engine) at once, and so do sharc's own
/// events, which DeepSpeed's engine does not write: `Train/Samples/grad_norm`,
/// `Train/Samples/tokens_per_s` (or `samples_per_s`: the step line's unit)
/// and, where measured, `Train/Samples/peak_memory_bytes`.
bool writeStepEvents(Monitor &monitor, int64_t step, int64_t globalBatch,
                     const StepMetrics &metrics, std::string &error);

/// What a run logs on rank 0, per step: `--metrics FILE.jsonl` and the
/// monitors the configuration enables.  The training binaries and
/// `sharc eval --train` log through it.
class StepLog {
public:
  StepLog();
  ~StepLog();
  StepLog(const StepLog &) = delete;
  StepLog &operator=(const StepLog &) = delete;

  /// Opens the metrics file (empty path: none), the CSV monitor's folder and
  /// the TensorBoard monitor's folder (empty: none).  Errors name the flag or
  /// the config block (`--metrics: PATH: reason`, `tensorboard: ...`).
  bool open(const std::string &metricsPath, const std::string &csvFolder,
            const std::string &tensorboardFolder, std::string &error);
  /// Whether anything is logged.
  bool isOpen() const { return metrics.isOpen() || !monitors.empty(); }

  /// Logs global step `metrics.step` (1-based) of `globalBatch` rows.
  bool record(const StepMetrics &metrics, int64_t globalBatch,
              std::string &error);
  /// Flushes everything to the disk (at checkpoints and at the end).
  bool sync(std::string &error);

private:
  MetricsFile metrics;
  /// The monitors and the config block that named each.
  std::vector<std::pair<std::string, std::unique_ptr<Monitor>>> monitors;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_METRICS_H
