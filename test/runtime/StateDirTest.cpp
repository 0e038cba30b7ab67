//===- StateDirTest.cpp - Saved state indexes and slice reassembly --------===//
//
// runtime/StateDir.h: the index round-trips through its text; malformed
// indexes (a wrong header, a name that leaves the folder, a file listed
// twice, a bad type or rank count) are refused naming the file and line; a
// partitioned tensor is reassembled from its slices without the padding
// and each slice is checked (its save id, its shape).  Every test works in
// a fresh folder of its own.
//
//===----------------------------------------------------------------------===//

#include "runtime/StateDir.h"
#include "runtime/AtomicFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

using namespace sharc::rt;
namespace fs = std::filesystem;

namespace {

class StateDirTest : public testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "sharc-statedir-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override { fs::remove_all(dir); }

  void writeFile(const std::string &path, const std::string &text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }

  /// Saves a 5-element f32 tensor 0..4 as slices over 2 ranks (3 + 3, the
  /// last element padding) with the index.
  StateIndex saveSliced() {
    StateIndex index;
    index.present = true;
    index.saveId = 0x1234;
    index.ranks = 2;
    index.sliced["w.npy"] = {NpyType::f32, {5}};
    AtomicFileSet files;
    std::string error;
    for (int rank = 0; rank < 2; ++rank) {
      NpyArray slice;
      slice.type = NpyType::f32;
      slice.shape = {3};
      float values[3];
      for (int k = 0; k < 3; ++k)
        values[k] = rank * 3 + k < 5 ? float(rank * 3 + k) : 0.0f;
      slice.data.assign(reinterpret_cast<char *>(values),
                        reinterpret_cast<char *>(values) + sizeof(values));
      EXPECT_TRUE(files.createDirectories(sliceDirectory(dir, rank, 2), error));
      EXPECT_TRUE(writeNpy(files, sliceDirectory(dir, rank, 2) + "/w.npy",
                           slice, error))
          << error;
      EXPECT_TRUE(writeText(files, saveIdPath(dir, rank, 2),
                            saveIdText(index.saveId), error));
    }
    EXPECT_TRUE(
        writeText(files, stateIndexPath(dir), stateIndexText(index), error));
    EXPECT_TRUE(files.commit(error)) << error;
    return index;
  }

  std::string dir;
};

TEST_F(StateDirTest, NoIndexMeansWholeTensors) {
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(dir, index, error)) << error;
  EXPECT_FALSE(index.present);
}

TEST_F(StateDirTest, IndexRoundTrips) {
  StateIndex index;
  index.saveId = 0xfedcba9876543210ull;
  index.ranks = 4;
  index.whole = {"step.npy", "b.npy"};
  index.sliced["w.npy"] = {NpyType::f32, {3, 7}};
  writeFile(stateIndexPath(dir), stateIndexText(index));
  StateIndex read;
  std::string error;
  ASSERT_TRUE(readStateIndex(dir, read, error)) << error;
  EXPECT_TRUE(read.present);
  EXPECT_EQ(read.saveId, index.saveId);
  EXPECT_EQ(read.ranks, 4);
  EXPECT_EQ(read.whole, index.whole);
  ASSERT_EQ(read.sliced.count("w.npy"), 1u);
  EXPECT_EQ(read.sliced["w.npy"].shape, (std::vector<int64_t>{3, 7}));
}

TEST_F(StateDirTest, MalformedIndexesAreRefusedWithTheLine) {
  const char *header = "sharc-state 1\nsave-id 0000000000000001\nranks 2\n";
  struct Case {
    std::string text, message;
  } cases[] = {
      {"sharc-state 3\n", ":1: expected 'sharc-state 1' or 'sharc-state 2'"},
      {"sharc-state 2\nsave-id 0000000000000001\nranks 2\n"
       "whole w.npy 12345\n",
       ":4: a checksum is 16 hex digits, got '12345'"},
      {"sharc-state 2\nsave-id 0000000000000001\nranks 2\nmeta a 1\n"
       "meta a 2\n",
       ":5: meta 'a' is given twice"},
      {std::string(header) + "meta step 1\n", ":4: unknown entry 'meta'"},
      {std::string(header) + "whole ../escape.npy\n", ":4: '../escape.npy' is "
                                                      "not a file name"},
      {std::string(header) + "whole a/b.npy\n", "is not a file name"},
      {std::string(header) + "whole w.npy\nsliced w.npy f32 4\n",
       ":5: 'w.npy' is listed twice"},
      {std::string(header) + "sliced w.npy c64 4\n", "unknown element type"},
      {std::string(header) + "sliced w.npy f32 -4\n", "a negative dimension"},
      {std::string(header) + "sliced w.npy f32 1000000000000 1000000000000\n",
       "a shape of more than 2^48 elements"},
      {std::string(header) + "sliced w.npy f32 4 x\n",
       "a dimension that is not an integer"},
      {"sharc-state 1\nsave-id 1\nranks 2\n", ":2: a save id is 16 hex"},
      {"sharc-state 1\nsave-id 0000000000000001\nranks 0\n",
       ":3: ranks must be an integer"},
      {"sharc-state 1\nranks 2\n", "no save-id or ranks line"},
      {std::string(header) + "whole w.npy extra\n", "unexpected 'extra'"},
      {std::string(header) + "partial w.npy\n", "unknown entry 'partial'"},
      {"", ":0: empty"},
  };
  for (const Case &c : cases) {
    writeFile(stateIndexPath(dir), c.text);
    StateIndex index;
    std::string error;
    EXPECT_FALSE(readStateIndex(dir, index, error)) << c.text;
    EXPECT_NE(error.find(stateIndexPath(dir)), std::string::npos) << error;
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.text << " -> " << error;
  }
}

TEST_F(StateDirTest, SlicesReassembleWithoutThePadding) {
  saveSliced();
  StateIndex read;
  std::string error;
  ASSERT_TRUE(readStateIndex(dir, read, error)) << error;
  NpyArray whole;
  ASSERT_TRUE(readStateTensor(dir, read, "w.npy", whole, error)) << error;
  EXPECT_EQ(whole.shape, (std::vector<int64_t>{5}));
  ASSERT_EQ(whole.data.size(), 5 * sizeof(float));
  const float *values = reinterpret_cast<const float *>(whole.data.data());
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(values[k], float(k));
  NpyArray slice;
  ASSERT_TRUE(readStateSlice(dir, read, "w.npy", 1, slice, error)) << error;
  EXPECT_EQ(slice.shape, (std::vector<int64_t>{3}));
  // A file the index does not list.
  EXPECT_FALSE(readStateTensor(dir, read, "v.npy", whole, error));
  EXPECT_NE(error.find("has no 'v.npy'"), std::string::npos) << error;
}

TEST_F(StateDirTest, ATornSaveIsRefused) {
  saveSliced();
  writeFile(saveIdPath(dir, 1, 2), "00000000000000ff\n");
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(dir, index, error)) << error;
  NpyArray whole;
  EXPECT_FALSE(readStateTensor(dir, index, "w.npy", whole, error));
  EXPECT_NE(error.find(saveIdPath(dir, 1, 2)), std::string::npos) << error;
  EXPECT_NE(error.find("belongs to another save"), std::string::npos) << error;
}

TEST_F(StateDirTest, ASliceOfTheWrongShapeIsRefused) {
  saveSliced();
  // The index says 5 elements over 2 ranks; claim 8 (slices of 4).
  std::string text = stateIndexText([] {
    StateIndex index;
    index.saveId = 0x1234;
    index.ranks = 2;
    index.sliced["w.npy"] = {NpyType::f32, {8}};
    return index;
  }());
  writeFile(stateIndexPath(dir), text);
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(dir, index, error)) << error;
  NpyArray whole;
  EXPECT_FALSE(readStateTensor(dir, index, "w.npy", whole, error));
  EXPECT_NE(error.find("is a 1-D f32 array of 4 elements"), std::string::npos)
      << error;
}

} // namespace
