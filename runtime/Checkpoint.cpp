//===- Checkpoint.cpp - Periodic checkpoints and resuming -----------------===//

#include "runtime/Checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sharc::rt {

namespace {

constexpr const char *kPrefix = "step-";

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string baseOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool isRealDirectory(const std::string &path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// fsync() of the folder `dir` (its entries are durable).
bool syncDirectory(const std::string &dir, std::string &error) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    error = dir + ": " + std::strerror(errno);
    if (fd >= 0)
      ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

/// rename() that never replaces an existing `to`.
bool renameNoReplace(const std::string &from, const std::string &to) {
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(),
                     RENAME_NOREPLACE) == 0;
}

/// A hidden name in `path`'s folder that nothing has: `.BASE.PID.K.SUFFIX`.
std::string hiddenSibling(const std::string &path, const char *suffix) {
  std::string parent = parentOf(path), base = baseOf(path);
  for (int k = 0;; ++k) {
    std::string candidate =
        joinPath(parent, "." + base + "." + std::to_string(::getpid()) + "." +
                             std::to_string(k) + "." + suffix);
    struct stat info;
    if (::lstat(candidate.c_str(), &info) != 0 && errno == ENOENT)
      return candidate;
  }
}

/// unlinkat() that counts a file already gone as removed.
bool removeEntry(int dirFd, const std::string &name, int flags) {
  return ::unlinkat(dirFd, name.c_str(), flags) == 0 || errno == ENOENT;
}

} // namespace

std::string checkpointName(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "%s%08" PRId64, kPrefix, step);
  return name;
}

int64_t checkpointStep(const std::string &name) {
  size_t prefix = std::strlen(kPrefix);
  if (name.size() <= prefix || name.compare(0, prefix, kPrefix) != 0 ||
      name.size() > prefix + 18)
    return -1;
  int64_t step = 0;
  for (size_t i = prefix; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string partialCheckpointPath(const std::string &saveDir, int64_t step,
                                  uint64_t saveId) {
  return joinPath(saveDir, "." + checkpointName(step) + "." + hex16(saveId) +
                               ".partial");
}

bool listCheckpoints(const std::string &dir,
                     std::vector<CheckpointEntry> &checkpoints,
                     std::string &error) {
  checkpoints.clear();
  DIR *stream = ::opendir(dir.c_str());
  if (!stream) {
    if (errno == ENOENT)
      return true;
    error = dir + ": " + std::strerror(errno);
    return false;
  }
  while (dirent *entry = ::readdir(stream)) {
    std::string name = entry->d_name;
    int64_t step = checkpointStep(name);
    std::string path = joinPath(dir, name);
    if (step < 0 || !isRealDirectory(path))
      continue;
    StateIndex index;
    std::string ignored;
    const std::string *recorded = nullptr;
    if (!readStateIndex(path, index, ignored) || !index.present ||
        !(recorded = index.findMeta("step")) ||
        *recorded != std::to_string(step))
      continue;
    checkpoints.push_back({step, path});
  }
  ::closedir(stream);
  std::sort(checkpoints.begin(), checkpoints.end(),
            [](const CheckpointEntry &a, const CheckpointEntry &b) {
              return a.step < b.step;
            });
  return true;
}

bool findResumePoint(const std::string &dir, std::string &path,
                     std::string &error) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0) {
    error = "--resume " + dir + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(info.st_mode)) {
    error = "--resume " + dir + ": not a directory";
    return false;
  }
  if (::stat(stateIndexPath(dir).c_str(), &info) == 0) {
    path = dir;
    return true;
  }
  // The step-N folder with the largest N; its index is read (and refused
  // when it is damaged) by the caller, never skipped for an older one.
  DIR *stream = ::opendir(dir.c_str());
  if (!stream) {
    error = "--resume " + dir + ": " + std::strerror(errno);
    return false;
  }
  int64_t best = -1;
  while (dirent *entry = ::readdir(stream)) {
    int64_t step = checkpointStep(entry->d_name);
    if (step > best && isRealDirectory(joinPath(dir, entry->d_name))) {
      best = step;
      path = joinPath(dir, entry->d_name);
    }
  }
  ::closedir(stream);
  if (best < 0) {
    error = "--resume " + dir + ": no checkpoint there (neither " +
            stateIndexPath(dir) + " nor a " + kPrefix + "N folder)";
    return false;
  }
  return true;
}

bool publishCheckpoint(const std::string &partial, const std::string &target,
                       std::string &warning, std::string &error) {
  std::string parent = parentOf(target);
  if (renameNoReplace(partial, target))
    return syncDirectory(parent, error);
  if (errno != EEXIST && errno != ENOTEMPTY) {
    error = target + ": " + std::strerror(errno);
    return false;
  }
  // A checkpoint of this step exists (a run resumed from an earlier one
  // saves it again): replaced only when sharc wrote it.
  StateIndex index;
  std::string ignored;
  if (!isRealDirectory(target) || !readStateIndex(target, index, ignored) ||
      !index.present) {
    error = target +
            " exists and is not a checkpoint sharc wrote; move it away or "
            "save elsewhere (--save-dir)";
    return false;
  }
  std::string old = hiddenSibling(target, "old");
  if (!renameNoReplace(target, old) || !renameNoReplace(partial, target)) {
    error = target + ": " + std::strerror(errno);
    return false;
  }
  if (!syncDirectory(parent, error))
    return false;
  std::string removeError;
  if (!removeStateDirectory(old, removeError))
    warning = "the checkpoint it replaces: " + removeError;
  return true;
}

bool removeStateDirectory(const std::string &dir, std::string &error) {
  if (!isRealDirectory(dir)) {
    error = dir + ": not removed: not a directory";
    return false;
  }
  StateIndex index;
  if (!readStateIndex(dir, index, error))
    return false;
  if (!index.present) {
    error = dir + ": not removed: it has no " + stateIndexPath(dir) +
            " (not a state sharc wrote)";
    return false;
  }
  // Hidden first: a folder half removed is never taken for a checkpoint.
  std::string hidden = dir;
  if (baseOf(dir).front() != '.') {
    hidden = hiddenSibling(dir, "removing");
    if (!renameNoReplace(dir, hidden)) {
      error = dir + ": " + std::strerror(errno);
      return false;
    }
  }
  int fd =
      ::open(hidden.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    error = hidden + ": " + std::strerror(errno);
    return false;
  }
  for (const std::string &file : index.whole)
    removeEntry(fd, file, 0);
  if (!index.sliced.empty())
    for (int rank = 0; rank < index.ranks; ++rank) {
      std::string name = baseOf(sliceDirectory("", rank, index.ranks));
      int sliceFd = ::openat(fd, name.c_str(),
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sliceFd < 0)
        continue;
      for (const auto &entry : index.sliced)
        removeEntry(sliceFd, entry.first, 0);
      removeEntry(sliceFd, baseOf(saveIdPath("", rank, index.ranks)), 0);
      ::close(sliceFd);
      removeEntry(fd, name, AT_REMOVEDIR);
    }
  removeEntry(fd, baseOf(stateIndexPath("")), 0);
  ::close(fd);
  if (::rmdir(hidden.c_str()) != 0) {
    error = hidden + ": kept (" + std::strerror(errno) +
            "): it holds files that its index does not list";
    return false;
  }
  return syncDirectory(parentOf(hidden), error);
}

void pruneCheckpoints(const std::string &saveDir, int64_t keep,
                      std::vector<std::string> &removed,
                      std::vector<std::string> &warnings) {
  std::vector<CheckpointEntry> checkpoints;
  std::string error;
  if (!listCheckpoints(saveDir, checkpoints, error)) {
    warnings.push_back(error);
    return;
  }
  for (size_t i = 0; i + size_t(keep) < checkpoints.size(); ++i) {
    if (removeStateDirectory(checkpoints[i].path, error))
      removed.push_back(checkpoints[i].path);
    else
      warnings.push_back(error);
  }
}

MetaLines resumeIdentity(const std::string &modelHash,
                         const std::string &configText) {
  MetaLines lines = {{"model-hash", modelHash}};
  std::istringstream text(configText);
  std::string line;
  while (std::getline(text, line)) {
    size_t space = line.find(' ');
    if (line.empty() || space == std::string::npos)
      continue;
    lines.emplace_back("config." + line.substr(0, space),
                       line.substr(space + 1));
  }
  return lines;
}

MetaLines stateMeta(const StateDescription &state) {
  auto text = [](const std::string &value) {
    return value.empty() ? std::string("-") : value;
  };
  MetaLines meta = {{"step", std::to_string(state.step)},
                    {"sharc-version", text(state.sharcVersion)},
                    {"model", text(state.model)}};
  for (auto &line : resumeIdentity(text(state.modelHash), state.trainingConfig))
    meta.push_back(std::move(line));
  meta.insert(meta.end(), {{"target", text(state.target)},
                           {"world-size", std::to_string(state.worldSize)},
                           {"zero-stage", std::to_string(state.zeroStage)},
                           {"micro-batch", std::to_string(state.microBatch)},
                           {"gradient-accumulation",
                            std::to_string(state.gradientAccumulation)}});
  return meta;
}

bool commitCheckpoint(const std::string &partial, const std::string &target,
                      int64_t keepLast, std::vector<std::string> &removed,
                      std::vector<std::string> &warnings, std::string &error) {
  std::string warning;
  if (!publishCheckpoint(partial, target, warning, error)) {
    std::string ignored;
    removeStateDirectory(partial, ignored);
    return false;
  }
  if (!warning.empty())
    warnings.push_back(warning);
  if (keepLast > 0)
    pruneCheckpoints(parentOf(target), keepLast, removed, warnings);
  return true;
}

bool checkResumable(const std::string &dir, const StateIndex &index,
                    const MetaLines &expected, std::string &error) {
  std::string where = stateIndexPath(dir);
  if (!index.present || !index.findMeta("model-hash")) {
    error = where +
            ": the state records no model or training configuration "
            "(a --dump-state or --save-state folder of an older "
            "sharc, or weights); to start from its values without "
            "resuming, pass --weights " +
            dir;
    return false;
  }
  std::vector<std::string> differences;
  std::set<std::string> compared;
  for (const auto &[key, value] : expected) {
    compared.insert(key);
    const std::string *saved = index.findMeta(key);
    if (!saved)
      differences.push_back(key + " is not recorded there, " + value + " here");
    else if (*saved != value)
      differences.push_back(key + " is " + *saved + " there, " + value +
                            " here");
  }
  for (const auto &[key, value] : index.meta)
    if (key.compare(0, 7, "config.") == 0 && !compared.count(key))
      differences.push_back(key + " is " + value + " there, unknown here");
  if (differences.empty())
    return true;
  const std::string *model = index.findMeta("model");
  error = where + ": not a checkpoint of this training run: ";
  for (size_t i = 0; i < differences.size(); ++i)
    error += (i ? "; " : "") + differences[i];
  if (model && !differences.empty() &&
      differences.front().compare(0, 10, "model-hash") == 0)
    error += " (saved from another model than this program's; it was " +
             *model + ")";
  error += ". Resuming needs the same model and training configuration; to "
           "start from its values instead, pass --weights " +
           dir;
  return false;
}

} // namespace sharc::rt
