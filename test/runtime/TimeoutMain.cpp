//===- TimeoutMain.cpp - Collectives whose last rank does not come --------===//
//
// `sharc-runtime-timeout MODE` under mpirun with N >= 3 ranks: every rank but
// the last issues an all-reduce of 3 f32 elements in the context "the test";
// rank 0's collective timeout is 2 s, the others' 60 s, so rank 0 reports,
// naming the last rank, which did not answer, and ranks 1..N-2, waiting in the
// all-reduce too.  MODE says what the last rank does, and how the others
// issue the all-reduce:
//   silent    it sleeps (alive, in no collective); allReduce()
//   stopped   it stops itself with SIGSTOP; allReduce()
//   started   it sleeps; startAllReduce() and wait() (the progress thread)
// check-fatal.sh checks the exit code and the message.  (Ranks waiting in
// different collectives are not a case: mismatched collectives are erroneous
// MPI, and Open MPI ends the job with MPI_ERR_TRUNCATE.)
//
//===----------------------------------------------------------------------===//

#include "runtime/Communicator.h"
#include "runtime/Errors.h"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

using namespace sharc::rt;

int main(int argc, char **argv) {
  int level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "silent" && mode != "stopped" && mode != "started")
    fatal("usage: sharc-runtime-timeout silent|stopped|started");
  {
    MpiCommunicator comm(/*timeoutSeconds=*/60);
    if (comm.rank() == 0)
      comm.setCollectiveTimeout(2);
    comm.setContext("the test");
    if (comm.size() < 3)
      fatal("sharc-runtime-timeout needs at least 3 ranks");
    float values[3] = {1, 2, 3};
    if (comm.rank() == comm.size() - 1) {
      if (mode == "stopped")
        std::raise(SIGSTOP);
      // Killed by the job's abort long before this ends.
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } else if (mode == "started") {
      comm.wait(comm.startAllReduce(values, 3, DType::f32, ReduceOp::sum));
    } else {
      comm.allReduce(values, 3, DType::f32, ReduceOp::sum);
    }
  }
  MPI_Finalize();
  // Reaching here means no timeout ended the job.
  return 0;
}
