// RUN: sharc-opt %s -split-input-file --sharc-autodiff -verify-diagnostics

// A trainable parameter the loss does not reach gets a zero gradient and a
// warning; so does one whose only path goes through integers.

// expected-warning @+2 {{sharc-autodiff: the loss 'loss' does not depend on trainable parameter 'unused'; its gradient is zero}}
// expected-warning @+1 {{sharc-autodiff: the loss 'loss' does not depend on trainable parameter 'rounded'; its gradient is zero}}
func.func @main(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                %unused: tensor<2xf32> {sharc.param = #sharc.param<"unused", "unused">},
                %rounded: tensor<3xf32> {sharc.param = #sharc.param<"rounded", "rounded">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %i = sharc.cast %rounded : tensor<3xf32> to tensor<3xi32>
  %f = sharc.cast %i : tensor<3xi32> to tensor<3xf32>
  %p = sharc.mul %w, %f : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %loss = sharc.reduce %p {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// An op without a gradient rule between a trainable parameter and the loss.

func.func @main(%w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  // expected-error @+1 {{no gradient rule for 'sharc.all_reduce', which is on a path from a trainable parameter to the loss}}
  %r = sharc.all_reduce %w {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<4xf32>
  %loss = sharc.reduce %r {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The same op off the path (on an input only, or on a frozen branch that
// does not reach the loss) is fine.

func.func @main(%x: tensor<4xf32> {sharc.input = "x"},
                %w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<4xf32> {sharc.output = "side"}) {
  %r = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<4xf32>
  %side = sharc.all_reduce %w {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<4xf32>
  %p = sharc.mul %r, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %loss = sharc.reduce %p {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %loss, %side : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{sharc-autodiff: '@main_grad' already exists}}
func.func @main(%w: tensor<f32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  return %w : tensor<f32>
}
func.func @main_grad() {
  return
}

// -----

// expected-error @+1 {{sharc-autodiff: '@main' has no scalar float output to use as the loss}}
func.func @main(%w: tensor<2xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<2xf32> {sharc.output = "y"}) {
  return %w : tensor<2xf32>
}

// -----

// expected-warning @+1 {{sharc-autodiff: '@main' has no trainable parameter}}
func.func @main(%x: tensor<2xf32> {sharc.input = "x"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %loss = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}
