// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=SGD
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd lr=0.1 momentum=0.9 nesterov=true weight-decay=0.01" | FileCheck %s --check-prefix=NESTEROV
// RUN: sharc-opt %s --sharc-optimizer="grad-accum=2 clip=1.5 weight-decay=0.1" | FileCheck %s --check-prefix=ADAMW
// RUN: sharc-opt %s --sharc-optimizer="optimizer=adam adam-w-mode=false bias-correction=false weight-decay=0.1" | FileCheck %s --check-prefix=ADAM
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd scheduler=warmup-decay-lr warmup-type=linear warmup-num-steps=10 total-num-steps=100" | FileCheck %s --check-prefix=SCHED

// What sharc-optimizer builds around a hand-written gradient function: w is
// trained, c is frozen (it has no gradient), x is the data.

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                     %x: tensor<2x3xf32> {sharc.input = "x"},
                     %c: tensor<f32> {sharc.param = #sharc.param<"c", "frozen">},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32> {sharc.output = "out"}, tensor<3xf32> {sharc.grad = "w"}) {
  %0 = sharc.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = sharc.reduce %0 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  %2 = sharc.add %1, %c : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %3 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %4 = sharc.mul %3, %seed : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  return %2, %4 : tensor<f32>, tensor<3xf32>
}

// Plain SGD has no state; parameters, step and data come in; the loss, the
// new w, the new step, the learning rate and the gradients' global norm go
// out (the norm even without clipping: the metrics report it).
// SGD-LABEL: func.func @train_step(
// SGD-SAME: %[[W:.*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// SGD-SAME: %[[C:.*]]: tensor<f32> {sharc.param = #sharc.param<"c", "frozen">},
// SGD-SAME: %[[STEP:.*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">},
// SGD-SAME: %[[X:.*]]: tensor<2x3xf32> {sharc.input = "x"})
// SGD-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// SGD-SAME: tensor<i64> {sharc.state = #sharc.state<"", "step">}, tensor<f64> {sharc.output = "lr"}, tensor<f64> {sharc.output = "grad_norm"})
// SGD: %[[SEED:.*]] = sharc.constant dense<1.000000e+00> : tensor<f32>
// SGD: %[[G:.*]]:2 = call @main_grad(%[[W]], %[[X]], %[[C]], %[[SEED]])
// The complete local gradients, named by parameter, for sharc-data-parallel.
// SGD: %[[GW:.*]] = sharc.gradients %[[G]]#1 {params = ["w"]} : tensor<3xf32>
// SGD: %[[SQ:.*]] = sharc.mul %[[GW]], %[[GW]]
// SGD: %[[SUM:.*]] = sharc.reduce %[[SQ]] {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<3xf32>) -> tensor<f32>
// SGD: %[[SUM64:.*]] = sharc.cast %[[SUM]] : tensor<f32> to tensor<f64>
// SGD: %[[NORM:.*]] = sharc.sqrt %[[SUM64]] : tensor<f64>
// SGD: %[[LR:.*]] = sharc.constant dense<1.000000e-01> : tensor<f64>
// SGD: %[[LR32:.*]] = sharc.cast %[[LR]] : tensor<f64> to tensor<f32>
// SGD: %[[DELTA:.*]] = sharc.mul %[[LR32]], %[[GW]]
// SGD: %[[NEWW:.*]] = sharc.sub %[[W]], %[[DELTA]]
// SGD: %[[ONE:.*]] = sharc.constant dense<1> : tensor<i64>
// SGD: %[[NEXT:.*]] = sharc.add %[[STEP]], %[[ONE]]
// SGD: return %[[G]]#0, %[[NEWW]], %[[NEXT]], %[[LR]], %[[NORM]]

// SGD with Nesterov momentum and L2 weight decay: g += wd p;
// buf = momentum buf + g; p -= lr (g + momentum buf).
// NESTEROV-LABEL: func.func @train_step(
// NESTEROV-SAME: %[[W:[^:]*]]: tensor<3xf32>
// NESTEROV-SAME: %[[BUF:[^:]*]]: tensor<3xf32> {sharc.state = #sharc.state<"w", "momentum_buffer">}
// NESTEROV-SAME: tensor<3xf32> {sharc.state = #sharc.state<"w", "momentum_buffer">}, tensor<i64>
// NESTEROV: %[[G:.*]]:2 = call @main_grad
// NESTEROV: %[[GW:.*]] = sharc.gradients %[[G]]#1
// NESTEROV: %[[LR:.*]] = sharc.cast {{.*}} : tensor<f64> to tensor<f32>
// NESTEROV: %[[WD:.*]] = sharc.constant dense<0.00999999977> : tensor<f32>
// NESTEROV: %[[MU:.*]] = sharc.constant dense<0.899999976> : tensor<f32>
// NESTEROV: %[[DECAY:.*]] = sharc.mul %[[WD]], %[[W]]
// NESTEROV: %[[GD:.*]] = sharc.add %[[GW]], %[[DECAY]]
// NESTEROV: %[[OLD:.*]] = sharc.mul %[[MU]], %[[BUF]]
// NESTEROV: %[[NEWBUF:.*]] = sharc.add %[[OLD]], %[[GD]]
// NESTEROV: %[[LOOK:.*]] = sharc.mul %[[MU]], %[[NEWBUF]]
// NESTEROV: %[[DIR:.*]] = sharc.add %[[GD]], %[[LOOK]]
// NESTEROV: %[[DELTA:.*]] = sharc.mul %[[LR]], %[[DIR]]
// NESTEROV: %[[NEWW:.*]] = sharc.sub %[[W]], %[[DELTA]]
// NESTEROV: return %[[G]]#0, %[[NEWW]], %[[NEWBUF]]

// AdamW with two micro-batches and clipping: the data has twice the rows;
// each half goes to one call with loss_seed 1/2; losses are averaged and
// gradients summed; then clipping by global norm and the FusedAdam update.
// ADAMW-LABEL: func.func @train_step(
// ADAMW-SAME: %[[W:[^:]*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// ADAMW-SAME: %[[C:[^:]*]]: tensor<f32> {sharc.param = #sharc.param<"c", "frozen">},
// ADAMW-SAME: %[[M:[^:]*]]: tensor<3xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
// ADAMW-SAME: %[[V:[^:]*]]: tensor<3xf32> {sharc.state = #sharc.state<"w", "exp_avg_sq">},
// ADAMW-SAME: %[[STEP:[^:]*]]: tensor<i64> {sharc.state = #sharc.state<"", "step">},
// ADAMW-SAME: %[[X:[^:]*]]: tensor<4x3xf32> {sharc.input = "x"})
// ADAMW-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
// ADAMW-SAME: tensor<3xf32> {sharc.state = #sharc.state<"w", "exp_avg">}, tensor<3xf32> {sharc.state = #sharc.state<"w", "exp_avg_sq">},
// ADAMW-SAME: tensor<i64> {sharc.state = #sharc.state<"", "step">}, tensor<f64> {sharc.output = "lr"}, tensor<f64> {sharc.output = "grad_norm"})
// ADAMW: %[[SEED:.*]] = sharc.constant dense<5.000000e-01> : tensor<f32>
// Gradient accumulation is one loop over the micro-batches, whatever their
// number: rows [2k, 2k + 2) of x in iteration k, the sums carried from zeros.
// ADAMW: %[[ZERO:.*]] = sharc.constant dense<0.000000e+00> : tensor<f32>
// ADAMW: %[[ZEROS:.*]] = sharc.constant dense<0.000000e+00> : tensor<3xf32>
// ADAMW: %[[SUMS:.*]]:2 = sharc.micro_batch_loop count 2 inputs(%[[X]] : tensor<4x3xf32>) inits(%[[ZERO]], %[[ZEROS]] : tensor<f32>, tensor<3xf32>) -> tensor<f32>, tensor<3xf32> {
// ADAMW-NEXT: ^bb0(%[[XK:.*]]: tensor<2x3xf32>, %[[LACC:.*]]: tensor<f32>, %[[GACC:.*]]: tensor<3xf32>):
// ADAMW-NEXT: %[[GK:.*]]:2 = func.call @main_grad(%[[W]], %[[XK]], %[[C]], %[[SEED]])
// ADAMW-NEXT: %[[LNEXT:.*]] = sharc.add %[[LACC]], %[[GK]]#0
// ADAMW-NEXT: %[[GNEXT:.*]] = sharc.add %[[GACC]], %[[GK]]#1
// ADAMW-NEXT: sharc.yield %[[LNEXT]], %[[GNEXT]]
// ADAMW-NEXT: }
// ADAMW: %[[TWO:.*]] = sharc.constant dense<2.000000e+00> : tensor<f32>
// ADAMW: %[[LOSS:.*]] = sharc.div %[[SUMS]]#0, %[[TWO]]
// ADAMW: %[[GW:.*]] = sharc.gradients %[[SUMS]]#1 {params = ["w"]} : tensor<3xf32>
// ADAMW: %[[SQ:.*]] = sharc.mul %[[GW]], %[[GW]]
// ADAMW: %[[SUM:.*]] = sharc.reduce %[[SQ]] {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<3xf32>) -> tensor<f32>
// ADAMW: %[[SUM64:.*]] = sharc.cast %[[SUM]] : tensor<f32> to tensor<f64>
// ADAMW: %[[NORM:.*]] = sharc.sqrt %[[SUM64]] : tensor<f64>
// ADAMW: %[[CLIP:.*]] = sharc.constant dense<1.500000e+00> : tensor<f64>
// ADAMW: %[[TINY:.*]] = sharc.constant dense<9.9999999999999995E-7> : tensor<f64>
// ADAMW: %[[NORMEPS:.*]] = sharc.add %[[NORM]], %[[TINY]]
// ADAMW: %[[RATIO:.*]] = sharc.div %[[NORMEPS]], %[[CLIP]]
// ADAMW: %[[COMBINED:.*]] = sharc.max %{{.*}}, %[[RATIO]]
// ADAMW: %[[COEF:.*]] = sharc.div %{{.*}}, %[[COMBINED]]
// ADAMW: %[[COEF32:.*]] = sharc.cast %[[COEF]] : tensor<f64> to tensor<f32>
// ADAMW: %[[GC:.*]] = sharc.mul %[[GW]], %[[COEF32]]
// ADAMW: %[[T:.*]] = sharc.cast %[[STEP]] : tensor<i64> to tensor<f64>
// ADAMW: %[[LR:.*]] = sharc.constant dense<1.000000e-03> : tensor<f64>
// ADAMW: %[[B1:.*]] = sharc.constant dense<9.000000e-01> : tensor<f64>
// ADAMW: %[[B2:.*]] = sharc.constant dense<0.99899999999999999> : tensor<f64>
// ADAMW: %[[T1:.*]] = sharc.add %[[T]], %{{.*}}
// ADAMW: %[[B1T:.*]] = sharc.pow %[[B1]], %[[T1]]
// ADAMW: %[[BC1:.*]] = sharc.sub %{{.*}}, %[[B1T]]
// ADAMW: %[[B2T:.*]] = sharc.pow %[[B2]], %[[T1]]
// ADAMW: %[[BC2:.*]] = sharc.sub %{{.*}}, %[[B2T]]
// ADAMW: %[[LR32:.*]] = sharc.cast %[[LR]] : tensor<f64> to tensor<f32>
// ADAMW: %[[WD:.*]] = sharc.constant dense<1.000000e-01> : tensor<f32>
// ADAMW: %[[ONE:.*]] = sharc.constant dense<1.000000e+00> : tensor<f32>
// ADAMW: %[[B1F:.*]] = sharc.cast %[[B1]] : tensor<f64> to tensor<f32>
// ADAMW: %[[OMB1:.*]] = sharc.sub %[[ONE]], %[[B1F]]
// ADAMW: %[[B2F:.*]] = sharc.cast %[[B2]] : tensor<f64> to tensor<f32>
// ADAMW: %[[OMB2:.*]] = sharc.sub %[[ONE]], %[[B2F]]
// ADAMW: %[[EPS:.*]] = sharc.constant dense<9.99999993E-9> : tensor<f32>
// ADAMW: %[[BC1F:.*]] = sharc.cast %[[BC1]] : tensor<f64> to tensor<f32>
// ADAMW: %[[BC2F:.*]] = sharc.cast %[[BC2]] : tensor<f64> to tensor<f32>
// ADAMW: %[[MG:.*]] = sharc.mul %[[OMB1]], %[[GC]]
// ADAMW: %[[MOLD:.*]] = sharc.mul %[[B1F]], %[[M]]
// ADAMW: %[[NEWM:.*]] = sharc.add %[[MOLD]], %[[MG]]
// ADAMW: %[[VG:.*]] = sharc.mul %[[OMB2]], %[[GC]]
// ADAMW: %[[VGG:.*]] = sharc.mul %[[VG]], %[[GC]]
// ADAMW: %[[VOLD:.*]] = sharc.mul %[[B2F]], %[[V]]
// ADAMW: %[[NEWV:.*]] = sharc.add %[[VOLD]], %[[VGG]]
// ADAMW: %[[MHAT:.*]] = sharc.div %[[NEWM]], %[[BC1F]]
// ADAMW: %[[VHAT:.*]] = sharc.div %[[NEWV]], %[[BC2F]]
// ADAMW: %[[ROOT:.*]] = sharc.sqrt %[[VHAT]]
// ADAMW: %[[DENOM:.*]] = sharc.add %[[ROOT]], %[[EPS]]
// ADAMW: %[[RATIO2:.*]] = sharc.div %[[MHAT]], %[[DENOM]]
// ADAMW: %[[DECAY:.*]] = sharc.mul %[[WD]], %[[W]]
// ADAMW: %[[UPDATE:.*]] = sharc.add %[[RATIO2]], %[[DECAY]]
// ADAMW: %[[DELTA:.*]] = sharc.mul %[[LR32]], %[[UPDATE]]
// ADAMW: %[[NEWW:.*]] = sharc.sub %[[W]], %[[DELTA]]
// ADAMW: %[[NEXT:.*]] = sharc.add %[[STEP]], %{{.*}} : (tensor<i64>, tensor<i64>) -> tensor<i64>
// ADAMW: return %[[LOSS]], %[[NEWW]], %[[NEWM]], %[[NEWV]], %[[NEXT]], %[[LR]], %[[NORM]]

// Adam with L2 decay (adam-w-mode=false) and without bias correction: the
// decay joins the gradient before the moments; no pow, no division by the
// corrections.
// ADAM-LABEL: func.func @train_step(
// ADAM-SAME: %[[W:[^:]*]]: tensor<3xf32>
// ADAM: %[[G:.*]]:2 = call @main_grad
// ADAM: %[[GW:.*]] = sharc.gradients %[[G]]#1
// ADAM-NOT: sharc.pow
// ADAM: %[[WD:.*]] = sharc.constant dense<1.000000e-01> : tensor<f32>
// ADAM: %[[DECAY:.*]] = sharc.mul %[[WD]], %[[W]]
// ADAM: %[[GD:.*]] = sharc.add %[[GW]], %[[DECAY]]
// ADAM: sharc.mul %{{.*}}, %[[GD]]
// ADAM: %[[ROOT:.*]] = sharc.sqrt %{{.*}} : tensor<3xf32>
// ADAM-NEXT: %[[DENOM:.*]] = sharc.add %[[ROOT]], %{{.*}}
// ADAM-NEXT: %[[UPDATE:.*]] = sharc.div %{{.*}}, %[[DENOM]]
// ADAM-NEXT: %[[DELTA:.*]] = sharc.mul %{{.*}}, %[[UPDATE]]
// ADAM-NEXT: sharc.sub %[[W]], %[[DELTA]]
// ADAM-NOT: sharc.pow

// The learning rate comes from the step counter, in f64.
// SCHED-LABEL: func.func @train_step(
// SCHED: %[[T:.*]] = sharc.cast %{{.*}} : tensor<i64> to tensor<f64>
// SCHED: %[[LAST:.*]] = sharc.sub %[[T]], %{{.*}} : (tensor<f64>, tensor<f64>) -> tensor<f64>
// SCHED: %[[WARMING:.*]] = sharc.compare %[[LAST]], %{{.*}} {predicate = #sharc.predicate<lt>}
// SCHED: %[[GAMMA:.*]] = sharc.select %[[WARMING]]
// SCHED: %[[SCALED:.*]] = sharc.mul %{{.*}}, %[[GAMMA]]
// SCHED: %[[LR:.*]] = sharc.add %{{.*}}, %[[SCALED]] : (tensor<f64>, tensor<f64>) -> tensor<f64>
// SCHED: sharc.cast %[[LR]] : tensor<f64> to tensor<f32>
// SCHED: return {{.*}}, %[[LR]], %{{[0-9]+}} :
