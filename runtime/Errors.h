//===- Errors.h - Fatal runtime errors --------------------------*- C++ -*-===//
//
// How the runtime and the generated programs report an unrecoverable error:
// one message on stderr, then every rank ends, so no rank is left waiting in a
// collective for a peer that is gone.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_RUNTIME_ERRORS_H
#define SHARC_RUNTIME_ERRORS_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace sharc::rt {

/// Prints `sharc: rank R: error: <message>` to stderr, runs the cleanups
/// registered with addFatalCleanup, and ends the job with exit code 1:
/// MPI_Abort(MPI_COMM_WORLD, 1) when MPI is initialized (this ends every
/// rank), exit(1) otherwise (R is then 0).
[[noreturn]] void fatal(const std::string &message);

/// Registers `cleanup(context)` to run in fatal() before the job ends, where
/// no destructor runs (e.g. removing files the process made for the run
/// only).  Cleanups run once, the latest registered first; one that calls
/// fatal() itself ends the job without running the others.  Returns an id for
/// removeFatalCleanup.  Thread-safe.
int addFatalCleanup(void (*cleanup)(void *), void *context);
/// Unregisters the cleanup `id` returned by addFatalCleanup.
void removeFatalCleanup(int id);

/// Why a run stops when the gradients of step `step` overflowed with the
/// loss scale already at its minimum `scale`, as DeepSpeed's
/// DynamicLossScaler stops it (the evaluator and the binaries say the same).
inline std::string lossScaleAtMinimumMessage(int64_t step, double scale) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", scale);
  return "step " + std::to_string(step) +
         ": the gradients overflowed with the loss scale already at its "
         "minimum (" +
         text +
         ", fp16.min_loss_scale), which cannot decrease further; DeepSpeed "
         "stops here too (\"Current loss scale already at minimum - cannot "
         "decrease scale anymore\").  Lower min_loss_scale, or find what "
         "makes the gradients overflow";
}

} // namespace sharc::rt

#endif // SHARC_RUNTIME_ERRORS_H
