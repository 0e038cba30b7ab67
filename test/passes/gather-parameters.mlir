// RUN: sharc-opt %s -split-input-file --sharc-gather-parameters | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-gather-parameters="max-reuse-distance=8" | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-gather-parameters="max-reuse-distance=7" | FileCheck %s --check-prefix=RELEASE

// ZeRO stage 3: sharc-zero gathers w and v where the step starts.  Each
// gather moves (with its packing and unpacking) to just before the first op
// that reads the whole parameter.  w is read again after v's 8 elements
// were read: within a reuse distance of 8 the gathered w stays, below it w
// is gathered again before that reader (and the first copy dies earlier).

func.func @train_step(
    %w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<2x4xf32>, ranks = 2>},
    %v: tensor<4xf32> {sharc.param = #sharc.param<"v", "v">, sharc.slice = #sharc.slice<tensor<2x4xf32>, ranks = 2>},
    %x: tensor<2x2xf32> {sharc.input = "x"})
    -> (tensor<2x4xf32> {sharc.output = "y"}) attributes {sharc.zero_stage = 3 : i64} {
  %0 = sharc.reshape %w : tensor<4xf32> to tensor<1x4xf32>
  %1 = sharc.all_gather %0 {ranks = 2 : i64} : (tensor<1x4xf32>) -> tensor<2x4xf32>
  %2 = sharc.reshape %v : tensor<4xf32> to tensor<1x4xf32>
  %3 = sharc.all_gather %2 {ranks = 2 : i64} : (tensor<1x4xf32>) -> tensor<2x4xf32>
  %4 = sharc.exp %x : tensor<2x2xf32>
  %5 = sharc.matmul %4, %1 : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %6 = sharc.mul %5, %3 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %7 = sharc.matmul %x, %1 : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %8 = sharc.add %6, %7 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %8 : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-NEXT: %[[E:.*]] = sharc.exp
// CHECK-NEXT: %[[WR:.*]] = sharc.reshape %{{.*}} : tensor<4xf32> to tensor<1x4xf32>
// CHECK-NEXT: %[[WG:.*]] = sharc.all_gather %[[WR]] {ranks = 2 : i64, sharc.parameter_gather}
// CHECK-NEXT: %[[M:.*]] = sharc.matmul %[[E]], %[[WG]]
// CHECK-NEXT: sharc.reshape
// CHECK-NEXT: %[[VG:.*]] = sharc.all_gather %{{.*}} {ranks = 2 : i64, sharc.parameter_gather}
// CHECK-NEXT: sharc.mul %[[M]], %[[VG]]
// CHECK-NEXT: sharc.matmul %{{.*}}, %[[WG]]
// CHECK-NOT: sharc.all_gather

// RELEASE-LABEL: func.func @train_step(
// RELEASE: %[[WG:.*]] = sharc.all_gather
// RELEASE-NEXT: sharc.matmul %{{.*}}, %[[WG]]
// RELEASE: %[[VG:.*]] = sharc.all_gather
// RELEASE-NEXT: sharc.mul %{{.*}}, %[[VG]]
// RELEASE-NEXT: %[[AGAIN:.*]] = sharc.reshape %{{.*}} : tensor<4xf32> to tensor<1x4xf32>
// RELEASE-NEXT: %[[WG2:.*]] = sharc.all_gather %[[AGAIN]] {ranks = 2 : i64, sharc.parameter_gather}
// RELEASE-NEXT: sharc.matmul %{{.*}}, %[[WG2]]

// -----

// Mixed precision: the whole parameter is read only by its cast to bf16,
// so the slice is cast and the all-gather sends bf16; the unpacking views
// keep their shapes.  The padding of w (3 elements over 2 ranks) is cut
// off after the gather.

func.func @train_step(
    %w: tensor<2xf32> {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<3xf32>, ranks = 2>},
    %x: tensor<3xbf16> {sharc.input = "x"})
    -> (tensor<3xbf16> {sharc.output = "y"}) attributes {sharc.zero_stage = 3 : i64} {
  %0 = sharc.reshape %w : tensor<2xf32> to tensor<1x2xf32>
  %1 = sharc.all_gather %0 {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %2 = sharc.reshape %1 : tensor<2x2xf32> to tensor<4xf32>
  %3 = sharc.slice %2 {start = array<i64: 0>, stride = array<i64: 1>} : tensor<4xf32> to tensor<3xf32>
  %4 = sharc.cast %3 : tensor<3xf32> to tensor<3xbf16>
  %5 = sharc.mul %4, %x : (tensor<3xbf16>, tensor<3xbf16>) -> tensor<3xbf16>
  return %5 : tensor<3xbf16>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<2xf32>
// CHECK-NEXT: %[[C:.*]] = sharc.cast %[[W]] : tensor<2xf32> to tensor<2xbf16>
// CHECK-NEXT: %[[R:.*]] = sharc.reshape %[[C]] : tensor<2xbf16> to tensor<1x2xbf16>
// CHECK-NEXT: %[[G:.*]] = sharc.all_gather %[[R]] {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xbf16>) -> tensor<2x2xbf16>
// CHECK-NEXT: %[[F:.*]] = sharc.reshape %[[G]] : tensor<2x2xbf16> to tensor<4xbf16>
// CHECK-NEXT: %[[S:.*]] = sharc.slice %[[F]] {start = array<i64: 0>, stride = array<i64: 1>} : tensor<4xbf16> to tensor<3xbf16>
// CHECK-NEXT: sharc.mul %[[S]], %{{.*}}
// CHECK-NOT: f32>

// -----

// Other functions, and gathers of values that are not a partitioned
// parameter's slice, are left where they are.

func.func @train_step(%a: tensor<2xf32> {sharc.input = "a"})
    -> (tensor<4xf32> {sharc.output = "y"}) attributes {sharc.zero_stage = 3 : i64} {
  %0 = sharc.exp %a : tensor<2xf32>
  %1 = sharc.reshape %0 : tensor<2xf32> to tensor<1x2xf32>
  %2 = sharc.all_gather %1 {ranks = 2 : i64} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %3 = sharc.exp %a : tensor<2xf32>
  %4 = sharc.reshape %2 : tensor<2x2xf32> to tensor<4xf32>
  return %4 : tensor<4xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-NEXT: sharc.exp
// CHECK-NEXT: sharc.reshape
// CHECK-NEXT: sharc.all_gather %{{.*}} {ranks = 2 : i64} :
// CHECK-NEXT: sharc.exp

// -----

// Gradient accumulation at stage 3: the micro-batch loop's body gets its own
// gather of w, at its first reader there, so each micro-batch gathers w and
// nothing gathered lives across micro-batches; the gather before the loop
// is gone.  (Within the body the reuse distance applies as anywhere.)

func.func @train_step(
    %w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">, sharc.slice = #sharc.slice<tensor<2x4xf32>, ranks = 2>},
    %x: tensor<4x2xf32> {sharc.input = "x"})
    -> (tensor<2x4xf32> {sharc.output = "y"}) attributes {sharc.zero_stage = 3 : i64} {
  %0 = sharc.reshape %w : tensor<4xf32> to tensor<1x4xf32>
  %1 = sharc.all_gather %0 {ranks = 2 : i64} : (tensor<1x4xf32>) -> tensor<2x4xf32>
  %z = sharc.constant dense<0.0> : tensor<2x4xf32>
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<4x2xf32>) inits(%z : tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%m: tensor<2x2xf32>, %acc: tensor<2x4xf32>):
    %e = sharc.exp %m : tensor<2x2xf32>
    %p = sharc.matmul %e, %1 : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %u = sharc.add %acc, %p : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    sharc.yield %u : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<4xf32>
// CHECK-NOT: sharc.all_gather
// CHECK: sharc.micro_batch_loop count 2
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[E:.*]] = sharc.exp
// CHECK-NEXT: %[[R:.*]] = sharc.reshape %[[W]] : tensor<4xf32> to tensor<1x4xf32>
// CHECK-NEXT: %[[G:.*]] = sharc.all_gather %[[R]] {ranks = 2 : i64, sharc.parameter_gather}
// CHECK-NEXT: sharc.matmul %[[E]], %[[G]]
// CHECK: sharc.yield
// CHECK-NOT: sharc.all_gather
