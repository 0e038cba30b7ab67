//===- Collectives.cpp - simulated ranks for the evaluator ----------------===//

#include "ir/Collectives.h"

using namespace sharc;

CollectiveGroup::CollectiveGroup(int size)
    : numRanks(size), contributions(size), keys(size) {}

CollectiveGroup::Outcome CollectiveGroup::exchange(int rank,
                                                   llvm::StringRef key,
                                                   const Tensor &value,
                                                   Combine combine) {
  std::unique_lock<std::mutex> lock(mutex);
  Outcome outcome;
  auto finishedError = [&] {
    aborted = true;
    released.notify_all();
    outcome.error = "rank " + std::to_string(finishedRank) +
                    " finished its function without joining this collective";
    return outcome;
  };
  if (aborted)
    return outcome;
  if (finishedRank >= 0)
    return finishedError();

  contributions[rank] = &value;
  keys[rank] = key.str();
  if (++arrived == numRanks) {
    arrived = 0;
    for (int r = 1; r < numRanks; ++r) {
      if (keys[r] == keys[0])
        continue;
      aborted = true;
      released.notify_all();
      outcome.error = "ranks disagree on the collective: rank 0 runs '" +
                      keys[0] + "', rank " + std::to_string(r) + " runs '" +
                      keys[r] + "'";
      return outcome;
    }
    results = combine(contributions);
    ++generation;
    released.notify_all();
    outcome.ok = true;
    outcome.result = std::move(results[rank]);
    return outcome;
  }

  uint64_t joined = generation;
  released.wait(lock, [&] {
    return generation != joined || aborted || finishedRank >= 0;
  });
  if (generation != joined) {
    outcome.ok = true;
    outcome.result = std::move(results[rank]);
    return outcome;
  }
  if (aborted)
    return outcome;
  return finishedError();
}

void CollectiveGroup::abort() {
  std::lock_guard<std::mutex> lock(mutex);
  aborted = true;
  released.notify_all();
}

void CollectiveGroup::finish(int rank) {
  std::lock_guard<std::mutex> lock(mutex);
  if (finishedRank < 0)
    finishedRank = rank;
  released.notify_all();
}
