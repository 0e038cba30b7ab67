//===- GemmBf16.cpp - bf16 products on oneDNN's bf16 kernels ------------===//

#include "runtime/GemmBf16.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

// The OpenMP runtime's (libgomp, which oneDNN is built on), declared here:
// omp.h is GCC's, not on every compiler's include path.
extern "C" void omp_set_num_threads(int);

namespace sharc::rt {

namespace {

/// True when oneDNN finds the CPU's bf16 dot-product instructions.
bool cpuHasBf16Kernels() {
  auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

bool decideNative() {
  bool hardware = cpuHasBf16Kernels();
  const char *request = std::getenv("SHARC_BF16_GEMM");
  if (!request || !*request)
    return hardware;
  if (std::strcmp(request, "widened") == 0)
    return false;
  if (std::strcmp(request, "native") == 0) {
    if (!hardware)
      std::fprintf(stderr,
                   "sharc: warning: SHARC_BF16_GEMM=native, but oneDNN finds "
                   "no bf16 instructions (AVX512-BF16 or AMX) on this CPU; "
                   "bf16 products are widened to f32\n");
    return hardware;
  }
  std::fprintf(stderr,
               "sharc: warning: SHARC_BF16_GEMM=%s is neither 'native' nor "
               "'widened'; ignored\n",
               request);
  return hardware;
}

/// The CPU engine, never destroyed: the thread pool's workers, whose cached
/// matmuls and streams refer to it, end after the static objects that were
/// made after their pool.
dnnl::engine &cpuEngine() {
  static auto *engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

/// One oneDNN matmul of dense operands, its memory objects (their data
/// pointers set per call) and its scratchpad.
struct Product {
  dnnl::matmul matmul;
  dnnl::memory a, b, c, scratchpad;
};

/// The matmul for C (m x n, dense) = A (m x k, dense) B (k x n dense, or
/// n x k dense when transB), in f32 from bf16.
Product makeProduct(int64_t m, int64_t n, int64_t k, bool transB) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::memory::desc a({m, k}, dt::bf16, dims{k, 1});
  dnnl::memory::desc b({k, n}, dt::bf16, transB ? dims{1, k} : dims{n, 1});
  dnnl::memory::desc c({m, n}, dt::f32, dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr,
                                  cpuEngine());
  dnnl::engine &engine = cpuEngine();
  return {dnnl::matmul(pd), dnnl::memory(a, engine, nullptr),
          dnnl::memory(b, engine, nullptr), dnnl::memory(c, engine, nullptr),
          dnnl::memory(pd.scratchpad_desc(), engine)};
}

/// A oneDNN reorder that copies a bf16 matrix to a dense one, transposing
/// it or not: its JIT kernels move 16-bit values many times faster than a
/// scalar loop through a transposed matrix.
struct Copy {
  dnnl::reorder reorder;
  dnnl::memory from, to;
};

/// The Copy of the rows x cols matrix stored with leading dimension `ld`,
/// or of its transpose when `transpose` (stored cols x rows), to a dense
/// rows x cols matrix.
Copy makeCopy(int64_t rows, int64_t cols, int64_t ld, bool transpose) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::memory::desc from({rows, cols}, dt::bf16,
                          transpose ? dims{1, ld} : dims{ld, 1});
  dnnl::memory::desc to({rows, cols}, dt::bf16, dims{cols, 1});
  dnnl::engine &engine = cpuEngine();
  dnnl::memory fromMemory(from, engine, nullptr), toMemory(to, engine, nullptr);
  return {dnnl::reorder(fromMemory, toMemory), fromMemory, toMemory};
}

/// Copies the rows x cols matrix at `src` (leading dimension `ld`), or its
/// transpose when `transpose` (src is then cols x rows), to the dense
/// rows x cols matrix `dst`, with the calling thread's cached Copy.
void dense(dnnl::stream &stream, const uint16_t *src, int64_t rows,
           int64_t cols, int64_t ld, bool transpose,
           std::vector<uint16_t> &dst) {
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Copy>
      copies;
  if (dst.size() < size_t(rows * cols))
    dst.resize(rows * cols);
  auto key = std::make_tuple(rows, cols, ld, transpose);
  auto found = copies.find(key);
  if (found == copies.end()) {
    if (copies.size() >= 256)
      copies.clear();
    found = copies.emplace(key, makeCopy(rows, cols, ld, transpose)).first;
  }
  Copy &copy = found->second;
  copy.from.set_data_handle(const_cast<uint16_t *>(src));
  copy.to.set_data_handle(dst.data());
  copy.reorder.execute(stream, copy.from, copy.to);
}

} // namespace

bool bf16GemmNative() {
  static const bool native = decideNative();
  return native;
}

std::string bf16GemmDescription() {
  if (!bf16GemmNative())
    return "widened to f32";
  const dnnl_version_t *version = dnnl_version();
  std::string text = "oneDNN " + std::to_string(version->major) + "." +
                     std::to_string(version->minor) + "." +
                     std::to_string(version->patch);
  try {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    dnnl::memory::desc a({64, 64}, dt::bf16, dims{64, 1});
    dnnl::memory::desc c({64, 64}, dt::f32, dims{64, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpuEngine());
    text += std::string(", ") + pd.impl_info_str() + " kernels";
  } catch (const dnnl::error &) {
  }
  return text;
}

bool bf16Product(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                 float *c, int64_t ldc, std::string &error) {
  if (m == 0 || n == 0)
    return true;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return true;
  }
  // oneDNN's threads would cut the sums by thread count: one per call.
  // (The limit is the calling thread's own, set before its first matmul, so
  // that the matmuls are also built for one thread.)
  thread_local const bool oneThread = (omp_set_num_threads(1), true);
  (void)oneThread;
  thread_local std::vector<uint16_t> denseA, denseB;
  thread_local std::vector<float> denseC;
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Product>
      products;
  try {
    thread_local dnnl::stream stream(cpuEngine());
    // One layout for every operand (GemmBf16.h).
    const uint16_t *inA = a;
    if (transA || lda != k) {
      dense(stream, a, m, k, lda, transA, denseA);
      inA = denseA.data();
    }
    int64_t colsB = transB ? k : n;
    const uint16_t *inB = b;
    if (ldb != colsB) {
      dense(stream, b, transB ? n : k, colsB, ldb, false, denseB);
      inB = denseB.data();
    }
    float *outC = c;
    if (ldc != n) {
      if (denseC.size() < size_t(m * n))
        denseC.resize(m * n);
      outC = denseC.data();
    }
    auto key = std::make_tuple(m, n, k, transB);
    auto found = products.find(key);
    if (found == products.end()) {
      // Steps use a few dozen shapes; anything else (the evaluator on many
      // models) starts over rather than growing without bound.
      if (products.size() >= 256)
        products.clear();
      found = products.emplace(key, makeProduct(m, n, k, transB)).first;
    }
    Product &product = found->second;
    product.a.set_data_handle(const_cast<uint16_t *>(inA));
    product.b.set_data_handle(const_cast<uint16_t *>(inB));
    product.c.set_data_handle(outC);
    product.matmul.execute(stream, {{DNNL_ARG_SRC, product.a},
                                    {DNNL_ARG_WEIGHTS, product.b},
                                    {DNNL_ARG_DST, product.c},
                                    {DNNL_ARG_SCRATCHPAD, product.scratchpad}});
    stream.wait();
    if (outC != c)
      for (int64_t i = 0; i < m; ++i)
        std::copy(outC + i * n, outC + (i + 1) * n, c + i * ldc);
  } catch (const dnnl::error &e) {
    error = "oneDNN bf16 matmul of " + std::to_string(m) + " x " +
            std::to_string(k) + " by " + std::to_string(k) + " x " +
            std::to_string(n) + " failed: " + e.what();
    return false;
  }
  return true;
}

} // namespace sharc::rt
