// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Convolution and pooling, NCHW, each a direct-loop kernel with a thread per
// output element: conv1 (3x3, stride 2, padding 1, bias) on x [1,2,6,6];
// max_pool2d (2x2, stride 1) of it; conv2 (2x2, groups 2, asymmetric padding
// top 1 / right 1) of that; avg_pool2d (2x2, stride 2, bottom/right padding
// 1, padding not counted) of conv1.  The backward pass uses the gradient ops:
// avg_pool2d_grad, conv2d_input_grad and conv2d_weight_grad of conv2,
// max_pool2d_grad (the window's first maximum gets dy), conv2d_weight_grad of
// conv1 and the bias gradient as a sum over N, H and W.  Every kernel
// computes one output (no atomics), gathering what a scatter would add.
//
// Buffers of @train_step: 0 w1, 1 b1, 2 w2, 3 step, 4 x.

func.func @main(%x: tensor<1x2x6x6xf32> {sharc.input = "x"},
                %w1: tensor<4x2x3x3xf32> {sharc.param = #sharc.param<"w1", "conv1.weight">},
                %b1: tensor<4xf32> {sharc.param = #sharc.param<"b1", "conv1.bias">},
                %w2: tensor<4x2x2x2xf32> {sharc.param = #sharc.param<"w2", "conv2.weight">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %c1 = sharc.conv2d %x, %w1, %b1 {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  %m = sharc.max_pool2d %c1 {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false} : (tensor<1x4x3x3xf32>) -> tensor<1x4x2x2xf32>
  %c2 = sharc.conv2d %m, %w2 {strides = array<i64: 1, 1>, padding = array<i64: 1, 0, 0, 1>, dilations = array<i64: 1, 1>, groups = 2} : (tensor<1x4x2x2xf32>, tensor<4x2x2x2xf32>) -> tensor<1x4x2x2xf32>
  %a = sharc.avg_pool2d %c1 {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 1, 1>, count_include_pad = false} : (tensor<1x4x3x3xf32>) -> tensor<1x4x2x2xf32>
  %r0 = sharc.reduce %c2 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3>} : (tensor<1x4x2x2xf32>) -> tensor<f32>
  %r1 = sharc.reduce %a {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2, 3>} : (tensor<1x4x2x2xf32>) -> tensor<f32>
  %l = sharc.add %r0, %r1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// conv1: out[n, o, oh, ow] over 2 channels x 3 x 3 taps, + bias.
// CHECK: struct [[CONV1:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t ow = i % 3;
// CHECK-NEXT:     const int64_t oh = (i / 3) % 3;
// CHECK-NEXT:     const int64_t o = (i / 9) % 4;
// CHECK-NEXT:     const int64_t n = i / 36;
// CHECK-NEXT:     const float *x = p0 + (n * 2 + (o / 4) * 2) * 36;
// CHECK-NEXT:     const float *k = p1 + o * 18;
// CHECK-NEXT:     double acc = 0;
// CHECK-NEXT:     for (int64_t ch = 0; ch < 2; ++ch)
// CHECK-NEXT:       for (int64_t ki = 0; ki < 3; ++ki) {
// CHECK-NEXT:         const int64_t ih = oh * 2 - 1 + ki * 1;
// CHECK-NEXT:         const bool rowInside = ih >= 0 && ih < 6;
// CHECK-NEXT:         for (int64_t kj = 0; kj < 3; ++kj) {
// CHECK-NEXT:           const int64_t iw = ow * 2 - 1 + kj * 1;
// CHECK-NEXT:           const double v = rowInside && iw >= 0 && iw < 6 ? double(x[(ch * 6 + ih) * 6 + iw]) : 0.0;
// CHECK-NEXT:           acc += double(k[(ch * 3 + ki) * 3 + kj]) * v;
// CHECK-NEXT:         }
// CHECK-NEXT:       }
// CHECK-NEXT:     acc += double(p2[o]);
// CHECK-NEXT:     p3[i] = static_cast<float>(acc);

// max_pool2d: the first NaN, else the first strictly greater value; padding
// never wins.
// CHECK: struct [[MAXPOOL:K[0-9]+]] {
// CHECK:          const float *src = p0 + (i / 4) * 9;
// CHECK-NEXT:     const int64_t h0 = oh * 1 - 0, w0 = ow * 1 - 0;
// CHECK-NEXT:     int64_t position = -1;
// CHECK:                if (v != v) { position = at; nan = true; break; }
// CHECK-NEXT:           if (position < 0 || v > best) { position = at; best = v; }
// CHECK:          p1[i] = position < 0 ? static_cast<float>(-HUGE_VAL) : src[position];

// conv2, groups 2: output channel o reads input channels (o / 2) * 2 and up;
// padding top 1, left 0.
// CHECK: struct [[CONV2:K[0-9]+]] {
// CHECK:          const float *x = p0 + (n * 4 + (o / 2) * 2) * 4;
// CHECK-NEXT:     const float *k = p1 + o * 8;
// CHECK:                const int64_t ih = oh * 1 - 1 + ki * 1;
// CHECK:                  const int64_t iw = ow * 1 - 0 + kj * 1;
// CHECK-NOT:      acc += double(p2[o]);
// CHECK:          p2[i] = static_cast<float>(acc);

// avg_pool2d: the window clipped to the padded extent 4 x 4, then to the
// input; the divisor counts the input cells only.
// CHECK: struct [[AVGPOOL:K[0-9]+]] {
// CHECK:          const int64_t h0 = oh * 2 - 0, w0 = ow * 2 - 0;
// CHECK-NEXT:     const int64_t hLimit = h0 + 2 < 4 ? h0 + 2 : 4;
// CHECK-NEXT:     const int64_t wLimit = w0 + 2 < 4 ? w0 + 2 : 4;
// CHECK-NEXT:     {{\[\[}}maybe_unused{{\]\]}} const int64_t hBegin = h0 > 0 ? h0 : 0, wBegin = w0 > 0 ? w0 : 0;
// CHECK-NEXT:     {{\[\[}}maybe_unused{{\]\]}} const int64_t hEnd = hLimit < 3 ? hLimit : 3, wEnd = wLimit < 3 ? wLimit : 3;
// CHECK-NEXT:     const double divisor = double((hEnd > hBegin ? hEnd - hBegin : 0) * (wEnd > wBegin ? wEnd - wBegin : 0));
// CHECK-NEXT:     double acc = 0;
// CHECK-NEXT:     for (int64_t ih = hBegin; ih < hEnd; ++ih)
// CHECK-NEXT:       for (int64_t iw = wBegin; iw < wEnd; ++iw)
// CHECK-NEXT:         acc += double(src[ih * 3 + iw]);
// CHECK-NEXT:     acc = acc / divisor;

// The loss (two sums of 16, added; the add kernel is reused for the sum of
// the two pooling gradients) and the seed broadcast to [1,4,2,2].
// CHECK: struct [[SUM16:K[0-9]+]] {
// CHECK:          double acc = sharc::math::laneSum(16, [&](int64_t r) { return double(p0[base + r * 1]); });
// CHECK: struct [[ADD:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const float v0 = float(p0[i]);
// CHECK-NEXT:     const float v1 = float(p1[i]);
// CHECK-NEXT:     const float v2 = float((v0 + v1));
// CHECK: struct [[SEED:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   float *p1;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t offset = 0;

// avg_pool2d_grad: the output windows (stride 2, extent 2) holding (ih, iw),
// each adding dy / its divisor.
// CHECK: struct [[AVGGRAD:K[0-9]+]] {
// CHECK:          const float *dy = p0 + (i / 9) * 4;
// CHECK-NEXT:     double acc = 0;
// CHECK-NEXT:     const int64_t ohLo = (ih + -1) <= 0 ? 0 : ((ih + -1) + 1) / 2;
// CHECK-NEXT:     const int64_t ohHi = ((ih + 0) / 2) < 1 ? ((ih + 0) / 2) : 1;
// CHECK:                const double divisor = double((hEnd > hBegin ? hEnd - hBegin : 0) * (wEnd > wBegin ? wEnd - wBegin : 0));
// CHECK-NEXT:           acc += double(dy[oh * 2 + ow]) / divisor;

// conv2d_input_grad of conv2: input channel c = (g, ch); for each tap the
// output pixel that read (ih, iw) through it, summed over the group's 2
// output channels.
// CHECK: struct [[INGRAD:K[0-9]+]] {
// CHECK:          const int64_t g = c / 2, ch = c % 2;
// CHECK-NEXT:     const float *dy = p0 + (n * 4 + g * 2) * 4;
// CHECK-NEXT:     const float *k = p1 + (g * 2 * 2 + ch) * 4;
// CHECK-NEXT:     double acc = 0;
// CHECK-NEXT:     for (int64_t ki = 0; ki < 2; ++ki) {
// CHECK-NEXT:       const int64_t th = ih + 1 - ki * 1;
// CHECK-NEXT:       if (th < 0 || th % 1 != 0 || th / 1 >= 2) continue;
// CHECK-NEXT:       const int64_t oh = th / 1;
// CHECK-NEXT:       for (int64_t kj = 0; kj < 2; ++kj) {
// CHECK-NEXT:         const int64_t tw = iw + 0 - kj * 1;
// CHECK-NEXT:         if (tw < 0 || tw % 1 != 0 || tw / 1 >= 2) continue;
// CHECK-NEXT:         const int64_t pixel = oh * 2 + tw / 1;
// CHECK-NEXT:         double sum = 0;
// CHECK-NEXT:         for (int64_t o = 0; o < 2; ++o)
// CHECK-NEXT:           sum += double(k[o * 8 + ki * 2 + kj]) * double(dy[o * 4 + pixel]);

// conv2d_weight_grad of conv2: dw[o, ch, ki, kj], image by image.
// CHECK: struct [[WGRAD2:K[0-9]+]] {
// CHECK:          const int64_t o = i / 8;
// CHECK-NEXT:     const int64_t c = (o / 2) * 2 + ch;
// CHECK-NEXT:     double acc = 0;
// CHECK-NEXT:     for (int64_t n = 0; n < 1; ++n) {
// CHECK-NEXT:       const float *x = p0 + (n * 4 + c) * 4;
// CHECK-NEXT:       const float *dy = p1 + (n * 4 + o) * 4;
// CHECK:                const int64_t ih = oh * 1 - 1 + ki * 1;
// CHECK:                  sum += double(dy[oh * 2 + ow]) * v;

// max_pool2d_grad: dy of every window whose argmax is this cell.
// CHECK: struct [[MAXGRAD:K[0-9]+]] {
// CHECK:          const int64_t plane = i / 9, here = ih * 3 + iw;
// CHECK-NEXT:     const float *src = p0 + plane * 9;
// CHECK-NEXT:     const float *dy = p1 + plane * 4;
// CHECK:                  if (position == here) acc += double(dy[oh * 2 + ow]);

// conv2d_weight_grad of conv1: stride 2, padding 1, over the 3 x 3 outputs.
// CHECK: struct [[WGRAD1:K[0-9]+]] {
// CHECK:          const int64_t o = i / 18;
// CHECK-NEXT:     const int64_t c = (o / 4) * 2 + ch;
// CHECK:                const float *x = p0 + (n * 2 + c) * 36;
// CHECK-NEXT:       const float *dy = p1 + (n * 4 + o) * 9;
// CHECK:                const int64_t ih = oh * 2 - 1 + ki * 1;
// CHECK:                  const double v = rowInside && iw >= 0 && iw < 6 ? double(x[ih * 6 + iw]) : 0.0;

// One launch per op over its output elements; the gradients flow through
// the arena offsets.
// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 36, {{[0-9]+}}, [[CONV1]]{reinterpret_cast<float *>(ctx->buffers[4]), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>((ctx->arena + [[C1:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[MAXPOOL]]{reinterpret_cast<float *>((ctx->arena + [[C1]])), reinterpret_cast<float *>((ctx->arena + [[M:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[CONV2]]{reinterpret_cast<float *>((ctx->arena + [[M]])), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[AVGPOOL]]{reinterpret_cast<float *>((ctx->arena + [[C1]])), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// The seed 1 broadcast to [1,4,2,2] is dy of both conv2 and the average pool.
// CHECK: sharc::kern::launch(ctx, 1, 16, [[SUM16]]{
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 16, [[SUM16]]{
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, [[ADD]]{
// CHECK-NEXT: sharc::kern::launch(ctx, 16, 1, [[SEED]]{reinterpret_cast<float *>(ctx->buffers[{{[0-9]+}}]), reinterpret_cast<float *>((ctx->arena + [[DY:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 36, {{[0-9]+}}, [[AVGGRAD]]{reinterpret_cast<float *>((ctx->arena + [[DY]])), reinterpret_cast<float *>((ctx->arena + [[DA:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, {{[0-9]+}}, [[INGRAD]]{reinterpret_cast<float *>((ctx->arena + [[DY]])), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>((ctx->arena + [[DM:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 32, {{[0-9]+}}, [[WGRAD2]]{reinterpret_cast<float *>((ctx->arena + [[M]])), reinterpret_cast<float *>((ctx->arena + [[DY]])), reinterpret_cast<float *>((ctx->arena + [[DW2:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 36, {{[0-9]+}}, [[MAXGRAD]]{reinterpret_cast<float *>((ctx->arena + [[C1]])), reinterpret_cast<float *>((ctx->arena + [[DM]])), reinterpret_cast<float *>((ctx->arena + [[DMP:[0-9]+]]))});
// dc1 = the two pooling gradients added.
// CHECK-NEXT: sharc::kern::launch(ctx, 36, 1, [[ADD]]{reinterpret_cast<float *>((ctx->arena + [[DA]])), reinterpret_cast<float *>((ctx->arena + [[DMP]])), reinterpret_cast<float *>((ctx->arena + [[DC1:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 72, {{[0-9]+}}, [[WGRAD1]]{reinterpret_cast<float *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + [[DC1]])), reinterpret_cast<float *>((ctx->arena + [[DW1:[0-9]+]]))});
// The bias gradient: 4 sums of 9.
// CHECK-NEXT: sharc::kern::launch(ctx, 4, 9, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DC1]])), reinterpret_cast<float *>((ctx->arena + [[DB1:[0-9]+]]))});
// CHECK: K{{[0-9]+}}{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DW1]])), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[0])},
// CHECK-NEXT: K{{[0-9]+}}{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DB1]])), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>(ctx->buffers[1])},
// CHECK-NEXT: K{{[0-9]+}}{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DW2]])), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>(ctx->buffers[2])},
