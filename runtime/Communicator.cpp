//===- Communicator.cpp - Collectives over ranks --------------------------===//

#include "runtime/Communicator.h"

#include "runtime/Errors.h"
#include "runtime/Float16.h"

#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sharc::rt {

size_t dtypeBytes(DType type) {
  switch (type) {
  case DType::f64:
  case DType::i64:
    return 8;
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::f16:
  case DType::bf16:
    return 2;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Communicator
//===----------------------------------------------------------------------===//

Communicator::~Communicator() = default;

void Communicator::count(CollectiveKind kind, uint64_t bytes) {
  CollectiveStats &stats = counters[static_cast<size_t>(kind)];
  ++stats.calls;
  stats.bytes += bytes;
}

uint64_t Communicator::startAllReduce(void *buffer, size_t count, DType type,
                                      ReduceOp op) {
  uint64_t n = size();
  uint64_t bytes = uint64_t(count) * dtypeBytes(type);
  this->count(CollectiveKind::allReduce, 2 * (n - 1) * bytes / n);
  return doStartAllReduce(buffer, count, type, op);
}

void Communicator::wait(uint64_t ticket) { doWait(ticket); }

void Communicator::waitAll() { doWait(started); }

uint64_t Communicator::doStartAllReduce(void *buffer, size_t count,
                                        DType type, ReduceOp op) {
  doAllReduce(buffer, count, type, op);
  return ++started;
}

void Communicator::doWait(uint64_t) {}

void Communicator::allReduce(void *buffer, size_t count, DType type,
                             ReduceOp op) {
  waitAll();
  uint64_t n = size();
  uint64_t bytes = uint64_t(count) * dtypeBytes(type);
  this->count(CollectiveKind::allReduce, 2 * (n - 1) * bytes / n);
  doAllReduce(buffer, count, type, op);
}

void Communicator::reduceScatter(const void *send, void *recv,
                                 size_t sliceCount, DType type, ReduceOp op) {
  waitAll();
  uint64_t n = size();
  count(CollectiveKind::reduceScatter,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  doReduceScatter(send, recv, sliceCount, type, op);
}

void Communicator::allGather(const void *send, void *recv, size_t sliceCount,
                             DType type) {
  waitAll();
  uint64_t n = size();
  count(CollectiveKind::allGather,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  doAllGather(send, recv, sliceCount, type);
}

void Communicator::broadcast(void *buffer, size_t count, DType type, int root) {
  waitAll();
  if (root < 0 || root >= size())
    fatal("broadcast root " + std::to_string(root) + " is not a rank of " +
          std::to_string(size()));
  this->count(CollectiveKind::broadcast,
              size() > 1 ? uint64_t(count) * dtypeBytes(type) : 0);
  doBroadcast(buffer, count, type, root);
}

//===----------------------------------------------------------------------===//
// LocalCommunicator
//===----------------------------------------------------------------------===//

void LocalCommunicator::doAllReduce(void *, size_t, DType, ReduceOp) {}

void LocalCommunicator::doReduceScatter(const void *send, void *recv,
                                        size_t sliceCount, DType type,
                                        ReduceOp) {
  if (recv != send)
    std::memmove(recv, send, sliceCount * dtypeBytes(type));
}

void LocalCommunicator::doAllGather(const void *send, void *recv,
                                    size_t sliceCount, DType type) {
  if (recv != send)
    std::memmove(recv, send, sliceCount * dtypeBytes(type));
}

void LocalCommunicator::doBroadcast(void *, size_t, DType, int) {}

//===----------------------------------------------------------------------===//
// MpiCommunicator
//===----------------------------------------------------------------------===//

namespace {

MPI_Datatype mpiType(DType type) {
  switch (type) {
  case DType::f32:
    return MPI_FLOAT;
  case DType::f64:
    return MPI_DOUBLE;
  case DType::f16:
  case DType::bf16:
    return MPI_UINT16_T;
  case DType::i32:
    return MPI_INT32_T;
  case DType::i64:
    return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

/// MPI counts are ints: larger element counts are an error.
int mpiCount(size_t count) {
  if (count > size_t(INT_MAX))
    fatal("collective of " + std::to_string(count) +
          " elements exceeds MPI's int count limit");
  return int(count);
}

template <typename T> T combine(T a, T b, ReduceOp op) {
  if (op == ReduceOp::sum)
    return a + b;
  return a < b ? b : a;
}

/// out[i] = parts[0][i] op parts[1][i] op ... op parts[n-1][i], folded left in
/// part order; `parts` is n consecutive arrays of `count` T.
template <typename T>
void fold(const void *parts, void *out, size_t count, int n, ReduceOp op) {
  const T *in = static_cast<const T *>(parts);
  T *result = static_cast<T *>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = in[i];
    for (int j = 1; j < n; ++j)
      acc = combine(acc, in[j * count + i], op);
    result[i] = acc;
  }
}

/// fold() for 16-bit floats: accumulates in f32, rounds once.
template <float (*toFloat)(uint16_t), uint16_t (*fromFloat)(float)>
void fold16(const void *parts, void *out, size_t count, int n, ReduceOp op) {
  const uint16_t *in = static_cast<const uint16_t *>(parts);
  uint16_t *result = static_cast<uint16_t *>(out);
  for (size_t i = 0; i < count; ++i) {
    float acc = toFloat(in[i]);
    for (int j = 1; j < n; ++j)
      acc = combine(acc, toFloat(in[j * count + i]), op);
    result[i] = fromFloat(acc);
  }
}

void foldParts(const void *parts, void *out, size_t count, int n, DType type,
               ReduceOp op) {
  switch (type) {
  case DType::f32:
    return fold<float>(parts, out, count, n, op);
  case DType::f64:
    return fold<double>(parts, out, count, n, op);
  case DType::i32:
    return fold<int32_t>(parts, out, count, n, op);
  case DType::i64:
    return fold<int64_t>(parts, out, count, n, op);
  case DType::f16:
    return fold16<halfToFloat, floatToHalf>(parts, out, count, n, op);
  case DType::bf16:
    return fold16<bfloat16ToFloat, floatToBFloat16>(parts, out, count, n, op);
  }
}

/// Slice j of `send` is `counts[j]` elements at element offset `offsets[j]`;
/// writes slice rank() reduced over all ranks to `recv`.
void reduceSlices(const void *send, void *recv, const std::vector<int> &counts,
                  const std::vector<int> &offsets, DType type, ReduceOp op,
                  int rank, int n) {
  int mine = counts[rank];
  std::vector<int> recvCounts(n, mine), recvOffsets(n);
  for (int j = 0; j < n; ++j)
    recvOffsets[j] = mpiCount(size_t(j) * size_t(mine));
  std::vector<char> parts(size_t(n) * mine * dtypeBytes(type));
  MPI_Alltoallv(send, counts.data(), offsets.data(), mpiType(type),
                parts.data(), recvCounts.data(), recvOffsets.data(),
                mpiType(type), MPI_COMM_WORLD);
  foldParts(parts.data(), recv, mine, n, type, op);
}

/// Equal slices of `sliceCount` elements, one per rank.
void equalSlices(size_t sliceCount, int n, std::vector<int> &counts,
                 std::vector<int> &offsets) {
  counts.assign(n, mpiCount(sliceCount));
  offsets.resize(n);
  for (int j = 0; j < n; ++j)
    offsets[j] = mpiCount(size_t(j) * sliceCount);
}

} // namespace

/// The progress thread: runs queued all-reduces in order.
struct MpiCommunicator::Progress {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  uint64_t done = 0;
  bool stop = false;
  std::thread thread;

  Progress() : thread([this] { run(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
    thread.join();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty())
        return;
      std::function<void()> work = std::move(queue.front());
      lock.unlock();
      work();
      lock.lock();
      queue.pop_front();
      ++done;
      changed.notify_all();
    }
  }
};

MpiCommunicator::MpiCommunicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    fatal("MpiCommunicator needs MPI_Init to have been called");
  MPI_Comm_rank(MPI_COMM_WORLD, &rankId);
  MPI_Comm_size(MPI_COMM_WORLD, &numRanks);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (numRanks > 1 && level >= MPI_THREAD_SERIALIZED)
    progress = std::make_unique<Progress>();
}

MpiCommunicator::~MpiCommunicator() { waitAll(); }

uint64_t MpiCommunicator::doStartAllReduce(void *buffer, size_t count,
                                           DType type, ReduceOp op) {
  if (!progress)
    return Communicator::doStartAllReduce(buffer, count, type, op);
  {
    std::lock_guard<std::mutex> lock(progress->mutex);
    progress->queue.push_back(
        [this, buffer, count, type, op] { doAllReduce(buffer, count, type, op); });
  }
  progress->changed.notify_all();
  return ++started;
}

void MpiCommunicator::doWait(uint64_t ticket) {
  if (!progress)
    return;
  std::unique_lock<std::mutex> lock(progress->mutex);
  progress->changed.wait(lock, [&] { return progress->done >= ticket; });
}

void MpiCommunicator::barrier() {
  waitAll();
  MPI_Barrier(MPI_COMM_WORLD);
}

void MpiCommunicator::doAllReduce(void *buffer, size_t count, DType type,
                                  ReduceOp op) {
  // Near-equal slices (the first count % N ranks get one more element).
  std::vector<int> counts(numRanks), offsets(numRanks);
  size_t offset = 0;
  for (int j = 0; j < numRanks; ++j) {
    size_t sliceCount = count / numRanks + (size_t(j) < count % numRanks);
    counts[j] = mpiCount(sliceCount);
    offsets[j] = mpiCount(offset);
    offset += sliceCount;
  }
  char *bytes = static_cast<char *>(buffer);
  reduceSlices(buffer, bytes + size_t(offsets[rankId]) * dtypeBytes(type),
               counts, offsets, type, op, rankId, numRanks);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, counts.data(),
                 offsets.data(), mpiType(type), MPI_COMM_WORLD);
}

void MpiCommunicator::doReduceScatter(const void *send, void *recv,
                                      size_t sliceCount, DType type,
                                      ReduceOp op) {
  std::vector<int> counts, offsets;
  equalSlices(sliceCount, numRanks, counts, offsets);
  reduceSlices(send, recv, counts, offsets, type, op, rankId, numRanks);
}

void MpiCommunicator::doAllGather(const void *send, void *recv,
                                  size_t sliceCount, DType type) {
  size_t sliceBytes = sliceCount * dtypeBytes(type);
  const void *source = send;
  if (send == static_cast<char *>(recv) + rankId * sliceBytes)
    source = MPI_IN_PLACE;
  MPI_Allgather(source, mpiCount(sliceCount), mpiType(type), recv,
                mpiCount(sliceCount), mpiType(type), MPI_COMM_WORLD);
}

void MpiCommunicator::doBroadcast(void *buffer, size_t count, DType type,
                                  int root) {
  MPI_Bcast(buffer, mpiCount(count), mpiType(type), root, MPI_COMM_WORLD);
}

} // namespace sharc::rt
