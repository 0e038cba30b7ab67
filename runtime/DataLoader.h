//===- DataLoader.h - Per-rank shares of the training data -----*- C++ -*-===//
//
// Loads the named .npy inputs of a training program and yields, for each
// global step, the rows of the global batch that belong to this rank.
//
// Sharding rule: the global batch of step k is B = micro * GAS * N rows taken
// in order along axis 0 starting at row k * B, wrapping around modulo the
// file's rows; rank r gets the contiguous block [r * micro * GAS,
// (r + 1) * micro * GAS) of it, and its micro-batch g is rows
// [g * micro, (g + 1) * micro) of that block.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_DATALOADER_H
#define SHARC_RUNTIME_DATALOADER_H

#include "runtime/Npy.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sharc::rt {

/// One data input the program expects.
struct DataInput {
  /// The `sharc.input` name.
  std::string name;
  /// The .npy file given with `--input name=path`.
  std::string path;
  /// Expected element type and shape of one row (dims after axis 0).
  NpyType type = NpyType::f32;
  std::vector<int64_t> rowShape;
};

/// How the global batch is split.
struct BatchLayout {
  int64_t microBatch = 1;
  int64_t gradientAccumulation = 1;
  int rank = 0;
  int numRanks = 1;
};

class DataLoader {
public:
  /// Reads every input and checks it: the file must parse, hold the expected
  /// type and row shape, and all inputs must have the same (non-zero) number
  /// of rows.  Returns null and sets `error` (naming the files) on failure.
  static std::unique_ptr<DataLoader> load(const std::vector<DataInput> &inputs,
                                          const BatchLayout &layout,
                                          std::string &error);

  /// Rows of every input file.
  int64_t rows() const { return numRows; }
  /// Rows of one rank's share: micro * GAS.
  int64_t shareRows() const {
    return layout.microBatch * layout.gradientAccumulation;
  }
  /// Bytes of one rank's share of input `input`.
  size_t shareBytes(size_t input) const;

  /// The file row that is row `localRow` of this rank's share at `step`.
  int64_t fileRow(int64_t step, int64_t localRow) const;

  /// Copies this rank's share of input `input` at global step `step`
  /// (shareBytes(input) bytes) to `dest`.
  void copyShare(size_t input, int64_t step, void *dest) const;

  const std::vector<DataInput> &inputs() const { return specs; }

private:
  DataLoader(std::vector<DataInput> specs, std::vector<NpyArray> arrays,
             const BatchLayout &layout, int64_t numRows);

  std::vector<DataInput> specs;
  std::vector<NpyArray> arrays;
  BatchLayout layout;
  int64_t numRows;
};

} // namespace sharc::rt

#endif // SHARC_RUNTIME_DATALOADER_H
