//===- Collectives.h - simulated ranks for the evaluator --------*- C++ -*-===//
//
// The rendezvous that the threads of `evaluateRanks` (one per simulated rank)
// use to run sharc's collectives with their real semantics.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_COLLECTIVES_H
#define SHARC_IR_COLLECTIVES_H

#include "ir/Tensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sharc {

/// A group of ranks that meet at every collective.  Each collective is a
/// barrier: every rank contributes a tensor and blocks until all have; the
/// last to arrive combines the contributions (in rank order, so results are
/// deterministic) and releases the others.  A failing rank aborts the group,
/// which releases every waiting rank with failure instead of leaving it hung.
class CollectiveGroup {
public:
  /// Computes one result per rank from the contributions of all ranks.
  using Combine = llvm::function_ref<std::vector<Tensor>(
      llvm::ArrayRef<const Tensor *> contributions)>;

  /// The outcome of `exchange` for one rank.
  struct Outcome {
    /// True when the collective completed and `result` is valid.
    bool ok = false;
    Tensor result;
    /// On failure: a message for this rank to report, or empty when the
    /// failure was caused (and reported) elsewhere.
    std::string error;
  };

  explicit CollectiveGroup(int size);

  int size() const { return numRanks; }

  /// Joins the current collective as `rank`, contributing `value`.  `key`
  /// identifies the collective (op and operand type): ranks that disagree
  /// fail.  `value` must stay alive until the call returns.
  Outcome exchange(int rank, llvm::StringRef key, const Tensor &value,
                   Combine combine);

  /// Fails the current and every later collective of all ranks.
  void abort();

  /// Records that `rank` finished its function: a collective it has not
  /// joined can no longer complete, so any rank waiting in one fails.
  void finish(int rank);

private:
  int numRanks;
  std::mutex mutex;
  std::condition_variable released;
  /// Ranks that joined the current collective.
  int arrived = 0;
  /// Counts completed collectives; waiting ranks watch it change.
  uint64_t generation = 0;
  bool aborted = false;
  /// A rank that returned from its function, or -1.
  int finishedRank = -1;
  std::vector<const Tensor *> contributions;
  std::vector<std::string> keys;
  /// Results of the last completed collective, taken by each rank.
  std::vector<Tensor> results;
};

} // namespace sharc

#endif // SHARC_IR_COLLECTIVES_H
