//===- ThreadPool.cpp - Host threads for kernel launches ------------------===//

#include "runtime/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

namespace sharc::rt {

namespace {

int fromEnvironment(const char *name) {
  const char *value = std::getenv(name);
  if (!value || !*value)
    return 0;
  char *end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed > 0 && parsed < 4096 ? int(parsed) : 0;
}

/// CPUs this process may run on (its affinity mask: mpirun may bind a rank
/// to one core).
int allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, CPU_COUNT(&set));
}

int defaultThreads() {
  if (int n = fromEnvironment("SHARC_NUM_THREADS"))
    return n;
  int allowed = allowedCpus();
  if (int n = fromEnvironment("OMP_NUM_THREADS"))
    return std::min(n, allowed);
  int hardware = std::max(1u, std::thread::hardware_concurrency());
  if (allowed < hardware)
    return allowed; // Bound by the launcher: the mask is this rank's share.
  int local = fromEnvironment("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local)
    local = fromEnvironment("SLURM_NTASKS_PER_NODE");
  return std::max(1, hardware / std::max(1, local));
}

/// Spin iterations before a worker sleeps (a fraction of a millisecond): enough
/// to bridge the serial work between two parallel launches of one step, so
/// launches rarely pay for a wake-up.
constexpr int kSpins = 1 << 14;

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class Pool {
public:
  explicit Pool(int threads) : numThreads(threads) {
    for (int t = 1; t < threads; ++t)
      workers.emplace_back([this, t] { work(t); });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    for (std::thread &worker : workers)
      worker.join();
  }

  void run(int64_t n, void (*body)(const void *, int64_t, int64_t),
           const void *context) {
    int chunks = static_cast<int>(std::min<int64_t>(numThreads, n));
    if (chunks <= 1) {
      body(context, 0, n);
      return;
    }
    // Every worker acknowledges every job (running a chunk or not), so the
    // next job is only written once no worker can still be reading this one.
    job = {n, body, context, chunks};
    remaining.store(numThreads - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex);
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    runChunk(0);
    for (int spin = 0; remaining.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpins)
        pause();
      else
        std::this_thread::yield();
    }
  }

  int threads() const { return numThreads; }

private:
  struct Job {
    int64_t n = 0;
    void (*body)(const void *, int64_t, int64_t) = nullptr;
    const void *context = nullptr;
    int chunks = 0;
  };

  void runChunk(int chunk) {
    int64_t begin = job.n * chunk / job.chunks;
    int64_t end = job.n * (chunk + 1) / job.chunks;
    job.body(job.context, begin, end);
  }

  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t current = generation.load(std::memory_order_acquire);
      for (int spin = 0; current == seen && spin < kSpins; ++spin) {
        pause();
        current = generation.load(std::memory_order_acquire);
      }
      if (current == seen) {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] {
          return generation.load(std::memory_order_acquire) != seen;
        });
        current = generation.load(std::memory_order_acquire);
      }
      seen = current;
      if (stopping)
        return;
      if (index < job.chunks)
        runChunk(index);
      remaining.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  int numThreads;
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> remaining{0};
  bool stopping = false;
  Job job;
};

int requestedThreads = 0;

Pool &pool() {
  static Pool instance(requestedThreads ? requestedThreads : defaultThreads());
  return instance;
}

} // namespace

void parallelFor(int64_t n, void (*body)(const void *, int64_t, int64_t),
                 const void *context) {
  if (n <= 0)
    return;
  pool().run(n, body, context);
}

int hostThreads() { return pool().threads(); }

void setHostThreads(int threads) {
  if (threads > 0)
    requestedThreads = threads;
}

} // namespace sharc::rt
