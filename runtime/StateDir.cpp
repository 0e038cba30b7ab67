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

std::string join(const std::string &dir, const std::string &name) {
  if (dir.empty() || dir.back() == '/')
    return dir + name;
  return dir + "/" + name;
}

std::string hex(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

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

std::string stateIndexPath(const std::string &dir) {
  return join(dir, kIndexName);
}

std::string sliceDirectory(const std::string &dir, int rank, int ranks) {
  return join(dir,
              "rank-" + std::to_string(rank) + "-of-" + std::to_string(ranks));
}

std::string saveIdPath(const std::string &dir, int rank, int ranks) {
  return join(sliceDirectory(dir, rank, ranks), kSaveIdName);
}

std::string stateIndexText(const StateIndex &index) {
  std::string text = "sharc-state 1\nsave-id " + hex(index.saveId) +
                     "\nranks " + std::to_string(index.ranks) + "\n";
  for (const std::string &file : index.whole)
    text += "whole " + file + "\n";
  for (const auto &[file, sliced] : index.sliced) {
    text += "sliced " + file + " " + npyTypeName(sliced.type);
    for (int64_t size : sliced.shape)
      text += " " + std::to_string(size);
    text += "\n";
  }
  return text;
}

std::string saveIdText(uint64_t saveId) { return hex(saveId) + "\n"; }

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
  std::string line;
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
      std::string version;
      fields >> version;
      if (key != "sharc-state" || version != "1")
        return bad("expected 'sharc-state 1'");
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
  std::string id;
  if (!readText(idPath, id, error))
    return false;
  if (id != saveIdText(index.saveId)) {
    error = idPath + ": this slice folder belongs to another save than " +
            stateIndexPath(dir) +
            " (a save that did not finish on every rank); save the state "
            "again";
    return false;
  }
  std::string path = join(sliceDirectory(dir, rank, index.ranks), file);
  if (!readNpy(path, out, error))
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
    return readNpy(join(dir, file), out, error);
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
