// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1 grad-accum=2" | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="function=forward scheduler=lr-range-test lr-range-test-min-lr=0.25 lr-range-test-step-size=3 lr-range-test-staircase=true" | FileCheck %s --check-prefix=RANGE
// RUN: not sharc-opt %s --sharc-train-pipeline="optimizer=lamb" 2>&1 | FileCheck %s --check-prefix=ERROR

// The whole pipeline on a forward function: sharc-autodiff adds
// @main_grad, sharc-optimizer adds @train_step calling it once per
// micro-batch.

// CHECK-LABEL: func.func @main(
// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME: %{{.*}}: tensor<f32> {sharc.input = "loss_seed"})
// CHECK-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3x1xf32> {sharc.grad = "w"})
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x1xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// CHECK-SAME: %[[STEP:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">},
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x3xf32> {sharc.input = "x"},
// CHECK-SAME: %[[Y:[^:]*]]: tensor<4x1xf32> {sharc.input = "y"})
// CHECK-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3x1xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// CHECK-SAME: tensor<i64> {sharc.state = #sharc.state<"", "step">}, tensor<f64> {sharc.output = "lr"}, tensor<f64> {sharc.output = "grad_norm"})
// CHECK-DAG: %[[SEED:.*]] = sharc.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[SUMS:.*]]:2 = sharc.micro_batch_loop count 2 inputs(%[[X]], %[[Y]] : tensor<4x3xf32>, tensor<4x1xf32>)
// CHECK-NEXT: ^bb0(%[[XK:.*]]: tensor<2x3xf32>, %[[YK:.*]]: tensor<2x1xf32>, %{{.*}}: tensor<f32>, %[[GACC:.*]]: tensor<3x1xf32>):
// CHECK-NEXT: %[[GK:.*]]:2 = func.call @main_grad(%[[XK]], %[[W]], %[[YK]], %[[SEED]])
// CHECK: sharc.add %[[GACC]], %[[GK]]#1
// CHECK: sharc.yield
// The gradient's norm (returned), then the update.
// CHECK: %[[SQ:.*]] = sharc.mul %[[SUMS]]#1, %[[SUMS]]#1
// CHECK: %[[NORM:.*]] = sharc.sqrt
// CHECK: %[[DELTA:.*]] = sharc.mul %{{[0-9]+}}, %[[SUMS]]#1 : (tensor<f32>,
// CHECK: %[[NEWW:.*]] = sharc.sub %[[W]], %[[DELTA]]
// CHECK: return %{{.*}}, %[[NEWW]], %{{.*}}, %{{.*}}, %[[NORM]] :

// RANGE-LABEL: func.func @forward_grad(
// RANGE-LABEL: func.func @train_step(
// RANGE-SAME: #sharc.state<"fc_bias", "exp_avg">
// RANGE-DAG: sharc.constant dense<2.500000e-01> : tensor<f64>
// RANGE-DAG: sharc.constant dense<3.000000e+00> : tensor<f64>
// RANGE: call @forward_grad
// RANGE: sharc.floor

// ERROR: error: unknown optimizer 'lamb' (expected sgd, adam or adamw)

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

func.func @forward(%x: tensor<4xf32> {sharc.input = "x"},
                   %b: tensor<4xf32> {sharc.param = #sharc.param<"fc_bias", "fc.bias">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.add %x, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = sharc.mul %0, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = sharc.reduce %1 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}
