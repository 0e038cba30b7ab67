//===- Swap.cpp - Buffers kept in files (NVMe offload) --------------------===//
//
// SwapStore on io_uring (liburing).  A transfer (ticket) is cut into requests
// of the aio block size; a fixed pool of queueDepth request slots bounds what
// is in flight, and the tickets whose blocks have no slot yet wait in a FIFO
// queue.  The caller's thread submits what fits when it starts a transfer; a
// completion thread of the store's own reaps completions and submits the
// queued requests they make room for, so transfers go on while the step
// computes, and wakes the caller waiting for a ticket.
//
//===----------------------------------------------------------------------===//

#include "runtime/Swap.h"

#include "runtime/AtomicFile.h"
#include "runtime/Errors.h"

#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace sharc::rt {
namespace {

/// How many folder names (`NAME`, `NAME.1`, ...) create() tries.
constexpr int kMaxFolderAttempts = 1000;
/// The largest block size: Linux moves at most 2 GiB - 4 KiB per read or
/// write (the DeepSpeed frontend's limit too).
constexpr int64_t kMaxBlockSize = int64_t(1) << 30;
/// The most entries an io_uring queue holds.
constexpr int64_t kMaxQueueDepth = 32768;
/// How many times one request is submitted again after EINTR, EAGAIN or
/// ECANCELED before it counts as failed.
constexpr int kMaxRetries = 1000;

std::string errnoText(int code) { return std::strerror(code); }

//===----------------------------------------------------------------------===//
// Removing the files when the process ends abnormally
//===----------------------------------------------------------------------===//

/// What removing one store's files and folder takes, prepared in advance so
/// that a signal handler can do it with async-signal-safe calls only
/// (fstatat, unlinkat on open directory descriptors; no allocation).
struct CleanupRecord {
  struct Entry {
    std::string name;
    dev_t device = 0;
    ino_t inode = 0;
  };
  /// The offload path and the store's folder in it (-1 until opened).
  int parentFd = -1;
  std::atomic<int> folderFd{-1};
  std::string folderName;
  /// Set as soon as mkdirat has made the folder (before its device and
  /// inode are known: 0 until then).
  std::atomic<bool> folderMade{false};
  dev_t folderDevice = 0;
  ino_t folderInode = 0;
  /// Room for every file, allocated before the record is published.  The
  /// first `named` entries have their name set before their file is created
  /// (O_EXCL, in the store's own folder: a file of that name there is the
  /// store's); the first `ready` of them have their device and inode too.
  std::unique_ptr<Entry[]> entries;
  std::atomic<size_t> named{0};
  std::atomic<size_t> ready{0};
};

/// Removes `name` from the directory `dirFd` if it is still the file (or the
/// folder) of `device` and `inode`: never what has taken its name since, and
/// never through a symbolic link.  Async-signal-safe.
void removeIfSame(int dirFd, const char *name, dev_t device, ino_t inode,
                  bool folder) {
  struct stat info;
  if (::fstatat(dirFd, name, &info, AT_SYMLINK_NOFOLLOW) != 0)
    return;
  bool kind = folder ? S_ISDIR(info.st_mode) : S_ISREG(info.st_mode);
  if (kind && info.st_dev == device && info.st_ino == inode)
    ::unlinkat(dirFd, name, folder ? AT_REMOVEDIR : 0);
}

/// Removes the files of `record`, then its folder (if empty by then).  A
/// signal may come at any point of SwapStore::create: a file whose device
/// and inode are not known yet is removed by name (it can only be the
/// store's, in the store's own folder), the folder by name once mkdirat has
/// made it.  Async-signal-safe.
void removeRecord(const CleanupRecord &record) {
  if (!record.folderMade.load())
    return;
  int folderFd = record.folderFd.load();
  size_t ready = record.ready.load(), named = record.named.load();
  for (size_t i = 0; folderFd >= 0 && i < named; ++i) {
    const CleanupRecord::Entry &entry = record.entries[i];
    if (i < ready)
      removeIfSame(folderFd, entry.name.c_str(), entry.device, entry.inode,
                   /*folder=*/false);
    else
      ::unlinkat(folderFd, entry.name.c_str(), 0);
  }
  if (record.folderInode == 0)
    ::unlinkat(record.parentFd, record.folderName.c_str(), AT_REMOVEDIR);
  else
    removeIfSame(record.parentFd, record.folderName.c_str(),
                 record.folderDevice, record.folderInode, /*folder=*/true);
}

/// The records of the stores that exist, for the signal handler and fatal().
constexpr int kMaxRecords = 64;
std::atomic<CleanupRecord *> records[kMaxRecords];
/// Signal handlers running now (in any thread): a record is not freed while
/// one may read it.
std::atomic<int> handlersRunning{0};

/// The signals that end a process by default and that launchers send: mpirun
/// sends SIGTERM to every rank when one rank aborts.
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);

/// Installs the handlers while records are published.
struct Registry {
  std::mutex mutex;
  int published = 0;
  bool installed[kNumSignals] = {};
  struct sigaction previous[kNumSignals];
  int fatalCleanupId = 0;
};

Registry &registry() {
  static Registry instance;
  return instance;
}

/// Removes the files of every store.  Async-signal-safe.
void removeAllRecords() {
  for (std::atomic<CleanupRecord *> &slot : records)
    if (CleanupRecord *record = slot.load())
      removeRecord(*record);
}

void removeAllRecordsOnFatal(void *) { removeAllRecords(); }

/// Removes the files, then ends the process by the signal's default action.
void onTerminatingSignal(int signal) {
  int savedErrno = errno;
  handlersRunning.fetch_add(1);
  removeAllRecords();
  handlersRunning.fetch_sub(1);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
  // Blocked while the handler runs: delivered, with the default action, as
  // soon as it returns.
  ::raise(signal);
  errno = savedErrno;
}

/// Publishes `record`; the first one installs the signal handlers (leaving
/// an ignored signal ignored) and the fatal() cleanup.
bool publish(CleanupRecord *record, std::string &error) {
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (std::atomic<CleanupRecord *> &slot : records) {
    CleanupRecord *expected = nullptr;
    if (!slot.compare_exchange_strong(expected, record))
      continue;
    if (reg.published++ == 0) {
      struct sigaction action;
      std::memset(&action, 0, sizeof(action));
      action.sa_handler = onTerminatingSignal;
      sigemptyset(&action.sa_mask);
      for (int signal : kSignals)
        sigaddset(&action.sa_mask, signal);
      for (int i = 0; i < kNumSignals; ++i) {
        struct sigaction current;
        reg.installed[i] =
            ::sigaction(kSignals[i], nullptr, &current) == 0 &&
            ((current.sa_flags & SA_SIGINFO) ||
             current.sa_handler != SIG_IGN) &&
            ::sigaction(kSignals[i], &action, &reg.previous[i]) == 0;
      }
      reg.fatalCleanupId = addFatalCleanup(removeAllRecordsOnFatal, nullptr);
    }
    return true;
  }
  error = "more than " + std::to_string(kMaxRecords) +
          " NVMe offload stores in one process";
  return false;
}

/// Unpublishes `record`; the last one restores the previous signal handlers.
void unpublish(CleanupRecord *record) {
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (std::atomic<CleanupRecord *> &slot : records) {
    CleanupRecord *expected = record;
    if (!slot.compare_exchange_strong(expected, nullptr))
      continue;
    // A handler in another thread may still read the record; it ends the
    // process when it is done.
    while (handlersRunning.load() > 0)
      std::this_thread::yield();
    if (--reg.published == 0) {
      for (int i = 0; i < kNumSignals; ++i)
        if (reg.installed[i])
          ::sigaction(kSignals[i], &reg.previous[i], nullptr);
      removeFatalCleanup(reg.fatalCleanupId);
    }
    return;
  }
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

int openAt(int dirFd, const std::string &name, int flags) {
  int fd;
  do {
    fd = ::openat(dirFd, name.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

/// Reserves the first `bytes` of the file `fd` (fallocate; where the file
/// system has none, by writing zeros, aligned for O_DIRECT).  Sets errno on
/// failure.
bool reserve(int fd, int64_t bytes) {
  int result;
  do {
    result = ::fallocate(fd, 0, 0, bytes);
  } while (result != 0 && errno == EINTR);
  if (result == 0)
    return true;
  if (errno != EOPNOTSUPP)
    return false;
  constexpr size_t kChunk = size_t(1) << 20;
  size_t chunk = std::min<size_t>(kChunk, size_t(bytes));
  std::unique_ptr<void, void (*)(void *)> zeros(
      std::aligned_alloc(size_t(kSwapAlignment), chunk), std::free);
  if (!zeros) {
    errno = ENOMEM;
    return false;
  }
  std::memset(zeros.get(), 0, chunk);
  for (int64_t offset = 0; offset < bytes;) {
    size_t length = std::min<size_t>(chunk, size_t(bytes - offset));
    ssize_t written = ::pwrite(fd, zeros.get(), length, offset);
    if (written < 0 && errno == EINTR)
      continue;
    if (written < 0)
      return false;
    if (written == 0) {
      errno = ENOSPC;
      return false;
    }
    offset += written;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Requests and tickets
//===----------------------------------------------------------------------===//

/// One request slot: a block of a transfer, in flight or waiting to be
/// submitted again.
struct Request {
  uint64_t ticket = 0;
  /// The block's offset in the file and length.
  int64_t offset = 0;
  int64_t length = 0;
  /// Bytes moved so far (a short transfer is continued).
  int64_t done = 0;
  int retries = 0;
};

/// One transfer of a whole file.
struct Ticket {
  int file = 0;
  bool write = false;
  char *memory = nullptr;
  /// The offset of the next block to submit.
  int64_t next = 0;
  /// Requests submitted and not completed, and requests waiting to be
  /// submitted again.
  int inFlight = 0;
  int retrying = 0;
  /// The first failure (empty: none).
  std::string error;
};

} // namespace

struct SwapStore::Impl {
  struct File {
    int buffer;
    std::string name;
    std::string path;
    int64_t bytes;
    int fd = -1;
  };

  /// The user data of the no-op that stops the completion thread.
  static constexpr uint64_t kStopTag = ~uint64_t(0);

  int64_t blockSize = kSwapAlignment;
  int queueDepth = 1;
  bool singleSubmit = false;
  bool overlapEvents = true;

  io_uring ring;
  bool ringReady = false;
  std::string folderPath;
  bool direct = true;
  std::vector<File> files;
  std::unordered_map<int, int> fileOfBuffer;
  CleanupRecord record;
  bool published = false;

  /// Reaps completions and submits what they make room for, so that a
  /// transfer goes on while the step computes.  Everything below is guarded
  /// by `mutex`; `progress` is notified after every batch of completions.
  std::thread completer;
  std::mutex mutex;
  std::condition_variable progress;
  /// The store is going: nothing more is submitted or retried.
  bool closing = false;
  /// The tickets not completed, and the failed ones until waited for.
  std::map<uint64_t, Ticket> tickets;
  /// Tickets with blocks not yet submitted, oldest first.
  std::deque<uint64_t> queue;
  /// Request slots to submit again, and the free ones.
  std::deque<int> retries;
  std::vector<Request> requests;
  std::vector<int> freeRequests;
  /// Requests submitted (or prepared) and not completed; requests prepared
  /// and not yet submitted.
  int inFlight = 0;
  int unsubmitted = 0;
  uint64_t nextTicket = 1;
  uint64_t readBytes = 0;
  uint64_t writtenBytes = 0;

  ~Impl();
  bool startCompleter(std::string &error);
  void runCompleter();
  bool check(int buffer, const void *memory, const char *what,
             std::string &error) const;
  uint64_t start(int buffer, char *memory, bool write);
  bool finish(uint64_t id, std::string &error);
  // The rest with `mutex` held.
  void pump(std::unique_lock<std::mutex> &lock);
  void submit(std::unique_lock<std::mutex> &lock);
  void complete(int index, int result);
  void fail(uint64_t id, Ticket &ticket, std::string message);
  void release(int index) { freeRequests.push_back(index); }
  void finishIfDone(std::map<uint64_t, Ticket>::iterator it);
  bool isDone(const Ticket &ticket) const {
    return (!ticket.error.empty() || ticket.next == files[ticket.file].bytes) &&
           ticket.inFlight == 0 && ticket.retrying == 0;
  }
};

SwapStore::Impl::~Impl() {
  if (completer.joinable()) {
    // Requests in flight read from or write into memory of the caller's and
    // the files: wait for them, submitting nothing more, then stop the
    // completion thread with a no-op.
    std::unique_lock<std::mutex> lock(mutex);
    closing = true;
    queue.clear();
    for (int index : retries) {
      --tickets.at(requests[index].ticket).retrying;
      release(index);
    }
    retries.clear();
    progress.wait(lock, [&] { return inFlight == 0; });
    io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) // nothing is in flight: the queue is empty
      fatal("NVMe offload: " + folderPath +
            ": no room in the io_uring queue to stop its thread");
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kStopTag);
    ++unsubmitted;
    submit(lock);
    lock.unlock();
    completer.join();
  }
  if (ringReady)
    io_uring_queue_exit(&ring);
  for (File &file : files)
    if (file.fd >= 0)
      ::close(file.fd);
  removeRecord(record);
  if (published)
    unpublish(&record);
  if (record.folderFd >= 0)
    ::close(record.folderFd);
  if (record.parentFd >= 0)
    ::close(record.parentFd);
}

bool SwapStore::Impl::startCompleter(std::string &error) {
  // The thread takes no signals: they go to the program's threads, and its
  // waits are not interrupted.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  try {
    completer = std::thread([this] { runCompleter(); });
  } catch (const std::system_error &failure) {
    error = folderPath +
            ": cannot start the thread that completes the "
            "transfers: " +
            failure.what();
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return completer.joinable();
}

void SwapStore::Impl::runCompleter() {
  for (;;) {
    io_uring_cqe *cqe = nullptr;
    int result = io_uring_wait_cqe(&ring, &cqe);
    if (result == -EINTR || result == -EAGAIN)
      continue;
    if (result < 0)
      fatal("NVMe offload: " + folderPath +
            ": waiting for io_uring: " + errnoText(-result));
    std::unique_lock<std::mutex> lock(mutex);
    bool stop = false;
    while (cqe) {
      uint64_t data = io_uring_cqe_get_data64(cqe);
      int transferred = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (data == kStopTag)
        stop = true;
      else
        complete(int(data), transferred);
      if (io_uring_peek_cqe(&ring, &cqe) != 0)
        cqe = nullptr;
    }
    pump(lock);
    progress.notify_all();
    if (stop)
      return;
  }
}

bool SwapStore::Impl::check(int buffer, const void *memory, const char *what,
                            std::string &error) const {
  auto it = fileOfBuffer.find(buffer);
  if (it == fileOfBuffer.end()) {
    error = "NVMe offload: " + std::string(what) + " of buffer " +
            std::to_string(buffer) + ", which has no file in " + folderPath;
    return false;
  }
  if (reinterpret_cast<uintptr_t>(memory) % uintptr_t(kSwapAlignment) != 0) {
    error = "NVMe offload: " + std::string(what) + " of " +
            files[it->second].path + ": the memory is not aligned to " +
            std::to_string(kSwapAlignment) + " bytes";
    return false;
  }
  return true;
}

uint64_t SwapStore::Impl::start(int buffer, char *memory, bool write) {
  std::unique_lock<std::mutex> lock(mutex);
  uint64_t id = nextTicket++;
  int index = fileOfBuffer.at(buffer);
  if (files[index].bytes == 0)
    return id; // nothing to move: complete
  Ticket &ticket = tickets[id];
  ticket.file = index;
  ticket.write = write;
  ticket.memory = memory;
  queue.push_back(id);
  pump(lock);
  return id;
}

void SwapStore::Impl::pump(std::unique_lock<std::mutex> &lock) {
  // Without overlapping events, a new queue of requests starts only when the
  // previous one is done.
  if (closing || (!overlapEvents && inFlight > 0))
    return;
  for (;;) {
    int index;
    if (!retries.empty()) {
      index = retries.front();
      retries.pop_front();
      --tickets.at(requests[index].ticket).retrying;
    } else {
      if (freeRequests.empty())
        break;
      // The next block of the oldest ticket that has blocks left.
      std::map<uint64_t, Ticket>::iterator it = tickets.end();
      while (!queue.empty()) {
        it = tickets.find(queue.front());
        if (it != tickets.end() && it->second.error.empty() &&
            it->second.next < files[it->second.file].bytes)
          break;
        queue.pop_front();
        it = tickets.end();
      }
      if (it == tickets.end())
        break;
      Ticket &ticket = it->second;
      int64_t bytes = files[ticket.file].bytes;
      index = freeRequests.back();
      freeRequests.pop_back();
      Request &request = requests[index];
      request.ticket = it->first;
      request.offset = ticket.next;
      request.length = std::min(blockSize, bytes - ticket.next);
      request.done = 0;
      request.retries = 0;
      ticket.next += request.length;
      if (ticket.next == bytes)
        queue.pop_front();
    }
    Request &request = requests[index];
    Ticket &ticket = tickets.at(request.ticket);
    io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
      submit(lock);
      sqe = io_uring_get_sqe(&ring);
    }
    if (!sqe) // the ring has room for queueDepth entries
      fatal("NVMe offload: " + folderPath +
            ": the io_uring submission queue is full");
    const File &file = files[ticket.file];
    char *memory = ticket.memory + request.offset + request.done;
    unsigned length = unsigned(request.length - request.done);
    uint64_t offset = uint64_t(request.offset + request.done);
    if (ticket.write)
      io_uring_prep_write(sqe, file.fd, memory, length, offset);
    else
      io_uring_prep_read(sqe, file.fd, memory, length, offset);
    io_uring_sqe_set_data64(sqe, uint64_t(index));
    ++inFlight;
    ++ticket.inFlight;
    ++unsubmitted;
    if (singleSubmit)
      submit(lock);
  }
  submit(lock);
}

void SwapStore::Impl::submit(std::unique_lock<std::mutex> &lock) {
  while (unsubmitted > 0) {
    int submitted = io_uring_submit(&ring);
    if (submitted > 0) {
      unsubmitted -= std::min(submitted, unsubmitted);
      continue;
    }
    if (submitted == -EINTR)
      continue;
    if (submitted == 0 || submitted == -EAGAIN || submitted == -EBUSY) {
      // Short of resources for now: let completions in, then try again.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
      continue;
    }
    fatal("NVMe offload: " + folderPath +
          ": io_uring_submit: " + errnoText(-submitted));
  }
}

void SwapStore::Impl::complete(int index, int result) {
  Request &request = requests[index];
  auto it = tickets.find(request.ticket);
  Ticket &ticket = it->second;
  --inFlight;
  --ticket.inFlight;
  const File &file = files[ticket.file];
  int64_t asked = request.length - request.done;
  auto retry = [&] {
    ++ticket.retrying;
    retries.push_back(index);
  };
  if (!ticket.error.empty()) {
    release(index);
  } else if ((result == -EINTR || result == -EAGAIN || result == -ECANCELED) &&
             ++request.retries <= kMaxRetries && !closing) {
    retry();
    return;
  } else if (result < 0) {
    fail(it->first, ticket,
         file.path + ": " + (ticket.write ? "write" : "read") + " of " +
             std::to_string(request.length) + " bytes at offset " +
             std::to_string(request.offset) + " failed: " + errnoText(-result));
    release(index);
  } else if (result == asked) {
    release(index);
  } else {
    // A short transfer: continued, unless a read has met the end of the
    // file (truncated under the run) or nothing moved at all.
    struct stat info;
    bool shortFile = !ticket.write && ::fstat(file.fd, &info) == 0 &&
                     info.st_size < request.offset + request.length;
    if (result > 0 && !shortFile && !closing) {
      request.done += result;
      retry();
      return;
    }
    std::string message = file.path + ": " +
                          (ticket.write ? "wrote " : "read ") +
                          std::to_string(request.done + result) + " of " +
                          std::to_string(request.length) + " bytes at offset " +
                          std::to_string(request.offset);
    if (shortFile)
      message += " (the file is shorter than the " +
                 std::to_string(file.bytes) +
                 " bytes sharc wrote: was it truncated under the run?)";
    fail(it->first, ticket, message);
    release(index);
  }
  finishIfDone(it);
}

void SwapStore::Impl::fail(uint64_t id, Ticket &ticket, std::string message) {
  if (!ticket.error.empty())
    return;
  ticket.error = "NVMe offload: " + message;
  // Its requests waiting to be submitted again are dropped (those in flight
  // complete first).
  for (auto it = retries.begin(); it != retries.end();) {
    if (requests[*it].ticket == id) {
      release(*it);
      --ticket.retrying;
      it = retries.erase(it);
    } else {
      ++it;
    }
  }
}

void SwapStore::Impl::finishIfDone(std::map<uint64_t, Ticket>::iterator it) {
  const Ticket &ticket = it->second;
  if (!isDone(ticket) || !ticket.error.empty())
    return; // a failed ticket stays until waited for, to report its error
  (ticket.write ? writtenBytes : readBytes) +=
      uint64_t(files[ticket.file].bytes);
  tickets.erase(it);
}

bool SwapStore::Impl::finish(uint64_t id, std::string &error) {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    auto it = tickets.find(id);
    if (it == tickets.end())
      return true;            // completed
    if (isDone(it->second)) { // failed: completed ones are gone
      error = std::move(it->second.error);
      tickets.erase(it);
      return error.empty();
    }
    if (inFlight == 0 && retries.empty() && queue.empty())
      fatal("NVMe offload: " + folderPath + ": ticket " + std::to_string(id) +
            " cannot progress (internal error)");
    progress.wait(lock);
  }
}

//===----------------------------------------------------------------------===//
// SwapStore
//===----------------------------------------------------------------------===//

SwapStore::SwapStore(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

SwapStore::~SwapStore() = default;

std::unique_ptr<SwapStore> SwapStore::create(const SwapSettings &settings,
                                             const std::string &path, int rank,
                                             int ranks,
                                             std::vector<SwapFile> files,
                                             std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return std::unique_ptr<SwapStore>();
  };
  if (path.empty())
    return fail("NVMe offload: no folder for the files (the offload path is "
                "empty)");
  if (settings.blockSize <= 0 || settings.blockSize % kSwapAlignment != 0 ||
      settings.blockSize > kMaxBlockSize)
    return fail(
        path + ": the aio block size " + std::to_string(settings.blockSize) +
        " is not a positive multiple of " + std::to_string(kSwapAlignment) +
        " of at most " + std::to_string(kMaxBlockSize));
  if (settings.queueDepth < 1 || settings.queueDepth > kMaxQueueDepth)
    return fail(path + ": the aio queue depth " +
                std::to_string(settings.queueDepth) + " is not in [1, " +
                std::to_string(kMaxQueueDepth) + "]");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return fail(path + ": rank " + std::to_string(rank) + " of " +
                std::to_string(ranks));
  std::set<std::string> names;
  std::set<int> buffers;
  for (const SwapFile &file : files) {
    if (file.name.empty() || file.name == "." || file.name == ".." ||
        file.name.find('/') != std::string::npos || file.name.size() > 255)
      return fail(path + ": '" + file.name + "' is not a file name");
    if (!names.insert(file.name).second)
      return fail(path + ": two files are named '" + file.name + "'");
    if (!buffers.insert(file.buffer).second)
      return fail(path + ": two files hold buffer " +
                  std::to_string(file.buffer));
    if (file.bytes < 0 || file.bytes % kSwapAlignment != 0)
      return fail(path + ": file '" + file.name + "' of " +
                  std::to_string(file.bytes) + " bytes, not a multiple of " +
                  std::to_string(kSwapAlignment));
  }

  auto impl = std::make_unique<Impl>();
  impl->blockSize = settings.blockSize;
  impl->queueDepth = int(settings.queueDepth);
  impl->singleSubmit = settings.singleSubmit;
  impl->overlapEvents = settings.overlapEvents;
  impl->requests.resize(size_t(impl->queueDepth));
  for (int i = impl->queueDepth - 1; i >= 0; --i)
    impl->freeRequests.push_back(i);

  // io_uring first: without it there is nothing to make.
  unsigned entries = 1;
  while (entries < unsigned(impl->queueDepth))
    entries *= 2;
  int result = io_uring_queue_init(entries, &impl->ring, 0);
  if (result < 0) {
    std::string why;
    if (result == -EPERM || result == -ENOSYS || result == -EACCES)
      why = " (this kernel, its kernel.io_uring_disabled setting or the "
            "process's seccomp profile, e.g. a container's, forbids "
            "io_uring; NVMe offload needs it and has no fallback)";
    else if (result == -ENOMEM)
      why = " (before Linux 5.12 the ring counts against the locked-memory "
            "limit, ulimit -l)";
    return fail(path + ": cannot set up io_uring: io_uring_queue_init: " +
                errnoText(-result) + why);
  }
  impl->ringReady = true;

  CleanupRecord &record = impl->record;
  do {
    record.parentFd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (record.parentFd < 0 && errno == EINTR);
  if (record.parentFd < 0)
    return fail(path + ": " + errnoText(errno) +
                " (the offload folder must be an existing directory)");

  // The record is published before anything is made, so that a signal at
  // any point removes what is there by then (removeRecord).
  record.entries = std::make_unique<CleanupRecord::Entry[]>(files.size());
  std::string publishError;
  impl->published = publish(&record, publishError);
  if (!impl->published)
    return fail(path + ": " + publishError);

  // This rank's own folder, never one that exists.
  std::string base = "sharc-swap-rank-" + std::to_string(rank) + "-of-" +
                     std::to_string(ranks) + "." + std::to_string(::getpid());
  for (int attempt = 0;; ++attempt) {
    if (attempt == kMaxFolderAttempts)
      return fail(path + ": cannot create this rank's folder in it: " +
                  std::to_string(kMaxFolderAttempts) + " names " + base +
                  "[.K] taken");
    // Set before mkdirat, read by a handler only once folderMade says the
    // folder of this name is the store's.
    record.folderName =
        attempt == 0 ? base : base + "." + std::to_string(attempt);
    if (::mkdirat(record.parentFd, record.folderName.c_str(), 0700) == 0) {
      record.folderMade.store(true);
      break;
    }
    if (errno != EEXIST)
      return fail(path + ": cannot create this rank's folder in it: " +
                  errnoText(errno));
  }
  const std::string &name = record.folderName;
  impl->folderPath = (path.back() == '/' ? path : path + "/") + name;
  int folderFd;
  do {
    folderFd = ::openat(record.parentFd, name.c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } while (folderFd < 0 && errno == EINTR);
  struct stat info;
  if (folderFd < 0 || ::fstat(folderFd, &info) != 0) {
    int reason = errno;
    if (folderFd >= 0)
      ::close(folderFd);
    return fail(impl->folderPath + ": " + errnoText(reason));
  }
  record.folderDevice = info.st_dev;
  record.folderInode = info.st_ino;
  record.folderFd.store(folderFd);

  for (SwapFile &spec : files) {
    Impl::File file{spec.buffer, spec.name, impl->folderPath + "/" + spec.name,
                    spec.bytes};
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    size_t slot = record.named.load();
    record.entries[slot].name = spec.name;
    record.named.store(slot + 1);
    file.fd =
        openAt(folderFd, spec.name, flags | (impl->direct ? O_DIRECT : 0));
    if (file.fd < 0 && errno == EINVAL && impl->direct) {
      // The file system refuses O_DIRECT.  The file may exist by now (Linux
      // checks after creating it); the folder is this store's own.
      ::unlinkat(folderFd, spec.name.c_str(), 0);
      impl->direct = false;
      file.fd = openAt(folderFd, spec.name, flags);
    }
    if (file.fd < 0)
      return fail(file.path + ": " + errnoText(errno));
    struct stat fileInfo;
    if (::fstat(file.fd, &fileInfo) != 0) {
      int reason = errno;
      ::close(file.fd);
      return fail(file.path + ": " + errnoText(reason));
    }
    record.entries[slot].device = fileInfo.st_dev;
    record.entries[slot].inode = fileInfo.st_ino;
    record.ready.store(slot + 1);
    impl->fileOfBuffer[spec.buffer] = int(impl->files.size());
    impl->files.push_back(file);
    if (spec.bytes == 0)
      continue;
    bool reserved;
    if (takeWriteBudget(0, size_t(spec.bytes)) < size_t(spec.bytes)) {
      errno = ENOSPC; // the test hook's full disk (AtomicFile.h)
      reserved = false;
    } else {
      reserved = reserve(file.fd, spec.bytes);
    }
    if (!reserved)
      return fail(file.path + ": cannot reserve " + std::to_string(spec.bytes) +
                  " bytes: " + errnoText(errno));
  }
  if (!impl->startCompleter(error))
    return std::unique_ptr<SwapStore>();
  return std::unique_ptr<SwapStore>(new SwapStore(std::move(impl)));
}

uint64_t SwapStore::startRead(int buffer, void *dest) {
  std::string error;
  if (!impl->check(buffer, dest, "read", error))
    fatal(error);
  return impl->start(buffer, static_cast<char *>(dest), /*write=*/false);
}

uint64_t SwapStore::startWrite(int buffer, const void *src) {
  std::string error;
  if (!impl->check(buffer, src, "write", error))
    fatal(error);
  // io_uring only reads the memory of a write.
  return impl->start(buffer, static_cast<char *>(const_cast<void *>(src)),
                     /*write=*/true);
}

void SwapStore::wait(uint64_t ticket) {
  uint64_t issued;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    issued = impl->nextTicket;
  }
  if (ticket == 0 || ticket >= issued)
    fatal("NVMe offload: " + impl->folderPath + ": wait for ticket " +
          std::to_string(ticket) + ", which was never issued");
  std::string error;
  if (!impl->finish(ticket, error))
    fatal(error);
}

void SwapStore::waitAll() {
  for (;;) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(impl->mutex);
      if (impl->tickets.empty())
        return;
      ticket = impl->tickets.begin()->first;
    }
    std::string error;
    if (!impl->finish(ticket, error))
      fatal(error);
  }
}

bool SwapStore::read(int buffer, void *dest, std::string &error) {
  if (!impl->check(buffer, dest, "read", error))
    return false;
  return impl->finish(
      impl->start(buffer, static_cast<char *>(dest), /*write=*/false), error);
}

bool SwapStore::write(int buffer, const void *src, std::string &error) {
  if (!impl->check(buffer, src, "write", error))
    return false;
  return impl->finish(impl->start(buffer,
                                  static_cast<char *>(const_cast<void *>(src)),
                                  /*write=*/true),
                      error);
}

uint64_t SwapStore::bytesRead() const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  return impl->readBytes;
}

uint64_t SwapStore::bytesWritten() const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  return impl->writtenBytes;
}

void SwapStore::resetStats() {
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->readBytes = 0;
  impl->writtenBytes = 0;
}

const std::string &SwapStore::folder() const { return impl->folderPath; }

std::string SwapStore::filePath(int buffer) const {
  auto it = impl->fileOfBuffer.find(buffer);
  return it == impl->fileOfBuffer.end() ? std::string()
                                        : impl->files[it->second].path;
}

bool SwapStore::directIo() const { return impl->direct; }

int SwapStore::numFiles() const { return int(impl->files.size()); }

int64_t SwapStore::totalBytes() const {
  int64_t total = 0;
  for (const Impl::File &file : impl->files)
    total += file.bytes;
  return total;
}

} // namespace sharc::rt
