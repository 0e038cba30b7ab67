// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline="fuse=false" | FileCheck %s --check-prefix=NOFUSE

// sharc-compile-pipeline takes @train_step to what the code generator emits:
// the gradient function inlined and the other functions gone, elementwise
// chains fused, the parameter update written in place, one arena planned.

func.func @main(%x: tensor<2x3xf32> {sharc.input = "x"},
                %w: tensor<3x1xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %y: tensor<2x1xf32> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w : (tensor<2x3xf32>, tensor<3x1xf32>) -> tensor<2x1xf32>
  %1 = sharc.sub %0, %y : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %2 = sharc.mul %1, %1 : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %3 = sharc.reduce %2 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// CHECK-NOT: func.func @main
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: attributes {sharc.arena_bytes = {{[0-9]+}} : i64, sharc.world_size = 1 : i64}
// CHECK-NOT: call
// CHECK: sharc.fusion {{.*}}sharc.offsets
// The update of w writes w's own buffer (argument 0).
// CHECK: sharc.fusion {{.*}}sharc.result_buffers = array<i64: 0>
// CHECK: return

// NOFUSE-LABEL: func.func @train_step(
// NOFUSE-NOT: sharc.fusion
// NOFUSE: return
