// RUN: not sharc-translate --emit-program %s -split-input-file 2>&1 | FileCheck %s
// RUN: not sharc-translate --emit-program --target=tpu %s -split-input-file 2>&1 | FileCheck %s --check-prefix=TARGET

// What the code generator refuses, with the op at fault.

// CHECK: error: no '@train_step' to emit
// TARGET: error: --target must be cpu or cuda, not 'tpu'
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A step that was not memory-planned (sharc-compile-pipeline not run).
// CHECK: error: code generation: no memory plan (run sharc-plan-memory)
func.func @train_step(%w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<4xf32> {sharc.param = #sharc.param<"w", "w">},
        tensor<i64> {sharc.state = #sharc.state<"", "step">}, tensor<f64> {sharc.output = "lr"}) {
  %l = sharc.constant dense<1.0> : tensor<f32>
  %r = sharc.constant dense<0.1> : tensor<f64>
  return %l, %w, %step, %r : tensor<f32>, tensor<4xf32>, tensor<i64>, tensor<f64>
}

// -----

// A step without the outputs the runtime reads.
// CHECK: error: code generation: @train_step needs 'loss' and 'lr' outputs and a step counter
func.func @train_step(%w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<4xf32> {sharc.param = #sharc.param<"w", "w">}) attributes {sharc.arena_bytes = 0 : i64} {
  return %w : tensor<4xf32>
}

// -----

// A synchronous all_reduce: collectives reach the code generator as start and
// wait pairs placed by sharc-schedule-collectives.
// CHECK: error: code generation: a synchronous all_reduce (run sharc-schedule-collectives)
func.func @train_step(%w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<4xf32> {sharc.param = #sharc.param<"w", "w">},
        tensor<i64> {sharc.state = #sharc.state<"", "step">}, tensor<f64> {sharc.output = "lr"})
    attributes {sharc.arena_bytes = 512 : i64, sharc.world_size = 2 : i64} {
  %l = sharc.constant dense<1.0> : tensor<f32>
  %s = sharc.all_reduce %l {kind = #sharc.collective_kind<sum>, ranks = 2 : i64, sharc.offsets = array<i64: 0>} : tensor<f32>
  %r = sharc.constant dense<0.1> : tensor<f64>
  return %s, %w, %step, %r : tensor<f32>, tensor<4xf32>, tensor<i64>, tensor<f64>
}
