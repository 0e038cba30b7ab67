// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-prepare-emission | FileCheck %s

// The gradient function is inlined into @train_step and erased, in place of
// the call (the all-reduce stays where it is: sharc-schedule-collectives
// places collectives); the zero splat that scatter_add adds into becomes a
// broadcast of a scalar.

// CHECK-NOT: func.func @grad
// CHECK-LABEL: func.func @train_step(
// CHECK-NEXT: %[[A:.*]] = sharc.exp %arg0
// CHECK-NEXT: %[[B:.*]] = sharc.exp %arg1
// CHECK-NEXT: sharc.tanh %arg0
// CHECK-NEXT: %[[C:.*]] = sharc.concat %[[A]], %[[B]]
// CHECK-NEXT: %[[R:.*]] = sharc.all_reduce %[[C]]
// CHECK: %[[Z:.*]] = sharc.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[ZB:.*]] = sharc.broadcast %[[Z]] : tensor<f32> to tensor<4x3xf32>
// CHECK-NEXT: sharc.scatter_add %[[ZB]]
// CHECK-NOT: call
func.func @grad(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = sharc.exp %x : tensor<4xf32>
  %b = sharc.exp %y : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
func.func @train_step(%x: tensor<4xf32>, %y: tensor<4xf32>, %i: tensor<2xi64>, %u: tensor<2x3xf32>) -> (tensor<8xf32>, tensor<4xf32>, tensor<4x3xf32>) {
  %g:2 = call @grad(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %t = sharc.tanh %x : tensor<4xf32>
  %c = sharc.concat %g#0, %g#1 {axis = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  %r = sharc.all_reduce %c {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<8xf32>
  %zeros = sharc.constant dense<0.0> : tensor<4x3xf32>
  %s = sharc.scatter_add %zeros, %i, %u {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %r, %t, %s : tensor<8xf32>, tensor<4xf32>, tensor<4x3xf32>
}

// -----

// A summed or averaged loss gets scratch space for a double loss and weight
// per position (2 x 3 positions x 16 bytes); a per-position loss needs none.
// CHECK-LABEL: func.func @train_step(
// CHECK: sharc.cross_entropy {{.*}}sharc.scratch_bytes = 96 : i64
// CHECK: sharc.nll_loss
// CHECK-NOT: scratch_bytes
// CHECK-SAME: tensor<2x3xf32>
func.func @train_step(%l: tensor<2x5x3xf32>, %t: tensor<2x3xi64>) -> (tensor<f32>, tensor<2x3xf32>) {
  %m = sharc.cross_entropy %l, %t {reduction = #sharc.loss_reduction<mean>} : (tensor<2x5x3xf32>, tensor<2x3xi64>) -> tensor<f32>
  %n = sharc.nll_loss %l, %t {reduction = #sharc.loss_reduction<none>} : (tensor<2x5x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return %m, %n : tensor<f32>, tensor<2x3xf32>
}

// -----

// expected-error @below {{code generation needs '@train_step'}}
module {
  func.func @main(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}

// -----

// The code generator never sees sharc.gradients: sharc-data-parallel (or a
// ZeRO pass) replaces it.
func.func @train_step(%g: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @below {{code generation: 'sharc.gradients' is left (run sharc-data-parallel first)}}
  %0 = sharc.gradients %g {params = ["w"]} : tensor<3xf32>
  return %0 : tensor<3xf32>
}
