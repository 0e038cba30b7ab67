//===- Communicator.h - Collectives over ranks ------------------*- C++ -*-===//
//
// The collective layer the generated training programs use: all-reduce,
// reduce-scatter, all-gather and broadcast over flat contiguous buffers, with
// per-kind byte counters so that measured communication can be compared with
// the volume `sharc compile` plans.  MPI on CPU; NCCL on GPU
// (NcclCommunicator.h).  See docs/runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_COMMUNICATOR_H
#define SHARC_RUNTIME_COMMUNICATOR_H

#include "runtime/DType.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sharc::rt {

// Collective buffers have the element types of runtime/DType.h but i1; f16
// and bf16 are reduced in f32 and rounded once per element.

/// Reduction operators.
enum class ReduceOp { sum, max };

/// Kinds of collectives, for the counters.
enum class CollectiveKind { allReduce, reduceScatter, allGather, broadcast };
constexpr size_t kNumCollectiveKinds = 4;

/// What one rank has done with one kind of collective.
struct CollectiveStats {
  /// Number of calls.
  uint64_t calls = 0;
  /// Bytes this rank sent, by the nccl-tests bus-bandwidth convention, where
  /// B is the byte size of the whole (unsharded) buffer and N the rank count:
  /// all-reduce floor(2(N-1)B/N) per call; reduce-scatter and all-gather
  /// (N-1)B/N (exact: B is N equal slices); broadcast B (nccl-tests' factor 1)
  /// when N > 1.  All are 0 when N = 1.
  uint64_t bytes = 0;
};

/// The default collective timeout in seconds (torch.distributed's).
constexpr double kDefaultCollectiveTimeout = 600;
/// The largest collective timeout accepted, in seconds (one week).
constexpr double kMaxCollectiveTimeout = 7 * 24 * 3600;

/// Parses a collective timeout in seconds (`3`, `0.5`, `1e3`): a positive,
/// finite number of at most kMaxCollectiveTimeout.  Otherwise returns false
/// and sets `error` to what is wrong.
bool parseCollectiveTimeout(const std::string &text, double &seconds,
                            std::string &error);

/// One collective or barrier as timeout messages name it.
struct CollectiveCall {
  /// Its number among the collectives and barriers of the communicator
  /// (1, 2, ...): the same on every rank while they issue the same calls.
  uint64_t number = 0;
  /// What it is, e.g. `all-reduce #2 of step 5 (4 f32 elements)`.
  std::string what;
};

/// A group of ranks running the same program.  Every rank must call the same
/// collectives in the same order with the same counts, types and roots.
///
/// Sums are deterministic: each element's sum is folded in rank order
/// 0, 1, ..., N-1 (in f32 for 16-bit types) by one rank and then distributed,
/// so every rank gets bitwise the same result for any arrival order.
/// (NcclCommunicator keeps the bitwise agreement but folds in NCCL's order;
/// see NcclCommunicator.h.)
class Communicator {
public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Reduces `count` elements of `buffer` over all ranks, in place.
  void allReduce(void *buffer, size_t count, DType type, ReduceOp op);

  /// `send` holds size() consecutive slices of `sliceCount` elements; slice r
  /// reduced over all ranks is written to rank r's `recv` (`sliceCount`
  /// elements).  In place when `recv` is slice rank() of `send` (the ZeRO
  /// stage-1/2 layout: each rank keeps its slice of the flat gradients).
  void reduceScatter(const void *send, void *recv, size_t sliceCount,
                     DType type, ReduceOp op);

  /// The inverse layout: each rank's `send` (`sliceCount` elements) becomes
  /// slice rank() of every rank's `recv` (size() * `sliceCount` elements).
  /// In place when `send` is slice rank() of `recv`.
  void allGather(const void *send, void *recv, size_t sliceCount, DType type);

  /// Starts an all-reduce of `buffer` that runs while the caller goes on
  /// computing (overlapping communication with the rest of backward).  Started
  /// collectives complete in the order they were started, identically on every
  /// rank; `buffer` must not be touched until wait() returns for the ticket.
  /// Counted like allReduce().  Communicators without a progress engine run it
  /// at once.
  uint64_t startAllReduce(void *buffer, size_t count, DType type, ReduceOp op);

  /// Starts a reduceScatter() that runs while the caller goes on computing
  /// (ZeRO stage 2: a gradient bucket while backward computes the next), in
  /// order with the other started collectives; neither `send` nor `recv` may
  /// be touched until wait() returns for the ticket.  Counted like
  /// reduceScatter().
  uint64_t startReduceScatter(const void *send, void *recv, size_t sliceCount,
                              DType type, ReduceOp op);

  /// Starts an allGather() that runs while the caller goes on computing (ZeRO
  /// stage 3: the next parameter while the current one's layer computes), in
  /// order with the other started collectives; neither `send` nor `recv` may
  /// be touched until wait() returns for the ticket.  Counted like
  /// allGather().
  uint64_t startAllGather(const void *send, void *recv, size_t sliceCount,
                          DType type);

  /// Allocates (and touches) the host staging the collectives of a step need,
  /// `bytes` (ProgramInfo::stagingBytes, planned by the compiler), once at
  /// start-up, so that no collective allocates and the process's peak
  /// memory is the plan's.  A collective that needs more grows it.
  virtual void reserveStaging(size_t bytes);
  /// The host staging held now: the reservation, or more if a collective
  /// grew it (0 for communicators that stage nothing).
  virtual size_t stagingBytes() const { return 0; }

  /// Blocks until the collective of `ticket` (from startAllReduce) is done.
  void wait(uint64_t ticket);

  /// Blocks until every started collective is done.
  void waitAll();

  /// Copies `count` elements of `buffer` on rank `root` to every rank.
  void broadcast(void *buffer, size_t count, DType type, int root);

  /// Waits until every rank has reached the barrier.
  void barrier();

  /// Bounds every wait for other ranks -- a collective, a barrier, a started
  /// all-reduce once it runs -- to `seconds`; when one lasts longer, the job
  /// ends (fatal) with a message naming the call, the context, the timeout
  /// and the ranks that did not answer.  Fatal unless `seconds` is positive,
  /// finite and at most kMaxCollectiveTimeout.  Default:
  /// kDefaultCollectiveTimeout.
  void setCollectiveTimeout(double seconds);
  double collectiveTimeout() const { return timeoutSeconds; }

  /// Names what the program is doing (`step 12`, `start-up`) in timeout
  /// messages; calls are numbered from 1 within each context.
  void setContext(const std::string &context);

  /// Counters of one kind of collective since construction or resetStats().
  const CollectiveStats &stats(CollectiveKind kind) const {
    return counters[static_cast<size_t>(kind)];
  }
  void resetStats() { counters = {}; }
  /// The counters as they are, and put back: collectives that are not the
  /// step's (a checkpoint's agreement) stay out of its figures.
  using StatsSnapshot = std::array<CollectiveStats, kNumCollectiveKinds>;
  StatsSnapshot snapshotStats() const { return counters; }
  void restoreStats(const StatsSnapshot &saved) { counters = saved; }

protected:
  /// Starts `doAllReduce` asynchronously; returns its ticket (1, 2, ...).
  /// The default runs it at once.
  virtual uint64_t doStartAllReduce(void *buffer, size_t count, DType type,
                                    ReduceOp op);
  /// Starts `doReduceScatter` asynchronously, likewise.
  virtual uint64_t doStartReduceScatter(const void *send, void *recv,
                                        size_t sliceCount, DType type,
                                        ReduceOp op);
  /// Starts `doAllGather` asynchronously, likewise.
  virtual uint64_t doStartAllGather(const void *send, void *recv,
                                    size_t sliceCount, DType type);
  /// Waits for tickets up to and including `ticket`; the default has nothing
  /// in flight.
  virtual void doWait(uint64_t ticket);

  virtual void doAllReduce(void *buffer, size_t count, DType type,
                           ReduceOp op) = 0;
  virtual void doReduceScatter(const void *send, void *recv, size_t sliceCount,
                               DType type, ReduceOp op) = 0;
  virtual void doAllGather(const void *send, void *recv, size_t sliceCount,
                           DType type) = 0;
  virtual void doBroadcast(void *buffer, size_t count, DType type,
                           int root) = 0;
  virtual void doBarrier() = 0;

  /// Tickets handed out so far.
  uint64_t started = 0;
  /// The call being issued: set before each do* call (doStartAllReduce
  /// copies it for later).
  CollectiveCall call;
  /// Read by the threads that wait (the progress thread, the watchdog).
  std::atomic<double> timeoutSeconds{kDefaultCollectiveTimeout};

private:
  void count(CollectiveKind kind, uint64_t bytes);
  /// Numbers and describes the next call in `call`: `kind`, and unless
  /// `type` is null, `count` elements of `type`.
  void nextCall(const char *kind, size_t count, const DType *type,
                const char *note = nullptr);

  std::array<CollectiveStats, kNumCollectiveKinds> counters{};
  std::string context;
  uint64_t contextCalls = 0;
};

/// A single rank (runs without mpirun): collectives are copies.
class LocalCommunicator : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

protected:
  void doBarrier() override {}
  void doAllReduce(void *buffer, size_t count, DType type,
                   ReduceOp op) override;
  void doReduceScatter(const void *send, void *recv, size_t sliceCount,
                       DType type, ReduceOp op) override;
  void doAllGather(const void *send, void *recv, size_t sliceCount,
                   DType type) override;
  void doBroadcast(void *buffer, size_t count, DType type, int root) override;
};

/// MPI_COMM_WORLD.  The program calls MPI_Init before constructing it and
/// MPI_Finalize after destroying it.  Reductions are a personalized exchange
/// (MPI_Alltoallv) of the slices followed by a local fold in rank order, and,
/// for all-reduce, an MPI_Allgatherv of the reduced slices: the same volume as
/// ring algorithms and independent of MPI's reduction algorithms.  With MPI
/// initialized at MPI_THREAD_SERIALIZED or above, started all-reduces run on a
/// progress thread that owns MPI while any is in flight (every other call
/// waits for them first); otherwise they run at once.
///
/// Every MPI operation is nonblocking (MPI_Ialltoallv, MPI_Ibarrier, ...) and
/// polled with MPI_Test against the collective timeout: first spinning for a
/// short while (normal steps keep their latency), then sleeping between polls
/// with a growing interval (a long wait does not keep a core busy).  While a
/// rank waits it answers its peers' questions on a side channel
/// (point-to-point messages on MPI_COMM_WORLD with the tags kAskTag and
/// kAnswerTag, which MPI keeps apart from collective traffic); a rank whose
/// wait times out asks every other rank what it is doing, so that the error
/// names the ranks that did not answer -- stopped, hung, or not in any
/// collective -- and what the others are waiting in.
class MpiCommunicator : public Communicator {
public:
  /// Tags of the side channel's questions and answers on MPI_COMM_WORLD.
  static constexpr int kAskTag = 0x5AC0;
  static constexpr int kAnswerTag = 0x5AC1;

  /// `timeoutSeconds` as for setCollectiveTimeout.  Without `progressThread`
  /// started all-reduces run at once.
  explicit MpiCommunicator(double timeoutSeconds = kDefaultCollectiveTimeout,
                           bool progressThread = true);
  ~MpiCommunicator() override;

  void reserveStaging(size_t bytes) override;
  size_t stagingBytes() const override { return staging.size(); }

  int rank() const override { return rankId; }
  int size() const override { return numRanks; }

  /// A barrier and a broadcast of `bytes` bytes described by `call`, neither
  /// numbered nor counted: the MPI part of NcclCommunicator.
  void barrierAs(const CollectiveCall &call);
  void broadcastBytesAs(void *buffer, size_t bytes, int root,
                        const CollectiveCall &call);

  /// Answers the questions other ranks have sent this one on the side channel:
  /// this rank `waiting` in call number `callNumber`, or not; `state` says
  /// what it does, as a predicate (`is waiting in barrier #1 of start-up`).
  /// The waits of this class call it; another thread may too (MPI calls of
  /// this class are serialized by one mutex).
  void answerPeers(uint64_t callNumber, bool waiting, const std::string &state);

  /// Asks every other rank what it does and waits up to `graceSeconds` for
  /// the answers (answering questions meanwhile with `waiting`, `state`).
  /// Returns them as text: `no answer from rank 1 (...); rank 2 is waiting in
  /// it too; rank 3 is waiting in barrier #1 of the end of the run`, where
  /// "it" is call `callNumber`.
  std::string askPeers(uint64_t callNumber, const std::string &state,
                       double graceSeconds);

  /// fatal(message), its MPI calls serialized with the other threads' MPI
  /// calls of this class.
  [[noreturn]] static void abortJob(const std::string &message);

protected:
  void doAllReduce(void *buffer, size_t count, DType type,
                   ReduceOp op) override;
  void doReduceScatter(const void *send, void *recv, size_t sliceCount,
                       DType type, ReduceOp op) override;
  void doAllGather(const void *send, void *recv, size_t sliceCount,
                   DType type) override;
  void doBroadcast(void *buffer, size_t count, DType type, int root) override;
  void doBarrier() override;
  uint64_t doStartAllReduce(void *buffer, size_t count, DType type,
                            ReduceOp op) override;
  uint64_t doStartReduceScatter(const void *send, void *recv, size_t sliceCount,
                                DType type, ReduceOp op) override;
  uint64_t doStartAllGather(const void *send, void *recv, size_t sliceCount,
                            DType type) override;
  void doWait(uint64_t ticket) override;

private:
  struct Progress;

  /// Queues `work` (a collective, run with the call it was started as) for
  /// the progress thread; returns its ticket.
  uint64_t queue(std::function<void(const CollectiveCall &)> work);
  struct SideChannel;

  void allReduceAs(void *buffer, size_t count, DType type, ReduceOp op,
                   const CollectiveCall &call);
  void reduceScatterAs(const void *send, void *recv, size_t sliceCount,
                       DType type, ReduceOp op, const CollectiveCall &call);
  void allGatherAs(const void *send, void *recv, size_t sliceCount, DType type,
                   const CollectiveCall &call);
  void reduceSlicesAs(const void *send, void *recv,
                      const std::vector<int> &counts,
                      const std::vector<int> &offsets, DType type, ReduceOp op,
                      const CollectiveCall &call, double startSeconds);
  /// Polls `request` until it completes; fatal with what the peers answer
  /// once `call` has waited collectiveTimeout() seconds since
  /// `startSeconds` (monotonic, secondsNow()).
  void complete(void *request, const CollectiveCall &call, double startSeconds);

  int rankId = 0;
  int numRanks = 1;
  /// Every rank's part of the slice a reduction folds (reduceSlicesAs): one
  /// collective runs at a time (the caller's wait for the started ones
  /// first), so one buffer serves them all.
  std::vector<char> staging;

  std::unique_ptr<SideChannel> side;
  std::unique_ptr<Progress> progress;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_COMMUNICATOR_H
