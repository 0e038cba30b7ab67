// RUN: sharc-opt %s --sharc-fuse | FileCheck %s
// RUN: sharc-opt %s --sharc-fuse="gemm-fusion=false" | FileCheck %s --check-prefix=OFF
// RUN: sharc-opt %s --sharc-fuse="singletons=false" | FileCheck %s --check-prefix=PLAIN

// A matmul whose only user adds a bias vector becomes that add's GEMM: the
// matmul is marked sharc.fuse_into, the add gets a #sharc.gemm_epilogue
// naming the product and bias operands and the result the GEMM writes.

// CHECK-LABEL: func.func @linear(
// CHECK: sharc.matmul
// CHECK-SAME: sharc.fuse_into
// CHECK: sharc.fusion %{{.*}}, %{{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 1, bias = 0, result = 0>}
// OFF-LABEL: func.func @linear(
// OFF-NOT: sharc.fuse_into
// OFF-NOT: sharc.gemm_epilogue
// PLAIN-LABEL: func.func @linear(
// PLAIN: sharc.matmul
// PLAIN-SAME: sharc.fuse_into
// PLAIN: sharc.add %{{.*}}, %{{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 1, bias = 0, result = 0>}
func.func @linear(%x: tensor<2x4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>) -> tensor<2x4x3xf32> {
  %y = sharc.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x3xf32>) -> tensor<2x4x3xf32>
  %z = sharc.add %b, %y : (tensor<3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  return %z : tensor<2x4x3xf32>
}

// Not an epilogue: more work after the bias, a matmul read twice, a bias over
// rows instead of columns.

// CHECK-LABEL: func.func @not_epilogues(
// CHECK-NOT: sharc.gemm_epilogue
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

// Activation epilogues (cuBLASLt's RELU/GELU): act(matmul + bias) and
// act(matmul) are one GEMM, also when the fusion yields the pre-activation
// (the aux output the backward pass reads).  GELU only with the tanh
// approximation (cuBLASLt's); the erf GELU stays a kernel.

// CHECK-LABEL: func.func @activations(
// CHECK: sharc.matmul {{.*}}sharc.fuse_into
// CHECK: sharc.fusion {{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 1, bias = 0, result = 0, activation = relu>}
// CHECK: sharc.matmul {{.*}}sharc.fuse_into
// CHECK: sharc.fusion {{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 1, aux = 0, activation = gelu_tanh>}
// CHECK: sharc.matmul {{.*}}sharc.fuse_into
// CHECK: sharc.fusion {{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, result = 0, activation = relu>}
// CHECK: %[[ERF:.*]] = sharc.matmul
// CHECK-NOT: sharc.fuse_into
// CHECK: sharc.fusion %[[ERF]]
// CHECK-NOT: sharc.gemm_epilogue
// CHECK: return
// PLAIN-LABEL: func.func @activations(
// PLAIN: sharc.add
// PLAIN-NOT: sharc.gemm_epilogue
// PLAIN: sharc.relu
// PLAIN-NOT: sharc.gemm_epilogue
// PLAIN: sharc.matmul {{.*}}sharc.fuse_into
// PLAIN: sharc.relu {{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, result = 0, activation = relu>}
func.func @activations(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %y = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z = sharc.add %b, %y : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %r = sharc.relu %z : tensor<4x3xf32>
  %y2 = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z2 = sharc.add %y2, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %g = sharc.gelu %z2 {approximation = #sharc.gelu_approximation<tanh>} : tensor<4x3xf32>
  %y3 = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %r3 = sharc.relu %y3 : tensor<4x3xf32>
  %y4 = sharc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z4 = sharc.add %y4, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %e = sharc.gelu %z4 {approximation = #sharc.gelu_approximation<none>} : tensor<4x3xf32>
  return %r, %z2, %g, %r3, %e : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}

// Attention heads: the transposes that split [batch, tokens, heads x dim]
// into heads are read in place by the GEMMs (sharc.fuse_into), and the
// transpose that merges the heads back is written by its GEMM
// (sharc.gemm_output on it, sharc.fuse_into on the matmul).

// CHECK-LABEL: func.func @heads(
// CHECK: %[[Q:.*]] = sharc.transpose {{.*}}sharc.fuse_into
// CHECK: %[[K:.*]] = sharc.transpose {{.*}}sharc.fuse_into
// CHECK: sharc.matmul %[[Q]], %[[K]] :
// CHECK: sharc.matmul {{.*}} {sharc.fuse_into}
// CHECK: sharc.transpose {{.*}} {permutation = array<i64: 0, 2, 1, 3>, sharc.gemm_output}
// OFF-LABEL: func.func @heads(
// OFF-NOT: sharc.gemm_output
// OFF-NOT: sharc.fuse_into
func.func @heads(%x: tensor<2x5x12xf32>) -> tensor<2x5x12xf32> {
  %x4 = sharc.reshape %x : tensor<2x5x12xf32> to tensor<2x5x3x4xf32>
  %q = sharc.transpose %x4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x5x4xf32>
  %k = sharc.transpose %x4 {permutation = array<i64: 0, 2, 3, 1>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x4x5xf32>
  %s = sharc.matmul %q, %k : (tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>) -> tensor<2x3x5x5xf32>
  %o = sharc.matmul %s, %q : (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
  %m = sharc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x3x5x4xf32>) -> tensor<2x5x3x4xf32>
  %r = sharc.reshape %m : tensor<2x5x3x4xf32> to tensor<2x5x12xf32>
  return %r : tensor<2x5x12xf32>
}

// A transpose that something other than a GEMM reads, and one that moves the
// product's columns, stay copies.

// CHECK-LABEL: func.func @not_views(
// CHECK-NOT: sharc.gemm_output
// CHECK-NOT: sharc.fuse_into
// CHECK: return
func.func @not_views(%x: tensor<2x5x3x4xf32>, %w: tensor<2x3x4x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>) {
  %q = sharc.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x5x4xf32>
  %e = sharc.exp %q : tensor<2x3x5x4xf32>
  %p = sharc.matmul %q, %w : (tensor<2x3x5x4xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x5x4xf32>
  %t = sharc.transpose %p {permutation = array<i64: 3, 1, 2, 0>} : (tensor<2x3x5x4xf32>) -> tensor<4x3x5x2xf32>
  %u = sharc.transpose %t {permutation = array<i64: 3, 1, 2, 0>} : (tensor<4x3x5x2xf32>) -> tensor<2x3x5x4xf32>
  return %e, %u : tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>
}
