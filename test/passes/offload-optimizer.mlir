// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="sub-group-size=10" | FileCheck %s
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="sub-group-size=10 pipeline-read=false pipeline-write=false" | FileCheck %s --check-prefix=SERIAL
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="sub-group-size=1" | FileCheck %s --check-prefix=EACH
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer --sharc-plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="sub-group-size=10" | sharc-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="device=cpu" | FileCheck %s --check-prefix=HOST
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="device=cpu" --sharc-plan-memory | FileCheck %s --check-prefix=HOSTPLAN
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="sub-group-size=10 host-update=true" | FileCheck %s --check-prefix=NVMEHOST
// RUN: sharc-opt %s -split-input-file --sharc-offload-optimizer="device=none param-device=cpu" | FileCheck %s --check-prefix=PARAM
// RUN: not sharc-opt %s -split-input-file --sharc-offload-optimizer="device=disk" 2>&1 | FileCheck %s --check-prefix=BAD

// Three parameters of 8, 8 and 4 elements, each with Adam's two moments,
// updated in that order.  Every moment moves to NVMe; with sub-groups of at
// least 10 elements u and v form the first sub-group (8 + 8 >= 10) and w the
// second.  The second sub-group's reads start right after the first's waits,
// before the first sub-group's updates (pipeline-read); each new moment is
// written right after the update computing it, and the first sub-group's
// writes are waited for just before the second's first write
// (pipeline-write), the second's just before the return.  The step counter
// (no parameter) and the parameters stay in device memory.

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %arg2: tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg">, sharc.storage = #sharc.storage<nvme>}
// CHECK-SAME: %arg3: tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg_sq">, sharc.storage = #sharc.storage<nvme>}
// CHECK-SAME: %arg8: tensor<i64> {sharc.state = #sharc.state<"", "step">})
// CHECK: %[[G:.*]] = sharc.reduce
// CHECK-NEXT: %[[RU1:.*]] = sharc.swap_in_start %arg2 : tensor<8xf32>
// CHECK-NEXT: %[[RU2:.*]] = sharc.swap_in_start %arg3
// CHECK-NEXT: %[[RV1:.*]] = sharc.swap_in_start %arg4
// CHECK-NEXT: %[[RV2:.*]] = sharc.swap_in_start %arg5
// CHECK-NEXT: %[[MU1:.*]] = sharc.wait %[[RU1]]
// CHECK-NEXT: %[[MU2:.*]] = sharc.wait %[[RU2]]
// CHECK-NEXT: %[[MV1:.*]] = sharc.wait %[[RV1]]
// CHECK-NEXT: %[[MV2:.*]] = sharc.wait %[[RV2]]
// CHECK-NEXT: %[[RW1:.*]] = sharc.swap_in_start %arg6 : tensor<4xf32>
// CHECK-NEXT: %[[RW2:.*]] = sharc.swap_in_start %arg7
// CHECK-NEXT: %[[U:.*]]:3 = sharc.fusion %arg0, %[[MU1]], %[[MU2]], %[[G]]
// CHECK: %[[WU1:.*]] = sharc.swap_out_start %[[U]]#1 to %arg2 : tensor<8xf32>
// CHECK-NEXT: %[[WU2:.*]] = sharc.swap_out_start %[[U]]#2 to %arg3
// CHECK-NEXT: %[[V:.*]]:3 = sharc.fusion %arg1, %[[MV1]], %[[MV2]], %[[G]]
// CHECK: %[[WV1:.*]] = sharc.swap_out_start %[[V]]#1 to %arg4
// CHECK-NEXT: %[[WV2:.*]] = sharc.swap_out_start %[[V]]#2 to %arg5
// CHECK-NEXT: %[[MW1:.*]] = sharc.wait %[[RW1]]
// CHECK-NEXT: %[[MW2:.*]] = sharc.wait %[[RW2]]
// CHECK-NEXT: %[[W:.*]]:2 = sharc.fusion %[[MW1]], %[[MW2]], %[[G]]
// CHECK: %[[SU1:.*]] = sharc.wait %[[WU1]]
// CHECK-NEXT: %[[SU2:.*]] = sharc.wait %[[WU2]]
// CHECK-NEXT: %[[SV1:.*]] = sharc.wait %[[WV1]]
// CHECK-NEXT: %[[SV2:.*]] = sharc.wait %[[WV2]]
// CHECK-NEXT: %[[WW1:.*]] = sharc.swap_out_start %[[W]]#0 to %arg6
// CHECK-NEXT: %[[WW2:.*]] = sharc.swap_out_start %[[W]]#1 to %arg7
// CHECK: %[[NEXT:.*]] = sharc.add %arg8
// CHECK-NEXT: %[[SW1:.*]] = sharc.wait %[[WW1]]
// CHECK-NEXT: %[[SW2:.*]] = sharc.wait %[[WW2]]
// CHECK-NEXT: return %[[G]], %[[U]]#0, %[[V]]#0, %[[SU1]], %[[SU2]], %[[SV1]], %[[SV2]], %[[SW1]], %[[SW2]], %[[NEXT]]

// Without pipelining each read is waited for right before its sub-group's
// first update, and each write right after it starts.
// SERIAL-LABEL: func.func @train_step(
// SERIAL: sharc.reduce
// SERIAL-COUNT-4: sharc.swap_in_start
// SERIAL-COUNT-4: sharc.wait
// SERIAL-NEXT: sharc.fusion
// SERIAL: sharc.swap_out_start
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.swap_out_start
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.fusion
// SERIAL: sharc.swap_out_start
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.swap_out_start
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.swap_in_start %arg6
// SERIAL-NEXT: sharc.swap_in_start %arg7
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.wait
// SERIAL-NEXT: sharc.fusion

// Sub-groups of one element: one parameter each.
// EACH-LABEL: func.func @train_step(
// EACH: sharc.reduce
// EACH-NEXT: sharc.swap_in_start %arg2
// EACH-NEXT: sharc.swap_in_start %arg3
// EACH-NEXT: sharc.wait
// EACH-NEXT: sharc.wait
// EACH-NEXT: sharc.swap_in_start %arg4
// EACH-NEXT: sharc.swap_in_start %arg5
// EACH-NEXT: sharc.fusion

// The plan: each read lands at an offset aligned to 4096 bytes (O_DIRECT),
// each update writes the new moments over the ones it read (same offsets),
// and the written values take no arena memory of their own.
// PLAN-LABEL: func.func @train_step(
// PLAN: sharc.swap_in_start %arg2 {sharc.offsets = array<i64: 0>}
// PLAN-NEXT: sharc.swap_in_start %arg3 {sharc.offsets = array<i64: 4096>}
// PLAN: sharc.fusion %arg0, %{{.*}}, %{{.*}}, %{{.*}} {sharc.offsets = array<i64: {{[0-9]+}}, 0, 4096>}
// PLAN: sharc.swap_out_start %{{.*}} to %arg2 {sharc.offsets = array<i64: -1>}

// ROUNDTRIP: sharc.swap_out_start %{{.*}} to %arg7 : tensor<4xf32>

// device=cpu (ZeRO-Offload to the CPU, the CUDA target's layout): the moments
// stay in host memory and the three updates run on the host.  What they read
// in device memory is copied to the host once each (the gradient sum %g for
// all three, each parameter for its own update: started right after the op
// computing it, or before the first host reader for an argument), and the new
// parameters, which the step returns into device memory, are copied back and
// waited for before the return.  The new moments are written into the host
// buffers (the return names the update's results).
// HOST-LABEL: func.func @train_step(
// HOST-SAME: %arg2: tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg">, sharc.storage = #sharc.storage<host>}
// HOST-SAME: %arg8: tensor<i64> {sharc.state = #sharc.state<"", "step">})
// HOST: %[[G:.*]] = sharc.reduce
// HOST-NEXT: %[[TG:.*]] = sharc.transfer_start %[[G]] to <host> : tensor<f32>
// HOST-NEXT: %[[TU:.*]] = sharc.transfer_start %arg0 to <host> : tensor<8xf32>
// HOST-NEXT: %[[HU:.*]] = sharc.wait %[[TU]]
// HOST-NEXT: %[[HG:.*]] = sharc.wait %[[TG]]
// HOST-NEXT: %[[U:.*]]:3 = sharc.fusion %[[HU]], %arg2, %arg3, %[[HG]] {sharc.on_host}
// HOST: %[[BU:.*]] = sharc.transfer_start %[[U]]#0 to <device>
// HOST: %[[V:.*]]:3 = sharc.fusion %{{.*}}, %arg4, %arg5, %[[HG]] {sharc.on_host}
// HOST: %[[W:.*]]:2 = sharc.fusion %arg6, %arg7, %[[HG]] {sharc.on_host}
// HOST: %[[NU:.*]] = sharc.wait %[[BU]]
// HOST: return %[[G]], %[[NU]], %{{.*}}, %[[U]]#1, %[[U]]#2, %[[V]]#1, %[[V]]#2, %[[W]]#0, %[[W]]#1,

// The values in host memory are planned in an arena of their own: the
// first copy to the host is at host offset 0 while device values start at 0
// too.
// HOSTPLAN: func.func @train_step({{.*}} attributes {sharc.arena_bytes = {{[0-9]+}} : i64, sharc.host_arena_bytes = {{[0-9]+}} : i64}
// HOSTPLAN: sharc.reduce %arg0 {{{.*}}sharc.offsets = array<i64: 0>}
// HOSTPLAN-NEXT: sharc.transfer_start %{{.*}} to <host> {sharc.offsets = array<i64: 0>}

// NVMe with host-update (the CUDA target's layout): the sub-groups as above,
// but the files are read into host memory (sharc.on_host on the reads), the
// updates run on the host on copies of their device inputs, and the new
// moments are written to the files from host memory.
// NVMEHOST-LABEL: func.func @train_step(
// NVMEHOST: sharc.swap_in_start %arg2 {sharc.on_host} : tensor<8xf32>
// NVMEHOST: sharc.transfer_start %arg0 to <host>
// NVMEHOST: %[[U:.*]]:3 = sharc.fusion %{{.*}} {sharc.on_host}
// NVMEHOST: sharc.transfer_start %[[U]]#0 to <device>
// NVMEHOST-NEXT: sharc.swap_out_start %[[U]]#1 to %arg2 {sharc.on_host}
// NVMEHOST-NEXT: sharc.swap_out_start %[[U]]#2 to %arg3 {sharc.on_host}

// BAD: sharc-offload-optimizer: device must be none, cpu or nvme, not 'disk'
func.func @train_step(%u: tensor<8xf32> {sharc.param = #sharc.param<"u", "u">},
                      %v: tensor<8xf32> {sharc.param = #sharc.param<"v", "v">},
                      %mu: tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg">},
                      %su: tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg_sq">},
                      %mv: tensor<8xf32> {sharc.state = #sharc.state<"v", "exp_avg">},
                      %sv: tensor<8xf32> {sharc.state = #sharc.state<"v", "exp_avg_sq">},
                      %mw: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
                      %sw: tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg_sq">},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<f32> {sharc.output = "loss"},
        tensor<8xf32> {sharc.param = #sharc.param<"u", "u">},
        tensor<8xf32> {sharc.param = #sharc.param<"v", "v">},
        tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg">},
        tensor<8xf32> {sharc.state = #sharc.state<"u", "exp_avg_sq">},
        tensor<8xf32> {sharc.state = #sharc.state<"v", "exp_avg">},
        tensor<8xf32> {sharc.state = #sharc.state<"v", "exp_avg_sq">},
        tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg">},
        tensor<4xf32> {sharc.state = #sharc.state<"w", "exp_avg_sq">},
        tensor<i64> {sharc.state = #sharc.state<"", "step">}) {
  %g = sharc.reduce %u {axes = array<i64: 0>, kind = #sharc.reduce_kind<sum>} : (tensor<8xf32>) -> tensor<f32>
  %nu:3 = sharc.fusion %u, %mu, %su, %g : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  ^bb0(%p: tensor<8xf32>, %m: tensor<8xf32>, %s: tensor<8xf32>, %d: tensor<f32>):
    %m1 = sharc.add %m, %d : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %s1 = sharc.mul %s, %d : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %p1 = sharc.sub %p, %m1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    sharc.yield %p1, %m1, %s1 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }
  %nv:3 = sharc.fusion %v, %mv, %sv, %g : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  ^bb0(%p: tensor<8xf32>, %m: tensor<8xf32>, %s: tensor<8xf32>, %d: tensor<f32>):
    %m1 = sharc.add %m, %d : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %s1 = sharc.mul %s, %d : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %p1 = sharc.sub %p, %m1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    sharc.yield %p1, %m1, %s1 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }
  %nw:2 = sharc.fusion %mw, %sw, %g : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%m: tensor<4xf32>, %s: tensor<4xf32>, %d: tensor<f32>):
    %m1 = sharc.add %m, %d : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    %s1 = sharc.mul %s, %d : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    sharc.yield %m1, %s1 : tensor<4xf32>, tensor<4xf32>
  }
  %one = sharc.constant dense<1> : tensor<i64>
  %next = sharc.add %step, %one : (tensor<i64>, tensor<i64>) -> tensor<i64>
  return %g, %nu#0, %nv#0, %nu#1, %nu#2, %nv#1, %nv#2, %nw#0, %nw#1, %next : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>
}

// -----

// Mixed precision from ZeRO stage 1 on: the fp32 master slice %p is read by a
// cast to its bf16 compute copy (which the rest of the step reads) and by its
// update.  The copy becomes state carried from step to step (a new argument
// and result, #sharc.state<"p", "compute_copy">, this rank's bf16 slice),
// whose new value is the cast of the new master, right after the update; the
// master, then read by its update alone, is offloaded with its moment.  The
// copy stays in device memory.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %arg0: tensor<4xf32> {sharc.param = #sharc.param<"p", "p">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>, sharc.storage = #sharc.storage<nvme>}
// CHECK-SAME: %arg3: tensor<4xbf16> {sharc.slice = #sharc.slice<tensor<8xbf16>, ranks = 2>, sharc.state = #sharc.state<"p", "compute_copy">})
// CHECK-SAME: tensor<4xbf16> {sharc.state = #sharc.state<"p", "compute_copy">})
// CHECK-NOT: sharc.cast %arg0
// CHECK: %[[NEW:.*]]:2 = sharc.fusion
// CHECK: %[[COPY:.*]] = sharc.fusion %[[NEW]]#0 : (tensor<4xf32>) -> tensor<4xbf16>
// CHECK: sharc.cast
// CHECK: return %arg3, %{{.*}}, %{{.*}}, %[[COPY]] :

// HOST-LABEL: func.func @train_step(
// HOST-SAME: sharc.storage = #sharc.storage<host>}
// HOST: %[[NEW:.*]]:2 = sharc.fusion {{.*}} {sharc.on_host}
// HOST: %[[COPY:.*]] = sharc.fusion %[[NEW]]#0 {sharc.on_host} : (tensor<4xf32>) -> tensor<4xbf16>
// HOST: sharc.transfer_start %[[COPY]] to <device>
func.func @train_step(%p: tensor<4xf32> {sharc.param = #sharc.param<"p", "p">, sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>},
                      %m: tensor<4xf32> {sharc.slice = #sharc.slice<tensor<8xf32>, ranks = 2>, sharc.state = #sharc.state<"p", "exp_avg">},
                      %g: tensor<4xf32> {sharc.input = "g"})
    -> (tensor<4xbf16> {sharc.output = "copy"},
        tensor<4xf32> {sharc.param = #sharc.param<"p", "p">},
        tensor<4xf32> {sharc.state = #sharc.state<"p", "exp_avg">}) {
  %c = sharc.fusion %p : (tensor<4xf32>) -> tensor<4xbf16> {
  ^bb0(%a: tensor<4xf32>):
    %b = sharc.cast %a : tensor<4xf32> to tensor<4xbf16>
    sharc.yield %b : tensor<4xbf16>
  }
  %new:2 = sharc.fusion %p, %m, %g : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %d: tensor<4xf32>):
    %m1 = sharc.add %b, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %p1 = sharc.sub %a, %m1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    sharc.yield %p1, %m1 : tensor<4xf32>, tensor<4xf32>
  }
  return %c, %new#0, %new#1 : tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
}

// The same step with ZeRO stage 3's parameter offload alone
// (param-device=cpu, device=none): the carried bf16 copy stays in host
// memory; the output that reads it gets a copy made on the device for it,
// and its new value, cast on the device from the new master (which stays on
// the device with its moment), is copied to the host before the return.
// PARAM: %arg3: tensor<4xbf16> {sharc.slice = #sharc.slice<tensor<8xbf16>, ranks = 2>, sharc.state = #sharc.state<"p", "compute_copy">, sharc.storage = #sharc.storage<host>})
// PARAM: %[[NEW:.*]]:2 = sharc.fusion %arg0, %arg1, %arg2 :
// PARAM: %[[COPY:.*]] = sharc.fusion %[[NEW]]#0 : (tensor<4xf32>) -> tensor<4xbf16>
// PARAM: %[[UP:.*]] = sharc.transfer_start %[[COPY]] to <host>
// PARAM: %[[OUT:.*]] = sharc.transfer_start %arg3 to <device>
// PARAM: %[[DEV:.*]] = sharc.wait %[[OUT]]
// PARAM: %[[HOSTCOPY:.*]] = sharc.wait %[[UP]]
// PARAM: return %[[DEV]], %[[NEW]]#0, %[[NEW]]#1, %[[HOSTCOPY]] :
