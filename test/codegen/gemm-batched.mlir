// RUN: sharc-opt %s --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Batched GEMMs: how batch dimensions become one strided-batched GEMM call
// (args.batch with strides, plus args.outerBatch for a second level), a
// stacked lhs times one rhs becomes one taller GEMM, numpy batch broadcasting
// becomes stride 0, three batch levels that cannot merge become a C++ loop
// of GEMMs over the outermost, and the attention-head transposes are strided
// views read (and, for the merge of the heads, written) in place: leading
// dimensions 12 over x's [2, 5, 3 x 4] memory, strides 4 between heads and 60
// between sequences, and no transpose kernel anywhere.
//
// Buffers: 0 a, 1 b, 2 w, 3 p, 4 q, 5 x, 6 u, 7 v, 8 step, 9 loss, 10 lr.

func.func @train_step(%a: tensor<2x3x4xf32> {sharc.input = "a"},
                      %b: tensor<2x4x5xf32> {sharc.input = "b"},
                      %w: tensor<4x5xf32> {sharc.input = "w"},
                      %p: tensor<2x1x3x4xf32> {sharc.input = "p"},
                      %q: tensor<3x5x4xf32> {sharc.input = "q"},
                      %x: tensor<2x5x12xf32> {sharc.input = "x"},
                      %u: tensor<2x1x2x3x4xf32> {sharc.input = "u"},
                      %v: tensor<1x2x2x4x5xf32> {sharc.input = "v"},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<f64> {sharc.output = "lr"}) {
  %lr = sharc.constant dense<0.25> : tensor<f64>
  // Strided batch: 2 independent products.
  %0 = sharc.matmul %a, %b : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  // Stacked lhs times one rhs: one 6x5 product.
  %1 = sharc.matmul %a, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  // Both operands broadcast: [2,1] x [3] batches -> 2 x 3 products, rhs transposed.
  %2 = sharc.matmul %p, %q {transpose_rhs = true} : (tensor<2x1x3x4xf32>, tensor<3x5x4xf32>) -> tensor<2x3x3x5xf32>
  // Three batch levels that do not merge: a loop over the outermost.
  %3 = sharc.matmul %u, %v : (tensor<2x1x2x3x4xf32>, tensor<1x2x2x4x5xf32>) -> tensor<2x2x2x3x5xf32>
  // Attention heads: split [2, 5, 3 x 4] into heads, scores, merge back.
  %x4 = sharc.reshape %x : tensor<2x5x12xf32> to tensor<2x5x3x4xf32>
  %h = sharc.transpose %x4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x5x4xf32>
  %k = sharc.transpose %x4 {permutation = array<i64: 0, 2, 3, 1>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x4x5xf32>
  %s = sharc.matmul %h, %k : (tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>) -> tensor<2x3x5x5xf32>
  %o = sharc.matmul %s, %h : (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
  %m = sharc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x3x5x4xf32>) -> tensor<2x5x3x4xf32>
  %r0 = sharc.reduce %0 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x3x5xf32>) -> tensor<f32>
  %r1 = sharc.reduce %1 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x3x5xf32>) -> tensor<f32>
  %r2 = sharc.reduce %2 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3>} : (tensor<2x3x3x5xf32>) -> tensor<f32>
  %r3 = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3>} : (tensor<2x5x3x4xf32>) -> tensor<f32>
  %t0 = sharc.add %r0, %r1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %r4 = sharc.reduce %3 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3, 4>} : (tensor<2x2x2x3x5xf32>) -> tensor<f32>
  %t2 = sharc.add %r2, %r3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %t1 = sharc.add %t2, %r4 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %loss = sharc.add %t0, %t1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss, %lr : tensor<f32>, tensor<f64>
}

// Only the five sums are kernels (two pairs share their text); the
// transposes move no data.
// CHECK-NOT: const int64_t offset =
// CHECK: const sharc::rt::ProgramInfo info = {
// CHECK: {0u, 0u, 0u, 0u},
// CHECK-NEXT: {0u, 0u, 0u, 0u},
// CHECK-NEXT: 4, 7,
// CHECK-NEXT: {"", 1048576, 8, false, true, 0u, 0u},
// CHECK-NEXT: 0, 0u,
// CHECK-NEXT: "", "",
// CHECK-NEXT: "", ""};

// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// a [2x3x4] x b [2x4x5]: batch 2, strides 12, 20 and 15 elements.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 3; args.n = 5; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[0]); args.lda = 4; args.strideA = 12;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[1]); args.ldb = 5; args.strideB = 20;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[C0:[0-9]+]])); args.ldc = 5; args.strideC = 15;
// CHECK-NEXT: args.batch = 2;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// a [2x3x4] x w [4x5]: one 6x5 GEMM.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 6; args.n = 5; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[0]); args.lda = 4; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[2]); args.ldb = 5; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[C1:[0-9]+]])); args.ldc = 5; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// p [2x1x3x4] x q^T [3x(5x4)]: inner batch 3 over q (p broadcast, stride 0),
// outer batch 2 over p (q broadcast); q's rows of 4 read transposed.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = true;
// CHECK-NEXT: args.m = 3; args.n = 5; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[3]); args.lda = 4; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[4]); args.ldb = 4; args.strideB = 20;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[C2:[0-9]+]])); args.ldc = 5; args.strideC = 15;
// CHECK-NEXT: args.batch = 3;
// CHECK-NEXT: args.outerBatch = 2; args.outerStrideA = 12; args.outerStrideB = 0; args.outerStrideC = 45;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// u [2x1x2x3x4] x v [1x2x2x4x5]: batch [2, 2, 2] with strides
// (24, 0, 60), (0, 40, 30), (12, 20, 15): a loop over the first.
// CHECK-NEXT: {
// CHECK-NEXT: for (int64_t b0 = 0; b0 < 2; ++b0) {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 3; args.n = 5; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[6]) + b0 * 24; args.lda = 4; args.strideA = 12;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[7]) + b0 * 0; args.ldb = 5; args.strideB = 20;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[C3:[0-9]+]])) + b0 * 60; args.ldc = 5; args.strideC = 15;
// CHECK-NEXT: args.batch = 2;
// CHECK-NEXT: args.outerBatch = 2; args.outerStrideA = 0; args.outerStrideB = 40; args.outerStrideC = 30;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// CHECK-NEXT: }
// Scores h k: both read from x itself.  h's rows are 12 apart (lda 12); k's
// columns are x's rows, so B is x read with transB.  Batches: heads 4 apart,
// sequences 60.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = true;
// CHECK-NEXT: args.m = 5; args.n = 5; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[5]); args.lda = 12; args.strideA = 4;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[5]); args.ldb = 12; args.strideB = 4;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[S:[0-9]+]])); args.ldc = 5; args.strideC = 25;
// CHECK-NEXT: args.batch = 3;
// CHECK-NEXT: args.outerBatch = 2; args.outerStrideA = 60; args.outerStrideB = 60; args.outerStrideC = 75;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// s h, written straight into the merged [2, 5, 3 x 4] layout: C's rows 12
// apart, heads side by side (4 apart).
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 5; args.n = 4; args.k = 5;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[S]])); args.lda = 5; args.strideA = 25;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[5]); args.ldb = 12; args.strideB = 4;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[M:[0-9]+]])); args.ldc = 12; args.strideC = 4;
// CHECK-NEXT: args.batch = 3;
// CHECK-NEXT: args.outerBatch = 2; args.outerStrideA = 75; args.outerStrideB = 60; args.outerStrideC = 60;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// The sums read what the GEMMs wrote; equal sums share a kernel.
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 30, [[SUM30:K[0-9]+]]{reinterpret_cast<float *>((ctx->arena + [[C0]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 30, [[SUM30]]{reinterpret_cast<float *>((ctx->arena + [[C1]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 90, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[C2]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 120, [[SUM120:K[0-9]+]]{reinterpret_cast<float *>((ctx->arena + [[M]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 120, [[SUM120]]{reinterpret_cast<float *>((ctx->arena + [[C3]])),
