//===- Arena.h - The planned memory of a training program ------*- C++ -*-===//
//
// One aligned allocation of the size `sharc compile` planned; the program
// addresses its buffers as offsets into it and declares each region it uses,
// so the measured peak can be reported next to the planned one.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_ARENA_H
#define SHARC_RUNTIME_ARENA_H

#include <cstddef>

namespace sharc::rt {

class Arena {
public:
  /// Allocates `size` bytes aligned to `alignment` (a power of two), zeroed.
  /// Failure is fatal.
  explicit Arena(size_t size, size_t alignment = 256);
  ~Arena();
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;

  char *base() const { return memory; }
  size_t size() const { return bytes; }

  /// The address of `offset` (at most size()); out of range is fatal.
  char *at(size_t offset) const;

  /// Declares that bytes [offset, offset + regionSize) are in use; out of
  /// range is fatal.
  void touch(size_t offset, size_t regionSize);

  /// The highest offset + regionSize declared by touch() (0 if none).
  size_t peak() const { return peakBytes; }

private:
  char *memory = nullptr;
  size_t bytes = 0;
  size_t peakBytes = 0;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_ARENA_H
