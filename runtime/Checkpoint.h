//===- Checkpoint.h - Periodic checkpoints and resuming ---------*- C++ -*-===//
//
// A checkpoint is a saved state (StateDir.h) in a folder of its own,
// `SAVE_DIR/step-NNNNNNNN` (the number of steps applied, 8 digits or more),
// whose index carries `meta` lines saying what the state is: the step, the
// sharc version, the model and its hash, the target, the world size, ZeRO
// stage, micro-batch and gradient accumulation it was saved with, and the
// training configuration (`config.NAME VALUE`, every option that changes
// what the steps compute).
//
// A checkpoint is written into a temporary folder next to its place
// (`SAVE_DIR/.step-NNNNNNNN.ID.partial`), every file flushed, and only when
// every rank has written all of its files is the folder renamed into place
// (a checkpoint of the same step that sharc wrote is replaced; anything else
// there is refused).  A crash or a full disk during a save leaves the
// earlier checkpoints as they were.  The oldest checkpoints beyond
// `--keep-last` are removed: only the files their index lists (no symbolic
// link is followed) and the folders then empty.
//
// `--resume DIR` continues from DIR when DIR is a checkpoint, else from the
// checkpoint of DIR with the most steps; its model hash and configuration
// must be the program's (checkResumable).  World size, ZeRO stage, offload,
// micro-batch and gradient accumulation may differ: the state's layout
// (StateDir.h) reads at any of them.
//
// POSIX and the C++17 standard library only: the training binaries link it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_CHECKPOINT_H
#define SHARC_RUNTIME_CHECKPOINT_H

#include "runtime/StateDir.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sharc::rt {

/// "step-00000200": the folder name of the checkpoint after `step` steps.
std::string checkpointName(int64_t step);

/// The step of a checkpoint folder name ("step-" and digits), or -1.
int64_t checkpointStep(const std::string &name);

/// "DIR/.step-00000200.ID.partial": where a checkpoint is written before it
/// is renamed into place.
std::string partialCheckpointPath(const std::string &saveDir, int64_t step,
                                  uint64_t saveId);

/// One checkpoint found in a folder.
struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

/// The checkpoints in `dir`, by step: every real directory (not a symbolic
/// link) named `step-N` whose index reads and records step N.  A `dir` that
/// does not exist holds none.  False with `error` when `dir` cannot be read.
bool listCheckpoints(const std::string &dir,
                     std::vector<CheckpointEntry> &checkpoints,
                     std::string &error);

/// The state `--resume DIR` reads: DIR itself when it has an index, else
/// the `step-N` folder of DIR with the largest N.  False with `error` naming
/// DIR when there is none.
bool findResumePoint(const std::string &dir, std::string &path,
                     std::string &error);

/// Renames the complete state in `partial` to `target` and syncs their
/// folder.  A checkpoint that sharc wrote at `target` is replaced (and
/// removed); anything else there is refused with `error`, and `partial` is
/// left for the caller to remove.  `warning` is set when the replaced
/// checkpoint could not be removed completely.
bool publishCheckpoint(const std::string &partial, const std::string &target,
                       std::string &warning, std::string &error);

/// Removes the state folder `dir` that sharc wrote: it is first renamed to
/// a hidden name (so that it is no longer a checkpoint), then the files its
/// index lists, its slice folders' save-id files, the slice folders, the
/// index and the folder are removed, each by name in its folder (no
/// symbolic link is followed).  Anything else in it is left, with the
/// folder, and reported in `error`.  A `dir` that is a symbolic link or has
/// no index is refused.
bool removeStateDirectory(const std::string &dir, std::string &error);

/// Removes the oldest checkpoints of `saveDir` so that `keep` remain
/// (removeStateDirectory).  The paths removed are appended to `removed`;
/// what could not be removed is reported in `warnings`.
void pruneCheckpoints(const std::string &saveDir, int64_t keep,
                      std::vector<std::string> &removed,
                      std::vector<std::string> &warnings);

/// The meta lines of a checkpoint or state: `step`, then `expected` (what
/// checkResumable compares), then the layout (`layout`, recorded only).
using MetaLines = std::vector<std::pair<std::string, std::string>>;

/// The `config.NAME VALUE` lines of `configText` ("NAME VALUE" lines, as
/// ProgramInfo::trainingConfig holds them) after `model-hash HASH`: what a
/// resumed run must have equal.
MetaLines resumeIdentity(const std::string &modelHash,
                         const std::string &configText);

/// What a saved state is, for its meta lines.
struct StateDescription {
  int64_t step = 0;
  std::string sharcVersion, model, modelHash, trainingConfig, target;
  int64_t worldSize = 1, zeroStage = 0, microBatch = 1,
          gradientAccumulation = 1;
};

/// The meta lines of `state`: `step`, `sharc-version`, `model`, then
/// resumeIdentity, then the layout (`target`, `world-size`, `zero-stage`,
/// `micro-batch`, `gradient-accumulation`); an empty text is written "-".
MetaLines stateMeta(const StateDescription &state);

/// Publishes the complete checkpoint in `partial` as `target`
/// (publishCheckpoint; on failure `partial` is removed and `error` set),
/// then removes the oldest checkpoints of `target`'s folder beyond
/// `keepLast` (0: none).  The paths removed go to `removed`, what could not
/// be removed to `warnings`.
bool commitCheckpoint(const std::string &partial, const std::string &target,
                      int64_t keepLast, std::vector<std::string> &removed,
                      std::vector<std::string> &warnings, std::string &error);

/// Checks that the state in `dir` (its index `index`) was saved by a run of
/// the same model and training configuration, `expected`
/// (resumeIdentity).  Otherwise `error` names the index and every
/// difference.
bool checkResumable(const std::string &dir, const StateIndex &index,
                    const MetaLines &expected, std::string &error);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_CHECKPOINT_H
