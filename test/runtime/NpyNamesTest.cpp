//===- NpyNamesTest.cpp - file names of tensors and --input values ------===//
//
// rt::npyFileNames gives every tensor a file of its own whatever the names;
// rt::splitInputSpec finds the input a `--input NAME=FILE` value names even
// when NAME holds '='; rt::readNpy reads regular files only.
//
//===----------------------------------------------------------------------===//

#include "runtime/Npy.h"

#include <gtest/gtest.h>

#include <set>

#include <sys/stat.h>
#include <unistd.h>

using namespace sharc::rt;

namespace {

TEST(NpyFileNames, PlainNamesKeepTheirFile) {
  std::vector<std::string> files =
      npyFileNames({"fc.weight", "fc.weight.exp_avg", "step", "a-b_c.9"});
  EXPECT_EQ(files, (std::vector<std::string>{"fc.weight.npy",
                                             "fc.weight.exp_avg.npy",
                                             "step.npy", "a-b_c.9.npy"}));
}

TEST(NpyFileNames, UnsafeCharactersAndLeadingDots) {
  std::vector<std::string> files =
      npyFileNames({"x/../y", ".hidden", "", "\xd1\x85"});
  EXPECT_EQ(files[0], "x_.._y.npy");
  EXPECT_EQ(files[1], "_.hidden.npy");
  EXPECT_EQ(files[2], "_.npy");
  EXPECT_EQ(files[3], "__.npy");
}

TEST(NpyFileNames, EveryNameGetsItsOwnFile) {
  // Names that sanitize alike, an initializer called "step" before the step
  // counter, a name equal to another's suffixed form, repeated names.
  std::vector<std::string> names = {"y/a", "y?a", "y_a",  "step", "step",
                                    "a_",  "a/",  "a?",   "y_a~", "_",
                                    "",    "/",   "step", "y/a"};
  std::vector<std::string> files = npyFileNames(names);
  ASSERT_EQ(files.size(), names.size());
  std::set<std::string> distinct(files.begin(), files.end());
  EXPECT_EQ(distinct.size(), files.size());
  EXPECT_EQ(files[0], "y_a.npy");
  EXPECT_EQ(files[3], "step.npy");
  for (const std::string &file : files) {
    EXPECT_EQ(file.find('/'), std::string::npos) << file;
    EXPECT_NE(file[0], '.') << file;
    EXPECT_EQ(file.substr(file.size() - 4), ".npy") << file;
  }
  // The same list always gives the same files.
  EXPECT_EQ(npyFileNames(names), files);
}

TEST(NpyFileNames, LongNamesFitAFileSystem) {
  std::string a(300, 'a'), b = std::string(299, 'a') + "b";
  std::vector<std::string> files = npyFileNames({a, b});
  EXPECT_NE(files[0], files[1]);
  for (const std::string &file : files)
    EXPECT_LE(file.size(), 255u) << file;
}

TEST(SplitInputSpec, NamesMayHoldEquals) {
  std::string name, file, error;
  ASSERT_TRUE(splitInputSpec("x=data.npy", {"x", "y"}, name, file, error));
  EXPECT_EQ(name, "x");
  EXPECT_EQ(file, "data.npy");
  ASSERT_TRUE(splitInputSpec("x=y=data.npy", {"x=y"}, name, file, error));
  EXPECT_EQ(name, "x=y");
  EXPECT_EQ(file, "data.npy");
  // A file name with '=' after a plain name.
  ASSERT_TRUE(splitInputSpec("x=a=b.npy", {"x"}, name, file, error));
  EXPECT_EQ(name, "x");
  EXPECT_EQ(file, "a=b.npy");
  // An unknown name splits at the first '=' (the caller names it).
  ASSERT_TRUE(splitInputSpec("z=a=b.npy", {"x"}, name, file, error));
  EXPECT_EQ(name, "z");
  EXPECT_EQ(file, "a=b.npy");
}

TEST(SplitInputSpec, MalformedAndAmbiguous) {
  std::string name, file, error;
  for (const char *bad : {"x", "=f.npy", "x=", ""}) {
    EXPECT_FALSE(splitInputSpec(bad, {"x"}, name, file, error)) << bad;
    EXPECT_NE(error.find("expected NAME=FILE.npy"), std::string::npos)
        << error;
  }
  EXPECT_FALSE(splitInputSpec("x=y=f.npy", {"x", "x=y"}, name, file, error));
  EXPECT_NE(error.find("ambiguous"), std::string::npos) << error;
}

} // namespace

namespace {

TEST(ReadNpy, OnlyRegularFiles) {
  char folder[] = "/tmp/sharc-npy-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  std::string fifo = std::string(folder) + "/pipe.npy";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  NpyArray array;
  std::string error;
  // A pipe nobody writes, a device that never ends, a folder.
  for (const std::string &path : {fifo, std::string("/dev/zero"),
                                  std::string(folder)}) {
    EXPECT_FALSE(readNpy(path, array, error)) << path;
    EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
  }
  EXPECT_FALSE(readNpy(std::string(folder) + "/missing.npy", array, error));
  EXPECT_NE(error.find("No such file or directory"), std::string::npos)
      << error;
  unlink(fifo.c_str());
  rmdir(folder);
}

} // namespace
