//===- NcclCommunicator.h - Collectives over GPUs with NCCL -----*- C++ -*-===//
//
// The CUDA target's Communicator: NCCL collectives on device buffers, enqueued
// on the device stream (Device.h), over the ranks of MPI_COMM_WORLD.  See
// docs/runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_NCCLCOMMUNICATOR_H
#define SHARC_RUNTIME_NCCLCOMMUNICATOR_H

#include "runtime/Communicator.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

// nccl.h's ncclComm_t is `struct ncclComm *`; declared here so that including
// this header does not need the NCCL headers.
struct ncclComm;

namespace sharc::rt {

/// One NCCL communicator over all ranks of MPI_COMM_WORLD, one GPU per rank.
///
/// Construct it after MPI_Init and deviceInit: rank 0 creates the NCCL unique
/// id (ncclGetUniqueId), MPI_Bcast sends it to every rank, and every rank
/// joins with ncclCommInitRank on its current device (two ranks may not share
/// a GPU).  Destroy it before MPI_Finalize.
///
/// Buffers are device pointers.  Collectives are enqueued on deviceStream()
/// and return before they complete: later work on the stream sees their
/// results, and the host reads them through copyToHost (which synchronizes)
/// or after deviceSynchronize().  Collectives of zero elements do nothing.
/// The in-place layouts of reduceScatter and allGather (Communicator.h) are
/// NCCL's own in-place layouts.
///
/// Determinism: NCCL's reductions are deterministic for a fixed configuration
/// (number of ranks, topology, NCCL version and the algorithm, protocol and
/// channel count it picks for a message size, which NCCL_ALGO/NCCL_PROTO can
/// pin): each element is reduced in a fixed order by one rank and then copied,
/// so every rank gets bitwise the same result, and reruns repeat it.  The
/// order is not Communicator.h's rank order 0, 1, ..., N-1, and f16/bf16 are
/// summed in their own precision at each step (rounded once per rank, not once
/// per element), so results may differ from MpiCommunicator's in the last
/// bits.  Hardware reductions (NVLS, CollNet/SHARP) are outside this promise;
/// NCCL_ALGO=Ring,Tree excludes them.
///
/// Timeouts (setCollectiveTimeout): the communicator is nonblocking
/// (ncclConfig_t::blocking = 0), so start-up (ncclCommInitRankConfig), the
/// enqueueing of each collective and ncclCommFinalize are polled with
/// ncclCommGetAsyncError against the timeout, and ncclCommAbort cancels them
/// when it expires.  Each collective enqueued is bracketed by two CUDA events;
/// a watchdog thread polls them every few milliseconds, and when a collective
/// has been running on the GPU (its first event done, its second not) for
/// longer than the timeout it ends the job (MPI_Abort kills every rank's
/// process, GPU work included).  The MPI parts -- the broadcast of the NCCL id
/// and the barrier -- go through an MpiCommunicator with the same timeout,
/// whose side channel the watchdog also answers, so the message names the
/// ranks that did not answer (needs MPI_THREAD_SERIALIZED or above, which the
/// training binary asks for).  An asynchronous NCCL error is fatal too.
class NcclCommunicator : public Communicator {
public:
  /// `timeoutSeconds` as for setCollectiveTimeout; it bounds start-up too.
  explicit NcclCommunicator(double timeoutSeconds = kDefaultCollectiveTimeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const override { return rankId; }
  int size() const override { return numRanks; }

protected:
  /// Waits for the stream (so every enqueued collective has completed on
  /// this rank), then an MPI barrier.
  void doBarrier() override;
  void doAllReduce(void *buffer, size_t count, DType type,
                   ReduceOp op) override;
  void doReduceScatter(const void *send, void *recv, size_t sliceCount,
                       DType type, ReduceOp op) override;
  void doAllGather(const void *send, void *recv, size_t sliceCount,
                   DType type) override;
  void doBroadcast(void *buffer, size_t count, DType type, int root) override;
  /// Started all-reduces run on a second stream (the communication stream)
  /// after the work enqueued so far on the device stream; wait() makes the
  /// device stream wait for them without blocking the host, so kernels
  /// enqueued in between overlap the communication.
  uint64_t doStartAllReduce(void *buffer, size_t count, DType type,
                            ReduceOp op) override;
  /// Likewise for started reduce-scatters and all-gathers.
  uint64_t doStartReduceScatter(const void *send, void *recv, size_t sliceCount,
                                DType type, ReduceOp op) override;
  uint64_t doStartAllGather(const void *send, void *recv, size_t sliceCount,
                            DType type) override;
  void doWait(uint64_t ticket) override;

private:
  struct Watchdog;

  /// Enqueues `enqueue` (an NCCL call on the given stream) on the
  /// communication stream after the work enqueued so far on the device
  /// stream; returns its ticket.
  uint64_t startOnCommStream(const std::function<void(void *)> &enqueue);
  /// The NCCL all-reduce, reduce-scatter and all-gather, enqueued on
  /// `onStream` (the device stream, or the communication stream for started
  /// ones).
  void allReduceOn(void *onStream, void *buffer, size_t count, DType type,
                   ReduceOp op);
  void reduceScatterOn(void *onStream, const void *send, void *recv,
                       size_t sliceCount, DType type, ReduceOp op);
  void allGatherOn(void *onStream, const void *send, void *recv,
                   size_t sliceCount, DType type);

  /// Waits until the NCCL call that returned `status` (an ncclResult_t) has
  /// left ncclInProgress; fatal on an error, and, after ncclCommAbort, when
  /// `call` has waited collectiveTimeout() seconds since `startSeconds`.
  void settle(int status, const char *function, const CollectiveCall &call,
              double startSeconds);
  /// Runs `enqueue` (an NCCL call on `onStream`, returning its
  /// ncclResult_t) between two events the watchdog watches.
  template <typename Enqueue>
  void tracked(void *onStream, const char *function, Enqueue enqueue);
  /// Ends the job: `call` did not complete within the timeout.
  [[noreturn]] void timedOut(const CollectiveCall &call,
                             const std::string &state);

  int rankId = 0;
  int numRanks = 1;
  /// MPI_COMM_WORLD with the same timeout: the id broadcast, the barrier and
  /// the side channel.
  std::unique_ptr<MpiCommunicator> host;
  /// Whether threads other than the caller's may call MPI (the watchdog).
  bool mpiFromWatchdog = false;
  ncclComm *comm = nullptr;
  /// The device stream and the communication stream, cudaStream_t.
  void *stream = nullptr;
  void *commStream = nullptr;
  /// Completion events (cudaEvent_t) of started collectives not waited for
  /// yet, by ticket, and reusable ones.
  std::vector<std::pair<uint64_t, void *>> inFlight;
  std::vector<void *> spareEvents;
  std::unique_ptr<Watchdog> watchdog;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_NCCLCOMMUNICATOR_H
