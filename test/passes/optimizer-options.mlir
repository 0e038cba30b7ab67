// Invalid sharc-optimizer options are errors that name the option.

// RUN: not sharc-opt %s --sharc-optimizer="optimizer=adagrad" 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// OPTIMIZER: error: unknown optimizer 'adagrad' (expected sgd, adam or adamw)
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=cosine" 2>&1 | FileCheck %s --check-prefix=SCHEDULER
// SCHEDULER: error: unknown scheduler 'cosine' (expected none, warmup-lr, warmup-decay-lr, warmup-cosine-lr, one-cycle or lr-range-test)
// RUN: not sharc-opt %s --sharc-optimizer="warmup-type=cubic" 2>&1 | FileCheck %s --check-prefix=WARMUP-TYPE
// WARMUP-TYPE: error: unknown warmup type 'cubic' (expected log or linear)
// RUN: not sharc-opt %s --sharc-optimizer="lr=-0.1" 2>&1 | FileCheck %s --check-prefix=LR
// LR: error: option 'lr' must be at least 0, got -0.1
// RUN: not sharc-opt %s --sharc-optimizer="beta1=1" 2>&1 | FileCheck %s --check-prefix=BETA1
// BETA1: error: option 'beta1' must be in [0, 1), got 1
// RUN: not sharc-opt %s --sharc-optimizer="beta2=-0.5" 2>&1 | FileCheck %s --check-prefix=BETA2
// BETA2: error: option 'beta2' must be in [0, 1), got -0.5
// RUN: not sharc-opt %s --sharc-optimizer="eps=0" 2>&1 | FileCheck %s --check-prefix=EPS
// EPS: error: option 'eps' must be positive and finite, got 0
// RUN: not sharc-opt %s --sharc-optimizer="grad-accum=0" 2>&1 | FileCheck %s --check-prefix=GAS
// GAS: error: option 'grad-accum' must be between 1 and 2147483648, got 0
// RUN: not sharc-opt %s --sharc-optimizer="grad-accum=2147483649" 2>&1 | FileCheck %s --check-prefix=GAS-MAX
// GAS-MAX: error: option 'grad-accum' must be between 1 and 2147483648, got 2147483649
// The optimizer knows nothing of ranks: data parallelism is sharc-data-parallel's.
// RUN: not sharc-opt %s --sharc-optimizer="world-size=2" 2>&1 | FileCheck %s --check-prefix=WORLD
// WORLD: no such option world-size
// RUN: not sharc-opt %s --sharc-optimizer="clip=-1" 2>&1 | FileCheck %s --check-prefix=CLIP
// CLIP: error: option 'clip' must be at least 0, got -1
// RUN: not sharc-opt %s --sharc-optimizer="optimizer=sgd nesterov=true" 2>&1 | FileCheck %s --check-prefix=NESTEROV
// NESTEROV: error: option 'nesterov' needs a positive 'momentum'
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=warmup-decay-lr" 2>&1 | FileCheck %s --check-prefix=TOTAL
// TOTAL: error: option 'total-num-steps' must be at least 1, got 0
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=warmup-cosine-lr warmup-num-steps=1 total-num-steps=2" 2>&1 | FileCheck %s --check-prefix=COSINE
// COSINE: error: option 'total-num-steps' (2) must exceed the warmup steps (2, warmup-num-steps raised to at least 2) for warmup-cosine-lr
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=warmup-cosine-lr total-num-steps=2000 cos-min-ratio=1.5" 2>&1 | FileCheck %s --check-prefix=RATIO
// RATIO: error: option 'cos-min-ratio' must be in [0, 1], got 1.5
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=one-cycle cycle-first-step-size=0" 2>&1 | FileCheck %s --check-prefix=CYCLE
// CYCLE: error: option 'cycle-first-step-size' must be at least 1, got 0
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=one-cycle cycle-second-step-size=-2" 2>&1 | FileCheck %s --check-prefix=SECOND
// SECOND: error: option 'cycle-second-step-size' must be -1 or at least 1, got -2
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=one-cycle cycle-max-mom=1.2" 2>&1 | FileCheck %s --check-prefix=MOM
// MOM: error: option 'cycle-max-mom' must be in [0, 1), got 1.2
// RUN: not sharc-opt %s --sharc-optimizer="scheduler=lr-range-test lr-range-test-step-size=0" 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: error: option 'lr-range-test-step-size' must be at least 1, got 0

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32>, tensor<3xf32> {sharc.grad = "w"}) {
  return %seed, %w : tensor<f32>, tensor<3xf32>
}
