// RUN: sharc-opt %s --sharc-fuse | FileCheck %s
// RUN: sharc-opt %s --sharc-fuse | sharc-opt --sharc-fuse | FileCheck %s
// RUN: sharc-opt %s --sharc-fuse="singletons=false" | FileCheck %s --check-prefix=NOSINGLE
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw function=mlp" --sharc-fuse | FileCheck %s --check-prefix=ADAMW
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=adamw function=mlp" --sharc-fuse | grep -v '^      ' | FileCheck %s --check-prefix=TOP --implicit-check-not='= sharc.{{(neg|relu|exp|add|sub|mul|div|pow|max|min|sqrt|cast|compare|select)}} '

// sharc-fuse groups elementwise ops into sharc.fusion ops.  The second RUN
// line checks that fusing fused IR changes nothing.

// A chain becomes one fusion; the splat constant is cloned into it.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x8xf32>, %[[Y:[^:]*]]: tensor<4x8xf32>)
// CHECK-NOT: sharc.constant
// CHECK: %[[F:.*]] = sharc.fusion %[[X]], %[[Y]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[E:.*]] = sharc.exp %[[A]]
// CHECK-NEXT: %[[C:.*]] = sharc.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[M:.*]] = sharc.mul %[[E]], %[[C]]
// CHECK-NEXT: %[[S:.*]] = sharc.add %[[M]], %[[B]]
// CHECK-NEXT: %[[R:.*]] = sharc.relu %[[S]]
// CHECK-NEXT: sharc.yield %[[R]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]] : tensor<4x8xf32>
// NOSINGLE-LABEL: func.func @chain(
// NOSINGLE: sharc.fusion
func.func @chain(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = sharc.constant dense<2.0> : tensor<f32>
  %0 = sharc.exp %x : tensor<4x8xf32>
  %1 = sharc.mul %0, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = sharc.add %1, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = sharc.relu %2 : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}


// A diamond is one fusion with one result.
// CHECK-LABEL: func.func @diamond(
// CHECK: %[[F:.*]] = sharc.fusion %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: sharc.tanh
// CHECK-NEXT: sharc.neg
// CHECK-NEXT: sharc.abs
// CHECK-NEXT: sharc.max
// CHECK-NEXT: sharc.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @diamond(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = sharc.tanh %x : tensor<4x8xf32>
  %1 = sharc.neg %0 : tensor<4x8xf32>
  %2 = sharc.abs %0 : tensor<4x8xf32>
  %3 = sharc.max %1, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}


// A value used inside the group and outside it is a result.
// CHECK-LABEL: func.func @used_outside(
// CHECK: %[[F:.*]]:2 = sharc.fusion %{{.*}} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: sharc.exp
// CHECK-NEXT: %[[SQ:.*]] = sharc.sqrt
// CHECK-NEXT: %[[D:.*]] = sharc.sub %[[SQ]],
// CHECK-NEXT: sharc.yield %[[SQ]], %[[D]]
// CHECK: %[[MM:.*]] = sharc.matmul %[[F]]#0,
// CHECK-NEXT: return %[[F]]#1, %[[MM]]
func.func @used_outside(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = sharc.exp %x : tensor<4x8xf32>
  %1 = sharc.sqrt %0 : tensor<4x8xf32>
  %2 = sharc.sub %1, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = sharc.matmul %1, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}


// Fusing the exp into the add would make the fusion read the matmul that
// reads the fusion: the exp stays in a fusion of its own.
// CHECK-LABEL: func.func @cycle(
// CHECK: %[[E:.*]] = sharc.fusion %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: sharc.exp
// CHECK-NEXT: sharc.yield
// CHECK: %[[MM:.*]] = sharc.matmul %[[E]],
// CHECK-NEXT: %[[F:.*]] = sharc.fusion %[[E]], %[[MM]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: sharc.add
// CHECK-NEXT: sharc.neg
// CHECK-NEXT: sharc.yield
// CHECK: return %[[F]]
// Without singletons, the lone exp stays a plain op.
// NOSINGLE-LABEL: func.func @cycle(
// NOSINGLE-NEXT: %[[E:.*]] = sharc.exp
// NOSINGLE-NEXT: %[[MM:.*]] = sharc.matmul %[[E]],
// NOSINGLE-NEXT: sharc.fusion %[[E]], %[[MM]]
func.func @cycle(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = sharc.exp %x : tensor<4x8xf32>
  %1 = sharc.matmul %0, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %2 = sharc.add %0, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = sharc.neg %2 : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}


// No path of ops leads from the exp back to @c's add, but one leads through
// the 4x8 group (exp -> h1 ... h2 -> reduce -> add): joining would make the
// two fusions depend on each other, so the exp stays alone.
// CHECK-LABEL: func.func @group_cycle(
// CHECK: %[[E:.*]] = sharc.fusion %{{.*}} : (tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: sharc.exp
// CHECK-NEXT: sharc.yield
// CHECK: %[[H:.*]]:2 = sharc.fusion %{{.*}}, %[[E]], %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: %[[R:.*]] = sharc.reduce %[[H]]#0
// CHECK: %[[C:.*]] = sharc.fusion %[[E]], %[[R]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK: return %[[C]], %[[H]]#1
func.func @group_cycle(%x: tensor<8xf32>, %w: tensor<4x8xf32>, %z: tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>) {
  %a = sharc.exp %x : tensor<8xf32>
  %h2 = sharc.neg %w : tensor<4x8xf32>
  %r = sharc.reduce %h2 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
  %c = sharc.add %a, %r : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %h1 = sharc.add %a, %z : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %h3 = sharc.add %h1, %h2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %c, %h3 : tensor<8xf32>, tensor<4x8xf32>
}


// Operands of smaller shapes broadcast; the scalar sqrt has another shape
// and is a fusion of its own, read as an operand.  The 1x32 splat is cloned.
// CHECK-LABEL: func.func @broadcasting(
// CHECK-SAME: %[[X:[^:]*]]: tensor<8x32xf32>, %[[B:[^:]*]]: tensor<32xf32>)
// CHECK: %[[S:.*]] = sharc.reduce
// CHECK-NEXT: %[[T:.*]] = sharc.fusion %[[S]] : (tensor<f32>) -> tensor<f32> {
// CHECK: sharc.sqrt
// CHECK: %[[F:.*]] = sharc.fusion %[[X]], %[[B]], %[[T]] : (tensor<8x32xf32>, tensor<32xf32>, tensor<f32>) -> tensor<8x32xi1> {
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<8x32xf32>, %{{.*}}: tensor<32xf32>, %{{.*}}: tensor<f32>):
// CHECK-NEXT: sharc.add
// CHECK-NEXT: sharc.mul
// CHECK-NEXT: sharc.constant dense<5.000000e-01> : tensor<1x32xf32>
// CHECK-NEXT: sharc.compare
// CHECK-NEXT: sharc.yield
// CHECK: return %[[F]]
// NOSINGLE-LABEL: func.func @broadcasting(
// NOSINGLE: sharc.reduce
// NOSINGLE-NEXT: %[[T:.*]] = sharc.sqrt
// NOSINGLE-NEXT: sharc.fusion %{{.*}}, %{{.*}}, %[[T]]
func.func @broadcasting(%x: tensor<8x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xi1> {
  %s = sharc.reduce %x {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<8x32xf32>) -> tensor<f32>
  %t = sharc.sqrt %s : tensor<f32>
  %half = sharc.constant dense<0.5> : tensor<1x32xf32>
  %0 = sharc.add %x, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = sharc.mul %0, %t : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %2 = sharc.compare %1, %half {predicate = #sharc.predicate<gt>} : (tensor<8x32xf32>, tensor<1x32xf32>) -> tensor<8x32xi1>
  return %2 : tensor<8x32xi1>
}


// The fusion needs the second matmul and feeds the first: the block is
// reordered so that each op follows what it reads.
// CHECK-LABEL: func.func @reorder(
// CHECK: %[[M2:.*]] = sharc.matmul %arg1,
// CHECK-NEXT: %[[F:.*]]:2 = sharc.fusion %arg0, %[[M2]]
// CHECK: %[[M1:.*]] = sharc.matmul %[[F]]#0,
// CHECK-NEXT: return %[[M1]], %[[F]]#1
func.func @reorder(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = sharc.exp %x : tensor<4x8xf32>
  %1 = sharc.matmul %0, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %2 = sharc.matmul %y, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %3 = sharc.add %0, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}

// The training step of a two-layer MLP with AdamW: each parameter's update
// (exp_avg, exp_avg_sq, parameter) is one fusion with three results; the
// scalar step and bias-correction arithmetic is in fusions of scalars.  With
// fusion bodies filtered out (TOP), no elementwise op is left outside a
// fusion in any function.
// TOP-LABEL: func.func @mlp(
// TOP-LABEL: func.func @mlp_grad(
// TOP-LABEL: func.func @train_step(
// TOP: call @mlp_grad(
// TOP: return
// ADAMW-LABEL: func.func @train_step(
// ADAMW: %[[G:.*]]:4 = call @mlp_grad(
// The gradients' global norm: each square is fused into its sum
// (sharc.fuse_into: one reduction kernel), the sums and the root are one
// fusion of scalars.
// ADAMW: %[[SQ:.*]] = sharc.fusion %[[G]]#1 {sharc.fuse_into} : (tensor<3x8xf32>) -> tensor<3x8xf32> {
// ADAMW: sharc.reduce %[[SQ]] {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>}
// ADAMW: sharc.fusion {{.*}} : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<f64> {
// ADAMW-NOT: tensor<3x8xf32>) -> tensor<3x8xf32>
// ADAMW: %[[W1:.*]]:3 = sharc.fusion {{.*}} -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) {
// ADAMW-NOT: sharc.fusion
// ADAMW: sharc.sqrt
// ADAMW-NOT: sharc.fusion
// ADAMW: sharc.yield
// ADAMW-NEXT: }
// ADAMW-NEXT: %[[B1:.*]]:3 = sharc.fusion {{.*}} -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
// ADAMW-NOT: sharc.fusion
// ADAMW: sharc.yield
// ADAMW-NEXT: }
// ADAMW-NEXT: %[[W2:.*]]:3 = sharc.fusion {{.*}} -> (tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x1xf32>) {
// ADAMW-NOT: sharc.fusion
// ADAMW: sharc.yield
// ADAMW-NEXT: }
// ADAMW-NEXT: %[[STEP:.*]] = sharc.fusion %{{.*}} : (tensor<i64>) -> tensor<i64>
// ADAMW-NOT: sharc.fusion
// ADAMW: return %[[G]]#0, %[[W1]]#2, %[[B1]]#2, %[[W2]]#2, %[[W1]]#0, %[[W1]]#1, %[[B1]]#0, %[[B1]]#1, %[[W2]]#0, %[[W2]]#1, %[[STEP]],
func.func @mlp(%x: tensor<4x3xf32> {sharc.input = "x"},
               %w1: tensor<3x8xf32> {sharc.param = #sharc.param<"w1", "fc1.weight">},
               %b1: tensor<8xf32> {sharc.param = #sharc.param<"b1", "fc1.bias">},
               %w2: tensor<8x1xf32> {sharc.param = #sharc.param<"w2", "fc2.weight">},
               %y: tensor<4x1xf32> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w1 : (tensor<4x3xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  %1 = sharc.add %0, %b1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = sharc.relu %1 : tensor<4x8xf32>
  %3 = sharc.matmul %2, %w2 : (tensor<4x8xf32>, tensor<8x1xf32>) -> tensor<4x1xf32>
  %4 = sharc.sub %3, %y : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = sharc.mul %4, %4 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = sharc.reduce %5 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<f32>
  return %6 : tensor<f32>
}

// A fusion result computed by one cheap op from values its only (fusion)
// user already reads is recomputed there instead of stored: %b = a * a is
// dropped from the first fusion's results and cloned into the second.
// CHECK-LABEL: func.func @recompute(
// CHECK: %[[F:.*]]:2 = sharc.fusion %{{.*}} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: sharc.yield %[[A:.*]], %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK: %[[M:.*]] = sharc.matmul %[[F]]#1
// CHECK: sharc.fusion %[[M]], %[[F]]#0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[MM:.*]]: tensor<4x8xf32>, %[[AA:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[B:.*]] = sharc.mul %[[AA]], %[[AA]]
// CHECK-NEXT: sharc.mul %[[MM]], %[[B]]
func.func @recompute(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = sharc.exp %x : tensor<4x8xf32>
  %b = sharc.mul %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = sharc.add %b, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = sharc.matmul %c, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %g = sharc.mul %m, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %h = sharc.add %g, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %h : tensor<4x8xf32>
}

// Not recomputed when the user would have to read something new: %b = a * y
// needs %y, which the second fusion does not take.
// CHECK-LABEL: func.func @no_new_reads(
// CHECK: sharc.fusion %{{.*}} -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
func.func @no_new_reads(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = sharc.exp %x : tensor<4x8xf32>
  %b = sharc.mul %a, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = sharc.add %b, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = sharc.matmul %c, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %g = sharc.mul %m, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %h = sharc.add %g, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %h : tensor<4x8xf32>
}

// The body of a micro-batch loop is fused on its own: the product and the
// accumulation become one fusion inside the body, which reads the exp
// (fused outside) from above; nothing moves across the loop.
// CHECK-LABEL: func.func @loop_body(
// CHECK: %[[E:.*]] = sharc.fusion %{{.*}} : (tensor<4xf32>) -> tensor<4xf32> {
// CHECK: sharc.exp
// CHECK: sharc.micro_batch_loop count 2
// CHECK-NEXT: ^bb0(%[[M:.*]]: tensor<4x4xf32>, %[[ACC:.*]]: tensor<4xf32>):
// CHECK-NEXT: %[[P:.*]] = sharc.reduce %[[M]]
// CHECK-NEXT: %[[U:.*]] = sharc.fusion %[[P]], %[[E]], %[[ACC]]
// CHECK: sharc.mul
// CHECK-NEXT: sharc.add
// CHECK-NEXT: sharc.yield
// CHECK: sharc.yield %[[U]]
// CHECK: sharc.fusion
// CHECK: sharc.neg
func.func @loop_body(%x: tensor<8x4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %z = sharc.constant dense<0.0> : tensor<4xf32>
  %s = sharc.exp %w : tensor<4xf32>
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<8x4xf32>) inits(%z : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%m: tensor<4x4xf32>, %acc: tensor<4xf32>):
    %p = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<4x4xf32>) -> tensor<4xf32>
    %t = sharc.mul %p, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %u = sharc.add %acc, %t : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    sharc.yield %u : tensor<4xf32>
  }
  %y = sharc.neg %r : tensor<4xf32>
  return %y : tensor<4xf32>
}
