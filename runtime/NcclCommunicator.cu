//===- NcclCommunicator.cu - Collectives over GPUs with NCCL --------------===//
//
// Each collective is one NCCL call on the device stream.  NCCL's in-place
// conventions are Communicator.h's: reduce-scatter is in place when recv is
// slice rank() of send, all-gather when send is slice rank() of recv, and
// all-reduce and broadcast pass the same buffer as source and destination.
//
// Determinism (see NcclCommunicator.h and docs/runtime.md): for a fixed ring
// or tree configuration NCCL reduces every element in a fixed order on one
// rank and copies the result to the others, so results are bitwise identical
// on all ranks and across runs, though not in Communicator.h's rank order.
//
//===----------------------------------------------------------------------===//

#include "runtime/NcclCommunicator.h"

#include "runtime/Device.h"
#include "runtime/Errors.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <string>

namespace sharc::rt {

namespace {

/// Fatal unless `status` is ncclSuccess, with NCCL's own explanation.
void checkNccl(ncclResult_t status, const char *what) {
  if (status == ncclSuccess)
    return;
  std::string message = std::string("NcclCommunicator: ") + what + ": " +
                        ncclGetErrorString(status);
  // The comm argument is unused by NCCL: the last error of this thread.
  const char *detail = ncclGetLastError(nullptr);
  if (detail && *detail)
    message += std::string(" (") + detail + ")";
  fatal(message);
}

void checkCuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    fatal(std::string("NcclCommunicator: ") + what + ": " +
          cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

ncclDataType_t ncclType(DType type) {
  switch (type) {
  case DType::f32:
    return ncclFloat32;
  case DType::f64:
    return ncclFloat64;
  case DType::f16:
    return ncclFloat16;
  case DType::bf16:
    return ncclBfloat16;
  case DType::i32:
    return ncclInt32;
  case DType::i64:
    return ncclInt64;
  }
  fatal("NcclCommunicator: unknown element type");
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return ncclSum;
  case ReduceOp::max:
    return ncclMax;
  }
  fatal("NcclCommunicator: unknown reduction operator");
}

} // namespace

NcclCommunicator::NcclCommunicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    fatal("NcclCommunicator needs MPI_Init to have been called");
  stream = deviceStream();
  MPI_Comm_rank(MPI_COMM_WORLD, &rankId);
  MPI_Comm_size(MPI_COMM_WORLD, &numRanks);

  ncclUniqueId id;
  if (rankId == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    fatal("NcclCommunicator: MPI_Bcast of the NCCL unique id failed");
  ncclComm_t created = nullptr;
  checkNccl(ncclCommInitRank(&created, numRanks, id, rankId),
            "ncclCommInitRank");
  comm = created;
  cudaStream_t communication = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
  commStream = communication;
}

uint64_t NcclCommunicator::doStartAllReduce(void *buffer, size_t count,
                                            DType type, ReduceOp op) {
  auto compute = static_cast<cudaStream_t>(stream);
  auto communication = static_cast<cudaStream_t>(commStream);
  auto takeEvent = [&] {
    if (!spareEvents.empty()) {
      void *event = spareEvents.back();
      spareEvents.pop_back();
      return static_cast<cudaEvent_t>(event);
    }
    cudaEvent_t event = nullptr;
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
    return event;
  };
  // The communication stream starts once the gradients are computed...
  cudaEvent_t ready = takeEvent();
  checkCuda(cudaEventRecord(ready, compute), "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(communication, ready, 0),
            "cudaStreamWaitEvent");
  spareEvents.push_back(ready); // Reusable once recorded and waited on.
  if (count > 0)
    checkNccl(ncclAllReduce(buffer, buffer, count, ncclType(type), ncclOp(op),
                            comm, communication),
              "ncclAllReduce");
  // ...and signals when the reduced bucket is there.
  cudaEvent_t done = takeEvent();
  checkCuda(cudaEventRecord(done, communication), "cudaEventRecord");
  inFlight.emplace_back(++started, done);
  return started;
}

void NcclCommunicator::doWait(uint64_t ticket) {
  auto compute = static_cast<cudaStream_t>(stream);
  // Collectives complete in order on the communication stream: waiting for
  // the last event up to `ticket` waits for all of them.
  size_t waited = 0;
  void *last = nullptr;
  for (auto &[number, event] : inFlight) {
    if (number > ticket)
      break;
    last = event;
    ++waited;
  }
  if (!last)
    return;
  checkCuda(cudaStreamWaitEvent(compute, static_cast<cudaEvent_t>(last), 0),
            "cudaStreamWaitEvent");
  for (size_t i = 0; i < waited; ++i)
    spareEvents.push_back(inFlight[i].second);
  inFlight.erase(inFlight.begin(), inFlight.begin() + waited);
}

NcclCommunicator::~NcclCommunicator() {
  waitAll();
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
            "cudaStreamSynchronize");
  for (void *event : spareEvents)
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  cudaStreamDestroy(static_cast<cudaStream_t>(commStream));
  // Finalize flushes the operations still queued on the communicator.
  checkNccl(ncclCommFinalize(comm), "ncclCommFinalize");
  checkNccl(ncclCommDestroy(comm), "ncclCommDestroy");
}

void NcclCommunicator::barrier() {
  waitAll();
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
            "cudaStreamSynchronize");
  ncclResult_t asyncError = ncclSuccess;
  checkNccl(ncclCommGetAsyncError(comm, &asyncError), "ncclCommGetAsyncError");
  checkNccl(asyncError, "asynchronous error");
  MPI_Barrier(MPI_COMM_WORLD);
}

void NcclCommunicator::doAllReduce(void *buffer, size_t count, DType type,
                                   ReduceOp op) {
  if (count == 0)
    return;
  checkNccl(ncclAllReduce(buffer, buffer, count, ncclType(type), ncclOp(op),
                          comm, static_cast<cudaStream_t>(stream)),
            "ncclAllReduce");
}

void NcclCommunicator::doReduceScatter(const void *send, void *recv,
                                       size_t sliceCount, DType type,
                                       ReduceOp op) {
  if (sliceCount == 0)
    return;
  checkNccl(ncclReduceScatter(send, recv, sliceCount, ncclType(type),
                              ncclOp(op), comm,
                              static_cast<cudaStream_t>(stream)),
            "ncclReduceScatter");
}

void NcclCommunicator::doAllGather(const void *send, void *recv,
                                   size_t sliceCount, DType type) {
  if (sliceCount == 0)
    return;
  checkNccl(ncclAllGather(send, recv, sliceCount, ncclType(type), comm,
                          static_cast<cudaStream_t>(stream)),
            "ncclAllGather");
}

void NcclCommunicator::doBroadcast(void *buffer, size_t count, DType type,
                                   int root) {
  if (count == 0)
    return;
  checkNccl(ncclBroadcast(buffer, buffer, count, ncclType(type), root, comm,
                          static_cast<cudaStream_t>(stream)),
            "ncclBroadcast");
}

} // namespace sharc::rt

/// The device communicator hook of TrainMain.cpp (declared weak there): a CUDA
/// training binary collects over NCCL.  Strong here, so linking this object
/// makes TrainMain use it instead of MpiCommunicator; `sharc compile --target
/// cuda` links it from libSharcRuntimeCuda.a with --undefined=
/// sharcCreateCommunicator (a weak reference does not pull an archive member).
extern "C" sharc::rt::Communicator *sharcCreateCommunicator() {
  return new sharc::rt::NcclCommunicator();
}
