//===- CudaRuntimeSmoke.cpp - The CUDA runtime end to end -----------------===//
//
// Drives DeviceCuda.cu, NcclCommunicator.cu and GemmCuda.cu together the way a
// generated CUDA program does: deviceInit, device buffers on the one stream,
// every collective (in-place reduce-scatter and all-gather, f32, i32 and bf16)
// and a GEMM, each result checked on the host.  ctest only compiles and links
// it (runtime-cuda-nccl-compile); run it by hand on GPUs, one per rank:
//   mpirun -np 2 build/test/runtime/cuda-compile-nccl/cuda-runtime-smoke
//
//===----------------------------------------------------------------------===//

#include "runtime/Device.h"
#include "runtime/Errors.h"
#include "runtime/Float16.h"
#include "runtime/GemmCuda.h"
#include "runtime/NcclCommunicator.h"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using namespace sharc::rt;

namespace {

/// Copies `host` to a new device buffer.
template <typename T> void *upload(const std::vector<T> &host) {
  void *device = deviceAlloc(host.size() * sizeof(T));
  copyToDevice(device, host.data(), host.size() * sizeof(T));
  return device;
}

template <typename T> std::vector<T> download(const void *device, size_t n) {
  std::vector<T> host(n);
  copyToHost(host.data(), device, n * sizeof(T));
  return host;
}

/// Fatal (on every rank) unless `actual` equals `expected`.
template <typename T>
void expectEqual(const char *what, size_t index, T actual, T expected) {
  if (actual != expected)
    fatal(std::string("cuda-runtime-smoke: ") + what + "[" +
          std::to_string(index) + "] = " + std::to_string(actual) +
          ", expected " + std::to_string(expected));
}

/// The rank of this process among the ranks on its node.
int localRank() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                      &node);
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

} // namespace

int main(int argc, char **argv) {
  // NcclCommunicator's watchdog answers the timeout side channel over MPI.
  int level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
  deviceInit(localRank());
  {
    NcclCommunicator comm;
    const int r = comm.rank();
    const int n = comm.size();

    // All-reduce, f32 sum: rank r holds (r + 1)(i + 1).
    std::vector<float> sums(5);
    for (size_t i = 0; i < sums.size(); ++i)
      sums[i] = float((r + 1) * (i + 1));
    void *sumsDevice = upload(sums);
    comm.allReduce(sumsDevice, sums.size(), DType::f32, ReduceOp::sum);
    sums = download<float>(sumsDevice, sums.size());
    for (size_t i = 0; i < sums.size(); ++i)
      expectEqual("f32 sum", i, sums[i], float(n * (n + 1) / 2 * (i + 1)));

    // All-reduce, i32 max: rank r holds r - i.
    std::vector<int32_t> maxima(4);
    for (size_t i = 0; i < maxima.size(); ++i)
      maxima[i] = int32_t(r - int(i));
    void *maximaDevice = upload(maxima);
    comm.allReduce(maximaDevice, maxima.size(), DType::i32, ReduceOp::max);
    maxima = download<int32_t>(maximaDevice, maxima.size());
    for (size_t i = 0; i < maxima.size(); ++i)
      expectEqual("i32 max", i, maxima[i], int32_t(n - 1 - int(i)));

    // All-reduce, bf16 sum of small integers (exact).
    std::vector<uint16_t> halves(3);
    for (size_t i = 0; i < halves.size(); ++i)
      halves[i] = floatToBFloat16(float(i + 1));
    void *halvesDevice = upload(halves);
    comm.allReduce(halvesDevice, halves.size(), DType::bf16, ReduceOp::sum);
    halves = download<uint16_t>(halvesDevice, halves.size());
    for (size_t i = 0; i < halves.size(); ++i)
      expectEqual("bf16 sum", i, bfloat16ToFloat(halves[i]),
                  float(n * (i + 1)));

    // Reduce-scatter in place (ZeRO layout): element j of the flat buffer is
    // r + j on rank r; rank r keeps slice r.
    const size_t slice = 2;
    std::vector<float> flat(n * slice);
    for (size_t j = 0; j < flat.size(); ++j)
      flat[j] = float(r + j);
    auto *flatDevice = static_cast<float *>(upload(flat));
    float *own = flatDevice + r * slice;
    comm.reduceScatter(flatDevice, own, slice, DType::f32, ReduceOp::sum);
    std::vector<float> reduced = download<float>(own, slice);
    for (size_t k = 0; k < slice; ++k)
      expectEqual("reduce-scatter", k, reduced[k],
                  float(n * (n - 1) / 2 + n * (r * slice + k)));

    // All-gather in place: rank r's slice becomes 10r + k, then every slice
    // arrives everywhere.
    std::vector<float> mine = {float(10 * r), float(10 * r + 1)};
    copyToDevice(own, mine.data(), slice * sizeof(float));
    comm.allGather(own, flatDevice, slice, DType::f32);
    flat = download<float>(flatDevice, flat.size());
    for (size_t j = 0; j < flat.size(); ++j)
      expectEqual("all-gather", j, flat[j],
                  float(10 * (j / slice) + j % slice));

    // Broadcast from the last rank.
    std::vector<int64_t> values(3, r);
    void *valuesDevice = upload(values);
    comm.broadcast(valuesDevice, values.size(), DType::i64, n - 1);
    values = download<int64_t>(valuesDevice, values.size());
    for (size_t i = 0; i < values.size(); ++i)
      expectEqual("broadcast", i, values[i], int64_t(n - 1));

    // A GEMM on the same stream: [1 2; 3 4] [5 6; 7 8].
    void *operands =
        upload(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0});
    GemmArgs args;
    args.m = args.n = args.k = 2;
    args.a = operands;
    args.b = static_cast<float *>(operands) + 4;
    args.c = static_cast<float *>(operands) + 8;
    args.lda = args.ldb = args.ldc = 2;
    gemmCuda(args, static_cast<cudaStream_t>(deviceStream()));
    std::vector<float> product = download<float>(args.c, 4);
    const float expected[4] = {19, 22, 43, 50};
    for (size_t i = 0; i < 4; ++i)
      expectEqual("gemm", i, product[i], expected[i]);

    comm.barrier();
    uint64_t allReduceBytes = comm.stats(CollectiveKind::allReduce).bytes;
    uint64_t expectedBytes = 0;
    for (uint64_t bytes : {5 * 4, 4 * 4, 3 * 2})
      expectedBytes += 2 * uint64_t(n - 1) * bytes / n;
    expectEqual("all-reduce bytes", 0, allReduceBytes, expectedBytes);

    for (void *buffer :
         {sumsDevice, maximaDevice, halvesDevice,
          static_cast<void *>(flatDevice), valuesDevice, operands})
      deviceFree(buffer);
    if (r == 0)
      std::printf("cuda-runtime-smoke: %d rank(s), rank 0 on %s: ok\n", n,
                  deviceName().c_str());
  }
  MPI_Finalize();
  return 0;
}
