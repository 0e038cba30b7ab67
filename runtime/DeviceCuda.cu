//===- DeviceCuda.cu - Device memory and the stream on CUDA ---------------===//
//
// Device.h on one CUDA device per process: deviceInit selects the device
// (local rank modulo the number of visible GPUs) and creates one non-blocking
// stream, on which every copy, memset, collective (NcclCommunicator) and
// kernel of the generated program is enqueued.  Copies synchronize the stream
// before returning, so host buffers may be reused at once; memsets are only
// enqueued.  Every CUDA error is fatal and names the function, the CUDA call
// and the error.
//
//===----------------------------------------------------------------------===//

#include "runtime/Device.h"

#include "runtime/Errors.h"

#include <cuda_runtime_api.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sharc::rt {

namespace {

/// The device of this process (-1 before deviceInit) and its stream.
int deviceId = -1;
cudaStream_t stream = nullptr;

/// Fatal unless `status` is cudaSuccess, naming `function`, `call` and the
/// error.
void checkCuda(cudaError_t status, const char *function, const char *call) {
  if (status != cudaSuccess)
    fatal(std::string(function) + ": " + call + ": " +
          cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

/// Fatal when deviceInit has not been called.
void requireInit(const char *function) {
  if (deviceId < 0)
    fatal(std::string(function) + " called before deviceInit");
}

} // namespace

void deviceInit(int localRank) {
  if (deviceId >= 0)
    fatal("deviceInit called twice");
  if (localRank < 0)
    fatal("deviceInit: local rank " + std::to_string(localRank) +
          " is negative");
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0)
    fatal(std::string("deviceInit: no CUDA device is available "
                      "(cudaGetDeviceCount: ") +
          (status != cudaSuccess ? cudaGetErrorString(status)
                                 : "0 devices visible") +
          "); the CUDA target needs a GPU, use the CPU target otherwise");
  int id = localRank % count;
  checkCuda(cudaSetDevice(id), "deviceInit", "cudaSetDevice");
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "deviceInit", "cudaStreamCreateWithFlags");
  deviceId = id;
}

std::string deviceName() {
  requireInit("deviceName");
  cudaDeviceProp prop;
  checkCuda(cudaGetDeviceProperties(&prop, deviceId), "deviceName",
            "cudaGetDeviceProperties");
  return std::string(prop.name) + " (cuda:" + std::to_string(deviceId) + ")";
}

uint64_t deviceMemoryBytes() {
  requireInit("deviceMemoryBytes");
  size_t freeBytes = 0, totalBytes = 0;
  checkCuda(cudaMemGetInfo(&freeBytes, &totalBytes), "deviceMemoryBytes",
            "cudaMemGetInfo");
  return freeBytes;
}

namespace {
/// The most device memory seen in use (devicePeakBytes).
uint64_t peakInUse = 0;

void samplePeak() {
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess &&
      totalBytes - freeBytes > peakInUse)
    peakInUse = totalBytes - freeBytes;
}
} // namespace

uint64_t devicePeakBytes() {
  requireInit("devicePeakBytes");
  samplePeak();
  return peakInUse;
}

void *deviceStream() {
  requireInit("deviceStream");
  return stream;
}

void *deviceAlloc(size_t bytes) {
  requireInit("deviceAlloc");
  // cudaMalloc aligns to at least 256 bytes; zero bytes may give null, so
  // allocate one byte to return a unique pointer.
  void *pointer = nullptr;
  cudaError_t status = cudaMalloc(&pointer, bytes ? bytes : 1);
  if (status != cudaSuccess)
    fatal("deviceAlloc: cudaMalloc of " + std::to_string(bytes) + " bytes: " +
          cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
  samplePeak();
  return pointer;
}

void deviceFree(void *pointer) {
  if (!pointer)
    return;
  requireInit("deviceFree");
  // Work still queued on the stream may use the memory.
  checkCuda(cudaStreamSynchronize(stream), "deviceFree",
            "cudaStreamSynchronize");
  checkCuda(cudaFree(pointer), "deviceFree", "cudaFree");
}

void copyToDevice(void *dest, const void *src, size_t bytes) {
  requireInit("copyToDevice");
  if (bytes == 0)
    return;
  checkCuda(cudaMemcpyAsync(dest, src, bytes, cudaMemcpyHostToDevice, stream),
            "copyToDevice", "cudaMemcpyAsync");
  checkCuda(cudaStreamSynchronize(stream), "copyToDevice",
            "cudaStreamSynchronize");
}

void copyToHost(void *dest, const void *src, size_t bytes) {
  requireInit("copyToHost");
  if (bytes == 0)
    return;
  checkCuda(cudaMemcpyAsync(dest, src, bytes, cudaMemcpyDeviceToHost, stream),
            "copyToHost", "cudaMemcpyAsync");
  checkCuda(cudaStreamSynchronize(stream), "copyToHost",
            "cudaStreamSynchronize");
}

void deviceMemset(void *dest, int value, size_t bytes) {
  requireInit("deviceMemset");
  if (bytes == 0)
    return;
  checkCuda(cudaMemsetAsync(dest, value, bytes, stream), "deviceMemset",
            "cudaMemsetAsync");
}

void deviceSynchronize() {
  requireInit("deviceSynchronize");
  checkCuda(cudaStreamSynchronize(stream), "deviceSynchronize",
            "cudaStreamSynchronize");
}

void *hostAlloc(size_t bytes) {
  requireInit("hostAlloc");
  // Pinned, so that transfers run asynchronously (cudaHostAlloc aligns to
  // at least a page).
  void *pointer = nullptr;
  cudaError_t status =
      cudaHostAlloc(&pointer, bytes ? bytes : 1, cudaHostAllocDefault);
  if (status != cudaSuccess)
    fatal("hostAlloc: cudaHostAlloc of " + std::to_string(bytes) +
          " bytes of pinned host memory: " + cudaGetErrorString(status) + " (" +
          cudaGetErrorName(status) + ")");
  return pointer;
}

void hostFree(void *pointer) {
  if (!pointer)
    return;
  requireInit("hostFree");
  checkCuda(cudaStreamSynchronize(stream), "hostFree", "cudaStreamSynchronize");
  checkCuda(cudaFreeHost(pointer), "hostFree", "cudaFreeHost");
}

namespace {
/// Transfers between device and host memory run on a stream of their own,
/// each after an event recorded on the compute stream (so after the work
/// that produced its source), and record an event of their own when done.
struct Transfers {
  cudaStream_t copyStream = nullptr;
  /// Events free for reuse, and those of the transfers in flight by ticket.
  std::vector<cudaEvent_t> freeEvents;
  std::unordered_map<uint64_t, std::pair<cudaEvent_t, cudaEvent_t>> inFlight;
  uint64_t nextTicket = 1;
  uint64_t bytes = 0;

  cudaEvent_t event() {
    if (!freeEvents.empty()) {
      cudaEvent_t e = freeEvents.back();
      freeEvents.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    checkCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
              "startTransfer", "cudaEventCreateWithFlags");
    return e;
  }
};

Transfers &transfers() {
  static Transfers instance;
  return instance;
}
} // namespace

uint64_t startTransfer(void *dest, const void *src, size_t bytes, bool toHost) {
  requireInit("startTransfer");
  Transfers &t = transfers();
  if (!t.copyStream)
    checkCuda(cudaStreamCreateWithFlags(&t.copyStream, cudaStreamNonBlocking),
              "startTransfer", "cudaStreamCreateWithFlags");
  cudaEvent_t ready = t.event(), done = t.event();
  checkCuda(cudaEventRecord(ready, stream), "startTransfer", "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(t.copyStream, ready, 0), "startTransfer",
            "cudaStreamWaitEvent");
  if (bytes)
    checkCuda(cudaMemcpyAsync(dest, src, bytes,
                              toHost ? cudaMemcpyDeviceToHost
                                     : cudaMemcpyHostToDevice,
                              t.copyStream),
              "startTransfer", "cudaMemcpyAsync");
  checkCuda(cudaEventRecord(done, t.copyStream), "startTransfer",
            "cudaEventRecord");
  t.bytes += bytes;
  uint64_t ticket = t.nextTicket++;
  t.inFlight[ticket] = {ready, done};
  return ticket;
}

void waitTransfer(uint64_t ticket) {
  requireInit("waitTransfer");
  Transfers &t = transfers();
  auto found = t.inFlight.find(ticket);
  if (found == t.inFlight.end())
    fatal("waitTransfer: ticket " + std::to_string(ticket) +
          " is not a transfer in flight");
  auto [ready, done] = found->second;
  // The host reads what came (or reuses what went) once the copy is done;
  // the kernels enqueued after this call see it too.
  checkCuda(cudaEventSynchronize(done), "waitTransfer", "cudaEventSynchronize");
  t.freeEvents.push_back(ready);
  t.freeEvents.push_back(done);
  t.inFlight.erase(found);
}

uint64_t transferredBytes() { return transfers().bytes; }

void resetTransferStats() { transfers().bytes = 0; }

} // namespace sharc::rt
