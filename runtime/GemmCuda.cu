//===- GemmCuda.cu - Strided-batched matrix multiplication on GPU ---------===//
//
// Row-major C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T: each row-major matrix, read column-major with the
// same leading dimension, is its transpose, so B's storage is cuBLASLt's
// first operand, A's the second, and C's layout is n x m.
//
//===----------------------------------------------------------------------===//

#include "runtime/GemmCuda.h"

#include "runtime/Errors.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace sharc::rt {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void checkCuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    fatal(std::string("gemmCuda: ") + what + ": " + cudaGetErrorName(status) +
          " (" + cudaGetErrorString(status) + ")");
}

void checkCublas(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fatal(std::string("gemmCuda: ") + what + ": " +
          cublasLtGetStatusName(status) + " (" +
          cublasLtGetStatusString(status) + ")");
}

/// The process-wide cuBLASLt handle and the workspace of each device.
struct Context {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  std::unordered_map<int, void *> workspaces;
};

Context &context() {
  static Context instance;
  return instance;
}

/// The handle and the current device's workspace, created on first use.
void acquire(cublasLtHandle_t &handle, void *&workspace) {
  Context &ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex);
  if (!ctx.handle)
    checkCublas(cublasLtCreate(&ctx.handle), "cublasLtCreate");
  int device = 0;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  void *&slot = ctx.workspaces[device];
  if (!slot)
    checkCuda(cudaMalloc(&slot, kWorkspaceBytes), "workspace allocation");
  handle = ctx.handle;
  workspace = slot;
}

/// Owns a cuBLASLt matrix layout.
struct Layout {
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
         int64_t batch, int64_t stride) {
    checkCublas(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows),
                                           uint64_t(cols), ld),
                "cublasLtMatrixLayoutCreate");
    int32_t count = int32_t(batch);
    checkCublas(
        cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
        "setting the batch count");
    checkCublas(cublasLtMatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &stride, sizeof(stride)),
                "setting the batch stride");
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(layout); }
  Layout(const Layout &) = delete;
  Layout &operator=(const Layout &) = delete;

  cublasLtMatrixLayout_t layout = nullptr;
};

/// The largest power of two (at most 256) dividing the address of `pointer`
/// and, when there are several batches, the byte stride between them.
uint32_t alignment(const void *pointer, int64_t strideBytes, int64_t batch) {
  uint64_t bits = reinterpret_cast<uintptr_t>(pointer) | 256;
  if (batch > 1 && strideBytes != 0)
    bits |= uint64_t(strideBytes);
  return uint32_t(bits & (~bits + 1));
}

__device__ float widen(__half x) { return __half2float(x); }
__device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float widen(float x) { return x; }
__device__ double widen(double x) { return x; }
__device__ void store(__half &out, float x) { out = __float2half_rn(x); }
__device__ void store(__nv_bfloat16 &out, float x) {
  out = __float2bfloat16_rn(x);
}
__device__ void store(float &out, float x) { out = x; }
__device__ void store(double &out, double x) { out = x; }

/// C[b] = beta * C[b] + bias (C not read when beta is 0; no bias when it is
/// null): the k = 0 product, which cuBLASLt does not take, and the start of
/// an f64 product with a bias (cuBLASLt has no f64 bias epilogue).
template <typename T, typename Scale>
__global__ void scaleKernel(T *c, int64_t m, int64_t n, int64_t ldc,
                            int64_t strideC, int64_t batch, Scale beta,
                            const T *bias) {
  int64_t total = batch * m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % n, row = (i / n) % m, b = i / (m * n);
    T &element = c[b * strideC + row * ldc + col];
    Scale scaled = beta == Scale(0) ? Scale(0) : beta * widen(element);
    store(element, bias ? scaled + widen(bias[col]) : scaled);
  }
}

template <typename T, typename Scale>
void scale(const GemmArgs &args, cudaStream_t stream) {
  int64_t total = args.batch * args.m * args.n;
  int blocks = int(std::min<int64_t>((total + 255) / 256, 4096));
  scaleKernel<T, Scale><<<blocks, 256, 0, stream>>>(
      static_cast<T *>(args.c), args.m, args.n, args.ldc, args.strideC,
      args.batch, Scale(args.beta), static_cast<const T *>(args.bias));
  checkCuda(cudaGetLastError(), "launching the beta scaling kernel");
}

} // namespace

void gemmCuda(const GemmArgs &args, cudaStream_t stream, bool allowTf32) {
  validateGemm(args, "gemmCuda");
  if (args.batch == 0 || args.m == 0 || args.n == 0 || args.outerBatch == 0)
    return;
  if (args.outerBatch > 1) {
    // cuBLASLt has one batch level: one strided-batched call per outer batch.
    int64_t bytes = int64_t(dtypeBytes(args.type));
    for (int64_t o = 0; o < args.outerBatch; ++o) {
      GemmArgs one = args;
      one.outerBatch = 1;
      one.a = static_cast<const char *>(args.a) + o * args.outerStrideA * bytes;
      one.b = static_cast<const char *>(args.b) + o * args.outerStrideB * bytes;
      one.c = static_cast<char *>(args.c) + o * args.outerStrideC * bytes;
      gemmCuda(one, stream, allowTf32);
    }
    return;
  }
  if (args.k == 0) {
    switch (args.type) {
    case DType::f32:
      return scale<float, float>(args, stream);
    case DType::f64:
      return scale<double, double>(args, stream);
    case DType::f16:
      return scale<__half, float>(args, stream);
    default:
      return scale<__nv_bfloat16, float>(args, stream);
    }
  }

  cudaDataType_t dataType = CUDA_R_32F;
  cublasComputeType_t computeType =
      allowTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = CUDA_R_32F;
  if (args.type == DType::f64) {
    dataType = scaleType = CUDA_R_64F;
    computeType = CUBLAS_COMPUTE_64F;
  } else if (args.type != DType::f32) {
    dataType = args.type == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
    computeType = CUBLAS_COMPUTE_32F;
  }
  float alpha32 = float(args.alpha), beta32 = float(args.beta);
  double beta64 = args.beta;
  // f64 has no bias epilogue: C starts as the bias and the product adds to it.
  bool biasFirst = args.bias && args.type == DType::f64;
  if (biasFirst) {
    scale<double, double>(args, stream);
    beta64 = 1;
  }
  const void *alpha = args.type == DType::f64
                          ? static_cast<const void *>(&args.alpha)
                          : &alpha32;
  const void *beta =
      args.type == DType::f64 ? static_cast<const void *>(&beta64) : &beta32;

  cublasLtHandle_t handle;
  void *workspace;
  acquire(handle, workspace);

  cublasLtMatmulDesc_t desc;
  checkCublas(cublasLtMatmulDescCreate(&desc, computeType, scaleType),
              "cublasLtMatmulDescCreate");
  cublasOperation_t opFirst = args.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = args.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  checkCublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                             &opFirst, sizeof(opFirst)),
              "setting transa");
  checkCublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                             &opSecond, sizeof(opSecond)),
              "setting transb");

  if (args.bias && !biasFirst) {
    // The bias epilogue adds a vector over the rows of the column-major
    // result, which are the columns of our row-major C: one bias for all
    // batches.
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    int64_t biasStride = 0;
    checkCublas(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                    sizeof(epilogue)),
                "setting the bias epilogue");
    checkCublas(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                    sizeof(args.bias)),
                "setting the bias pointer");
    checkCublas(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dataType,
                    sizeof(dataType)),
                "setting the bias type");
    checkCublas(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &biasStride,
                    sizeof(biasStride)),
                "setting the bias batch stride");
  }

  Layout first(dataType, args.transB ? args.k : args.n,
               args.transB ? args.n : args.k, args.ldb, args.batch,
               args.strideB);
  Layout second(dataType, args.transA ? args.m : args.k,
                args.transA ? args.k : args.m, args.lda, args.batch,
                args.strideA);
  Layout result(dataType, args.n, args.m, args.ldc, args.batch, args.strideC);

  cublasLtMatmulPreference_t preference;
  checkCublas(cublasLtMatmulPreferenceCreate(&preference),
              "cublasLtMatmulPreferenceCreate");
  size_t workspaceBytes = kWorkspaceBytes;
  checkCublas(cublasLtMatmulPreferenceSetAttribute(
                  preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                  &workspaceBytes, sizeof(workspaceBytes)),
              "setting the workspace size");
  int64_t elementBytes = int64_t(dtypeBytes(args.type));
  uint32_t alignFirst =
      alignment(args.b, args.strideB * elementBytes, args.batch);
  uint32_t alignSecond =
      alignment(args.a, args.strideA * elementBytes, args.batch);
  uint32_t alignResult =
      alignment(args.c, args.strideC * elementBytes, args.batch);
  for (auto [attribute, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignFirst},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignSecond},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignResult},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignResult}})
    checkCublas(cublasLtMatmulPreferenceSetAttribute(preference, attribute,
                                                     value, sizeof(*value)),
                "setting an alignment");

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  checkCublas(cublasLtMatmulAlgoGetHeuristic(
                  handle, desc, first.layout, second.layout, result.layout,
                  result.layout, preference, 1, &heuristic, &found),
              "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    fatal("gemmCuda: cuBLASLt has no algorithm for this GEMM (m=" +
          std::to_string(args.m) + ", n=" + std::to_string(args.n) +
          ", k=" + std::to_string(args.k) + ")");
  checkCublas(cublasLtMatmul(handle, desc, alpha, args.b, first.layout, args.a,
                             second.layout, beta, args.c, result.layout, args.c,
                             result.layout, &heuristic.algo, workspace,
                             kWorkspaceBytes, stream),
              "cublasLtMatmul");
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatmulDescDestroy(desc);
}

} // namespace sharc::rt
