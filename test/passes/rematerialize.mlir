// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize 2>/dev/null | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize 2>&1 >/dev/null | FileCheck %s --check-prefix=DIAG
// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize="policy=none" | FileCheck %s --check-prefix=NONE
// RUN: not sharc-opt %s -split-input-file --sharc-autodiff --sharc-rematerialize="policy=auto" 2>&1 | FileCheck %s --check-prefix=BAD

// Three residual layers x' = x + tanh(x·W).  The residual stream values are
// the cuts; layers 1 and 2 repeat (layer 0 reads the input argument
// directly, so its ops are cuts of their own and do not match).  Backward
// recomputes each repeated layer's matmul and tanh from the layer's input,
// just before the layer's backward, and reads the copies; forward's stay
// for forward only.

// DIAG: remark: sharc-rematerialize: 2 layers found; backward recomputes 4 forward ops instead of keeping 64 bytes of their values
// CHECK-LABEL: func.func @main_grad(
// CHECK: %[[P1:.*]] = sharc.matmul %[[X1:.*]], %arg2
// CHECK-NEXT: %[[T1:.*]] = sharc.tanh %[[P1]]
// CHECK-NEXT: %[[X2:.*]] = sharc.add %[[X1]], %[[T1]]
// CHECK-NEXT: %[[P2:.*]] = sharc.matmul %[[X2]], %arg3
// CHECK-NEXT: %[[T2:.*]] = sharc.tanh %[[P2]]
// CHECK-NEXT: %[[X3:.*]] = sharc.add %[[X2]], %[[T2]]
// CHECK-NEXT: sharc.reduce %[[X3]]
// Layer 2's backward: its tanh recomputed from x2.
// CHECK: %[[R2:.*]] = sharc.matmul %[[X2]], %arg3
// CHECK-NEXT: %[[RT2:.*]] = sharc.tanh %[[R2]]
// CHECK-NEXT: sharc.mul %{{.*}}, %[[RT2]]
// CHECK-NOT: %[[T2]]
// Layer 1's backward: from x1.
// CHECK: %[[R1:.*]] = sharc.matmul %[[X1]], %arg2
// CHECK-NEXT: %[[RT1:.*]] = sharc.tanh %[[R1]]
// CHECK-NEXT: sharc.mul %{{.*}}, %[[RT1]]
// CHECK-NOT: %[[T1]]
// CHECK: return

// NONE-LABEL: func.func @main_grad(
// NONE-COUNT-3: sharc.tanh
// NONE-NOT: sharc.tanh
// NONE: return

// BAD: sharc-rematerialize: policy must be none or layers, not 'auto'
func.func @main(%x: tensor<2x4xf32> {sharc.input = "x"},
                %w0: tensor<4x4xf32> {sharc.param = #sharc.param<"w0", "w0">},
                %w1: tensor<4x4xf32> {sharc.param = #sharc.param<"w1", "w1">},
                %w2: tensor<4x4xf32> {sharc.param = #sharc.param<"w2", "w2">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %p0 = sharc.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t0 = sharc.tanh %p0 : tensor<2x4xf32>
  %x1 = sharc.add %x, %t0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p1 = sharc.matmul %x1, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t1 = sharc.tanh %p1 : tensor<2x4xf32>
  %x2 = sharc.add %x1, %t1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p2 = sharc.matmul %x2, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t2 = sharc.tanh %p2 : tensor<2x4xf32>
  %x3 = sharc.add %x2, %t2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = sharc.reduce %x3 {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// One layer: nothing repeats, a warning, nothing changes.
// DIAG: warning: sharc-rematerialize: no repeated layers found in forward; nothing is recomputed
// CHECK-LABEL: func.func @main_grad(
// CHECK-COUNT-1: sharc.tanh
// CHECK-NOT: sharc.tanh
// CHECK: return
func.func @main(%x: tensor<2x4xf32> {sharc.input = "x"},
                %w0: tensor<4x4xf32> {sharc.param = #sharc.param<"w0", "w0">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %p0 = sharc.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t0 = sharc.tanh %p0 : tensor<2x4xf32>
  %s = sharc.reduce %t0 {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
