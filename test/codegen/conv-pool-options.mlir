// RUN: sharc-opt %s --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Window options of the convolution and pooling kernels, on a hand-written
// @train_step whose results are state buffers (each kernel writes the arena,
// the step ends copying into the buffers): a conv2d with dilation 2 (taps 2
// apart), a max_pool2d with dilation 2 and ceil_mode (6 x 6 -> 4 x 4, the
// last window reaching into the bottom/right padding), an avg_pool2d with
// ceil_mode and count_include_pad (the divisor counts the padding up to the
// padded extent 7, but not the ceil-mode overhang), and the two pooling
// gradients with the same options (the windows holding a cell found by
// range arithmetic, dilated taps skipped by the modulo test).
//
// Buffers: 0 x, 1 w, 2 y, 3 dm, 4 da, 5 step, 6 c, 7 m, 8 a, 9 gm, 10 ga,
// 11 loss, 12 lr, 13 and 14 the constants they are copied from.

func.func @train_step(%x: tensor<1x1x5x5xf32> {sharc.input = "x"},
                      %w: tensor<2x1x2x2xf32> {sharc.input = "w"},
                      %y: tensor<1x1x6x6xf32> {sharc.input = "y"},
                      %dm: tensor<1x1x4x4xf32> {sharc.input = "dm"},
                      %da: tensor<1x1x4x4xf32> {sharc.input = "da"},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">},
                      %c: tensor<1x2x3x3xf32> {sharc.state = #sharc.state<"", "c">},
                      %m: tensor<1x1x4x4xf32> {sharc.state = #sharc.state<"", "m">},
                      %a: tensor<1x1x4x4xf32> {sharc.state = #sharc.state<"", "a">},
                      %gm: tensor<1x1x6x6xf32> {sharc.state = #sharc.state<"", "gm">},
                      %ga: tensor<1x1x6x6xf32> {sharc.state = #sharc.state<"", "ga">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<f64> {sharc.output = "lr"},
        tensor<1x2x3x3xf32> {sharc.state = #sharc.state<"", "c">},
        tensor<1x1x4x4xf32> {sharc.state = #sharc.state<"", "m">},
        tensor<1x1x4x4xf32> {sharc.state = #sharc.state<"", "a">},
        tensor<1x1x6x6xf32> {sharc.state = #sharc.state<"", "gm">},
        tensor<1x1x6x6xf32> {sharc.state = #sharc.state<"", "ga">}) {
  %lr = sharc.constant dense<0.25> : tensor<f64>
  %loss = sharc.constant dense<0.0> : tensor<f32>
  %c1 = sharc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 2, 2>, groups = 1} : (tensor<1x1x5x5xf32>, tensor<2x1x2x2xf32>) -> tensor<1x2x3x3xf32>
  %m1 = sharc.max_pool2d %y {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 2>, ceil_mode = true} : (tensor<1x1x6x6xf32>) -> tensor<1x1x4x4xf32>
  %a1 = sharc.avg_pool2d %y {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, ceil_mode = true, count_include_pad = true} : (tensor<1x1x6x6xf32>) -> tensor<1x1x4x4xf32>
  %g1 = sharc.max_pool2d_grad %y, %dm {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 2>, ceil_mode = true} : (tensor<1x1x6x6xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x6x6xf32>
  %g2 = sharc.avg_pool2d_grad %da {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, ceil_mode = true, count_include_pad = true} : (tensor<1x1x4x4xf32>) -> tensor<1x1x6x6xf32>
  return %loss, %lr, %c1, %m1, %a1, %g1, %g2 : tensor<f32>, tensor<f64>, tensor<1x2x3x3xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x6x6xf32>, tensor<1x1x6x6xf32>
}

// CHECK: struct [[CONV:K[0-9]+]] {
// CHECK:                const int64_t ih = oh * 1 - 0 + ki * 2;
// CHECK:                  const int64_t iw = ow * 1 - 0 + kj * 2;
// CHECK: struct [[MAXPOOL:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   float *p1;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t ow = i % 4;
// CHECK-NEXT:     const int64_t oh = (i / 4) % 4;
// CHECK-NEXT:     const float *src = p0 + (i / 16) * 36;
// CHECK-NEXT:     const int64_t h0 = oh * 2 - 1, w0 = ow * 2 - 1;
// CHECK:              for (int64_t ki = 0; ki < 2 && !nan; ++ki) {
// CHECK-NEXT:         const int64_t ih = h0 + ki * 2;
// CHECK-NEXT:         if (ih < 0 || ih >= 6) continue;
// CHECK-NEXT:         for (int64_t kj = 0; kj < 2; ++kj) {
// CHECK-NEXT:           const int64_t iw = w0 + kj * 2;
// CHECK-NEXT:           if (iw < 0 || iw >= 6) continue;
// CHECK: struct [[AVGPOOL:K[0-9]+]] {
// CHECK:          const int64_t hLimit = h0 + 3 < 7 ? h0 + 3 : 7;
// CHECK-NEXT:     const int64_t wLimit = w0 + 3 < 7 ? w0 + 3 : 7;
// CHECK-NEXT:     {{\[\[}}maybe_unused{{\]\]}} const int64_t hBegin = h0 > 0 ? h0 : 0, wBegin = w0 > 0 ? w0 : 0;
// CHECK-NEXT:     {{\[\[}}maybe_unused{{\]\]}} const int64_t hEnd = hLimit < 6 ? hLimit : 6, wEnd = wLimit < 6 ? wLimit : 6;
// CHECK-NEXT:     const double divisor = double((hLimit - h0) * (wLimit - w0));
// Max-pool gradient: output windows within reach of a dilated (extent 3)
// window, stride 2, padding 1; only windows whose taps land on the cell.
// CHECK: struct [[MAXGRAD:K[0-9]+]] {
// CHECK:          const int64_t ohLo = (ih + -1) <= 0 ? 0 : ((ih + -1) + 1) / 2;
// CHECK-NEXT:     const int64_t ohHi = ((ih + 1) / 2) < 3 ? ((ih + 1) / 2) : 3;
// CHECK-NEXT:     const int64_t owLo = (iw + -1) <= 0 ? 0 : ((iw + -1) + 1) / 2;
// CHECK-NEXT:     const int64_t owHi = ((iw + 1) / 2) < 3 ? ((iw + 1) / 2) : 3;
// CHECK-NEXT:     for (int64_t oh = ohLo; oh <= ohHi; ++oh) {
// CHECK-NEXT:       const int64_t h0 = oh * 2 - 1;
// CHECK-NEXT:       if ((ih - h0) % 2 != 0) continue;
// CHECK:                  if (position == here) acc += double(dy[oh * 4 + ow]);
// CHECK: struct [[AVGGRAD:K[0-9]+]] {
// CHECK:          const float *dy = p0 + (i / 36) * 16;
// CHECK:                const int64_t hLimit = h0 + 3 < 7 ? h0 + 3 : 7;
// CHECK:                const double divisor = double((hLimit - h0) * (wLimit - w0));
// CHECK-NEXT:           acc += double(dy[oh * 4 + ow]) / divisor;

// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 18, {{[0-9]+}}, [[CONV]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>((ctx->arena + [[C:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[MAXPOOL]]{reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + [[M:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[AVGPOOL]]{reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + [[A:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 36, {{[0-9]+}}, [[MAXGRAD]]{reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>(ctx->buffers[3]), reinterpret_cast<float *>((ctx->arena + [[GM:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 36, {{[0-9]+}}, [[AVGGRAD]]{reinterpret_cast<float *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + [[GA:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[11], ctx->buffers[13], 4);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[12], ctx->buffers[14], 8);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[6], (ctx->arena + [[C]]), 72);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[7], (ctx->arena + [[M]]), 64);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[8], (ctx->arena + [[A]]), 64);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[9], (ctx->arena + [[GM]]), 144);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[10], (ctx->arena + [[GA]]), 144);
