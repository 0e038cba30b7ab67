// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Row kernels: layer_norm, softmax, log_softmax and reduce, forward and
// backward.  Forward, each is one kernel with a thread per row: layer norm
// over the last axis (rows of 8, mean and inverse deviation written for the
// backward, epsilon as an exact literal), softmax over the contiguous last
// axis, log_softmax over axis 1 (rows of 3 with stride 8), a sum over the
// non-adjacent axes 0 and 2 that computes its mul prologue in the kernel, a
// mean, and a max over a middle axis (NaN-propagating, in order).  Backward:
// the row ops' gradients are elementwise kernels around row sums (softmax:
// p (dp - sum(dp p)); log_softmax: dlp - exp(lp) sum(dlp); layer norm's
// scale gradient dy (x - mean) inv_std), all fused into one kernel, and the
// parameter gradients are column sums over the 6 rows.
//
// Buffers of @train_step: 0 g, 1 b, 2 step, 3 x, 4 loss, 5 lr, 6 the seed.

func.func @main(%x: tensor<2x3x8xf32> {sharc.input = "x"},
                %g: tensor<8xf32> {sharc.param = #sharc.param<"g", "ln.weight">},
                %b: tensor<8xf32> {sharc.param = #sharc.param<"b", "ln.bias">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %n:3 = sharc.layer_norm %x, %g, %b {axis = 2, epsilon = 1.0e-5} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %p = sharc.softmax %n#0 {axis = 2} : tensor<2x3x8xf32>
  %lp = sharc.log_softmax %n#0 {axis = 1} : tensor<2x3x8xf32>
  %m = sharc.mul %p, %lp : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %r = sharc.reduce %m {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 2>} : (tensor<2x3x8xf32>) -> tensor<3xf32>
  %l = sharc.reduce %r {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  %mx = sharc.reduce %x {kind = #sharc.reduce_kind<max>, axes = array<i64: 1>} : (tensor<2x3x8xf32>) -> tensor<2x8xf32>
  %s = sharc.reduce %mx {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<2x8xf32>) -> tensor<f32>
  %t = sharc.add %l, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}

// CHECK: struct [[LN:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   float *p4;
// CHECK-NEXT:   float *p5;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const double mean = sharc::math::laneSum(8, [&](int64_t j) { return double(p0[i * 8 + j]); }) / 8.0;
// CHECK-NEXT:     const double squares = sharc::math::laneSum(8, [&](int64_t j) { const double d = double(p0[i * 8 + j]) - mean; return d * d; });
// CHECK-NEXT:     const double invStd = 1 / sqrt(squares / 8.0 + 1.0000000000000001e-05);
// CHECK-NEXT:     for (int64_t j = 0; j < 8; ++j)
// CHECK-NEXT:       p3[i * 8 + j] = static_cast<float>((double(p0[i * 8 + j]) - mean) * invStd * double(p1[j]) + double(p2[j]));
// CHECK-NEXT:     p4[i] = static_cast<float>(mean);
// CHECK-NEXT:     p5[i] = static_cast<float>(invStd);
// CHECK-NEXT:   }

// CHECK: struct [[SOFTMAX:K[0-9]+]] {
// CHECK:        SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t base = (i / 1) * 8 + i % 1;
// CHECK-NEXT:     double x[8], e[8];
// CHECK-NEXT:     for (int64_t c = 0; c < 8; ++c) x[c] = double(p0[base + c * 1]);
// CHECK-NEXT:     const double max = sharc::kern::rowMax(8, [&](int64_t c) { return x[c]; });
// CHECK-NEXT:     for (int64_t c = 0; c < 8; ++c) e[c] = sharc::math::exp(x[c] - max);
// CHECK-NEXT:     const double sum = sharc::math::laneSum(8, [&](int64_t c) { return e[c]; });
// CHECK-NEXT:     for (int64_t c = 0; c < 8; ++c) p1[base + c * 1] = static_cast<float>(e[c] / sum);
// CHECK-NEXT:   }

// CHECK: struct [[LOGSOFTMAX:K[0-9]+]] {
// CHECK:        SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t base = (i / 8) * 24 + i % 8;
// CHECK-NEXT:     double x[3], e[3];
// CHECK-NEXT:     for (int64_t c = 0; c < 3; ++c) x[c] = double(p0[base + c * 8]);
// CHECK-NEXT:     const double max = sharc::kern::rowMax(3, [&](int64_t c) { return x[c]; });
// CHECK-NEXT:     for (int64_t c = 0; c < 3; ++c) e[c] = sharc::math::exp(x[c] - max);
// CHECK-NEXT:     const double sum = sharc::math::laneSum(3, [&](int64_t c) { return e[c]; });
// CHECK-NEXT:     const double logSum = log(sum);
// CHECK-NEXT:     for (int64_t c = 0; c < 3; ++c) p1[base + c * 8] = static_cast<float>(x[c] - max - logSum);
// CHECK-NEXT:   }

// sum(p * lp) over axes 0 and 2 of [2, 3, 8]: 16 elements per output, the
// product computed where it is read.
// CHECK: struct [[SUM02:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD double in0(int64_t i) const {
// CHECK-NEXT:     const float u0 = float(p0[i]);
// CHECK-NEXT:     const float u1 = float(p1[i]);
// CHECK-NEXT:     const float u2 = float((u0 * u1));
// CHECK-NEXT:     return u2;
// CHECK-NEXT:   }
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     int64_t rest = i, base = 0;
// CHECK-NEXT:     base += (rest % 3) * 8; rest /= 3;
// CHECK-NEXT:     const auto offsetOf = [](int64_t r) {
// CHECK-NEXT:       int64_t off = 0;
// CHECK-NEXT:       off += (r % 8) * 1; r /= 8;
// CHECK-NEXT:       off += (r % 2) * 24; r /= 2;
// CHECK-NEXT:       return off;
// CHECK-NEXT:     };
// CHECK-NEXT:     double acc = sharc::math::laneSum(16, [&](int64_t r) { return in0(base + offsetOf(r)); });
// CHECK-NEXT:     p2[i] = static_cast<float>(acc);

// CHECK: struct [[MEAN:K[0-9]+]] {
// CHECK:          double acc = sharc::math::laneSum(3, [&](int64_t r) { return double(p0[base + r * 1]); });
// CHECK-NEXT:     acc /= 3.0;

// max over axis 1: a loop over the 3 reduced elements, 8 apart.
// CHECK: struct [[MAX:K[0-9]+]] {
// CHECK:        SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     int64_t rest = i, base = 0;
// CHECK-NEXT:     base += (rest % 8) * 1; rest /= 8;
// CHECK-NEXT:     base += (rest % 2) * 24; rest /= 2;
// CHECK-NEXT:     double acc = -HUGE_VAL;
// CHECK-NEXT:     for (int64_t r1 = 0; r1 < 3; ++r1)
// CHECK-NEXT:       { const double x = double(p0[base + r1 * 8]); if (x != x || x > acc) acc = x; }
// CHECK-NEXT:     p1[i] = static_cast<float>(acc);

// Backward: sum(dlp) over axis 1 (rows of 3, stride 8); dp and dp * p in
// one kernel with two results; sum(dp * p) over axis 2.
// CHECK:          double acc = sharc::math::laneSum(3, [&](int64_t r) { return double(p0[base + r * 8]); });
// CHECK:          const float v3 = float((v0 * v1));
// CHECK-NEXT:     const float v4 = float((v3 * v2));
// CHECK-NEXT:     p3[i] = static_cast<float>(v3);
// CHECK-NEXT:     p4[i] = static_cast<float>(v4);
// CHECK:          double acc = sharc::math::laneSum(8, [&](int64_t r) { return double(p0[base + r * 1]); });

// The gradient of the normalized values through both softmaxes (v14) and
// its product with the normalized input (v17): the db and dg rows.
// CHECK:        const float *p8;
// CHECK-NEXT:   float *p9;
// CHECK-NEXT:   float *p10;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const float v0 = float(p0[i]);
// CHECK-NEXT:     const float v1 = float(p1[int64_t(uint32_t(i) / 24u) * 8 + (i % 8)]);
// CHECK-NEXT:     const float v2 = float(p2[i]);
// CHECK-NEXT:     const float v3 = float(p3[i]);
// CHECK-NEXT:     const float v4 = float(p4[(i / 8)]);
// CHECK-NEXT:     const float v5 = float(p5[i]);
// CHECK-NEXT:     const float v6 = float(p6[i]);
// CHECK-NEXT:     const float v7 = float(p7[(i / 8)]);
// CHECK-NEXT:     const float v8 = float(p8[(i / 8)]);
// CHECK-NEXT:     const float v9 = float(sharc::math::exp(double(v0)));
// CHECK-NEXT:     const float v10 = float((v9 * v1));
// CHECK-NEXT:     const float v11 = float((v2 - v10));
// CHECK-NEXT:     const float v12 = float((v3 - v4));
// CHECK-NEXT:     const float v13 = float((v5 * v12));
// CHECK-NEXT:     const float v14 = float((v11 + v13));
// CHECK-NEXT:     const float v15 = float((v6 - v7));
// CHECK-NEXT:     const float v16 = float((v15 * v8));
// CHECK-NEXT:     const float v17 = float((v14 * v16));
// CHECK-NEXT:     p9[i] = static_cast<float>(v14);
// CHECK-NEXT:     p10[i] = static_cast<float>(v17);

// The parameter gradients: column sums of 6 rows of 8 (one call per block
// of 16 columns).
// CHECK:          for (int64_t r = 0; r < 6; ++r)
// CHECK-NEXT:       for (int64_t k = 0; k < width; ++k) acc[k] += double(p0[r * 8 + j0 + k]);
// CHECK-NEXT:     for (int64_t k = 0; k < width; ++k) p1[j0 + k] = static_cast<float>(acc[k]);

// Launch sizes: a thread per row (6 rows of 8; 16 columns of 3 for the
// log_softmax over axis 1), a thread per output element for the reductions.
// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 6, 24, [[LN]]{reinterpret_cast<float *>(ctx->buffers[3]), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>((ctx->arena + [[Y:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[MU:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[RSTD:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 6, 24, [[SOFTMAX]]{reinterpret_cast<float *>((ctx->arena + [[Y]])), reinterpret_cast<float *>((ctx->arena + [[P:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 16, 9, [[LOGSOFTMAX]]{reinterpret_cast<float *>((ctx->arena + [[Y]])), reinterpret_cast<float *>((ctx->arena + [[LP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 3, 16, [[SUM02]]{reinterpret_cast<float *>((ctx->arena + [[P]])), reinterpret_cast<float *>((ctx->arena + [[LP]])), reinterpret_cast<float *>((ctx->arena + [[R:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 3, [[MEAN]]{reinterpret_cast<float *>((ctx->arena + [[R]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 16, 3, [[MAX]]{reinterpret_cast<float *>(ctx->buffers[3]),
// CHECK: sharc::kern::launch(ctx, 16, 3, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DLP:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[SDLP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 48, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[LP]])), reinterpret_cast<float *>((ctx->arena + [[P]])), reinterpret_cast<float *>((ctx->arena + [[DPV:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[DPP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 6, 8, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DPP]])), reinterpret_cast<float *>((ctx->arena + [[SDPP:[0-9]+]]))});
// The backward kernel reads lp, the two row sums, dlp, dp, p, x and the
// layer norm's saved statistics.
// CHECK-NEXT: sharc::kern::launch(ctx, 48, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[LP]])), reinterpret_cast<float *>((ctx->arena + [[SDLP]])), reinterpret_cast<float *>((ctx->arena + [[DLP]])), reinterpret_cast<float *>((ctx->arena + [[DPV]])), reinterpret_cast<float *>((ctx->arena + [[SDPP]])), reinterpret_cast<float *>((ctx->arena + [[P]])), reinterpret_cast<float *>(ctx->buffers[3]), reinterpret_cast<float *>((ctx->arena + [[MU]])), reinterpret_cast<float *>((ctx->arena + [[RSTD]])), reinterpret_cast<float *>((ctx->arena + [[DB:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[DG:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 96, [[COLSUM:K[0-9]+]]{reinterpret_cast<float *>((ctx->arena + [[DG]])),
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 96, [[COLSUM]]{reinterpret_cast<float *>((ctx->arena + [[DB]])),
