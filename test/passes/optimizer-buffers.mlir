// RUN: sharc-opt %s --sharc-autodiff --sharc-optimizer="optimizer=sgd lr=0.1 grad-accum=2" | FileCheck %s
// RUN: sharc-opt %s --sharc-autodiff --sharc-optimizer="optimizer=sgd lr=0.1 grad-accum=2" --sharc-data-parallel="world-size=2" | FileCheck %s --check-prefix=DP

// A buffer (a BatchNorm running mean, sharc.buffer) that forward updates:
// the gradient function returns its new value instead of a gradient, and
// the step carries it through the micro-batches (each updates the previous
// one's value) and returns it as the parameter's new value, after the other
// results.  On two ranks the new value is rank 0's.
func.func @main(%x: tensor<4x3xf32> {sharc.input = "x"},
                %w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                %m: tensor<3xf32> {sharc.buffer, sharc.param = #sharc.param<"m", "m">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.param = #sharc.param<"m", "m">}) {
  %mean = sharc.reduce %x {axes = array<i64: 0>, kind = #sharc.reduce_kind<mean>} : (tensor<4x3xf32>) -> tensor<3xf32>
  %c = sharc.sub %x, %mean : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %y = sharc.mul %c, %w : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %shifted = sharc.sub %y, %m : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %loss = sharc.reduce %shifted {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<4x3xf32>) -> tensor<f32>
  %half = sharc.constant dense<0.5> : tensor<f32>
  %a = sharc.mul %m, %half : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %b = sharc.mul %mean, %half : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %new = sharc.add %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %loss, %new : tensor<f32>, tensor<3xf32>
}

// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME:      -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.grad = "w"}, tensor<3xf32> {sharc.param = #sharc.param<"m", "m">})

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME:      %[[W:[^:]*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}, %[[M:[^:]*]]: tensor<3xf32> {sharc.buffer, sharc.param = #sharc.param<"m", "m">}
// CHECK-SAME:      tensor<f64> {sharc.output = "grad_norm"}, tensor<3xf32> {sharc.param = #sharc.param<"m", "m">})
// CHECK:         %[[LOOP:.*]]:3 = sharc.micro_batch_loop count 2 inputs(%{{.*}} : tensor<8x3xf32>) inits(%{{.*}}, %{{.*}}, %[[M]] : tensor<f32>, tensor<3xf32>, tensor<3xf32>)
// CHECK-NEXT:    ^bb0(%[[MX:[^:]*]]: tensor<4x3xf32>, %{{[^:]*}}: tensor<f32>, %{{[^:]*}}: tensor<3xf32>, %[[CM:[^:]*]]: tensor<3xf32>):
// CHECK-NEXT:      %[[CALL:.*]]:3 = func.call @main_grad(%[[MX]], %[[W]], %[[CM]], %{{.*}})
// CHECK:           sharc.yield %{{.*}}, %{{.*}}, %[[CALL]]#2
// CHECK:         return {{.*}}, %[[LOOP]]#2 :

// DP-LABEL: func.func @train_step(
// DP:         %[[LOOP:.*]]:3 = sharc.micro_batch_loop
// DP:         %[[ROOT:.*]] = sharc.broadcast_from %[[LOOP]]#2 {ranks = 2 : i64, root = 0 : i64} : tensor<3xf32>
// DP:         return {{.*}}, %[[ROOT]] :
