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

/// Calls fn(T(), S()) with T the device element type of `type` and S the
/// type its values are computed in (f32 for the 16-bit types).
template <typename Fn> void byType(DType type, Fn &&fn) {
  switch (type) {
  case DType::f32:
    return fn(float(), float());
  case DType::f64:
    return fn(double(), double());
  case DType::f16:
    return fn(__half(), float());
  default:
    return fn(__nv_bfloat16(), float());
  }
}

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

/// The activation epilogue as its own pass over C (aux = C first when set):
/// for what cuBLASLt's epilogues do not cover (f64, k = 0, ReLU with the
/// pre-activation as output, an aux leading dimension not a multiple of 8).
template <typename T, typename Scale>
__global__ void activationKernel(T *c, T *aux, int64_t m, int64_t n,
                                 int64_t ldc, int64_t strideC, int64_t batch,
                                 GemmActivation activation) {
  int64_t total = batch * m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % n, row = (i / n) % m, b = i / (m * n);
    int64_t at = b * strideC + row * ldc + col;
    Scale value = widen(c[at]);
    if (aux)
      store(aux[at], value);
    store(c[at], Scale(applyActivation(activation, double(value))));
  }
}

template <typename T, typename Scale>
void activate(const GemmArgs &args, cudaStream_t stream) {
  int64_t total = args.batch * args.m * args.n;
  int blocks = int(std::min<int64_t>((total + 255) / 256, 4096));
  activationKernel<T, Scale><<<blocks, 256, 0, stream>>>(
      static_cast<T *>(args.c), static_cast<T *>(args.aux), args.m, args.n,
      args.ldc, args.strideC, args.batch, args.activation);
  checkCuda(cudaGetLastError(), "launching the activation kernel");
}

/// True when cuBLASLt's epilogue computes `args`' activation: GELU with or
/// without the pre-activation output (whose leading dimension and batch
/// stride must be multiples of 8), ReLU without it (ReLU_AUX stores a
/// bit mask, not the pre-activation), on f32/f16/bf16 with k > 0.
bool libraryActivation(const GemmArgs &args) {
  if (args.type == DType::f64 || args.k == 0)
    return false;
  if (!args.aux)
    return true;
  int64_t bytes = int64_t(dtypeBytes(args.type));
  return args.activation == GemmActivation::geluTanh && args.ldc % 8 == 0 &&
         (args.batch <= 1 || args.strideC % 8 == 0) &&
         alignment(args.aux, args.strideC * bytes, args.batch) >= 16;
}

} // namespace

/// `args` as the product (with its bias) followed by the activation kernel.
static void productThenActivation(const GemmArgs &args, cudaStream_t stream,
                                  bool allowTf32) {
  GemmArgs product = args;
  product.activation = GemmActivation::none;
  product.aux = nullptr;
  gemmCuda(product, stream, allowTf32);
  byType(args.type, [&](auto element, auto scalar) {
    activate<decltype(element), decltype(scalar)>(args, stream);
  });
}

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
      if (args.aux)
        one.aux = static_cast<char *>(args.aux) + o * args.outerStrideC * bytes;
      gemmCuda(one, stream, allowTf32);
    }
    return;
  }
  if (args.activation != GemmActivation::none && !libraryActivation(args))
    return productThenActivation(args, stream, allowTf32);
  if (args.k == 0)
    return byType(args.type, [&](auto element, auto scalar) {
      scale<decltype(element), decltype(scalar)>(args, stream);
    });

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

  // Epilogues act on the column-major result, whose rows are the columns of
  // our row-major C: the bias vector is added along them (one bias for all
  // batches) and the aux matrix has C's leading dimension and batch stride.
  bool withBias = args.bias && !biasFirst;
  cublasLtEpilogue_t epilogue =
      withBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (args.activation == GemmActivation::relu)
    epilogue = withBias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (args.activation == GemmActivation::geluTanh && args.aux)
    epilogue =
        withBias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (args.activation == GemmActivation::geluTanh)
    epilogue = withBias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  auto setAttribute = [&](cublasLtMatmulDescAttributes_t attribute,
                          const void *value, size_t size, const char *what) {
    checkCublas(cublasLtMatmulDescSetAttribute(desc, attribute, value, size),
                what);
  };
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue),
                 "setting the epilogue");
  if (withBias) {
    int64_t biasStride = 0;
    setAttribute(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                 sizeof(args.bias), "setting the bias pointer");
    setAttribute(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dataType,
                 sizeof(dataType), "setting the bias type");
    setAttribute(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &biasStride,
                 sizeof(biasStride), "setting the bias batch stride");
  }
  if (args.aux) {
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &args.aux,
                 sizeof(args.aux), "setting the aux pointer");
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &args.ldc,
                 sizeof(args.ldc), "setting the aux leading dimension");
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &args.strideC,
                 sizeof(args.strideC), "setting the aux batch stride");
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
  if (found == 0 && epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      args.activation != GemmActivation::none) {
    // No kernel with this activation epilogue: the activation runs apart.
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatmulDescDestroy(desc);
    return productThenActivation(args, stream, allowTf32);
  }
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
