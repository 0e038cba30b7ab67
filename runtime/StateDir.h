//===- StateDir.h - Saved training state directories ------------*- C++ -*-===//
//
// A saved state (`--save-state DIR` of the training binaries, `sharc eval
// --dump-state DIR`) is a directory of .npy files, one per parameter and
// piece of optimizer state, in the file names the compiler assigns
// (rt::npyFileNames).  A buffer that ZeRO partitions (BufferSpec::sliced) is
// saved by each rank as its own slice, without gathering it anywhere:
//
//   DIR/sharc-state.txt              the index (below), written last
//   DIR/FILE.npy                     a whole tensor (rank 0 writes these)
//   DIR/rank-R-of-N/FILE.npy         rank R's slice of a partitioned tensor:
//                                    ceil(n / N) elements, 1-D, zero-padded
//   DIR/rank-R-of-N/sharc-save-id.txt  the save's id, written last by rank R
//
// The index is plain text, one entry per line:
//
//   sharc-state 2
//   save-id 0123456789abcdef
//   ranks N
//   meta KEY VALUE                     (what the state is, below)
//   whole FILE.npy CHECKSUM
//   sliced FILE.npy DTYPE D0 D1 ...    (the whole tensor's type and shape)
//
// and a slice folder's save-id file holds the save's id, then one line
// `FILE.npy CHECKSUM` per slice.  CHECKSUM is checksum64 of the array's data
// bytes (16 hex digits): a reader refuses a file whose data does not match,
// naming it.  The `meta` lines describe the state for checkpoints
// (Checkpoint.h): the step, the model's hash, the training configuration,
// the layout it was saved in.  Version 1 (no meta lines and no checksums)
// is still read.
//
// A directory without an index (the `weights` folder `sharc compile` writes,
// a state saved by an earlier sharc) holds whole tensors only.  A reader
// reassembles a partitioned tensor from its N slices (any world size can
// resume from any other), or reads just its own slice at the same world size
// and layout; a slice folder whose save id is not the index's (a save that
// ended between the ranks' renames) is refused.  `sharc consolidate DIR -o
// OUT` writes the whole tensors of a state (what DeepSpeed's zero_to_fp32
// does).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_STATEDIR_H
#define SHARC_RUNTIME_STATEDIR_H

#include "runtime/Npy.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sharc::rt {

/// The index of a saved state.
struct StateIndex {
  /// False when the directory has no index (whole tensors only).
  bool present = false;
  uint64_t saveId = 0;
  /// The world size the partitioned tensors were saved at.
  int ranks = 1;
  /// The files of whole tensors.
  std::vector<std::string> whole;
  /// The partitioned tensors: file, and the whole tensor's type and shape.
  struct Sliced {
    NpyType type = NpyType::f32;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Sliced> sliced;
  /// checksum64 of the data of the whole files (and, in a slice folder's
  /// file, of its slices); a file without one is not checked.
  std::map<std::string, uint64_t> checksums;
  /// What the state is (Checkpoint.h): KEY (no white space) and VALUE (the
  /// rest of the line), in order.
  std::vector<std::pair<std::string, std::string>> meta;

  /// The value of meta KEY, or null.
  const std::string *findMeta(const std::string &key) const;
};

/// A checksum of `size` bytes: four lanes of 64-bit words, each folded with
/// a multiply and a rotation, then mixed (the structure of xxHash64; not
/// cryptographic: it finds damaged files, not forged ones).
uint64_t checksum64(const void *data, size_t size);

/// "DIR/NAME" ("DIR" + NAME when DIR ends in '/').
std::string joinPath(const std::string &dir, const std::string &name);

/// `value` as 16 lower-case hex digits (save ids, checksums).
std::string hex16(uint64_t value);

/// "DIR/sharc-state.txt".
std::string stateIndexPath(const std::string &dir);

/// "DIR/rank-R-of-N".
std::string sliceDirectory(const std::string &dir, int rank, int ranks);

/// "DIR/rank-R-of-N/sharc-save-id.txt".
std::string saveIdPath(const std::string &dir, int rank, int ranks);

/// The text of `index` (its `present` is ignored).
std::string stateIndexText(const StateIndex &index);

/// The text of a slice folder's save-id file: the id, then its slices'
/// checksums.
std::string saveIdText(uint64_t saveId,
                       const std::map<std::string, uint64_t> &checksums = {});

/// Writes `array` as DIR/FILE in `files` and records the checksum of its
/// data in `checksums` under FILE.
bool writeStateArray(AtomicFileSet &files, const std::string &dir,
                     const std::string &file, const NpyArray &array,
                     std::map<std::string, uint64_t> &checksums,
                     std::string &error);

/// Adds `path` to `files` with `text` in it (an index, a save id).
bool writeText(AtomicFileSet &files, const std::string &path,
               const std::string &text, std::string &error);

/// Reads DIR's index into `index` (`present` false when there is none).  On
/// a malformed index returns false and sets `error` naming the file and line.
bool readStateIndex(const std::string &dir, StateIndex &index,
                    std::string &error);

/// Elements of each slice of a tensor of `elements` over `ranks` ranks.
inline int64_t sliceElements(int64_t elements, int ranks) {
  return (elements + ranks - 1) / ranks;
}

/// Reads rank `rank`'s slice of the partitioned tensor `file` (listed as
/// sliced in `index`) from its slice folder: a 1-D array of
/// sliceElements(n, index.ranks) elements of the index's type, from a folder
/// of this save.  On failure returns false with `error` naming the file.
bool readStateSlice(const std::string &dir, const StateIndex &index,
                    const std::string &file, int rank, NpyArray &out,
                    std::string &error);

/// Reads the whole tensor `file` of the state in DIR: the file itself, or,
/// when `index` lists it as sliced, its slices in rank order without the
/// padding, in the whole shape.  A file the index does not list is an error
/// (when there is an index).
bool readStateTensor(const std::string &dir, const StateIndex &index,
                     const std::string &file, NpyArray &out,
                     std::string &error);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_STATEDIR_H
