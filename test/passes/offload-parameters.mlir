// RUN: sharc-opt %s --sharc-offload-optimizer="device=none param-device=nvme" | FileCheck %s
// RUN: sharc-opt %s --sharc-offload-optimizer="device=none param-device=nvme host-update=true" | FileCheck %s --check-prefix=HOST
// RUN: sharc-opt %s --sharc-offload-optimizer="device=none param-device=nvme" --sharc-plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: not sharc-opt %s --sharc-offload-optimizer="param-device=disk" 2>&1 | FileCheck %s --check-prefix=BAD

// ZeRO stage 3's parameter offload to NVMe (param-device=nvme): the slices
// the gathers read, in each micro-batch, live in files.  Each reader reads a
// swap-in of its own, started where the previous reader of a swapped
// parameter stands in the same block (one read ahead); the new value is
// written after the op computing it and after every read of the old one
// (here the output old_a, which returns a's value before the step).

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[A:[^:]*]]: tensor<4xf32> {sharc.param = #sharc.param<"a", "a">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>, sharc.storage = #sharc.storage<nvme>}
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>, sharc.storage = #sharc.storage<nvme>}
// CHECK: sharc.micro_batch_loop count 2
// CHECK: %[[RA:.*]] = sharc.swap_in_start %[[A]] : tensor<4xf32>
// CHECK-NEXT: %[[WA:.*]] = sharc.wait %[[RA]]
// CHECK-NEXT: %[[RB:.*]] = sharc.swap_in_start %[[B]] : tensor<4xf32>
// CHECK-NEXT: sharc.all_gather %[[WA]]
// CHECK-NEXT: %[[WB:.*]] = sharc.wait %[[RB]]
// CHECK-NEXT: sharc.all_gather %[[WB]]
// CHECK: sharc.yield
// CHECK: %[[RA2:.*]] = sharc.swap_in_start %[[A]]
// CHECK-NEXT: %[[WA2:.*]] = sharc.wait %[[RA2]]
// CHECK-NEXT: %[[RB2:.*]] = sharc.swap_in_start %[[B]]
// CHECK-NEXT: %[[NA:.*]] = sharc.fusion %[[WA2]]
// CHECK: %[[WB2:.*]] = sharc.wait %[[RB2]]
// CHECK-NEXT: %[[RO:.*]] = sharc.swap_in_start %[[A]]
// CHECK-NEXT: %[[NB:.*]] = sharc.fusion %[[WB2]]
// CHECK: %[[OB:.*]] = sharc.swap_out_start %[[NB]] to %[[B]]
// CHECK-NEXT: %[[OLD:.*]] = sharc.wait %[[RO]]
// CHECK-NEXT: %[[OA:.*]] = sharc.swap_out_start %[[NA]] to %[[A]]
// CHECK-NEXT: %[[DA:.*]] = sharc.wait %[[OA]]
// CHECK-NEXT: %[[DB:.*]] = sharc.wait %[[OB]]
// CHECK-NEXT: return %{{.*}}, %[[DA]], %[[DB]], %[[OLD]] :

// With host-update (the CUDA target's layout) the files are read into host
// memory and each gather reads a copy on the device; the new values,
// computed on the host, are written from there.
// HOST: sharc.micro_batch_loop count 2
// HOST: %[[RA:.*]] = sharc.swap_in_start %arg0 {sharc.on_host}
// HOST-NEXT: %[[WA:.*]] = sharc.wait %[[RA]]
// HOST-NEXT: sharc.swap_in_start %arg1 {sharc.on_host}
// HOST-NEXT: %[[TA:.*]] = sharc.transfer_start %[[WA]] to <device>
// HOST-NEXT: %[[DA:.*]] = sharc.wait %[[TA]]
// HOST-NEXT: sharc.all_gather %[[DA]]
// HOST: sharc.yield
// HOST: %[[NA:.*]] = sharc.fusion %{{.*}} {sharc.on_host}
// HOST: sharc.swap_out_start %[[NA]] to %arg0 {sharc.on_host}

// The swap-ins get whole 4096-byte blocks, aligned for O_DIRECT: the two in
// flight in the loop take two.
// PLAN: sharc.micro_batch_loop
// PLAN: sharc.swap_in_start %arg0 {sharc.offsets = array<i64: [[OFF:[0-9]+]]>}
// PLAN-NOT: swap_in_start {{.*}} array<i64: [[OFF]]>
// PLAN: sharc.swap_in_start %arg1 {sharc.offsets = array<i64: {{[0-9]+}}>}

// BAD: param-device must be none, cpu or nvme, not 'disk'
func.func @train_step(%a: tensor<4xf32> {sharc.param = #sharc.param<"a", "a">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>},
                      %b: tensor<4xf32> {sharc.param = #sharc.param<"b", "b">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>},
                      %x: tensor<2x8xf32> {sharc.input = "x"})
    -> (tensor<8xf32> {sharc.output = "y"},
        tensor<4xf32> {sharc.param = #sharc.param<"a", "a">},
        tensor<4xf32> {sharc.param = #sharc.param<"b", "b">},
        tensor<4xf32> {sharc.output = "old_a"}) {
  %z = sharc.constant dense<0.0> : tensor<8xf32>
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<2x8xf32>) inits(%z : tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%m: tensor<1x8xf32>, %acc: tensor<8xf32>):
    %ga = sharc.all_gather %a {ranks = 2 : i64, sharc.parameter_gather} : (tensor<4xf32>) -> tensor<8xf32>
    %gb = sharc.all_gather %b {ranks = 2 : i64, sharc.parameter_gather} : (tensor<4xf32>) -> tensor<8xf32>
    %s = sharc.add %ga, %gb : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %u = sharc.add %acc, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    sharc.yield %u : tensor<8xf32>
  }
  %na = sharc.fusion %a : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%v: tensor<4xf32>):
    %w = sharc.neg %v : tensor<4xf32>
    sharc.yield %w : tensor<4xf32>
  }
  %nb = sharc.fusion %b : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%v: tensor<4xf32>):
    %w = sharc.neg %v : tensor<4xf32>
    sharc.yield %w : tensor<4xf32>
  }
  return %r, %na, %nb, %a : tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
