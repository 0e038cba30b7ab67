// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd momentum=0.9 scheduler=warmup-lr" --sharc-loss-scale="initial-scale-power=8 loss-scale-window=4 hysteresis=2" | FileCheck %s
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd grad-accum=2" --sharc-loss-scale --sharc-data-parallel="world-size=2" | FileCheck %s --check-prefix=PARALLEL
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-loss-scale="loss-scale=128" | FileCheck %s --check-prefix=STATIC
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-loss-scale="scaling=false" | FileCheck %s --check-prefix=CHECKONLY
// RUN: not sharc-opt %s --sharc-optimizer --sharc-loss-scale --sharc-loss-scale 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not sharc-opt %s --sharc-loss-scale 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not sharc-opt %s --sharc-optimizer --sharc-loss-scale="hysteresis=0" 2>&1 | FileCheck %s --check-prefix=HYSTERESIS
// RUN: not sharc-opt %s --sharc-optimizer --sharc-loss-scale="initial-scale-power=65" 2>&1 | FileCheck %s --check-prefix=POWER

// sharc-loss-scale runs between sharc-optimizer and sharc-data-parallel: it
// scales the loss seed, checks the complete gradients for inf/NaN, updates
// DeepSpeed's scaler, unscales, and skips the update of a step that
// overflowed.

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %x: tensor<2x3xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32> {sharc.output = "out"}, tensor<3xf32> {sharc.grad = "w"}) {
  %0 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %1 = sharc.mul %0, %seed : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  return %seed, %1 : tensor<f32>, tensor<3xf32>
}

// The scaler's state follows the step counter, each with its initial value;
// the step returns the scale it used, the overflow flag and whether the
// overflow came at the minimum scale.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}
// CHECK-SAME: %[[BUF:[^:]*]]: tensor<3xf32> {sharc.state = #sharc.state<"w", "momentum_buffer">}
// CHECK-SAME: %[[STEP:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">}
// CHECK-SAME: %[[SCALE:[^:]*]]: tensor<f64> {sharc.state = #sharc.state<"", "loss_scale", init = 2.560000e+02>}
// CHECK-SAME: %[[HYST:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "loss_scale_hysteresis", init = 2.000000e+00>}
// CHECK-SAME: %[[LAST:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "last_overflow_step", init = -1.000000e+00>}
// CHECK-SAME: %[[SKIPPED:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "skipped_steps">}
// CHECK-SAME: tensor<i64> {sharc.state = #sharc.state<"", "step">}
// CHECK-SAME: tensor<f64> {sharc.state = #sharc.state<"", "loss_scale", init = 2.560000e+02>}
// CHECK-SAME: tensor<i64> {sharc.state = #sharc.state<"", "skipped_steps">}
// CHECK-SAME: tensor<f64> {sharc.output = "lr"}, tensor<f64> {sharc.output = "grad_norm"}, tensor<f64> {sharc.output = "loss_scale"}, tensor<i1> {sharc.output = "overflow"}, tensor<i1> {sharc.output = "at_min_scale"})
// CHECK: %[[SEEDSCALE:.*]] = sharc.cast %[[SCALE]] : tensor<f64> to tensor<f32>
// The schedule counts applied steps.
// CHECK: %[[APPLIED:.*]] = sharc.sub %[[STEP]], %[[SKIPPED]] : (tensor<i64>, tensor<i64>) -> tensor<i64>
// CHECK: %[[SEED:.*]] = sharc.mul %{{.*}}, %[[SEEDSCALE]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[CALL:.*]]:2 = call @main_grad(%{{.*}}, %{{.*}}, %[[SEED]])
// CHECK: %[[GRADS:.*]] = sharc.gradients %[[CALL]]#1
// The finite check: the sum of g * 0 is NaN exactly when some g is not.
// CHECK: %[[ZERO:.*]] = sharc.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[TIMESZERO:.*]] = sharc.mul %[[GRADS]], %[[ZERO]]
// CHECK: %[[SUM:.*]] = sharc.reduce %[[TIMESZERO]] {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>}
// CHECK: %[[WIDE:.*]] = sharc.cast %[[SUM]] : tensor<f32> to tensor<f64>
// CHECK: %[[OVERFLOW:.*]] = sharc.compare %[[WIDE]], %[[WIDE]] {predicate = #sharc.predicate<ne>}
// CHECK: %[[NEWSCALE:.*]] = sharc.select %[[OVERFLOW]], %{{.*}}, %{{.*}} : (tensor<i1>, tensor<f64>, tensor<f64>) -> tensor<f64>
// Unscaled by the scale after its update, as DeepSpeed does.
// CHECK: %[[INVERSE:.*]] = sharc.div %{{.*}}, %[[NEWSCALE]] : (tensor<f64>, tensor<f64>) -> tensor<f64>
// CHECK: %[[INV32:.*]] = sharc.cast %[[INVERSE]] : tensor<f64> to tensor<f32>
// CHECK: %[[UNSCALED:.*]] = sharc.mul %[[GRADS]], %[[INV32]]
// The update reads the unscaled gradient and is kept only without overflow.
// CHECK: sharc.cast %[[APPLIED]] : tensor<i64> to tensor<f64>
// CHECK: sharc.mul %{{.*}}, %[[BUF]]
// CHECK: %[[NEWBUF:.*]] = sharc.add %{{.*}}, %[[UNSCALED]]
// CHECK: %[[NEWW:.*]] = sharc.sub %[[W]], %{{.*}}
// CHECK: %[[KEEPW:.*]] = sharc.select %[[OVERFLOW]], %[[W]], %[[NEWW]]
// CHECK: %[[KEEPBUF:.*]] = sharc.select %[[OVERFLOW]], %[[BUF]], %[[NEWBUF]]
// CHECK: %[[ONE:.*]] = sharc.constant dense<1> : tensor<i64>
// CHECK: %[[NEXT:.*]] = sharc.add %[[STEP]], %[[ONE]]
// The reported norm is that of the loss's gradients (DeepSpeed's scaled norm
// over the scale used): the unscaled gradients' norm times updated / used,
// and infinite on a skipped step.
// CHECK: %[[RATIO:.*]] = sharc.div %[[NEWSCALE]], %[[SCALE]]
// CHECK: %[[NORM:.*]] = sharc.mul %{{.*}}, %[[RATIO]]
// CHECK: %[[INF:.*]] = sharc.constant dense<0x7FF0000000000000> : tensor<f64>
// CHECK: %[[REPORTED:.*]] = sharc.select %[[OVERFLOW]], %[[INF]], %[[NORM]]
// CHECK: %[[COUNT:.*]] = sharc.select %[[OVERFLOW]]
// CHECK: %[[NEWSKIPPED:.*]] = sharc.add %[[SKIPPED]], %[[COUNT]]
// CHECK: return %{{.*}}, %[[KEEPW]], %[[KEEPBUF]], %[[NEXT]], %[[NEWSCALE]], %{{.*}}, %{{.*}}, %[[NEWSKIPPED]], %{{.*}}, %[[REPORTED]], %[[SCALE]], %[[OVERFLOW]], %{{.*}}

// With data parallelism the seed is 1/(GAS N) times the scale, and the check
// reads the all-reduced gradients, as the [ranks, slice] rows whose sums
// sharc-zero's ranks would add (sharc-data-parallel sums like it).
// PARALLEL-LABEL: func.func @train_step(
// PARALLEL: %[[SEED:.*]] = sharc.constant dense<2.500000e-01> : tensor<f32>
// PARALLEL: sharc.micro_batch_loop count 2
// PARALLEL: %[[SCALED:.*]] = sharc.mul %[[SEED]], %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// PARALLEL: call @main_grad(%{{.*}}, %{{.*}}, %[[SCALED]])
// PARALLEL: %[[SUM:.*]] = sharc.all_reduce
// PARALLEL: %[[PAD:.*]] = sharc.concat %[[SUM]], %{{.*}} {axis = 0 : i64} : (tensor<3xf32>, tensor<1xf32>) -> tensor<4xf32>
// PARALLEL: %[[ROWS:.*]] = sharc.reshape %[[PAD]] : tensor<4xf32> to tensor<2x2xf32>
// PARALLEL: sharc.mul %[[ROWS]], %{{.*}} : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
// PARALLEL: sharc.compare

// A static scale: a constant, no scaler state, no at_min_scale.
// STATIC-LABEL: func.func @train_step(
// STATIC-NOT: loss_scale_hysteresis
// STATIC-SAME: tensor<i64> {sharc.state = #sharc.state<"", "skipped_steps">}
// STATIC-SAME: tensor<f64> {sharc.output = "loss_scale"}, tensor<i1> {sharc.output = "overflow"})
// STATIC: %[[S:.*]] = sharc.constant dense<1.280000e+02> : tensor<f64>
// STATIC: sharc.div %{{.*}}, %[[S]]

// The check alone (bf16's check_grad_overflow): no scale anywhere.
// CHECKONLY-LABEL: func.func @train_step(
// CHECKONLY-SAME: tensor<i1> {sharc.output = "overflow"})
// CHECKONLY-NOT: loss_scale
// CHECKONLY: sharc.compare
// CHECKONLY-NOT: sharc.div
// CHECKONLY: return

// TWICE: error: sharc-loss-scale: '@train_step' already skips steps
// NOSTEP: error: sharc-loss-scale needs '@train_step' (run sharc-optimizer first)
// HYSTERESIS: error: option 'hysteresis' must be between 1 and
// POWER: error: option 'initial-scale-power' must be between 0 and 64, got 65
