//===- DeviceHost.cpp - Device memory on the CPU target -------------------===//
//
// The CPU target's "device" is host memory: allocations are aligned host
// allocations, copies are memcpy, and there is no stream to wait for.
//
//===----------------------------------------------------------------------===//

#include "runtime/Device.h"
#include "runtime/Errors.h"
#include "runtime/Program.h"
#include "runtime/System.h"

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/resource.h>

namespace sharc::rt {

namespace {
/// Every allocation is aligned to a page, kSwapAlignment: NVMe offload reads
/// and writes arena memory with O_DIRECT (runtime/Swap.h).
constexpr size_t kAlignment = size_t(kSwapAlignment);
static_assert(kAlignment >= 256, "the arena's alignment (StepContext)");
/// Allocations of at least this size are aligned to it and asked to be backed
/// by transparent huge pages: the arena and the larger parameters and moments
/// are swept every step, and with 4 KiB pages most of those sweeps miss the
/// TLB.
constexpr size_t kHugePage = size_t(2) << 20;
} // namespace

void deviceInit(int localRank) { (void)localRank; }

std::string deviceName() { return "cpu"; }

void *deviceStream() { return nullptr; }

uint64_t deviceMemoryBytes() { return hostMemoryBytes(); }

uint64_t devicePeakBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return uint64_t(usage.ru_maxrss) * 1024; // KiB on Linux
}

void *deviceAlloc(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; zero bytes
  // still gets one block, so the pointer is valid and unique.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes)
    fatal("deviceAlloc: " + std::to_string(bytes) + " bytes is too large");
  if (rounded == 0)
    rounded = kAlignment;
  bool huge = rounded >= kHugePage;
  if (huge)
    rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  void *pointer = std::aligned_alloc(huge ? kHugePage : kAlignment, rounded);
  if (!pointer)
    fatal("deviceAlloc: out of host memory allocating " +
          std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
  // Advice only: without transparent huge pages this fails and changes
  // nothing.
  if (huge)
    (void)madvise(pointer, rounded, MADV_HUGEPAGE);
#endif
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

void *hostAlloc(size_t bytes) { return deviceAlloc(bytes); }

void hostFree(void *pointer) { deviceFree(pointer); }

namespace {
uint64_t transferred = 0;
} // namespace

uint64_t startTransfer(void *dest, const void *src, size_t bytes, bool toHost) {
  (void)toHost;
  if (bytes && dest != src)
    std::memmove(dest, src, bytes);
  transferred += bytes;
  return 0;
}

void waitTransfer(uint64_t ticket) { (void)ticket; }

uint64_t transferredBytes() { return transferred; }

void resetTransferStats() { transferred = 0; }

} // namespace sharc::rt
