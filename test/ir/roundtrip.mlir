// RUN: sharc-opt %s | sharc-opt | FileCheck %s
// RUN: sharc-opt %s --mlir-print-op-generic | sharc-opt | FileCheck %s

// Every op prints in a form that parses back to the same IR.

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: {sharc.param = #sharc.param<"w", "layer.weight">}
// CHECK-SAME: {sharc.input = "tokens"}
// CHECK-SAME: {sharc.output = "y"}
func.func @elementwise(%a: tensor<2x3xf32> {sharc.param = #sharc.param<"w", "layer.weight">},
                       %b: tensor<3xf32> {sharc.input = "tokens"}, %c: tensor<2x3xi1>)
    -> (tensor<2x3xf32> {sharc.output = "y"}) {
  // CHECK: sharc.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = sharc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.sub
  %1 = sharc.sub %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.mul
  %2 = sharc.mul %1, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.div
  %3 = sharc.div %2, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.pow
  %4 = sharc.pow %3, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.max
  %5 = sharc.max %4, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.min
  %6 = sharc.min %5, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.neg {{.*}} : tensor<2x3xf32>
  %7 = sharc.neg %6 : tensor<2x3xf32>
  // CHECK: sharc.abs
  %8 = sharc.abs %7 : tensor<2x3xf32>
  // CHECK: sharc.exp
  %9 = sharc.exp %8 : tensor<2x3xf32>
  // CHECK: sharc.log
  %10 = sharc.log %9 : tensor<2x3xf32>
  // CHECK: sharc.sqrt
  %11 = sharc.sqrt %10 : tensor<2x3xf32>
  // CHECK: sharc.rsqrt
  %12 = sharc.rsqrt %11 : tensor<2x3xf32>
  // CHECK: sharc.erf
  %13 = sharc.erf %12 : tensor<2x3xf32>
  // CHECK: sharc.tanh
  %14 = sharc.tanh %13 : tensor<2x3xf32>
  // CHECK: sharc.sigmoid
  %15 = sharc.sigmoid %14 : tensor<2x3xf32>
  // CHECK: sharc.relu
  %16 = sharc.relu %15 : tensor<2x3xf32>
  // CHECK: sharc.sin
  %s0 = sharc.sin %16 : tensor<2x3xf32>
  // CHECK: sharc.cos
  %s1 = sharc.cos %s0 : tensor<2x3xf32>
  // CHECK: sharc.floor
  %s2 = sharc.floor %s1 : tensor<2x3xf32>
  // CHECK: sharc.gelu %{{.*}} {approximation = #sharc.gelu_approximation<tanh>}
  %17 = sharc.gelu %s2 {approximation = #sharc.gelu_approximation<tanh>} : tensor<2x3xf32>
  // CHECK: sharc.compare %{{.*}} {predicate = #sharc.predicate<lt>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %18 = sharc.compare %17, %b {predicate = #sharc.predicate<lt>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: sharc.not
  %19 = sharc.not %18 : tensor<2x3xi1>
  // CHECK: sharc.and
  %20 = sharc.and %19, %c : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: sharc.or
  %21 = sharc.or %20, %c : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: sharc.select {{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %22 = sharc.select %21, %17, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.cast {{.*}} : tensor<2x3xf32> to tensor<2x3xbf16>
  %23 = sharc.cast %22 : tensor<2x3xf32> to tensor<2x3xbf16>
  // CHECK: sharc.cast {{.*}} : tensor<2x3xbf16> to tensor<2x3xf32>
  %24 = sharc.cast %23 : tensor<2x3xbf16> to tensor<2x3xf32>
  return %24 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @structure
func.func @structure(%x: tensor<2x4x8xf16>, %ids: tensor<2x5xi64>, %table: tensor<10x8xf16>)
    -> (tensor<2x4x8xf16>, tensor<8x2x4xf16>, tensor<2x5x8xf16>, tensor<2x2x8xf16>, tensor<4x4x8xf16>, tensor<3x8xi32>, tensor<2x4x8xf16>, tensor<2x4x8xf16>) {
  // CHECK: sharc.constant dense<1.000000e+00> : tensor<8xf16>
  %one = sharc.constant dense<1.0> : tensor<8xf16>
  // CHECK: sharc.iota {dimension = 1 : i64} : tensor<3x8xi32>
  %iota = sharc.iota {dimension = 1} : tensor<3x8xi32>
  // CHECK: sharc.matmul {{.*}} {transpose_rhs = true} : (tensor<2x4x8xf16>, tensor<2x4x8xf16>) -> tensor<2x4x4xf16>
  %scores = sharc.matmul %x, %x {transpose_rhs = true} : (tensor<2x4x8xf16>, tensor<2x4x8xf16>) -> tensor<2x4x4xf16>
  // CHECK: sharc.trilu {{.*}} {upper = false} : tensor<2x4x4xf16>
  %masked = sharc.trilu %scores {upper = false} : tensor<2x4x4xf16>
  // CHECK: sharc.softmax {{.*}} {axis = 2 : i64} : tensor<2x4x4xf16>
  %p = sharc.softmax %masked {axis = 2} : tensor<2x4x4xf16>
  // CHECK: sharc.log_softmax
  %lp = sharc.log_softmax %p {axis = 2} : tensor<2x4x4xf16>
  // CHECK: sharc.matmul
  %ctx = sharc.matmul %lp, %x : (tensor<2x4x4xf16>, tensor<2x4x8xf16>) -> tensor<2x4x8xf16>
  // CHECK: sharc.layer_norm {{.*}} : (tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>) -> (tensor<2x4x8xf16>, tensor<2x4x1xf16>, tensor<2x4x1xf16>)
  %ln:3 = sharc.layer_norm %ctx, %one, %one {axis = 2, epsilon = 1.0e-5} : (tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>) -> (tensor<2x4x8xf16>, tensor<2x4x1xf16>, tensor<2x4x1xf16>)
  // CHECK: sharc.layer_norm {{.*}} : (tensor<2x4x8xf16>, tensor<8xf16>) -> (tensor<2x4x8xf16>, tensor<2x4x1xf16>, tensor<2x4x1xf16>)
  %ln2:3 = sharc.layer_norm %ctx, %one {axis = 2, epsilon = 1.0e-5} : (tensor<2x4x8xf16>, tensor<8xf16>) -> (tensor<2x4x8xf16>, tensor<2x4x1xf16>, tensor<2x4x1xf16>)
  // CHECK: sharc.reduce {{.*}} {axes = array<i64: 1>, keep_dims = true, kind = #sharc.reduce_kind<mean>}
  %mean = sharc.reduce %x {kind = #sharc.reduce_kind<mean>, axes = array<i64: 1>, keep_dims = true} : (tensor<2x4x8xf16>) -> tensor<2x1x8xf16>
  // CHECK: sharc.transpose {{.*}} {permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf16>) -> tensor<8x2x4xf16>
  %t = sharc.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf16>) -> tensor<8x2x4xf16>
  // CHECK: sharc.reshape {{.*}} : tensor<8x2x4xf16> to tensor<64xf16>
  %flat = sharc.reshape %t : tensor<8x2x4xf16> to tensor<64xf16>
  // CHECK: sharc.broadcast {{.*}} : tensor<2x1x8xf16> to tensor<2x4x8xf16>
  %b = sharc.broadcast %mean : tensor<2x1x8xf16> to tensor<2x4x8xf16>
  // CHECK: sharc.gather {{.*}} {axis = 0 : i64} : (tensor<10x8xf16>, tensor<2x5xi64>) -> tensor<2x5x8xf16>
  %emb = sharc.gather %table, %ids {axis = 0} : (tensor<10x8xf16>, tensor<2x5xi64>) -> tensor<2x5x8xf16>
  // CHECK: sharc.slice {{.*}} {start = array<i64: 0, 3, 0>, stride = array<i64: 1, -2, 1>} : tensor<2x4x8xf16> to tensor<2x2x8xf16>
  %s = sharc.slice %x {start = array<i64: 0, 3, 0>, stride = array<i64: 1, -2, 1>} : tensor<2x4x8xf16> to tensor<2x2x8xf16>
  // CHECK: sharc.concat {{.*}} {axis = 0 : i64} : (tensor<2x4x8xf16>, tensor<2x4x8xf16>) -> tensor<4x4x8xf16>
  %cat = sharc.concat %x, %b {axis = 0} : (tensor<2x4x8xf16>, tensor<2x4x8xf16>) -> tensor<4x4x8xf16>
  return %ln#0, %t, %emb, %s, %cat, %iota, %ln2#0, %b : tensor<2x4x8xf16>, tensor<8x2x4xf16>, tensor<2x5x8xf16>, tensor<2x2x8xf16>, tensor<4x4x8xf16>, tensor<3x8xi32>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
}

// CHECK-LABEL: func.func @losses
func.func @losses(%logits: tensor<4x5x3xf64>, %target: tensor<4x3xi32>, %w: tensor<5xf64>)
    -> (tensor<f64>, tensor<4x3xf64>) {
  // CHECK: sharc.cross_entropy {{.*}} {ignore_index = -1 : i64, reduction = #sharc.loss_reduction<mean>} : (tensor<4x5x3xf64>, tensor<4x3xi32>, tensor<5xf64>) -> tensor<f64>
  %0 = sharc.cross_entropy %logits, %target, %w {reduction = #sharc.loss_reduction<mean>, ignore_index = -1} : (tensor<4x5x3xf64>, tensor<4x3xi32>, tensor<5xf64>) -> tensor<f64>
  // CHECK: sharc.nll_loss {{.*}} {reduction = #sharc.loss_reduction<none>} : (tensor<4x5x3xf64>, tensor<4x3xi32>) -> tensor<4x3xf64>
  %1 = sharc.nll_loss %logits, %target {reduction = #sharc.loss_reduction<none>} : (tensor<4x5x3xf64>, tensor<4x3xi32>) -> tensor<4x3xf64>
  return %0, %1 : tensor<f64>, tensor<4x3xf64>
}

// CHECK-LABEL: func.func @vision
func.func @vision(%x: tensor<2x4x9x9xf32>, %w: tensor<6x2x3x3xf32>, %bias: tensor<6xf32>)
    -> (tensor<2x6x5x5xf32>, tensor<2x4x5x5xf32>, tensor<2x4x4x4xf32>) {
  // CHECK: sharc.conv2d {{.*}} : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x5x5xf32>
  %c = sharc.conv2d %x, %w, %bias {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x5x5xf32>
  // CHECK: sharc.max_pool2d {{.*}} -> tensor<2x4x5x5xf32>
  %m = sharc.max_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<2x4x9x9xf32>) -> tensor<2x4x5x5xf32>
  // CHECK: sharc.avg_pool2d {{.*}} -> tensor<2x4x4x4xf32>
  %a = sharc.avg_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, count_include_pad = true} : (tensor<2x4x9x9xf32>) -> tensor<2x4x4x4xf32>
  return %c, %m, %a : tensor<2x6x5x5xf32>, tensor<2x4x5x5xf32>, tensor<2x4x4x4xf32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%g: tensor<8x3xf32>) -> (tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<8x3xf32>) {
  // CHECK: sharc.all_reduce {{.*}} {kind = #sharc.collective_kind<sum>, ranks = 4 : i64} : tensor<8x3xf32>
  %0 = sharc.all_reduce %g {kind = #sharc.collective_kind<sum>, ranks = 4} : tensor<8x3xf32>
  // CHECK: sharc.reduce_scatter {{.*}} -> tensor<2x3xf32>
  %1 = sharc.reduce_scatter %g {kind = #sharc.collective_kind<sum>, ranks = 4} : (tensor<8x3xf32>) -> tensor<2x3xf32>
  // CHECK: sharc.all_gather {{.*}} -> tensor<32x3xf32>
  %2 = sharc.all_gather %g {ranks = 4} : (tensor<8x3xf32>) -> tensor<32x3xf32>
  // CHECK: sharc.broadcast_from {{.*}} {ranks = 4 : i64, root = 0 : i64} : tensor<8x3xf32>
  %3 = sharc.broadcast_from %g {root = 0, ranks = 4} : tensor<8x3xf32>
  // CHECK: sharc.shard {{.*}} {ranks = 4 : i64} : (tensor<8x3xf32>) -> tensor<2x3xf32>
  %4 = sharc.shard %g {ranks = 4} : (tensor<8x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3 : tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<8x3xf32>
}

// An asynchronous all-reduce: the future names the tensor in flight, the
// wait gives it.
// CHECK-LABEL: func.func @async_collective
// CHECK: %[[F:.*]] = sharc.all_reduce_start %{{.*}} {kind = #sharc.collective_kind<max>, ranks = 2 : i64} : tensor<8x3xf32>
// CHECK-NEXT: sharc.exp
// CHECK-NEXT: sharc.wait %[[F]] : !sharc.future<tensor<8x3xf32>>
func.func @async_collective(%g: tensor<8x3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>) {
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<max>, ranks = 2} : tensor<8x3xf32>
  %e = sharc.exp %g : tensor<8x3xf32>
  %r = sharc.wait %f : !sharc.future<tensor<8x3xf32>>
  return %r, %e : tensor<8x3xf32>, tensor<8x3xf32>
}

// An asynchronous reduce-scatter: the future holds this rank's slice.
// CHECK-LABEL: func.func @async_reduce_scatter
// CHECK: %[[F:.*]] = sharc.reduce_scatter_start %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 4 : i64} : (tensor<8x3xf32>) -> !sharc.future<tensor<2x3xf32>>
// CHECK-NEXT: sharc.wait %[[F]] : !sharc.future<tensor<2x3xf32>>
func.func @async_reduce_scatter(%g: tensor<8x3xf32>) -> tensor<2x3xf32> {
  %f = sharc.reduce_scatter_start %g {kind = #sharc.collective_kind<sum>, ranks = 4} : (tensor<8x3xf32>) -> !sharc.future<tensor<2x3xf32>>
  %r = sharc.wait %f : !sharc.future<tensor<2x3xf32>>
  return %r : tensor<2x3xf32>
}

// A started all-gather: the future holds every rank's rows.
// CHECK-LABEL: func.func @async_all_gather
// CHECK: sharc.all_gather_start %{{.*}} {ranks = 4 : i64} : (tensor<2x3xbf16>) -> !sharc.future<tensor<8x3xbf16>>
func.func @async_all_gather(%s: tensor<2x3xbf16>) -> tensor<8x3xbf16> {
  %f = sharc.all_gather_start %s {ranks = 4} : (tensor<2x3xbf16>) -> !sharc.future<tensor<8x3xbf16>>
  %r = sharc.wait %f : !sharc.future<tensor<8x3xbf16>>
  return %r : tensor<8x3xbf16>
}

// CHECK-LABEL: func.func @train_state
// CHECK-SAME: {sharc.state = #sharc.state<"w", "exp_avg">}
// CHECK-SAME: {sharc.state = #sharc.state<"", "step">}
// CHECK-SAME: {sharc.grad = "w"}
// CHECK-SAME: {sharc.param = #sharc.param<"w", "layer.weight">}
func.func @train_state(%m: tensor<3xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
                       %t: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<3xf32> {sharc.grad = "w"}, tensor<3xf32> {sharc.param = #sharc.param<"w", "layer.weight">}) {
  return %m, %m : tensor<3xf32>, tensor<3xf32>
}

// A ZeRO slice: this rank's 4 of the 7 elements of a parameter on 2 ranks.
// CHECK-LABEL: func.func @zero_slice
// CHECK-SAME: {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<7xf32>, ranks = 2>}
func.func @zero_slice(%w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<7xf32>, ranks = 2>})
    -> tensor<8xf32> attributes {sharc.zero_stage = 3 : i64} {
  %r = sharc.reshape %w : tensor<4xf32> to tensor<1x4xf32>
  // CHECK: sharc.all_gather %{{.*}} {ranks = 2 : i64, sharc.parameter_gather}
  %g = sharc.all_gather %r {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x4xf32>) -> tensor<2x4xf32>
  %f = sharc.reshape %g : tensor<2x4xf32> to tensor<8xf32>
  return %f : tensor<8xf32>
}

// CHECK-LABEL: func.func @gradient_ops
func.func @gradient_ops(%x: tensor<2x4x9x9xf32>, %w: tensor<6x2x3x3xf32>, %gc: tensor<2x6x5x5xf32>,
                        %gp: tensor<2x4x5x5xf32>, %ga: tensor<2x4x4x4xf32>, %table: tensor<10x8xf16>,
                        %ids: tensor<2x5xi32>, %rows: tensor<2x5x8xf16>, %s: tensor<2x2x8xf16>)
    -> (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<2x4x9x9xf32>, tensor<2x4x9x9xf32>,
        tensor<10x8xf16>, tensor<2x4x8xf16>) {
  // CHECK: sharc.conv2d_input_grad {{.*}} {dilations = array<i64: 1, 1>, groups = 2 : i64, padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x6x5x5xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  %0 = sharc.conv2d_input_grad %gc, %w {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<2x6x5x5xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  // CHECK: sharc.conv2d_weight_grad {{.*}} : (tensor<2x4x9x9xf32>, tensor<2x6x5x5xf32>) -> tensor<6x2x3x3xf32>
  %1 = sharc.conv2d_weight_grad %x, %gc {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<2x4x9x9xf32>, tensor<2x6x5x5xf32>) -> tensor<6x2x3x3xf32>
  // CHECK: sharc.max_pool2d_grad {{.*}}ceil_mode = true{{.*}} : (tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x9x9xf32>
  %2 = sharc.max_pool2d_grad %x, %gp {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x9x9xf32>
  // CHECK: sharc.avg_pool2d_grad {{.*}}count_include_pad = true{{.*}} : (tensor<2x4x4x4xf32>) -> tensor<2x4x9x9xf32>
  %3 = sharc.avg_pool2d_grad %ga {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, count_include_pad = true} : (tensor<2x4x4x4xf32>) -> tensor<2x4x9x9xf32>
  // CHECK: sharc.scatter_add {{.*}} {axis = 0 : i64} : (tensor<10x8xf16>, tensor<2x5xi32>, tensor<2x5x8xf16>) -> tensor<10x8xf16>
  %4 = sharc.scatter_add %table, %ids, %rows {axis = 0} : (tensor<10x8xf16>, tensor<2x5xi32>, tensor<2x5x8xf16>) -> tensor<10x8xf16>
  %z = sharc.constant dense<0.0> : tensor<2x4x8xf16>
  // CHECK: sharc.insert_slice {{.*}} into {{.*}} {start = array<i64: 0, 3, 0>, stride = array<i64: 1, -2, 1>} : tensor<2x2x8xf16> into tensor<2x4x8xf16>
  %5 = sharc.insert_slice %s into %z {start = array<i64: 0, 3, 0>, stride = array<i64: 1, -2, 1>} : tensor<2x2x8xf16> into tensor<2x4x8xf16>
  return %0, %1, %2, %3, %4, %5 : tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<2x4x9x9xf32>, tensor<2x4x9x9xf32>, tensor<10x8xf16>, tensor<2x4x8xf16>
}

// CHECK-LABEL: func.func @fusion
// CHECK: %[[R:.*]]:2 = sharc.fusion %{{.*}}, %{{.*}} : (tensor<8x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xi1>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<8x32xf32>, %[[Y:.*]]: tensor<32xf32>):
// CHECK-NEXT: %[[C:.*]] = sharc.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[U:.*]] = sharc.add %[[X]], %[[Y]] : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT: %[[M:.*]] = sharc.mul %[[U]], %[[C]] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
// CHECK-NEXT: %[[V:.*]] = sharc.compare %[[M]], %[[Y]] {predicate = #sharc.predicate<gt>} : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xi1>
// CHECK-NEXT: sharc.yield %[[M]], %[[V]] : tensor<8x32xf32>, tensor<8x32xi1>
// CHECK-NEXT: }
// CHECK: sharc.fusion : () -> tensor<4xf16> {
// CHECK-NEXT: sharc.constant dense<1.000000e+00> : tensor<4xf16>
// CHECK: return %[[R]]#0, %[[R]]#1, %{{.*}}
func.func @fusion(%a: tensor<8x32xf32>, %b: tensor<32xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xi1>, tensor<4xf16>) {
  %r:2 = sharc.fusion %a, %b : (tensor<8x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xi1>) {
  ^bb0(%x: tensor<8x32xf32>, %y: tensor<32xf32>):
    %c = sharc.constant dense<0.5> : tensor<f32>
    %u = sharc.add %x, %y : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %m = sharc.mul %u, %c : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
    %v = sharc.compare %m, %y {predicate = #sharc.predicate<gt>} : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xi1>
    sharc.yield %m, %v : tensor<8x32xf32>, tensor<8x32xi1>
  }
  %s = sharc.fusion : () -> tensor<4xf16> {
    %one = sharc.constant dense<1.0> : tensor<4xf16>
    %e = sharc.exp %one : tensor<4xf16>
    sharc.yield %e : tensor<4xf16>
  }
  return %r#0, %r#1, %s : tensor<8x32xf32>, tensor<8x32xi1>, tensor<4xf16>
}

// CHECK-LABEL: func.func @micro_batch_loop
// CHECK: %[[R:.*]]:2 = sharc.micro_batch_loop count 2 inputs(%{{.*}} : tensor<4x3xf32>) inits(%{{.*}}, %{{.*}} : tensor<f32>, tensor<3xf32>) -> tensor<f32>, tensor<3xf32> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<2x3xf32>, %[[L:.*]]: tensor<f32>, %[[G:.*]]: tensor<3xf32>):
// CHECK: sharc.yield %{{.*}}, %{{.*}} : tensor<f32>, tensor<3xf32>
// CHECK: sharc.micro_batch_loop count 3 inits(%{{.*}} : tensor<f32>) -> tensor<f32>
func.func @micro_batch_loop(%x: tensor<4x3xf32>, %w: tensor<3xf32>)
    -> (tensor<f32>, tensor<3xf32>, tensor<f32>) {
  %zero = sharc.constant dense<0.0> : tensor<f32>
  %zeros = sharc.constant dense<0.0> : tensor<3xf32>
  %r:2 = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x3xf32>)
      inits(%zero, %zeros : tensor<f32>, tensor<3xf32>) -> tensor<f32>, tensor<3xf32> {
  ^bb0(%micro: tensor<2x3xf32>, %loss: tensor<f32>, %grad: tensor<3xf32>):
    %0 = sharc.mul %micro, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %1 = sharc.reduce %0 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
    %2 = sharc.add %loss, %1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %3 = sharc.reduce %micro {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
    %4 = sharc.add %grad, %3 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    sharc.yield %2, %4 : tensor<f32>, tensor<3xf32>
  }
  // A loop without inputs runs its body `count` times on the carried values.
  %c = sharc.micro_batch_loop count 3 inits(%zero : tensor<f32>) -> tensor<f32> {
  ^bb0(%acc: tensor<f32>):
    %one = sharc.constant dense<1.0> : tensor<f32>
    %next = sharc.add %acc, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
    sharc.yield %next : tensor<f32>
  }
  return %r#0, %r#1, %c : tensor<f32>, tensor<3xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @gradients
// CHECK: %{{.*}}:2 = sharc.gradients %{{.*}}, %{{.*}} {params = ["fc.weight", "fc.bias"]} : tensor<3x4xf32>, tensor<4xf32>
func.func @gradients(%w: tensor<3x4xf32>, %b: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>) {
  %g:2 = sharc.gradients %w, %b {params = ["fc.weight", "fc.bias"]} : tensor<3x4xf32>, tensor<4xf32>
  return %g#0, %g#1 : tensor<3x4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @dropout
// CHECK-SAME: {sharc.random_key = "step"}
// CHECK-SAME: {sharc.random_key = "rows"}
// CHECK: sharc.sample_rows : tensor<4xi64>
// CHECK: sharc.dropout_mask %{{.*}}, %{{.*}} {ratio = 1.000000e-01 : f64, seed = -7 : i64, stream = 3 : i64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x5xi1>
func.func @dropout(%step: tensor<i64> {sharc.random_key = "step"},
                   %rows: tensor<2xi64> {sharc.random_key = "rows"})
    -> (tensor<4xi64>, tensor<2x5xi1>) {
  %all = sharc.sample_rows : tensor<4xi64>
  %keep = sharc.dropout_mask %step, %rows {ratio = 0.1 : f64, seed = -7 : i64, stream = 3 : i64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x5xi1>
  return %all, %keep : tensor<4xi64>, tensor<2x5xi1>
}
