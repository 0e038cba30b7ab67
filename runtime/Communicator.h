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

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sharc::rt {

/// Element types of collective buffers.  f16 and bf16 are raw 16-bit values
/// (see Float16.h); they are reduced in f32 and rounded once per element.
enum class DType { f32, f64, f16, bf16, i32, i64 };

/// Bytes per element of `type`.
size_t dtypeBytes(DType type);

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

  /// Blocks until the collective of `ticket` (from startAllReduce) is done.
  void wait(uint64_t ticket);

  /// Blocks until every started collective is done.
  void waitAll();

  /// Copies `count` elements of `buffer` on rank `root` to every rank.
  void broadcast(void *buffer, size_t count, DType type, int root);

  /// Waits until every rank has reached the barrier.
  virtual void barrier() = 0;

  /// Counters of one kind of collective since construction or resetStats().
  const CollectiveStats &stats(CollectiveKind kind) const {
    return counters[static_cast<size_t>(kind)];
  }
  void resetStats() { counters = {}; }

protected:
  /// Starts `doAllReduce` asynchronously; returns its ticket (1, 2, ...).
  /// The default runs it at once.
  virtual uint64_t doStartAllReduce(void *buffer, size_t count, DType type,
                                    ReduceOp op);
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

  /// Tickets handed out so far.
  uint64_t started = 0;

private:
  void count(CollectiveKind kind, uint64_t bytes);

  std::array<CollectiveStats, kNumCollectiveKinds> counters{};
};

/// A single rank (runs without mpirun): collectives are copies.
class LocalCommunicator : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}

protected:
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
/// ring algorithms and independent of MPI's reduction algorithms.
/// Over MPI_COMM_WORLD.  With MPI initialized at MPI_THREAD_SERIALIZED or
/// above, started all-reduces run on a progress thread that owns MPI while any
/// is in flight (every other call waits for them first); otherwise they run at
/// once.
class MpiCommunicator : public Communicator {
public:
  MpiCommunicator();
  ~MpiCommunicator() override;

  int rank() const override { return rankId; }
  int size() const override { return numRanks; }
  void barrier() override;

protected:
  void doAllReduce(void *buffer, size_t count, DType type,
                   ReduceOp op) override;
  void doReduceScatter(const void *send, void *recv, size_t sliceCount,
                       DType type, ReduceOp op) override;
  void doAllGather(const void *send, void *recv, size_t sliceCount,
                   DType type) override;
  void doBroadcast(void *buffer, size_t count, DType type, int root) override;
  uint64_t doStartAllReduce(void *buffer, size_t count, DType type,
                            ReduceOp op) override;
  void doWait(uint64_t ticket) override;

private:
  struct Progress;

  int rankId = 0;
  int numRanks = 1;
  std::unique_ptr<Progress> progress;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_COMMUNICATOR_H
