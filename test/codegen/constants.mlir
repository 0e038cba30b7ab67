// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Constant tensors are static arrays of their storage type.  f32 values are
// float literals, infinities and NaN included (a double literal there would
// be a narrowing conversion, which C++ refuses for infinities: the -inf of
// an attention mask broke the build); f64 values double literals that read
// back exactly.

func.func @main(%p: tensor<3xf32> {sharc.param = #sharc.param<"p", "p">},
                %x: tensor<3xf64> {sharc.input = "x"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %mask = sharc.constant dense<[0.1, 0xFF800000, 0x7FC00000]> : tensor<3xf32>
  %wide = sharc.constant dense<[0.1, 0xFFF0000000000000, 2.5]> : tensor<3xf64>
  %m = sharc.max %p, %mask : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %w = sharc.mul %x, %wide : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  %c = sharc.cast %w : tensor<3xf64> to tensor<3xf32>
  %y = sharc.mul %m, %c : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = sharc.reduce %y {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-DAG: const float constant{{[0-9]+}}[] = {0.100000001f, (-HUGE_VALF), NAN};
// CHECK-DAG: const double constant{{[0-9]+}}[] = {0.10000000000000001, (-HUGE_VAL), 2.5};
