// RUN: sharc-opt %s --sharc-autodiff="function=forward loss=total freeze=bias$" | FileCheck %s
// RUN: not sharc-opt %s --sharc-autodiff="function=forward" 2>&1 | FileCheck %s --check-prefix=SEVERAL
// RUN: not sharc-opt %s --sharc-autodiff="function=forward loss=nope" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not sharc-opt %s --sharc-autodiff="function=forward loss=y" 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not sharc-opt %s --sharc-autodiff 2>&1 | FileCheck %s --check-prefix=FUNCTION
// RUN: not sharc-opt %s --sharc-autodiff="function=forward loss=total freeze=(" 2>&1 | FileCheck %s --check-prefix=REGEX

// The options: which function, which output is the loss, which parameters
// are frozen (the regex is searched in the sanitized and the ONNX names).

// CHECK-LABEL: func.func @forward_grad(
// CHECK-SAME: %{{.*}}: tensor<3xf32> {sharc.param = #sharc.param<"w", "layer.weight">}
// CHECK-SAME: %{{.*}}: tensor<3xf32> {sharc.param = #sharc.param<"b", "layer.bias">}
// CHECK-SAME: %{{.*}}: tensor<f32> {sharc.input = "loss_seed"}
// CHECK-SAME: -> (tensor<f32> {sharc.output = "total"}, tensor<3xf32> {sharc.grad = "w"})
// CHECK: return

// SEVERAL: error: sharc-autodiff: '@forward' has 2 scalar float outputs (total, other); choose the loss with the 'loss' option
// NAME: error: sharc-autodiff: '@forward' has no output named 'nope' (outputs: total, other, y)
// SHAPE: error: sharc-autodiff: the loss 'y' must be a scalar float, got 'tensor<3xf32>'
// FUNCTION: error: sharc-autodiff: no function '@main' to differentiate
// REGEX: error: sharc-autodiff: invalid freeze regex '(': parentheses not balanced

func.func @forward(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "layer.weight">},
                   %b: tensor<3xf32> {sharc.param = #sharc.param<"b", "layer.bias">})
    -> (tensor<f32> {sharc.output = "total"}, tensor<f32> {sharc.output = "other"},
        tensor<3xf32> {sharc.output = "y"}) {
  %y = sharc.mul %w, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %total = sharc.reduce %y {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  %other = sharc.reduce %y {kind = #sharc.reduce_kind<max>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %total, %other, %y : tensor<f32>, tensor<f32>, tensor<3xf32>
}
