//===- Metrics.h - Per-step metrics as JSON lines ---------------*- C++ -*-===//
//
// `--metrics FILE.jsonl` of the training binaries and `sharc eval --train`:
// one JSON object per step, appended as the run goes, for scripts and
// tools/plot-metrics.py:
//
//   {"step": 12, "loss": 4.20929623, "lr": 0.00189278926, "scale": 65536,
//    "skipped": false, "ms": 0.496, "tokens_per_s": 129124.4,
//    "peak_memory_bytes": 18743296, "time": 1796448812.123}
//
// `scale` only for a loss-scaled program; `tokens_per_s` or `samples_per_s`
// (the step line's unit); `peak_memory_bytes` where it is measured; a loss
// that is not finite is null.  The file is opened for appending (a resumed
// run continues it; O_NOFOLLOW: a symbolic link is refused), each line is one
// checked write() of a complete line, and sync() flushes it to the disk (at
// every checkpoint and at the end), so a crash leaves whole lines only.
//
// POSIX and the C++17 standard library only: the training binaries link it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_METRICS_H
#define SHARC_RUNTIME_METRICS_H

#include <cstdint>
#include <optional>
#include <string>

namespace sharc::rt {

/// One step's metrics.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0, lr = 0;
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

class MetricsFile {
public:
  MetricsFile() = default;
  MetricsFile(const MetricsFile &) = delete;
  MetricsFile &operator=(const MetricsFile &) = delete;
  ~MetricsFile();

  /// Opens `path` for appending, creating it; a symbolic link or anything
  /// but a regular file is refused.  Errors read "PATH: reason".
  bool open(const std::string &path, std::string &error);
  bool isOpen() const { return fd >= 0; }

  /// Appends the line of `metrics`, stamped with the current time.
  bool append(const StepMetrics &metrics, std::string &error);

  /// Flushes what was appended to the disk (fsync).
  bool sync(std::string &error);

private:
  std::string path;
  int fd = -1;
  /// Bytes appended by this process (for the write-limit test hook).
  unsigned long long written = 0;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_METRICS_H
