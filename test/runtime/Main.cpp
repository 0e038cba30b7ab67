//===- Main.cpp - gtest main for the multi-rank runtime tests -------------===//
//
// Runs every test on every rank of MPI_COMM_WORLD.  Rank 0 prints the usual
// gtest output; other ranks print only their failures, tagged with the rank.
// The exit code is non-zero if any rank failed.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

/// Prints each failed assertion of this rank to stderr, tagged with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank(rank) {}

  // Records the test's name here: gtest holds its lock while reporting a
  // result, so UnitTest::current_test_info() would deadlock there.
  void OnTestStart(const testing::TestInfo &test) override {
    testName = std::string(test.test_suite_name()) + "." + test.name();
  }

  void OnTestPartResult(const testing::TestPartResult &result) override {
    if (!result.failed())
      return;
    std::fprintf(stderr, "[rank %d] FAILED %s at %s:%d\n%s\n", rank,
                 testName.c_str(),
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
    std::fflush(stderr);
  }

private:
  int rank;
  std::string testName;
};

} // namespace

int main(int argc, char **argv) {
  int threadLevel = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &threadLevel);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  testing::TestEventListeners &listeners =
      testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> failedByRank(size);
  MPI_Allgather(&failed, 1, MPI_INT, failedByRank.data(), 1, MPI_INT,
                MPI_COMM_WORLD);
  int anyFailed = 0;
  for (int r = 0; r < size; ++r) {
    if (!failedByRank[r])
      continue;
    anyFailed = 1;
    if (rank == 0)
      std::fprintf(stderr, "sharc-runtime-tests: tests FAILED on rank %d\n", r);
  }
  MPI_Finalize();
  return anyFailed;
}
