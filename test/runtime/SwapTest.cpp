//===- SwapTest.cpp - NVMe offload files (runtime/Swap.h) -----------------===//
//
// SwapStore: round trips under every combination of the aio settings, many
// tickets in flight waited for out of order, the folder and files it makes
// (and removes), what it refuses (bad paths and settings, a symbolic link
// where its folder would go), a file truncated under it, a full disk (the
// SHARC_TEST_WRITE_LIMIT hook), and the removal of its files by SIGTERM,
// SIGINT and SIGHUP.  Each rank of the MPI test binary works in a directory
// of its own; the signal and read-only mount cases run in a forked child that
// never calls MPI.  The removal on fatal() is tested through the training
// binary (test_train_main.py), since fatal() aborts the MPI job.
//
//===----------------------------------------------------------------------===//

#include "runtime/Swap.h"
#include "runtime/AtomicFile.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace sharc::rt;
namespace fs = std::filesystem;

namespace {

/// Aligned host memory for transfers.
struct Aligned {
  explicit Aligned(int64_t bytes)
      : size(size_t(std::max<int64_t>(bytes, kSwapAlignment))),
        data(static_cast<unsigned char *>(
            std::aligned_alloc(size_t(kSwapAlignment), size))) {}
  ~Aligned() { std::free(data); }
  Aligned(const Aligned &) = delete;
  Aligned &operator=(const Aligned &) = delete;
  Aligned(Aligned &&other) noexcept : size(other.size), data(other.data) {
    other.data = nullptr;
  }
  size_t size;
  unsigned char *data;
};

SwapSettings settings(int64_t blockSize = 4096, int64_t queueDepth = 8,
                      bool singleSubmit = false, bool overlapEvents = true) {
  return {"", blockSize, queueDepth, singleSubmit, overlapEvents, 0, 0};
}

int mpiRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::string folderBase(int rank, int ranks) {
  return "sharc-swap-rank-" + std::to_string(rank) + "-of-" +
         std::to_string(ranks) + "." + std::to_string(::getpid());
}

class SwapStoreTest : public testing::Test {
protected:
  /// A fresh directory of this test's own on this rank (mkdtemp).
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() /
         ("sharc-swap-test-" + std::to_string(mpiRank()) + "-XXXXXX"))
            .string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    setWriteLimitForTesting(-1);
    ::chmod(dir.c_str(), 0700);
    fs::remove_all(dir); // removes links, never what they point to
  }

  /// Every name in `folder`, sorted.
  static std::vector<std::string> names(const fs::path &folder) {
    std::vector<std::string> result;
    for (const fs::directory_entry &entry : fs::directory_iterator(folder))
      result.push_back(entry.path().filename().string());
    std::sort(result.begin(), result.end());
    return result;
  }

  std::unique_ptr<SwapStore> create(const SwapSettings &swap,
                                    std::vector<SwapFile> files,
                                    std::string &error, int rank = 0,
                                    int ranks = 1) {
    return SwapStore::create(swap, dir.string(), rank, ranks, std::move(files),
                             error);
  }

  fs::path dir;
};

/// Fills `memory` with bytes of seed `seed`.
void fill(Aligned &memory, unsigned seed) {
  std::mt19937 random(seed);
  for (size_t i = 0; i < memory.size; ++i)
    memory.data[i] = static_cast<unsigned char>(random());
}

TEST_F(SwapStoreTest, RoundTripsUnderEverySetting) {
  const std::vector<int64_t> sizes = {0,        4096,      8192,
                                      3 * 4096, 25 * 4096, 70 * 4096 + 4096};
  int combination = 0;
  for (int64_t blockSize : {4096, 12288, 65536, 1 << 20})
    for (int64_t queueDepth : {1, 3, 8, 64})
      for (bool singleSubmit : {false, true})
        for (bool overlapEvents : {false, true}) {
          SCOPED_TRACE("block size " + std::to_string(blockSize) +
                       ", queue depth " + std::to_string(queueDepth) +
                       (singleSubmit ? ", single submit" : "") +
                       (overlapEvents ? ", overlap events" : ""));
          ++combination;
          std::vector<SwapFile> files;
          for (size_t i = 0; i < sizes.size(); ++i)
            files.push_back({int(10 + i),
                             std::string("b") + std::to_string(i) + ".swp",
                             sizes[i]});
          std::string error;
          auto store = create(
              settings(blockSize, queueDepth, singleSubmit, overlapEvents),
              files, error);
          ASSERT_TRUE(store) << error;
          std::vector<Aligned> sources, dests;
          uint64_t total = 0;
          for (size_t i = 0; i < sizes.size(); ++i) {
            sources.emplace_back(sizes[i]);
            fill(sources.back(), unsigned(combination * 100 + i));
            dests.emplace_back(sizes[i]);
            std::memset(dests.back().data, 0xEE, dests.back().size);
            total += uint64_t(sizes[i]);
          }
          // All writes in flight, waited for last first.
          std::vector<uint64_t> tickets;
          for (size_t i = 0; i < sizes.size(); ++i)
            tickets.push_back(store->startWrite(int(10 + i), sources[i].data));
          for (auto it = tickets.rbegin(); it != tickets.rend(); ++it)
            store->wait(*it);
          EXPECT_EQ(store->bytesWritten(), total);
          EXPECT_EQ(store->bytesRead(), 0u);
          // All reads in flight, waited for in a shuffled order.
          tickets.clear();
          for (size_t i = 0; i < sizes.size(); ++i)
            tickets.push_back(store->startRead(int(10 + i), dests[i].data));
          std::shuffle(tickets.begin(), tickets.end(),
                       std::mt19937(unsigned(combination)));
          for (uint64_t ticket : tickets)
            store->wait(ticket);
          EXPECT_EQ(store->bytesRead(), total);
          for (size_t i = 0; i < sizes.size(); ++i)
            EXPECT_EQ(
                std::memcmp(sources[i].data, dests[i].data, size_t(sizes[i])),
                0)
                << "file " << i << " of " << sizes[i] << " bytes";
          // Waiting again, or for everything, returns at once.
          store->wait(tickets.front());
          store->waitAll();
          store->resetStats();
          EXPECT_EQ(store->bytesRead(), 0u);
          EXPECT_EQ(store->bytesWritten(), 0u);
          // The synchronous forms.
          std::memset(dests[4].data, 0, dests[4].size);
          ASSERT_TRUE(store->read(14, dests[4].data, error)) << error;
          EXPECT_EQ(
              std::memcmp(sources[4].data, dests[4].data, size_t(sizes[4])), 0);
          fill(sources[4], 7);
          ASSERT_TRUE(store->write(14, sources[4].data, error)) << error;
          ASSERT_TRUE(store->read(14, dests[4].data, error)) << error;
          EXPECT_EQ(
              std::memcmp(sources[4].data, dests[4].data, size_t(sizes[4])), 0);
          EXPECT_EQ(store->bytesRead(), uint64_t(2 * sizes[4]));
          EXPECT_EQ(store->bytesWritten(), uint64_t(sizes[4]));
        }
}

TEST_F(SwapStoreTest, ManyTicketsInFlightWaitedOutOfOrder) {
  constexpr int kFiles = 40;
  constexpr int64_t kBytes = 5 * 4096;
  std::vector<SwapFile> files;
  for (int i = 0; i < kFiles; ++i)
    files.push_back({i, std::string("f").append(std::to_string(i)), kBytes});
  std::string error;
  // Far more requests than the queue holds: most wait in the store's queue.
  auto store = create(settings(4096, 4, false, true), files, error);
  ASSERT_TRUE(store) << error;
  std::vector<Aligned> first, second, back;
  for (int i = 0; i < kFiles; ++i) {
    first.emplace_back(kBytes);
    fill(first.back(), unsigned(i));
    second.emplace_back(kBytes);
    fill(second.back(), unsigned(1000 + i));
    back.emplace_back(kBytes);
  }
  std::vector<uint64_t> tickets(kFiles);
  for (int i = 0; i < kFiles; ++i)
    tickets[i] = store->startWrite(i, first[i].data);
  std::vector<int> order(kFiles);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (int i : order)
    store->wait(tickets[i]);

  // Reads of the even files in flight with writes of the odd ones; each
  // file's transfer waited for before the next of the same file starts.
  for (int i = 0; i < kFiles; ++i)
    tickets[i] = i % 2 ? store->startWrite(i, second[i].data)
                       : store->startRead(i, back[i].data);
  std::shuffle(order.begin(), order.end(), std::mt19937(6));
  for (int k = 0; k < kFiles / 2; ++k)
    store->wait(tickets[order[k]]);
  store->waitAll();
  for (int i = 0; i < kFiles; i += 2)
    EXPECT_EQ(std::memcmp(back[i].data, first[i].data, kBytes), 0) << i;
  for (int i = 1; i < kFiles; i += 2) {
    ASSERT_TRUE(store->read(i, back[i].data, error)) << error;
    EXPECT_EQ(std::memcmp(back[i].data, second[i].data, kBytes), 0) << i;
  }
}

TEST_F(SwapStoreTest, TransfersGoOnWithoutWaiting) {
  // 64 requests through a queue of 2: the store's own thread completes them
  // while this one does not call the store.
  constexpr int64_t kBytes = 64 * 4096;
  std::string error;
  for (bool overlapEvents : {false, true}) {
    auto store = create(settings(4096, 2, false, overlapEvents),
                        {{0, "a", kBytes}}, error);
    ASSERT_TRUE(store) << error;
    Aligned data(kBytes), back(kBytes);
    fill(data, 11);
    uint64_t ticket = store->startWrite(0, data.data);
    for (int i = 0; i < 10000 && store->bytesWritten() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(store->bytesWritten(), uint64_t(kBytes));
    store->wait(ticket);
    ticket = store->startRead(0, back.data);
    for (int i = 0; i < 10000 && store->bytesRead() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(store->bytesRead(), uint64_t(kBytes));
    store->wait(ticket);
    EXPECT_EQ(std::memcmp(back.data, data.data, kBytes), 0);
  }
}

TEST_F(SwapStoreTest, MakesItsFolderAndFilesAndRemovesThem) {
  std::string error;
  auto store =
      create(settings(),
             {{3, "m.swp", 3 * 4096}, {7, "v.swp", 4096}, {9, "empty.swp", 0}},
             error, /*rank=*/2, /*ranks=*/5);
  ASSERT_TRUE(store) << error;
  std::string folder = (dir / folderBase(2, 5)).string();
  EXPECT_EQ(store->folder(), folder);
  EXPECT_EQ(store->filePath(3), folder + "/m.swp");
  EXPECT_EQ(store->filePath(4), "");
  EXPECT_EQ(store->numFiles(), 3);
  EXPECT_EQ(store->totalBytes(), 4 * 4096);
  struct stat info;
  ASSERT_EQ(::lstat(folder.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(names(folder),
            (std::vector<std::string>{"empty.swp", "m.swp", "v.swp"}));
  for (auto [name, bytes] :
       {std::pair{"m.swp", 3 * 4096}, std::pair{"v.swp", 4096},
        std::pair{"empty.swp", 0}}) {
    ASSERT_EQ(::lstat((folder + "/" + name).c_str(), &info), 0) << name;
    EXPECT_TRUE(S_ISREG(info.st_mode));
    EXPECT_EQ(info.st_size, bytes) << name;
    // Reserved up front.
    EXPECT_GE(int64_t(info.st_blocks) * 512, bytes) << name;
  }
  // The files are open with O_DIRECT where the file system takes it.
  bool found = false;
  for (const fs::directory_entry &entry :
       fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(entry.path(), ec).string() != folder + "/m.swp")
      continue;
    std::ifstream fdinfo("/proc/self/fdinfo/" +
                         entry.path().filename().string());
    std::string key;
    unsigned long flags = 0;
    while (fdinfo >> key)
      if (key == "flags:") {
        fdinfo >> std::oct >> flags;
        break;
      }
    found = true;
    EXPECT_EQ((flags & O_DIRECT) != 0, store->directIo());
    EXPECT_EQ(flags & O_ACCMODE, unsigned(O_RDWR));
  }
  EXPECT_TRUE(found);
  // A zero-byte file moves nothing.
  Aligned memory(4096);
  store->wait(store->startRead(9, memory.data));
  EXPECT_EQ(store->bytesRead(), 0u);

  store.reset();
  EXPECT_TRUE(names(dir).empty());
}

TEST_F(SwapStoreTest, NeverUsesAFolderThatExists) {
  std::string error;
  auto first = create(settings(), {{0, "a.swp", 4096}}, error);
  ASSERT_TRUE(first) << error;
  auto second = create(settings(), {{0, "a.swp", 4096}}, error);
  ASSERT_TRUE(second) << error;
  EXPECT_EQ(first->folder(), (dir / folderBase(0, 1)).string());
  EXPECT_EQ(second->folder(), (dir / (folderBase(0, 1) + ".1")).string());
  Aligned one(4096), two(4096), back(4096);
  fill(one, 1);
  fill(two, 2);
  ASSERT_TRUE(first->write(0, one.data, error)) << error;
  ASSERT_TRUE(second->write(0, two.data, error)) << error;
  ASSERT_TRUE(first->read(0, back.data, error)) << error;
  EXPECT_EQ(std::memcmp(back.data, one.data, 4096), 0);
  first.reset();
  EXPECT_EQ(names(dir), std::vector<std::string>{folderBase(0, 1) + ".1"});
  second.reset();
  EXPECT_TRUE(names(dir).empty());
}

TEST_F(SwapStoreTest, SymlinkWhereTheFolderWouldGoIsNotFollowed) {
  fs::path elsewhere = dir / "elsewhere";
  fs::create_directory(elsewhere);
  fs::create_directory_symlink(elsewhere, dir / folderBase(0, 1));
  // A dangling link is not followed either.
  fs::create_symlink(dir / "nowhere", dir / (folderBase(0, 1) + ".1"));
  std::string error;
  auto store = create(settings(), {{0, "a.swp", 8192}}, error);
  ASSERT_TRUE(store) << error;
  EXPECT_EQ(store->folder(), (dir / (folderBase(0, 1) + ".2")).string());
  EXPECT_TRUE(names(elsewhere).empty());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "nowhere")));
  store.reset();
  EXPECT_EQ(names(dir), (std::vector<std::string>{"elsewhere", folderBase(0, 1),
                                                  folderBase(0, 1) + ".1"}));
  EXPECT_TRUE(fs::is_symlink(dir / folderBase(0, 1)));
  EXPECT_TRUE(names(elsewhere).empty());
}

TEST_F(SwapStoreTest, RemovesOnlyWhatItCreated) {
  std::string error;
  auto store =
      create(settings(), {{0, "a.swp", 4096}, {1, "b.swp", 4096}}, error);
  ASSERT_TRUE(store) << error;
  fs::path folder = store->folder();
  // b.swp replaced by another file, and a file of someone else's added: both
  // stay, and so does the folder.
  fs::remove(folder / "b.swp");
  std::ofstream(folder / "b.swp") << "not sharc's";
  std::ofstream(folder / "other") << "someone else's";
  store.reset();
  EXPECT_EQ(names(folder), (std::vector<std::string>{"b.swp", "other"}));
}

TEST_F(SwapStoreTest, RefusesAPathThatIsNotAnExistingDirectory) {
  std::string error;
  auto missing = SwapStore::create(settings(), (dir / "missing").string(), 0, 1,
                                   {{0, "a.swp", 4096}}, error);
  EXPECT_FALSE(missing);
  EXPECT_EQ(error, (dir / "missing").string() +
                       ": No such file or directory (the offload folder must "
                       "be an existing directory)");
  std::ofstream(dir / "file") << "x";
  auto file = SwapStore::create(settings(), (dir / "file").string(), 0, 1,
                                {{0, "a.swp", 4096}}, error);
  EXPECT_FALSE(file);
  EXPECT_EQ(error, (dir / "file").string() +
                       ": Not a directory (the offload folder must be an "
                       "existing directory)");
  auto under = SwapStore::create(settings(), (dir / "file" / "sub").string(), 0,
                                 1, {{0, "a.swp", 4096}}, error);
  EXPECT_FALSE(under);
  EXPECT_EQ(error, (dir / "file" / "sub").string() +
                       ": Not a directory (the offload folder must be an "
                       "existing directory)");
  EXPECT_EQ(names(dir), std::vector<std::string>{"file"});
}

/// Runs `body` in a forked child (which never calls MPI and ends with
/// _exit); returns what it wrote to its pipe and its wait status.
std::pair<std::string, int> inChild(const std::function<std::string()> &body) {
  int fds[2];
  if (::pipe(fds) != 0)
    return {"pipe failed", -1};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string text = body();
    ssize_t ignored = ::write(fds[1], text.data(), text.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char chunk[512];
  for (ssize_t n; (n = ::read(fds[0], chunk, sizeof(chunk))) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    text.append(chunk, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {text, status};
}

TEST_F(SwapStoreTest, RefusesAFolderItCannotWriteIn) {
  fs::path readOnly = dir / "read-only";
  fs::create_directory(readOnly);
  std::string path = readOnly.string();
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(path.c_str(), 0500), 0);
    std::string error;
    auto store =
        SwapStore::create(settings(), path, 0, 1, {{0, "a.swp", 4096}}, error);
    EXPECT_FALSE(store);
    EXPECT_EQ(error, path + ": cannot create this rank's folder in it: "
                            "Permission denied");
    return;
  }
  // Root writes through any mode: a read-only bind mount of the folder, in a
  // mount namespace of a child's own (gone with the child).
  auto [text, status] = inChild([&]() -> std::string {
    if (::unshare(CLONE_NEWNS) != 0)
      return std::string("skip: unshare(CLONE_NEWNS): ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(path.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, path.c_str(), nullptr,
                MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      return std::string("skip: mount: ") + std::strerror(errno);
    std::string error;
    auto store =
        SwapStore::create(settings(), path, 0, 1, {{0, "a.swp", 4096}}, error);
    return store ? "created " + store->folder() : "error " + error;
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  if (text.rfind("skip: ", 0) == 0)
    GTEST_SKIP() << "cannot make a read-only mount as root here (" << text
                 << ")";
  EXPECT_EQ(text, "error " + path +
                      ": cannot create this rank's folder in it: Read-only "
                      "file system");
  EXPECT_TRUE(names(readOnly).empty());
}

TEST_F(SwapStoreTest, RefusesBadSettingsAndFiles) {
  std::string error;
  std::string path = dir.string();
  auto refused = [&](const SwapSettings &swap, std::vector<SwapFile> files) {
    auto store = create(swap, std::move(files), error);
    return !store;
  };
  EXPECT_TRUE(refused(settings(1000), {{0, "a", 4096}}));
  EXPECT_EQ(error, path + ": the aio block size 1000 is not a positive "
                          "multiple of 4096 of at most 1073741824");
  EXPECT_TRUE(refused(settings(0), {{0, "a", 4096}}));
  EXPECT_TRUE(refused(settings(int64_t(2) << 30), {{0, "a", 4096}}));
  EXPECT_TRUE(refused(settings(4096, 0), {{0, "a", 4096}}));
  EXPECT_EQ(error, path + ": the aio queue depth 0 is not in [1, 32768]");
  EXPECT_TRUE(refused(settings(), {{0, "a/b", 4096}}));
  EXPECT_EQ(error, path + ": 'a/b' is not a file name");
  EXPECT_TRUE(refused(settings(), {{0, "..", 4096}}));
  EXPECT_TRUE(refused(settings(), {{0, "a", 4096}, {1, "a", 4096}}));
  EXPECT_EQ(error, path + ": two files are named 'a'");
  EXPECT_TRUE(refused(settings(), {{0, "a", 4096}, {0, "b", 4096}}));
  EXPECT_EQ(error, path + ": two files hold buffer 0");
  EXPECT_TRUE(refused(settings(), {{0, "a", 4000}}));
  EXPECT_EQ(error, path + ": file 'a' of 4000 bytes, not a multiple of 4096");
  EXPECT_TRUE(names(dir).empty());
}

TEST_F(SwapStoreTest, RefusesUnknownBuffersAndUnalignedMemory) {
  std::string error;
  auto store = create(settings(), {{5, "a.swp", 8192}}, error);
  ASSERT_TRUE(store) << error;
  Aligned memory(8192 + 4096);
  EXPECT_FALSE(store->read(6, memory.data, error));
  EXPECT_EQ(error, "NVMe offload: read of buffer 6, which has no file in " +
                       store->folder());
  EXPECT_FALSE(store->write(5, memory.data + 256, error));
  EXPECT_EQ(error, "NVMe offload: write of " + store->filePath(5) +
                       ": the memory is not aligned to 4096 bytes");
}

TEST_F(SwapStoreTest, DetectsAFileTruncatedUnderIt) {
  for (bool overlapEvents : {false, true}) {
    std::string error;
    auto store = create(settings(4096, 8, false, overlapEvents),
                        {{0, "t.swp", 3 * 4096}}, error);
    ASSERT_TRUE(store) << error;
    std::string path = store->filePath(0);
    Aligned data(3 * 4096), back(3 * 4096);
    fill(data, 3);
    ASSERT_TRUE(store->write(0, data.data, error)) << error;
    const std::string truncated =
        " (the file is shorter than the 12288 bytes sharc wrote: was it "
        "truncated under the run?)";
    ASSERT_EQ(::truncate(path.c_str(), 8192), 0);
    EXPECT_FALSE(store->read(0, back.data, error));
    EXPECT_EQ(error, "NVMe offload: " + path +
                         ": read 0 of 4096 bytes at offset 8192" + truncated);
    ASSERT_EQ(::truncate(path.c_str(), 10000), 0);
    EXPECT_FALSE(store->read(0, back.data, error));
    EXPECT_EQ(error, "NVMe offload: " + path +
                         ": read 1808 of 4096 bytes at offset 8192" +
                         truncated);
    EXPECT_EQ(store->bytesRead(), 0u);
    // Written again whole, the file reads back.
    ASSERT_TRUE(store->write(0, data.data, error)) << error;
    ASSERT_TRUE(store->read(0, back.data, error)) << error;
    EXPECT_EQ(std::memcmp(back.data, data.data, 3 * 4096), 0);
    store.reset();
    EXPECT_TRUE(names(dir).empty());
  }
}

TEST_F(SwapStoreTest, FullDiskWhileReservingRemovesEverything) {
  setWriteLimitForTesting(3 * 4096);
  std::string error;
  auto store = create(settings(),
                      {{0, "a.swp", 2 * 4096}, {1, "b.swp", 2 * 4096}}, error);
  EXPECT_FALSE(store);
  EXPECT_EQ(error, (dir / folderBase(0, 1) / "b.swp").string() +
                       ": cannot reserve 8192 bytes: No space left on "
                       "device");
  EXPECT_TRUE(names(dir).empty());
}

TEST_F(SwapStoreTest, RestoresThePreviousSignalHandlers) {
  struct sigaction custom, ignore, savedHup, savedInt, now;
  std::memset(&custom, 0, sizeof(custom));
  custom.sa_handler = [](int) {};
  sigemptyset(&custom.sa_mask);
  std::memset(&ignore, 0, sizeof(ignore));
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGHUP, &custom, &savedHup), 0);
  ASSERT_EQ(::sigaction(SIGINT, &ignore, &savedInt), 0);
  std::string error;
  auto store = create(settings(), {{0, "a.swp", 4096}}, error);
  EXPECT_TRUE(store) << error;
  ::sigaction(SIGHUP, nullptr, &now);
  EXPECT_NE(now.sa_handler, custom.sa_handler);
  // An ignored signal stays ignored.
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  // A second store changes nothing; the last one restores.
  auto second = create(settings(), {{0, "a.swp", 4096}}, error);
  EXPECT_TRUE(second) << error;
  store.reset();
  ::sigaction(SIGHUP, nullptr, &now);
  EXPECT_NE(now.sa_handler, custom.sa_handler);
  second.reset();
  ::sigaction(SIGHUP, nullptr, &now);
  EXPECT_EQ(now.sa_handler, custom.sa_handler);
  ::sigaction(SIGHUP, &savedHup, nullptr);
  ::sigaction(SIGINT, &savedInt, nullptr);
}

class SwapStoreSignalTest : public SwapStoreTest,
                            public testing::WithParamInterface<int> {};

TEST_P(SwapStoreSignalTest, SignalRemovesTheFilesAndEndsTheProcess) {
  int signal = GetParam();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    // The child: default dispositions (the launcher's may differ), a store
    // with two files in flight, then it waits for the signal.
    ::close(ready[0]);
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    for (int each : {SIGTERM, SIGINT, SIGHUP})
      ::sigaction(each, &action, nullptr);
    std::string error;
    auto store =
        SwapStore::create(settings(), dir.string(), 1, 2,
                          {{0, "a.swp", 4096}, {1, "b.swp", 8192}}, error);
    std::string text = store ? store->folder() : "error " + error;
    Aligned data(8192);
    if (store)
      store->startWrite(1, data.data);
    ssize_t ignored = ::write(ready[1], text.data(), text.size());
    (void)ignored;
    ::close(ready[1]);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  std::string folder;
  char chunk[512];
  for (ssize_t n; (n = ::read(ready[0], chunk, sizeof(chunk))) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    folder.append(chunk, size_t(n));
  }
  ::close(ready[0]);
  EXPECT_EQ(folder,
            (dir / ("sharc-swap-rank-1-of-2." + std::to_string(pid))).string());
  EXPECT_EQ(names(folder), (std::vector<std::string>{"a.swp", "b.swp"}));
  ::kill(pid, signal);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), signal);
  EXPECT_TRUE(names(dir).empty());
}

INSTANTIATE_TEST_SUITE_P(Signals, SwapStoreSignalTest,
                         testing::Values(SIGTERM, SIGINT, SIGHUP),
                         [](const testing::TestParamInfo<int> &info) {
                           return std::string(sigabbrev_np(info.param));
                         });

} // namespace
