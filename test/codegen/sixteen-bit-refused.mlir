// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | not sharc-translate --emit-program 2>&1 | FileCheck %s

// Row kernels have no 16-bit form yet (the fp32 policy of
// sharc-mixed-precision keeps them in f32): a bf16 softmax is refused,
// naming the op, instead of being emitted wrong.

// CHECK: error: code generation: 'sharc.softmax' on f16/bf16 tensors is not supported yet
func.func @main(%x: tensor<4x5xf32> {sharc.input = "x"},
                %w: tensor<5xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.mul %x, %w : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %1 = sharc.cast %0 : tensor<4x5xf32> to tensor<4x5xbf16>
  %2 = sharc.softmax %1 {axis = 1 : i64} : tensor<4x5xbf16>
  %3 = sharc.cast %2 : tensor<4x5xbf16> to tensor<4x5xf32>
  %4 = sharc.reduce %3 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<4x5xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}
