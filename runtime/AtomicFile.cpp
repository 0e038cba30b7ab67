//===- AtomicFile.cpp - Files replaced whole or not at all ----------------===//

#include "runtime/AtomicFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace sharc::rt {
namespace {

/// How many temporary names create() tries before giving up.
constexpr int kMaxAttempts = 1000;

/// Bytes of the target's name kept in the temporary name, so that the
/// temporary name stays within NAME_MAX (255).
constexpr size_t kMaxNameBytes = 200;

/// What SHARC_TEST_WRITE_LIMIT leaves to write (-1: no limit).
std::atomic<long long> &writeBudget() {
  static std::atomic<long long> budget = [] {
    const char *value = std::getenv("SHARC_TEST_WRITE_LIMIT");
    if (!value || !*value ||
        std::strspn(value, "0123456789") != std::strlen(value))
      return -1LL;
    return std::strtoll(value, nullptr, 10);
  }();
  return budget;
}

/// The block size in which the write budget is spent, as a file system
/// (tmpfs: pages) allocates space.
constexpr unsigned long long kBlock = 4096;

unsigned long long roundUpToBlock(unsigned long long bytes) {
  return (bytes + kBlock - 1) / kBlock * kBlock;
}

/// "PATH: reason" for the current errno.
std::string errnoMessage(const std::string &path) {
  return path + ": " + std::strerror(errno);
}

/// The directory part of `path` ("." when there is none).
std::string directoryOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// fsync()s the directory `dir`, so that a rename in it is on disk.
/// File systems that cannot sync directories (EINVAL) are accepted.
bool syncDirectory(const std::string &dir, std::string &error) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    error =
        dir + ": cannot open the directory to sync it: " + std::strerror(errno);
    return false;
  }
  bool ok = ::fsync(fd) == 0 || errno == EINVAL;
  if (!ok)
    error = dir + ": cannot sync the directory: " + std::strerror(errno);
  ::close(fd);
  return ok;
}

} // namespace

void setWriteLimitForTesting(long long bytes) {
  writeBudget().store(bytes < 0 ? -1 : bytes);
}

size_t takeWriteBudget(unsigned long long written, size_t size) {
  std::atomic<long long> &budget = writeBudget();
  long long left = budget.load();
  while (left >= 0) {
    unsigned long long paid = roundUpToBlock(written);
    unsigned long long needed =
        (roundUpToBlock(written + size) - paid) / kBlock;
    unsigned long long blocks =
        std::min<unsigned long long>(needed, (unsigned long long)left / kBlock);
    if (budget.compare_exchange_weak(left, left - (long long)(blocks * kBlock)))
      return blocks == needed ? size
                              : (size_t)(paid + blocks * kBlock - written);
  }
  return size;
}

AtomicFile::~AtomicFile() { discard(); }

bool AtomicFile::create(const std::string &target, std::string &error) {
  discard();
  targetPath = target;
  size_t slash = target.find_last_of('/');
  std::string name =
      slash == std::string::npos ? target : target.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    error = target + ": not a file name";
    return false;
  }
  std::string prefix =
      slash == std::string::npos ? std::string() : target.substr(0, slash + 1);
  // (Appended piece by piece: GCC 12 warns about "." + std::string, bug
  // 105651.)
  prefix.append(".").append(name, 0, kMaxNameBytes).append(".");
  prefix.append(std::to_string(::getpid())).append(".");
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    std::string candidate = prefix + std::to_string(attempt) + ".tmp";
    int created;
    do {
      created =
          ::open(candidate.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    } while (created < 0 && errno == EINTR);
    if (created >= 0) {
      fd = created;
      written = 0;
      temporaryPath = candidate;
      struct stat info;
      if (::fstat(fd, &info) == 0) {
        device = info.st_dev;
        inode = info.st_ino;
      }
      return true;
    }
    if (errno != EEXIST) {
      error = errnoMessage(target);
      return false;
    }
  }
  error = target + ": cannot create a temporary file next to it (" +
          std::to_string(kMaxAttempts) + " names taken)";
  return false;
}

bool AtomicFile::write(const void *data, size_t size, std::string &error) {
  if (fd < 0) {
    error = targetPath + ": not open for writing";
    return false;
  }
  size_t allowed = takeWriteBudget(written, size);
  const char *bytes = static_cast<const char *>(data);
  for (size_t left = allowed; left > 0;) {
    ssize_t count = ::write(fd, bytes, left);
    if (count < 0) {
      if (errno == EINTR)
        continue;
      error = errnoMessage(targetPath);
      return false;
    }
    bytes += count;
    left -= (size_t)count;
  }
  written += allowed;
  if (allowed < size) {
    errno = ENOSPC;
    error = errnoMessage(targetPath);
    return false;
  }
  return true;
}

bool AtomicFile::appendZeros(size_t size, std::string &error) {
  if (fd < 0) {
    error = targetPath + ": not open for writing";
    return false;
  }
  off_t end = ::lseek(fd, 0, SEEK_CUR);
  off_t extended = end + (off_t)size;
  if (end < 0 || extended < end || ::ftruncate(fd, extended) != 0 ||
      ::lseek(fd, extended, SEEK_SET) != extended) {
    error = errnoMessage(targetPath);
    return false;
  }
  written += size;
  return true;
}

bool AtomicFile::finish(std::string &error) {
  if (fd < 0) {
    if (temporaryPath.empty()) {
      error = targetPath + ": not open for writing";
      return false;
    }
    return true;
  }
  bool ok = ::fsync(fd) == 0;
  if (!ok)
    error = errnoMessage(targetPath);
  // close() is not retried: on Linux the descriptor is gone even on EINTR.
  if (::close(fd) != 0 && ok) {
    error = errnoMessage(targetPath);
    ok = false;
  }
  fd = -1;
  return ok;
}

bool AtomicFile::renameIntoPlace(std::string &error) {
  if (::rename(temporaryPath.c_str(), targetPath.c_str()) != 0) {
    error = errnoMessage(targetPath);
    return false;
  }
  temporaryPath.clear();
  return true;
}

bool AtomicFile::commit(std::string &error) {
  if (!finish(error) || !renameIntoPlace(error)) {
    discard();
    return false;
  }
  return syncDirectory(directoryOf(targetPath), error);
}

void AtomicFile::discard() {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  if (temporaryPath.empty())
    return;
  // Remove only the file this object created: if something else has taken
  // its name since (a symbolic link, another file), leave it.
  struct stat info;
  if (::lstat(temporaryPath.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
      info.st_dev == device && info.st_ino == inode)
    ::unlink(temporaryPath.c_str());
  temporaryPath.clear();
}

bool AtomicFileSet::createDirectories(const std::string &dir,
                                      std::string &error) {
  // Each prefix of `dir` that ends a component, shortest first.
  for (size_t end = 0; end != std::string::npos;) {
    end = dir.find('/', end + 1);
    std::string prefix = dir.substr(0, end);
    if (prefix.empty() || prefix.back() == '/')
      continue;
    if (::mkdir(prefix.c_str(), 0777) == 0) {
      createdDirectories.push_back(prefix);
      continue;
    }
    int reason = errno;
    struct stat info;
    if (reason == EEXIST && ::stat(prefix.c_str(), &info) == 0 &&
        S_ISDIR(info.st_mode))
      continue;
    // A file where a parent directory should be.
    bool parent = end != std::string::npos &&
                  dir.find_first_not_of('/', end) != std::string::npos;
    if (reason == EEXIST && parent)
      reason = ENOTDIR;
    error = "cannot create directory '" + dir + "': " + std::strerror(reason);
    return false;
  }
  return true;
}

AtomicFile *AtomicFileSet::add(const std::string &target, std::string &error) {
  for (const std::unique_ptr<AtomicFile> &file : files)
    if (file->target() == target) {
      error = target + ": two files of one set have this name";
      return nullptr;
    }
  // At most one file of the set is open: a state directory may hold more
  // files than the process may have descriptors.
  if (!files.empty() && !files.back()->finish(error))
    return nullptr;
  auto file = std::make_unique<AtomicFile>();
  if (!file->create(target, error))
    return nullptr;
  files.push_back(std::move(file));
  return files.back().get();
}

bool AtomicFileSet::commit(std::string &error) {
  for (const std::unique_ptr<AtomicFile> &file : files)
    if (!file->finish(error)) {
      discard();
      return false;
    }
  for (const std::unique_ptr<AtomicFile> &file : files)
    if (!file->renameIntoPlace(error)) {
      discard();
      return false;
    }
  std::vector<std::string> directories;
  for (const std::unique_ptr<AtomicFile> &file : files) {
    std::string dir = directoryOf(file->target());
    if (std::find(directories.begin(), directories.end(), dir) ==
        directories.end())
      directories.push_back(dir);
  }
  files.clear();
  createdDirectories.clear();
  for (const std::string &dir : directories)
    if (!syncDirectory(dir, error))
      return false;
  return true;
}

void AtomicFileSet::discard() {
  for (const std::unique_ptr<AtomicFile> &file : files)
    file->discard();
  files.clear();
  // Deepest first; rmdir() removes only an empty directory and never follows
  // a symbolic link that has taken its place.
  for (auto it = createdDirectories.rbegin(); it != createdDirectories.rend();
       ++it)
    ::rmdir(it->c_str());
  createdDirectories.clear();
}

} // namespace sharc::rt
