// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 world-size=2" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Data parallelism on two ranks: the gradients of w (12 elements) and b (4)
// are all-reduced as one bucket of 16, the loss on its own; each all-reduce
// starts as soon as its operand is complete and is waited for just before
// its result is read, and the program records the plan.

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

// Two all-reduces per step: 16 + 1 floats, 2 (N - 1) / N of them each.
// CHECK: const sharc::rt::ProgramInfo info = {
// CHECK-NEXT: sharc::rt::kProgramAbiVersion, "", "cpu",
// CHECK-NEXT: 2, 8, 1,
// CHECK: {2u, 0u, 0u, 0u},
// CHECK-NEXT: {68u, 0u, 0u, 0u},
// CHECK-LABEL: extern "C" void sharcProgramStep(
// The loss is complete before the gradients, so its all-reduce starts first.
// CHECK: const uint64_t [[LOSS:ticket[0-9]+]] = ctx->comm->startAllReduce({{.*}}, 1, sharc::rt::DType::f32, sharc::rt::ReduceOp::sum);
// CHECK: const uint64_t [[GRADS:ticket[0-9]+]] = ctx->comm->startAllReduce({{.*}}, 16, sharc::rt::DType::f32, sharc::rt::ReduceOp::sum);
// The update reads the gradients after waiting for them.
// CHECK-NEXT: ctx->comm->wait([[GRADS]]);
// CHECK-NEXT: sharc::kern::launch
// CHECK: ctx->comm->wait([[LOSS]]);
// CHECK: ctx->comm->waitAll();
