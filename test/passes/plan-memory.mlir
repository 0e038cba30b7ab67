// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-plan-memory | FileCheck %s
// RUN: sharc-opt %s -split-input-file -verify-diagnostics --sharc-plan-memory="alignment=8" | FileCheck %s --check-prefix=ALIGN8

// A chain: every value is 64 x 4 = 256 bytes (one alignment unit).  Live
// ranges by op index: a [0, 1], b [1, 2], c [2, 3] (c is returned by op 3).
// Greedy (equal sizes, so definition order): a at 0; b is live with a, so
// 256; c is live with b only and reuses a's buffer at 0.  Arena: 512.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME: attributes {sharc.arena_bytes = 512 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: return
func.func @chain(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = sharc.exp %x : tensor<64xf32>
  %b = sharc.exp %a : tensor<64xf32>
  %c = sharc.exp %b : tensor<64xf32>
  return %c : tensor<64xf32>
}

// -----

// Sizes and live ranges (op index: value, bytes, live range):
//   0: a  256 [0, 3]    1: b 1024 [1, 2]    2: c 1024 [2, 5] (returned)
//   3: d  256 [3, 4]    4: e  256 [4, 5] (returned)
// Largest first, ties in definition order: b, c, a, d, e.
//   b -> 0.
//   c is live with b [0, 1024) -> 1024.
//   a is live with b [0, 1024) and c [1024, 2048) -> 2048.
//   d is live with c [1024, 2048) and a [2048, 2304); 0 is free -> 0.
//   e is live with c [1024, 2048) and d [0, 256) -> 256.
// Arena: a ends at 2304, which is also the lower bound (a, b, c at op 2).

// CHECK-LABEL: func.func @sizes(
// CHECK-SAME: attributes {sharc.arena_bytes = 2304 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 2048>}
// CHECK-NEXT: sharc.broadcast %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 1024>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: return
func.func @sizes(%x: tensor<64xf32>) -> (tensor<4x64xf32>, tensor<64xf32>) {
  %a = sharc.exp %x : tensor<64xf32>
  %b = sharc.broadcast %a : tensor<64xf32> to tensor<4x64xf32>
  %c = sharc.exp %b : tensor<4x64xf32>
  %d = sharc.exp %a : tensor<64xf32>
  %e = sharc.exp %d : tensor<64xf32>
  return %c, %e : tensor<4x64xf32>, tensor<64xf32>
}

// -----

// Constants are read-only data: -1, never in the arena.  s (10 x f32 = 40
// bytes) is live over [1, 2], m (10 x i1 = 10 bytes) over [2, 3].
// Alignment 256: both round to 256; s at 0, m at 256; the arena peak is the
// last byte in use, 256 + 10 = 266 (padding after the top value is never
// touched).  Alignment 8: s takes 40 bytes, m 16; s at 0, m at 40; peak 50.

// CHECK-LABEL: func.func @consts(
// CHECK-SAME: attributes {sharc.arena_bytes = 266 : i64}
// CHECK-NEXT: sharc.constant {sharc.offsets = array<i64: -1>}
// CHECK-NEXT: sharc.add %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.cast %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: return

// ALIGN8-LABEL: func.func @consts(
// ALIGN8-SAME: attributes {sharc.arena_bytes = 50 : i64}
// ALIGN8-NEXT: sharc.constant {sharc.offsets = array<i64: -1>}
// ALIGN8-NEXT: sharc.add %{{.*}} {sharc.offsets = array<i64: 0>}
// ALIGN8-NEXT: sharc.cast %{{.*}} {sharc.offsets = array<i64: 40>}
// ALIGN8-NEXT: return
func.func @consts(%x: tensor<10xf32>) -> tensor<10xi1> {
  %k = sharc.constant dense<1.0> : tensor<10xf32>
  %s = sharc.add %x, %k : (tensor<10xf32>, tensor<10xf32>) -> tensor<10xf32>
  %m = sharc.cast %s : tensor<10xf32> to tensor<10xi1>
  return %m : tensor<10xi1>
}

// -----

// A reshape is a view: r shares a's offset and cr shares c's; a and c live
// until the add reads their views (op 5).  Live ranges (op index):
//   a [0, 5]  b [2, 3]  c [3, 5]  d [5, 7] (returned); 256 bytes each.
//   a -> 0;  b -> 256;  c is live with a and b -> 512;  d is live with a and
//   c, b is dead -> 256.  The reshape of the argument x has no arena memory.

// CHECK-LABEL: func.func @views(
// CHECK-SAME: attributes {sharc.arena_bytes = 768 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.reshape %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.reshape %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.add %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.reshape %{{.*}} {sharc.offsets = array<i64: -1>}
// CHECK-NEXT: return
func.func @views(%x: tensor<64xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %a = sharc.exp %x : tensor<64xf32>
  %r = sharc.reshape %a : tensor<64xf32> to tensor<8x8xf32>
  %b = sharc.exp %x : tensor<64xf32>
  %c = sharc.exp %b : tensor<64xf32>
  %cr = sharc.reshape %c : tensor<64xf32> to tensor<8x8xf32>
  %d = sharc.add %r, %cr : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %v = sharc.reshape %x : tensor<64xf32> to tensor<8x8xf32>
  return %d, %v : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A fusion computed inside its user's kernel (sharc.fuse_into) takes no
// memory, and its operands are read where the user is: a [0, 2] (the fusion
// at op 1 reads it at the softmax, op 2), p [2, 3] (returned).  a -> 0, p is
// live with a -> 256; the fusion -1.

// CHECK-LABEL: func.func @prologue(
// CHECK-SAME: attributes {sharc.arena_bytes = 512 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.fusion %{{.*}} {sharc.fuse_into, sharc.offsets = array<i64: -1>}
// CHECK: sharc.softmax %{{.*}} {axis = 1 : i64, sharc.offsets = array<i64: 256>}
func.func @prologue(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = sharc.exp %x : tensor<8x8xf32>
  %f = sharc.fusion %a {sharc.fuse_into} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%v: tensor<8x8xf32>):
    %n = sharc.neg %v : tensor<8x8xf32>
    sharc.yield %n : tensor<8x8xf32>
  }
  %p = sharc.softmax %f {axis = 1 : i64} : tensor<8x8xf32>
  return %p : tensor<8x8xf32>
}

// -----

// A matmul run as its bias add's GEMM (sharc.fuse_into) takes no memory, and
// its operands are read at the add: a [0, 2] (the matmul at op 1 reads it at
// the add, op 2), z [2, 3] (returned).  a -> 0, z is live with a -> 256.

// CHECK-LABEL: func.func @gemm_epilogue(
// CHECK-SAME: attributes {sharc.arena_bytes = 512 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.matmul %{{.*}} {sharc.fuse_into, sharc.offsets = array<i64: -1>}
// CHECK-NEXT: sharc.add %{{.*}} {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 0>, sharc.offsets = array<i64: 256>}
func.func @gemm_epilogue(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<8x8xf32> {
  %a = sharc.exp %x : tensor<8x8xf32>
  %y = sharc.matmul %a, %w {sharc.fuse_into} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %z = sharc.add %y, %b {sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 0, bias = 1, result = 0>} : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  return %z : tensor<8x8xf32>
}

// -----

// A transpose read in place by two GEMMs (sharc.fuse_into, several users)
// takes no memory, and its operand lives until the later GEMM: a [0, 4] (the
// transpose at op 1 is read at ops 2 and 4), s [2, 3], c [3, 4], o [4, 5].
// Each is 512 bytes: a -> 0, s -> 512, c (live with a and s) -> 1024, o
// (live with a and c; s is dead) -> 512.

// CHECK-LABEL: func.func @view_with_two_readers(
// CHECK-SAME: attributes {sharc.arena_bytes = 1536 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.transpose %{{.*}} {permutation = array<i64: 1, 0, 2>, sharc.fuse_into, sharc.offsets = array<i64: -1>}
// CHECK-NEXT: sharc.matmul %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 1024>}
// CHECK-NEXT: sharc.matmul %{{.*}} {sharc.offsets = array<i64: 512>}
func.func @view_with_two_readers(%x: tensor<4x8x4xf32>, %w: tensor<8x4x4xf32>) -> tensor<8x4x4xf32> {
  %a = sharc.exp %x : tensor<4x8x4xf32>
  %t = sharc.transpose %a {permutation = array<i64: 1, 0, 2>, sharc.fuse_into} : (tensor<4x8x4xf32>) -> tensor<8x4x4xf32>
  %s = sharc.matmul %t, %w : (tensor<8x4x4xf32>, tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  %c = sharc.exp %s : tensor<8x4x4xf32>
  %o = sharc.matmul %t, %c : (tensor<8x4x4xf32>, tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  return %o : tensor<8x4x4xf32>
}

// -----

// Scratch space (sharc.scratch_bytes) is live at its op only: 100 bytes (256
// reserved) at op 1, counted before the op's result in definition order.
// Live ranges: a [0, 2], scratch [1, 1], r [1, 2], s [2, 3].  All 256 bytes,
// so definition order: a -> 0, scratch -> 256, r -> 512, s (live with a and
// r; the scratch is dead) -> 256.

// CHECK-LABEL: func.func @scratch(
// CHECK-SAME: attributes {sharc.arena_bytes = 768 : i64}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 512>, sharc.scratch_bytes = 100 : i64, sharc.scratch_offset = 256 : i64}
// CHECK-NEXT: sharc.add %{{.*}} {sharc.offsets = array<i64: 256>}
func.func @scratch(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = sharc.exp %x : tensor<64xf32>
  %r = sharc.exp %a {sharc.scratch_bytes = 100 : i64} : tensor<64xf32>
  %s = sharc.add %a, %r : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %s : tensor<64xf32>
}

// -----

// Planning needs a single block.

// expected-error @below {{sharc-plan-memory: function '@branches' has 2 blocks; memory planning needs a single block}}
func.func @branches(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
^unreachable:
  %zero = sharc.constant dense<0.0> : tensor<f32>
  return %zero : tensor<f32>
}

// -----

// A micro-batch loop (every value 64 x 4 = 256 bytes).  Program order: 0 z,
// 1 before, 2 the loop, 3 t, 4 p, 5 u, 6 the yield, 7 after, 8 return.
// The loop's result, its carried argument, its init z (read by the loop
// only) and the yielded u (a fusion that reads the carried value element for
// element, which nothing after it reads) share one buffer, live [0, 7].
// `before` is read in the body at op 3 only, but every iteration reads it:
// it lives to the end of the body, 6, so p (live [4, 5]) cannot reuse it.
// Placement: before 0, the loop 256, t 512, p 768; after (live [7, 8]) takes
// before's 0 once the loop is over.
// CHECK-LABEL: func.func @loop(
// CHECK-SAME: attributes {sharc.arena_bytes = 1024 : i64}
// CHECK: sharc.broadcast %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.micro_batch_loop count 2 {{.*}} {sharc.offsets = array<i64: 256>}
// CHECK: sharc.mul %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.reduce %{{.*}}sharc.offsets = array<i64: 768>}
// CHECK-NEXT: sharc.fusion %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
func.func @loop(%x: tensor<128x64xf32>, %w: tensor<64xf32>) -> tensor<64xf32> {
  %s = sharc.constant dense<0.0> : tensor<f32>
  %z = sharc.broadcast %s : tensor<f32> to tensor<64xf32>
  %before = sharc.exp %w : tensor<64xf32>
  %r = sharc.micro_batch_loop count 2 inputs(%x : tensor<128x64xf32>) inits(%z : tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%m: tensor<64x64xf32>, %acc: tensor<64xf32>):
    %t = sharc.mul %before, %before : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %p = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0>} : (tensor<64x64xf32>) -> tensor<64xf32>
    %u = sharc.fusion %acc, %t, %p : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32> {
    ^bb0(%a: tensor<64xf32>, %b: tensor<64xf32>, %c: tensor<64xf32>):
      %0 = sharc.add %a, %b : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %1 = sharc.add %0, %c : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      sharc.yield %1 : tensor<64xf32>
    }
    sharc.yield %u : tensor<64xf32>
  }
  %after = sharc.exp %r : tensor<64xf32>
  return %after : tensor<64xf32>
}

// -----

// Nothing is shared when it may not be: the init is also read after the
// loop, and the carried value is read after the op that yields the next one
// (which is not a fusion either).  Program order: 0 z, 1 the loop, 2 u, 3 v,
// 4 the yield, 5 y, 6 return.  Buffers: z [0, 5], the loop [1, 5],
// u [2, 4], v [3, 3], y [5, 6]: z 0, the loop 256, u 512, v 768; y reuses
// u's 512 after the loop.
// CHECK-LABEL: func.func @loop_copies(
// CHECK-SAME: attributes {sharc.arena_bytes = 1024 : i64}
// CHECK: sharc.broadcast %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.micro_batch_loop count 4 {{.*}} {sharc.offsets = array<i64: 256>}
// CHECK: sharc.exp %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 768>}
// CHECK: sharc.add %{{.*}} {sharc.offsets = array<i64: 512>}
func.func @loop_copies(%w: tensor<64xf32>) -> tensor<64xf32> {
  %s = sharc.constant dense<1.0> : tensor<f32>
  %z = sharc.broadcast %s : tensor<f32> to tensor<64xf32>
  %r = sharc.micro_batch_loop count 4 inits(%z : tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%acc: tensor<64xf32>):
    %u = sharc.exp %acc : tensor<64xf32>
    %v = sharc.exp %acc : tensor<64xf32>
    sharc.yield %u : tensor<64xf32>
  }
  %y = sharc.add %r, %z : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %y : tensor<64xf32>
}

// -----

// A collective in flight: the future is the buffer the all-reduce writes, live
// from its start (op 1) through the last reader of the wait's result (the
// add at op 6, through the reshape); the wait and the reshape name that
// buffer.  So the exp (op 2), computed while the all-reduce runs, cannot
// share it: a [0, 1] -> 0, the future [1, 6] -> 256, e [2, 6] -> 0 (a is dead
// by then), the sum [6, 7] -> 512.

// CHECK-LABEL: func.func @in_flight(
// CHECK-SAME: attributes {sharc.arena_bytes = 768 : i64}
// CHECK-NEXT: sharc.neg %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.all_reduce_start %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 2 : i64, sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.wait %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.reshape %{{.*}} {sharc.offsets = array<i64: 256>}
// CHECK-NEXT: sharc.reshape %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.add %{{.*}} {sharc.offsets = array<i64: 512>}
func.func @in_flight(%x: tensor<64xf32>) -> tensor<8x8xf32> {
  %a = sharc.neg %x : tensor<64xf32>
  %f = sharc.all_reduce_start %a {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : tensor<64xf32>
  %e = sharc.exp %x : tensor<64xf32>
  %r = sharc.wait %f : !sharc.future<tensor<64xf32>>
  %v = sharc.reshape %r : tensor<64xf32> to tensor<8x8xf32>
  %er = sharc.reshape %e : tensor<64xf32> to tensor<8x8xf32>
  %s = sharc.add %v, %er : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %s : tensor<8x8xf32>
}

// -----

// A reduce-scatter in flight reads its bucket until the wait: a (the bucket,
// op 0) lives [0, 3], the future [1, 4]; so the exp computed meanwhile (op
// 2) cannot take a's buffer: a -> 0, the future -> 512, e -> 768.

// CHECK-LABEL: func.func @scatter_in_flight(
// CHECK-SAME: attributes {sharc.arena_bytes = 1024 : i64}
// CHECK-NEXT: sharc.neg %{{.*}} {sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.reduce_scatter_start %{{.*}} {kind = #sharc.collective_kind<sum>, ranks = 2 : i64, sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 768>}
// CHECK-NEXT: sharc.wait %{{.*}} {sharc.offsets = array<i64: 512>}
func.func @scatter_in_flight(%x: tensor<2x64xf32>, %y: tensor<1x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %a = sharc.neg %x : tensor<2x64xf32>
  %f = sharc.reduce_scatter_start %a {kind = #sharc.collective_kind<sum>, ranks = 2 : i64} : (tensor<2x64xf32>) -> !sharc.future<tensor<1x64xf32>>
  %e = sharc.exp %y : tensor<1x64xf32>
  %r = sharc.wait %f : !sharc.future<tensor<1x64xf32>>
  return %r, %e : tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// Likewise an all-gather in flight (ZeRO's prefetched parameter): a (its
// operand, op 0) lives [0, 3] although the start is its last reader, the
// future [1, 4]; the exp in between takes neither: a -> 512, the future
// -> 0, e -> 768.

// CHECK-LABEL: func.func @gather_in_flight(
// CHECK-SAME: attributes {sharc.arena_bytes = 1024 : i64}
// CHECK-NEXT: sharc.neg %{{.*}} {sharc.offsets = array<i64: 512>}
// CHECK-NEXT: sharc.all_gather_start %{{.*}} {ranks = 2 : i64, sharc.offsets = array<i64: 0>}
// CHECK-NEXT: sharc.exp %{{.*}} {sharc.offsets = array<i64: 768>}
// CHECK-NEXT: sharc.wait %{{.*}} {sharc.offsets = array<i64: 0>}
func.func @gather_in_flight(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> (tensor<2x64xf32>, tensor<1x64xf32>) {
  %a = sharc.neg %x : tensor<1x64xf32>
  %f = sharc.all_gather_start %a {ranks = 2 : i64} : (tensor<1x64xf32>) -> !sharc.future<tensor<2x64xf32>>
  %e = sharc.exp %y : tensor<1x64xf32>
  %r = sharc.wait %f : !sharc.future<tensor<2x64xf32>>
  return %r, %e : tensor<2x64xf32>, tensor<1x64xf32>
}
