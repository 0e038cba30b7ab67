//===- CpuClones.h - Functions compiled for several CPU levels --*- C++ -*-===//
//
// The runtime library is built for baseline x86-64, where Math.h's fused
// multiply-adds are libm calls and loops vectorize with SSE2 at most.
// SHARC_CPU_CLONES before a function compiles it for baseline x86-64, for
// AVX2 + FMA (x86-64-v3) and for AVX-512 (x86-64-v4); the loader picks the
// clone for the CPU.  fma() is exact, and the runtime is built without
// contraction (runtime/CMakeLists.txt), so every clone computes the same
// bits as the evaluator.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_CPUCLONES_H
#define SHARC_RUNTIME_CPUCLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SHARC_CPU_CLONES                                                       \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define SHARC_CPU_CLONES
#endif

#endif // SHARC_RUNTIME_CPUCLONES_H
