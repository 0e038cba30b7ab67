//===- Device.h - Memory of the device the program runs on ------*- C++ -*-===//
//
// The step loop moves data through these functions only, so the same
// TrainMain.cpp drives the CPU target (DeviceHost.cpp: plain host memory) and
// the CUDA target (DeviceCuda.cu: device memory, one stream).  Failures are
// fatal (runtime/Errors.h) and name the operation.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_DEVICE_H
#define SHARC_RUNTIME_DEVICE_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::rt {

/// Selects the device for this process (CUDA: local rank modulo the number of
/// visible GPUs, the local rank taken from the MPI launcher's environment) and
/// creates the stream.  Call once after MPI_Init.
void deviceInit(int localRank);

/// A short description for the log ("cpu", "NVIDIA H200 (cuda:0)").
std::string deviceName();

/// The stream generated code enqueues on (null on the CPU).
void *deviceStream();

/// The bytes of memory the device has (CPU: the machine's physical memory;
/// CUDA: the GPU's free memory once the process has a context), so that a
/// program too large for it fails before allocating, with its figures.
uint64_t deviceMemoryBytes();

/// The process's real peak memory on the device so far, measured
/// independently of any plan: on the host the peak resident set size
/// (getrusage's ru_maxrss: code, libraries, MPI and the heap included); on
/// CUDA the most device memory seen in use (cudaMemGetInfo's total minus
/// free, sampled after every allocation and by this call: the context,
/// library workspaces and NCCL's buffers included).
uint64_t devicePeakBytes();

/// Allocates `bytes` of device memory aligned to at least 256 bytes (on the
/// CPU target to kSwapAlignment, 4096, for NVMe offload's O_DIRECT
/// transfers); freed by deviceFree.  Zero bytes gives a valid unique pointer.
void *deviceAlloc(size_t bytes);
void deviceFree(void *pointer);

void copyToDevice(void *dest, const void *src, size_t bytes);
void copyToHost(void *dest, const void *src, size_t bytes);
void deviceMemset(void *dest, int value, size_t bytes);

/// Waits for all work enqueued on the stream.
void deviceSynchronize();

/// Allocates `bytes` of host memory that transfers read and write (pinned
/// on CUDA: cudaHostAlloc), aligned to kSwapAlignment; freed by hostFree.
void *hostAlloc(size_t bytes);
void hostFree(void *pointer);

/// ZeRO-Offload to the CPU: starts copying `bytes` from `src` to `dest`
/// between device and host memory (`toHost`: from device memory to host
/// memory, else the other way), ordered after the work enqueued on the
/// stream so far; returns a ticket for waitTransfer, which blocks until the
/// copy is done (so that host kernels may read what came to the host, and
/// the host memory a copy to the device read may be reused).  On the CPU
/// target both memories are the host's: the copy is done at once.
uint64_t startTransfer(void *dest, const void *src, size_t bytes, bool toHost);
void waitTransfer(uint64_t ticket);
/// The bytes copied by startTransfer since the last resetTransferStats.
uint64_t transferredBytes();
void resetTransferStats();

} // namespace sharc::rt

#endif // SHARC_RUNTIME_DEVICE_H
