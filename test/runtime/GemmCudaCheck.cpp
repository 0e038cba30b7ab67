//===- GemmCudaCheck.cpp - gemmCuda against the host gemm() ---------------===//
//
// Random GEMMs through gemmCuda (cuBLASLt) compared element by element with
// the host gemm() on the same inputs: all four types, both transpose flags,
// padded leading dimensions, inner and outer batches, alpha/beta, bias,
// ReLU and tanh-GELU epilogues with and without the pre-activation output
// (leading dimensions that are and are not multiples of 8, so both cuBLASLt's
// epilogues and the separate activation kernel run), k = 0.  ctest only
// compiles and links it (runtime-cuda-compile); tools/gpu-check.sh runs it on
// a machine with a GPU.  Prints one line per failing case (at most 20) and
//   gemm-cuda-check: N cases, max relative difference D: ok | FAILED
//
//===----------------------------------------------------------------------===//

#include "runtime/Float16.h"
#include "runtime/Gemm.h"
#include "runtime/GemmCuda.h"
#include "test/runtime/GemmBuffer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sharc::rt;
using sharc::rt::test::Buffer;

namespace {

/// A device copy of a host buffer.
struct DeviceBuffer {
  explicit DeviceBuffer(const Buffer &host) : size(host.bytes.size()) {
    if (cudaMalloc(&data, std::max<size_t>(size, 1)) != cudaSuccess ||
        cudaMemcpy(data, host.bytes.data(), size, cudaMemcpyHostToDevice) !=
            cudaSuccess) {
      std::fprintf(stderr,
                   "gemm-cuda-check: cannot allocate or copy %zu "
                   "bytes of device memory\n",
                   size);
      std::exit(1);
    }
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  void copyTo(Buffer &host) const {
    if (cudaMemcpy(host.bytes.data(), data, size, cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      std::fprintf(stderr, "gemm-cuda-check: cannot read device memory\n");
      std::exit(1);
    }
  }

  void *data = nullptr;
  size_t size;
};

/// Relative tolerance per type: cuBLASLt sums in another order than BLAS
/// (TF32 off), a 16-bit result may round to the neighbouring value, and
/// cuBLASLt's GELU is its own approximation.
double tolerance(DType type) {
  switch (type) {
  case DType::f64:
    return 1e-12;
  case DType::f32:
    return 2e-5;
  case DType::f16:
    return 4e-3;
  default:
    return 2e-2;
  }
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gemm-cuda-check: error: no CUDA device\n");
    return 1;
  }
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int64_t> size(1, 70), pad(0, 3), coin(0, 1);
  std::uniform_real_distribution<double> value(-1, 1);
  int cases = 0, failures = 0;
  double worst = 0;
  for (DType type : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (int trial = 0; trial < 48; ++trial) {
      GemmArgs args;
      args.type = type;
      args.transA = coin(rng), args.transB = coin(rng);
      args.m = size(rng), args.n = size(rng);
      args.k = trial % 16 == 15 ? 0 : size(rng);
      args.batch = 1 + trial % 3;
      args.outerBatch = trial % 5 == 4 ? 2 : 1;
      args.activation = GemmActivation(trial % 3);
      bool bias = trial % 4 >= 2,
           aux = args.activation != GemmActivation::none && trial % 2 == 1;
      args.alpha = trial % 7 == 0 ? -0.5 : 1;
      args.beta = bias || trial % 5 != 1 ? 0 : 0.75;
      int64_t rowsA = args.transA ? args.k : args.m;
      int64_t colsA = args.transA ? args.m : args.k;
      int64_t rowsB = args.transB ? args.n : args.k;
      int64_t colsB = args.transB ? args.k : args.n;
      args.lda = std::max<int64_t>(1, colsA) + pad(rng);
      args.ldb = std::max<int64_t>(1, colsB) + pad(rng);
      // Every other case pads C's rows to a multiple of 8 (cuBLASLt's GELU
      // aux output); the others take the separate activation kernel.
      args.ldc = trial % 2 ? (args.n + 7) / 8 * 8 : args.n + pad(rng);
      args.strideA = rowsA * args.lda + pad(rng);
      args.strideB = coin(rng) ? 0 : rowsB * args.ldb + pad(rng);
      args.strideC = args.m * args.ldc + (trial % 2 ? 8 : pad(rng));
      args.outerStrideA = args.batch * args.strideA;
      args.outerStrideB = args.batch * std::max<int64_t>(args.strideB, 1);
      args.outerStrideC = args.batch * args.strideC;
      int64_t outer = args.outerBatch;
      Buffer a(type, outer * args.outerStrideA + 1),
          b(type, outer * args.outerStrideB + rowsB * args.ldb + 1),
          c(type, outer * args.outerStrideC + 1), biasVector(type, args.n);
      for (Buffer *buffer : {&a, &b, &c, &biasVector})
        for (int64_t i = 0; i < buffer->count(); ++i)
          buffer->set(i, value(rng));
      Buffer auxHost = c, cHost = c;
      DeviceBuffer da(a), db(b), dc(c), dbias(biasVector), daux(c);
      GemmArgs host = args;
      host.a = a.bytes.data(), host.b = b.bytes.data();
      host.c = cHost.bytes.data();
      host.bias = bias ? biasVector.bytes.data() : nullptr;
      host.aux = aux ? auxHost.bytes.data() : nullptr;
      gemm(host);
      GemmArgs device = args;
      device.a = da.data, device.b = db.data, device.c = dc.data;
      device.bias = bias ? dbias.data : nullptr;
      device.aux = aux ? daux.data : nullptr;
      gemmCuda(device);
      cudaError_t status = cudaDeviceSynchronize();
      if (status != cudaSuccess) {
        std::fprintf(stderr, "gemm-cuda-check: error: %s\n",
                     cudaGetErrorString(status));
        return 1;
      }
      Buffer cDevice = c, auxDevice = c;
      dc.copyTo(cDevice);
      daux.copyTo(auxDevice);
      ++cases;
      double caseWorst = 0;
      for (auto [got, want] :
           {std::pair{&cDevice, &cHost}, {&auxDevice, &auxHost}})
        for (int64_t i = 0; i < got->count(); ++i) {
          double difference = std::fabs(got->get(i) - want->get(i)) /
                              (1 + std::fabs(want->get(i)));
          caseWorst =
              std::max(caseWorst, std::isnan(difference) ? 1e300 : difference);
        }
      worst = std::max(worst, caseWorst);
      // cuBLASLt's GELU may use a hardware tanh (about 11 correct bits):
      // there the check is of layout, bias and aux, not of the last bits.
      double allowed = args.activation == GemmActivation::geluTanh
                           ? std::max(tolerance(type), 2e-3)
                           : tolerance(type);
      if (caseWorst > allowed && ++failures <= 20)
        std::printf("gemm-cuda-check: FAIL %s m=%lld n=%lld k=%lld batch=%lld "
                    "outer=%lld transA=%d transB=%d bias=%d activation=%d "
                    "aux=%d ldc=%lld beta=%g: relative difference %g\n",
                    dtypeName(type), (long long)args.m, (long long)args.n,
                    (long long)args.k, (long long)args.batch,
                    (long long)args.outerBatch, int(args.transA),
                    int(args.transB), int(bias), int(args.activation), int(aux),
                    (long long)args.ldc, args.beta, caseWorst);
    }
  std::printf("gemm-cuda-check: %d cases, max relative difference %g: %s\n",
              cases, worst, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
