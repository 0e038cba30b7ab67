//===- Communicator.cpp - Collectives over ranks --------------------------===//

#include "runtime/Communicator.h"

#include "runtime/Errors.h"
#include "runtime/Float16.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sharc::rt {

namespace {

/// `seconds` as the shortest text that reads back (3, 0.5, 600).
std::string secondsText(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

} // namespace

bool parseCollectiveTimeout(const std::string &text, double &seconds,
                            std::string &error) {
  char *end = nullptr;
  double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value <= 0 ||
      value > kMaxCollectiveTimeout) {
    error = "expected a positive number of seconds of at most " +
            secondsText(kMaxCollectiveTimeout) + ", got '" + text + "'";
    return false;
  }
  seconds = value;
  return true;
}

//===----------------------------------------------------------------------===//
// Communicator
//===----------------------------------------------------------------------===//

Communicator::~Communicator() = default;

void Communicator::setCollectiveTimeout(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0 ||
      seconds > kMaxCollectiveTimeout)
    fatal("collective timeout " + secondsText(seconds) +
          " s: expected a positive number of seconds of at most " +
          secondsText(kMaxCollectiveTimeout));
  timeoutSeconds = seconds;
}

void Communicator::setContext(const std::string &newContext) {
  context = newContext;
  contextCalls = 0;
}

void Communicator::nextCall(const char *kind, size_t count, const DType *type,
                            const char *note) {
  ++call.number;
  call.what = std::string(kind) + " #" + std::to_string(++contextCalls);
  if (!context.empty())
    call.what += " of " + context;
  if (type) {
    call.what += " (" + std::to_string(count) + " " + dtypeName(*type) +
                 (count == 1 ? " element" : " elements");
    call.what += note ? std::string(", ") + note + ")" : ")";
  }
}

void Communicator::count(CollectiveKind kind, uint64_t bytes) {
  CollectiveStats &stats = counters[static_cast<size_t>(kind)];
  ++stats.calls;
  stats.bytes += bytes;
}

uint64_t Communicator::startAllReduce(void *buffer, size_t count, DType type,
                                      ReduceOp op) {
  if (type == DType::i1)
    fatal("reductions of i1 buffers are not supported");
  uint64_t n = size();
  uint64_t bytes = uint64_t(count) * dtypeBytes(type);
  this->count(CollectiveKind::allReduce, 2 * (n - 1) * bytes / n);
  nextCall("all-reduce", count, &type, "started");
  return doStartAllReduce(buffer, count, type, op);
}

uint64_t Communicator::startReduceScatter(const void *send, void *recv,
                                          size_t sliceCount, DType type,
                                          ReduceOp op) {
  if (type == DType::i1)
    fatal("reductions of i1 buffers are not supported");
  uint64_t n = size();
  count(CollectiveKind::reduceScatter,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  nextCall("reduce-scatter", sliceCount, &type, "per slice, started");
  return doStartReduceScatter(send, recv, sliceCount, type, op);
}

uint64_t Communicator::startAllGather(const void *send, void *recv,
                                      size_t sliceCount, DType type) {
  uint64_t n = size();
  count(CollectiveKind::allGather,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  nextCall("all-gather", sliceCount, &type, "per slice, started");
  return doStartAllGather(send, recv, sliceCount, type);
}

void Communicator::wait(uint64_t ticket) { doWait(ticket); }

void Communicator::waitAll() { doWait(started); }

uint64_t Communicator::doStartAllReduce(void *buffer, size_t count, DType type,
                                        ReduceOp op) {
  doAllReduce(buffer, count, type, op);
  return ++started;
}

uint64_t Communicator::doStartReduceScatter(const void *send, void *recv,
                                            size_t sliceCount, DType type,
                                            ReduceOp op) {
  doReduceScatter(send, recv, sliceCount, type, op);
  return ++started;
}

uint64_t Communicator::doStartAllGather(const void *send, void *recv,
                                        size_t sliceCount, DType type) {
  doAllGather(send, recv, sliceCount, type);
  return ++started;
}

void Communicator::doWait(uint64_t) {}

void Communicator::reserveStaging(size_t) {}

void Communicator::allReduce(void *buffer, size_t count, DType type,
                             ReduceOp op) {
  if (type == DType::i1)
    fatal("reductions of i1 buffers are not supported");
  waitAll();
  uint64_t n = size();
  uint64_t bytes = uint64_t(count) * dtypeBytes(type);
  this->count(CollectiveKind::allReduce, 2 * (n - 1) * bytes / n);
  nextCall("all-reduce", count, &type);
  doAllReduce(buffer, count, type, op);
}

void Communicator::reduceScatter(const void *send, void *recv,
                                 size_t sliceCount, DType type, ReduceOp op) {
  if (type == DType::i1)
    fatal("reductions of i1 buffers are not supported");
  waitAll();
  uint64_t n = size();
  count(CollectiveKind::reduceScatter,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  nextCall("reduce-scatter", sliceCount, &type, "per slice");
  doReduceScatter(send, recv, sliceCount, type, op);
}

void Communicator::allGather(const void *send, void *recv, size_t sliceCount,
                             DType type) {
  waitAll();
  uint64_t n = size();
  count(CollectiveKind::allGather,
        (n - 1) * uint64_t(sliceCount) * dtypeBytes(type));
  nextCall("all-gather", sliceCount, &type, "per slice");
  doAllGather(send, recv, sliceCount, type);
}

void Communicator::broadcast(void *buffer, size_t count, DType type, int root) {
  waitAll();
  if (root < 0 || root >= size())
    fatal("broadcast root " + std::to_string(root) + " is not a rank of " +
          std::to_string(size()));
  this->count(CollectiveKind::broadcast,
              size() > 1 ? uint64_t(count) * dtypeBytes(type) : 0);
  std::string from = "from rank " + std::to_string(root);
  nextCall("broadcast", count, &type, from.c_str());
  doBroadcast(buffer, count, type, root);
}

void Communicator::barrier() {
  waitAll();
  nextCall("barrier", 0, nullptr);
  doBarrier();
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
  case DType::i1:
    return MPI_UINT8_T;
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
/// part order in `Acc` and converted once; `parts` is n consecutive arrays of
/// `count` T.  Floats accumulate in double and round once, as the evaluator's
/// collectives do (ir/EvalCollectives.cpp), so that a binary on N ranks
/// reproduces `sharc eval --train --world-size N` bit for bit.
template <typename T, typename Acc = T>
void fold(const void *parts, void *out, size_t count, int n, ReduceOp op) {
  const T *in = static_cast<const T *>(parts);
  T *result = static_cast<T *>(out);
  for (size_t i = 0; i < count; ++i) {
    Acc acc = in[i];
    for (int j = 1; j < n; ++j)
      acc = combine(acc, Acc(in[j * count + i]), op);
    result[i] = T(acc);
  }
}

/// fold() for 16-bit floats: accumulates in double, rounds once (through
/// round-to-odd f32, which rounds as directly from double).
template <float (*toFloat)(uint16_t), uint16_t (*fromFloat)(float)>
void fold16(const void *parts, void *out, size_t count, int n, ReduceOp op) {
  const uint16_t *in = static_cast<const uint16_t *>(parts);
  uint16_t *result = static_cast<uint16_t *>(out);
  for (size_t i = 0; i < count; ++i) {
    double acc = toFloat(in[i]);
    for (int j = 1; j < n; ++j)
      acc = combine(acc, double(toFloat(in[j * count + i])), op);
    result[i] = fromFloat(roundToOddFloat(acc));
  }
}

void foldParts(const void *parts, void *out, size_t count, int n, DType type,
               ReduceOp op) {
  switch (type) {
  case DType::f32:
    return fold<float, double>(parts, out, count, n, op);
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
  case DType::i1:
    fatal("reductions of i1 buffers are not supported");
  }
}

/// Equal slices of `sliceCount` elements, one per rank.
void equalSlices(size_t sliceCount, int n, std::vector<int> &counts,
                 std::vector<int> &offsets) {
  counts.assign(n, mpiCount(sliceCount));
  offsets.resize(n);
  for (int j = 0; j < n; ++j)
    offsets[j] = mpiCount(size_t(j) * sliceCount);
}

/// Serializes the MPI calls of this file's threads (the caller's, the
/// progress thread, NcclCommunicator's watchdog): MPI_THREAD_SERIALIZED.
std::mutex &mpiMutex() {
  static std::mutex mutex;
  return mutex;
}

using Clock = std::chrono::steady_clock;

/// Monotonic seconds.
double secondsNow() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

void sleepSeconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

/// A wait spins (MPI_Test back to back) this long before it starts sleeping:
/// the collectives of a normal step find their peers within it.
constexpr double kSpinSeconds = 2e-3;
/// Then it sleeps between polls, first this long, doubling up to
/// kMaxSleepSeconds or 1% of the time waited so far, whichever is more, but
/// at most kLongSleepSeconds: a long wait costs little CPU, and the latency
/// it adds is at most about 1% of it.
constexpr double kFirstSleepSeconds = 50e-6;
constexpr double kMaxSleepSeconds = 1e-3;
constexpr double kLongSleepSeconds = 10e-3;
/// After each sleep it polls back to back this long, so that the rounds of a
/// collective whose peers have arrived run at spinning speed.
constexpr double kBurstSeconds = 50e-6;
/// While spinning, it answers the side channel at this interval.
constexpr double kAnswerIntervalSeconds = 1e-3;
/// A rank whose wait timed out gives its peers this long to answer.
constexpr double kAnswerGraceSeconds = 1.0;

/// A side-channel answer: what a rank does when asked.
struct Answer {
  /// Call number the rank is waiting in (or has last issued).
  int64_t callNumber;
  /// 1 when it is waiting in that call.
  int64_t waiting;
  /// What it does, as a predicate, NUL-terminated.
  char state[240];
};

/// "rank 1", "ranks 1, 3".
std::string rankList(const std::vector<int> &ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

} // namespace

/// The side channel's messages in flight (sent but not known to be delivered):
/// their buffers must live until MPI is done with them.
struct MpiCommunicator::SideChannel {
  struct Sent {
    Answer answer;
    int64_t question = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::deque<Sent> sent;

  /// Drops the sends that have completed.  Under mpiMutex().
  void reap() {
    while (!sent.empty()) {
      int done = 0;
      MPI_Test(&sent.front().request, &done, MPI_STATUS_IGNORE);
      if (!done)
        return;
      sent.pop_front();
    }
  }
};

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

MpiCommunicator::MpiCommunicator(double timeoutSeconds, bool progressThread)
    : side(std::make_unique<SideChannel>()) {
  setCollectiveTimeout(timeoutSeconds);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    fatal("MpiCommunicator needs MPI_Init to have been called");
  MPI_Comm_rank(MPI_COMM_WORLD, &rankId);
  MPI_Comm_size(MPI_COMM_WORLD, &numRanks);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (progressThread && numRanks > 1 && level >= MPI_THREAD_SERIALIZED)
    progress = std::make_unique<Progress>();
}

MpiCommunicator::~MpiCommunicator() {
  waitAll();
  progress.reset();
  std::lock_guard<std::mutex> lock(mpiMutex());
  side->reap();
  // Side-channel messages still in flight (only after a timeout, which ends
  // the job) keep their buffers: MPI may still read them.
  if (!side->sent.empty())
    static_cast<void>(side.release());
}

uint64_t
MpiCommunicator::queue(std::function<void(const CollectiveCall &)> work) {
  {
    std::lock_guard<std::mutex> lock(progress->mutex);
    progress->queue.push_back(
        [work = std::move(work), startedCall = call] { work(startedCall); });
  }
  progress->changed.notify_all();
  return ++started;
}

uint64_t MpiCommunicator::doStartAllReduce(void *buffer, size_t count,
                                           DType type, ReduceOp op) {
  if (!progress)
    return Communicator::doStartAllReduce(buffer, count, type, op);
  return queue([this, buffer, count, type, op](const CollectiveCall &as) {
    allReduceAs(buffer, count, type, op, as);
  });
}

uint64_t MpiCommunicator::doStartReduceScatter(const void *send, void *recv,
                                               size_t sliceCount, DType type,
                                               ReduceOp op) {
  if (!progress)
    return Communicator::doStartReduceScatter(send, recv, sliceCount, type, op);
  return queue(
      [this, send, recv, sliceCount, type, op](const CollectiveCall &as) {
        reduceScatterAs(send, recv, sliceCount, type, op, as);
      });
}

uint64_t MpiCommunicator::doStartAllGather(const void *send, void *recv,
                                           size_t sliceCount, DType type) {
  if (!progress)
    return Communicator::doStartAllGather(send, recv, sliceCount, type);
  return queue([this, send, recv, sliceCount, type](const CollectiveCall &as) {
    allGatherAs(send, recv, sliceCount, type, as);
  });
}

void MpiCommunicator::doWait(uint64_t ticket) {
  if (!progress)
    return;
  // The progress thread bounds each collective by the timeout; this thread
  // sleeps until they are done.
  std::unique_lock<std::mutex> lock(progress->mutex);
  progress->changed.wait(lock, [&] { return progress->done >= ticket; });
}

void MpiCommunicator::answerPeers(uint64_t callNumber, bool waiting,
                                  const std::string &state) {
  std::lock_guard<std::mutex> lock(mpiMutex());
  side->reap();
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, MPI_COMM_WORLD, &pending, &status);
    if (!pending)
      return;
    SideChannel::Sent &sent = side->sent.emplace_back();
    MPI_Recv(&sent.question, 1, MPI_INT64_T, status.MPI_SOURCE, kAskTag,
             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    sent.answer.callNumber = int64_t(callNumber);
    sent.answer.waiting = waiting;
    std::snprintf(sent.answer.state, sizeof(sent.answer.state), "%s",
                  state.c_str());
    MPI_Isend(&sent.answer, sizeof(Answer), MPI_BYTE, status.MPI_SOURCE,
              kAnswerTag, MPI_COMM_WORLD, &sent.request);
  }
}

std::string MpiCommunicator::askPeers(uint64_t callNumber,
                                      const std::string &state,
                                      double graceSeconds) {
  std::vector<bool> answered(numRanks, false);
  std::vector<Answer> answers(numRanks);
  answered[rankId] = true;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    for (int r = 0; r < numRanks; ++r) {
      if (r == rankId)
        continue;
      SideChannel::Sent &sent = side->sent.emplace_back();
      sent.question = int64_t(callNumber);
      MPI_Isend(&sent.question, 1, MPI_INT64_T, r, kAskTag, MPI_COMM_WORLD,
                &sent.request);
    }
  }
  int missing = numRanks - 1;
  double deadline = secondsNow() + graceSeconds;
  while (missing > 0 && secondsNow() < deadline) {
    answerPeers(callNumber, /*waiting=*/true, state);
    bool received = false;
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      int pending = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, MPI_COMM_WORLD, &pending, &status);
      if (pending) {
        Answer answer;
        MPI_Recv(&answer, sizeof(Answer), MPI_BYTE, status.MPI_SOURCE,
                 kAnswerTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        answer.state[sizeof(answer.state) - 1] = '\0';
        int from = status.MPI_SOURCE;
        if (!answered[from]) {
          answered[from] = true;
          answers[from] = answer;
          --missing;
        }
        received = true;
      }
    }
    if (!received)
      sleepSeconds(kMaxSleepSeconds);
  }

  std::vector<int> silent, alongside;
  std::string others;
  for (int r = 0; r < numRanks; ++r) {
    if (r == rankId)
      continue;
    if (!answered[r])
      silent.push_back(r);
    else if (answers[r].waiting && answers[r].callNumber == int64_t(callNumber))
      alongside.push_back(r);
    else
      others += "; rank " + std::to_string(r) + " " + answers[r].state;
  }
  std::string text;
  if (!silent.empty())
    text = "no answer from " + rankList(silent) +
           " (stopped, hung, or busy outside any collective)";
  else
    text = "every rank answered";
  if (!alongside.empty())
    text += "; " + rankList(alongside) +
            (alongside.size() == 1 ? " is" : " are") + " waiting in it too";
  return text + others;
}

void MpiCommunicator::abortJob(const std::string &message) {
  std::lock_guard<std::mutex> lock(mpiMutex());
  fatal(message);
}

void MpiCommunicator::complete(void *requestPointer, const CollectiveCall &call,
                               double startSeconds) {
  auto *request = static_cast<MPI_Request *>(requestPointer);
  auto poll = [&] {
    std::lock_guard<std::mutex> lock(mpiMutex());
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  };
  std::string state = "is waiting in " + call.what;
  double deadline = startSeconds + timeoutSeconds;
  double now = secondsNow();
  double spinEnd = now + kSpinSeconds;
  double nextAnswer = now + kAnswerIntervalSeconds;
  // Spin: a normal step's collectives find their peers within microseconds.
  while (now < spinEnd && now < deadline) {
    if (poll())
      return;
    now = secondsNow();
    if (now >= nextAnswer) {
      answerPeers(call.number, /*waiting=*/true, state);
      nextAnswer = now + kAnswerIntervalSeconds;
    }
  }
  // Then sleep between polls, longer as the wait grows.
  double sleep = kFirstSleepSeconds;
  for (;;) {
    if (poll())
      return;
    now = secondsNow();
    if (now >= deadline)
      break;
    answerPeers(call.number, /*waiting=*/true, state);
    sleepSeconds(std::min(sleep, deadline - now));
    double cap =
        std::min(kLongSleepSeconds,
                 std::max(kMaxSleepSeconds, 0.01 * (secondsNow() - spinEnd)));
    sleep = std::min(2 * sleep, cap);
    double burstEnd = secondsNow() + kBurstSeconds;
    do {
      if (poll())
        return;
    } while (secondsNow() < burstEnd);
  }
  std::string peers = askPeers(call.number, state, kAnswerGraceSeconds);
  abortJob(call.what + " did not complete within the collective timeout of " +
           secondsText(timeoutSeconds) + " s (--collective-timeout); " + peers);
}

void MpiCommunicator::reduceSlicesAs(const void *send, void *recv,
                                     const std::vector<int> &counts,
                                     const std::vector<int> &offsets,
                                     DType type, ReduceOp op,
                                     const CollectiveCall &call,
                                     double startSeconds) {
  int n = numRanks, mine = counts[rankId];
  // One rank: its part is the reduction (no staging, no MPI).
  if (n == 1) {
    if (recv != send)
      std::memmove(recv, send, size_t(mine) * dtypeBytes(type));
    return;
  }
  std::vector<int> recvCounts(n, mine), recvOffsets(n);
  for (int j = 0; j < n; ++j)
    recvOffsets[j] = mpiCount(size_t(j) * size_t(mine));
  size_t partBytes = size_t(n) * mine * dtypeBytes(type);
  if (staging.size() < partBytes)
    staging.resize(partBytes);
  char *parts = staging.data();
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Ialltoallv(send, counts.data(), offsets.data(), mpiType(type), parts,
                   recvCounts.data(), recvOffsets.data(), mpiType(type),
                   MPI_COMM_WORLD, &request);
  }
  complete(&request, call, startSeconds);
  foldParts(parts, recv, mine, n, type, op);
}

void MpiCommunicator::allReduceAs(void *buffer, size_t count, DType type,
                                  ReduceOp op, const CollectiveCall &call) {
  double start = secondsNow();
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
  reduceSlicesAs(buffer, bytes + size_t(offsets[rankId]) * dtypeBytes(type),
                 counts, offsets, type, op, call, start);
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, counts.data(),
                    offsets.data(), mpiType(type), MPI_COMM_WORLD, &request);
  }
  complete(&request, call, start);
}

void MpiCommunicator::reserveStaging(size_t bytes) {
  // resize() writes every byte: the pages are resident from here on.
  if (numRanks > 1 && staging.size() < bytes)
    staging.resize(bytes);
}

void MpiCommunicator::doAllReduce(void *buffer, size_t count, DType type,
                                  ReduceOp op) {
  allReduceAs(buffer, count, type, op, call);
}

void MpiCommunicator::doReduceScatter(const void *send, void *recv,
                                      size_t sliceCount, DType type,
                                      ReduceOp op) {
  reduceScatterAs(send, recv, sliceCount, type, op, call);
}

void MpiCommunicator::reduceScatterAs(const void *send, void *recv,
                                      size_t sliceCount, DType type,
                                      ReduceOp op, const CollectiveCall &as) {
  std::vector<int> counts, offsets;
  equalSlices(sliceCount, numRanks, counts, offsets);
  reduceSlicesAs(send, recv, counts, offsets, type, op, as, secondsNow());
}

void MpiCommunicator::doAllGather(const void *send, void *recv,
                                  size_t sliceCount, DType type) {
  allGatherAs(send, recv, sliceCount, type, call);
}

void MpiCommunicator::allGatherAs(const void *send, void *recv,
                                  size_t sliceCount, DType type,
                                  const CollectiveCall &as) {
  double start = secondsNow();
  size_t sliceBytes = sliceCount * dtypeBytes(type);
  const void *source = send;
  if (send == static_cast<char *>(recv) + rankId * sliceBytes)
    source = MPI_IN_PLACE;
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Iallgather(source, mpiCount(sliceCount), mpiType(type), recv,
                   mpiCount(sliceCount), mpiType(type), MPI_COMM_WORLD,
                   &request);
  }
  complete(&request, as, start);
}

void MpiCommunicator::doBroadcast(void *buffer, size_t count, DType type,
                                  int root) {
  double start = secondsNow();
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Ibcast(buffer, mpiCount(count), mpiType(type), root, MPI_COMM_WORLD,
               &request);
  }
  complete(&request, call, start);
}

void MpiCommunicator::doBarrier() { barrierAs(call); }

void MpiCommunicator::barrierAs(const CollectiveCall &barrierCall) {
  double start = secondsNow();
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
  }
  complete(&request, barrierCall, start);
}

void MpiCommunicator::broadcastBytesAs(void *buffer, size_t bytes, int root,
                                       const CollectiveCall &broadcastCall) {
  double start = secondsNow();
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpiMutex());
    MPI_Ibcast(buffer, mpiCount(bytes), MPI_BYTE, root, MPI_COMM_WORLD,
               &request);
  }
  complete(&request, broadcastCall, start);
}

} // namespace sharc::rt
