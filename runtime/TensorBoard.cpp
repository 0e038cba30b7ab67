//===- TensorBoard.cpp - DeepSpeed's tensorboard monitor ------------------===//

#include "runtime/TensorBoard.h"

#include "tensorboard.pb.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

namespace sharc::rt {

namespace {

/// The byte-at-a-time table of the reflected polynomial.
const std::array<uint32_t, 256> &crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> entries{};
    for (uint32_t byte = 0; byte < 256; ++byte) {
      uint32_t crc = byte;
      for (int bit = 0; bit < 8; ++bit)
        crc = (crc >> 1) ^ (crc & 1 ? 0x82f63b78u : 0u);
      entries[byte] = crc;
    }
    return entries;
  }();
  return table;
}

double wallTime() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void appendLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

bool appendEvent(AppendFile &file, const tensorboard::Event &event,
                 std::string &error) {
  std::string payload;
  if (!event.SerializeToString(&payload)) {
    error = "cannot serialize an event";
    return false;
  }
  return file.append(tfRecord(payload), error);
}

} // namespace

uint32_t crc32c(const void *data, size_t size) {
  const auto &table = crc32cTable();
  const auto *bytes = static_cast<const unsigned char *>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

std::string tfRecord(const std::string &payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  appendLittleEndian(record, payload.size(), 8);
  appendLittleEndian(record, maskedCrc32c(record.data(), 8), 4);
  record += payload;
  appendLittleEndian(record, maskedCrc32c(payload.data(), payload.size()), 4);
  return record;
}

bool TensorBoardMonitor::open(const std::string &folder, std::string &error) {
  if (!makeFolder(folder, error))
    return false;
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0)
    std::snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  double now = wallTime();
  // The writer's number in this process (TensorBoard's _global_uid), so
  // that two monitors of one process never take the same name.
  static std::atomic<unsigned> writers{0};
  char name[512];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%ld.%u",
                static_cast<long long>(now), host,
                static_cast<long>(::getpid()), writers++);
  filePath = (std::filesystem::path(folder) / name).string();
  if (!file.open(filePath, error, /*exclusive=*/true))
    return false;
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  event.mutable_source_metadata()->set_writer("sharc");
  return appendEvent(file, event, error) && file.sync(error);
}

bool TensorBoardMonitor::write(const std::string &name, double value,
                               int64_t samples, std::string &error) {
  tensorboard::Event event;
  event.set_wall_time(wallTime());
  event.set_step(samples);
  tensorboard::Summary::Value *scalar = event.mutable_summary()->add_value();
  scalar->set_tag(name);
  scalar->set_simple_value(static_cast<float>(value));
  return appendEvent(file, event, error);
}

} // namespace sharc::rt
