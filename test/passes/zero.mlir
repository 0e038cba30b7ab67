// RUN: sharc-opt %s --sharc-optimizer="optimizer=adamw clip=1.0" --sharc-zero="world-size=2 zero-stage=1" | FileCheck %s
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-zero="world-size=2 zero-stage=1 reduce-bucket-size=4" | FileCheck %s --check-prefix=BUCKETS
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-loss-scale --sharc-zero="world-size=2 zero-stage=1" | FileCheck %s --check-prefix=SCALED
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-zero="world-size=1 zero-stage=1" | FileCheck %s --check-prefix=ONE
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd" --sharc-zero="world-size=2 zero-stage=2" | FileCheck %s --check-prefix=STAGE2
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd grad-accum=2" --sharc-zero="world-size=2 zero-stage=2" | FileCheck %s --check-prefix=ACCUM
// RUN: sharc-opt %s --sharc-optimizer="optimizer=adamw" --sharc-zero="world-size=2 zero-stage=3 param-persistence-threshold=3" | FileCheck %s --check-prefix=STAGE3
// RUN: not sharc-opt %s --sharc-optimizer --sharc-zero="world-size=2 zero-stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE4
// RUN: not sharc-opt %s --sharc-zero="world-size=2 zero-stage=1" 2>&1 | FileCheck %s --check-prefix=NOSTEP

// sharc-zero (ZeRO stage 1) runs after sharc-optimizer and before
// sharc-data-parallel: the gradients are reduce-scattered, the update runs
// on each rank's slice of every parameter with that slice's optimizer
// state, and the new slices are all-gathered.  w has 3 elements: 2 per rank,
// the last one padding; b has 4: 2 per rank.

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %b: tensor<2x2xf32> {sharc.param = #sharc.param<"b", "b">},
                     %x: tensor<2x3xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32> {sharc.output = "out"}, tensor<3xf32> {sharc.grad = "w"},
        tensor<2x2xf32> {sharc.grad = "b"}) {
  %0 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %1 = sharc.mul %0, %seed : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %2 = sharc.mul %b, %seed : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  return %seed, %1, %2 : tensor<f32>, tensor<3xf32>, tensor<2x2xf32>
}

// The optimizer state holds the slices; the parameters stay whole.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}
// CHECK-SAME: %[[B:[^:]*]]: tensor<2x2xf32> {sharc.param = #sharc.param<"b", "b">}
// CHECK-SAME: %[[WM:[^:]*]]: tensor<2xf32> {sharc.slice = #sharc.slice<tensor<3xf32>, ranks = 2>, sharc.state = #sharc.state<"w", "exp_avg">}
// CHECK-SAME: %[[WV:[^:]*]]: tensor<2xf32> {sharc.slice = #sharc.slice<tensor<3xf32>, ranks = 2>, sharc.state = #sharc.state<"w", "exp_avg_sq">}
// CHECK-SAME: %[[BM:[^:]*]]: tensor<2xf32> {sharc.slice = #sharc.slice<tensor<2x2xf32>, ranks = 2>, sharc.state = #sharc.state<"b", "exp_avg">}
// CHECK-SAME: %[[BV:[^:]*]]: tensor<2xf32> {sharc.slice = #sharc.slice<tensor<2x2xf32>, ranks = 2>, sharc.state = #sharc.state<"b", "exp_avg_sq">}
// CHECK-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}, tensor<2x2xf32> {sharc.param = #sharc.param<"b", "b">}, tensor<2xf32> {sharc.state = #sharc.state<"w", "exp_avg">}, tensor<2xf32> {sharc.state = #sharc.state<"w", "exp_avg_sq">}, tensor<2xf32> {sharc.state = #sharc.state<"b", "exp_avg">}, tensor<2xf32> {sharc.state = #sharc.state<"b", "exp_avg_sq">}
// CHECK-SAME: attributes {sharc.zero_stage = 1 : i64}
// CHECK-NOT: sharc.gradients
// The gradients as [ranks, slice] rows, w padded with a zero, side by side
// in one bucket, reduce-scattered.
// CHECK: %[[GRADS:.*]]:3 = call @main_grad(
// CHECK: %[[GW:.*]] = sharc.concat %{{.*}}, %[[ZERO:.*]] {axis = 0 : i64} : (tensor<3xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[GWROWS:.*]] = sharc.reshape %[[GW]] : tensor<4xf32> to tensor<2x2xf32>
// CHECK: %[[GBFLAT:.*]] = sharc.reshape %[[GRADS]]#2 : tensor<2x2xf32> to tensor<4xf32>
// CHECK: %[[GBROWS:.*]] = sharc.reshape %[[GBFLAT]] : tensor<4xf32> to tensor<2x2xf32>
// CHECK: %[[BUCKET:.*]] = sharc.concat %[[GWROWS]], %[[GBROWS]] {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
// CHECK: %[[MINE:.*]] = sharc.reduce_scatter %[[BUCKET]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x4xf32>) -> tensor<1x4xf32>
// CHECK: sharc.slice %[[MINE]] {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<1x4xf32> to tensor<1x2xf32>
// CHECK: sharc.slice %[[MINE]] {start = array<i64: 0, 2>, stride = array<i64: 1, 1>} : tensor<1x4xf32> to tensor<1x2xf32>
// This rank's slices of the parameters: no communication.
// CHECK: sharc.shard %{{.*}} {ranks = 2 : i64} : (tensor<2x2xf32>) -> tensor<1x2xf32>
// CHECK: sharc.shard %{{.*}} {ranks = 2 : i64} : (tensor<2x2xf32>) -> tensor<1x2xf32>
// The clipping norm: the slices' sums of squares, added up, one all-reduce.
// CHECK: %[[SQ:.*]] = sharc.reduce %{{.*}} {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<2xf32>) -> tensor<f32>
// CHECK: sharc.reduce %{{.*}} {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<2xf32>) -> tensor<f32>
// CHECK: %[[PARTIAL:.*]] = sharc.add %{{.*}}, %{{.*}} : (tensor<f64>, tensor<f64>) -> tensor<f64>
// CHECK: %[[NORMSQ:.*]] = sharc.all_reduce %[[PARTIAL]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<f64>
// CHECK: sharc.sqrt %[[NORMSQ]] : tensor<f64>
// CHECK-NOT: sharc.all_reduce
// The update on the slices, and the new slices gathered.
// CHECK: sharc.mul %{{.*}}, %[[WM]] : (tensor<f32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK: %[[NEW:.*]] = sharc.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<1x4xf32>
// CHECK: %[[ALL:.*]] = sharc.all_gather %[[NEW]] {ranks = 2 : i64} : (tensor<1x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[WCOLS:.*]] = sharc.slice %[[ALL]] {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<2x4xf32> to tensor<2x2xf32>
// CHECK: %[[WPAD:.*]] = sharc.reshape %[[WCOLS]] : tensor<2x2xf32> to tensor<4xf32>
// CHECK: %[[WNEW:.*]] = sharc.slice %[[WPAD]] {start = array<i64: 0>, stride = array<i64: 1>} : tensor<4xf32> to tensor<3xf32>
// CHECK: return %{{.*}}, %[[WNEW]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<f32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>, tensor<f64>

// Reduce-scatter buckets of at most 4 elements: one parameter each; the
// all-gather has its own bucket size (allgather-bucket-size, 5e8 here).
// BUCKETS-COUNT-2: sharc.reduce_scatter %{{.*}} : (tensor<2x2xf32>) -> tensor<1x2xf32>
// BUCKETS: sharc.all_gather %{{.*}} : (tensor<1x4xf32>) -> tensor<2x4xf32>
// BUCKETS-NOT: sharc.all_gather

// The fp16 overflow test sums g * 0 over the slices, then over the ranks,
// and the skip selects work on the slices.
// SCALED: sharc.reduce_scatter
// SCALED: %[[OVERFLOWSUM:.*]] = sharc.all_reduce %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<f64>
// SCALED: sharc.compare %[[OVERFLOWSUM]], %[[OVERFLOWSUM]] {predicate = #sharc.predicate<ne>}
// SCALED: sharc.select %{{.*}}, %{{.*}}, %{{.*}} : (tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// SCALED: sharc.all_gather

// One rank owns everything: only the stage is recorded.
// ONE: attributes {sharc.zero_stage = 1 : i64}
// ONE: sharc.gradients
// ONE-NOT: sharc.reduce_scatter

// Stage 2: the same step, its reduce-scatter buckets in backward's order
// (the reverse of the parameters': b's rows before w's);
// sharc-schedule-collectives moves them into backward once the gradient
// function is inlined (test/passes/schedule-collectives.mlir).
// STAGE2: attributes {sharc.zero_stage = 2 : i64}
// STAGE2: %[[G:.*]]:3 = call @main_grad(
// STAGE2: %[[GB:.*]] = sharc.reshape %[[G]]#2 : tensor<2x2xf32> to tensor<4xf32>
// STAGE2: %[[GBROWS:.*]] = sharc.reshape %[[GB]] : tensor<4xf32> to tensor<2x2xf32>
// STAGE2: %[[GW:.*]] = sharc.concat %[[G]]#1, %{{.*}} {axis = 0 : i64}
// STAGE2: %[[GWROWS:.*]] = sharc.reshape %[[GW]] : tensor<4xf32> to tensor<2x2xf32>
// STAGE2: %[[BUCKET:.*]] = sharc.concat %[[GBROWS]], %[[GWROWS]] {axis = 1 : i64}
// STAGE2: sharc.reduce_scatter %[[BUCKET]]
// The new parameters are gathered in the parameters' order (w, then b).
// STAGE2: sharc.all_gather
// STAGE2: sharc.slice %{{.*}} {start = array<i64: 0, 0>, stride = array<i64: 1, 1>} : tensor<2x4xf32> to tensor<2x2xf32>
// STAGE2: sharc.reshape %{{.*}} : tensor<2x2xf32> to tensor<4xf32>
// STAGE2: sharc.slice %{{.*}} {start = array<i64: 0>, stride = array<i64: 1>} : tensor<4xf32> to tensor<3xf32>

// Stage 2 with two micro-batches: the loop carries this rank's slices of
// the gradients (from zeros) and reduce-scatters each micro-batch's.
// ACCUM-LABEL: func.func @train_step(
// ACCUM-NOT: tensor<2x2xf32> = sharc.constant
// ACCUM: %[[ZW:.*]] = sharc.constant dense<0.000000e+00> : tensor<2xf32>
// ACCUM-NEXT: %[[ZB:.*]] = sharc.constant dense<0.000000e+00> : tensor<2xf32>
// ACCUM-NEXT: sharc.micro_batch_loop count 2 inputs(%{{.*}} : tensor<4x3xf32>) inits(%{{.*}}, %[[ZW]], %[[ZB]] : tensor<f32>, tensor<2xf32>, tensor<2xf32>) -> tensor<f32>, tensor<2xf32>, tensor<2xf32> {
// ACCUM: ^bb0(%{{.*}}: tensor<2x3xf32>, %{{.*}}: tensor<f32>, %[[SW:.*]]: tensor<2xf32>, %[[SB:.*]]: tensor<2xf32>):
// ACCUM: %[[G:.*]]:3 = func.call @main_grad(
// ACCUM: %[[RS:.*]] = sharc.reduce_scatter %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x4xf32>) -> tensor<1x4xf32>
// ACCUM-DAG: sharc.add %[[SW]], %{{.*}} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// ACCUM-DAG: sharc.add %[[SB]], %{{.*}} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// ACCUM: sharc.yield
// ACCUM-NOT: sharc.reduce_scatter
// STAGE4: error: option 'zero-stage' must be between 0 and 3, got 4

// Stage 3: b (4 elements, above the threshold of 3) is partitioned: its
// argument and result are this rank's slice, gathered where the step starts
// for the gradient function; its update reads the slice and nothing gathers
// it at the end.  w (3 elements) stays whole, as at stage 2.
// STAGE3-LABEL: func.func @train_step(
// STAGE3-SAME: %[[W:[^:]*]]: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}
// STAGE3-SAME: %[[B:[^:]*]]: tensor<2xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<2x2xf32>, ranks = 2>}
// STAGE3-SAME: tensor<2xf32> {sharc.slice = #sharc.slice<tensor<2x2xf32>, ranks = 2>, sharc.state = #sharc.state<"b", "exp_avg">}
// STAGE3-SAME: -> (tensor<f32> {sharc.output = "loss"}, tensor<3xf32> {sharc.param = #sharc.param<"w", "w">}, tensor<2xf32> {sharc.param = #sharc.param<"b", "b">}
// STAGE3-SAME: attributes {sharc.zero_stage = 3 : i64}
// STAGE3-NEXT: %[[ROWS:.*]] = sharc.reshape %[[B]] : tensor<2xf32> to tensor<1x2xf32>
// STAGE3-NEXT: %[[ALL:.*]] = sharc.all_gather %[[ROWS]] {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
// STAGE3-NEXT: %[[FLAT:.*]] = sharc.reshape %[[ALL]] : tensor<2x2xf32> to tensor<4xf32>
// STAGE3-NEXT: %[[WHOLE:.*]] = sharc.reshape %[[FLAT]] : tensor<4xf32> to tensor<2x2xf32>
// STAGE3: call @main_grad(%[[W]], %[[WHOLE]],
// STAGE3: sharc.reduce_scatter
// STAGE3-NOT: sharc.shard %[[B]]
// STAGE3: sharc.shard
// STAGE3-NOT: sharc.shard
// STAGE3: %[[NEWW:.*]] = sharc.all_gather %{{.*}} {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
// STAGE3-NOT: sharc.all_gather
// STAGE3: return
// NOSTEP: error: sharc-zero needs '@train_step' (run sharc-optimizer first)
