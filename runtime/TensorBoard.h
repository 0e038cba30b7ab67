//===- TensorBoard.h - DeepSpeed's tensorboard monitor ----------*- C++ -*-===//
//
// The `tensorboard` block of a DeepSpeed config (monitor/tensorboard.py,
// DeepSpeed 0.19.8): rank 0 writes the run's scalar events to a TensorBoard
// event file in OUTPUT_PATH/JOB_NAME, as torch.utils.tensorboard's
// SummaryWriter does for DeepSpeed:
//
//   - the file is `events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>`
//     (n counts the monitors of the process from 0), created exclusively (an
//     existing file or a symbolic link at that name is refused, never
//     overwritten); a resumed run writes a file of its own in the same folder,
//     which TensorBoard reads together;
//   - the file is a TFRecord stream: each record is the length (u64, little
//     endian), the masked CRC-32C of those 8 bytes (u32), the serialized
//     `Event` message and its masked CRC-32C, masked as TFRecord masks
//     (((crc >> 15) | (crc << 17)) + 0xa282ead8);
//   - the first event holds `file_version` "brain.Event:2", each later one a
//     `Summary` with one value: the tag, the value as a 32-bit float
//     (`simple_value`, as add_scalar writes it) and the step (DeepSpeed's
//     step: samples trained).
//
// The messages are runtime/tensorboard.proto, serialized by protobuf.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_TENSORBOARD_H
#define SHARC_RUNTIME_TENSORBOARD_H

#include "runtime/Metrics.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::rt {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `size` bytes.
uint32_t crc32c(const void *data, size_t size);

/// The CRC as a TFRecord stores it.
inline uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// `payload` framed as one TFRecord record.
std::string tfRecord(const std::string &payload);

class TensorBoardMonitor : public Monitor {
public:
  /// Creates FOLDER (and its parents) if needed and a new event file in it,
  /// holding the file-version event.
  bool open(const std::string &folder, std::string &error);

  /// Appends a scalar summary event.
  bool write(const std::string &name, double value, int64_t samples,
             std::string &error) override;
  bool sync(std::string &error) override { return file.sync(error); }

  /// The event file.
  const std::string &path() const { return filePath; }

private:
  std::string filePath;
  AppendFile file;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_TENSORBOARD_H
