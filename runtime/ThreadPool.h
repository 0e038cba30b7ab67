//===- ThreadPool.h - Host threads for kernel launches ----------*- C++ -*-===//
//
// The CPU target's kernels run through parallelFor: the index range is cut
// into one contiguous chunk per thread (a static partition, so which thread
// computes an index never affects a result: iterations are independent).
// Workers spin briefly between launches, then sleep, so an idle rank does not
// steal cores from BLAS or from other ranks on the same machine.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_THREADPOOL_H
#define SHARC_RUNTIME_THREADPOOL_H

#include <cstdint>

namespace sharc::rt {

/// Runs `body(context, begin, end)` over [0, n) split into contiguous chunks,
/// one per pool thread (the caller runs the first), and returns when all are
/// done.  Not reentrant: call it from one thread at a time.
void parallelFor(int64_t n, void (*body)(const void *, int64_t, int64_t),
                 const void *context);

/// Threads parallelFor uses: SHARC_NUM_THREADS; else OMP_NUM_THREADS capped
/// at the CPUs the process may run on; else those CPUs when the launcher
/// bound the process (mpirun binds each rank to one core by default: launch
/// with `--bind-to none` or `--map-by slot:PE=T` to give a rank T cores), or
/// the hardware threads divided by the ranks on this machine (Open MPI's or
/// Slurm's local size).  At least 1.
int hostThreads();

/// Sets the thread count (before the first parallelFor; 0 keeps the default).
void setHostThreads(int threads);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_THREADPOOL_H
