//===- CheckpointTest.cpp - Checkpoint folders, pruning and resuming ------===//
//
// runtime/Checkpoint.h and the checksums and meta lines of StateDir.h: a
// checkpoint is found by its step, published by rename (replacing only a
// checkpoint sharc wrote), pruned without touching what sharc did not write
// (files the index does not list, symbolic links, folders without an
// index), and a resume compares the model hash and configuration in both
// directions.  A damaged file is found by its checksum.  Every test works in
// a fresh folder of its own.
//
//===----------------------------------------------------------------------===//

#include "runtime/Checkpoint.h"
#include "runtime/AtomicFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

using namespace sharc::rt;
namespace fs = std::filesystem;

namespace {

class CheckpointTest : public testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "sharc-checkpoint-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override { fs::remove_all(dir); }

  static NpyArray floats(std::initializer_list<float> values) {
    NpyArray array;
    array.type = NpyType::f32;
    array.shape = {int64_t(values.size())};
    array.data.assign(reinterpret_cast<const char *>(values.begin()),
                      reinterpret_cast<const char *>(values.end()));
    return array;
  }

  /// Writes a state with one whole tensor `w.npy` and one tensor `m.npy`
  /// sliced over 2 ranks into `path`, its index with `meta`.
  void writeState(const std::string &path, const MetaLines &meta) {
    StateIndex index;
    index.saveId = 0x77;
    index.ranks = 2;
    index.meta = meta;
    index.whole = {"w.npy"};
    index.sliced["m.npy"] = {NpyType::f32, {3}};
    AtomicFileSet files;
    std::string error;
    ASSERT_TRUE(files.createDirectories(path, error)) << error;
    ASSERT_TRUE(writeStateArray(files, path, "w.npy", floats({1, 2, 3}),
                                index.checksums, error))
        << error;
    for (int rank = 0; rank < 2; ++rank) {
      std::map<std::string, uint64_t> sliceChecksums;
      std::string slices = sliceDirectory(path, rank, 2);
      ASSERT_TRUE(files.createDirectories(slices, error)) << error;
      ASSERT_TRUE(writeStateArray(files, slices, "m.npy",
                                  rank ? floats({3, 0}) : floats({1, 2}),
                                  sliceChecksums, error))
          << error;
      ASSERT_TRUE(writeText(files, saveIdPath(path, rank, 2),
                            saveIdText(index.saveId, sliceChecksums), error));
    }
    ASSERT_TRUE(
        writeText(files, stateIndexPath(path), stateIndexText(index), error));
    ASSERT_TRUE(files.commit(error)) << error;
  }

  std::string checkpoint(int64_t step) {
    std::string path = dir + "/" + checkpointName(step);
    writeState(path, {{"step", std::to_string(step)}, {"model-hash", "abc"}});
    return path;
  }

  static void flipByte(const std::string &path, std::streamoff from_end) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-from_end, std::ios::end);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(-from_end, std::ios::end);
    byte ^= 0x10;
    file.write(&byte, 1);
  }

  std::string dir;
};

TEST_F(CheckpointTest, NamesCarryTheStep) {
  EXPECT_EQ(checkpointName(200), "step-00000200");
  EXPECT_EQ(checkpointStep("step-00000200"), 200);
  EXPECT_EQ(checkpointStep("step-123456789012"), 123456789012);
  EXPECT_EQ(checkpointStep("step-"), -1);
  EXPECT_EQ(checkpointStep("step-12a"), -1);
  EXPECT_EQ(checkpointStep(".step-00000200.0000000000000001.partial"), -1);
}

TEST_F(CheckpointTest, ChecksumsSeeEveryByte) {
  // Every length around the 32-byte blocks and 8-byte words, and a change
  // of any one bit anywhere changes the checksum.
  std::mt19937 random(5);
  for (size_t size : {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100}) {
    std::vector<unsigned char> data(size);
    for (auto &byte : data)
      byte = static_cast<unsigned char>(random());
    uint64_t base = checksum64(data.data(), size);
    for (size_t i = 0; i < size; ++i)
      for (int bit = 0; bit < 8; ++bit) {
        data[i] ^= static_cast<unsigned char>(1 << bit);
        EXPECT_NE(checksum64(data.data(), size), base) << size << " " << i;
        data[i] ^= static_cast<unsigned char>(1 << bit);
      }
    // Appending a zero byte is a different input.
    data.push_back(0);
    EXPECT_NE(checksum64(data.data(), size + 1), base) << size;
  }
}

TEST_F(CheckpointTest, MetaAndChecksumsRoundTrip) {
  std::string path = checkpoint(4);
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(path, index, error)) << error;
  ASSERT_NE(index.findMeta("step"), nullptr);
  EXPECT_EQ(*index.findMeta("step"), "4");
  EXPECT_EQ(index.checksums.count("w.npy"), 1u);
  NpyArray whole;
  ASSERT_TRUE(readStateTensor(path, index, "m.npy", whole, error)) << error;
  EXPECT_EQ(whole.shape, (std::vector<int64_t>{3}));
}

TEST_F(CheckpointTest, DamagedDataIsFoundByItsChecksum) {
  std::string path = checkpoint(4);
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(path, index, error)) << error;
  NpyArray array;
  flipByte(path + "/w.npy", 2);
  EXPECT_FALSE(readStateTensor(path, index, "w.npy", array, error));
  EXPECT_NE(error.find(path + "/w.npy: the data does not match its checksum"),
            std::string::npos)
      << error;
  std::string slice = sliceDirectory(path, 1, 2) + "/m.npy";
  flipByte(slice, 1);
  EXPECT_FALSE(readStateTensor(path, index, "m.npy", array, error));
  EXPECT_NE(error.find(slice + ": the data does not match"), std::string::npos)
      << error;
}

TEST_F(CheckpointTest, ListAndResumeTakeTheNewest) {
  checkpoint(2);
  checkpoint(10);
  checkpoint(4);
  // Not checkpoints: a folder without an index, a symbolic link, a file, a
  // partial save.
  fs::create_directories(dir + "/step-00000099");
  fs::create_directory_symlink(dir + "/step-00000010", dir + "/step-00000200");
  std::ofstream(dir + "/step-00000300") << "not a folder";
  fs::create_directories(dir + "/.step-00000400.00000000000000ff.partial");
  std::vector<CheckpointEntry> found;
  std::string error;
  ASSERT_TRUE(listCheckpoints(dir, found, error)) << error;
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].step, 2);
  EXPECT_EQ(found[2].step, 10);
  // --resume takes the newest real folder, even one it must then refuse
  // (step-00000099 has no index), never an older one silently.
  std::string path;
  ASSERT_TRUE(findResumePoint(dir, path, error)) << error;
  EXPECT_EQ(path, dir + "/step-00000099");
  fs::remove(dir + "/step-00000099");
  ASSERT_TRUE(findResumePoint(dir, path, error)) << error;
  EXPECT_EQ(path, dir + "/step-00000010");
  // A checkpoint folder itself.
  ASSERT_TRUE(findResumePoint(dir + "/step-00000004", path, error));
  EXPECT_EQ(path, dir + "/step-00000004");
  EXPECT_FALSE(findResumePoint(dir + "/missing", path, error));
  EXPECT_NE(error.find("--resume " + dir + "/missing"), std::string::npos);
  fs::create_directories(dir + "/empty");
  EXPECT_FALSE(findResumePoint(dir + "/empty", path, error));
  EXPECT_NE(error.find("no checkpoint there"), std::string::npos) << error;
}

TEST_F(CheckpointTest, PruningRemovesOnlyWhatSharcWrote) {
  checkpoint(2);
  std::string linked = checkpoint(4);
  checkpoint(6);
  checkpoint(8);
  checkpoint(10);
  // The user's file inside the oldest checkpoint, and a symbolic link in
  // place of a slice folder, to a folder outside with a file of the name a
  // slice has.
  std::ofstream(dir + "/step-00000002/notes.txt") << "mine";
  std::string outside = dir + "/outside";
  fs::create_directories(outside);
  std::ofstream(outside + "/m.npy") << "not sharc's";
  fs::remove_all(sliceDirectory(linked, 0, 2));
  fs::create_directory_symlink(outside, sliceDirectory(linked, 0, 2));
  std::vector<std::string> removed, warnings;
  pruneCheckpoints(dir, 2, removed, warnings);
  EXPECT_EQ(removed, (std::vector<std::string>{dir + "/step-00000006"}));
  ASSERT_EQ(warnings.size(), 2u);
  for (const std::string &warning : warnings)
    EXPECT_NE(warning.find("holds files that its index does not list"),
              std::string::npos)
        << warning;
  // The user's file and the link stay (in the hidden folders the two
  // checkpoints became), the link's target is untouched, the newest two
  // remain.
  int notes = 0, links = 0;
  for (const auto &entry : fs::directory_iterator(dir)) {
    notes += fs::exists(entry.path() / "notes.txt");
    links += fs::is_symlink(sliceDirectory(entry.path().string(), 0, 2));
  }
  EXPECT_EQ(notes, 1);
  EXPECT_EQ(links, 1);
  EXPECT_TRUE(fs::exists(outside + "/m.npy"));
  std::vector<CheckpointEntry> found;
  std::string error;
  ASSERT_TRUE(listCheckpoints(dir, found, error));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].step, 8);
  EXPECT_EQ(found[1].step, 10);
  // Not a state: refused.
  EXPECT_FALSE(removeStateDirectory(outside, error));
  EXPECT_NE(error.find("not a state sharc wrote"), std::string::npos) << error;
}

TEST_F(CheckpointTest, PublishingReplacesOnlyACheckpoint) {
  std::string target = checkpoint(4);
  std::string partial = partialCheckpointPath(dir, 4, 1);
  writeState(partial, {{"step", "4"}, {"model-hash", "new"}});
  std::string warning, error;
  ASSERT_TRUE(publishCheckpoint(partial, target, warning, error)) << error;
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_FALSE(fs::exists(partial));
  StateIndex index;
  ASSERT_TRUE(readStateIndex(target, index, error));
  EXPECT_EQ(*index.findMeta("model-hash"), "new");
  // Only the new checkpoint is left: the old one was removed.
  int entries = 0;
  for (const auto &entry : fs::directory_iterator(dir))
    entries += entry.is_directory();
  EXPECT_EQ(entries, 1);
  // A folder of the user's at the target is refused and left.
  std::string user = dir + "/" + checkpointName(6);
  fs::create_directories(user);
  std::ofstream(user + "/data.bin") << "mine";
  partial = partialCheckpointPath(dir, 6, 2);
  writeState(partial, {{"step", "6"}});
  EXPECT_FALSE(publishCheckpoint(partial, user, warning, error));
  EXPECT_NE(error.find("is not a checkpoint sharc wrote"), std::string::npos)
      << error;
  EXPECT_TRUE(fs::exists(user + "/data.bin"));
  EXPECT_TRUE(fs::exists(partial));
}

TEST_F(CheckpointTest, ResumeComparesModelAndConfiguration) {
  MetaLines identity = resumeIdentity("abc", "lr 0.001\noptimizer adamw\n");
  ASSERT_EQ(identity.size(), 3u);
  EXPECT_EQ(identity[1],
            (std::pair<std::string, std::string>{"config.lr", "0.001"}));
  std::string path = dir + "/state";
  MetaLines saved = identity;
  saved.insert(saved.begin(), {"step", "3"});
  writeState(path, saved);
  StateIndex index;
  std::string error;
  ASSERT_TRUE(readStateIndex(path, index, error)) << error;
  EXPECT_TRUE(checkResumable(path, index, identity, error)) << error;
  // Another learning rate, another model, a key only one side has.
  EXPECT_FALSE(checkResumable(
      path, index, resumeIdentity("abc", "lr 0.002\noptimizer adamw\n"),
      error));
  EXPECT_NE(error.find("config.lr is 0.001 there, 0.002 here"),
            std::string::npos)
      << error;
  EXPECT_FALSE(checkResumable(
      path, index, resumeIdentity("xyz", "lr 0.001\noptimizer adamw\n"),
      error));
  EXPECT_NE(error.find("model-hash is abc there, xyz here"), std::string::npos)
      << error;
  EXPECT_FALSE(
      checkResumable(path, index, resumeIdentity("abc", "lr 0.001\n"), error));
  EXPECT_NE(error.find("config.optimizer is adamw there, unknown here"),
            std::string::npos)
      << error;
  EXPECT_FALSE(checkResumable(
      path, index, resumeIdentity("abc", "lr 0.001\noptimizer adamw\nclip 1\n"),
      error));
  EXPECT_NE(error.find("config.clip is not recorded there, 1 here"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(stateIndexPath(path)), std::string::npos) << error;
  // A state without meta lines (weights, an older sharc's) is not resumed.
  std::string plain = dir + "/plain";
  writeState(plain, {});
  ASSERT_TRUE(readStateIndex(plain, index, error));
  EXPECT_FALSE(checkResumable(plain, index, identity, error));
  EXPECT_NE(error.find("pass --weights " + plain), std::string::npos) << error;
}

} // namespace
