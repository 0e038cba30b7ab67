//===- AtomicFileTest.cpp - Atomic files, file sets and .npy parsing ------===//
//
// AtomicFile and AtomicFileSet (runtime/AtomicFile.h): targets are replaced
// whole or not at all, temporary files never outlive a failure, nothing that
// the writer did not create is opened, followed or removed.  Write failures
// come from the SHARC_TEST_WRITE_LIMIT hook (setWriteLimitForTesting); the
// end-to-end tests fill a real tmpfs.  Also parseNpy on shapes with a zero
// and shapes whose sizes overflow.
//
//===----------------------------------------------------------------------===//

#include "runtime/AtomicFile.h"
#include "runtime/Npy.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace sharc::rt;
namespace fs = std::filesystem;

namespace {

class AtomicFileTest : public testing::Test {
protected:
  /// A fresh directory of this test's own (mkdtemp), removed at the end.
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "sharc-atomic-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    setWriteLimitForTesting(-1);
    fs::remove_all(dir); // removes links, never what they point to
  }

  std::string path(const std::string &name) const {
    return (dir / name).string();
  }

  static void writeText(const std::string &file, const std::string &text) {
    std::ofstream(file, std::ios::binary) << text;
  }

  static std::string readText(const std::string &file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  /// Every name in the directory, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    for (const fs::directory_entry &entry : fs::directory_iterator(dir))
      result.push_back(entry.path().filename().string());
    std::sort(result.begin(), result.end());
    return result;
  }

  /// The temporary name AtomicFile tries `attempt`-th for `name`.
  std::string temporaryName(const std::string &name, int attempt = 0) const {
    std::string file = ".";
    file.append(name).append(".").append(std::to_string(getpid()));
    return path(file.append(".").append(std::to_string(attempt)) + ".tmp");
  }

  static bool writeString(AtomicFile &file, const std::string &text,
                          std::string &error) {
    return file.write(text.data(), text.size(), error);
  }

  fs::path dir;
};

TEST_F(AtomicFileTest, ReplacesTheTarget) {
  writeText(path("a.txt"), "old contents");
  AtomicFile file;
  std::string error;
  ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
  EXPECT_EQ(fs::path(file.temporary()).parent_path(), dir);
  ASSERT_TRUE(writeString(file, "new", error)) << error;
  ASSERT_TRUE(writeString(file, " contents", error)) << error;
  // Until the commit, the target is the old file.
  EXPECT_EQ(readText(path("a.txt")), "old contents");
  ASSERT_TRUE(file.commit(error)) << error;
  EXPECT_EQ(readText(path("a.txt")), "new contents");
  EXPECT_EQ(names(), std::vector<std::string>{"a.txt"});
}

TEST_F(AtomicFileTest, CreatesANewTarget) {
  AtomicFile file;
  std::string error;
  ASSERT_TRUE(file.create(path("new.txt"), error)) << error;
  ASSERT_TRUE(writeString(file, "x", error)) << error;
  ASSERT_TRUE(file.commit(error)) << error;
  EXPECT_EQ(readText(path("new.txt")), "x");
  EXPECT_EQ(names(), std::vector<std::string>{"new.txt"});
}

TEST_F(AtomicFileTest, FullDiskKeepsTheTargetAndRemovesTheTemporary) {
  writeText(path("a.txt"), "old contents");
  setWriteLimitForTesting(4095); // less than a block
  AtomicFile file;
  std::string error;
  ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
  EXPECT_FALSE(writeString(file, "new contents", error));
  EXPECT_EQ(error, path("a.txt") + ": No space left on device");
  file.discard();
  EXPECT_EQ(readText(path("a.txt")), "old contents");
  EXPECT_EQ(names(), std::vector<std::string>{"a.txt"});
}

TEST_F(AtomicFileTest, WriteLimitIsSpentInBlocks) {
  // Two 4 KiB blocks, as a tmpfs with two free pages: a file fills them up
  // to the byte, another file then finds none.
  setWriteLimitForTesting(8192);
  AtomicFile file, other;
  std::string error;
  ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
  ASSERT_TRUE(writeString(file, std::string(4000, 'a'), error)) << error;
  ASSERT_TRUE(writeString(file, std::string(200, 'b'), error)) << error;
  EXPECT_FALSE(writeString(file, std::string(4000, 'c'), error));
  EXPECT_EQ(error, path("a.txt") + ": No space left on device");
  EXPECT_EQ(fs::file_size(file.temporary()), 8192u);
  ASSERT_TRUE(other.create(path("b.txt"), error)) << error;
  EXPECT_FALSE(writeString(other, "x", error));
  EXPECT_EQ(fs::file_size(other.temporary()), 0u);
}

TEST_F(AtomicFileTest, UncommittedFileIsRemovedByTheDestructor) {
  writeText(path("a.txt"), "old");
  {
    AtomicFile file;
    std::string error;
    ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
    ASSERT_TRUE(writeString(file, "new", error)) << error;
    ASSERT_TRUE(file.finish(error)) << error;
    EXPECT_EQ(names().size(), 2u);
  }
  EXPECT_EQ(readText(path("a.txt")), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"a.txt"});
}

TEST_F(AtomicFileTest, SymlinkAtTheTemporaryNameIsNotFollowed) {
  writeText(path("victim.txt"), "keep me");
  fs::create_symlink(path("victim.txt"), temporaryName("a.txt"));
  // A dangling link as well: O_CREAT alone would create its target.
  fs::create_symlink(path("created-through-link.txt"), temporaryName("b.txt"));
  for (const char *name : {"a.txt", "b.txt"}) {
    AtomicFile file;
    std::string error;
    ASSERT_TRUE(file.create(path(name), error)) << error;
    EXPECT_EQ(file.temporary(), temporaryName(name, 1));
    ASSERT_TRUE(writeString(file, "new", error)) << error;
    ASSERT_TRUE(file.commit(error)) << error;
    EXPECT_EQ(readText(path(name)), "new");
  }
  EXPECT_EQ(readText(path("victim.txt")), "keep me");
  EXPECT_FALSE(fs::exists(path("created-through-link.txt")));
  EXPECT_TRUE(fs::is_symlink(temporaryName("a.txt")));
  EXPECT_TRUE(fs::is_symlink(temporaryName("b.txt")));
}

TEST_F(AtomicFileTest, DiscardLeavesWhatTookTheTemporaryName) {
  writeText(path("other.txt"), "not the writer's");
  AtomicFile file;
  std::string error;
  ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
  std::string temporary = file.temporary();
  // Something else takes the temporary name (here: a link to another file).
  ASSERT_EQ(unlink(temporary.c_str()), 0);
  fs::create_symlink(path("other.txt"), temporary);
  file.discard();
  EXPECT_TRUE(fs::is_symlink(temporary));
  EXPECT_EQ(readText(path("other.txt")), "not the writer's");
}

TEST_F(AtomicFileTest, SymlinkAtTheTargetIsReplacedNotFollowed) {
  writeText(path("victim.txt"), "keep me");
  fs::create_symlink(path("victim.txt"), path("a.txt"));
  AtomicFile file;
  std::string error;
  ASSERT_TRUE(file.create(path("a.txt"), error)) << error;
  ASSERT_TRUE(writeString(file, "new", error)) << error;
  ASSERT_TRUE(file.commit(error)) << error;
  EXPECT_FALSE(fs::is_symlink(path("a.txt")));
  EXPECT_EQ(readText(path("a.txt")), "new");
  EXPECT_EQ(readText(path("victim.txt")), "keep me");
}

TEST_F(AtomicFileTest, ErrorsNameTheTarget) {
  AtomicFile file;
  std::string error;
  EXPECT_FALSE(file.create(path("missing/a.txt"), error));
  EXPECT_EQ(error, path("missing/a.txt") + ": No such file or directory");
  fs::create_directory(path("a-directory"));
  ASSERT_TRUE(file.create(path("a-directory"), error)) << error;
  EXPECT_FALSE(file.commit(error));
  EXPECT_EQ(error, path("a-directory") + ": Is a directory");
  EXPECT_EQ(names(), std::vector<std::string>{"a-directory"});
  EXPECT_FALSE(file.create(dir.string() + "/", error));
  EXPECT_EQ(error, dir.string() + "/: not a file name");
}

TEST_F(AtomicFileTest, SetReplacesEveryFileOnlyWhenAllAreWritten) {
  writeText(path("a.txt"), "old a");
  writeText(path("b.txt"), "old b");
  AtomicFileSet files;
  std::string error;
  AtomicFile *a = files.add(path("a.txt"), error);
  ASSERT_TRUE(a && writeString(*a, "new a", error)) << error;
  AtomicFile *b = files.add(path("b.txt"), error);
  ASSERT_TRUE(b && writeString(*b, "new b", error)) << error;
  AtomicFile *c = files.add(path("c.txt"), error);
  ASSERT_TRUE(c && writeString(*c, "new c", error)) << error;
  EXPECT_EQ(readText(path("a.txt")), "old a");
  EXPECT_FALSE(fs::exists(path("c.txt")));
  ASSERT_TRUE(files.commit(error)) << error;
  EXPECT_EQ(readText(path("a.txt")), "new a");
  EXPECT_EQ(readText(path("b.txt")), "new b");
  EXPECT_EQ(readText(path("c.txt")), "new c");
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "b.txt", "c.txt"}));
}

TEST_F(AtomicFileTest, SetFailingMidwayKeepsEveryPreviousFile) {
  writeText(path("a.txt"), "old a");
  writeText(path("b.txt"), "old b");
  // Room for the first file only (one 4 KiB block): the second write runs
  // out of space.
  setWriteLimitForTesting(4096);
  std::string error;
  {
    AtomicFileSet files;
    AtomicFile *a = files.add(path("a.txt"), error);
    ASSERT_TRUE(a && writeString(*a, "new a", error)) << error;
    AtomicFile *b = files.add(path("b.txt"), error);
    ASSERT_NE(b, nullptr) << error;
    EXPECT_FALSE(writeString(*b, "new b", error));
    EXPECT_EQ(error, path("b.txt") + ": No space left on device");
    EXPECT_EQ(names().size(), 4u);
  }
  EXPECT_EQ(readText(path("a.txt")), "old a");
  EXPECT_EQ(readText(path("b.txt")), "old b");
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "b.txt"}));
}

TEST_F(AtomicFileTest, SetFailingToCreateAFileKeepsEveryPreviousFile) {
  writeText(path("a.txt"), "old a");
  AtomicFileSet files;
  std::string error;
  AtomicFile *a = files.add(path("a.txt"), error);
  ASSERT_TRUE(a && writeString(*a, "new a", error)) << error;
  EXPECT_EQ(files.add(path("missing/b.txt"), error), nullptr);
  EXPECT_EQ(error, path("missing/b.txt") + ": No such file or directory");
  EXPECT_EQ(files.add(path("a.txt"), error), nullptr);
  EXPECT_EQ(error, path("a.txt") + ": two files of one set have this name");
  files.discard();
  EXPECT_EQ(readText(path("a.txt")), "old a");
  EXPECT_EQ(names(), std::vector<std::string>{"a.txt"});
}

TEST_F(AtomicFileTest, SetFailingToRenameRemovesTheRemainingTemporaries) {
  writeText(path("a.txt"), "old a");
  fs::create_directory(path("b.txt"));
  AtomicFileSet files;
  std::string error;
  for (const char *name : {"b.txt", "a.txt"}) {
    AtomicFile *file = files.add(path(name), error);
    ASSERT_TRUE(file && writeString(*file, "new", error)) << error;
  }
  EXPECT_FALSE(files.commit(error));
  EXPECT_EQ(error, path("b.txt") + ": Is a directory");
  EXPECT_EQ(readText(path("a.txt")), "old a");
  EXPECT_EQ(names(), (std::vector<std::string>{"a.txt", "b.txt"}));
}

TEST_F(AtomicFileTest, SetRemovesTheDirectoriesItCreated) {
  fs::create_directory(path("kept"));
  std::string error;
  {
    AtomicFileSet files;
    ASSERT_TRUE(files.createDirectories(path("kept/new/newer"), error))
        << error;
    AtomicFile *file = files.add(path("kept/new/newer/a.txt"), error);
    ASSERT_TRUE(file && writeString(*file, "a", error)) << error;
    // Something else puts a file into a directory the set made.
    fs::create_directory(path("kept/new/other"));
  }
  // "newer" was empty again and is removed; "new" holds what the set did not
  // write and stays, as does "kept", which existed.
  EXPECT_FALSE(fs::exists(path("kept/new/newer")));
  EXPECT_TRUE(fs::is_directory(path("kept/new/other")));

  AtomicFileSet files;
  ASSERT_TRUE(files.createDirectories(path("made/") + "/deeper/", error))
      << error;
  EXPECT_TRUE(fs::is_directory(path("made/deeper")));
  ASSERT_TRUE(files.commit(error)) << error;
  EXPECT_TRUE(fs::is_directory(path("made/deeper"))); // kept once committed

  writeText(path("a-file"), "x");
  EXPECT_FALSE(files.createDirectories(path("a-file/sub"), error));
  EXPECT_EQ(error, "cannot create directory '" + path("a-file/sub") +
                       "': Not a directory");
  EXPECT_FALSE(files.createDirectories(path("a-file"), error));
  EXPECT_EQ(error,
            "cannot create directory '" + path("a-file") + "': File exists");
}

TEST_F(AtomicFileTest, SetKeepsOneDescriptorOpen) {
  // More files than the process may have descriptors.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  AtomicFileSet files;
  std::string error;
  bool ok = true;
  for (int i = 0; ok && i < 100; ++i) {
    AtomicFile *file = files.add(path(std::to_string(i)), error);
    ok = file && writeString(*file, std::to_string(i), error);
  }
  ok = ok && files.commit(error);
  setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(ok) << error;
  EXPECT_EQ(names().size(), 100u);
  EXPECT_EQ(readText(path("99")), "99");
}

TEST_F(AtomicFileTest, WriteNpyKeepsThePreviousFileOnFailure) {
  NpyArray array;
  array.type = NpyType::f32;
  array.shape = {3};
  array.data.assign(12, '\1');
  std::string error;
  ASSERT_TRUE(writeNpy(path("w.npy"), array, error)) << error;
  std::string previous = readText(path("w.npy"));
  NpyArray parsed;
  ASSERT_TRUE(readNpy(path("w.npy"), parsed, error)) << error;
  EXPECT_EQ(parsed.data, array.data);

  array.data.assign(12, '\2');
  setWriteLimitForTesting(0);
  EXPECT_FALSE(writeNpy(path("w.npy"), array, error));
  EXPECT_EQ(error, path("w.npy") + ": No space left on device");
  EXPECT_EQ(readText(path("w.npy")), previous);
  EXPECT_EQ(names(), std::vector<std::string>{"w.npy"});
}

TEST_F(AtomicFileTest, WriteNpyZerosIsAnArrayOfZerosNotWritten) {
  std::string error;
  // 4 MiB of f32 zeros: the file holds them, the disk (where sparse files
  // exist, as on the test's tmp folder) far fewer blocks.
  std::vector<int64_t> shape = {1024, 1024};
  ASSERT_TRUE(writeNpyZeros(path("z.npy"), NpyType::f32, shape, error))
      << error;
  NpyArray parsed;
  ASSERT_TRUE(readNpy(path("z.npy"), parsed, error)) << error;
  EXPECT_EQ(parsed.type, NpyType::f32);
  EXPECT_EQ(parsed.shape, shape);
  ASSERT_EQ(parsed.data.size(), size_t(4) << 20);
  EXPECT_TRUE(std::all_of(parsed.data.begin(), parsed.data.end(),
                          [](char byte) { return byte == 0; }));
  struct stat status;
  ASSERT_EQ(::stat(path("z.npy").c_str(), &status), 0);
  EXPECT_GT(status.st_size, off_t(4) << 20);
  std::printf("writeNpyZeros: %lld bytes, %lld allocated\n",
              (long long)status.st_size, (long long)status.st_blocks * 512);
  // Nothing else is left behind, and the previous file is replaced whole.
  EXPECT_EQ(names(), std::vector<std::string>{"z.npy"});
  ASSERT_TRUE(writeNpyZeros(path("z.npy"), NpyType::i64, {3}, error)) << error;
  ASSERT_TRUE(readNpy(path("z.npy"), parsed, error)) << error;
  EXPECT_EQ(parsed.type, NpyType::i64);
  EXPECT_EQ(parsed.data, std::vector<char>(24, 0));
}

/// parseNpy of a version 1.0 file with header dict `dict` and `dataBytes`
/// zero bytes of data.
bool parseWith(const std::string &dict, size_t dataBytes, NpyArray &out,
               std::string &error) {
  std::string header = dict + "\n";
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += char(header.size() & 0xff);
  file += char(header.size() >> 8);
  file += header;
  file.append(dataBytes, '\0');
  return parseNpy("t.npy", file.data(), file.size(), out, error);
}

TEST(NpyParseTest, ShapesWithAZeroAreEmpty) {
  NpyArray array;
  std::string error;
  ASSERT_TRUE(parseWith("{'descr': '<f4', 'fortran_order': False, "
                        "'shape': (1000000, 0), }",
                        0, array, error))
      << error;
  EXPECT_EQ(array.numElements(), 0);
  EXPECT_FALSE(parseWith("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (0, 5), }",
                         4, array, error));
  EXPECT_EQ(error, "t.npy: not a valid .npy file: expected 0 data bytes for "
                   "<f4 shape (0, 5), found 4");
}

TEST(NpyParseTest, HugeShapesAreRejected) {
  NpyArray array;
  std::string error;
  // As NumPy: the sizes other than 0 must multiply to at most INT64_MAX.
  EXPECT_FALSE(parseWith("{'descr': '<f8', 'fortran_order': False, "
                         "'shape': (999999999999999, 999999999999999, 0), }",
                         0, array, error));
  EXPECT_EQ(error, "t.npy: not a valid .npy file: shape (999999999999999, "
                   "999999999999999, 0) has more elements than a 64-bit "
                   "integer holds");
  EXPECT_FALSE(parseWith("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (1000000000, 5), }",
                         16, array, error));
  EXPECT_EQ(error, "t.npy: not a valid .npy file: expected more data bytes "
                   "than the file has for <f4 shape (1000000000, 5), found 16");
}

} // namespace
