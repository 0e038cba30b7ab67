// RUN: sharc-opt %s --sharc-fuse | FileCheck %s
// RUN: sharc-opt %s --sharc-fuse="row-prologues=false" | FileCheck %s --check-prefix=OFF

// A short fusion read only by a row reduction is marked sharc.fuse_into: the
// code generator computes it inside the row kernel.

// CHECK-LABEL: func.func @softmax_of_scaled_scores(
// CHECK: sharc.fusion
// CHECK-SAME: sharc.fuse_into
// CHECK: sharc.softmax
// OFF-LABEL: func.func @softmax_of_scaled_scores(
// OFF-NOT: sharc.fuse_into
func.func @softmax_of_scaled_scores(%s: tensor<4x8xf32>, %m: tensor<4x8xi1>) -> tensor<4x8xf32> {
  %scale = sharc.constant dense<0.5> : tensor<f32>
  %ninf = sharc.constant dense<0xFF800000> : tensor<f32>
  %a = sharc.mul %s, %scale : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %b = sharc.select %m, %ninf, %a : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = sharc.softmax %b {axis = 1 : i64} : tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

// Layer norm and float reductions take prologues too.
// CHECK-LABEL: func.func @norm_and_sum(
// CHECK: sharc.fusion
// CHECK-SAME: sharc.fuse_into
// CHECK: sharc.layer_norm
// CHECK: sharc.fusion
// CHECK-SAME: sharc.fuse_into
// CHECK: sharc.reduce
func.func @norm_and_sum(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %g: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %r = sharc.add %x, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n, %mean, %inv = sharc.layer_norm %r, %g {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %d = sharc.mul %x, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = sharc.reduce %d {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<4x8xf32>) -> tensor<8xf32>
  return %n, %s : tensor<4x8xf32>, tensor<8xf32>
}

// Not marked: a value the rest of the function also reads (it must be
// stored), and integer reductions.
// CHECK-LABEL: func.func @not_marked(
// CHECK-NOT: sharc.fuse_into
// CHECK: return
func.func @not_marked(%x: tensor<4x8xf32>, %i: tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xi64>) {
  %e = sharc.exp %x : tensor<4x8xf32>
  %p = sharc.softmax %e {axis = 1 : i64} : tensor<4x8xf32>
  %j = sharc.add %i, %i : (tensor<4x8xi64>, tensor<4x8xi64>) -> tensor<4x8xi64>
  %s = sharc.reduce %j {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<4x8xi64>) -> tensor<8xi64>
  return %p, %e, %s : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xi64>
}
