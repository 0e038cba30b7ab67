//===- Metrics.cpp - Per-step metrics as JSON lines -----------------------===//

#include "runtime/Metrics.h"
#include "runtime/AtomicFile.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

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

MetricsFile::~MetricsFile() {
  if (fd >= 0)
    ::close(fd);
}

bool MetricsFile::open(const std::string &target, std::string &error) {
  path = target;
  fd = ::open(path.c_str(),
              O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
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
  return true;
}

bool MetricsFile::append(const StepMetrics &metrics, std::string &error) {
  double time = std::chrono::duration<double>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::string line = metricsLine(metrics, time);
  // The write-limit test hook (AtomicFile.h) counts these bytes too.
  if (takeWriteBudget(written, line.size()) < line.size()) {
    error = path + ": " + std::strerror(ENOSPC);
    return false;
  }
  size_t done = 0;
  while (done < line.size()) {
    ssize_t wrote = ::write(fd, line.data() + done, line.size() - done);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0) {
      error = path + ": " + std::strerror(wrote < 0 ? errno : EIO);
      return false;
    }
    done += size_t(wrote);
  }
  written += line.size();
  return true;
}

bool MetricsFile::sync(std::string &error) {
  if (fd >= 0 && ::fsync(fd) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

} // namespace sharc::rt
