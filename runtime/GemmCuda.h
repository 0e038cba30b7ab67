//===- GemmCuda.h - Strided-batched matrix multiplication on GPU -*- C++
//-*-===//
//
// gemm() of Gemm.h on device memory, through cuBLASLt.  See docs/runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_GEMMCUDA_H
#define SHARC_RUNTIME_GEMMCUDA_H

#include "runtime/Gemm.h"

#include <cuda_runtime_api.h>

namespace sharc::rt {

/// Enqueues `args` (whose A, B and C are device pointers on the current
/// device) on `stream` with cublasLtMatmul.  f16, bf16 and f32 accumulate in
/// f32 (CUBLAS_COMPUTE_32F; with `allowTf32`, f32 uses
/// CUBLAS_COMPUTE_32F_FAST_TF32) and round once to the output type; f64 uses
/// CUBLAS_COMPUTE_64F.  The cuBLASLt handle and a 32 MiB workspace per device
/// are created on first use and kept; calls that share a device must not run
/// concurrently on different streams (they share the workspace).  Fatal on
/// invalid arguments and on CUDA or cuBLAS errors.
void gemmCuda(const GemmArgs &args, cudaStream_t stream = nullptr,
              bool allowTf32 = false);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_GEMMCUDA_H
