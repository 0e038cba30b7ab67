// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline="offload-optimizer=nvme" | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline="offload-optimizer=nvme sub-group-size=1" | sharc-translate --emit-program | FileCheck %s --check-prefix=GROUPS
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline="offload-optimizer=cpu" | sharc-translate --emit-program | FileCheck %s --check-prefix=HOST
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline="offload-optimizer=cpu" | sharc-translate --emit-program --target=cuda | FileCheck %s --check-prefix=HOST
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline="offload-optimizer=nvme host-update=true" | sharc-translate --emit-program --target=cuda | FileCheck %s --check-prefix=NVMEHOST

// ZeRO stage 1 on two ranks with the optimizer state offloaded to NVMe
// (sharc-offload-optimizer): the four moment buffers (6 and 2 elements per
// rank) live in files (BufferStorage::nvme); the step reads each whole
// (swapBytes: one 4096-byte block) into 4096-aligned arena memory, waits,
// updates it there and writes it back, and copies nothing into their
// (absent) device buffers.  ProgramInfo plans 4 x 4096 bytes read and
// written per step.

func.func @main(%x: tensor<8x3xf32> {sharc.input = "x"},
                %w: tensor<3x4xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %b: tensor<4xf32> {sharc.param = #sharc.param<"b", "fc.bias">},
                %y: tensor<8x4xf32> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w : (tensor<8x3xf32>, tensor<3x4xf32>) -> tensor<8x4xf32>
  %1 = sharc.add %0, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %2 = sharc.sub %1, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = sharc.mul %2, %2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %4 = sharc.reduce %3 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}

// CHECK: const sharc::rt::BufferSpec buffers[] = {
// CHECK-NEXT: {"w", {{.*}}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"b", {{.*}}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"w.exp_avg", "", "fc.weight.exp_avg.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 1, {6}, 6, 24, nullptr, true, 2, {3, 4}, sharc::rt::BufferStorage::nvme, -1},
// CHECK-NEXT: {"w.exp_avg_sq", {{.*}}, sharc::rt::BufferStorage::nvme, -1},
// CHECK-NEXT: {"b.exp_avg", {{.*}}, sharc::rt::BufferStorage::nvme, -1},
// CHECK-NEXT: {"b.exp_avg_sq", {{.*}}, sharc::rt::BufferStorage::nvme, -1},
// CHECK-NEXT: {"step", {{.*}}, sharc::rt::BufferStorage::device, -1},
// CHECK: const sharc::rt::ProgramInfo info = {
// CHECK: {"", 1048576, 8, false, true, 16384u, 16384u},
// CHECK-NEXT: 0, 0u,
// CHECK-NEXT: "", "",
// CHECK-NEXT: "", ""};

// CHECK-LABEL: extern "C" void sharcProgramStep(
// CHECK: const uint64_t [[R2:ticket[0-9]+]] = ctx->swap->startRead(2, (ctx->arena + [[M2:[0-9]+]]));
// CHECK-NEXT: const uint64_t [[R3:ticket[0-9]+]] = ctx->swap->startRead(3, (ctx->arena + [[M3:[0-9]+]]));
// CHECK-NEXT: const uint64_t [[R4:ticket[0-9]+]] = ctx->swap->startRead(4, (ctx->arena + [[M4:[0-9]+]]));
// CHECK-NEXT: const uint64_t [[R5:ticket[0-9]+]] = ctx->swap->startRead(5, (ctx->arena + [[M5:[0-9]+]]));
// CHECK-NEXT: ctx->swap->wait([[R2]]);
// CHECK-NEXT: ctx->swap->wait([[R3]]);
// CHECK-NEXT: ctx->swap->wait([[R4]]);
// CHECK-NEXT: ctx->swap->wait([[R5]]);
// The update of w reads and writes its moments in the arena, in place.
// CHECK-NEXT: sharc::kern::launch(ctx, 6, 1, [[K:K[0-9]+]]{{{.*}}(ctx->arena + [[M2]]){{.*}}(ctx->arena + [[M3]]){{.*}}(ctx->arena + [[M2]])), reinterpret_cast<float *>((ctx->arena + [[M3]])), {{.*}}});
// CHECK-NEXT: const uint64_t [[W2:ticket[0-9]+]] = ctx->swap->startWrite(2, (ctx->arena + [[M2]]));
// CHECK-NEXT: const uint64_t [[W3:ticket[0-9]+]] = ctx->swap->startWrite(3, (ctx->arena + [[M3]]));
// CHECK-NEXT: sharc::kern::launch(ctx, 2, 1, [[K]]{
// CHECK-NEXT: const uint64_t [[W4:ticket[0-9]+]] = ctx->swap->startWrite(4, (ctx->arena + [[M4]]));
// CHECK-NEXT: const uint64_t [[W5:ticket[0-9]+]] = ctx->swap->startWrite(5, (ctx->arena + [[M5]]));
// CHECK: ctx->swap->wait([[W2]]);
// CHECK-NEXT: ctx->swap->wait([[W3]]);
// CHECK-NEXT: ctx->swap->wait([[W4]]);
// CHECK-NEXT: ctx->swap->wait([[W5]]);
// CHECK-NOT: ctx->buffers[2]
// CHECK-NOT: ctx->buffers[3]
// CHECK: ctx->comm->waitAll();

// One parameter per sub-group: b's moments are read while w's are updated,
// and w's written while b's are.
// GROUPS-LABEL: extern "C" void sharcProgramStep(
// GROUPS: ctx->swap->startRead(2,
// GROUPS-NEXT: ctx->swap->startRead(3,
// GROUPS-NEXT: ctx->swap->wait(
// GROUPS-NEXT: ctx->swap->wait(
// GROUPS-NEXT: ctx->swap->startRead(4,
// GROUPS-NEXT: ctx->swap->startRead(5,
// GROUPS-NEXT: sharc::kern::launch(ctx, 6, 1,
// GROUPS-NEXT: ctx->swap->startWrite(2,
// GROUPS-NEXT: ctx->swap->startWrite(3,
// GROUPS-NEXT: ctx->swap->wait(
// GROUPS-NEXT: ctx->swap->wait(
// GROUPS-NEXT: sharc::kern::launch(ctx, 2, 1,

// ZeRO-Offload to the CPU (the CUDA target's layout, on either target): the
// moments are in host memory (BufferStorage::host), the updates run on the
// host (launchHost) on copies of their inputs in the host arena, and the new
// parameter slices go back to the device arena; ProgramInfo plans the host
// arena and the bytes copied per step (each gradient slice and parameter
// slice to the host: 4 x (24 + 8), five f32 scalars: 20, the new slices back:
// 24 + 8).
// HOST: {"w.exp_avg", {{.*}}, sharc::rt::BufferStorage::host, -1},
// HOST: const sharc::rt::ProgramInfo info = {
// HOST: {"", 1048576, 8, false, true, 0u, 0u},
// HOST-NEXT: {{[0-9]+}}, 116u,
// HOST-LABEL: extern "C" void sharcProgramStep(
// HOST: = sharc::kern::transferStart(ctx, (ctx->hostArena + {{[0-9]+}}), (ctx->arena + {{[0-9]+}}), 24, true);
// HOST: sharc::kern::transferWait(ctx,
// HOST: sharc::kern::launchHost(ctx, 6, 1, [[K:K[0-9]+]]{{{.*}}(ctx->hostArena + {{.*}}ctx->buffers[2]{{.*}}ctx->buffers[3]
// HOST-NEXT: const uint64_t [[BACK:ticket[0-9]+]] = sharc::kern::transferStart(ctx, (ctx->arena + {{[0-9]+}}), (ctx->hostArena + {{[0-9]+}}), 24, false);
// HOST: sharc::kern::launchHost(ctx, 2, 1, [[K]]{
// HOST: sharc::kern::transferWait(ctx, [[BACK]]);
// HOST: ctx->comm->allGather(

// NVMe offload on the CUDA target: the files are read into the host arena
// and written from it, and the update runs on the host.
// NVMEHOST: {"w.exp_avg", {{.*}}, sharc::rt::BufferStorage::nvme, -1},
// NVMEHOST-LABEL: extern "C" void sharcProgramStep(
// NVMEHOST: ctx->swap->startRead(2, (ctx->hostArena + [[M:[0-9]+]]));
// NVMEHOST: sharc::kern::launchHost(ctx, 6, 1,
// NVMEHOST: ctx->swap->startWrite(2, (ctx->hostArena + [[M]]));
