//===- Errors.cpp - Fatal runtime errors ----------------------------------===//

#include "runtime/Errors.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace sharc::rt {
namespace {

struct FatalCleanup {
  int id;
  void (*cleanup)(void *);
  void *context;
};

std::mutex &cleanupMutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<FatalCleanup> &cleanups() {
  static std::vector<FatalCleanup> list;
  return list;
}

/// Runs the registered cleanups once, the latest first.
void runFatalCleanups() {
  static std::atomic<bool> ran{false};
  if (ran.exchange(true))
    return;
  std::vector<FatalCleanup> list;
  {
    std::lock_guard<std::mutex> lock(cleanupMutex());
    list = cleanups();
  }
  for (auto it = list.rbegin(); it != list.rend(); ++it)
    it->cleanup(it->context);
}

} // namespace

int addFatalCleanup(void (*cleanup)(void *), void *context) {
  static int nextId = 0;
  std::lock_guard<std::mutex> lock(cleanupMutex());
  int id = ++nextId;
  cleanups().push_back({id, cleanup, context});
  return id;
}

void removeFatalCleanup(int id) {
  std::lock_guard<std::mutex> lock(cleanupMutex());
  std::vector<FatalCleanup> &list = cleanups();
  list.erase(
      std::remove_if(list.begin(), list.end(),
                     [&](const FatalCleanup &entry) { return entry.id == id; }),
      list.end());
}

void fatal(const std::string &message) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  bool useMpi = initialized && !finalized;
  int rank = 0;
  if (useMpi)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "sharc: rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  runFatalCleanups();
  if (useMpi)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

} // namespace sharc::rt
