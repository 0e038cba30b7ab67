//===- Errors.h - Fatal runtime errors --------------------------*- C++ -*-===//
//
// How the runtime and the generated programs report an unrecoverable error:
// one message on stderr, then every rank ends, so no rank is left waiting in a
// collective for a peer that is gone.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_ERRORS_H
#define SHARC_RUNTIME_ERRORS_H

#include <string>

namespace sharc::rt {

/// Prints `sharc: rank R: error: <message>` to stderr and ends the job with
/// exit code 1: MPI_Abort(MPI_COMM_WORLD, 1) when MPI is initialized (this ends
/// every rank), exit(1) otherwise (R is then 0).
[[noreturn]] void fatal(const std::string &message);

} // namespace sharc::rt

#endif // SHARC_RUNTIME_ERRORS_H
