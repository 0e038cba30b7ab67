// RUN: sharc-opt %s --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Row kernels beyond row-kernels.mlir's shapes, on a hand-written @train_step:
// rows longer than the 1024 elements kept in a stack array (softmax and
// log_softmax over 1100 elements read their input in each of the three
// passes: max, sum and normalization; the softmax's scale prologue is a
// member function called in each), and a layer norm over the last two axes
// (rows of 12) without bias, its scale [4] broadcast over them (j % 4) and a
// bias of 0.0; its unused inverse deviation is still written.
//
// Buffers: 0 x, 1 z, 2 g, 3 step, 4 p, 5 lp, 6 n, 7 loss, 8 lr.

func.func @train_step(%x: tensor<2x1100xf32> {sharc.input = "x"},
                      %z: tensor<2x3x4xf32> {sharc.input = "z"},
                      %g: tensor<4xf32> {sharc.input = "g"},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">},
                      %p: tensor<2x1100xf32> {sharc.state = #sharc.state<"", "p">},
                      %lp: tensor<2x1100xf32> {sharc.state = #sharc.state<"", "lp">},
                      %n: tensor<2x3x4xf32> {sharc.state = #sharc.state<"", "n">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<f64> {sharc.output = "lr"},
        tensor<2x1100xf32> {sharc.state = #sharc.state<"", "p">},
        tensor<2x1100xf32> {sharc.state = #sharc.state<"", "lp">},
        tensor<2x3x4xf32> {sharc.state = #sharc.state<"", "n">}) {
  %lr = sharc.constant dense<0.25> : tensor<f64>
  %half = sharc.constant dense<0.5> : tensor<f32>
  %xs = sharc.mul %x, %half : (tensor<2x1100xf32>, tensor<f32>) -> tensor<2x1100xf32>
  %0 = sharc.softmax %xs {axis = 1} : tensor<2x1100xf32>
  %1 = sharc.log_softmax %x {axis = 1} : tensor<2x1100xf32>
  %2:3 = sharc.layer_norm %z, %g {axis = 1, epsilon = 1.0e-6} : (tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>)
  %s = sharc.reduce %2#1 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x1x1xf32>) -> tensor<f32>
  return %s, %lr, %0, %1, %2#0 : tensor<f32>, tensor<f64>, tensor<2x1100xf32>, tensor<2x1100xf32>, tensor<2x3x4xf32>
}

// CHECK: struct [[SOFTMAX:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   float *p1;
// CHECK-NEXT:   SHARC_HD double in0(int64_t i) const {
// CHECK-NEXT:     const float u0 = float(p0[i]);
// CHECK-NEXT:     const float u1 = float((u0 * 0.5f));
// CHECK-NEXT:     return u1;
// CHECK-NEXT:   }
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t base = (i / 1) * 1100 + i % 1;
// CHECK-NEXT:     const double max = sharc::kern::rowMax(1100, [&](int64_t c) { return double(in0(base + c * 1)); });
// CHECK-NEXT:     const double sum = sharc::math::laneSum(1100, [&](int64_t c) { return sharc::math::exp(in0(base + c * 1) - max); });
// CHECK-NEXT:     for (int64_t c = 0; c < 1100; ++c) p1[base + c * 1] = static_cast<float>(sharc::math::exp(in0(base + c * 1) - max) / sum);
// CHECK-NEXT:   }
// CHECK: struct [[LOGSOFTMAX:K[0-9]+]] {
// CHECK:          const double max = sharc::kern::rowMax(1100, [&](int64_t c) { return double(double(p0[base + c * 1])); });
// CHECK-NEXT:     const double sum = sharc::math::laneSum(1100, [&](int64_t c) { return sharc::math::exp(double(p0[base + c * 1]) - max); });
// CHECK-NEXT:     const double logSum = log(sum);
// CHECK-NEXT:     for (int64_t c = 0; c < 1100; ++c) p1[base + c * 1] = static_cast<float>(double(p0[base + c * 1]) - max - logSum);
// CHECK: struct [[LN:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   float *p4;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const double mean = sharc::math::laneSum(12, [&](int64_t j) { return double(p0[i * 12 + j]); }) / 12.0;
// CHECK-NEXT:     const double squares = sharc::math::laneSum(12, [&](int64_t j) { const double d = double(p0[i * 12 + j]) - mean; return d * d; });
// CHECK-NEXT:     const double invStd = 1 / sqrt(squares / 12.0 + 9.9999999999999995e-07);
// CHECK-NEXT:     for (int64_t j = 0; j < 12; ++j)
// CHECK-NEXT:       p2[i * 12 + j] = static_cast<float>((double(p0[i * 12 + j]) - mean) * invStd * double(p1[(j % 4)]) + 0.0);

// Two rows each; work 3 x 1100 per softmax row, 3 x 12 per norm row.
// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 2, 3300, [[SOFTMAX]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[P:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 2, 3300, [[LOGSOFTMAX]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[LP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 2, 36, [[LN]]{reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + [[N:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[MU:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 2, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[MU]])), reinterpret_cast<float *>((ctx->arena + [[L:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[7], (ctx->arena + [[L]]), 4);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[8], ctx->buffers[9], 8);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[4], (ctx->arena + [[P]]), 8800);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[5], (ctx->arena + [[LP]]), 8800);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[6], (ctx->arena + [[N]]), 96);
