// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize 2>/dev/null | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize 2>&1 >/dev/null | FileCheck %s --check-prefix=DIAG
// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize="policy=none" | FileCheck %s --check-prefix=NONE
// RUN: sharc-opt %s -split-input-file --sharc-autodiff --cse --sharc-rematerialize="host=true" 2>/dev/null | FileCheck %s --check-prefix=HOST
// RUN: not sharc-opt %s -split-input-file --sharc-autodiff --sharc-rematerialize="policy=some" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not sharc-opt %s -split-input-file --sharc-autodiff --sharc-rematerialize="policy=auto" 2>&1 | FileCheck %s --check-prefix=NOLIMIT

// Three residual layers x' = x + tanh(x·W).  The residual stream values are
// the cuts (the data input x counts as alive until its last forward reader,
// so layer 0 is one segment like the others); the three layers repeat.
// Backward recomputes each layer's matmul and tanh from the layer's input,
// just before the layer's backward, and reads the copies; forward's stay
// for forward only.  FLOPs per layer: 2·2·4·4 for the matmul, 8 for tanh.

// DIAG: remark: sharc-rematerialize: 3 layers found; backward recomputes 6 forward ops (216 FLOPs) instead of keeping 96 bytes of their values; activation memory 292 -> 260 bytes
// CHECK-LABEL: func.func @main_grad(
// CHECK: %[[P0:.*]] = sharc.matmul %arg0, %arg1
// CHECK-NEXT: %[[T0:.*]] = sharc.tanh %[[P0]]
// CHECK-NEXT: %[[X1:.*]] = sharc.add %arg0, %[[T0]]
// CHECK-NEXT: %[[P1:.*]] = sharc.matmul %[[X1]], %arg2
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
// Layer 0's backward: from the input.
// CHECK: %[[R0:.*]] = sharc.matmul %arg0, %arg1
// CHECK-NEXT: %[[RT0:.*]] = sharc.tanh %[[R0]]
// CHECK-NEXT: sharc.mul %{{.*}}, %[[RT0]]
// CHECK-NOT: %[[T0]]
// CHECK: return

// host=true (cpu_checkpointing): each layer's input but the first's (an
// argument) goes to host memory after its last forward reader and comes
// back before its backward, which reads the copy (the recomputed matmul
// and the weight gradient's matmul).
// HOST-LABEL: func.func @main_grad(
// HOST: %[[X1:.*]] = sharc.add %arg0, %{{.*}} :
// HOST: %[[X2:.*]] = sharc.add %[[X1]], %{{.*}} :
// HOST-NEXT: %[[O1:.*]] = sharc.transfer_start %[[X1]] to <host>
// HOST-NEXT: %[[H1:.*]] = sharc.wait %[[O1]]
// HOST: %[[X3:.*]] = sharc.add %[[X2]], %{{.*}} :
// HOST-NEXT: %[[O2:.*]] = sharc.transfer_start %[[X2]] to <host>
// HOST-NEXT: %[[H2:.*]] = sharc.wait %[[O2]]
// HOST: %[[I2:.*]] = sharc.transfer_start %[[H2]] to <device>
// HOST-NEXT: %[[D2:.*]] = sharc.wait %[[I2]]
// HOST-NEXT: sharc.matmul %[[D2]], %arg3 :
// HOST: sharc.matmul %[[D2]], %{{.*}} {transpose_lhs = true}
// HOST: %[[I1:.*]] = sharc.transfer_start %[[H1]] to <device>
// HOST-NEXT: %[[D1:.*]] = sharc.wait %[[I1]]
// HOST-NEXT: sharc.matmul %[[D1]], %arg2 :
// HOST: sharc.matmul %[[D1]], %{{.*}} {transpose_lhs = true}
// HOST-NOT: transfer_start
// HOST: return

// NONE-LABEL: func.func @main_grad(
// NONE-COUNT-3: sharc.tanh
// NONE-NOT: sharc.tanh
// NONE: return

// BAD: sharc-rematerialize: policy must be none, layers or auto, not 'some'
// NOLIMIT: sharc-rematerialize: policy=auto needs a limit in bytes
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
