//===- Metrics.cpp - Per-step metrics as JSON lines -----------------------===//

#include "runtime/Metrics.h"
#include "runtime/AtomicFile.h"
#include "runtime/TensorBoard.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sharc::rt {

namespace {

std::string number(double value, const char *format) {
  if (!std::isfinite(value))
    return "null";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

} // namespace

std::string metricsLine(const StepMetrics &metrics, double time) {
  std::string line = "{\"step\": " + std::to_string(metrics.step) +
                     ", \"loss\": " + number(metrics.loss, "%.9g") +
                     ", \"lr\": " + number(metrics.lr, "%.9g");
  if (metrics.gradNorm)
    line += ", \"grad_norm\": " + number(*metrics.gradNorm, "%.9g");
  if (metrics.scale)
    line += ", \"scale\": " + number(*metrics.scale, "%.9g");
  line += std::string(", \"skipped\": ") + (metrics.skipped ? "true" : "false");
  line += ", \"ms\": " + number(metrics.milliseconds, "%.3f");
  line += ", \"" + metrics.throughputKey +
          "\": " + number(metrics.throughput, "%.1f");
  if (metrics.peakMemoryBytes)
    line +=
        ", \"peak_memory_bytes\": " + std::to_string(*metrics.peakMemoryBytes);
  line += ", \"time\": " + number(time, "%.3f") + "}\n";
  return line;
}

AppendFile::~AppendFile() {
  if (fd >= 0)
    ::close(fd);
}

bool AppendFile::open(const std::string &target, std::string &error,
                      bool exclusive) {
  path = target;
  fd = ::open(path.c_str(),
              O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC |
                  (exclusive ? O_EXCL : 0),
              0644);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    error = path + ": not a regular file";
    ::close(fd);
    fd = -1;
    return false;
  }
  initialSize = static_cast<unsigned long long>(info.st_size);
  return true;
}

bool AppendFile::append(const std::string &text, std::string &error) {
  // The write-limit test hook (AtomicFile.h) counts these bytes too.
  if (takeWriteBudget(written, text.size()) < text.size()) {
    error = path + ": " + std::strerror(ENOSPC);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0) {
      error = path + ": " + std::strerror(wrote < 0 ? errno : EIO);
      return false;
    }
    done += size_t(wrote);
  }
  written += text.size();
  return true;
}

bool AppendFile::sync(std::string &error) {
  if (fd >= 0 && ::fsync(fd) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool MetricsFile::append(const StepMetrics &metrics, std::string &error) {
  double time = std::chrono::duration<double>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return file.append(metricsLine(metrics, time), error);
}

std::string pythonFloatText(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, d.ddde[+-]XX.
  char buffer[64];
  char *end = std::to_chars(buffer, buffer + sizeof(buffer), value,
                            std::chars_format::scientific)
                  .ptr;
  std::string text(buffer, end);
  size_t e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string mantissa = text.substr(0, e);
  bool negative = mantissa[0] == '-';
  if (negative)
    mantissa.erase(0, 1);
  std::string digits =
      mantissa.substr(0, 1) + (mantissa.size() > 2 ? mantissa.substr(2) : "");
  std::string sign = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char exp[8];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    return out + exp;
  }
  std::string whole, fraction;
  if (exponent < 0) {
    whole = "0";
    fraction = std::string(size_t(-exponent - 1), '0') + digits;
  } else if (size_t(exponent) + 1 >= digits.size()) {
    whole = digits + std::string(size_t(exponent) + 1 - digits.size(), '0');
  } else {
    whole = digits.substr(0, size_t(exponent) + 1);
    fraction = digits.substr(size_t(exponent) + 1);
  }
  return sign + whole + "." + (fraction.empty() ? "0" : fraction);
}

Monitor::~Monitor() = default;

bool Monitor::makeFolder(const std::string &folder, std::string &error) {
  std::error_code code;
  std::filesystem::create_directories(folder, code);
  if (code) {
    error = folder + ": " + code.message();
    return false;
  }
  return true;
}

bool CsvMonitor::open(const std::string &target, std::string &error) {
  if (!makeFolder(target, error))
    return false;
  folder = target;
  return true;
}

bool CsvMonitor::write(const std::string &name, double value, int64_t samples,
                       std::string &error) {
  AppendFile *file = nullptr;
  for (auto &[known, open] : files)
    if (known == name)
      file = open.get();
  std::string header = name.substr(name.rfind('/') + 1);
  if (!file) {
    std::string stem = name;
    for (char &c : stem)
      if (c == '/' || c == ' ')
        c = '_';
    auto created = std::make_unique<AppendFile>();
    if (!created->open(
            (std::filesystem::path(folder) / (stem + ".csv")).string(), error))
      return false;
    file = created.get();
    files.emplace_back(name, std::move(created));
    if (file->wasEmpty() && !file->append("step," + header + "\r\n", error))
      return false;
  }
  return file->append(
      std::to_string(samples) + "," + pythonFloatText(value) + "\r\n", error);
}

bool CsvMonitor::sync(std::string &error) {
  for (auto &entry : files)
    if (!entry.second->sync(error))
      return false;
  return true;
}

bool writeStepEvents(Monitor &monitor, int64_t step, int64_t globalBatch,
                     const StepMetrics &metrics, std::string &error) {
  if (step >= 2) {
    int64_t previous = (step - 1) * globalBatch;
    if (!monitor.write("Train/Samples/lr", metrics.lr, previous, error) ||
        (metrics.scale && !monitor.write("Train/Samples/loss_scale",
                                         *metrics.scale, previous, error)))
      return false;
  }
  int64_t samples = step * globalBatch;
  if (!monitor.write("Train/Samples/train_loss", metrics.loss, samples, error))
    return false;
  // sharc's own events.
  if (metrics.gradNorm && !monitor.write("Train/Samples/grad_norm",
                                         *metrics.gradNorm, samples, error))
    return false;
  if (!monitor.write("Train/Samples/" + metrics.throughputKey,
                     metrics.throughput, samples, error))
    return false;
  return !metrics.peakMemoryBytes ||
         monitor.write("Train/Samples/peak_memory_bytes",
                       double(*metrics.peakMemoryBytes), samples, error);
}

StepLog::StepLog() = default;
StepLog::~StepLog() = default;

bool StepLog::open(const std::string &metricsPath, const std::string &csvFolder,
                   const std::string &tensorboardFolder, std::string &error) {
  if (!metricsPath.empty() && !metrics.open(metricsPath, error)) {
    error = "--metrics: " + error;
    return false;
  }
  if (!csvFolder.empty()) {
    auto csv = std::make_unique<CsvMonitor>();
    if (!csv->open(csvFolder, error)) {
      error = "csv_monitor: " + error;
      return false;
    }
    monitors.emplace_back("csv_monitor", std::move(csv));
  }
  if (!tensorboardFolder.empty()) {
    auto tensorboard = std::make_unique<TensorBoardMonitor>();
    if (!tensorboard->open(tensorboardFolder, error)) {
      error = "tensorboard: " + error;
      return false;
    }
    monitors.emplace_back("tensorboard", std::move(tensorboard));
  }
  return true;
}

bool StepLog::record(const StepMetrics &record, int64_t globalBatch,
                     std::string &error) {
  if (metrics.isOpen() && !metrics.append(record, error)) {
    error = "--metrics: " + error;
    return false;
  }
  for (auto &[block, monitor] : monitors)
    if (!writeStepEvents(*monitor, record.step, globalBatch, record, error)) {
      error = block + ": " + error;
      return false;
    }
  return true;
}

bool StepLog::sync(std::string &error) {
  if (!metrics.sync(error)) {
    error = "--metrics: " + error;
    return false;
  }
  for (auto &[block, monitor] : monitors)
    if (!monitor->sync(error)) {
      error = block + ": " + error;
      return false;
    }
  return true;
}

} // namespace sharc::rt
