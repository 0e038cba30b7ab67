// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 grad-accum=2" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Gradient accumulation is one C++ loop over the micro-batches: the sums are
// zeroed before it, the GEMMs read micro-batch `micro` of x through a
// pointer (8 x 3 floats = 96 bytes per micro-batch of x, 8 x 4 = 128 of y), the accumulators are
// updated in place at the end of the body, and the update follows the loop.

func.func @main(%x: tensor<8x3xf32> {sharc.input = "x"},
                %w: tensor<3x4xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %y: tensor<8x4xf32> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w : (tensor<8x3xf32>, tensor<3x4xf32>) -> tensor<8x4xf32>
  %1 = sharc.sub %0, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = sharc.mul %1, %1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = sharc.reduce %2 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// CHECK-LABEL: extern "C" void sharcProgramStep(
// The zeros the gradient sum starts from, written into its accumulator.
// CHECK: sharc::kern::launch(ctx, 12, 1, K{{[0-9]+}}{{{.*}}(ctx->arena + [[GSUM:[0-9]+]])
// CHECK: for (int64_t micro = 0; micro < INT64_C(2); ++micro) {
// CHECK: args.a = reinterpret_cast<float *>((reinterpret_cast<char *>(ctx->buffers[[X:\[[0-9]+\]]]) + micro * INT64_C(96)));
// CHECK: reinterpret_cast<char *>(ctx->buffers{{\[[0-9]+\]}}) + micro * INT64_C(128))
// CHECK: args.transA = true; args.transB = false;
// CHECK-NEXT: args.m = 3; args.n = 4; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((reinterpret_cast<char *>(ctx->buffers[[X]]) + micro * INT64_C(96)));
// The accumulation reads and writes the accumulator in place.
// CHECK: sharc::kern::launch(ctx, 12, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[GSUM]])), {{.*}}, reinterpret_cast<float *>((ctx->arena + [[GSUM]]))});
// CHECK-NEXT: }
// CHECK-NOT: micro
// CHECK: sharc::kern::launch(ctx, 12, 1, K{{[0-9]+}}{{{.*}}(ctx->arena + [[GSUM]]){{.*}}ctx->buffers
