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
//===----------------------------------------------------------------------===//

#include "runtime/Errors.h"
#include "runtime/Program.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifndef SHARC_FAKE_WORLD_SIZE
#define SHARC_FAKE_WORLD_SIZE 1
#endif

using namespace sharc::rt;

namespace {

constexpr int kWorldSize = SHARC_FAKE_WORLD_SIZE;
constexpr int kRows = 2;
constexpr int kFeatures = 4;
constexpr double kLearningRate = 0.1;
constexpr float kTwo = 2.0f;

enum : int { kW, kStep, kX, kY, kLoss, kLr, kConst0, kNumBuffers };

constexpr int64_t kGradOffset = 0;
constexpr int64_t kResidualOffset = kGradOffset + kFeatures * sizeof(float);
constexpr int64_t kLossOffset = kResidualOffset + kRows * sizeof(float);
constexpr int64_t kArenaBytes = kLossOffset + sizeof(float);

/// nccl-tests all-reduce bytes of a `bytes`-byte buffer.
constexpr uint64_t allReduceBytes(uint64_t bytes) {
  return 2 * (kWorldSize - 1) * bytes / kWorldSize;
}

const BufferSpec kBuffers[kNumBuffers] = {
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
};

const ProgramInfo kInfo = {
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
};

} // namespace

extern "C" const ProgramInfo *sharcProgramInfo() { return &kInfo; }

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

  for (int j = 0; j < kFeatures; ++j)
    w[j] -= float(kLearningRate) * (grad[j] / kWorldSize);
  *loss = *lossSlot / kWorldSize;
  *lr = kLearningRate;
  *step += 1;
}
