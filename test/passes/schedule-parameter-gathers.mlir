// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives="prefetch-bucket-size=4" | FileCheck %s --check-prefix=BUCKET
// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives="prefetch-bucket-size=5" | FileCheck %s --check-prefix=BUCKET5
// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives="max-live-parameters=8" | FileCheck %s --check-prefix=BUCKET
// RUN: sharc-opt %s -split-input-file --sharc-schedule-collectives="prefetch-bucket-size=0" | FileCheck %s --check-prefix=NONE
// RUN: not sharc-opt %s -split-input-file --sharc-schedule-collectives="prefetch-bucket-size=-1" 2>&1 | FileCheck %s --check-prefix=BAD

// ZeRO stage 3's prefetch, as DeepSpeed's: after the wait of each parameter
// gather, the gathers that follow start while the elements they add are
// fewer than min(prefetch-bucket-size, max-live-parameters - live), where
// live counts the gathered parameters (whole elements, 4 each here) not yet
// released.  Default (5e7): after a's wait, b and c start.  A bucket of 4:
// b after a's wait, c after b's.  A bucket of 5 fits b (4 < 5) and then c
// (starting at 4 < 5).  max-live-parameters 8 with a live (4): b only.  A
// bucket of 0: no prefetch, each start just before its wait.

// CHECK-LABEL: func.func @prefetch(
// CHECK: %[[FA:.*]] = sharc.all_gather_start %{{.*}} {ranks = 2 : i64, sharc.parameter_gather}
// CHECK-NEXT: %[[A:.*]] = sharc.wait %[[FA]]
// CHECK-NEXT: sharc.reshape %{{.*}} : tensor<2xf32> to tensor<1x2xf32>
// CHECK-NEXT: %[[FB:.*]] = sharc.all_gather_start
// CHECK-NEXT: sharc.reshape %{{.*}} : tensor<2xf32> to tensor<1x2xf32>
// CHECK-NEXT: %[[FC:.*]] = sharc.all_gather_start
// CHECK-NEXT: sharc.exp %[[A]]
// CHECK-NEXT: %[[B:.*]] = sharc.wait %[[FB]]
// CHECK-NEXT: sharc.neg %[[B]]
// CHECK-NEXT: %[[C:.*]] = sharc.wait %[[FC]]
// CHECK-NEXT: sharc.abs %[[C]]

// BUCKET-LABEL: func.func @prefetch(
// BUCKET: %[[FA:.*]] = sharc.all_gather_start
// BUCKET-NEXT: %[[A:.*]] = sharc.wait %[[FA]]
// BUCKET-NEXT: sharc.reshape
// BUCKET-NEXT: %[[FB:.*]] = sharc.all_gather_start
// BUCKET-NEXT: sharc.exp %[[A]]
// BUCKET-NEXT: %[[B:.*]] = sharc.wait %[[FB]]
// BUCKET-NEXT: sharc.reshape
// BUCKET-NEXT: %[[FC:.*]] = sharc.all_gather_start
// BUCKET-NEXT: sharc.neg %[[B]]
// BUCKET-NEXT: %[[C:.*]] = sharc.wait %[[FC]]
// BUCKET-NEXT: sharc.abs %[[C]]

// BUCKET5-LABEL: func.func @prefetch(
// BUCKET5: sharc.wait
// BUCKET5-NEXT: sharc.reshape
// BUCKET5-NEXT: sharc.all_gather_start
// BUCKET5-NEXT: sharc.reshape
// BUCKET5-NEXT: sharc.all_gather_start
// BUCKET5-NEXT: sharc.exp

// NONE-LABEL: func.func @prefetch(
// NONE: sharc.all_gather_start
// NONE-NEXT: sharc.wait
// NONE-NEXT: sharc.exp
// NONE-NEXT: sharc.reshape
// NONE-NEXT: sharc.all_gather_start
// NONE-NEXT: sharc.wait
// NONE-NEXT: sharc.neg

// BAD: option 'prefetch-bucket-size' must be between 0 and 1099511627776, got -1
func.func @prefetch(
    %a: tensor<2xf32> {sharc.param = #sharc.param<"a", "a">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %b: tensor<2xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %c: tensor<2xf32> {sharc.param = #sharc.param<"c", "c">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) attributes {sharc.zero_stage = 3 : i64} {
  %ra = sharc.reshape %a : tensor<2xf32> to tensor<1x2xf32>
  %ga = sharc.all_gather %ra {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %e = sharc.exp %ga : tensor<2x2xf32>
  %rb = sharc.reshape %b : tensor<2xf32> to tensor<1x2xf32>
  %gb = sharc.all_gather %rb {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %n = sharc.neg %gb : tensor<2x2xf32>
  %rc = sharc.reshape %c : tensor<2xf32> to tensor<1x2xf32>
  %gc = sharc.all_gather %rc {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %s = sharc.abs %gc : tensor<2x2xf32>
  return %e, %n, %s : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

// Below stage 3 every gather is prefetched, whatever the bucket says.

// BUCKET-LABEL: func.func @stage_two(
// BUCKET: sharc.wait
// BUCKET-NEXT: sharc.reshape
// BUCKET-NEXT: sharc.all_gather_start
// BUCKET-NEXT: sharc.reshape
// BUCKET-NEXT: sharc.all_gather_start
// BUCKET-NEXT: sharc.exp
func.func @stage_two(
    %a: tensor<2xf32> {sharc.param = #sharc.param<"a", "a">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %b: tensor<2xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %c: tensor<2xf32> {sharc.param = #sharc.param<"c", "c">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) attributes {sharc.zero_stage = 2 : i64} {
  %ra = sharc.reshape %a : tensor<2xf32> to tensor<1x2xf32>
  %ga = sharc.all_gather %ra {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %e = sharc.exp %ga : tensor<2x2xf32>
  %rb = sharc.reshape %b : tensor<2xf32> to tensor<1x2xf32>
  %gb = sharc.all_gather %rb {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %n = sharc.neg %gb : tensor<2x2xf32>
  %rc = sharc.reshape %c : tensor<2xf32> to tensor<1x2xf32>
  %gc = sharc.all_gather %rc {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %s = sharc.abs %gc : tensor<2x2xf32>
  return %e, %n, %s : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

// a is gathered again after b (its reuse distance released it): at a's
// wait the second gather of a is not prefetched, a's first copy being live
// there (two copies of one parameter would be held); at b's wait a's first
// copy is gone, and it starts there.

// CHECK-LABEL: func.func @regather(
// CHECK: %[[FA:.*]] = sharc.all_gather_start
// CHECK-NEXT: %[[A:.*]] = sharc.wait %[[FA]]
// CHECK-NEXT: sharc.reshape %[[B:[^ ]*]]
// CHECK-NEXT: %[[FB:.*]] = sharc.all_gather_start
// CHECK-NEXT: sharc.exp %[[A]]
// CHECK-NEXT: %[[GB:.*]] = sharc.wait %[[FB]]
// CHECK-NEXT: sharc.reshape
// CHECK-NEXT: %[[FA2:.*]] = sharc.all_gather_start
// CHECK-NEXT: sharc.neg %[[GB]]
// CHECK-NEXT: %[[A2:.*]] = sharc.wait %[[FA2]]
// CHECK-NEXT: sharc.abs %[[A2]]
func.func @regather(
    %a: tensor<2xf32> {sharc.param = #sharc.param<"a", "a">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>},
    %b: tensor<2xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<4xf32>, ranks = 2>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) attributes {sharc.zero_stage = 3 : i64} {
  %ra = sharc.reshape %a : tensor<2xf32> to tensor<1x2xf32>
  %ga = sharc.all_gather %ra {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %e = sharc.exp %ga : tensor<2x2xf32>
  %rb = sharc.reshape %b : tensor<2xf32> to tensor<1x2xf32>
  %gb = sharc.all_gather %rb {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %n = sharc.neg %gb : tensor<2x2xf32>
  %ra2 = sharc.reshape %a : tensor<2xf32> to tensor<1x2xf32>
  %ga2 = sharc.all_gather %ra2 {ranks = 2 : i64, sharc.parameter_gather} : (tensor<1x2xf32>) -> tensor<2x2xf32>
  %s = sharc.abs %ga2 : tensor<2x2xf32>
  return %e, %n, %s : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}
