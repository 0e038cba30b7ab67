//===- Blas.h - The BLAS library's kernels for this CPU ---------*- C++ -*-===//
//
// OpenBLAS (Debian's is built with DYNAMIC_ARCH) picks its kernels from the
// CPU's family and model when it loads.  On a CPU newer than the library it
// falls back to generic ones: OpenBLAS 0.3.21 takes Intel's Sapphire and
// Emerald Rapids (family 6, models 143 and 207) for a Prescott and runs its
// SSE3 kernels there, several times slower than its AVX-512 ones.  The
// environment variable OPENBLAS_CORETYPE overrides the choice, but it is read
// when the library loads, before main() runs.  So ensureBlasKernels() runs
// the process again (execv of itself) with OPENBLAS_CORETYPE set when the
// library's kernels are below the CPU's instruction set.  sharc (the
// evaluator) and the training binaries both call it first thing, so on one
// machine they multiply with the same kernels and their results stay equal
// bit for bit.
//
// SHARC_BLAS_CORE=NAME asks for OpenBLAS's core NAME (SkylakeX, Haswell,
// ...) whatever the library chose; SHARC_BLAS_CORE=keep leaves the library's
// choice alone.  An OPENBLAS_CORETYPE the user set is kept, with a warning
// when its kernels are generic on this CPU.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_BLAS_H
#define SHARC_RUNTIME_BLAS_H

#include <optional>
#include <string>
#include <string_view>

namespace sharc::rt {

/// The x86-64 instruction sets GEMM kernels are written for, in order.
enum class SimdLevel { sse = 0, avx = 1, avx2 = 2, avx512 = 3 };

/// "SSE", "AVX", "AVX2", "AVX-512".
const char *simdLevelName(SimdLevel level);

/// The instruction set of the CPU this process runs on (AVX-512: F, BW, DQ
/// and VL; AVX2: with FMA).
SimdLevel cpuSimdLevel();

/// The instruction set of OpenBLAS's kernels for core `name` ("Prescott",
/// "Haswell", "SkylakeX", ...; case-insensitive), or nullopt for a name
/// this table does not know.
std::optional<SimdLevel> blasCoreLevel(std::string_view name);

/// What to do about the BLAS kernels at start-up.
struct BlasDecision {
  /// The OPENBLAS_CORETYPE to run again with; empty: go on.
  std::string rerunWith;
  /// A warning to print; empty: none.
  std::string warning;
};

/// The decision for a library running core `core` on a CPU of level `cpu`.
/// `userCore` is OPENBLAS_CORETYPE, `requested` SHARC_BLAS_CORE and
/// `rerunCore` the OPENBLAS_CORETYPE this process was run again with (each
/// null when unset).
BlasDecision decideBlasKernels(std::string_view core, SimdLevel cpu,
                               const char *userCore, const char *requested,
                               const char *rerunCore);

/// Applies decideBlasKernels to this process: runs it again with
/// OPENBLAS_CORETYPE set (execv; it does not return then), or prints the
/// warning (once per job: on rank 0 under an MPI launcher).  Call first in
/// main(), before MPI starts and before any other thread.
void ensureBlasKernels(char **argv);

/// The library and its kernels, e.g. "OpenBLAS 0.3.21, Cooperlake kernels".
std::string blasDescription();

} // namespace sharc::rt

#endif // SHARC_RUNTIME_BLAS_H
