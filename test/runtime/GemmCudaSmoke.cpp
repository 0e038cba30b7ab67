//===- GemmCudaSmoke.cpp - A small GEMM through gemmCuda ------------------===//
//
// Multiplies A^T (A stored 3 x 2) by B (3 x 2) on the device and checks the
// 2 x 2 product.  ctest only compiles and links it (runtime-cuda-compile);
// run it by hand on a machine with a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/GemmCuda.h"

#include <cstdio>

using namespace sharc::rt;

int main() {
  const float a[6] = {1, 4, 2, 5, 3, 6};     // A^T = [1 2 3; 4 5 6]
  const float b[6] = {1, 0, -1, -2, -3, -4}; // B = [1 0; -1 -2; -3 -4]
  const float expected[4] = {-10, -16, -19, -34};
  void *memory = nullptr;
  if (cudaMalloc(&memory, 16 * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "gemm-cuda-smoke: cannot allocate device memory\n");
    return 1;
  }
  auto *device = static_cast<float *>(memory);
  if (cudaMemcpy(device, a, sizeof(a), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(device + 6, b, sizeof(b), cudaMemcpyHostToDevice) !=
          cudaSuccess) {
    std::fprintf(stderr, "gemm-cuda-smoke: cannot copy the operands\n");
    return 1;
  }
  GemmArgs args;
  args.transA = true;
  args.m = 2;
  args.n = 2;
  args.k = 3;
  args.a = device;
  args.lda = 2;
  args.b = device + 6;
  args.ldb = 2;
  args.c = device + 12;
  args.ldc = 2;
  gemmCuda(args);
  float c[4] = {};
  if (cudaMemcpy(c, device + 12, sizeof(c), cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    std::fprintf(stderr, "gemm-cuda-smoke: cannot read the result\n");
    return 1;
  }
  cudaFree(device);
  for (int i = 0; i < 4; ++i)
    if (c[i] != expected[i]) {
      std::fprintf(stderr, "gemm-cuda-smoke: C[%d] = %g, expected %g\n", i,
                   c[i], expected[i]);
      return 1;
    }
  std::printf("gemm-cuda-smoke: ok\n");
  return 0;
}
