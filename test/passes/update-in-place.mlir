// RUN: sharc-opt %s -split-input-file --sharc-update-in-place | FileCheck %s

// The new parameter and its moment, computed by one fusion that reads the old
// values element for element and returned, are written into the arguments'
// memory (argument numbers 0 and 1).  The step counter's new value is not a
// fusion result of the same shape read in place, so it stays in the arena
// (no attribute on its op).

// CHECK-LABEL: func.func @train_step(
// CHECK: sharc.fusion %arg0, %arg1, %arg3 {sharc.result_buffers = array<i64: 0, 1>}
func.func @train_step(%w: tensor<8xf32> {sharc.param = #sharc.param<"w", "w">},
                      %m: tensor<8xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">},
                      %g: tensor<8xf32> {sharc.input = "g"})
    -> (tensor<f32> {sharc.output = "loss"},
        tensor<8xf32> {sharc.param = #sharc.param<"w", "w">},
        tensor<8xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
        tensor<i64> {sharc.state = #sharc.state<"", "step">},
        tensor<f64> {sharc.output = "lr"}) {
  %loss = sharc.reduce %w {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<8xf32>) -> tensor<f32>
  %new:2 = sharc.fusion %w, %m, %g : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  ^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>):
    %mm = sharc.add %b, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %ww = sharc.sub %a, %mm : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    sharc.yield %ww, %mm : tensor<8xf32>, tensor<8xf32>
  }
  %one = sharc.constant dense<1> : tensor<i64>
  %next = sharc.add %step, %one : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %lr = sharc.constant dense<0.1> : tensor<f64>
  return %loss, %new#0, %new#1, %next, %lr : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f64>
}

// -----

// A parameter read again after its update keeps its old value: no in-place.
// CHECK-LABEL: func.func @train_step(
// CHECK-NOT: sharc.result_buffers
// CHECK: return
func.func @train_step(%w: tensor<8xf32> {sharc.param = #sharc.param<"w", "w">},
                     %g: tensor<8xf32> {sharc.input = "g"})
    -> (tensor<8xf32> {sharc.param = #sharc.param<"w", "w">},
        tensor<f32> {sharc.output = "loss"}) {
  %new = sharc.fusion %w, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
    %d = sharc.sub %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    sharc.yield %d : tensor<8xf32>
  }
  %loss = sharc.reduce %w {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<8xf32>) -> tensor<f32>
  return %new, %loss : tensor<8xf32>, tensor<f32>
}

// -----

// ZeRO's gathered parameters: the all-gather of a one-parameter bucket
// without padding (w) writes w's memory; the slice that cuts v out of a
// padded bucket writes v's.  Nothing reads the old values after them.
// CHECK-LABEL: func.func @train_step(
// CHECK: sharc.all_gather %{{.*}} {ranks = 2 : i64, sharc.result_buffers = array<i64: 0>}
// CHECK: sharc.all_gather %{{.*}} {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
// CHECK: sharc.slice %{{.*}} {sharc.result_buffers = array<i64: 1>, start = array<i64: 0>
func.func @train_step(%w: tensor<2x2xf32> {sharc.param = #sharc.param<"w", "w">},
                      %v: tensor<3xf32> {sharc.param = #sharc.param<"v", "v">},
                      %ws: tensor<1x2xf32> {sharc.input = "ws"},
                      %vs: tensor<1x2xf32> {sharc.input = "vs"})
    -> (tensor<f32> {sharc.output = "loss"},
        tensor<2x2xf32> {sharc.param = #sharc.param<"w", "w">},
        tensor<3xf32> {sharc.param = #sharc.param<"v", "v">}) {
  %loss = sharc.reduce %w {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x2xf32>) -> tensor<f32>
  %lv = sharc.reduce %v {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<3xf32>) -> tensor<f32>
  %l = sharc.add %loss, %lv : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %wa = sharc.all_gather %ws {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %va = sharc.all_gather %vs {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %vf = sharc.reshape %va : tensor<2x2xf32> to tensor<4xf32>
  %vn = sharc.slice %vf {start = array<i64: 0>, stride = array<i64: 1>} : tensor<4xf32> to tensor<3xf32>
  return %l, %wa, %vn : tensor<f32>, tensor<2x2xf32>, tensor<3xf32>
}

// -----

// A gathered parameter whose old value is read after the gather (the loss
// here) keeps its old memory: the gather goes to the arena.
// CHECK-LABEL: func.func @train_step(
// CHECK-NOT: sharc.result_buffers
// CHECK: return
func.func @train_step(%w: tensor<2x2xf32> {sharc.param = #sharc.param<"w", "w">},
                      %ws: tensor<1x2xf32> {sharc.input = "ws"})
    -> (tensor<f32> {sharc.output = "loss"},
        tensor<2x2xf32> {sharc.param = #sharc.param<"w", "w">}) {
  %wa = sharc.all_gather %ws {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %loss = sharc.reduce %w {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x2xf32>) -> tensor<f32>
  return %loss, %wa : tensor<f32>, tensor<2x2xf32>
}
