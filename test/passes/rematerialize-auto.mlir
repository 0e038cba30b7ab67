// RUN: sharc-opt %s --sharc-autodiff --cse --sharc-rematerialize="policy=auto limit=400" 2>&1 | FileCheck %s --check-prefix=FITS
// RUN: sharc-opt %s --sharc-autodiff --cse --sharc-rematerialize="policy=auto limit=300" 2>&1 | FileCheck %s --check-prefix=CHEAP
// RUN: sharc-opt %s --sharc-autodiff --cse --sharc-rematerialize="policy=auto limit=260" 2>&1 | FileCheck %s --check-prefix=TIGHT
// RUN: not sharc-opt %s --sharc-autodiff --cse --sharc-rematerialize="policy=auto limit=250" 2>&1 | FileCheck %s --check-prefix=SHORT
// RUN: not sharc-opt %s --sharc-autodiff --cse --sharc-rematerialize="policy=layers limit=300" 2>&1 | FileCheck %s --check-prefix=LIMIT

// policy=auto on four residual segments of two kinds: x + tanh(x·W) (a
// matmul: 72 FLOPs to recompute its 32 bytes) and x + tanh(x⊙s) (16 FLOPs
// for the same 32 bytes).  Without recomputation the gradient function's
// values peak at 324 bytes.

// A limit above the peak: nothing changes.
// FITS: remark: sharc-rematerialize: activation memory 324 bytes is within 400 bytes; nothing is recomputed
// FITS-LABEL: func.func @main_grad(
// FITS-COUNT-4: sharc.tanh
// FITS-NOT: sharc.tanh
// FITS: return

// 300 bytes: recomputing two segments suffices (one alone frees nothing at
// the peak: its values are alive again while its backward runs); the two
// cheap ones are chosen, the matmuls are kept.
// CHEAP: remark: sharc-rematerialize: 2 of 4 segments recomputed to fit 300 bytes; backward recomputes 4 forward ops (32 FLOPs) instead of keeping 64 bytes of their values; activation memory 324 -> 292 bytes
// CHEAP-LABEL: func.func @main_grad(
// CHEAP: sharc.mul %[[X1:[0-9]+]], %arg2 :
// CHEAP: sharc.mul %[[X3:[0-9]+]], %arg4 :
// CHEAP: sharc.reduce
// CHEAP: %[[M3:.*]] = sharc.mul %[[X3]], %arg4 :
// CHEAP-NEXT: sharc.tanh %[[M3]]
// CHEAP-NOT: sharc.matmul %{{.*}}, %arg3 :
// CHEAP: %[[M1:.*]] = sharc.mul %[[X1]], %arg2 :
// CHEAP-NEXT: sharc.tanh %[[M1]]
// CHEAP-NOT: sharc.matmul %arg0, %arg1 :
// CHEAP: return

// 260 bytes: a third segment, a matmul one (104 FLOPs).
// TIGHT: remark: sharc-rematerialize: 3 of 4 segments recomputed to fit 260 bytes; backward recomputes 6 forward ops (104 FLOPs) instead of keeping 96 bytes of their values; activation memory 324 -> 260 bytes

// Below what recomputing everything leaves: refused with the shortfall.
// SHORT: error: sharc-rematerialize: the activation memory cannot fall to 250 bytes: recomputing every one of the 4 segments leaves 260 bytes, 10 bytes over

// LIMIT: sharc-rematerialize: limit applies to policy=auto only
func.func @main(%x: tensor<2x4xf32> {sharc.input = "x"},
                %w0: tensor<4x4xf32> {sharc.param = #sharc.param<"w0", "w0">},
                %s1: tensor<2x4xf32> {sharc.param = #sharc.param<"s1", "s1">},
                %w2: tensor<4x4xf32> {sharc.param = #sharc.param<"w2", "w2">},
                %s3: tensor<2x4xf32> {sharc.param = #sharc.param<"s3", "s3">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %p0 = sharc.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t0 = sharc.tanh %p0 : tensor<2x4xf32>
  %x1 = sharc.add %x, %t0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p1 = sharc.mul %x1, %s1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t1 = sharc.tanh %p1 : tensor<2x4xf32>
  %x2 = sharc.add %x1, %t1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p2 = sharc.matmul %x2, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t2 = sharc.tanh %p2 : tensor<2x4xf32>
  %x3 = sharc.add %x2, %t2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p3 = sharc.mul %x3, %s3 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t3 = sharc.tanh %p3 : tensor<2x4xf32>
  %x4 = sharc.add %x3, %t3 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = sharc.reduce %x4 {axes = array<i64: 0, 1>, kind = #sharc.reduce_kind<sum>} : (tensor<2x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
