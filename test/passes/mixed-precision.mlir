// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-mixed-precision="dtype=bf16" | FileCheck %s
// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-mixed-precision="dtype=f16" | FileCheck %s --check-prefix=F16
// RUN: sharc-opt %s -split-input-file --sharc-mixed-precision | FileCheck %s --check-prefix=F32

// The f32 parameters and data are cast to 16 bits where the body starts
// (the master weights stay f32 arguments); the matmul, the bias add, the
// scaling by a constant and tanh compute in 16 bits; the loss computes in
// f32 on its input cast up (the fp32 policy); the result keeps its type.

// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:.*]]: tensor<8x3xf32> {sharc.input = "x"}, %[[W:.*]]: tensor<3x4xf32> {sharc.param
// CHECK-NEXT: %[[X16:.*]] = sharc.cast %[[X]] : tensor<8x3xf32> to tensor<8x3xbf16>
// CHECK-NEXT: %[[W16:.*]] = sharc.cast %[[W]] : tensor<3x4xf32> to tensor<3x4xbf16>
// CHECK-NEXT: %[[B16:.*]] = sharc.cast %{{.*}} : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT: %[[M:.*]] = sharc.matmul %[[X16]], %[[W16]] : (tensor<8x3xbf16>, tensor<3x4xbf16>) -> tensor<8x4xbf16>
// CHECK-NEXT: %[[A:.*]] = sharc.add %[[M]], %[[B16]] : (tensor<8x4xbf16>, tensor<4xbf16>) -> tensor<8x4xbf16>
// CHECK: sharc.mul %[[A]], %{{.*}} : (tensor<8x4xbf16>, tensor<bf16>) -> tensor<8x4xbf16>
// CHECK-NEXT: %[[T:.*]] = sharc.tanh %{{.*}} : tensor<8x4xbf16>
// CHECK-NEXT: %[[UP:.*]] = sharc.cast %[[T]] : tensor<8x4xbf16> to tensor<8x4xf32>
// CHECK-NEXT: %[[L:.*]] = sharc.cross_entropy %[[UP]], %{{.*}} {{.*}} : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<f32>
// CHECK-NEXT: return %[[L]] : tensor<f32>
// F16-LABEL: func.func @main(
// F16: sharc.matmul {{.*}} -> tensor<8x4xf16>
// F16: sharc.cross_entropy {{.*}} : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<f32>
// F32-LABEL: func.func @main(
// F32-NOT: sharc.cast
// F32-NOT: bf16
func.func @main(%x: tensor<8x3xf32> {sharc.input = "x"},
                %w: tensor<3x4xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %b: tensor<4xf32> {sharc.param = #sharc.param<"b", "fc.bias">},
                %y: tensor<8xi64> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w : (tensor<8x3xf32>, tensor<3x4xf32>) -> tensor<8x4xf32>
  %1 = sharc.add %0, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %c = sharc.constant dense<0.5> : tensor<f32>
  %2 = sharc.mul %1, %c : (tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
  %3 = sharc.tanh %2 : tensor<8x4xf32>
  %4 = sharc.cross_entropy %3, %y {reduction = #sharc.loss_reduction<mean>} : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<f32>
  return %4 : tensor<f32>
}

// -----

// Softmax, layer norm and reductions compute in f32 and hand f32 on; the
// next 16-bit op casts down.

// CHECK-LABEL: func.func @main(
// CHECK: %[[N:[a-z_0-9]+]], %{{.*}}, %{{.*}} = sharc.layer_norm {{.*}} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
// CHECK-NEXT: %[[S:.*]] = sharc.softmax %[[N]] {{.*}} : tensor<2x4xf32>
// CHECK-NEXT: %[[D:.*]] = sharc.cast %[[S]] : tensor<2x4xf32> to tensor<2x4xbf16>
// CHECK-NEXT: sharc.exp %[[D]] : tensor<2x4xbf16>
// CHECK: sharc.reduce {{.*}} : (tensor<2x4xf32>) -> tensor<f32>
func.func @main(%x: tensor<2x4xf32> {sharc.input = "x"},
                %g: tensor<4xf32> {sharc.param = #sharc.param<"g", "ln.weight">},
                %h: tensor<4xf32> {sharc.param = #sharc.param<"h", "ln.bias">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0:3 = sharc.layer_norm %x, %g, %h {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %1 = sharc.softmax %0#0 {axis = 1 : i64} : tensor<2x4xf32>
  %2 = sharc.exp %1 : tensor<2x4xf32>
  %3 = sharc.reduce %2 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// -----

// A model that is not f32 is refused.
// expected-error @below {{sharc-mixed-precision: argument of type 'tensor<4xf16>'; the pass takes an f32 model}}
func.func @main(%x: tensor<4xf16> {sharc.input = "x"}) -> tensor<4xf16> {
  return %x : tensor<4xf16>
}
