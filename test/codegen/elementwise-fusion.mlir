// RUN: sharc-opt %s --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-compile-pipeline="fuse=false" | sharc-translate --emit-program | FileCheck %s --check-prefix=UNFUSED

// Elementwise kernels.  A hand-written @train_step whose chain
// add -> mul -> exp -> sub -> div (and the state update reading it) is one
// fusion with two results: one kernel, one launch over the 32 elements, whose
// body loads each operand once with numpy broadcasting by index arithmetic
// (b[8] by i % 8, r[4x1] by i / 8, the scalar t at 0), writes the splat 0.5 as
// a float literal, computes exp in double and every other op in float, in
// program order, and stores both results: the new state straight into its own
// buffer (sharc-update-in-place) and the value the rest of the step reads into
// the arena.  The compare/select tail, read only by the sum, is a second,
// short fusion computed inside the reduction's kernel (a member function, never
// stored).  Without fusion every op is its own kernel and launch.

func.func @train_step(%x: tensor<4x8xf32> {sharc.input = "x"},
                      %b: tensor<8xf32> {sharc.input = "b"},
                      %r: tensor<4x1xf32> {sharc.input = "r"},
                      %t: tensor<f32> {sharc.input = "t"},
                      %s: tensor<4x8xf32> {sharc.state = #sharc.state<"", "acc">},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<f64> {sharc.output = "lr"},
        tensor<4x8xf32> {sharc.state = #sharc.state<"", "acc">}) {
  %half = sharc.constant dense<0.5> : tensor<f32>
  %lr = sharc.constant dense<0.25> : tensor<f64>
  %0 = sharc.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = sharc.mul %0, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = sharc.exp %1 : tensor<4x8xf32>
  %3 = sharc.sub %2, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %4 = sharc.div %3, %t : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %new = sharc.add %s, %4 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = sharc.compare %4, %half {predicate = #sharc.predicate<gt>} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %5 = sharc.select %m, %4, %x : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = sharc.reduce %5 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %6, %lr, %new : tensor<f32>, tensor<f64>, tensor<4x8xf32>
}

// The fused chain: operands in order of first use (x, b, r, t, acc), then the
// two results.
// CHECK: struct [[FUSED:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   const float *p3;
// CHECK-NEXT:   const float *p4;
// CHECK-NEXT:   float *p5;
// CHECK-NEXT:   float *p6;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const float v0 = float(p0[i]);
// CHECK-NEXT:     const float v1 = float(p1[(i % 8)]);
// CHECK-NEXT:     const float v2 = float(p2[(i / 8)]);
// CHECK-NEXT:     const float v3 = float(p3[0]);
// CHECK-NEXT:     const float v4 = float(p4[i]);
// CHECK-NEXT:     const float v5 = float((v0 + v1));
// CHECK-NEXT:     const float v6 = float((v5 * 0.5f));
// CHECK-NEXT:     const float v7 = float(sharc::math::exp(double(v6)));
// CHECK-NEXT:     const float v8 = float((v7 - v2));
// CHECK-NEXT:     const float v9 = float((v8 / v3));
// CHECK-NEXT:     const float v10 = float((v4 + v9));
// CHECK-NEXT:     p5[i] = static_cast<float>(v9);
// CHECK-NEXT:     p6[i] = static_cast<float>(v10);
// CHECK-NEXT:   }
// CHECK-NEXT: };

// The compare/select prologue of the sum: computed where the sum reads it.
// CHECK: struct [[SUM:K[0-9]+]] {
// CHECK:        SHARC_HD double in0(int64_t i) const {
// CHECK-NEXT:     const float u0 = float(p0[i]);
// CHECK-NEXT:     const float u1 = float(p1[i]);
// CHECK-NEXT:     const int64_t u2 = int64_t(u0 > 0.5f);
// CHECK-NEXT:     const float u3 = float((u2 ? u0 : u1));
// CHECK-NEXT:     return u3;
// CHECK-NEXT:   }
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t base = 0;
// CHECK-NEXT:     double acc = sharc::math::laneSum(32, [&](int64_t r) { return in0(base + r * 1); });
// CHECK-NEXT:     p2[i] = static_cast<float>(acc);

// Buffers: 0-3 the inputs, 4 the state, 6 the loss, 7 the lr, 8 its constant.
// CHECK: {"acc", "", "acc.npy", sharc::rt::BufferRole::state, sharc::rt::DType::f32, 2, {4, 8}, 32, 128, nullptr, false, 2, {4, 8}, sharc::rt::BufferStorage::device, -1},
// One rank, micro-batch 4, no accumulation; the arena holds the stored
// fusion result (256 bytes, aligned) and the loss (4); 9 buffers, the loss,
// lr and step counter at 6, 7, 5; no collectives; two kernels, no GEMM.
// CHECK: sharc::rt::kProgramAbiVersion, "", "cpu",
// CHECK-NEXT: 1, 4, 1, 260,
// CHECK-NEXT: 9, buffers, 6, 7, 5,
// CHECK-NEXT: {0u, 0u, 0u, 0u},
// CHECK-NEXT: {0u, 0u, 0u, 0u},
// CHECK-NEXT: 2, 0,
// CHECK-NEXT: {"", 1048576, 8, false, true, 0u, 0u},
// CHECK-NEXT: 0, 0u,
// CHECK-NEXT: "", "",
// CHECK-NEXT: "", ""};

// The whole step: one elementwise launch, the sum, the outputs.  The state is
// read and written in place; the stored result is what the sum reads.
// CHECK-LABEL: extern "C" void sharcProgramStep(
// CHECK-NEXT: sharc::kern::launch(ctx, 32, 1, [[FUSED]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>(ctx->buffers[3]), reinterpret_cast<float *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + [[T:[0-9]+]])), reinterpret_cast<float *>(ctx->buffers[4])});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 32, [[SUM]]{reinterpret_cast<float *>((ctx->arena + [[T]])), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[L:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[6], (ctx->arena + [[L]]), 4);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[7], ctx->buffers[8], 8);
// CHECK-NEXT: ctx->comm->waitAll();

// Unfused: each op loads its operands and stores its result.
// UNFUSED: struct [[ADD:K[0-9]+]] {
// UNFUSED: const float v0 = float((float(p0[i]) + float(p1[(i % 8)])));
// UNFUSED: struct [[MUL:K[0-9]+]] {
// UNFUSED: const float v0 = float((float(p0[i]) * 0.5f));
// UNFUSED: struct [[EXP:K[0-9]+]] {
// UNFUSED: const float v0 = float(sharc::math::exp(double(float(p0[i]))));
// UNFUSED: struct [[SUB:K[0-9]+]] {
// UNFUSED: const float v0 = float((float(p0[i]) - float(p1[(i / 8)])));
// UNFUSED-LABEL: extern "C" void sharcProgramStep(
// UNFUSED-NEXT: sharc::kern::launch(ctx, 32, 1, [[ADD]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>((ctx->arena + [[A:[0-9]+]]))});
// UNFUSED-NEXT: sharc::kern::launch(ctx, 32, 1, [[MUL]]{reinterpret_cast<float *>((ctx->arena + [[A]])), reinterpret_cast<float *>((ctx->arena + [[M:[0-9]+]]))});
// UNFUSED-NEXT: sharc::kern::launch(ctx, 32, 1, [[EXP]]{reinterpret_cast<float *>((ctx->arena + [[M]])), reinterpret_cast<float *>((ctx->arena + [[E:[0-9]+]]))});
// UNFUSED-NEXT: sharc::kern::launch(ctx, 32, 1, [[SUB]]{reinterpret_cast<float *>((ctx->arena + [[E]])), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// div, the state update, compare and select, then the sum; the new state is
// computed in the arena and copied back at the end (128 bytes).
// UNFUSED-COUNT-4: sharc::kern::launch(ctx, 32, 1,
// UNFUSED-NEXT: sharc::kern::launch(ctx, 1, 32,
// UNFUSED-NEXT: sharc::kern::copy(ctx, ctx->buffers[6],
// UNFUSED-NEXT: sharc::kern::copy(ctx, ctx->buffers[7], ctx->buffers[8], 8);
// UNFUSED-NEXT: sharc::kern::copy(ctx, ctx->buffers[4], (ctx->arena + {{[0-9]+}}), 128);
