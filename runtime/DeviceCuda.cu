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

} // namespace sharc::rt
