// RUN: sharc-opt %s -split-input-file --sharc-autodiff | FileCheck %s

// What sharc-autodiff inserts: @main_grad takes @main's arguments and the
// loss seed, recomputes what the loss needs (not the unused exp, not the
// other output), then the adjoints in reverse order.

// CHECK-LABEL: func.func @main(
// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME: %[[X:.*]]: tensor<4x3xf32> {sharc.input = "x"}
// CHECK-SAME: %[[W:.*]]: tensor<3x2xf32> {sharc.param = #sharc.param<"w", "fc.weight">}
// CHECK-SAME: %[[B:.*]]: tensor<2xf32> {sharc.param = #sharc.param<"b", "fc.bias">}
// CHECK-SAME: %[[SEED:.*]]: tensor<f32> {sharc.input = "loss_seed"}
// CHECK-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3x2xf32> {sharc.grad = "w"}, tensor<2xf32> {sharc.grad = "b"})
// CHECK-NEXT: %[[H:.*]] = sharc.matmul %[[X]], %[[W]]
// CHECK-NEXT: %[[Y:.*]] = sharc.add %[[H]], %[[B]]
// CHECK-NEXT: %[[LOSS:.*]] = sharc.reduce %[[Y]] {{.*}}mean
// mean: the seed / 8, spread over [4, 2].
// CHECK-NEXT: %[[S:.*]] = sharc.reshape %[[SEED]] : tensor<f32> to tensor<1x1xf32>
// CHECK-NEXT: %[[EIGHTH:.*]] = sharc.constant dense<1.250000e-01> : tensor<f32>
// CHECK-NEXT: %[[SCALED:.*]] = sharc.mul %[[S]], %[[EIGHTH]]
// CHECK-NEXT: %[[GY:.*]] = sharc.broadcast %[[SCALED]] : tensor<1x1xf32> to tensor<4x2xf32>
// The bias was broadcast over the rows: its gradient sums them.
// CHECK-NEXT: %[[GB:.*]] = sharc.reduce %[[GY]] {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<4x2xf32>) -> tensor<2xf32>
// CHECK-NEXT: %[[GW:.*]] = sharc.matmul %[[X]], %[[GY]] {transpose_lhs = true} : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: return %[[LOSS]], %[[GW]], %[[GB]]
func.func @main(%x: tensor<4x3xf32> {sharc.input = "x"},
                %w: tensor<3x2xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %b: tensor<2xf32> {sharc.param = #sharc.param<"b", "fc.bias">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<4x2xf32> {sharc.output = "y"}) {
  %h = sharc.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %y = sharc.add %h, %b : (tensor<4x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  %e = sharc.exp %x : tensor<4x3xf32>
  %loss = sharc.reduce %y {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %loss, %y : tensor<f32>, tensor<4x2xf32>
}

// -----

// Broadcast operands: each gradient is summed over the dimensions its
// operand was stretched along, then reshaped to the operand.

// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME: %[[A:.*]]: tensor<3x1xf64>
// CHECK-SAME: %[[B:.*]]: tensor<4xf64>
// CHECK: %[[G:.*]] = sharc.broadcast {{.*}} to tensor<3x4xf64>
// CHECK-NEXT: %[[GA_FULL:.*]] = sharc.mul %[[G]], %[[B]]
// CHECK-NEXT: %[[GA_SUM:.*]] = sharc.reduce %[[GA_FULL]] {axes = array<i64: 1>, kind = #sharc.reduce_kind<sum>} : (tensor<3x4xf64>) -> tensor<3xf64>
// CHECK-NEXT: %[[GA:.*]] = sharc.reshape %[[GA_SUM]] : tensor<3xf64> to tensor<3x1xf64>
// CHECK-NEXT: %[[GB_FULL:.*]] = sharc.mul %[[G]], %[[A]]
// CHECK-NEXT: %[[GB:.*]] = sharc.reduce %[[GB_FULL]] {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<3x4xf64>) -> tensor<4xf64>
// CHECK-NEXT: return %{{.*}}, %[[GA]], %[[GB]]
func.func @main(%a: tensor<3x1xf64> {sharc.param = #sharc.param<"a", "a">},
                %b: tensor<4xf64> {sharc.param = #sharc.param<"b", "b">})
    -> (tensor<f64> {sharc.output = "loss"}) {
  %p = sharc.mul %a, %b : (tensor<3x1xf64>, tensor<4xf64>) -> tensor<3x4xf64>
  %loss = sharc.reduce %p {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<3x4xf64>) -> tensor<f64>
  return %loss : tensor<f64>
}

// -----

// A tied embedding: the table's two uses (lookup, output head) add up.  The
// integer tokens and targets get no adjoint.

// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME: %[[TABLE:[^:]*]]: tensor<5x3xf32>
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<2xi64>
// CHECK-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<5x3xf32> {sharc.grad = "emb"})
// CHECK: %[[X:.*]] = sharc.gather %[[TABLE]], %[[IDS]]
// CHECK: %[[LOGITS:.*]] = sharc.matmul %[[X]], %[[TABLE]] {transpose_rhs = true}
// CHECK: sharc.cross_entropy
// CHECK: %[[P:.*]] = sharc.softmax %[[LOGITS]] {axis = 1 : i64}
// CHECK: %[[GLOGITS:.*]] = sharc.sub
// CHECK-NEXT: %[[GX:.*]] = sharc.matmul %[[GLOGITS]], %[[TABLE]] : (tensor<2x5xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %[[GHEAD:.*]] = sharc.matmul %[[GLOGITS]], %[[X]] {transpose_lhs = true} : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<5x3xf32>
// CHECK-NEXT: %[[ZEROS:.*]] = sharc.constant dense<0.000000e+00> : tensor<5x3xf32>
// CHECK-NEXT: %[[GLOOKUP:.*]] = sharc.scatter_add %[[ZEROS]], %[[IDS]], %[[GX]] {axis = 0 : i64}
// CHECK-NEXT: %[[GTABLE:.*]] = sharc.add %[[GHEAD]], %[[GLOOKUP]]
// CHECK-NEXT: return %{{.*}}, %[[GTABLE]]
func.func @main(%table: tensor<5x3xf32> {sharc.param = #sharc.param<"emb", "emb.weight">},
                %ids: tensor<2xi64> {sharc.input = "ids"}, %t: tensor<2xi64> {sharc.input = "t"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %x = sharc.gather %table, %ids {axis = 0} : (tensor<5x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  %logits = sharc.matmul %x, %table {transpose_rhs = true} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x5xf32>
  %loss = sharc.cross_entropy %logits, %t {reduction = #sharc.loss_reduction<sum>} : (tensor<2x5xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Only values on a path from a trainable parameter to the loss get adjoints:
// nothing flows back into the input-only branch (%x's exp) and the frozen
// side of the product is used as is.

// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<3xf32>
// CHECK-SAME: %[[W:[^:]*]]: tensor<3xf32>
// CHECK: %[[E:.*]] = sharc.exp %[[X]]
// CHECK: %[[P:.*]] = sharc.mul %[[E]], %[[W]]
// CHECK: %[[G:.*]] = sharc.broadcast
// CHECK-NEXT: %[[GW:.*]] = sharc.mul %[[G]], %[[E]]
// CHECK-NEXT: return %{{.*}}, %[[GW]]
func.func @main(%x: tensor<3xf32> {sharc.input = "x"},
                %w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %e = sharc.exp %x : tensor<3xf32>
  %p = sharc.mul %e, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %loss = sharc.reduce %p {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}
