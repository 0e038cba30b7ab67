//===- Arena.cpp - The planned memory of a training program ---------------===//

#include "runtime/Arena.h"

#include "runtime/Errors.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sharc::rt {

Arena::Arena(size_t size, size_t alignment) : bytes(size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fatal("arena alignment " + std::to_string(alignment) +
          " is not a power of two");
  if (size > SIZE_MAX - alignment)
    fatal("cannot allocate an arena of " + std::to_string(size) + " bytes");
  // aligned_alloc wants a non-zero multiple of the alignment.
  size_t rounded =
      std::max<size_t>(1, (size + alignment - 1) / alignment) * alignment;
  memory = static_cast<char *>(std::aligned_alloc(alignment, rounded));
  if (!memory)
    fatal("cannot allocate an arena of " + std::to_string(size) + " bytes");
  std::memset(memory, 0, rounded);
}

Arena::~Arena() { std::free(memory); }

char *Arena::at(size_t offset) const {
  if (offset > bytes)
    fatal("arena offset " + std::to_string(offset) + " is past its size " +
          std::to_string(bytes));
  return memory + offset;
}

void Arena::touch(size_t offset, size_t regionSize) {
  if (offset > bytes || regionSize > bytes - offset)
    fatal("arena region [" + std::to_string(offset) + ", " +
          std::to_string(offset) + " + " + std::to_string(regionSize) +
          ") is past its size " + std::to_string(bytes));
  if (offset + regionSize > peakBytes)
    peakBytes = offset + regionSize;
}

} // namespace sharc::rt
