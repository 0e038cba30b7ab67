// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives="overlap=false" | FileCheck %s --check-prefix=SYNC

// Each all-reduce becomes a start and a wait.  The start, with the reshapes
// and concat that pack its bucket, moves up to just after the gradients it
// reads (ahead of the tanh, which it does not need); the wait moves down to
// just before the first op that reads the sum (past the exp).  Without
// overlap nothing moves and each wait follows its start.

// CHECK-LABEL: func.func @bucket(
// CHECK-NEXT: %[[A:.*]] = sharc.neg %arg0
// CHECK-NEXT: %[[B:.*]] = sharc.neg %arg1
// CHECK-NEXT: %[[BF:.*]] = sharc.reshape %[[B]]
// CHECK-NEXT: %[[C:.*]] = sharc.concat %[[A]], %[[BF]]
// CHECK-NEXT: %[[F:.*]] = sharc.all_reduce_start %[[C]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<8xf32>
// CHECK-NEXT: sharc.tanh %arg0
// CHECK-NEXT: sharc.exp %arg0
// CHECK-NEXT: %[[R:.*]] = sharc.wait %[[F]] : !sharc.future<tensor<8xf32>>
// CHECK-NEXT: sharc.slice %[[R]]
// CHECK-NOT: sharc.all_reduce

// SYNC-LABEL: func.func @bucket(
// SYNC: sharc.tanh
// SYNC: sharc.concat
// SYNC-NEXT: %[[F:.*]] = sharc.all_reduce_start
// SYNC-NEXT: sharc.wait %[[F]]
// SYNC-NEXT: sharc.exp
func.func @bucket(%x: tensor<4xf32>, %y: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %a = sharc.neg %x : tensor<4xf32>
  %b = sharc.neg %y : tensor<2x2xf32>
  %t = sharc.tanh %x : tensor<4xf32>
  %bf = sharc.reshape %b : tensor<2x2xf32> to tensor<4xf32>
  %c = sharc.concat %a, %bf {axis = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  %r = sharc.all_reduce %c {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<8xf32>
  %e = sharc.exp %x : tensor<4xf32>
  %s = sharc.slice %r {start = array<i64: 0>, stride = array<i64: 1>} : tensor<8xf32> to tensor<4xf32>
  return %s, %t, %e : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A second all-reduce reads the first one's sum: it starts right after that
// sum's wait, which has sunk past the exp to its first reader.

// CHECK-LABEL: func.func @chained(
// CHECK-NEXT: %[[F:.*]] = sharc.all_reduce_start %arg0
// CHECK-NEXT: sharc.exp %arg1
// CHECK-NEXT: %[[R:.*]] = sharc.wait %[[F]]
// CHECK-NEXT: %[[G:.*]] = sharc.all_reduce_start %[[R]] {kind = #sharc.collective_kind<max>
// CHECK-NEXT: sharc.softmax %[[R]]
// CHECK-NEXT: sharc.wait %[[G]]
// CHECK-NEXT: return
func.func @chained(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %r = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<4x4xf32>
  %e = sharc.exp %y : tensor<4x4xf32>
  %m = sharc.all_reduce %r {kind = #sharc.collective_kind<max>, ranks = 2 : i64} : tensor<4x4xf32>
  %s = sharc.softmax %r {axis = 1 : i64} : tensor<4x4xf32>
  return %s, %e, %m : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// A micro-batch loop whose body reads the sum reads it before its first
// iteration: the wait precedes the loop.

// CHECK-LABEL: func.func @loop_reader(
// CHECK: sharc.all_reduce_start
// CHECK-NEXT: sharc.exp
// CHECK-NEXT: sharc.wait
// CHECK-NEXT: sharc.micro_batch_loop
func.func @loop_reader(%x: tensor<4x3xf32>, %w: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %r = sharc.all_reduce %w {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<3xf32>
  %e = sharc.exp %w : tensor<3xf32>
  %l = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x3xf32>) inits(%e : tensor<3xf32>) -> tensor<3xf32> {
  ^bb0(%micro: tensor<2x3xf32>, %acc: tensor<3xf32>):
    %0 = sharc.add %acc, %r : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    sharc.yield %0 : tensor<3xf32>
  }
  return %l, %e : tensor<3xf32>, tensor<3xf32>
}

// -----

// ZeRO stage 2: each gradient reduce-scatter becomes a start and a wait; the
// start, with the reshapes and concat that pack its bucket, moves up to just
// after the ops that produce the bucket (ahead of the tanh), with or without
// overlap, so that the full gradients die there; the wait sinks to the first
// reader (the return here), or without overlap follows the start.  At stage
// 1 the reduce-scatter stays where it stands.

// CHECK-LABEL: func.func @stage_two(
// CHECK-NEXT: %[[A:.*]] = sharc.neg %arg0
// CHECK-NEXT: %[[AR:.*]] = sharc.reshape %[[A]]
// CHECK-NEXT: %[[B:.*]] = sharc.neg %arg1
// CHECK-NEXT: %[[C:.*]] = sharc.concat %[[AR]], %[[B]]
// CHECK-NEXT: %[[F:.*]] = sharc.reduce_scatter_start %[[C]] {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x4xf32>) -> !sharc.future<tensor<1x4xf32>>
// CHECK-NEXT: sharc.tanh %arg0
// CHECK-NEXT: %[[R:.*]] = sharc.wait %[[F]]
// CHECK-NEXT: return %[[R]]
// SYNC-LABEL: func.func @stage_two(
// SYNC: sharc.concat
// SYNC-NEXT: %[[F:.*]] = sharc.reduce_scatter_start
// SYNC-NEXT: sharc.wait %[[F]]
// SYNC-NEXT: sharc.tanh
func.func @stage_two(%x: tensor<4xf32>, %y: tensor<2x2xf32>) -> (tensor<1x4xf32>, tensor<4xf32>) attributes {sharc.zero_stage = 2 : i64} {
  %a = sharc.neg %x : tensor<4xf32>
  %b = sharc.neg %y : tensor<2x2xf32>
  %t = sharc.tanh %x : tensor<4xf32>
  %ar = sharc.reshape %a : tensor<4xf32> to tensor<2x2xf32>
  %c = sharc.concat %ar, %b {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  %r = sharc.reduce_scatter %c {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x4xf32>) -> tensor<1x4xf32>
  return %r, %t : tensor<1x4xf32>, tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @stage_one(
// CHECK: sharc.tanh
// CHECK: sharc.concat
// CHECK-NEXT: sharc.reduce_scatter
func.func @stage_one(%x: tensor<4xf32>, %y: tensor<2x2xf32>) -> (tensor<1x4xf32>, tensor<4xf32>) attributes {sharc.zero_stage = 1 : i64} {
  %a = sharc.neg %x : tensor<4xf32>
  %b = sharc.neg %y : tensor<2x2xf32>
  %t = sharc.tanh %x : tensor<4xf32>
  %ar = sharc.reshape %a : tensor<4xf32> to tensor<2x2xf32>
  %c = sharc.concat %ar, %b {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  %r = sharc.reduce_scatter %c {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x4xf32>) -> tensor<1x4xf32>
  return %r, %t : tensor<1x4xf32>, tensor<4xf32>
}

// -----

// Two stage-2 buckets: one is in flight at a time, so the first's wait
// sinks only to the second's start (the slices' first reader, the add,
// comes later); the second's wait sinks to the add.

// CHECK-LABEL: func.func @two_buckets(
// CHECK: %[[F1:.*]] = sharc.reduce_scatter_start
// CHECK-NEXT: sharc.tanh
// CHECK-NEXT: sharc.neg
// CHECK-NEXT: %[[R1:.*]] = sharc.wait %[[F1]]
// CHECK-NEXT: %[[F2:.*]] = sharc.reduce_scatter_start
// CHECK-NEXT: sharc.exp
// CHECK-NEXT: %[[R2:.*]] = sharc.wait %[[F2]]
// CHECK-NEXT: sharc.add %[[R1]], %[[R2]]
func.func @two_buckets(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<2xf32>, tensor<4xf32>, tensor<4xf32>) attributes {sharc.zero_stage = 2 : i64} {
  %a = sharc.neg %x : tensor<4xf32>
  %t = sharc.tanh %x : tensor<4xf32>
  %b = sharc.neg %t : tensor<4xf32>
  %e = sharc.exp %b : tensor<4xf32>
  %r1 = sharc.reduce_scatter %a {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<4xf32>) -> tensor<2xf32>
  %r2 = sharc.reduce_scatter %b {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<4xf32>) -> tensor<2xf32>
  %s = sharc.add %r1, %r2 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %s, %t, %e : tensor<2xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// ZeRO parameter gathers (marked by sharc-gather-parameters) become started
// all-gathers: the first waits where it stood; the second starts right
// after the first's wait, with its packing (the cast and reshape of its
// slice), so that it runs while the first parameter's reader computes.
// Without overlap they stay blocking.

// CHECK-LABEL: func.func @parameter_gathers(
// CHECK-NEXT: %[[RW:.*]] = sharc.reshape %{{.*}} : tensor<2xf32> to tensor<1x2xf32>
// CHECK-NEXT: %[[FW:.*]] = sharc.all_gather_start %[[RW]] {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> !sharc.future<tensor<2x2xf32>>
// CHECK-NEXT: %[[W:.*]] = sharc.wait %[[FW]]
// CHECK-NEXT: %[[CV:.*]] = sharc.cast %{{.*}} : tensor<2xf32> to tensor<2xbf16>
// CHECK-NEXT: %[[RV:.*]] = sharc.reshape %[[CV]]
// CHECK-NEXT: %[[FV:.*]] = sharc.all_gather_start %[[RV]] {ranks = 2 : i64, sharc.parameter_gather}
// CHECK-NEXT: sharc.exp %[[W]]
// CHECK-NEXT: %[[V:.*]] = sharc.wait %[[FV]]
// CHECK-NEXT: sharc.neg %[[V]]
// SYNC-LABEL: func.func @parameter_gathers(
// SYNC: sharc.all_gather %{{.*}} {ranks = 2 : i64, sharc.parameter_gather}
// SYNC-NEXT: sharc.exp
// SYNC: sharc.all_gather %{{.*}} {ranks = 2 : i64, sharc.parameter_gather}
// SYNC-NEXT: sharc.neg
func.func @parameter_gathers(
    %w: tensor<2xf32> {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %v: tensor<2xf32> {sharc.param = #sharc.param<"v", "v">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>})
    -> (tensor<2x2xf32>, tensor<2x2xbf16>) attributes {sharc.zero_stage = 3 : i64} {
  %rw = sharc.reshape %w : tensor<2xf32> to tensor<1x2xf32>
  %gw = sharc.all_gather %rw {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %e = sharc.exp %gw : tensor<2x2xf32>
  %cv = sharc.cast %v : tensor<2xf32> to tensor<2xbf16>
  %rv = sharc.reshape %cv : tensor<2xbf16> to tensor<1x2xbf16>
  %gv = sharc.all_gather %rv {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xbf16>) -> tensor<2x2xbf16>
  %n = sharc.neg %gv : tensor<2x2xbf16>
  return %e, %n : tensor<2x2xf32>, tensor<2x2xbf16>
}
