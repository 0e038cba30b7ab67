//===- AtomicFile.h - Files replaced whole or not at all --------*- C++ -*-===//
//
// Writing the files a user keeps (saved state, evaluator outputs) so that a
// failure never leaves them empty, truncated or half-new.  A file is written
// to a temporary file created exclusively next to its target, every write(),
// the fsync() and the close() are checked, and only a complete file is
// renamed over the target (then the directory is synced).  AtomicFileSet does
// the same for a set of files: all are written first, and only when every one
// succeeded are they renamed into place; otherwise every temporary file is
// removed and the previous files are left as they were.
//
// POSIX and the C++17 standard library only: the training binaries link it.
//
// For tests, SHARC_TEST_WRITE_LIMIT=N in the environment simulates a disk
// with N free bytes: the writes of this process through AtomicFile::write
// (and the space NVMe offload reserves, takeWriteBudget) take N / 4096 blocks
// of 4 KiB (each file its size rounded up, as tmpfs does) and fail with
// ENOSPC ("No space left on device") when none is left.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_ATOMICFILE_H
#define SHARC_RUNTIME_ATOMICFILE_H

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace sharc::rt {

/// One file being written under a temporary name next to its target.  Errors
/// are returned as "TARGET: reason" (the strerror text of errno).  The
/// destructor removes the temporary file unless it was renamed into place.
class AtomicFile {
public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;
  ~AtomicFile();

  /// Creates the temporary file for `target`: `DIR/.NAME.PID.K.tmp` in the
  /// target's directory, K = 0, 1, ... the first name not taken, opened with
  /// O_CREAT | O_EXCL | O_NOFOLLOW, so that nothing that exists (a file, a
  /// symbolic link) is opened, followed or truncated.
  bool create(const std::string &target, std::string &error);

  /// Appends `size` bytes (short writes and EINTR are retried).
  bool write(const void *data, size_t size, std::string &error);

  /// Appends `size` zero bytes without writing them: the file is extended
  /// (ftruncate), a hole where the file system keeps sparse files.
  bool appendZeros(size_t size, std::string &error);

  /// Syncs and closes the temporary file: its contents are complete.
  bool finish(std::string &error);

  /// Finishes the file if needed, renames it over the target and syncs the
  /// target's directory.  A symbolic link at the target is replaced, not
  /// followed.
  bool commit(std::string &error);

  /// Closes and removes the temporary file, if this object created one that
  /// is not yet renamed.  Never follows a symbolic link.
  void discard();

  const std::string &target() const { return targetPath; }
  /// The temporary file's path; empty before create() and after commit().
  const std::string &temporary() const { return temporaryPath; }

private:
  friend class AtomicFileSet;

  /// rename() without the directory sync.
  bool renameIntoPlace(std::string &error);

  std::string targetPath;
  std::string temporaryPath;
  int fd = -1;
  /// Bytes written so far (for the test hook's accounting).
  unsigned long long written = 0;
  /// st_dev and st_ino of the temporary file, so that discard() removes only
  /// the file this object created.
  unsigned long long device = 0, inode = 0;
};

/// A set of files replaced together: every file is written to its temporary
/// name first, and commit() renames them into place only when all of them
/// were written; on any failure every temporary file (and every directory the
/// set created) is removed and the previous files are untouched.  The
/// destructor does that for a set that was not committed.
class AtomicFileSet {
public:
  AtomicFileSet() = default;
  AtomicFileSet(const AtomicFileSet &) = delete;
  AtomicFileSet &operator=(const AtomicFileSet &) = delete;
  ~AtomicFileSet() { discard(); }

  /// Creates the directory `dir` and its missing parents, remembering those
  /// it made: discard() removes them again (those still empty), so that a
  /// failed set leaves nothing behind.  An existing directory (or a symbolic
  /// link to one) is used as it is.  Errors read "cannot create directory
  /// 'DIR': reason".
  bool createDirectories(const std::string &dir, std::string &error);

  /// Finishes the file added last, creates the temporary file of `target`
  /// (AtomicFile::create) and returns it for writing; on failure (also:
  /// `target` already in the set) returns null and sets `error`.
  AtomicFile *add(const std::string &target, std::string &error);

  /// Finishes every file, then renames each over its target and syncs their
  /// directories.  On failure, sets `error` to the first error and removes
  /// every temporary file not yet renamed (a failing rename() itself, after
  /// all files were written, is the only way a set ends up partly replaced).
  bool commit(std::string &error);

  /// Removes every temporary file not yet renamed and the directories
  /// createDirectories made.  Code that ends the process on an error (exit(),
  /// MPI_Abort) calls it first: destructors do not run there.
  void discard();

private:
  std::vector<std::unique_ptr<AtomicFile>> files;
  /// Directories createDirectories made, parents first.
  std::vector<std::string> createdDirectories;
};

/// Test hook: simulates a disk with `bytes` free (in 4 KiB blocks) for every
/// AtomicFile::write of this process from now on (ENOSPC once they are
/// used); negative: no limit.  SHARC_TEST_WRITE_LIMIT=N in the environment
/// sets it at the first write (empty or not a number: no limit).
void setWriteLimitForTesting(long long bytes);

/// The test hook's accounting, for other writers of this process (the NVMe
/// offload files of runtime/Swap.h reserve their space through it): how many
/// of `size` bytes appended to a file of `written` bytes fit in what the
/// limit leaves; takes the 4 KiB blocks they need from it.  `size` when there
/// is no limit; less means the disk is full (ENOSPC).
size_t takeWriteBudget(unsigned long long written, size_t size);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_ATOMICFILE_H
