// RUN: sharc-opt %s --sharc-fuse | FileCheck %s
// RUN: sharc-opt %s --sharc-fuse="gemm-epilogues=false" | FileCheck %s --check-prefix=OFF
// RUN: sharc-opt %s --sharc-fuse="singletons=false" | FileCheck %s --check-prefix=PLAIN

// A matmul whose only user adds a bias vector becomes that add's GEMM: the
// matmul is marked sharc.fuse_into, the add sharc.gemm_bias = [product
// operand, bias operand].

// CHECK-LABEL: func.func @linear(
// CHECK: sharc.matmul
// CHECK-SAME: sharc.fuse_into
// CHECK: sharc.fusion %{{.*}}, %{{.*}} {sharc.gemm_bias = array<i64: 1, 0>}
// OFF-LABEL: func.func @linear(
// OFF-NOT: sharc.fuse_into
// OFF-NOT: sharc.gemm_bias
// PLAIN-LABEL: func.func @linear(
// PLAIN: sharc.matmul
// PLAIN-SAME: sharc.fuse_into
// PLAIN: sharc.add %{{.*}}, %{{.*}} {sharc.gemm_bias = array<i64: 1, 0>}
func.func @linear(%x: tensor<2x4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>) -> tensor<2x4x3xf32> {
  %y = sharc.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x3xf32>) -> tensor<2x4x3xf32>
  %z = sharc.add %b, %y : (tensor<3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  return %z : tensor<2x4x3xf32>
}

// Not an epilogue: more work after the bias, a matmul read twice, a bias over
// rows instead of columns.

// CHECK-LABEL: func.func @not_epilogues(
// CHECK-NOT: sharc.gemm_bias
// CHECK: return
func.func @not_epilogues(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>, %r: tensor<4x1xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %y = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z = sharc.add %y, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %t = sharc.tanh %z : tensor<4x3xf32>
  %y2 = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z2 = sharc.add %y2, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %u = sharc.mul %z2, %y2 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %y3 = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z3 = sharc.add %y3, %r : (tensor<4x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
  return %t, %u, %z3 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}
