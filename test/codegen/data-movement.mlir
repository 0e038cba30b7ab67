// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// Data movement: slice (negative and non-unit strides), transpose (not read
// by a GEMM, so a copy), concat, trilu and broadcast are index-mapping
// kernels with a thread per output element (concat: one launch per input,
// each writing its rows at its offset along the axis); in the backward pass
// concat becomes slices, transpose the inverse transpose, slice an
// insert_slice (the destination zeros copied in, then the source scattered
// to its offsets), trilu the same trilu kernel, and the reshape of q's
// gradient is a view (no kernel, no copy).  The iota is no kernel of its
// own: the fusion that reads it computes each element's index (i % 4).
//
// Buffers of @train_step: 0 p [2x3x4], 1 q [3x1], 2 step, 3 x.

func.func @main(%p: tensor<2x3x4xf32> {sharc.param = #sharc.param<"p", "p">},
                %q: tensor<3x1xf32> {sharc.param = #sharc.param<"q", "q">},
                %x: tensor<2x3x4xf32> {sharc.input = "x"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %s = sharc.slice %p {start = array<i64: 0, 2, 1>, stride = array<i64: 1, -1, 2>} : tensor<2x3x4xf32> to tensor<2x2x2xf32>
  %t = sharc.transpose %p {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %c = sharc.concat %s, %s {axis = 1} : (tensor<2x2x2xf32>, tensor<2x2x2xf32>) -> tensor<2x4x2xf32>
  %u = sharc.trilu %p {upper = true, diagonal = 1} : tensor<2x3x4xf32>
  %b = sharc.broadcast %q : tensor<3x1xf32> to tensor<2x3x4xf32>
  %i = sharc.iota {dimension = 2} : tensor<2x3x4xi64>
  %f = sharc.cast %i : tensor<2x3x4xi64> to tensor<2x3x4xf32>
  %te = sharc.exp %t : tensor<4x2x3xf32>
  %ce = sharc.exp %c : tensor<2x4x2xf32>
  %ub = sharc.mul %u, %b : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %ubf = sharc.mul %ub, %f : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %ubx = sharc.mul %ubf, %x : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %r0 = sharc.reduce %te {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<4x2x3xf32>) -> tensor<f32>
  %r1 = sharc.reduce %ce {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x4x2xf32>) -> tensor<f32>
  %r2 = sharc.reduce %ubx {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %l0 = sharc.add %r0, %r1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %l = sharc.add %l0, %r2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// p[0:2, 2:0:-1, 1:4:2]: base 0 * 12 + 2 * 4 + 1 = 9, strides 12, -4, 2.
// CHECK: struct [[SLICE:K[0-9]+]] {
// CHECK:        SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t c0 = (i / 4);
// CHECK-NEXT:     const int64_t c1 = (i / 2 % 2);
// CHECK-NEXT:     const int64_t c2 = (i % 2);
// CHECK-NEXT:     const int64_t offset = 9 + c0 * 12 + c1 * -4 + c2 * 2;
// CHECK-NEXT:     p1[i] = p0[offset];
// Result dims (4, 2, 3) walk p's strides (1, 12, 4).
// CHECK: struct [[TRANSPOSE:K[0-9]+]] {
// CHECK:          const int64_t offset = 0 + c0 * 1 + c1 * 12 + c2 * 4;
// CHECK-NEXT:     p1[i] = p0[offset];
// concat along axis 1 of [2, 2, 2] + [2, 2, 2]: rows of 4 into rows of 8.
// CHECK: struct [[CAT0:K[0-9]+]] {
// CHECK:          p1[(i / 4) * 8 + 0 + (i % 4)] = p0[i];
// CHECK: struct [[CAT1:K[0-9]+]] {
// CHECK:          p1[(i / 4) * 8 + 4 + (i % 4)] = p0[i];
// trilu(upper, diagonal 1) over the last two dims (3 x 4).
// CHECK: struct [[TRILU:K[0-9]+]] {
// CHECK:          const int64_t row = (i / 4) % 3, col = i % 4;
// CHECK-NEXT:     const bool keep = col >= row + INT64_C(1);
// CHECK-NEXT:     p1[i] = keep ? p0[i] : float(0);
// q [3x1] broadcast to [2x3x4].
// CHECK: struct [[BCAST:K[0-9]+]] {
// CHECK:          const int64_t offset = int64_t(uint32_t(i) / 4u % 3u);
// CHECK-NEXT:     p1[i] = p0[offset];
// u * b * float(iota) * x: the iota along dimension 2 computed in place.
// CHECK: struct [[PRODUCT:K[0-9]+]] {
// CHECK:          const int64_t [[IDX:v[0-9]+]] = int64_t(((i) % 4));
// CHECK-NEXT:     const float {{v[0-9]+}} = float(static_cast<double>([[IDX]]));
// The backward kernels (in the order of their first launch).  Concat: the
// two halves of its gradient.
// CHECK:          const int64_t offset = 0 + c0 * 8 + c1 * 2 + c2 * 1;
// CHECK:          const int64_t offset = 4 + c0 * 8 + c1 * 2 + c2 * 1;
// The inverse transpose (1, 2, 0) of [4, 2, 3].
// CHECK:          const int64_t offset = 0 + c0 * 3 + c1 * 1 + c2 * 6;
// insert_slice: the slice's own offsets, written instead of read.
// CHECK:          const int64_t offset = 9 + c0 * 12 + c1 * -4 + c2 * 2;
// CHECK-NEXT:     p1[offset] = p0[i];

// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, [[SLICE]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[S:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[TRANSPOSE]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[T:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, [[CAT0]]{reinterpret_cast<float *>((ctx->arena + [[S]])), reinterpret_cast<float *>((ctx->arena + [[C:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, [[CAT1]]{reinterpret_cast<float *>((ctx->arena + [[S]])), reinterpret_cast<float *>((ctx->arena + [[C]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[TRILU]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>((ctx->arena + [[U:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[BCAST]]{reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>((ctx->arena + [[B:[0-9]+]]))});
// u * b * float(iota) * x, loading the two index maps' results.
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[PRODUCT]]{reinterpret_cast<float *>((ctx->arena + [[U]])), reinterpret_cast<float *>((ctx->arena + [[B]])), reinterpret_cast<float *>(ctx->buffers[3]),
// The gradient of q: the sum over the broadcast dims 0 and 2; its reshape
// to [3x1] is read in place by q's update.
// CHECK: sharc::kern::launch(ctx, 3, 8, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[U]])), reinterpret_cast<float *>((ctx->arena + [[DQ:[0-9]+]]))});
// The gradient of trilu is the same trilu kernel.
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[TRILU]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[DU:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DC:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[DS0:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DC]])), reinterpret_cast<float *>((ctx->arena + [[DS1:[0-9]+]]))});
// s is read twice: its gradient is the sum of the two halves.
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DS0]])), reinterpret_cast<float *>((ctx->arena + [[DS1]])), reinterpret_cast<float *>((ctx->arena + [[DS:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[DT:[0-9]+]]))});
// insert_slice into zeros: the zeros (24 floats, 96 bytes) copied into its
// result, then the 8 source elements scattered into it.
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, K{{[0-9]+}}{reinterpret_cast<float *>(ctx->buffers[{{[0-9]+}}]), reinterpret_cast<float *>((ctx->arena + [[ZEROS:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::copy(ctx, (ctx->arena + [[DSLICE:[0-9]+]]), (ctx->arena + [[ZEROS]]), 96);
// CHECK-NEXT: sharc::kern::launch(ctx, 8, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DS]])), reinterpret_cast<float *>((ctx->arena + [[DSLICE]]))});
// p's gradient, the sum of its three parts, is written once (with its
// square) for the gradients' norm and the update; q's gradient is read
// through the view.  The norm: the sums of squares, then their f64 root.
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DU]])), reinterpret_cast<float *>((ctx->arena + [[DT]])), reinterpret_cast<float *>((ctx->arena + [[DSLICE]])), reinterpret_cast<float *>((ctx->arena + [[DP:[0-9]+]])), reinterpret_cast<float *>((ctx->arena + [[SQ:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 24, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[SQ]])), reinterpret_cast<float *>((ctx->arena + [[SP:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 3, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[DQ]])), reinterpret_cast<float *>((ctx->arena + [[SQQ:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[SP]])), reinterpret_cast<float *>((ctx->arena + [[SQQ]])), reinterpret_cast<double *>((ctx->arena + {{[0-9]+}}))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[LR:[0-9]+]]))});
// CHECK: K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[LR]])), reinterpret_cast<float *>((ctx->arena + [[DP]])), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[0])},
// CHECK-NEXT: K{{[0-9]+}}{reinterpret_cast<float *>((ctx->arena + [[LR]])), reinterpret_cast<float *>((ctx->arena + [[DQ]])), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>(ctx->buffers[1])},
