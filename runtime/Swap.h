//===- Swap.h - Buffers kept in files (NVMe offload) ------------*- C++ -*-===//
//
// ZeRO-Offload to NVMe (DeepSpeed's zero_optimization.offload_optimizer
// device "nvme"): the persistent buffers of BufferStorage::nvme live in files
// of this rank's own folder under the offload path, and the step moves each
// of them whole between its file and arena memory through a SwapStore
// (StepContext::swap): startRead / startWrite return a ticket at once, wait
// blocks until that ticket's transfer is done.
//
// The I/O is asynchronous through io_uring (liburing), not libaio: io_uring is
// asynchronous for buffered files too, where libaio's io_submit blocks unless
// the file is open with O_DIRECT, so it also works, asynchronously, on file
// systems that refuse O_DIRECT.  Files are opened with O_DIRECT where the file
// system accepts it (everything they move is kSwapAlignment-aligned for it),
// buffered otherwise.  A kernel or seccomp profile that forbids io_uring makes
// create() fail with a message that says so: there is no silent fallback.
//
// This header is included by every generated program (through
// runtime/Kernels.h) and so includes no liburing header.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_SWAP_H
#define SHARC_RUNTIME_SWAP_H

#include "runtime/Program.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sharc::rt {

/// One file of a SwapStore.
struct SwapFile {
  /// The ProgramInfo::buffers index of the buffer the file holds.
  int buffer;
  /// The file's name in the store's folder (no '/'; the buffer's `file` with
  /// ".npy" replaced by ".swp" in the training binary).
  std::string name;
  /// Its size: swapBytes(spec.bytes), a multiple of kSwapAlignment.
  int64_t bytes;
};

/// The files of one rank's offloaded buffers and the io_uring queue that
/// moves them.  One thread at a time uses a store (the step's).  A thread of
/// the store's own reaps completions and submits the requests they make room
/// for, so a transfer goes on between calls, while the step computes.
///
/// Transfers follow DeepSpeed's `aio` settings (SwapSettings): each is split
/// into requests of `blockSize` bytes (the last one shorter, still a multiple
/// of kSwapAlignment); at most `queueDepth` requests are in flight, over all
/// tickets, the others wait in the store's queue in the order they were
/// started; `singleSubmit` submits each request with its own system call
/// instead of batching them; `overlapEvents` submits new requests as earlier
/// ones complete (a rolling window), and without it a whole queue of requests
/// is submitted and waited for before the next.  Transfers of one file that
/// are in flight together are not ordered: wait for a write before reading
/// the file back.
///
/// While a store exists, the process removes its files and folder when it
/// ends abnormally too: fatal() runs a cleanup before ending the job, and
/// SIGTERM, SIGINT and SIGHUP (mpirun sends SIGTERM to every rank when one
/// rank aborts) are caught to remove them, with async-signal-safe calls only,
/// before the signal's default action ends the process.  (SIGKILL cannot be
/// caught: a killed rank's files stay.)
class SwapStore {
public:
  /// Makes this rank's own folder under `path`, which must be an existing
  /// directory: `PATH/sharc-swap-rank-R-of-N.PID` (mode 0700; if that name
  /// exists, even as a dangling symbolic link, `.1`, `.2`, ... is appended:
  /// an existing folder is never used).  Creates every file of `files` there
  /// exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, with O_DIRECT when the file
  /// system accepts it) and reserves its whole size (fallocate; the
  /// SHARC_TEST_WRITE_LIMIT hook of AtomicFile.h counts it).  On any failure
  /// removes what it created and returns null with `error` set: "PATH:
  /// reason", PATH the offload path, the folder or the file concerned
  /// ("DIR/sharc-swap-rank-0-of-1.7/m.swp: cannot reserve 4096 bytes: No
  /// space left on device").
  static std::unique_ptr<SwapStore>
  create(const SwapSettings &settings, const std::string &path, int rank,
         int ranks, std::vector<SwapFile> files, std::string &error);

  /// Waits for the requests in flight, then removes the files and the folder
  /// this store created (only those: it never follows a symbolic link, and
  /// leaves a file or folder that has taken their name).
  ~SwapStore();
  SwapStore(const SwapStore &) = delete;
  SwapStore &operator=(const SwapStore &) = delete;

  /// Starts reading the whole file of buffer `buffer` (its SwapFile::bytes)
  /// into `dest`, which must be kSwapAlignment-aligned and that long, and
  /// not be touched until the ticket is waited for.  Returns without waiting
  /// for the data: it submits what the queue has room for.  An unknown buffer
  /// or unaligned memory is fatal.
  uint64_t startRead(int buffer, void *dest);
  /// Starts writing the whole file of buffer `buffer` from `src` (aligned,
  /// SwapFile::bytes long, not to be changed until the ticket is waited
  /// for).
  uint64_t startWrite(int buffer, const void *src);

  /// Waits until ticket `ticket`'s transfer is done (at once if it is);
  /// tickets may be waited for in any order.  An I/O error or a short
  /// transfer is fatal, naming the file, the offset, what was asked and what
  /// happened: "NVMe offload: DIR/m.swp: read 0 of 4096 bytes at offset 8192
  /// (the file is shorter than the 12288 bytes sharc wrote: was it truncated
  /// under the run?)".
  void wait(uint64_t ticket);
  /// Waits for every ticket started.
  void waitAll();

  /// Reads / writes buffer `buffer`'s whole file and waits (for the runtime's
  /// own use: initial contents, --save-state).  Errors, the same messages as
  /// wait()'s, are returned in `error` instead of being fatal.
  bool read(int buffer, void *dest, std::string &error);
  bool write(int buffer, const void *src, std::string &error);

  /// The bytes of the transfers completed since the last resetStats() (whole
  /// files: a transfer counts once, when its ticket completes).
  uint64_t bytesRead() const;
  uint64_t bytesWritten() const;
  void resetStats();

  /// The store's folder (`PATH/sharc-swap-rank-R-of-N.PID[.K]`).
  const std::string &folder() const;
  /// The path of buffer `buffer`'s file ("" for a buffer without one).
  std::string filePath(int buffer) const;
  /// Whether the files are open with O_DIRECT (false: the file system refused
  /// it, and the files are buffered).
  bool directIo() const;
  /// The number of files and their bytes in all.
  int numFiles() const;
  int64_t totalBytes() const;

private:
  struct Impl;
  explicit SwapStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_SWAP_H
