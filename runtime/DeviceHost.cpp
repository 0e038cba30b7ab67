//===- DeviceHost.cpp - Device memory on the CPU target -------------------===//
//
// The CPU target's "device" is host memory: allocations are aligned host
// allocations, copies are memcpy, and there is no stream to wait for.
//
//===----------------------------------------------------------------------===//

#include "runtime/Device.h"
#include "runtime/Errors.h"

#include <cstdlib>
#include <cstring>

namespace sharc::rt {

namespace {
constexpr size_t kAlignment = 256;
} // namespace

void deviceInit(int localRank) { (void)localRank; }

std::string deviceName() { return "cpu"; }

void *deviceStream() { return nullptr; }

void *deviceAlloc(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; zero bytes
  // still gets one block, so the pointer is valid and unique.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes)
    fatal("deviceAlloc: " + std::to_string(bytes) + " bytes is too large");
  if (rounded == 0)
    rounded = kAlignment;
  void *pointer = std::aligned_alloc(kAlignment, rounded);
  if (!pointer)
    fatal("deviceAlloc: out of host memory allocating " +
          std::to_string(bytes) + " bytes");
  return pointer;
}

void deviceFree(void *pointer) { std::free(pointer); }

void copyToDevice(void *dest, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(dest, src, bytes);
}

void copyToHost(void *dest, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(dest, src, bytes);
}

void deviceMemset(void *dest, int value, size_t bytes) {
  if (bytes)
    std::memset(dest, value, bytes);
}

void deviceSynchronize() {}

} // namespace sharc::rt
