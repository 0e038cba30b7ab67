// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd grad-accum=2 clip=1.0" --sharc-data-parallel="world-size=2 reduce-bucket-size=4" | FileCheck %s
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd grad-accum=2 clip=1.0" --sharc-data-parallel | FileCheck %s --check-prefix=ONE
// RUN: sharc-opt %s --sharc-optimizer="optimizer=sgd grad-accum=2 clip=1.0" | FileCheck %s --check-prefix=MARKER
// RUN: not sharc-opt %s --sharc-optimizer --sharc-data-parallel="world-size=4294967297" 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not sharc-opt %s --sharc-optimizer --sharc-data-parallel="world-size=2 reduce-bucket-size=0" 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: not sharc-opt %s --sharc-data-parallel="world-size=2" 2>&1 | FileCheck %s --check-prefix=NOSTEP

// sharc-optimizer builds one rank's step; sharc-data-parallel makes it run on
// N ranks.

// Data parallelism over two ranks: the loss seed is 1/(GAS N); the summed
// micro-batch gradients are all-reduced before clipping in buckets of at most
// 4 elements, w (3) and b (1) in one concatenated bucket, v (2) alone.

func.func @main_grad(%w: tensor<3xf32> {sharc.param = #sharc.param<"w", "w">},
                     %b: tensor<f32> {sharc.param = #sharc.param<"b", "b">},
                     %v: tensor<2xf32> {sharc.param = #sharc.param<"v", "v">},
                     %x: tensor<2x3xf32> {sharc.input = "x"},
                     %seed: tensor<f32> {sharc.input = "loss_seed"})
    -> (tensor<f32> {sharc.output = "out"}, tensor<3xf32> {sharc.grad = "w"},
        tensor<f32> {sharc.grad = "b"}, tensor<2xf32> {sharc.grad = "v"}) {
  %0 = sharc.reduce %x {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %1 = sharc.mul %0, %seed : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %2 = sharc.mul %b, %seed : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %3 = sharc.mul %v, %seed : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return %seed, %1, %2, %3 : tensor<f32>, tensor<3xf32>, tensor<f32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %{{.*}}: tensor<4x3xf32> {sharc.input = "x"})
// The step states the ranks it is made for.
// CHECK-SAME: attributes {sharc.world_size = 2 : i64}
// CHECK: %[[SEED:.*]] = sharc.constant dense<2.500000e-01> : tensor<f32>
// CHECK: %[[SUMS:.*]]:4 = sharc.micro_batch_loop count 2
// CHECK: %[[G:.*]]:4 = func.call @main_grad({{.*}}, %[[SEED]])
// CHECK: sharc.yield
// CHECK-NOT: sharc.gradients
// CHECK: %[[BF:.*]] = sharc.reshape %[[SUMS]]#2 : tensor<f32> to tensor<1xf32>
// CHECK: %[[CAT:.*]] = sharc.concat %[[SUMS]]#1, %[[BF]] {axis = 0 : i64} : (tensor<3xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[SUM:.*]] = sharc.all_reduce %[[CAT]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<4xf32>
// CHECK: %[[WS:.*]] = sharc.slice %[[SUM]] {{.*}}start = array<i64: 0>{{.*}} to tensor<3xf32>
// CHECK: %[[BS:.*]] = sharc.slice %[[SUM]] {{.*}}start = array<i64: 3>{{.*}} to tensor<1xf32>
// CHECK: %[[BR:.*]] = sharc.reshape %[[BS]] : tensor<1xf32> to tensor<f32>
// CHECK-NOT: sharc.concat
// CHECK: %[[VR:.*]] = sharc.all_reduce %[[SUMS]]#3 {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<2xf32>
// Clipping reads the all-reduced gradients as the [ranks, slice] rows that
// sharc-zero would slice them into (w padded with a zero): the sum of each
// row is a rank's partial sum, and the partial sums are added in rank order,
// as ZeRO's all-reduce of them adds them.
// CHECK: %[[WPAD:.*]] = sharc.concat %[[WS]], %{{.*}} {axis = 0 : i64} : (tensor<3xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[WROWS:.*]] = sharc.reshape %[[WPAD]] : tensor<4xf32> to tensor<2x2xf32>
// CHECK: %[[WSQ:.*]] = sharc.mul %[[WROWS]], %[[WROWS]] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
// CHECK-NOT: sharc.mul %[[WS]], %[[WS]]
// CHECK: sharc.reduce %[[WSQ]] {axes = array<i64: 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x2xf32>) -> tensor<2xf32>
// CHECK: %[[P0:.*]] = sharc.slice %[[PARTS:[0-9]+]] {start = array<i64: 0>, stride = array<i64: 1>} : tensor<2xf64> to tensor<1xf64>
// CHECK-NEXT: %[[S0:.*]] = sharc.reshape %[[P0]] : tensor<1xf64> to tensor<f64>
// CHECK-NEXT: %[[P1:.*]] = sharc.slice %[[PARTS]] {start = array<i64: 1>, stride = array<i64: 1>} : tensor<2xf64> to tensor<1xf64>
// CHECK-NEXT: %[[S1:.*]] = sharc.reshape %[[P1]] : tensor<1xf64> to tensor<f64>
// CHECK-NEXT: %[[NORM2:.*]] = sharc.add %[[S0]], %[[S1]] : (tensor<f64>, tensor<f64>) -> tensor<f64>
// CHECK-NEXT: sharc.sqrt %[[NORM2]]
// CHECK: %[[LOSS:.*]] = sharc.all_reduce %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<f32>
// CHECK: %[[N:.*]] = sharc.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[MEAN:.*]] = sharc.div %[[LOSS]], %[[N]]
// CHECK-NOT: sharc.all_reduce
// CHECK: return %[[MEAN]]

// One rank: no collectives, seed 1/GAS, the gradients used as they are.
// ONE-LABEL: func.func @train_step(
// ONE-SAME: attributes {sharc.world_size = 1 : i64}
// ONE: sharc.constant dense<5.000000e-01> : tensor<f32>
// ONE-NOT: sharc.all_reduce
// ONE-NOT: sharc.concat
// ONE-NOT: sharc.gradients
// ONE: return

// What sharc-optimizer hands over: the complete local gradients, named.
// MARKER-LABEL: func.func @train_step(
// MARKER: %[[SUMS:.*]]:4 = sharc.micro_batch_loop count 2
// MARKER: %{{.*}}:3 = sharc.gradients %[[SUMS]]#1, %[[SUMS]]#2, %[[SUMS]]#3 {params = ["w", "b", "v"]} : tensor<3xf32>, tensor<f32>, tensor<2xf32>
// MARKER-NOT: sharc.all_reduce

// WORLD: error: option 'world-size' must be between 1 and 1048576, got 4294967297
// BUCKET: error: option 'reduce-bucket-size' must be between 1 and 1099511627776, got 0
// NOSTEP: error: sharc-data-parallel needs '@train_step' (run sharc-optimizer first)
