//===- Kernels.h - What generated programs are written against --*- C++ -*-===//
//
// Every program `sharc compile` emits includes this header (and Errors.h)
// from the runtime.  A generated kernel is a functor whose call operator
// computes one element (or one row) of its output; `launch` runs it over an
// index range: a CUDA grid when the translation unit is compiled by nvcc, a
// host loop (spread over runtime/ThreadPool.h's threads when large)
// otherwise.  The same functor text is therefore the device kernel and its
// host twin.
//
// Scalar semantics follow the reference evaluator (ir/Eval*.cpp): every float
// op's result is rounded to its element type (f32 arithmetic is done in float,
// which gives the evaluator's double-then-round bits; exp, tanh, ... are
// computed in double), integers wrap in 64 bits, sums accumulate in double;
// the scalar functions themselves are runtime/Math.h's, shared with it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_KERNELS_H
#define SHARC_RUNTIME_KERNELS_H

#include "runtime/Device.h"
#include "runtime/Float16.h"
#include "runtime/Gemm.h"
#include "runtime/Math.h"
#include "runtime/Program.h"
#include "runtime/Random.h"
#include "runtime/Swap.h"
#include "runtime/ThreadPool.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#include "runtime/GemmCuda.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define SHARC_HD __host__ __device__ __forceinline__
#else
/// Always inlined on the host too: a kernel's operator() inlined into its
/// launch loop is what lets that loop vectorize.
#define SHARC_HD __attribute__((always_inline)) inline
#endif

namespace sharc::kern {

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

using math::geluErf;
using math::geluTanh;
using math::ipow;
using math::relu;
using math::sigmoid;
using math::truncDiv;
using math::wrapAdd;
using math::wrapMul;
using math::wrapNeg;
using math::wrapSub;
//===----------------------------------------------------------------------===//
// 16-bit floats: f16 and bf16 values are stored as their bits and computed
// on as float (which holds every one of them exactly).  Each result is
// rounded once to nearest, ties to even, from the float or double it was
// computed in: +, -, *, / and sqrt in float rounded again to 16 bits give the
// same bits as the exact result rounded once (float has more than 2p + 2
// bits for p = 11 and 8), and functions computed in double round from the
// double directly, as the evaluator does.
//===----------------------------------------------------------------------===//

using rt::roundToOddFloat;

/// IEEE binary16 storage.
struct f16 {
  uint16_t bits;
  f16() = default;
  /// From an integer: its value, rounded once.
  template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
  SHARC_HD explicit f16(I x) : f16(static_cast<double>(x)) {}
#ifdef __CUDA_ARCH__
  SHARC_HD explicit f16(float x) : bits(__half_as_ushort(__float2half_rn(x))) {}
  SHARC_HD explicit f16(double x) : bits(__half_as_ushort(__double2half(x))) {}
  SHARC_HD explicit operator float() const {
    return __half2float(__ushort_as_half(bits));
  }
#else
  SHARC_HD explicit f16(float x) : bits(rt::floatToHalf(x)) {}
  SHARC_HD explicit f16(double x) : bits(rt::floatToHalf(roundToOddFloat(x))) {}
  SHARC_HD explicit operator float() const { return rt::halfToFloat(bits); }
#endif
  SHARC_HD explicit operator double() const {
    return static_cast<float>(*this);
  }
};

/// bfloat16 storage.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  /// From an integer: its value, rounded once.
  template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
  SHARC_HD explicit bf16(I x) : bf16(static_cast<double>(x)) {}
#ifdef __CUDA_ARCH__
  SHARC_HD explicit bf16(float x)
      : bits(__bfloat16_as_ushort(__float2bfloat16_rn(x))) {}
  SHARC_HD explicit bf16(double x)
      : bits(__bfloat16_as_ushort(__double2bfloat16(x))) {}
  SHARC_HD explicit operator float() const {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
#else
  SHARC_HD explicit bf16(float x) : bits(rt::floatToBFloat16(x)) {}
  SHARC_HD explicit bf16(double x)
      : bits(rt::floatToBFloat16(roundToOddFloat(x))) {}
  SHARC_HD explicit operator float() const { return rt::bfloat16ToFloat(bits); }
#endif
  SHARC_HD explicit operator double() const {
    return static_cast<float>(*this);
  }
};

/// p[index] for 16-bit f16/bf16 elements at a computed index (a broadcast
/// operand): on the host, as one half of the 4-byte-aligned word that holds
/// the element, because x86's vector gathers load 32- and 64-bit elements
/// only, and GCC leaves a loop with a 16-bit gather scalar.  The word's
/// other half may lie just outside the buffer, but never outside the
/// aligned word, so never on another page; it is not used.
template <typename T> SHARC_HD T gather16(const T *p, int64_t index) {
#ifdef __CUDA_ARCH__
  return p[index];
#else
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "gather16 reads the low half of a word as the first element");
  typedef uint32_t __attribute__((may_alias)) Word;
  uintptr_t address = reinterpret_cast<uintptr_t>(p);
  const Word *words = reinterpret_cast<const Word *>(address & ~uintptr_t(3));
  int64_t element = index + int64_t((address & 3) >> 1);
  uint32_t word = words[element >> 1];
  T value;
  value.bits = uint16_t(element & 1 ? word >> 16 : word);
  return value;
#endif
}

/// `x` rounded to f16 / bf16, as a float.
template <typename T> SHARC_HD float roundF16(T x) {
  return static_cast<float>(f16(x));
}
template <typename T> SHARC_HD float roundBF16(T x) {
  return static_cast<float>(bf16(x));
}

SHARC_HD double fmaxNan(double a, double b) { return math::maxNan(a, b); }
SHARC_HD double fminNan(double a, double b) { return math::minNan(a, b); }
// f32 twins of the exactly rounded ones (the same bits as in double).
SHARC_HD float relu(float x) { return x > 0 || x != x ? x : 0.0f; }
SHARC_HD float fmaxNan(float a, float b) {
  return a != a || b != b ? a + b : (a < b ? b : a);
}
SHARC_HD float fminNan(float a, float b) {
  return a != a || b != b ? a + b : (b < a ? b : a);
}

/// Float to integer: truncation toward zero, NaN to 0, saturating at the
/// int64 range (the evaluator's conversion).
SHARC_HD int64_t ftoi(double x) {
  if (x != x)
    return 0;
  if (x >= 9223372036854775808.0)
    return std::numeric_limits<int64_t>::max();
  if (x < -9223372036854775808.0)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(x);
}
SHARC_HD int64_t iabs(int64_t a) { return a < 0 ? wrapNeg(a) : a; }
SHARC_HD int64_t imax(int64_t a, int64_t b) { return a < b ? b : a; }
SHARC_HD int64_t imin(int64_t a, int64_t b) { return b < a ? b : a; }

/// The maximum of value(c) for c in [0, n), as the in-order loop
/// `max = max < v ? v : max` from -inf computes it (NaNs are skipped), in 16
/// independent lanes so that the loop vectorizes.  The maximum's value does
/// not depend on the order; only the sign of a zero maximum does (the first
/// zero seen wins), so a zero maximum is found again in order.
template <typename Value> SHARC_HD double rowMax(int64_t n, Value value) {
  constexpr int kLanes = 16;
  double lane[kLanes];
  for (int k = 0; k < kLanes; ++k)
    lane[k] = -HUGE_VAL;
  const int64_t whole = n - n % kLanes;
  for (int64_t c = 0; c < whole; c += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = value(c + k);
      lane[k] = lane[k] < v ? v : lane[k];
    }
  double max = -HUGE_VAL;
  for (int k = 0; k < kLanes; ++k)
    max = max < lane[k] ? lane[k] : max;
  for (int64_t c = whole; c < n; ++c) {
    const double v = value(c);
    max = max < v ? v : max;
  }
  if (max == 0) {
    max = -HUGE_VAL;
    for (int64_t c = 0; c < n; ++c) {
      const double v = value(c);
      max = max < v ? v : max;
    }
  }
  return max;
}

//===----------------------------------------------------------------------===//
// Run-time errors inside kernels
//===----------------------------------------------------------------------===//

/// Kernels cannot stop the program; they record the first error code (an
/// index into the program's message table) and the step checks it at its end.
/// One program per translation unit, so internal linkage is enough.
#if defined(__CUDACC__)
static __device__ int deviceErrorCode = 0;
#endif
inline std::atomic<int> hostErrorCode{0};
SHARC_HD void raise(int code) {
#if defined(__CUDA_ARCH__)
  atomicCAS(&deviceErrorCode, 0, code);
#else
  int none = 0;
  hostErrorCode.compare_exchange_strong(none, code);
#endif
}

/// Integer division and power that report their run-time error as `code`.
SHARC_HD int64_t truncDiv(int64_t a, int64_t b, int code) {
  bool bad = false;
  int64_t result = math::truncDiv(a, b, bad);
  if (bad)
    raise(code);
  return result;
}
SHARC_HD int64_t ipow(int64_t base, int64_t exponent, int code) {
  bool bad = false;
  int64_t result = math::ipow(base, exponent, bad);
  if (bad)
    raise(code);
  return result;
}

//===----------------------------------------------------------------------===//
// Launching
//===----------------------------------------------------------------------===//

#if defined(__CUDACC__)
/// Threads per block of every kernel, and the blocks of a grid-stride grid
/// over n indices (capped: each thread loops over the rest).
constexpr int kBlockThreads = 256;
inline unsigned gridBlocks(int64_t n) {
  int64_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

template <typename F> __global__ void runKernel(F f, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f(i);
}
/// The error code recorded by kernels so far (0: none); resets it.
inline int takeError(const rt::StepContext *context) {
  int code = 0;
  cudaMemcpyFromSymbolAsync(&code, deviceErrorCode, sizeof(int), 0,
                            cudaMemcpyDeviceToHost,
                            static_cast<cudaStream_t>(context->stream));
  cudaStreamSynchronize(static_cast<cudaStream_t>(context->stream));
  if (code) {
    int zero = 0;
    cudaMemcpyToSymbol(deviceErrorCode, &zero, sizeof(int));
  }
  // Kernels run on the host (launchHost) record theirs on the host.
  int host = hostErrorCode.exchange(0);
  return code ? code : host;
}
#else
inline int takeError(const rt::StepContext *) {
  return hostErrorCode.exchange(0);
}
#endif

/// Runs `f(i)` for i in [0, n) on the host's threads (runtime/ThreadPool.h),
/// in contiguous chunks when the work is large enough; each call touches
/// about `work` elements.
template <typename F> void runOnHost(int64_t n, int64_t work, const F &f) {
  if (n < 2 || n * work < 32768 || rt::hostThreads() == 1) {
    const F kernel = f;
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i)
      kernel(i);
    return;
  }
  rt::parallelFor(
      n,
      [](const void *functor, int64_t begin, int64_t end) {
        // A local copy: stores through the kernel's pointers cannot alias it,
        // so its members stay in registers.
        const F kernel = *static_cast<const F *>(functor);
    // Iterations write disjoint elements and never read what another
    // writes (the memory plan keeps a kernel's inputs and outputs apart, or
    // lets it write element i over the element i it reads), so the loop may
    // be vectorized without alias checks.
#pragma GCC ivdep
        for (int64_t i = begin; i < end; ++i)
          kernel(i);
      },
      &f);
}

/// Runs `f(i)` for i in [0, n); each call touches about `work` elements.
/// Iterations are independent, so the result does not depend on how they are
/// spread over threads.
template <typename F>
void launch(const rt::StepContext *context, int64_t n, int64_t work,
            const F &f) {
  if (n <= 0)
    return;
#if defined(__CUDACC__)
  (void)work;
  runKernel<<<gridBlocks(n), kBlockThreads, 0,
              static_cast<cudaStream_t>(context->stream)>>>(f, n);
#else
  (void)context;
  runOnHost(n, work, f);
#endif
}

/// Runs `f(i)` for i in [0, n) on the host, whatever the target: a kernel of
/// an op run on the host (ZeRO-Offload to the CPU: the optimizer update of
/// state kept in host memory), on host memory only.
template <typename F>
void launchHost(const rt::StepContext *context, int64_t n, int64_t work,
                const F &f) {
  (void)context;
  if (n > 0)
    runOnHost(n, work, f);
}

/// Launches of one kernel over index ranges of their own, run as one launch
/// (the optimizer update of every parameter): member j computes indices
/// [0, counts[j]) of its own tensors.  The members write disjoint persistent
/// buffers and read nothing another member writes (the code generator
/// groups only such launches), so they may run in any order.
template <typename F, int N> struct Group {
  F kernels[N];
  int64_t counts[N];
};

/// A Group with the start of each member in the joint index range.
template <typename F, int N> struct GroupRange {
  F kernels[N];
  int64_t starts[N + 1];

  explicit GroupRange(const Group<F, N> &group) {
    starts[0] = 0;
    for (int j = 0; j < N; ++j) {
      kernels[j] = group.kernels[j];
      starts[j + 1] = starts[j] + group.counts[j];
    }
  }
  /// The member that joint index i belongs to.
  SHARC_HD int member(int64_t i) const {
    int lo = 0, hi = N - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (starts[mid] <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

#if defined(__CUDACC__)
template <typename F, int N>
__global__ void runGroup(const GroupRange<F, N> range) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < range.starts[N]; i += int64_t(gridDim.x) * blockDim.x) {
    int j = range.member(i);
    range.kernels[j](i - range.starts[j]);
  }
}
#endif

/// Runs every member of `group` (`work`: as in launch()) as one launch: one
/// grid on CUDA; on the host the joint range spread over the thread pool, so
/// small members share the threads with large ones and there is one wait.
template <typename F, int N>
void launchGroup(const rt::StepContext *context, int64_t work,
                 const Group<F, N> &group) {
  const GroupRange<F, N> range(group);
  int64_t total = range.starts[N];
  if (total <= 0)
    return;
#if defined(__CUDACC__)
  (void)work;
  runGroup<F, N><<<gridBlocks(total), kBlockThreads, 0,
                   static_cast<cudaStream_t>(context->stream)>>>(range);
#else
  (void)context;
  auto run = [](const void *data, int64_t begin, int64_t end) {
    const auto &r = *static_cast<const GroupRange<F, N> *>(data);
    for (int j = r.member(begin); begin < end; ++j) {
      const F kernel = r.kernels[j];
      int64_t stop = end < r.starts[j + 1] ? end : r.starts[j + 1];
      int64_t offset = r.starts[j];
#pragma GCC ivdep
      for (int64_t i = begin - offset; i < stop - offset; ++i)
        kernel(i);
      begin = stop;
    }
  };
  if (total < 2 || total * work < 32768 || rt::hostThreads() == 1)
    run(&range, 0, total);
  else
    rt::parallelFor(total, run, &range);
#endif
}

/// Copies `bytes` between two buffers of the program.
/// ZeRO-Offload to the CPU: starts copying `bytes` from `src` to `dest`
/// between device and host memory (`toHost`: from the device's to the
/// host's), after the work enqueued so far; transferWait waits for it.
inline uint64_t transferStart(const rt::StepContext *, void *dest,
                              const void *src, size_t bytes, bool toHost) {
  return rt::startTransfer(dest, src, bytes, toHost);
}
inline void transferWait(const rt::StepContext *, uint64_t ticket) {
  rt::waitTransfer(ticket);
}

/// Copies between two buffers in host memory (ZeRO-Offload to the CPU).
inline void copyHost(void *dest, const void *src, size_t bytes) {
  if (dest != src && bytes != 0)
    std::memmove(dest, src, bytes);
}

inline void copy(const rt::StepContext *context, void *dest, const void *src,
                 size_t bytes) {
  if (dest == src || bytes == 0)
    return;
#if defined(__CUDACC__)
  cudaMemcpyAsync(dest, src, bytes, cudaMemcpyDeviceToDevice,
                  static_cast<cudaStream_t>(context->stream));
#else
  (void)context;
  std::memmove(dest, src, bytes);
#endif
}

/// One (strided-batched) GEMM: cuBLASLt on CUDA, BLAS on the host.
inline void gemm(const rt::StepContext *context, const rt::GemmArgs &args) {
#if defined(__CUDACC__)
  rt::gemmCuda(args, static_cast<cudaStream_t>(context->stream));
#else
  (void)context;
  rt::gemm(args);
#endif
}

} // namespace sharc::kern

#endif // SHARC_RUNTIME_KERNELS_H
