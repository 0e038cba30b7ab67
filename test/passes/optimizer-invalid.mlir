// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-optimizer="grad-accum=2"

// expected-error @below {{no gradient function '@main_grad' (sharc-autodiff makes it)}}
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// expected-error @below {{the last argument of a gradient function must be the scalar float input 'loss_seed'}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  %0 = sharc.constant dense<0.0> : tensor<f32>
  return %0, %w : tensor<f32>, tensor<3xf32>
}

// -----

// expected-error @below {{the first result of a gradient function must be the loss, of the loss seed's type 'tensor<f32>'}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<3xf32> {sharc.grad = "w"}) {
  return %w : tensor<3xf32>
}

// -----

// expected-error @below {{result #1 of a gradient function has no 'sharc.grad'}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32>) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}

// -----

// expected-error @below {{result #1 is the gradient of 'v', which is no parameter argument}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "v"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}

// -----

// expected-error @below {{parameter 'w' has two gradients}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w, %w : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// expected-error @below {{the gradient of 'w' has type 'tensor<2xf32>', its parameter 'tensor<3xf32>'}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %g: tensor<2xf32>,
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<2xf32> {sharc.grad = "w"}) {
  return %seed, %g : tensor<f32>, tensor<2xf32>
}

// -----

// expected-error @below {{data input 'scale' is a scalar: it cannot be split into 2 micro-batches}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %scale: tensor<f32> {sharc.input = "scale"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}

// -----

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}

// expected-error @below {{cannot build the training step: '@train_step' already exists}}
func.func @train_step() {
  return
}

// -----

// expected-error @below {{data input 'x' has no elements (type 'tensor<0x3xf32>'): a training step needs at least one row of every input}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %x: tensor<0x3xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}

// -----

// expected-error @below {{data input 'x' of type 'tensor<549755813888x2xf32>' in 2 micro-batches would have more than 1099511627776 elements}}
func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %x: tensor<549755813888x2xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}
