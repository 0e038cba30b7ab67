// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 world-size=2" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 world-size=2" --sharc-compile-pipeline | FileCheck %s --check-prefix=IR
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 world-size=2" --sharc-compile-pipeline="overlap=false" | sharc-translate --emit-program | FileCheck %s --check-prefix=SYNC

// Data parallelism on two ranks: the gradients of w (12 elements) and b (4)
// are all-reduced as one bucket of 16, the loss on its own.  In the IR that
// the code generator reads, each all-reduce is a start (at once when its
// operand is complete) and a wait (just before its result is read), placed by
// sharc-schedule-collectives; the program calls the communicator at each and
// records the plan.

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

// In the IR, the loss's all-reduce starts right after the loss, before the
// backward GEMMs; the gradients' start follows their packing, its wait the
// start (the update reads the sum at once); the loss is waited for last.
// IR: %[[LF:.*]] = sharc.all_reduce_start {{.*}} : tensor<f32>
// IR: sharc.matmul
// IR: %[[GC:.*]] = sharc.concat
// IR-NEXT: %[[GF:.*]] = sharc.all_reduce_start %[[GC]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64, sharc.offsets = array<i64: [[OFF:[0-9]+]]>} : tensor<16xf32>
// IR-NEXT: sharc.wait %[[GF]] {sharc.offsets = array<i64: [[OFF]]>} : !sharc.future<tensor<16xf32>>
// IR: sharc.wait %[[LF]]
// IR-NOT: sharc.all_reduce

// Without overlap every wait follows its start, and the collectives stay
// where sharc-data-parallel put them: the gradients' after backward, then
// the loss's.
// SYNC: const uint64_t [[GRADS:ticket[0-9]+]] = ctx->comm->startAllReduce({{.*}}, 16, sharc::rt::DType::f32
// SYNC-NEXT: ctx->comm->wait([[GRADS]]);
// SYNC: const uint64_t [[LOSS:ticket[0-9]+]] = ctx->comm->startAllReduce({{.*}}, 1, sharc::rt::DType::f32
// SYNC-NEXT: ctx->comm->wait([[LOSS]]);
