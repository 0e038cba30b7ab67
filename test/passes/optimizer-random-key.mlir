// RUN: sharc-opt %s --sharc-autodiff --sharc-optimizer="optimizer=sgd lr=0.1 grad-accum=2" | FileCheck %s
// RUN: sharc-opt %s --sharc-autodiff --sharc-optimizer="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=ONE

// A forward function with training-mode dropout: its random key (the step
// counter and the batch rows, sharc.random_key) is neither a parameter nor a
// data input.  sharc-optimizer passes the step counter, and this rank's
// global batch rows (sharc.sample_rows), split into micro-batches like the
// data.
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

// The gradient function keeps the key arguments and reads the mask in
// backward (the select's gradient).
// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME:      %[[STEP:[^:]*]]: tensor<i64> {sharc.random_key = "step"}, %[[ROWS:[^:]*]]: tensor<4xi64> {sharc.random_key = "rows"}
// CHECK:         %[[KEEP:.*]] = sharc.dropout_mask %[[STEP]], %[[ROWS]]
// CHECK:         sharc.select %[[KEEP]]
// CHECK:         sharc.select %[[KEEP]]

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME:      %[[COUNTER:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">}, %[[X:[^:]*]]: tensor<8x3xf32> {sharc.input = "x"})
// CHECK:         %[[ALL:.*]] = sharc.sample_rows : tensor<8xi64>
// CHECK:         sharc.micro_batch_loop count 2 inputs(%[[X]], %[[ALL]] : tensor<8x3xf32>, tensor<8xi64>)
// CHECK-NEXT:    ^bb0(%[[MX:[^:]*]]: tensor<4x3xf32>, %[[MROWS:[^:]*]]: tensor<4xi64>,
// CHECK:           func.call @main_grad(%[[MX]], %{{.*}}, %[[COUNTER]], %[[MROWS]], %{{.*}})

// ONE-LABEL: func.func @train_step(
// ONE-SAME:      %[[COUNTER:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">}, %[[X:[^:]*]]: tensor<4x3xf32> {sharc.input = "x"})
// ONE:         %[[ALL:.*]] = sharc.sample_rows : tensor<4xi64>
// ONE:         call @main_grad(%[[X]], %{{.*}}, %[[COUNTER]], %[[ALL]], %{{.*}})
