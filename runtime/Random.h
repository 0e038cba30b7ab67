//===- Random.h - Counter-based random bits for dropout ---------*- C++ -*-===//
//
// Philox-4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): 32-bit random words that are a pure function
// of a 64-bit key and a 128-bit counter.  `sharc.dropout_mask` (docs/ir.md)
// keys it by the seed and counts by (position / 4, global batch row, step,
// stream), so every element's bit is computed where it is needed, in any
// order, on any thread, rank or target, and backward can recompute forward's
// mask.  The evaluator (ir/EvalData.cpp) and every generated kernel (host and
// CUDA) use these definitions.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_RANDOM_H
#define SHARC_RUNTIME_RANDOM_H

#include <cstdint>

#if defined(__CUDACC__)
#define SHARC_RANDOM_HD __host__ __device__ __forceinline__
#else
#define SHARC_RANDOM_HD inline
#endif

namespace sharc::random {

/// The four 32-bit words of Philox-4x32-10 at counter (c0, c1, c2, c3) and
/// key (k0, k1); `out` receives them.
SHARC_RANDOM_HD void philox4x32(uint32_t c0, uint32_t c1, uint32_t c2,
                                uint32_t c3, uint32_t k0, uint32_t k1,
                                uint32_t out[4]) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/// The keep threshold of a dropout ratio in [0, 1): an element is kept when
/// its 32 random bits are at least floor(ratio * 2^32).
inline uint64_t dropoutThreshold(double ratio) {
  return static_cast<uint64_t>(ratio * 4294967296.0);
}

/// The keep bits of positions [4 group, 4 group + 4) of global batch row
/// `row` at `step` for the dropout op numbered `stream`, as bits 0-3.
SHARC_RANDOM_HD unsigned dropoutKeepBits(uint64_t seed, uint32_t stream,
                                         uint64_t step, uint64_t row,
                                         uint64_t group, uint64_t threshold) {
  uint32_t words[4];
  philox4x32(uint32_t(group), uint32_t(row), uint32_t(step), stream,
             uint32_t(seed), uint32_t(seed >> 32), words);
  unsigned bits = 0;
  for (int i = 0; i < 4; ++i)
    bits |= unsigned(uint64_t(words[i]) >= threshold) << i;
  return bits;
}

} // namespace sharc::random

#endif // SHARC_RUNTIME_RANDOM_H
