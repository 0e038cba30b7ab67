//===- Npy.h - .npy file reading and writing ----------------------*- C++
//-*-===//
//
// NumPy's .npy format (versions 1.0-3.0), little-endian, C order.  Used by the
// compiler tools and by the runtime the generated programs link, so it depends
// on nothing but the C++ standard library (and POSIX, for AtomicFile.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_NPY_H
#define SHARC_RUNTIME_NPY_H

#include <cstdint>
#include <string>
#include <vector>

namespace sharc::rt {

class AtomicFile;
class AtomicFileSet;

/// Element types a .npy file may hold for sharc (`b1` is numpy's bool).
enum class NpyType { f64, f32, f16, i64, i32, b1 };

/// Bytes per element of `type`.
size_t npyTypeBytes(NpyType type);

/// "f64", "f32", "f16", "i64", "i32" or "bool", for messages.
const char *npyTypeName(NpyType type);

/// A .npy array: element type, shape and raw little-endian C-order bytes.
struct NpyArray {
  NpyType type = NpyType::f32;
  std::vector<int64_t> shape;
  std::vector<char> data;

  int64_t numElements() const;
};

/// Reads `path`.  On failure returns false and sets `error` to a message that
/// names the file and what is wrong with it.
bool readNpy(const std::string &path, NpyArray &out, std::string &error);

/// Parses an in-memory .npy image; `name` is used in error messages.
bool parseNpy(const std::string &name, const char *bytes, size_t size,
              NpyArray &out, std::string &error);

/// Writes `array` to `path` (version 1.0 header) atomically: under a
/// temporary name, renamed over `path` only when complete (AtomicFile.h).  On
/// failure `path` is untouched and `error` reads "PATH: reason".  NumPy has
/// no bfloat16, so callers store bf16 tensors as f32 (exactly representable).
bool writeNpy(const std::string &path, const NpyArray &array,
              std::string &error);

/// Writes an array of `type` and `shape` whose elements are the `size` bytes
/// at `data` (little-endian, C order) to `path`, atomically as writeNpy: a
/// caller that holds the bytes already (a model's parameters) copies nothing.
bool writeNpy(const std::string &path, NpyType type,
              const std::vector<int64_t> &shape, const char *data, size_t size,
              std::string &error);
/// Writes `array` into `file`, an AtomicFile being written.
bool writeNpy(AtomicFile &file, const NpyArray &array, std::string &error);

/// Writes an array of `type` and `shape` whose elements are all zero bytes
/// to `path`, atomically as writeNpy, without writing the zeros
/// (AtomicFile::appendZeros): the AdamW moments of a large model.
bool writeNpyZeros(const std::string &path, NpyType type,
                   const std::vector<int64_t> &shape, std::string &error);

/// Adds `path` to `files` and writes `array` into it; the file replaces
/// `path` when `files` is committed.
bool writeNpy(AtomicFileSet &files, const std::string &path,
              const NpyArray &array, std::string &error);

/// One .npy file name per name, all distinct: each name made safe as a file
/// name ([A-Za-z0-9_.-] kept, anything else becomes '_', a leading '.' or an
/// empty name gets a '_' prefix) plus ".npy".  Where that is taken by an
/// earlier name of `names`, or longer than 200 bytes, the stem is cut to 200
/// bytes and "~" and 8 hex digits of a hash of the name are appended (then
/// "~2", "~3", ... if still taken); '~' is never in a plain name, so these
/// cannot collide with one.  The compiler assigns every persistent buffer's
/// file this way (the manifest and the program's buffer table list them);
/// the evaluator names its output and state files the same way.
std::vector<std::string> npyFileNames(const std::vector<std::string> &names);

/// Splits `spec`, an `--input NAME=FILE.npy` value, where NAME may itself
/// contain '=': at the '=' before which stands one of `names` (the inputs
/// the program or model has).  When no prefix is one of `names`, at the first
/// '=' (the caller reports the unknown name).  Fails, with `error`, when
/// `spec` has no '=' with text on both sides, or when two of `names` fit
/// (`x=y=f.npy` with inputs `x` and `x=y`).
bool splitInputSpec(const std::string &spec,
                    const std::vector<std::string> &names, std::string &name,
                    std::string &file, std::string &error);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_NPY_H
