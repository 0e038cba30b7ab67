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
