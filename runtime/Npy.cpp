//===- Npy.cpp - .npy file reading and writing
//------------------------------===//

#include "runtime/Npy.h"
#include "runtime/AtomicFile.h"
#include "runtime/System.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sharc::rt {

size_t npyTypeBytes(NpyType type) {
  switch (type) {
  case NpyType::f64:
  case NpyType::i64:
    return 8;
  case NpyType::f32:
  case NpyType::i32:
    return 4;
  case NpyType::f16:
    return 2;
  case NpyType::b1:
    return 1;
  }
  return 0;
}

int64_t NpyArray::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static const char *descrOf(NpyType type) {
  switch (type) {
  case NpyType::f64:
    return "<f8";
  case NpyType::f32:
    return "<f4";
  case NpyType::f16:
    return "<f2";
  case NpyType::i64:
    return "<i8";
  case NpyType::i32:
    return "<i4";
  case NpyType::b1:
    return "|b1";
  }
  return "";
}

namespace {
/// A tiny parser for the Python dict literal of a .npy header.
struct HeaderParser {
  const std::string &text;
  size_t pos = 0;

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n'))
      ++pos;
  }
  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool parseString(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char quote = text[pos++];
    size_t end = text.find(quote, pos);
    if (end == std::string::npos)
      return false;
    out = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  }
  bool parseBool(bool &out) {
    skipSpace();
    if (text.compare(pos, 4, "True") == 0) {
      out = true;
      pos += 4;
      return true;
    }
    if (text.compare(pos, 5, "False") == 0) {
      out = false;
      pos += 5;
      return true;
    }
    return false;
  }
  bool parseShape(std::vector<int64_t> &out) {
    if (!consume('('))
      return false;
    while (!consume(')')) {
      skipSpace();
      size_t start = pos;
      while (pos < text.size() && isdigit((unsigned char)text[pos]))
        ++pos;
      if (start == pos || pos - start > 15)
        return false;
      out.push_back(std::stoll(text.substr(start, pos - start)));
      if (!consume(',')) {
        if (!consume(')'))
          return false;
        break;
      }
    }
    return true;
  }
};
} // namespace

bool parseNpy(const std::string &name, const char *bytes, size_t size,
              NpyArray &out, std::string &error) {
  auto fail = [&](const std::string &what) {
    error = name + ": not a valid .npy file: " + what;
    return false;
  };
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0)
    return fail("missing the \\x93NUMPY magic");
  unsigned major = (unsigned char)bytes[6];
  size_t headerLen, offset;
  if (major == 1) {
    headerLen = (unsigned char)bytes[8] | ((unsigned char)bytes[9] << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return fail("truncated header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= (size_t)(unsigned char)bytes[8 + i] << (8 * i);
    offset = 12;
  } else {
    return fail("unsupported format version " + std::to_string(major));
  }
  if (headerLen > size - offset)
    return fail("header longer than the file");
  std::string header(bytes + offset, headerLen);
  HeaderParser p{header};
  std::string descr;
  bool fortran = false, haveDescr = false, haveOrder = false, haveShape = false;
  std::vector<int64_t> shape;
  if (!p.consume('{'))
    return fail("header is not a dict");
  while (!p.consume('}')) {
    std::string key;
    if (!p.parseString(key) || !p.consume(':'))
      return fail("malformed header dict");
    if (key == "descr") {
      if (!p.parseString(descr))
        return fail("'descr' is not a simple type string");
      haveDescr = true;
    } else if (key == "fortran_order") {
      if (!p.parseBool(fortran))
        return fail("'fortran_order' is not True/False");
      haveOrder = true;
    } else if (key == "shape") {
      if (!p.parseShape(shape))
        return fail("'shape' is not a tuple of sizes");
      haveShape = true;
    } else {
      return fail("unexpected header key '" + key + "'");
    }
    if (!p.consume(',')) {
      if (!p.consume('}'))
        return fail("malformed header dict");
      break;
    }
  }
  if (!haveDescr || !haveOrder || !haveShape)
    return fail("header lacks descr, fortran_order or shape");
  if (fortran)
    return fail("Fortran-ordered arrays are not supported (save with C order)");
  static const struct {
    const char *descr;
    NpyType type;
  } kTypes[] = {{"<f8", NpyType::f64}, {"<f4", NpyType::f32},
                {"<f2", NpyType::f16}, {"<i8", NpyType::i64},
                {"<i4", NpyType::i32}, {"|b1", NpyType::b1}};
  bool known = false;
  for (const auto &t : kTypes)
    if (descr == t.descr) {
      out.type = t.type;
      known = true;
    }
  if (!known)
    return fail("unsupported dtype '" + descr +
                "' (supported: <f8 <f4 <f2 <i8 <i4 |b1)");
  out.shape = shape;
  std::string dims;
  for (int64_t d : shape)
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  // The sizes other than 0 must multiply to at most INT64_MAX, as NumPy
  // requires: code that multiplies some of them must not overflow.
  int64_t elements = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (elements > INT64_MAX / d)
      return fail("shape (" + dims +
                  ") has more elements than a 64-bit integer holds");
    elements *= d;
  }
  // A forged header must not make a huge shape look like it matches a small
  // file: compare without multiplying past the file's size.
  size_t dataOffset = offset + headerLen;
  size_t typeBytes = npyTypeBytes(out.type);
  bool tooBig = !empty && (uint64_t)elements > size / typeBytes;
  size_t need = empty || tooBig ? 0 : (size_t)elements * typeBytes;
  if (tooBig || size - dataOffset != need)
    return fail("expected " +
                (tooBig ? "more data bytes than the file has"
                        : std::to_string(need) + " data bytes") +
                " for " + descr + " shape (" + dims + "), found " +
                std::to_string(size - dataOffset));
  out.data.assign(bytes + dataOffset, bytes + size);
  return true;
}

bool readNpy(const std::string &path, NpyArray &out, std::string &error) {
  // O_NONBLOCK: opening a pipe must not wait for a writer (it has no
  // effect on the reads of a regular file).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = path + ": cannot open file: " + std::strerror(errno);
    return false;
  }
  auto failWith = [&](const std::string &message) {
    ::close(fd);
    error = path + ": " + message;
    return false;
  };
  // A device or a pipe could be read forever; a file must fit in memory.
  struct stat status;
  if (::fstat(fd, &status) != 0)
    return failWith(std::string("cannot read file: ") + std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    return failWith("not a regular file");
  uint64_t size = static_cast<uint64_t>(status.st_size);
  if (size > hostMemoryBytes())
    return failWith("the file has " + std::to_string(size) +
                    " bytes, more than this machine's memory");
  std::string bytes(size, '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return failWith(std::string("cannot read file: ") + std::strerror(errno));
    if (n == 0)
      break; // The file shrank while being read: parse what is there.
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  ::close(fd);
  return parseNpy(path, bytes.data(), bytes.size(), out, error);
}

/// The preamble and header of a version 1.0 file holding `array`.
static std::string npyHeader(NpyType type, const std::vector<int64_t> &shape) {
  std::string header = "{'descr': '" + std::string(descrOf(type)) +
                       "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    header += std::to_string(shape[i]) +
              (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  header += "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const char preamble[10] = {'\x93',
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (char)(header.size() & 0xff),
                             (char)(header.size() >> 8)};
  return std::string(preamble, 10) + header;
}

bool writeNpy(AtomicFile &file, const NpyArray &array, std::string &error) {
  std::string header = npyHeader(array.type, array.shape);
  return file.write(header.data(), header.size(), error) &&
         file.write(array.data.data(), array.data.size(), error);
}

bool writeNpy(const std::string &path, NpyType type,
              const std::vector<int64_t> &shape, const char *data, size_t size,
              std::string &error) {
  std::string header = npyHeader(type, shape);
  AtomicFile file;
  return file.create(path, error) &&
         file.write(header.data(), header.size(), error) &&
         file.write(data, size, error) && file.commit(error);
}

bool writeNpy(AtomicFileSet &files, const std::string &path,
              const NpyArray &array, std::string &error) {
  AtomicFile *file = files.add(path, error);
  return file && writeNpy(*file, array, error);
}

bool writeNpy(const std::string &path, const NpyArray &array,
              std::string &error) {
  return writeNpy(path, array.type, array.shape, array.data.data(),
                  array.data.size(), error);
}

bool writeNpyZeros(const std::string &path, NpyType type,
                   const std::vector<int64_t> &shape, std::string &error) {
  NpyArray empty;
  empty.type = type;
  empty.shape = shape;
  std::string header = npyHeader(type, shape);
  size_t bytes = size_t(empty.numElements()) * npyTypeBytes(type);
  AtomicFile file;
  return file.create(path, error) &&
         file.write(header.data(), header.size(), error) &&
         file.appendZeros(bytes, error) && file.commit(error);
}

std::vector<std::string> npyFileNames(const std::vector<std::string> &names) {
  constexpr size_t kMaxStem = 200;
  std::set<std::string> taken;
  std::vector<std::string> files;
  for (const std::string &name : names) {
    std::string stem;
    for (char c : name) {
      bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
      stem += safe ? c : '_';
    }
    if (stem.empty() || stem[0] == '.')
      stem.insert(stem.begin(), '_');
    if (stem.size() > kMaxStem || taken.count(stem)) {
      // FNV-1a of the name: the same name always gets the same file.
      uint32_t hash = 2166136261u;
      for (unsigned char c : name)
        hash = (hash ^ c) * 16777619u;
      char suffix[16];
      std::snprintf(suffix, sizeof(suffix), "~%08x", hash);
      stem = stem.substr(0, kMaxStem) + suffix;
      std::string base = stem;
      for (int k = 2; taken.count(stem); ++k)
        stem = base + "~" + std::to_string(k);
    }
    taken.insert(stem);
    files.push_back(stem + ".npy");
  }
  return files;
}

bool splitInputSpec(const std::string &spec,
                    const std::vector<std::string> &names, std::string &name,
                    std::string &file, std::string &error) {
  size_t first = spec.find('=');
  if (first == std::string::npos || first == 0 || first + 1 == spec.size()) {
    error = "expected NAME=FILE.npy, got '" + spec + "'";
    return false;
  }
  std::vector<size_t> fits;
  for (size_t at = first; at != std::string::npos; at = spec.find('=', at + 1))
    if (at + 1 < spec.size())
      for (const std::string &known : names)
        if (known.size() == at && spec.compare(0, at, known) == 0)
          fits.push_back(at);
  if (fits.size() > 1) {
    error = "'" + spec + "' is ambiguous: input '" + spec.substr(0, fits[0]) +
            "' with file '" + spec.substr(fits[0] + 1) + "', or input '" +
            spec.substr(0, fits[1]) + "' with file '" +
            spec.substr(fits[1] + 1) + "'";
    return false;
  }
  size_t at = fits.empty() ? first : fits.front();
  name = spec.substr(0, at);
  file = spec.substr(at + 1);
  return true;
}

const char *npyTypeName(NpyType type) {
  switch (type) {
  case NpyType::f64:
    return "f64";
  case NpyType::f32:
    return "f32";
  case NpyType::f16:
    return "f16";
  case NpyType::i64:
    return "i64";
  case NpyType::i32:
    return "i32";
  case NpyType::b1:
    return "bool";
  }
  return "?";
}

} // namespace sharc::rt
