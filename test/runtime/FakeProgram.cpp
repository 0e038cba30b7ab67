//===- FakeProgram.cpp - A hand-written training program for TrainMain ----===//
//
// Implements the generated-program ABI (runtime/Program.h) by hand for a tiny
// linear regression, so the training binary's main (runtime/TrainMain.cpp) can
// be tested without the code generator:
//
//   param  w     f32 [4]       state  step  i64 []
//   input  x     f32 [2, 4]    input  y     f32 [2]    (micro-batch 2, GAS 1)
//   output loss  f32 []        output lr    f64 []     constant const0 f32 []
//
// Each step computes r = x.w - y on this rank's rows, loss = mean(r^2) and
// grad = const0 * x^T r / rows (const0 = 2), all-reduces both (two f32
// all-reduces), divides them by the world size (SHARC_FAKE_WORLD_SIZE, a
// compile definition), sets w -= lr * grad with lr = 0.1 and increments step.
// The gradient, the residuals and the loss live in the arena at offsets 0, 16
// and 24: 28 bytes, all written every step.
//
// With SHARC_FAKE_MISPLAN=1 in the environment the step also broadcasts the
// loss and keeps it out of the arena, so measured and planned figures differ;
// with SHARC_FAKE_MISPLAN=2 it writes one float past the planned arena;
// with SHARC_FAKE_SLEEP_MS=T every step first sleeps T milliseconds.
//
// Compiled with SHARC_FAKE_MOMENTUM=1, the update is SGD with momentum 0.9
// (v = 0.9 v + grad, w -= lr v) and the program has an eighth buffer, state
// `w.momentum` f32 [4], offloaded to NVMe (ZeRO-Offload, runtime/Swap.h)
// unless SHARC_FAKE_OFFLOAD=0: each step starts reading its file (4096
// bytes) into the arena at offset 4096 before the forward computation, waits
// for it before the update, and writes it back (arena 8192 bytes; 4096 bytes
// read and 4096 written per step).  Offloaded, the compiled-in nvme_path is
// SHARC_FAKE_NVME_PATH (default none), the target SHARC_FAKE_TARGET (default
// cpu), and SHARC_FAKE_MISPLAN=3 reads the file once more than planned.
//
//===----------------------------------------------------------------------===//

#include "runtime/Errors.h"
#include "runtime/Program.h"
#include "runtime/Swap.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifndef SHARC_FAKE_WORLD_SIZE
#define SHARC_FAKE_WORLD_SIZE 1
#endif
#ifndef SHARC_FAKE_MOMENTUM
#define SHARC_FAKE_MOMENTUM 0
#endif

using namespace sharc::rt;

namespace {

constexpr int kWorldSize = SHARC_FAKE_WORLD_SIZE;
constexpr int kRows = 2;
constexpr int kFeatures = 4;
constexpr double kLearningRate = 0.1;
constexpr float kTwo = 2.0f;

constexpr bool kMomentumProgram = SHARC_FAKE_MOMENTUM;
constexpr float kMomentum = 0.9f;

enum : int { kW, kStep, kX, kY, kLoss, kLr, kConst0, kVelocity };
constexpr int kNumBuffers = kMomentumProgram ? 8 : 7;

constexpr int64_t kGradOffset = 0;
constexpr int64_t kResidualOffset = kGradOffset + kFeatures * sizeof(float);
constexpr int64_t kLossOffset = kResidualOffset + kRows * sizeof(float);
constexpr int64_t kArenaBytes = kLossOffset + sizeof(float);
/// Offloaded momentum: its file (swapBytes(16) = 4096 bytes) is read into
/// the arena here.
constexpr int64_t kVelocityOffset = kSwapAlignment;
constexpr int64_t kVelocityBytes = kFeatures * sizeof(float);
constexpr int64_t kOffloadArenaBytes =
    kVelocityOffset + swapBytes(kVelocityBytes);

/// nccl-tests all-reduce bytes of a `bytes`-byte buffer.
constexpr uint64_t allReduceBytes(uint64_t bytes) {
  return 2 * (kWorldSize - 1) * bytes / kWorldSize;
}

BufferSpec kBuffers[8] = {
    {"w",
     "w",
     "w.npy",
     BufferRole::param,
     DType::f32,
     1,
     {kFeatures},
     kFeatures,
     kFeatures * 4,
     nullptr,
     false,
     1,
     {kFeatures}},
    {"step",
     "",
     "step.npy",
     BufferRole::state,
     DType::i64,
     0,
     {},
     1,
     8,
     nullptr,
     false,
     0,
     {}},
    {"x",
     "",
     "",
     BufferRole::input,
     DType::f32,
     2,
     {kRows, kFeatures},
     kRows *kFeatures,
     kRows *kFeatures * 4,
     nullptr,
     false,
     2,
     {kRows, kFeatures}},
    {"y",
     "",
     "",
     BufferRole::input,
     DType::f32,
     1,
     {kRows},
     kRows,
     kRows * 4,
     nullptr,
     false,
     1,
     {kRows}},
    {"loss",
     "",
     "",
     BufferRole::output,
     DType::f32,
     0,
     {},
     1,
     4,
     nullptr,
     false,
     0,
     {}},
    {"lr",
     "",
     "",
     BufferRole::output,
     DType::f64,
     0,
     {},
     1,
     8,
     nullptr,
     false,
     0,
     {}},
    {"const0",
     "",
     "",
     BufferRole::constant,
     DType::f32,
     0,
     {},
     1,
     4,
     &kTwo,
     false,
     0,
     {}},
    {"w.momentum",
     "",
     "w.momentum.npy",
     BufferRole::state,
     DType::f32,
     1,
     {kFeatures},
     kFeatures,
     kVelocityBytes,
     nullptr,
     false,
     1,
     {kFeatures},
     BufferStorage::device},
};

ProgramInfo kInfo = {
    /*abiVersion=*/kProgramAbiVersion,
    /*model=*/"fake-linear-regression.onnx",
    /*target=*/"cpu",
    /*worldSize=*/kWorldSize,
    /*microBatch=*/kRows,
    /*gradientAccumulation=*/1,
    /*arenaBytes=*/kArenaBytes,
    /*numBuffers=*/kNumBuffers,
    /*buffers=*/kBuffers,
    /*lossBuffer=*/kLoss,
    /*lrBuffer=*/kLr,
    /*stepBuffer=*/kStep,
    /*gradNormBuffer=*/-1,
    /*scaleBuffer=*/-1,
    /*overflowBuffer=*/-1,
    /*atMinScaleBuffer=*/-1,
    /*zeroStage=*/0,
    /*stagingBytes=*/kWorldSize > 1
        ? kWorldSize *((kFeatures + kWorldSize - 1) / kWorldSize) *
              int64_t(sizeof(float))
        : 0,
    /*plannedCollectiveCalls=*/{2, 0, 0, 0},
    /*plannedCollectiveBytes=*/
    {allReduceBytes(kFeatures * sizeof(float)) + allReduceBytes(sizeof(float)),
     0, 0, 0},
    /*numKernels=*/1,
    /*numGemmCalls=*/0,
    /*swap=*/{"", 4096, 8, false, true, 0, 0},
};

/// Whether w.momentum is offloaded to NVMe (SHARC_FAKE_OFFLOAD, default 1).
bool offloaded() {
  const char *value = std::getenv("SHARC_FAKE_OFFLOAD");
  return kMomentumProgram && !(value && std::strcmp(value, "0") == 0);
}

} // namespace

extern "C" const ProgramInfo *sharcProgramInfo() {
  // No buffer is derived from another (BufferSpec::derivedFrom).
  for (BufferSpec &spec : kBuffers)
    spec.derivedFrom = -1;
  if (offloaded()) {
    kBuffers[kVelocity].storage = BufferStorage::nvme;
    kInfo.arenaBytes = kOffloadArenaBytes;
    kInfo.swap.plannedReadBytes = uint64_t(swapBytes(kVelocityBytes));
    kInfo.swap.plannedWriteBytes = uint64_t(swapBytes(kVelocityBytes));
    if (const char *path = std::getenv("SHARC_FAKE_NVME_PATH"))
      kInfo.swap.path = path;
    if (const char *target = std::getenv("SHARC_FAKE_TARGET"))
      kInfo.target = target;
  }
  return &kInfo;
}

extern "C" void sharcProgramStep(const StepContext *context) {
  if (reinterpret_cast<uintptr_t>(context->arena) % 256 != 0)
    fatal("fake program: the arena is not aligned to 256 bytes");
  if (context->comm->size() != kWorldSize)
    fatal("fake program: called on the wrong number of ranks");
  const char *misplanValue = std::getenv("SHARC_FAKE_MISPLAN");
  bool misplan = misplanValue && std::strcmp(misplanValue, "1") == 0;
  if (misplanValue && std::strcmp(misplanValue, "2") == 0) {
    float past = 1;
    std::memcpy(context->arena + kArenaBytes + 8, &past, sizeof(past));
  }
  if (const char *sleepMs = std::getenv("SHARC_FAKE_SLEEP_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(sleepMs)));

  // The offloaded momentum: its read overlaps the forward computation.
  bool offload = offloaded();
  float *velocity = nullptr;
  uint64_t velocityRead = 0;
  if (kMomentumProgram && offload) {
    if (!context->swap || context->buffers[kVelocity])
      fatal("fake program: w.momentum is not offloaded as planned");
    if (reinterpret_cast<uintptr_t>(context->arena) % kSwapAlignment != 0)
      fatal("fake program: the arena is not aligned to 4096 bytes");
    velocity = reinterpret_cast<float *>(context->arena + kVelocityOffset);
    velocityRead = context->swap->startRead(kVelocity, velocity);
    if (misplanValue && std::strcmp(misplanValue, "3") == 0)
      context->swap->wait(context->swap->startRead(kVelocity, velocity));
  } else if (kMomentumProgram) {
    if (context->swap)
      fatal("fake program: a swap store without offloaded buffers");
    velocity = static_cast<float *>(context->buffers[kVelocity]);
  }

  auto *w = static_cast<float *>(context->buffers[kW]);
  auto *step = static_cast<int64_t *>(context->buffers[kStep]);
  const auto *x = static_cast<const float *>(context->buffers[kX]);
  const auto *y = static_cast<const float *>(context->buffers[kY]);
  auto *loss = static_cast<float *>(context->buffers[kLoss]);
  auto *lr = static_cast<double *>(context->buffers[kLr]);
  float two = *static_cast<const float *>(context->buffers[kConst0]);

  auto *grad = reinterpret_cast<float *>(context->arena + kGradOffset);
  auto *residual = reinterpret_cast<float *>(context->arena + kResidualOffset);
  float lossValue = 0;
  float *lossSlot =
      misplan ? &lossValue
              : reinterpret_cast<float *>(context->arena + kLossOffset);

  *lossSlot = 0;
  for (int i = 0; i < kRows; ++i) {
    float prediction = 0;
    for (int j = 0; j < kFeatures; ++j)
      prediction += x[i * kFeatures + j] * w[j];
    residual[i] = prediction - y[i];
    *lossSlot += residual[i] * residual[i];
  }
  *lossSlot /= kRows;
  for (int j = 0; j < kFeatures; ++j) {
    grad[j] = 0;
    for (int i = 0; i < kRows; ++i)
      grad[j] += residual[i] * x[i * kFeatures + j];
    grad[j] *= two / kRows;
  }

  context->comm->allReduce(grad, kFeatures, DType::f32, ReduceOp::sum);
  context->comm->allReduce(lossSlot, 1, DType::f32, ReduceOp::sum);
  if (misplan)
    context->comm->broadcast(lossSlot, 1, DType::f32, 0);

  if (kMomentumProgram) {
    if (offload)
      context->swap->wait(velocityRead);
    for (int j = 0; j < kFeatures; ++j) {
      velocity[j] = kMomentum * velocity[j] + grad[j] / kWorldSize;
      w[j] -= float(kLearningRate) * velocity[j];
    }
    if (offload)
      context->swap->wait(context->swap->startWrite(kVelocity, velocity));
  } else {
    for (int j = 0; j < kFeatures; ++j)
      w[j] -= float(kLearningRate) * (grad[j] / kWorldSize);
  }
  *loss = *lossSlot / kWorldSize;
  *lr = kLearningRate;
  *step += 1;
}
