//===- StateDir.cpp - Saved training state directories --------------------===//

#include "runtime/StateDir.h"
#include "runtime/AtomicFile.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/stat.h>

namespace sharc::rt {

namespace {

constexpr const char *kIndexName = "sharc-state.txt";
constexpr const char *kSaveIdName = "sharc-save-id.txt";

bool parseType(const std::string &name, NpyType &type) {
  for (NpyType candidate : {NpyType::f64, NpyType::f32, NpyType::f16,
                            NpyType::i64, NpyType::i32, NpyType::b1})
    if (name == npyTypeName(candidate)) {
      type = candidate;
      return true;
    }
  return false;
}

/// A file name of the index: a plain name (no '/', not "." or ".."), so an
/// index never points outside its directory.
bool plainName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

bool parseHex(const std::string &text, uint64_t &value) {
  if (text.size() != 16)
    return false;
  char *end = nullptr;
  value = std::strtoull(text.c_str(), &end, 16);
  return *end == '\0';
}

/// Checks `array`, read from `path`, against `checksums[file]` if there.
bool verifyChecksum(const std::map<std::string, uint64_t> &checksums,
                    const std::string &file, const std::string &path,
                    const std::string &listedIn, const NpyArray &array,
                    std::string &error) {
  auto it = checksums.find(file);
  if (it == checksums.end())
    return true;
  uint64_t actual = checksum64(array.data.data(), array.data.size());
  if (actual == it->second)
    return true;
  error = path + ": the data does not match its checksum in " + listedIn +
          " (" + hex16(actual) + ", expected " + hex16(it->second) +
          "): the file is damaged";
  return false;
}

/// The whole contents of `path` (false with `error` if it cannot be read).
bool readText(const std::string &path, std::string &text, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  text = contents.str();
  return true;
}

} // namespace

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty() || dir.back() == '/')
    return dir + name;
  return dir + "/" + name;
}

std::string hex16(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

uint64_t checksum64(const void *data, size_t size) {
  constexpr uint64_t k1 = 0x9E3779B185EBCA87ull, k2 = 0xC2B2AE3D27D4EB4Full,
                     k3 = 0x165667B19E3779F9ull, k4 = 0x85EBCA77C2B2AE63ull;
  auto rotate = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  auto fold = [&](uint64_t lane, uint64_t word) {
    return rotate(lane + word * k2, 31) * k1;
  };
  auto word = [](const unsigned char *p) {
    uint64_t w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  };
  const auto *bytes = static_cast<const unsigned char *>(data);
  size_t i = 0;
  uint64_t hash;
  if (size >= 32) {
    uint64_t lanes[4] = {k1 + k2, k2, 0, 0 - k1};
    for (; i + 32 <= size; i += 32)
      for (int l = 0; l < 4; ++l)
        lanes[l] = fold(lanes[l], word(bytes + i + 8 * l));
    hash = rotate(lanes[0], 1) + rotate(lanes[1], 7) + rotate(lanes[2], 12) +
           rotate(lanes[3], 18);
    for (uint64_t lane : lanes)
      hash = (hash ^ fold(0, lane)) * k1 + k4;
  } else {
    hash = k3;
  }
  hash += uint64_t(size);
  for (; i + 8 <= size; i += 8)
    hash = rotate(hash ^ fold(0, word(bytes + i)), 27) * k1 + k4;
  for (; i < size; ++i)
    hash = rotate(hash ^ (uint64_t(bytes[i]) * k3), 11) * k1;
  hash ^= hash >> 33;
  hash *= k2;
  hash ^= hash >> 29;
  hash *= k3;
  hash ^= hash >> 32;
  return hash;
}

const std::string *StateIndex::findMeta(const std::string &key) const {
  for (const auto &[name, value] : meta)
    if (name == key)
      return &value;
  return nullptr;
}

std::string stateIndexPath(const std::string &dir) {
  return joinPath(dir, kIndexName);
}

std::string sliceDirectory(const std::string &dir, int rank, int ranks) {
  return joinPath(dir, "rank-" + std::to_string(rank) + "-of-" +
                           std::to_string(ranks));
}

std::string saveIdPath(const std::string &dir, int rank, int ranks) {
  return joinPath(sliceDirectory(dir, rank, ranks), kSaveIdName);
}

std::string stateIndexText(const StateIndex &index) {
  std::string text = "sharc-state 2\nsave-id " + hex16(index.saveId) +
                     "\nranks " + std::to_string(index.ranks) + "\n";
  for (const auto &[key, value] : index.meta)
    text += "meta " + key + " " + value + "\n";
  for (const std::string &file : index.whole) {
    text += "whole " + file;
    if (auto it = index.checksums.find(file); it != index.checksums.end())
      text += " " + hex16(it->second);
    text += "\n";
  }
  for (const auto &[file, sliced] : index.sliced) {
    text += "sliced " + file + " " + npyTypeName(sliced.type);
    for (int64_t size : sliced.shape)
      text += " " + std::to_string(size);
    text += "\n";
  }
  return text;
}

std::string saveIdText(uint64_t saveId,
                       const std::map<std::string, uint64_t> &checksums) {
  std::string text = hex16(saveId) + "\n";
  for (const auto &[file, checksum] : checksums)
    text += file + " " + hex16(checksum) + "\n";
  return text;
}

bool writeStateArray(AtomicFileSet &files, const std::string &dir,
                     const std::string &file, const NpyArray &array,
                     std::map<std::string, uint64_t> &checksums,
                     std::string &error) {
  checksums[file] = checksum64(array.data.data(), array.data.size());
  return writeNpy(files, joinPath(dir, file), array, error);
}

bool writeText(AtomicFileSet &files, const std::string &path,
               const std::string &text, std::string &error) {
  AtomicFile *file = files.add(path, error);
  return file && file->write(text.data(), text.size(), error);
}

bool readStateIndex(const std::string &dir, StateIndex &index,
                    std::string &error) {
  index = StateIndex();
  std::string path = stateIndexPath(dir);
  struct stat info;
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT)
    return true;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  index.present = true;
  std::string line, version;
  int number = 0;
  bool sawId = false, sawRanks = false;
  std::set<std::string> files;
  auto bad = [&](const std::string &why) {
    error = path + ":" + std::to_string(number) + ": " + why +
            " (not a state index sharc wrote)";
    return false;
  };
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (number == 1) {
      fields >> version;
      if (key != "sharc-state" || (version != "1" && version != "2"))
        return bad("expected 'sharc-state 1' or 'sharc-state 2'");
      continue;
    }
    if (key == "meta" && version == "2") {
      std::string name, value;
      fields >> name;
      std::getline(fields >> std::ws, value);
      if (name.empty())
        return bad("a meta line without a key");
      if (index.findMeta(name))
        return bad("meta '" + name + "' is given twice");
      index.meta.emplace_back(name, value);
      continue;
    }
    if (key == "save-id") {
      std::string value;
      fields >> value;
      char *end = nullptr;
      index.saveId = std::strtoull(value.c_str(), &end, 16);
      if (value.size() != 16 || *end)
        return bad("a save id is 16 hex digits");
      sawId = true;
    } else if (key == "ranks") {
      long long ranks = 0;
      if (!(fields >> ranks) || ranks < 1 || ranks > (1 << 20))
        return bad("ranks must be an integer in [1, 2^20]");
      index.ranks = int(ranks);
      sawRanks = true;
    } else if (key == "whole" || key == "sliced") {
      std::string file;
      fields >> file;
      if (!plainName(file))
        return bad("'" + file + "' is not a file name");
      if (!files.insert(file).second)
        return bad("'" + file + "' is listed twice");
      if (key == "whole") {
        index.whole.push_back(file);
        std::string checksum;
        if (version == "2" && (fields >> checksum) &&
            !parseHex(checksum, index.checksums[file]))
          return bad("a checksum is 16 hex digits, got '" + checksum + "'");
      } else {
        StateIndex::Sliced sliced;
        std::string type;
        fields >> type;
        if (!parseType(type, sliced.type))
          return bad("unknown element type '" + type + "'");
        long long size = 0;
        // A tensor of at most 2^48 elements (no product of the dimensions
        // overflows).
        unsigned long long elements = 1;
        while (fields >> size) {
          if (size < 0)
            return bad("a negative dimension");
          if (size != 0 && elements > (1ull << 48) / (unsigned long long)size)
            return bad("a shape of more than 2^48 elements");
          elements *= (unsigned long long)size;
          sliced.shape.push_back(size);
        }
        if (!fields.eof())
          return bad("a dimension that is not an integer");
        index.sliced[file] = std::move(sliced);
      }
    } else if (!key.empty()) {
      return bad("unknown entry '" + key + "'");
    }
    std::string rest;
    if (key != "sliced" && (fields >> rest))
      return bad("unexpected '" + rest + "'");
  }
  if (number == 0)
    return bad("empty");
  if (!sawId || !sawRanks)
    return bad("no save-id or ranks line");
  return true;
}

bool readStateSlice(const std::string &dir, const StateIndex &index,
                    const std::string &file, int rank, NpyArray &out,
                    std::string &error) {
  auto it = index.sliced.find(file);
  if (it == index.sliced.end()) {
    error = stateIndexPath(dir) + ": '" + file + "' is not partitioned";
    return false;
  }
  std::string idPath = saveIdPath(dir, rank, index.ranks);
  std::string text;
  if (!readText(idPath, text, error))
    return false;
  // The id, then `FILE CHECKSUM` lines.
  std::istringstream lines(text);
  std::string id, line;
  std::getline(lines, id);
  std::map<std::string, uint64_t> checksums;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name, checksum, rest;
    fields >> name >> checksum;
    if (!plainName(name) || !parseHex(checksum, checksums[name]) ||
        (fields >> rest)) {
      error = idPath + ": '" + line +
              "' is not a slice's checksum (not a file sharc wrote)";
      return false;
    }
  }
  if (id + "\n" != saveIdText(index.saveId)) {
    error = idPath + ": this slice folder belongs to another save than " +
            stateIndexPath(dir) +
            " (a save that did not finish on every rank); save the state "
            "again";
    return false;
  }
  std::string path = joinPath(sliceDirectory(dir, rank, index.ranks), file);
  if (!readNpy(path, out, error) ||
      !verifyChecksum(checksums, file, path, idPath, out, error))
    return false;
  int64_t elements = 1;
  for (int64_t size : it->second.shape)
    elements *= size;
  std::vector<int64_t> expected = {sliceElements(elements, index.ranks)};
  if (out.type != it->second.type || out.shape != expected) {
    error = path + ": a slice of " + std::to_string(elements) +
            " elements over " + std::to_string(index.ranks) +
            " ranks is a 1-D " + npyTypeName(it->second.type) + " array of " +
            std::to_string(expected[0]) + " elements";
    return false;
  }
  return true;
}

bool readStateTensor(const std::string &dir, const StateIndex &index,
                     const std::string &file, NpyArray &out,
                     std::string &error) {
  auto it = index.sliced.find(file);
  if (it == index.sliced.end()) {
    if (index.present && std::find(index.whole.begin(), index.whole.end(),
                                   file) == index.whole.end()) {
      error = stateIndexPath(dir) + ": the saved state has no '" + file +
              "' (saved from another program?)";
      return false;
    }
    std::string path = joinPath(dir, file);
    return readNpy(path, out, error) &&
           verifyChecksum(index.checksums, file, path, stateIndexPath(dir), out,
                          error);
  }
  NpyArray whole;
  whole.type = it->second.type;
  whole.shape = it->second.shape;
  size_t bytes = size_t(whole.numElements()) * npyTypeBytes(whole.type);
  whole.data.reserve(bytes);
  for (int rank = 0; rank < index.ranks; ++rank) {
    NpyArray slice;
    if (!readStateSlice(dir, index, file, rank, slice, error))
      return false;
    size_t take = std::min(slice.data.size(), bytes - whole.data.size());
    whole.data.insert(whole.data.end(), slice.data.begin(),
                      slice.data.begin() + take);
  }
  out = std::move(whole);
  return true;
}

} // namespace sharc::rt
