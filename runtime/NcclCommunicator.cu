//===- NcclCommunicator.cu - Collectives over GPUs with NCCL --------------===//
//
// Each collective is one NCCL call on the device stream.  NCCL's in-place
// conventions are Communicator.h's: reduce-scatter is in place when recv is
// slice rank() of send, all-gather when send is slice rank() of recv, and
// all-reduce and broadcast pass the same buffer as source and destination.
//
// Determinism (see NcclCommunicator.h and docs/runtime.md): for a fixed ring
// or tree configuration NCCL reduces every element in a fixed order on one
// rank and copies the result to the others, so results are bitwise identical
// on all ranks and across runs, though not in Communicator.h's rank order.
//
// Timeouts (see NcclCommunicator.h): a nonblocking NCCL communicator polled
// against the collective timeout, and a watchdog thread that watches the
// events around every enqueued collective.
//
//===----------------------------------------------------------------------===//

#include "runtime/NcclCommunicator.h"

#include "runtime/Device.h"
#include "runtime/Errors.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace sharc::rt {

namespace {

/// Fatal unless `status` is ncclSuccess, with NCCL's own explanation.
void checkNccl(ncclResult_t status, const char *what) {
  if (status == ncclSuccess)
    return;
  std::string message = std::string("NcclCommunicator: ") + what + ": " +
                        ncclGetErrorString(status);
  // The comm argument is unused by NCCL: the last error of this thread.
  const char *detail = ncclGetLastError(nullptr);
  if (detail && *detail)
    message += std::string(" (") + detail + ")";
  fatal(message);
}

void checkCuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    fatal(std::string("NcclCommunicator: ") + what + ": " +
          cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

ncclDataType_t ncclType(DType type) {
  switch (type) {
  case DType::f32:
    return ncclFloat32;
  case DType::f64:
    return ncclFloat64;
  case DType::f16:
    return ncclFloat16;
  case DType::bf16:
    return ncclBfloat16;
  case DType::i32:
    return ncclInt32;
  case DType::i64:
    return ncclInt64;
  case DType::i1:
    return ncclUint8;
  }
  fatal("NcclCommunicator: unknown element type");
}

/// Monotonic seconds.
double secondsNow() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string secondsText(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

/// How often the watchdog looks at the events and the side channel.
constexpr double kWatchdogSeconds = 10e-3;
/// Polls of a nonblocking NCCL call sleep this long at most.
constexpr double kMaxPollSleepSeconds = 1e-3;
/// A rank whose wait timed out gives its peers this long to answer.
constexpr double kAnswerGraceSeconds = 1.0;

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return ncclSum;
  case ReduceOp::max:
    return ncclMax;
  }
  fatal("NcclCommunicator: unknown reduction operator");
}

} // namespace

/// The watchdog thread: the collectives enqueued on each stream, in order,
/// each between two events; every kWatchdogSeconds it marks the finished
/// ones, starts the clock of the one the GPU has reached, answers the side
/// channel, checks NCCL's asynchronous error and ends the job when a
/// collective has run longer than the timeout.
struct NcclCommunicator::Watchdog {
  struct Tracked {
    CollectiveCall call;
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    /// When the watchdog first saw `begin` done (-1: not yet).
    double startedAt = -1;
    bool done = false;
  };

  NcclCommunicator &owner;
  int device = 0;
  std::mutex mutex;
  std::condition_variable wake;
  /// Per stream (the device stream, the communication stream).
  std::deque<Tracked> queues[2];
  /// Reusable events; returned by the thread that issues collectives.
  std::vector<cudaEvent_t> spare;
  CollectiveCall lastIssued;
  bool stop = false;
  std::thread thread;

  Watchdog(NcclCommunicator &owner, int device)
      : owner(owner), device(device), thread([this] { run(); }) {}

  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    thread.join();
    for (std::deque<Tracked> &queue : queues)
      for (Tracked &entry : queue) {
        cudaEventDestroy(entry.begin);
        cudaEventDestroy(entry.end);
      }
    for (cudaEvent_t event : spare)
      cudaEventDestroy(event);
  }

  cudaEvent_t takeEvent() {
    if (!spare.empty()) {
      cudaEvent_t event = spare.back();
      spare.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
    return event;
  }

  /// Under `mutex`: recycles the finished collectives at the front.
  void reap() {
    for (std::deque<Tracked> &queue : queues)
      while (!queue.empty() && queue.front().done) {
        spare.push_back(queue.front().begin);
        spare.push_back(queue.front().end);
        queue.pop_front();
      }
  }

  void run() {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::duration<double>(kWatchdogSeconds));
      if (stop)
        return;
      double now = secondsNow();
      const Tracked *expired = nullptr;
      const Tracked *oldest = nullptr;
      for (std::deque<Tracked> &queue : queues) {
        for (Tracked &entry : queue) {
          if (entry.done)
            continue;
          if (entry.startedAt < 0) {
            if (cudaEventQuery(entry.begin) != cudaSuccess)
              break; // The GPU has not reached it (or reports an error).
            entry.startedAt = now;
          }
          cudaError_t status = cudaEventQuery(entry.end);
          if (status == cudaSuccess) {
            entry.done = true;
            continue;
          }
          if (!oldest || entry.call.number < oldest->call.number)
            oldest = &entry;
          if (now - entry.startedAt > owner.timeoutSeconds)
            expired = &entry;
          break; // Later ones on this stream wait for this one.
        }
      }
      CollectiveCall current = oldest ? oldest->call : lastIssued;
      std::string state =
          oldest ? "is waiting on its GPU in " + current.what
          : current.number == 0
              ? "has not issued a collective yet"
              : "is not in a collective; its last was " + current.what;
      CollectiveCall failed;
      if (expired)
        failed = expired->call;
      lock.unlock();
      if (owner.mpiFromWatchdog)
        owner.host->answerPeers(current.number, oldest != nullptr, state);
      ncclResult_t asyncError = ncclSuccess;
      if (ncclCommGetAsyncError(owner.comm, &asyncError) == ncclSuccess &&
          asyncError != ncclSuccess && asyncError != ncclInProgress) {
        std::string message =
            std::string("NcclCommunicator: asynchronous error while ") +
            (oldest ? "waiting in " + current.what : state) + ": " +
            ncclGetErrorString(asyncError);
        if (const char *detail = ncclGetLastError(owner.comm);
            detail && *detail)
          message += std::string(" (") + detail + ")";
        MpiCommunicator::abortJob(message);
      }
      if (expired)
        owner.timedOut(failed, "is waiting on its GPU in " + failed.what);
      lock.lock();
    }
  }
};

NcclCommunicator::NcclCommunicator(double timeoutSeconds)
    : host(std::make_unique<MpiCommunicator>(timeoutSeconds,
                                             /*progressThread=*/false)) {
  setCollectiveTimeout(timeoutSeconds);
  stream = deviceStream();
  rankId = host->rank();
  numRanks = host->size();
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  mpiFromWatchdog = level >= MPI_THREAD_SERIALIZED;

  ncclUniqueId id;
  if (rankId == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  double start = secondsNow();
  host->broadcastBytesAs(&id, sizeof(id), 0,
                         {0, "broadcast of the NCCL unique id at start-up"});
  // Nonblocking: ncclCommInitRankConfig returns at once and is polled.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t created = nullptr;
  ncclResult_t status =
      ncclCommInitRankConfig(&created, numRanks, id, rankId, &config);
  comm = created;
  settle(status, "ncclCommInitRankConfig",
         {0, "NCCL start-up (ncclCommInitRankConfig)"}, start);
  cudaStream_t communication = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
  commStream = communication;
  int device = 0;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  watchdog = std::make_unique<Watchdog>(*this, device);
}

void NcclCommunicator::settle(int statusValue, const char *function,
                              const CollectiveCall &waitCall,
                              double startSeconds) {
  auto status = static_cast<ncclResult_t>(statusValue);
  if (status == ncclSuccess)
    return;
  if (status != ncclInProgress || !comm)
    checkNccl(status, function);
  std::string state = "is waiting in " + waitCall.what;
  double sleep = 10e-6;
  for (;;) {
    ncclResult_t asyncError = ncclSuccess;
    checkNccl(ncclCommGetAsyncError(comm, &asyncError),
              "ncclCommGetAsyncError");
    if (asyncError != ncclInProgress) {
      checkNccl(asyncError, function);
      return;
    }
    double now = secondsNow();
    if (now - startSeconds > timeoutSeconds) {
      ncclCommAbort(comm);
      comm = nullptr;
      timedOut(waitCall, state);
    }
    host->answerPeers(waitCall.number, /*waiting=*/true, state);
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    sleep = std::min(2 * sleep, kMaxPollSleepSeconds);
  }
}

void NcclCommunicator::timedOut(const CollectiveCall &failedCall,
                                const std::string &state) {
  bool onWatchdog =
      watchdog && std::this_thread::get_id() == watchdog->thread.get_id();
  std::string peers =
      mpiFromWatchdog || !onWatchdog
          ? host->askPeers(failedCall.number, state, kAnswerGraceSeconds)
          : "the ranks that did not answer cannot be named (MPI provides "
            "less than MPI_THREAD_SERIALIZED)";
  MpiCommunicator::abortJob(
      failedCall.what + " did not complete within the collective timeout of " +
      secondsText(timeoutSeconds) + " s (--collective-timeout); " + peers);
}

template <typename Enqueue>
void NcclCommunicator::tracked(void *onStream, const char *function,
                               Enqueue enqueue) {
  auto cudaStream = static_cast<cudaStream_t>(onStream);
  cudaEvent_t begin, end;
  {
    std::lock_guard<std::mutex> lock(watchdog->mutex);
    watchdog->reap();
    begin = watchdog->takeEvent();
    end = watchdog->takeEvent();
  }
  double start = secondsNow();
  checkCuda(cudaEventRecord(begin, cudaStream), "cudaEventRecord");
  settle(enqueue(cudaStream), function, call, start);
  checkCuda(cudaEventRecord(end, cudaStream), "cudaEventRecord");
  std::lock_guard<std::mutex> lock(watchdog->mutex);
  watchdog->queues[onStream == stream ? 0 : 1].push_back(
      {call, begin, end, -1, false});
  watchdog->lastIssued = call;
}

uint64_t NcclCommunicator::startOnCommStream(
    const std::function<void(void *)> &enqueue) {
  auto compute = static_cast<cudaStream_t>(stream);
  auto communication = static_cast<cudaStream_t>(commStream);
  auto takeEvent = [&] {
    if (!spareEvents.empty()) {
      void *event = spareEvents.back();
      spareEvents.pop_back();
      return static_cast<cudaEvent_t>(event);
    }
    cudaEvent_t event = nullptr;
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
    return event;
  };
  // The communication stream starts once the gradients are computed...
  cudaEvent_t ready = takeEvent();
  checkCuda(cudaEventRecord(ready, compute), "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(communication, ready, 0),
            "cudaStreamWaitEvent");
  spareEvents.push_back(ready); // Reusable once recorded and waited on.
  enqueue(commStream);
  // ...and signals when the reduced bucket is there.
  cudaEvent_t done = takeEvent();
  checkCuda(cudaEventRecord(done, communication), "cudaEventRecord");
  inFlight.emplace_back(++started, done);
  return started;
}

uint64_t NcclCommunicator::doStartAllReduce(void *buffer, size_t count,
                                            DType type, ReduceOp op) {
  return startOnCommStream(
      [&](void *on) { allReduceOn(on, buffer, count, type, op); });
}

uint64_t NcclCommunicator::doStartReduceScatter(const void *send, void *recv,
                                                size_t sliceCount, DType type,
                                                ReduceOp op) {
  return startOnCommStream(
      [&](void *on) { reduceScatterOn(on, send, recv, sliceCount, type, op); });
}

uint64_t NcclCommunicator::doStartAllGather(const void *send, void *recv,
                                            size_t sliceCount, DType type) {
  return startOnCommStream(
      [&](void *on) { allGatherOn(on, send, recv, sliceCount, type); });
}

void NcclCommunicator::doWait(uint64_t ticket) {
  auto compute = static_cast<cudaStream_t>(stream);
  // Collectives complete in order on the communication stream: waiting for
  // the last event up to `ticket` waits for all of them.
  size_t waited = 0;
  void *last = nullptr;
  for (auto &[number, event] : inFlight) {
    if (number > ticket)
      break;
    last = event;
    ++waited;
  }
  if (!last)
    return;
  checkCuda(cudaStreamWaitEvent(compute, static_cast<cudaEvent_t>(last), 0),
            "cudaStreamWaitEvent");
  for (size_t i = 0; i < waited; ++i)
    spareEvents.push_back(inFlight[i].second);
  inFlight.erase(inFlight.begin(), inFlight.begin() + waited);
}

NcclCommunicator::~NcclCommunicator() {
  waitAll();
  // A collective that never completes here ends the job through the watchdog.
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
            "cudaStreamSynchronize");
  // Finalize flushes the operations still queued on the communicator.
  settle(ncclCommFinalize(comm), "ncclCommFinalize",
         {call.number, "NCCL shut-down (ncclCommFinalize)"}, secondsNow());
  watchdog.reset();
  for (void *event : spareEvents)
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  cudaStreamDestroy(static_cast<cudaStream_t>(commStream));
  checkNccl(ncclCommDestroy(comm), "ncclCommDestroy");
}

void NcclCommunicator::doBarrier() {
  // A collective that never completes here ends the job through the watchdog.
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
            "cudaStreamSynchronize");
  ncclResult_t asyncError = ncclSuccess;
  checkNccl(ncclCommGetAsyncError(comm, &asyncError), "ncclCommGetAsyncError");
  if (asyncError != ncclInProgress)
    checkNccl(asyncError, "asynchronous error");
  host->barrierAs(call);
}

void NcclCommunicator::allReduceOn(void *onStream, void *buffer, size_t count,
                                   DType type, ReduceOp op) {
  if (count == 0)
    return;
  tracked(onStream, "ncclAllReduce", [&](cudaStream_t on) {
    return ncclAllReduce(buffer, buffer, count, ncclType(type), ncclOp(op),
                         comm, on);
  });
}

void NcclCommunicator::reduceScatterOn(void *onStream, const void *send,
                                       void *recv, size_t sliceCount,
                                       DType type, ReduceOp op) {
  if (sliceCount == 0)
    return;
  tracked(onStream, "ncclReduceScatter", [&](cudaStream_t on) {
    return ncclReduceScatter(send, recv, sliceCount, ncclType(type), ncclOp(op),
                             comm, on);
  });
}

void NcclCommunicator::doAllReduce(void *buffer, size_t count, DType type,
                                   ReduceOp op) {
  allReduceOn(stream, buffer, count, type, op);
}

void NcclCommunicator::doReduceScatter(const void *send, void *recv,
                                       size_t sliceCount, DType type,
                                       ReduceOp op) {
  reduceScatterOn(stream, send, recv, sliceCount, type, op);
}

void NcclCommunicator::doAllGather(const void *send, void *recv,
                                   size_t sliceCount, DType type) {
  allGatherOn(stream, send, recv, sliceCount, type);
}

void NcclCommunicator::allGatherOn(void *onStream, const void *send, void *recv,
                                   size_t sliceCount, DType type) {
  if (sliceCount == 0)
    return;
  tracked(onStream, "ncclAllGather", [&](cudaStream_t on) {
    return ncclAllGather(send, recv, sliceCount, ncclType(type), comm, on);
  });
}

void NcclCommunicator::doBroadcast(void *buffer, size_t count, DType type,
                                   int root) {
  if (count == 0)
    return;
  tracked(stream, "ncclBroadcast", [&](cudaStream_t on) {
    return ncclBroadcast(buffer, buffer, count, ncclType(type), root, comm, on);
  });
}

} // namespace sharc::rt

/// The device communicator hook of TrainMain.cpp (declared weak there): a CUDA
/// training binary collects over NCCL.  Strong here, so linking this object
/// makes TrainMain use it instead of MpiCommunicator; `sharc compile --target
/// cuda` links it from libSharcRuntimeCuda.a with --undefined=
/// sharcCreateCommunicator (a weak reference does not pull an archive member).
extern "C" sharc::rt::Communicator *
sharcCreateCommunicator(double collectiveTimeoutSeconds) {
  return new sharc::rt::NcclCommunicator(collectiveTimeoutSeconds);
}
