//===- FatalMain.cpp - A program whose last rank fails --------------------===//
//
// With MPI (`sharc-runtime-fatal`): the last rank calls fatal() while the
// others wait in a barrier that can never complete; fatal() must end them all.
// With `--no-mpi`: fatal() before MPI_Init must exit(1).
//
//===----------------------------------------------------------------------===//

#include "runtime/Errors.h"

#include <mpi.h>

#include <cstring>

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--no-mpi") == 0)
    sharc::rt::fatal("deliberate failure without MPI");
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == size - 1)
    sharc::rt::fatal("deliberate failure on the last rank");
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
