//===- DataLoaderTest.cpp - Per-rank data shares and input checks ---------===//

#include "runtime/DataLoader.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>

using namespace sharc::rt;

namespace {

/// A scratch directory private to this process, removed at the end.
class DataLoaderTest : public testing::Test {
protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("sharc-rt-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  /// Writes a `rows` x `cols` i64 array whose element (i, c) is i * 100 + c
  /// (cols 0: a 1-D array of i * 100).
  std::string writeRows(const std::string &name, int64_t rows, int64_t cols) {
    NpyArray array;
    array.type = NpyType::i64;
    array.shape = {rows};
    if (cols)
      array.shape.push_back(cols);
    int64_t width = cols ? cols : 1;
    std::vector<int64_t> values(rows * width);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < width; ++c)
        values[i * width + c] = i * 100 + c;
    array.data.resize(values.size() * 8);
    if (!values.empty())
      std::memcpy(array.data.data(), values.data(), array.data.size());
    std::string path = (dir / name).string();
    std::string error;
    EXPECT_TRUE(writeNpy(path, array, error)) << error;
    return path;
  }

  std::filesystem::path dir;
};

/// The first column of each row of `share` divided by 100: the file rows.
std::vector<int64_t> rowsOf(const std::vector<int64_t> &share, int64_t cols) {
  std::vector<int64_t> rows;
  for (size_t k = 0; k < share.size(); k += cols)
    rows.push_back(share[k] / 100);
  return rows;
}

} // namespace

TEST_F(DataLoaderTest, SharesFollowTheShardingRuleOnThisJob) {
  int rank = 0, numRanks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &numRanks);
  const int64_t rows = 37, micro = 2, gas = 3;
  std::vector<DataInput> inputs = {
      {"tokens", writeRows("tokens.npy", rows, 4), NpyType::i64, {4}},
      {"labels", writeRows("labels.npy", rows, 0), NpyType::i64, {}}};
  std::string error;
  auto loader = DataLoader::load(inputs, {micro, gas, rank, numRanks}, error);
  ASSERT_TRUE(loader) << error;
  EXPECT_EQ(loader->rows(), rows);
  EXPECT_EQ(loader->shareRows(), micro * gas);
  EXPECT_EQ(loader->shareBytes(0), size_t(micro * gas * 4 * 8));
  EXPECT_EQ(loader->shareBytes(1), size_t(micro * gas * 8));
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<int64_t> tokens(micro * gas * 4), labels(micro * gas);
    loader->copyShare(0, step, tokens.data());
    loader->copyShare(1, step, labels.data());
    for (int64_t l = 0; l < micro * gas; ++l) {
      int64_t expected =
          (step * micro * gas * numRanks + rank * micro * gas + l) % rows;
      ASSERT_EQ(loader->fileRow(step, l), expected);
      for (int64_t c = 0; c < 4; ++c)
        ASSERT_EQ(tokens[l * 4 + c], expected * 100 + c) << step << " " << l;
      ASSERT_EQ(labels[l], expected * 100);
    }
  }
}

TEST_F(DataLoaderTest, HandWorkedLayouts) {
  std::string path = writeRows("x.npy", 10, 2);
  std::vector<DataInput> inputs = {{"x", path, NpyType::i64, {2}}};
  std::string error;
  // 3 ranks, micro 2, GAS 1: global batch 6.  Step 1 starts at row 6; rank 2
  // gets rows 10, 11 of the stream = file rows 0, 1.
  auto loader = DataLoader::load(inputs, {2, 1, 2, 3}, error);
  ASSERT_TRUE(loader) << error;
  std::vector<int64_t> share(2 * 2);
  loader->copyShare(0, 1, share.data());
  EXPECT_EQ(rowsOf(share, 2), (std::vector<int64_t>{0, 1}));
  // Rank 1 at step 1: rows 8, 9.
  loader = DataLoader::load(inputs, {2, 1, 1, 3}, error);
  ASSERT_TRUE(loader) << error;
  loader->copyShare(0, 1, share.data());
  EXPECT_EQ(rowsOf(share, 2), (std::vector<int64_t>{8, 9}));
  // 2 ranks, micro 3, GAS 2: global batch 12 > 10 rows.  Step 0, rank 1:
  // stream rows 6..11 = file rows 6, 7, 8, 9, 0, 1.  Step 1, rank 0: stream
  // rows 12..17 = 2..7.
  loader = DataLoader::load(inputs, {3, 2, 1, 2}, error);
  ASSERT_TRUE(loader) << error;
  share.resize(6 * 2);
  loader->copyShare(0, 0, share.data());
  EXPECT_EQ(rowsOf(share, 2), (std::vector<int64_t>{6, 7, 8, 9, 0, 1}));
  loader = DataLoader::load(inputs, {3, 2, 0, 2}, error);
  ASSERT_TRUE(loader) << error;
  loader->copyShare(0, 1, share.data());
  EXPECT_EQ(rowsOf(share, 2), (std::vector<int64_t>{2, 3, 4, 5, 6, 7}));
  // A share longer than the file wraps more than once: 1 rank, micro 25.
  loader = DataLoader::load(inputs, {25, 1, 0, 1}, error);
  ASSERT_TRUE(loader) << error;
  share.resize(25 * 2);
  loader->copyShare(0, 1, share.data()); // stream rows 25..49
  std::vector<int64_t> expected;
  for (int64_t k = 25; k < 50; ++k)
    expected.push_back(k % 10);
  EXPECT_EQ(rowsOf(share, 2), expected);
  // Large step counts do not overflow.
  EXPECT_EQ(loader->fileRow(int64_t(1) << 60, 3),
            int64_t((((__int128(1) << 60) * 25) + 3) % 10));
}

TEST_F(DataLoaderTest, Errors) {
  std::string a = writeRows("a.npy", 10, 3);
  std::string b = writeRows("b.npy", 9, 3);
  std::string error;
  auto expectError = [&](const std::vector<DataInput> &inputs,
                         const BatchLayout &layout,
                         const std::vector<std::string> &parts) {
    error.clear();
    EXPECT_FALSE(DataLoader::load(inputs, layout, error));
    for (const std::string &part : parts)
      EXPECT_NE(error.find(part), std::string::npos)
          << "'" << part << "' not in: " << error;
  };
  expectError({{"a", a, NpyType::i64, {3}}, {"b", b, NpyType::i64, {3}}}, {},
              {"different numbers of rows", a, b, "has 10", "has 9"});
  std::string missing = (dir / "missing.npy").string();
  expectError({{"m", missing, NpyType::f32, {}}}, {}, {"'m'", missing});
  std::string garbage = (dir / "garbage.npy").string();
  {
    FILE *f = std::fopen(garbage.c_str(), "w");
    std::fputs("not a numpy file", f);
    std::fclose(f);
  }
  expectError({{"g", garbage, NpyType::f32, {}}}, {}, {"'g'", garbage});
  expectError({{"a", a, NpyType::f32, {3}}}, {},
              {a, "expected a f32 array of shape [rows, 3]",
               "got a i64 array of shape [10, 3]"});
  expectError({{"a", a, NpyType::i64, {4}}}, {},
              {"expected a i64 array of shape [rows, 4]"});
  expectError({{"a", a, NpyType::i64, {3}}}, {0, 1, 0, 1},
              {"invalid batch layout"});
  expectError({{"a", a, NpyType::i64, {3}}}, {1, 1, 2, 2},
              {"invalid batch layout", "rank 2 of 2"});
  std::string empty = writeRows("empty.npy", 0, 3);
  expectError({{"e", empty, NpyType::i64, {3}}}, {}, {empty, "no rows"});
}
