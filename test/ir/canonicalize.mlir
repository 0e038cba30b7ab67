// RUN: sharc-opt %s --canonicalize --split-input-file | FileCheck %s

// A transposed operand becomes the matmul's transpose flag: no copy is made.

// CHECK-LABEL: func.func @transposed_rhs
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<3x8xf32>)
// CHECK-NOT: sharc.transpose
// CHECK: %[[R:.*]] = sharc.matmul %[[X]], %[[W]] {transpose_rhs = true} : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x3xf32>
// CHECK: return %[[R]]
func.func @transposed_rhs(%x: tensor<4x8xf32>, %w: tensor<3x8xf32>) -> tensor<4x3xf32> {
  %wt = sharc.transpose %w {permutation = array<i64: 1, 0>} : (tensor<3x8xf32>) -> tensor<8x3xf32>
  %r = sharc.matmul %x, %wt : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}

// -----

// An rhs already read transposed keeps its flag; the lhs transpose has
// another user, so it stays for that one.

// CHECK-LABEL: func.func @both_operands
// CHECK-SAME: (%[[A:.*]]: tensor<2x8x4xf32>, %[[B:.*]]: tensor<2x3x8xf32>)
// CHECK: %[[AT:.*]] = sharc.transpose %[[A]]
// CHECK: %[[R:.*]] = sharc.matmul %[[A]], %[[B]] {transpose_lhs = true, transpose_rhs = true} : (tensor<2x8x4xf32>, tensor<2x3x8xf32>) -> tensor<2x4x3xf32>
// CHECK: return %[[R]], %[[AT]]
func.func @both_operands(%a: tensor<2x8x4xf32>, %b: tensor<2x3x8xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x8xf32>) {
  %at = sharc.transpose %a {permutation = array<i64: 0, 2, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  %r = sharc.matmul %at, %b {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x3x8xf32>) -> tensor<2x4x3xf32>
  return %r, %at : tensor<2x4x3xf32>, tensor<2x4x8xf32>
}

// -----

// A transpose that moves a batch dimension is not a matrix transpose.

// CHECK-LABEL: func.func @batch_permutation_stays
// CHECK: sharc.transpose
// CHECK: sharc.matmul
func.func @batch_permutation_stays(%a: tensor<2x4x8xf32>, %b: tensor<4x8x3xf32>) -> tensor<4x2x3xf32> {
  %at = sharc.transpose %a {permutation = array<i64: 1, 0, 2>} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
  %r = sharc.matmul %at, %b : (tensor<4x2x8xf32>, tensor<4x8x3xf32>) -> tensor<4x2x3xf32>
  return %r : tensor<4x2x3xf32>
}

// -----

// The transpose of a matmul used once is the matmul of the swapped operands:
// (x w)^T = w^T x^T.

// CHECK-LABEL: func.func @transpose_of_matmul
// CHECK-SAME: (%[[X:.*]]: tensor<5x4xf32>, %[[DY:.*]]: tensor<5x3xf32>)
// CHECK-NOT: sharc.transpose
// CHECK: %[[R:.*]] = sharc.matmul %[[DY]], %[[X]] {transpose_lhs = true} : (tensor<5x3xf32>, tensor<5x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[R]]
func.func @transpose_of_matmul(%x: tensor<5x4xf32>, %dy: tensor<5x3xf32>) -> tensor<3x4xf32> {
  %g = sharc.matmul %x, %dy {transpose_lhs = true} : (tensor<5x4xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %gt = sharc.transpose %g {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %gt : tensor<3x4xf32>
}

// -----

// A matmul with another user keeps its transpose.

// CHECK-LABEL: func.func @shared_matmul_stays
// CHECK: %[[G:.*]] = sharc.matmul
// CHECK: sharc.transpose %[[G]]
func.func @shared_matmul_stays(%x: tensor<5x4xf32>, %dy: tensor<5x3xf32>) -> (tensor<3x4xf32>, tensor<4x3xf32>) {
  %g = sharc.matmul %x, %dy {transpose_lhs = true} : (tensor<5x4xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %gt = sharc.transpose %g {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %gt, %g : tensor<3x4xf32>, tensor<4x3xf32>
}

// -----

// The gradient of a value split into slices: the sum of the slices inserted
// into zeros is their concat when they tile the tensor.

// CHECK-LABEL: func.func @split_gradient_is_concat
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4xf32>, %[[K:.*]]: tensor<2x4xf32>, %[[V:.*]]: tensor<2x4xf32>)
// CHECK-NOT: sharc.add
// CHECK: %[[R:.*]] = sharc.concat %[[Q]], %[[K]], %[[V]] {axis = 1 : i64}
// CHECK: return %[[R]]
func.func @split_gradient_is_concat(%q: tensor<2x4xf32>, %k: tensor<2x4xf32>, %v: tensor<2x4xf32>) -> tensor<2x12xf32> {
  %zero = sharc.constant dense<0.0> : tensor<f32>
  %z = sharc.broadcast %zero : tensor<f32> to tensor<2x12xf32>
  %dv = sharc.insert_slice %v into %z {start = array<i64: 0, 8>, stride = array<i64: 1, 1>} : tensor<2x4xf32> into tensor<2x12xf32>
  %dq = sharc.insert_slice %q into %z {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<2x4xf32> into tensor<2x12xf32>
  %dk = sharc.insert_slice %k into %z {start = array<i64: 0, 4>, stride = array<i64: 1, 1>} : tensor<2x4xf32> into tensor<2x12xf32>
  %s = sharc.add %dv, %dq : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  %t = sharc.add %s, %dk : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  return %t : tensor<2x12xf32>
}

// -----

// Disjoint slices that leave a gap: one chain of insertions into the zeros.

// CHECK-LABEL: func.func @disjoint_slices_chain
// CHECK-SAME: (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<2x3xf32>)
// CHECK-NOT: sharc.add
// CHECK: %[[Z:.*]] = sharc.constant dense<0.000000e+00> : tensor<2x8xf32>
// CHECK: %[[I:.*]] = sharc.insert_slice %[[A]] into %[[Z]] {start = array<i64: 0, 0>
// CHECK: %[[J:.*]] = sharc.insert_slice %[[B]] into %[[I]] {start = array<i64: 0, 5>
// CHECK: return %[[J]]
func.func @disjoint_slices_chain(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x8xf32> {
  %z = sharc.constant dense<0.0> : tensor<2x8xf32>
  %x = sharc.insert_slice %a into %z {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<2x3xf32> into tensor<2x8xf32>
  %y = sharc.insert_slice %b into %z {start = array<i64: 0, 5>, stride = array<i64: 1, 1>} : tensor<2x3xf32> into tensor<2x8xf32>
  %s = sharc.add %x, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %s : tensor<2x8xf32>
}

// -----

// Overlapping slices really add.

// CHECK-LABEL: func.func @overlapping_slices_add
// CHECK: sharc.add
func.func @overlapping_slices_add(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x8xf32> {
  %z = sharc.constant dense<0.0> : tensor<2x8xf32>
  %x = sharc.insert_slice %a into %z {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<2x3xf32> into tensor<2x8xf32>
  %y = sharc.insert_slice %b into %z {start = array<i64: 0, 2>, stride = array<i64: 1, 1>} : tensor<2x3xf32> into tensor<2x8xf32>
  %s = sharc.add %x, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %s : tensor<2x8xf32>
}

// -----

// x^2 is x * x; x^(2 - 1), the exponent the autodiff of x^2 builds, is x.

// CHECK-LABEL: func.func @small_powers
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NOT: sharc.pow
// CHECK: %[[S:.*]] = sharc.mul %[[X]], %[[X]]
// CHECK: return %[[S]], %[[X]]
func.func @small_powers(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %two = sharc.constant dense<2.0> : tensor<f32>
  %one = sharc.constant dense<1.0> : tensor<f32>
  %s = sharc.pow %x, %two : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = sharc.sub %two, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %b = sharc.broadcast %e : tensor<f32> to tensor<4xf32>
  %p = sharc.pow %x, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s, %p : tensor<4xf32>, tensor<4xf32>
}

// -----

// Other exponents, and a base the exponent broadcasts, keep their pow.

// CHECK-LABEL: func.func @other_powers
// CHECK-COUNT-2: sharc.pow
func.func @other_powers(%x: tensor<4xf32>, %y: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %three = sharc.constant dense<3.0> : tensor<f32>
  %two = sharc.constant dense<2.0> : tensor<4xf32>
  %c = sharc.pow %x, %three : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %d = sharc.pow %y, %two : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  return %c, %d : tensor<4xf32>, tensor<4xf32>
}

// A folded reshape of a constant is materialized as a constant of the new
// shape (the dialect's constant materializer).
// CHECK-LABEL: func.func @reshape_constant
// CHECK-NEXT: %[[C:.*]] = sharc.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
// CHECK-NEXT: return %[[C]]
func.func @reshape_constant() -> tensor<2x2xf32> {
  %c = sharc.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %r = sharc.reshape %c : tensor<4xf32> to tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}
