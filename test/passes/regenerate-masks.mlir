// RUN: sharc-opt %s --sharc-autodiff --sharc-regenerate-masks | FileCheck %s
// RUN: sharc-opt %s --sharc-regenerate-masks | FileCheck %s --check-prefix=NOGRAD

// Backward's select reads a mask drawn again just before it, not forward's;
// forward's select keeps forward's.  A function that is not a gradient
// function (no loss_seed) is left alone.
func.func @main(%x: tensor<4x3xf32> {sharc.input = "x"},
                %w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                %step: tensor<i64> {sharc.random_key = "step"},
                %rows: tensor<4xi64> {sharc.random_key = "rows"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %y = sharc.mul %x, %w : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %keep = sharc.dropout_mask %step, %rows {ratio = 0.5 : f64, seed = 0 : i64, stream = 0 : i64} : (tensor<i64>, tensor<4xi64>) -> tensor<4x3xi1>
  %zero = sharc.constant dense<0.0> : tensor<4x3xf32>
  %d = sharc.select %keep, %y, %zero : (tensor<4x3xi1>, tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %loss = sharc.reduce %d {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<4x3xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME:      %[[STEP:arg[0-9]+]]: tensor<i64> {sharc.random_key = "step"}, %[[ROWS:arg[0-9]+]]: tensor<4xi64> {sharc.random_key = "rows"}, %{{.*}}: tensor<f32> {sharc.input = "loss_seed"}
// CHECK:         %[[FORWARD:.*]] = sharc.dropout_mask %[[STEP]], %[[ROWS]] {ratio = 5.000000e-01 : f64, seed = 0 : i64, stream = 0 : i64}
// CHECK:         sharc.select %[[FORWARD]], %{{.*}}, %{{.*}} : (tensor<4x3xi1>, tensor<4x3xf32>, tensor<4x3xf32>)
// CHECK:         sharc.broadcast
// CHECK-NEXT:    %[[ZERO:.*]] = sharc.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[AGAIN:.*]] = sharc.dropout_mask %[[STEP]], %[[ROWS]] {ratio = 5.000000e-01 : f64, seed = 0 : i64, stream = 0 : i64}
// CHECK-NEXT:    sharc.select %[[AGAIN]], %{{.*}}, %[[ZERO]] : (tensor<4x3xi1>, tensor<4x3xf32>, tensor<f32>)
// CHECK-NOT:     %[[FORWARD]],
// CHECK:         return

// NOGRAD-COUNT-1: sharc.dropout_mask
// NOGRAD-NOT:      sharc.dropout_mask
