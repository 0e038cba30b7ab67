// RUN: sharc-opt %s -split-input-file -verify-diagnostics

func.func @add_shapes(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @add_types(%a: tensor<2x3xf32>, %b: tensor<3xf16>) -> tensor<2x3xf32> {
  // expected-error @+2 {{element types differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.add %a, %b : (tensor<2x3xf32>, tensor<3xf16>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @add_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  // expected-error @+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

func.func @dynamic(%a: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = sharc.neg %a : tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}

// -----

func.func @exp_int(%a: tensor<3xi64>) -> tensor<3xi64> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = sharc.exp %a : tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @unsupported_element(%a: tensor<3xi8>) -> tensor<3xi8> {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = sharc.neg %a : tensor<3xi8>
  return %0 : tensor<3xi8>
}

// -----

func.func @compare_result(%a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{result #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = sharc.compare %a, %a {predicate = #sharc.predicate<eq>} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @select_branches(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<3xf64>) -> tensor<3xf32> {
  // expected-error @+2 {{element types differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.select %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<3xf64>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @cast_shape(%a: tensor<3xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %0 = sharc.cast %a : tensor<3xf32> to tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+2 {{contraction sizes differ: 3 vs 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_rank(%a: tensor<3xf32>, %b: tensor<3x5xf32>) -> tensor<5xf32> {
  // expected-error @+2 {{rank >= 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.matmul %a, %b : (tensor<3xf32>, tensor<3x5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) -> tensor<2x4x5xf32> {
  // expected-error @+2 {{batch dimensions do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x5xf32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

func.func @reduce_axis(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+2 {{reduction axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.reduce %a {kind = #sharc.reduce_kind<sum>, axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @reduce_repeated(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+2 {{reduction axis 1 is repeated}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.reduce %a {kind = #sharc.reduce_kind<sum>, axes = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @reduce_mean_int(%a: tensor<2x3xi64>) -> tensor<2xi64> {
  // expected-error @+2 {{mean reduction needs a float tensor}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.reduce %a {kind = #sharc.reduce_kind<mean>, axes = array<i64: 1>} : (tensor<2x3xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = sharc.softmax %a {axis = 2} : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @log_softmax_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis -1 is out of range for rank 2}}
  %0 = sharc.log_softmax %a {axis = -1} : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @layer_norm_scale(%a: tensor<2x3xf32>, %s: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{does not broadcast to the normalized shape}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = sharc.layer_norm %a, %s {axis = 1, epsilon = 1.0e-5} : (tensor<2x3xf32>, tensor<4xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return %0#0 : tensor<2x3xf32>
}

// -----

func.func @reshape_count(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{cannot reshape 'tensor<2x3xf32>' (6 elements) to 'tensor<7xf32>' (7 elements)}}
  %0 = sharc.reshape %a : tensor<2x3xf32> to tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

func.func @reshape_type(%a: tensor<2x3xf32>) -> tensor<6xf16> {
  // expected-error @+1 {{element type changes}}
  %0 = sharc.reshape %a : tensor<2x3xf32> to tensor<6xf16>
  return %0 : tensor<6xf16>
}

// -----

func.func @transpose_perm(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+2 {{invalid permutation [0, 0]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.transpose %a {permutation = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @broadcast_bad(%a: tensor<2x3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'tensor<2x3xf32>' does not broadcast to 'tensor<2x4xf32>'}}
  %0 = sharc.broadcast %a : tensor<2x3xf32> to tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @slice_bounds(%a: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{dimension 0 reads indices 2 to 6, outside [0, 4)}}
  %0 = sharc.slice %a {start = array<i64: 2>, stride = array<i64: 2>} : tensor<4xf32> to tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @slice_stride(%a: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{stride of dimension 0 is zero}}
  %0 = sharc.slice %a {start = array<i64: 0>, stride = array<i64: 0>} : tensor<4xf32> to tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @concat_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+2 {{differ outside axis 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.concat %a, %b {axis = 0} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @gather_axis(%a: tensor<2x3xf32>, %i: tensor<4xi64>) -> tensor<4xf32> {
  // expected-error @+2 {{gather axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.gather %a, %i {axis = 2} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gather_float_indices(%a: tensor<2x3xf32>, %i: tensor<4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values}}
  %0 = sharc.gather %a, %i {axis = 0} : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @trilu_rank(%a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{needs rank >= 2}}
  %0 = sharc.trilu %a {upper = true} : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @iota_dim(%a: tensor<3xf32>) -> tensor<3xi64> {
  // expected-error @+1 {{dimension 1 is out of range for rank 1}}
  %0 = sharc.iota {dimension = 1} : tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @loss_target(%l: tensor<4x5xf32>, %t: tensor<5xi64>) -> tensor<f32> {
  // expected-error @+2 {{target shape 'tensor<5xi64>' does not match input 'tensor<4x5xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.cross_entropy %l, %t {reduction = #sharc.loss_reduction<mean>} : (tensor<4x5xf32>, tensor<5xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @loss_weight(%l: tensor<4x5xf32>, %t: tensor<4xi64>, %w: tensor<4xf32>) -> tensor<f32> {
  // expected-error @+2 {{must be a [C] tensor of the input type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.nll_loss %l, %t, %w {reduction = #sharc.loss_reduction<sum>} : (tensor<4x5xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @conv_channels(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+2 {{conv channels do not match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_window(%x: tensor<1x3x2x2xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32> {
  // expected-error @+2 {{does not fit input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x2x2xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32>
  return %0 : tensor<1x4x1x1xf32>
}

// -----

func.func @pool_attrs(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error @+2 {{2-D windows need 2 kernel sizes}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.max_pool2d %x {kernel = array<i64: 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_input(%x: tensor<3x8x8xf32>) -> tensor<3x4x4xf32> {
  // expected-error @+2 {{expected an NCHW input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.avg_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>} : (tensor<3x8x8xf32>) -> tensor<3x4x4xf32>
  return %0 : tensor<3x4x4xf32>
}

// -----

func.func @shard_divisible(%p: tensor<6x3xf32>) -> tensor<1x3xf32> {
  // expected-error @+2 {{shard needs dimension 0 of 'tensor<6x3xf32>' to be a multiple of the group size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.shard %p {ranks = 4} : (tensor<6x3xf32>) -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

// -----

func.func @reduce_scatter_divisible(%g: tensor<6x3xf32>) -> tensor<1x3xf32> {
  // expected-error @+2 {{to be a multiple of the group size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = sharc.reduce_scatter %g {kind = #sharc.collective_kind<sum>, ranks = 4} : (tensor<6x3xf32>) -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

// -----

func.func @all_reduce_ranks(%g: tensor<6x3xf32>) -> tensor<6x3xf32> {
  // expected-error @+1 {{group size must be positive, got 0}}
  %0 = sharc.all_reduce %g {kind = #sharc.collective_kind<sum>, ranks = 0} : tensor<6x3xf32>
  return %0 : tensor<6x3xf32>
}

// -----

func.func @all_reduce_start_ranks(%g: tensor<6x3xf32>) -> tensor<6x3xf32> {
  // expected-error @+1 {{group size must be positive, got 0}}
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 0} : tensor<6x3xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<6x3xf32>>
  return %0 : tensor<6x3xf32>
}

// -----

func.func @start_never_waited(%g: tensor<6x3xf32>) {
  // expected-error @+1 {{must be waited for exactly once, by one 'sharc.wait'; its future has 0 uses}}
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<6x3xf32>
  return
}

// -----

func.func @start_waited_twice(%g: tensor<6x3xf32>) -> (tensor<6x3xf32>, tensor<6x3xf32>) {
  // expected-error @+1 {{its future has 2 uses}}
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<6x3xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<6x3xf32>>
  %1 = sharc.wait %f : !sharc.future<tensor<6x3xf32>>
  return %0, %1 : tensor<6x3xf32>, tensor<6x3xf32>
}

// -----

func.func @future_returned(%g: tensor<6x3xf32>) -> !sharc.future<tensor<6x3xf32>> {
  // expected-error @+1 {{future is used by 'func.return'; only 'sharc.wait' may read it}}
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<6x3xf32>
  return %f : !sharc.future<tensor<6x3xf32>>
}

// -----

func.func @waited_in_another_block(%x: tensor<4x2xf32>, %g: tensor<6x3xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{is waited for in another block}}
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<6x3xf32>
  %0 = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x2xf32>) inits(%x : tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%m: tensor<2x2xf32>, %acc: tensor<4x2xf32>):
    %r = sharc.wait %f : !sharc.future<tensor<6x3xf32>>
    sharc.yield %acc : tensor<4x2xf32>
  }
  return %0 : tensor<4x2xf32>
}

// -----

func.func @wait_type(%g: tensor<6x3xf32>) -> tensor<6x4xf32> {
  %f = sharc.all_reduce_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : tensor<6x3xf32>
  // expected-error @+1 {{'sharc.wait' op failed to verify that the result is the future's tensor}}
  %0 = "sharc.wait"(%f) : (!sharc.future<tensor<6x3xf32>>) -> tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// -----

func.func @future_of_unranked(%g: tensor<6x3xf32>) {
  // expected-error @+2 {{invalid kind of type specified: expected builtin.tensor}}
  // expected-error @+1 {{failed to parse Sharc_FutureType parameter 'valueType'}}
  %0 = sharc.wait %g : !sharc.future<tensor<*xf32>>
  return
}

// -----

// expected-error @+1 {{'!sharc.future' holds a statically shaped tensor, not 'tensor<?xf32>'}}
func.func @future_of_dynamic(%f: !sharc.future<tensor<?xf32>>) {
  return
}

// -----

func.func @broadcast_root(%g: tensor<6x3xf32>) -> tensor<6x3xf32> {
  // expected-error @+1 {{root 4 is not a rank of a group of 4}}
  %0 = sharc.broadcast_from %g {root = 4, ranks = 4} : tensor<6x3xf32>
  return %0 : tensor<6x3xf32>
}

// -----

// expected-error @+1 {{argument #0: is marked 'sharc.param' but is not a floating-point tensor}}
func.func @param_int(%a: tensor<3xi64> {sharc.param = #sharc.param<"a", "a">}) {
  return
}

// -----

// expected-error @+1 {{argument #0: 'sharc.param' must be a #sharc.param attribute}}
func.func @param_string(%a: tensor<3xf32> {sharc.param = "a"}) {
  return
}

// -----

// expected-error @+1 {{argument #0: unknown sharc attribute 'sharc.weight'}}
func.func @unknown_arg_attr(%a: tensor<3xf32> {sharc.weight}) {
  return
}

// -----

// expected-error @+1 {{result #0: 'sharc.output' must be a string}}
func.func @output_name(%a: tensor<3xf32>) -> (tensor<3xf32> {sharc.output = 1}) {
  return %a : tensor<3xf32>
}

// -----

// expected-error @+1 {{result #0: is marked 'sharc.grad' but is not a floating-point tensor}}
func.func @grad_int(%a: tensor<3xi64>) -> (tensor<3xi64> {sharc.grad = "a"}) {
  return %a : tensor<3xi64>
}

// -----

// expected-error @+1 {{argument #0: 'sharc.state' must be a #sharc.state attribute}}
func.func @state_string(%a: tensor<3xf32> {sharc.state = "a"}) {
  return
}

// -----

// An inconsistent partition: 7 elements over 2 ranks are slices of 4.
// expected-error @+1 {{argument #0 of type 'tensor<3xf32>' is not a slice of #sharc.slice<tensor<7xf32>, ranks = 2>, which is a 'tensor<4xf32>'}}
func.func @slice_shape(%a: tensor<3xf32> {sharc.slice = #sharc.slice<tensor<7xf32>, ranks = 2>}) {
  return
}

// -----

// expected-error @+1 {{argument #0 of type 'tensor<4xf16>' is not a slice of #sharc.slice<tensor<7xf32>, ranks = 2>, which is a 'tensor<4xf32>'}}
func.func @slice_element(%a: tensor<4xf16> {sharc.slice = #sharc.slice<tensor<7xf32>, ranks = 2>}) {
  return
}

// -----

// expected-error @+1 {{argument #0: #sharc.slice<tensor<7xf32>, ranks = 1>: ranks must be in [2, 1048576]}}
func.func @slice_ranks(%a: tensor<7xf32> {sharc.slice = #sharc.slice<tensor<7xf32>, ranks = 1>}) {
  return
}

// -----

// expected-error @+1 {{argument #0: 'sharc.slice' must be a #sharc.slice attribute}}
func.func @slice_type(%a: tensor<4xf32> {sharc.slice = tensor<7xf32>}) {
  return
}

// -----

func.func @parameter_gather_elsewhere(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.parameter_gather' is a unit attribute of sharc.all_gather or sharc.all_gather_start}}
  %0 = sharc.exp %a {sharc.parameter_gather} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0: 'sharc.output' applies to results only}}
func.func @output_on_arg(%a: tensor<3xf32> {sharc.output = "a"}) {
  return
}

// -----

func.func @insert_slice_bounds(%s: tensor<3xf32>, %d: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{dimension 0 writes indices 2 to 6, outside [0, 4)}}
  %0 = sharc.insert_slice %s into %d {start = array<i64: 2>, stride = array<i64: 2>} : tensor<3xf32> into tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @insert_slice_types(%s: tensor<3xf16>, %d: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{element types differ}}
  %0 = sharc.insert_slice %s into %d {start = array<i64: 0>, stride = array<i64: 1>} : tensor<3xf16> into tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scatter_add_updates(%d: tensor<10x8xf32>, %i: tensor<5xi64>, %u: tensor<5x4xf32>) -> tensor<10x8xf32> {
  // expected-error @+1 {{updates 'tensor<5x4xf32>' must be 'tensor<5x8xf32>'}}
  %0 = sharc.scatter_add %d, %i, %u {axis = 0} : (tensor<10x8xf32>, tensor<5xi64>, tensor<5x4xf32>) -> tensor<10x8xf32>
  return %0 : tensor<10x8xf32>
}

// -----

func.func @scatter_add_axis(%d: tensor<10x8xf32>, %i: tensor<5xi64>, %u: tensor<5x8xf32>) -> tensor<10x8xf32> {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = sharc.scatter_add %d, %i, %u {axis = 2} : (tensor<10x8xf32>, tensor<5xi64>, tensor<5x8xf32>) -> tensor<10x8xf32>
  return %0 : tensor<10x8xf32>
}

// -----

func.func @conv_input_grad_shape(%g: tensor<2x6x5x5xf32>, %w: tensor<6x2x3x3xf32>) -> tensor<2x4x8x8xf32> {
  // expected-error @+1 {{output gradient 'tensor<2x6x5x5xf32>' does not match the forward result 'tensor<2x6x3x3xf32>'}}
  %0 = sharc.conv2d_input_grad %g, %w {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<2x6x5x5xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x8x8xf32>
  return %0 : tensor<2x4x8x8xf32>
}

// -----

func.func @conv_weight_grad_channels(%x: tensor<2x4x9x9xf32>, %g: tensor<2x6x5x5xf32>) -> tensor<6x4x3x3xf32> {
  // expected-error @+1 {{conv channels do not match}}
  %0 = sharc.conv2d_weight_grad %x, %g {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<2x4x9x9xf32>, tensor<2x6x5x5xf32>) -> tensor<6x4x3x3xf32>
  return %0 : tensor<6x4x3x3xf32>
}

// -----

func.func @max_pool_grad_shape(%x: tensor<2x4x9x9xf32>, %g: tensor<2x4x4x4xf32>) -> tensor<2x4x9x9xf32> {
  // expected-error @+1 {{output gradient 'tensor<2x4x4x4xf32>' does not match the forward result 'tensor<2x4x5x5xf32>'}}
  %0 = sharc.max_pool2d_grad %x, %g {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<2x4x9x9xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x9x9xf32>
  return %0 : tensor<2x4x9x9xf32>
}

// -----

func.func @avg_pool_grad_shape(%g: tensor<2x4x4x4xf32>) -> tensor<2x4x7x7xf32> {
  // expected-error @+1 {{output gradient 'tensor<2x4x4x4xf32>' does not match the forward result 'tensor<2x4x3x3xf32>'}}
  %0 = sharc.avg_pool2d_grad %g {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x7x7xf32>
  return %0 : tensor<2x4x7x7xf32>
}

// -----

func.func @fusion_arg_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.fusion' op has 1 operands but its body has 0 arguments}}
  %0 = sharc.fusion %a : (tensor<4xf32>) -> tensor<4xf32> {
    %c = sharc.constant dense<1.0> : tensor<4xf32>
    sharc.yield %c : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_arg_type(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.fusion' op body argument #0 has type 'tensor<4xf16>' but operand #0 has type 'tensor<4xf32>'}}
  %0 = sharc.fusion %a : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf16>):
    %y = sharc.cast %x : tensor<4xf16> to tensor<4xf32>
    sharc.yield %y : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_yield_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.fusion' op yields 2 values but has 1 results}}
  %0 = sharc.fusion %a : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    sharc.yield %x, %x : tensor<4xf32>, tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_yield_type(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'sharc.fusion' op yielded value #0 has type 'tensor<4xf32>' but result #0 has type 'tensor<4xf16>'}}
  %0 = sharc.fusion %a : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%x: tensor<4xf32>):
    sharc.yield %x : tensor<4xf32>
  }
  return %0 : tensor<4xf16>
}

// -----

func.func @fusion_no_results(%a: tensor<4xf32>) {
  // expected-error @+1 {{'sharc.fusion' op must have at least one result}}
  sharc.fusion %a : (tensor<4xf32>) -> () {
  ^bb0(%x: tensor<4xf32>):
    sharc.yield
  }
  return
}

// -----

func.func @fusion_result_shapes(%a: tensor<2x4xf32>, %b: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{'sharc.fusion' op result #1 has shape [4] but the iteration shape (of result #0) is [2, 4]}}
  %0:2 = sharc.fusion %a, %b : (tensor<2x4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<2x4xf32>, %y: tensor<4xf32>):
    sharc.yield %x, %y : tensor<2x4xf32>, tensor<4xf32>
  }
  return %0#0, %0#1 : tensor<2x4xf32>, tensor<4xf32>
}

// -----

func.func @fusion_operand_broadcast(%a: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'sharc.fusion' op operand #0 of shape [3] does not broadcast to the iteration shape [2, 4]}}
  %0 = sharc.fusion %a : (tensor<3xf32>) -> tensor<2x4xf32> {
  ^bb0(%x: tensor<3xf32>):
    %c = sharc.constant dense<1.0> : tensor<2x4xf32>
    sharc.yield %c : tensor<2x4xf32>
  }
  return %0 : tensor<2x4xf32>
}

// -----

func.func @fusion_not_elementwise(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = sharc.fusion %a : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%x: tensor<4x4xf32>):
    // expected-error @+1 {{'sharc.matmul' op is not an elementwise op and cannot be in a 'sharc.fusion' body}}
    %y = sharc.matmul %x, %x : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    sharc.yield %y : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @fusion_constant(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = sharc.fusion %a : (tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%x: tensor<2xf32>):
    // expected-error @+1 {{'sharc.constant' op in a 'sharc.fusion' body must be a splat constant}}
    %c = sharc.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %y = sharc.add %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    sharc.yield %y : tensor<2xf32>
  }
  return %0 : tensor<2xf32>
}

// -----

func.func @fusion_body_shape(%a: tensor<32xf32>) -> tensor<32xf32> {
  %0 = sharc.fusion %a : (tensor<32xf32>) -> tensor<32xf32> {
  ^bb0(%x: tensor<32xf32>):
    // expected-error @+1 {{'sharc.constant' op result of shape [4, 32] does not broadcast to the iteration shape [32] of its 'sharc.fusion'}}
    %c = sharc.constant dense<1.0> : tensor<4x32xf32>
    %y = sharc.add %x, %c : (tensor<32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    sharc.yield %x : tensor<32xf32>
  }
  return %0 : tensor<32xf32>
}

// -----

func.func @fusion_isolated(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = sharc.fusion : () -> tensor<4xf32> {
    // expected-error @+1 {{using value defined outside the region}}
    %y = sharc.neg %a : tensor<4xf32>
    sharc.yield %y : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @yield_parent(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.yield' op expects parent op to be one of 'sharc.fusion, sharc.micro_batch_loop'}}
  sharc.yield %a : tensor<4xf32>
}

// -----

func.func @loop_uneven(%x: tensor<5x3xf32>, %z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{input #0 of shape [5, 3] does not split into 2 micro-batches along dimension 0}}
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<5x3xf32>) inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%m: tensor<2x3xf32>, %a: tensor<f32>):
    sharc.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_scalar_input(%x: tensor<f32>, %z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{input #0 of shape [] does not split into 1 micro-batches}}
  %r = sharc.micro_batch_loop count 1 inputs(%x : tensor<f32>) inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%m: tensor<f32>, %a: tensor<f32>):
    sharc.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_micro_type(%x: tensor<4x3xf32>, %z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{body argument #0 has type 'tensor<4x3xf32>' but micro-batches of input #0 have type 'tensor<2x3xf32>'}}
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x3xf32>) inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%m: tensor<4x3xf32>, %a: tensor<f32>):
    sharc.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_arguments(%x: tensor<4x3xf32>, %z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{has 1 inputs and 1 inits but its body has 1 arguments}}
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x3xf32>) inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<f32>):
    sharc.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_carried_type(%z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{carried value #0 must have one type as init, body argument, yielded value and result}}
  %r = sharc.micro_batch_loop count 2 inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<f32>):
    %b = sharc.cast %a : tensor<f32> to tensor<f64>
    sharc.yield %b : tensor<f64>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_yield_count(%z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{yields 2 values but carries 1}}
  %r = sharc.micro_batch_loop count 2 inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<f32>):
    sharc.yield %a, %a : tensor<f32>, tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @loop_count(%z: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{attribute 'count' failed to satisfy constraint}}
  %r = sharc.micro_batch_loop count 0 inits(%z : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<f32>):
    sharc.yield %a : tensor<f32>
  }
  return %r : tensor<f32>
}

// -----

func.func @gradients_names(%g: tensor<3xf32>, %h: tensor<2xf32>) -> tensor<3xf32> {
  // expected-error @below {{has 2 gradients but names 1 parameters}}
  %0:2 = sharc.gradients %g, %h {params = ["w"]} : tensor<3xf32>, tensor<2xf32>
  return %0#0 : tensor<3xf32>
}

// -----

func.func @gradients_twice(%g: tensor<3xf32>, %h: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @below {{names parameter 'w' twice}}
  %0:2 = sharc.gradients %g, %h {params = ["w", "w"]} : tensor<3xf32>, tensor<3xf32>
  return %0#0 : tensor<3xf32>
}

// -----

// The hand-off attributes of the passes to the code generator are verified.
func.func @offsets_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.offsets' has 2 entries for 1 results}}
  %0 = sharc.exp %x {sharc.offsets = array<i64: 0, 256>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @offsets_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.offsets' entry -2 is out of range}}
  %0 = sharc.exp %x {sharc.offsets = array<i64: -2>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_buffers(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.result_buffers' entry 1 is out of range}}
  %0 = sharc.exp %x {sharc.result_buffers = array<i64: 1>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @fuse_into(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.fuse_into' must be a unit attribute}}
  %0 = sharc.exp %x {sharc.fuse_into = 1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gemm_output(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.gemm_output' applies to transposes only}}
  %0 = sharc.exp %x {sharc.gemm_output} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scratch(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.scratch_bytes' must be a non-negative integer}}
  %0 = sharc.exp %x {sharc.scratch_bytes = -16 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{'sharc.arena_bytes' must be a non-negative integer}}
func.func @arena(%x: tensor<4xf32>) -> tensor<4xf32> attributes {sharc.arena_bytes = "big"} {
  return %x : tensor<4xf32>
}

// -----

func.func @epilogue(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{'sharc.gemm_epilogue' #sharc.gemm_epilogue<product = 0, bias = 5, result = 0>: bias is neither -1 nor another operand}}
  %0 = sharc.fusion %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 5, result = 0>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> {
  ^bb0(%x: tensor<2x3xf32>, %y: tensor<3xf32>):
    %s = sharc.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    sharc.yield %s : tensor<2x3xf32>
  }
  return %0 : tensor<2x3xf32>
}

// -----

func.func @epilogue_product(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{product is not an operand of the op}}
  %0 = sharc.add %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 2, result = 0>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @epilogue_bias_is_product(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{bias is neither -1 nor another operand}}
  %0 = sharc.add %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 0, result = 0>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @epilogue_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{result is not a result of the op}}
  %0 = sharc.add %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 1>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @epilogue_aux(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{aux is neither -1 nor another result}}
  %0 = sharc.add %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 0, aux = 0, activation = relu>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @epilogue_aux_without_activation(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  // expected-error @below {{a pre-activation output needs an activation}}
  %0:2 = sharc.fusion %a, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 0, aux = 1>} : (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  ^bb0(%x: tensor<2x3xf32>, %y: tensor<3xf32>):
    %s = sharc.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    sharc.yield %s, %s : tensor<2x3xf32>, tensor<2x3xf32>
  }
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

func.func @epilogue_untyped(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'sharc.gemm_epilogue' must be a #sharc.gemm_epilogue attribute}}
  %0 = sharc.relu %x {sharc.gemm_epilogue = array<i64: 0, -1, 0, -1>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @epilogue_activation(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{expected one of [none, relu, gelu_tanh]}}
  // expected-error @below {{failed to parse Sharc_GemmEpilogueAttr parameter 'activation'}}
  %0 = sharc.relu %x {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, result = 0, activation = swish>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gemm_activation_is_gone(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{unknown attribute 'sharc.gemm_activation'}}
  %0 = sharc.relu %x {sharc.gemm_activation = "relu"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{unknown attribute 'sharc.fuse_intoo'}}
  %0 = sharc.exp %x {sharc.fuse_intoo} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{'sharc.world_size' must be an integer in [1, 1048576] on a function}}
func.func @world(%x: tensor<4xf32>) -> tensor<4xf32> attributes {sharc.world_size = 0 : i64} {
  return %x : tensor<4xf32>
}

// -----

func.func @reduce_scatter_start_not_divisible(%g: tensor<5x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{reduce_scatter_start needs dimension 0 of 'tensor<5x3xf32>' to be a multiple of the group size 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %f = sharc.reduce_scatter_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : (tensor<5x3xf32>) -> !sharc.future<tensor<2x3xf32>>
  %0 = sharc.wait %f : !sharc.future<tensor<2x3xf32>>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @all_gather_start_waited_twice(%s: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'sharc.all_gather_start' op must be waited for exactly once, by one 'sharc.wait'; its future has 2 uses}}
  %f = sharc.all_gather_start %s {ranks = 2} : (tensor<2x3xf32>) -> !sharc.future<tensor<4x3xf32>>
  %0 = sharc.wait %f : !sharc.future<tensor<4x3xf32>>
  %1 = sharc.wait %f : !sharc.future<tensor<4x3xf32>>
  return %1 : tensor<4x3xf32>
}

// -----

func.func @reduce_scatter_start_never_waited(%g: tensor<6x3xf32>) {
  // expected-error @+1 {{'sharc.reduce_scatter_start' op must be waited for exactly once, by one 'sharc.wait'; its future has 0 uses}}
  %f = sharc.reduce_scatter_start %g {kind = #sharc.collective_kind<sum>, ranks = 2} : (tensor<6x3xf32>) -> !sharc.future<tensor<3x3xf32>>
  return
}

// -----

func.func @swap_in_not_offloaded(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">}) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.swap_in_start' op the operand (argument #0) is not marked 'sharc.storage = #sharc.storage<nvme>'}}
  %f = sharc.swap_in_start %m : tensor<4xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<4xf32>>
  return %0 : tensor<4xf32>
}

// -----

func.func @swap_in_not_an_argument(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = sharc.neg %x : tensor<4xf32>
  // expected-error @+1 {{'sharc.swap_in_start' op the operand must be an argument of the enclosing function}}
  %f = sharc.swap_in_start %y : tensor<4xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<4xf32>>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{argument #0: 'sharc.storage' applies to training state (sharc.state) and partitioned parameters (sharc.param with sharc.slice) only}}
func.func @storage_not_state(%x: tensor<4xf32> {sharc.storage = #sharc.storage<nvme>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

func.func @offloaded_read_directly(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<nvme>}) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.neg' op reads argument #0, which is offloaded (#sharc.storage<nvme>); read it through 'sharc.swap_in_start'}}
  %0 = sharc.neg %m : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @stored_value_read(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<nvme>}) -> tensor<4xf32> {
  %f = sharc.swap_in_start %m : tensor<4xf32>
  %v = sharc.wait %f : !sharc.future<tensor<4xf32>>
  %n = sharc.neg %v : tensor<4xf32>
  // expected-error @+1 {{'sharc.swap_out_start' op stored value is read by 'sharc.neg'; only the function's return may name it (read it back with sharc.swap_in_start)}}
  %w = sharc.swap_out_start %n to %m : tensor<4xf32>
  %s = sharc.wait %w : !sharc.future<tensor<4xf32>>
  %t = sharc.neg %s : tensor<4xf32>
  return %t : tensor<4xf32>
}

// -----

func.func @swap_out_types(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<nvme>}, %n: tensor<4xf64>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.swap_out_start' op failed to verify that all of {value, target} have same type}}
  %w = "sharc.swap_out_start"(%n, %m) : (tensor<4xf64>, tensor<4xf32>) -> !sharc.future<tensor<4xf64>>
  %s = sharc.wait %w : !sharc.future<tensor<4xf64>>
  return %m : tensor<4xf32>
}

// -----

func.func @host_op_reads_device(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{runs on the host (sharc.on_host) but operand #0 is in device memory; transfer it to the host first (sharc.transfer_start)}}
  %0 = sharc.fusion %g {sharc.on_host} : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %n = sharc.neg %a : tensor<4xf32>
    sharc.yield %n : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @device_op_reads_host(%g: tensor<4xf32>) -> tensor<4xf32> {
  %f = sharc.transfer_start %g to <host> : tensor<4xf32>
  %h = sharc.wait %f : !sharc.future<tensor<4xf32>>
  // expected-error @+1 {{'sharc.neg' op reads a value in host memory but does not run on the host (sharc.on_host); transfer it to the device first (sharc.transfer_start)}}
  %0 = sharc.neg %h : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @host_state_read_on_device(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<host>}) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.neg' op reads a value in host memory but does not run on the host}}
  %0 = sharc.neg %m : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @host_value_returned_to_device(%g: tensor<4xf32>) -> (tensor<4xf32> {sharc.output = "y"}) {
  %f = sharc.transfer_start %g to <host> : tensor<4xf32>
  %h = sharc.wait %f : !sharc.future<tensor<4xf32>>
  // expected-error @+1 {{'func.return' op returns a value in host memory as result #0, whose buffer is device memory; transfer it to the device first (sharc.transfer_start)}}
  return %h : tensor<4xf32>
}

// -----

func.func @transfer_to_where_it_is(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.transfer_start' op copies a value already in device memory to the device}}
  %f = sharc.transfer_start %g to <device> : tensor<4xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<4xf32>>
  return %0 : tensor<4xf32>
}

// -----

func.func @transfer_to_nvme(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.transfer_start' op transfers between device and host memory; NVMe is reached through sharc.swap_in_start and sharc.swap_out_start}}
  %f = sharc.transfer_start %g to <nvme> : tensor<4xf32>
  %0 = sharc.wait %f : !sharc.future<tensor<4xf32>>
  return %0 : tensor<4xf32>
}

// -----

func.func @on_host_not_a_fusion(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<host>}) -> tensor<4xf32> {
  // expected-error @+1 {{'sharc.on_host' is a unit attribute of sharc.fusion}}
  %0 = sharc.neg %m {sharc.on_host} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @swap_out_from_host_of_a_device_value(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<nvme>}, %n: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{writes to NVMe from host memory (sharc.on_host) but its value is in device memory}}
  %w = sharc.swap_out_start %n to %m {sharc.on_host} : tensor<4xf32>
  %s = sharc.wait %w : !sharc.future<tensor<4xf32>>
  return %s : tensor<4xf32>
}

// -----

func.func @swapped_into_host_read_on_device(%m: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">, sharc.storage = #sharc.storage<nvme>}) -> tensor<4xf32> {
  %f = sharc.swap_in_start %m {sharc.on_host} : tensor<4xf32>
  %v = sharc.wait %f : !sharc.future<tensor<4xf32>>
  // expected-error @+1 {{'sharc.neg' op reads a value in host memory but does not run on the host}}
  %n = sharc.neg %v : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

func.func @dropout_ratio(%s: tensor<i64>, %r: tensor<2xi64>) -> tensor<2x3xi1> {
  // expected-error @+1 {{ratio must be in [0, 1), got 1}}
  %0 = sharc.dropout_mask %s, %r {ratio = 1.0 : f64, seed = 0 : i64, stream = 0 : i64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x3xi1>
  return %0 : tensor<2x3xi1>
}

// -----

func.func @dropout_stream(%s: tensor<i64>, %r: tensor<2xi64>) -> tensor<2x3xi1> {
  // expected-error @+1 {{stream must be in [0, 2^32), got -1}}
  %0 = sharc.dropout_mask %s, %r {ratio = 0.5 : f64, seed = 0 : i64, stream = -1 : i64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x3xi1>
  return %0 : tensor<2x3xi1>
}

// -----

func.func @dropout_step(%s: tensor<1xi64>, %r: tensor<2xi64>) -> tensor<2x3xi1> {
  // expected-error @+1 {{step must be a scalar, got 'tensor<1xi64>'}}
  %0 = sharc.dropout_mask %s, %r {ratio = 0.5 : f64, seed = 0 : i64, stream = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<2x3xi1>
  return %0 : tensor<2x3xi1>
}

// -----

func.func @dropout_rows(%s: tensor<i64>, %r: tensor<2x1xi64>) -> tensor<2x3xi1> {
  // expected-error @+1 {{rows must be a non-empty 1-D tensor}}
  %0 = sharc.dropout_mask %s, %r {ratio = 0.5 : f64, seed = 0 : i64, stream = 0 : i64} : (tensor<i64>, tensor<2x1xi64>) -> tensor<2x3xi1>
  return %0 : tensor<2x3xi1>
}

// -----

func.func @sample_rows_rank() -> tensor<2x2xi64> {
  // expected-error @+1 {{needs a 1-D result}}
  %0 = sharc.sample_rows : tensor<2x2xi64>
  return %0 : tensor<2x2xi64>
}

// -----

// expected-error @+1 {{argument #0: 'sharc.random_key' must be "step" or "rows"}}
func.func @random_key_role(%s: tensor<i64> {sharc.random_key = "seed"}) {
  return
}

// -----

// expected-error @+1 {{argument #0: the random key's step must be a tensor<i64>, got 'tensor<2xi64>'}}
func.func @random_key_step(%s: tensor<2xi64> {sharc.random_key = "step"}) {
  return
}

// -----

// expected-error @+1 {{argument #0: the random key's rows must be a 1-D i64 tensor, got 'tensor<2xi32>'}}
func.func @random_key_rows(%s: tensor<2xi32> {sharc.random_key = "rows"}) {
  return
}

// -----

// expected-error @+1 {{argument #0: 'sharc.buffer' applies to parameters (sharc.param) only}}
func.func @buffer_not_param(%m: tensor<3xf32> {sharc.buffer}) {
  return
}

// -----

// expected-error @+1 {{argument #0: 'sharc.buffer' must be a unit attribute}}
func.func @buffer_value(%m: tensor<3xf32> {sharc.buffer = 1 : i64, sharc.param = #sharc.param<"m", "m">}) {
  return
}
