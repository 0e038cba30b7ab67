// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=2 reduce-bucket-size=8" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s --check-prefix=STAGE2
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=3 param-persistence-threshold=4" --sharc-compile-pipeline="max-reuse-distance=0" | sharc-translate --emit-program | FileCheck %s --check-prefix=STAGE3
// RUN: sharc-opt %s --sharc-mixed-precision="dtype=bf16" --sharc-train-pipeline="optimizer=adamw lr=0.1 world-size=2 zero-stage=1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s --check-prefix=MASTERS

// ZeRO stage 1 on two ranks (sharc-zero): w's 12 elements are 6 per rank and
// b's 4 are 2.  The program reduce-scatters the gradients (one bucket of 8
// floats per rank), copies this rank's slice of each parameter from the
// rank's offset, and all-gathers the updated slices; the optimizer state
// buffers are slices of their parameter's buffer, which the runtime's
// loading and --save-state use to keep whole tensors in the files.

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
// CHECK-NEXT: {"w", "fc.weight", "fc.weight.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 2, {3, 4}, 12, 48, nullptr, false, 2, {3, 4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"b", "fc.bias", "fc.bias.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 1, {4}, 4, 16, nullptr, false, 1, {4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"w.exp_avg", "", "fc.weight.exp_avg.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 1, {6}, 6, 24, nullptr, true, 2, {3, 4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"w.exp_avg_sq", "", "fc.weight.exp_avg_sq.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 1, {6}, 6, 24, nullptr, true, 2, {3, 4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"b.exp_avg", "", "fc.bias.exp_avg.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 1, {2}, 2, 8, nullptr, true, 1, {4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"b.exp_avg_sq", "", "fc.bias.exp_avg_sq.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 1, {2}, 2, 8, nullptr, true, 1, {4}, sharc::rt::BufferStorage::device, -1},
// CHECK-NEXT: {"step", "", "step.npy", sharc::rt::BufferRole::state, sharc::rt::DType::i64, 0, {}, 1, 8, nullptr, false, 0, {}, sharc::rt::BufferStorage::device, -1},
// The loss, lr and step buffers, the gradients' norm (buffer 11, an
// output); the stage; and per step two all-reduces (the loss, 4 bytes, and
// the partial sums of squares of the gradients' norm, one f64: 2 (N - 1) / N
// of each), one reduce-scatter and one all-gather of 8 floats per rank:
// (N - 1) / N of 2 x 8 floats each.
// CHECK: const sharc::rt::ProgramInfo info = {
// CHECK: 14, buffers, 9, 10, 6, 11, -1, -1, -1, 1,
// CHECK-NEXT: {2u, 1u, 1u, 0u},
// CHECK-NEXT: {12u, 32u, 32u, 0u},
// CHECK-LABEL: extern "C" void sharcProgramStep(
// CHECK: ctx->comm->reduceScatter([[SEND:.*]], [[RECV:.*]], 8, sharc::rt::DType::f32, sharc::rt::ReduceOp::sum);
// CHECK: sharc::kern::copy(ctx, {{.*}}, static_cast<const char *>(ctx->buffers[0]) + int64_t(ctx->comm->rank()) * 24, 24);
// CHECK-NEXT: sharc::kern::copy(ctx, {{.*}}, static_cast<const char *>(ctx->buffers[1]) + int64_t(ctx->comm->rank()) * 8, 8);
// CHECK: ctx->comm->allGather({{.*}}, {{.*}}, 8, sharc::rt::DType::f32);

// Stage 2, buckets of at most 8 elements (b's 2 x 2, w's 2 x 6 alone): b's
// gradient reduce-scatter starts as soon as backward has it and runs during
// the GEMM that computes w's; one bucket is in flight at a time, so b's is
// waited for just before w's starts; the update waits for w's.
// STAGE2: const uint64_t [[B:ticket[0-9]+]] = ctx->comm->startReduceScatter({{.*}}, 2, sharc::rt::DType::f32, sharc::rt::ReduceOp::sum);
// STAGE2-NEXT: {
// STAGE2: sharc::kern::gemm(ctx, args);
// STAGE2: ctx->comm->wait([[B]]);
// STAGE2-NEXT: const uint64_t [[W:ticket[0-9]+]] = ctx->comm->startReduceScatter({{.*}}, 6, sharc::rt::DType::f32, sharc::rt::ReduceOp::sum);
// STAGE2: ctx->comm->wait([[W]]);
// STAGE2: ctx->comm->allGather(

// Stage 3 with b (4 elements) below the persistence threshold: w's buffer is
// this rank's 6 of its 12 elements, gathered (a started all-gather: the
// only parameter gather, so nothing to prefetch it behind) from the buffer
// into the arena before the forward GEMM reads it; b stays whole and gets its updated
// slices back at the end, as at stage 2.
// STAGE3: {"w", "fc.weight", "fc.weight.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 1, {6}, 6, 24, nullptr, true, 2, {3, 4}, sharc::rt::BufferStorage::device, -1},
// STAGE3-NEXT: {"b", "fc.bias", "fc.bias.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 1, {4}, 4, 16, nullptr, false, 1, {4}, sharc::rt::BufferStorage::device, -1},
// STAGE3: void sharcProgramStep(
// STAGE3: const uint64_t [[T:ticket[0-9]+]] = ctx->comm->startAllGather(ctx->buffers[0], (ctx->arena + {{[0-9]+}}), 6, sharc::rt::DType::f32);
// STAGE3-NEXT: ctx->comm->wait([[T]]);
// STAGE3: sharc::kern::gemm(ctx, args);
// STAGE3: ctx->comm->startReduceScatter(
// STAGE3: ctx->comm->allGather({{.*}}, ctx->buffers[1], 2, sharc::rt::DType::f32);
// STAGE3-NOT: allGather

// Stage 1 under bf16: forward reads the parameters only as their bf16 copies,
// so their fp32 masters are partitioned too (each rank keeps its slice);
// the slices are cast and all-gathered in bf16 before forward reads them,
// and nothing is gathered after the update.
// MASTERS: {"w", "fc.weight", "fc.weight.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 1, {6}, 6, 24, nullptr, true, 2, {3, 4}, sharc::rt::BufferStorage::device, -1},
// MASTERS-NEXT: {"b", "fc.bias", "fc.bias.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 1, {2}, 2, 8, nullptr, true, 1, {4}, sharc::rt::BufferStorage::device, -1},
// MASTERS: void sharcProgramStep(
// The second gather (b) starts right after the first's wait, while the
// GEMM that reads w computes.
// MASTERS: [[W:ticket[0-9]+]] = ctx->comm->startAllGather({{.*}}, 6, sharc::rt::DType::bf16);
// MASTERS-NEXT: ctx->comm->wait([[W]]);
// MASTERS: [[B:ticket[0-9]+]] = ctx->comm->startAllGather({{.*}}, 2, sharc::rt::DType::bf16);
// MASTERS: sharc::kern::gemm(ctx, args);
// MASTERS: ctx->comm->wait([[B]]);
// MASTERS: ctx->comm->reduceScatter(
// MASTERS-NOT: allGather
