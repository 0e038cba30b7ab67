//===- Errors.cpp - Fatal runtime errors ----------------------------------===//

#include "runtime/Errors.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace sharc::rt {

void fatal(const std::string &message) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  bool useMpi = initialized && !finalized;
  int rank = 0;
  if (useMpi)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "sharc: rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  if (useMpi)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

} // namespace sharc::rt
