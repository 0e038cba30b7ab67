//===- System.h - Facts about the machine ----------------------*- C++ -*-===//
//
// What the compiler, the evaluator and the training binaries need to know of
// the machine they run on.  POSIX and the C++ standard library only.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_SYSTEM_H
#define SHARC_RUNTIME_SYSTEM_H

#include <cstdint>

namespace sharc::rt {

/// The machine's physical memory in bytes (sysconf), or UINT64_MAX when it
/// cannot be told.  Whatever must be held in memory at once — a file read
/// whole, an evaluator tensor, a training binary's buffers — is checked
/// against it, so that too much fails with its size instead of a crash.
uint64_t hostMemoryBytes();

} // namespace sharc::rt

#endif // SHARC_RUNTIME_SYSTEM_H
