// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | FileCheck %s --check-prefix=IR

// Loss kernels over [N=2, C=3, d=4] (8 positions): cross_entropy from logits
// (mean), nll_loss with class weights and ignore_index = 2 (sum), and
// nll_loss without reduction.  Each is a kernel with a thread per position
// (n = position / 4, d = position % 4, class c at (n * 3 + c) * 4 + d); a
// target outside [0, 3) raises the op's error code.  For sum and mean every
// position writes its loss and weight as two doubles into the op's scratch
// space (16 bytes per position: 128 bytes), and a one-thread kernel then adds
// them in position order and divides by the weight sum for mean.  The
// backward pass is one-hot arithmetic: the cross-entropy gradient
// (onehot - softmax) / 8 is computed inside the kernel of the scale's
// gradient sum.
//
// Buffers of @train_step: 0 w, 1 step, 2 z, 3 t, 4 class_weight.

func.func @main(%z: tensor<2x3x4xf32> {sharc.input = "z"},
                %w: tensor<3xf32> {sharc.param = #sharc.param<"w", "scale">},
                %t: tensor<2x4xi64> {sharc.input = "t"},
                %cw: tensor<3xf32> {sharc.input = "class_weight"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %w3 = sharc.reshape %w : tensor<3xf32> to tensor<3x1xf32>
  %x = sharc.mul %z, %w3 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  %ce = sharc.cross_entropy %x, %t {reduction = #sharc.loss_reduction<mean>} : (tensor<2x3x4xf32>, tensor<2x4xi64>) -> tensor<f32>
  %lp = sharc.log_softmax %x {axis = 1} : tensor<2x3x4xf32>
  %nll = sharc.nll_loss %lp, %t, %cw {reduction = #sharc.loss_reduction<sum>, ignore_index = 2} : (tensor<2x3x4xf32>, tensor<2x4xi64>, tensor<3xf32>) -> tensor<f32>
  %nn = sharc.nll_loss %lp, %t {reduction = #sharc.loss_reduction<none>} : (tensor<2x3x4xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  %ns = sharc.reduce %nn {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  %l0 = sharc.add %ce, %nll : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %l = sharc.add %l0, %ns : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// IR: sharc.cross_entropy {{.*}}sharc.scratch_bytes = 128 : i64, sharc.scratch_offset = [[CE_SCRATCH:[0-9]+]] : i64}
// IR: sharc.nll_loss {{.*}}ignore_index = 2 : i64, reduction = #sharc.loss_reduction<sum>, {{.*}}sharc.scratch_bytes = 128 : i64, sharc.scratch_offset = [[NLL_SCRATCH:[0-9]+]] : i64}
// IR-NOT: scratch
// IR: sharc.nll_loss {{.*}}{reduction = #sharc.loss_reduction<none>, sharc.offsets = array<i64: {{[0-9]+}}>}

// The logits z * w (w over the classes).
// CHECK: struct [[SCALE:K[0-9]+]] {
// CHECK:          const float v1 = float(p1[int64_t(uint32_t(i) / 4u % 3u)]);
// Cross entropy: log_softmax over the 3 classes (stride 4) at the target.
// CHECK: struct [[CE:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int64_t *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   double *p3;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:       const int64_t position = i;
// CHECK-NEXT:       const int64_t n = position / 4, d = position % 4;
// CHECK-NEXT:       const int64_t t = int64_t(p1[position]);
// CHECK-NEXT:       double loss = 0, w = 0;
// CHECK-NEXT:       {
// CHECK-NEXT:         if (t < 0 || t >= 3) { raise([[#CE_CODE:]]); } else {
// CHECK-NEXT:         double logProb = double(p0[(n * 3 + t) * 4 + d]);
// CHECK-NEXT:         const double max = sharc::kern::rowMax(3, [&](int64_t c) { return double(p0[(n * 3 + c) * 4 + d]); });
// CHECK-NEXT:         const double sum = sharc::math::laneSum(3, [&](int64_t c) { return sharc::math::exp(double(p0[(n * 3 + c) * 4 + d]) - max); });
// CHECK-NEXT:         logProb = logProb - max - log(sum);
// CHECK-NEXT:         w = 1.0;
// CHECK-NEXT:         loss = -logProb * w;
// CHECK-NEXT:         }
// CHECK-NEXT:       }
// CHECK-NEXT:       p3[2 * i] = loss;
// CHECK-NEXT:       p3[2 * i + 1] = w;
// CHECK-NEXT:   }
// The mean: the 8 (loss, weight) pairs added in order.
// CHECK: struct [[MEAN:K[0-9]+]] {
// CHECK-NEXT:   const double *p0;
// CHECK-NEXT:   float *p1;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     double total = 0, weightSum = 0;
// CHECK-NEXT:     for (int64_t p = 0; p < 8; ++p) { total += p0[2 * p]; weightSum += p0[2 * p + 1]; }
// CHECK-NEXT:     p1[0] = static_cast<float>(total / weightSum);
// CHECK: struct [[LOGSOFTMAX:K[0-9]+]] {
// Weighted NLL: an ignored target has loss and weight 0.
// CHECK: struct [[NLL:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int64_t *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   double *p4;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:       const int64_t position = i;
// CHECK-NEXT:       const int64_t n = position / 4, d = position % 4;
// CHECK-NEXT:       const int64_t t = int64_t(p1[position]);
// CHECK-NEXT:       double loss = 0, w = 0;
// CHECK-NEXT:       if (t != INT64_C(2)) {
// CHECK-NEXT:         if (t < 0 || t >= 3) { raise([[#CE_CODE+1]]); } else {
// CHECK-NEXT:         double logProb = double(p0[(n * 3 + t) * 4 + d]);
// CHECK-NEXT:         w = double(p2[t]);
// CHECK-NEXT:         loss = -logProb * w;
// CHECK-NEXT:         }
// CHECK-NEXT:       }
// CHECK-NEXT:       p4[2 * i] = loss;
// CHECK-NEXT:       p4[2 * i + 1] = w;
// The sum: the same ordered pass, not divided.
// CHECK: struct [[SUM:K[0-9]+]] {
// CHECK:          for (int64_t p = 0; p < 8; ++p) { total += p0[2 * p]; weightSum += p0[2 * p + 1]; }
// CHECK-NEXT:     p1[0] = static_cast<float>(total);
// No reduction: each position stores its loss.
// CHECK: struct [[NONE:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int64_t *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:       const int64_t position = i;
// CHECK:              if (t < 0 || t >= 3) { raise([[#CE_CODE+2]]); } else {
// CHECK:            p2[i] = static_cast<float>(loss);
// The backward of the cross entropy inside the scale's gradient sum: u3 the
// one-hot mask, u4 = -1/8, u5 the softmax: u12 = (softmax - onehot) / 8.
// CHECK:          const float u10 = float((u3 ? u4 : 0.0f));
// CHECK-NEXT:     const float u11 = float((u4 * u5));
// CHECK-NEXT:     const float u12 = float((u10 - u11));

// The run-time messages, by error code (one per loss op, in program order).
// CHECK-LABEL: const char *const messages[] = {
// CHECK-NEXT: "a loss target is not a class index in [0, 3) in loc(
// CHECK-NEXT: "a loss target is not a class index in [0, 3) in loc(
// CHECK-NEXT: "a loss target is not a class index in [0, 3) in loc(

// The step: the scratch pointers are the planned scratch offsets, written by
// the position kernels (8 threads) and read by the in-order sums (1 thread).
// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[SCALE]]{reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[X:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 9, [[CE]]{reinterpret_cast<float *>((ctx->arena + [[X]])), reinterpret_cast<int64_t *>(ctx->buffers[3]), reinterpret_cast<float *>((ctx->arena + [[CE_OUT:[0-9]+]])), reinterpret_cast<double *>(ctx->arena + [[CE_SCRATCH:[0-9]+]])});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, [[MEAN]]{reinterpret_cast<const double *>(ctx->arena + [[CE_SCRATCH]]), reinterpret_cast<float *>((ctx->arena + [[CE_OUT]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 9, [[LOGSOFTMAX]]{reinterpret_cast<float *>((ctx->arena + [[X]])), reinterpret_cast<float *>((ctx->arena + [[LP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 9, [[NLL]]{reinterpret_cast<float *>((ctx->arena + [[LP]])), reinterpret_cast<int64_t *>(ctx->buffers[3]), reinterpret_cast<float *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + [[NLL_OUT:[0-9]+]])), reinterpret_cast<double *>(ctx->arena + [[NLL_SCRATCH:[0-9]+]])});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, [[SUM]]{reinterpret_cast<const double *>(ctx->arena + [[NLL_SCRATCH]]), reinterpret_cast<float *>((ctx->arena + [[NLL_OUT]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 9, [[NONE]]{reinterpret_cast<float *>((ctx->arena + [[LP]])), reinterpret_cast<int64_t *>(ctx->buffers[3]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
