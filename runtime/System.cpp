//===- System.cpp - Facts about the machine ------------------------------===//

#include "runtime/System.h"

#include <limits>
#include <unistd.h>

namespace sharc::rt {

uint64_t hostMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0)
    return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(size);
}

} // namespace sharc::rt
