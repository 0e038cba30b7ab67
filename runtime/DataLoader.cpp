//===- DataLoader.cpp - Per-rank shares of the training data --------------===//

#include "runtime/DataLoader.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace sharc::rt {

namespace {

std::string shapeString(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::string describe(const DataInput &input) {
  return "input '" + input.name + "' (" + input.path + ")";
}

} // namespace

std::unique_ptr<DataLoader>
DataLoader::load(const std::vector<DataInput> &inputs,
                 const BatchLayout &layout, std::string &error) {
  if (layout.microBatch < 1 || layout.gradientAccumulation < 1 ||
      layout.numRanks < 1 || layout.rank < 0 ||
      layout.rank >= layout.numRanks) {
    error = "invalid batch layout: micro-batch " +
            std::to_string(layout.microBatch) + ", gradient accumulation " +
            std::to_string(layout.gradientAccumulation) + ", rank " +
            std::to_string(layout.rank) + " of " +
            std::to_string(layout.numRanks);
    return nullptr;
  }
  std::vector<NpyArray> arrays(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DataInput &input = inputs[i];
    NpyArray &array = arrays[i];
    if (!readNpy(input.path, array, error)) {
      error = "input '" + input.name + "': " + error;
      return nullptr;
    }
    std::vector<int64_t> rowShape;
    if (!array.shape.empty())
      rowShape.assign(array.shape.begin() + 1, array.shape.end());
    if (array.shape.empty() || array.type != input.type ||
        rowShape != input.rowShape) {
      std::string expected = "[rows";
      for (int64_t dim : input.rowShape)
        expected += ", " + std::to_string(dim);
      error = describe(input) + ": expected a " + npyTypeName(input.type) +
              " array of shape " + expected + "], got a " +
              npyTypeName(array.type) + " array of shape " +
              shapeString(array.shape);
      return nullptr;
    }
    if (array.shape[0] == 0) {
      error = describe(input) + " has no rows";
      return nullptr;
    }
    if (array.shape[0] != arrays[0].shape[0]) {
      error = "inputs have different numbers of rows: " + describe(inputs[0]) +
              " has " + std::to_string(arrays[0].shape[0]) + ", " +
              describe(input) + " has " + std::to_string(array.shape[0]);
      return nullptr;
    }
  }
  int64_t numRows = arrays.empty() ? 0 : arrays[0].shape[0];
  return std::unique_ptr<DataLoader>(
      new DataLoader(inputs, std::move(arrays), layout, numRows));
}

DataLoader::DataLoader(std::vector<DataInput> specs,
                       std::vector<NpyArray> arrays, const BatchLayout &layout,
                       int64_t numRows)
    : specs(std::move(specs)), arrays(std::move(arrays)), layout(layout),
      numRows(numRows) {}

size_t DataLoader::shareBytes(size_t input) const {
  const NpyArray &array = arrays[input];
  return size_t(shareRows()) * (array.data.size() / size_t(numRows));
}

int64_t DataLoader::fileRow(int64_t step, int64_t localRow) const {
  int64_t globalBatch = shareRows() * layout.numRanks;
  // Reduce each term modulo the rows first so large step counts don't
  // overflow.
  int64_t start = (step % numRows) * (globalBatch % numRows) % numRows;
  int64_t offset = (layout.rank * shareRows() + localRow) % numRows;
  return (start + offset) % numRows;
}

void DataLoader::copyShare(size_t input, int64_t step, void *dest) const {
  const NpyArray &array = arrays[input];
  size_t rowBytes = array.data.size() / size_t(numRows);
  char *out = static_cast<char *>(dest);
  // Copy maximal runs of consecutive file rows.
  int64_t local = 0;
  while (local < shareRows()) {
    int64_t row = fileRow(step, local);
    int64_t run = std::min(shareRows() - local, numRows - row);
    std::memcpy(out + size_t(local) * rowBytes,
                array.data.data() + size_t(row) * rowBytes,
                size_t(run) * rowBytes);
    local += run;
  }
}

} // namespace sharc::rt
