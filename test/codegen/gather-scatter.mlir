// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// gather and its backward, scatter_add.  Forward: an embedding lookup
// (axis 0, i64 ids [2x3] into rows of 4), a gather along axis 1 with i32
// indices (3 outer slices), and a lookup of rows of 300; a thread per output
// element, negative indices wrapped, an out-of-range index raising the op's
// error code.  Backward: each gradient is scatter_add into zeros with a
// thread per destination row (outer slice o, row r) that scans the indices
// in order and sums the matching update rows in double (no atomics), in
// blocks of at most 256 columns (rows of 300: two blocks).
//
// Buffers of @train_step: 0 table, 1 w, 2 wide, 3 step, 4 ids, 5 cols, 6 rows.

func.func @main(%ids: tensor<2x3xi64> {sharc.input = "ids"},
                %cols: tensor<4xi32> {sharc.input = "cols"},
                %rows: tensor<2xi64> {sharc.input = "rows"},
                %table: tensor<10x4xf32> {sharc.param = #sharc.param<"table", "embedding.weight">},
                %w: tensor<3x5x2xf32> {sharc.param = #sharc.param<"w", "w">},
                %wide: tensor<3x300xf32> {sharc.param = #sharc.param<"wide", "wide">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %e = sharc.gather %table, %ids {axis = 0} : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %g = sharc.gather %w, %cols {axis = 1} : (tensor<3x5x2xf32>, tensor<4xi32>) -> tensor<3x4x2xf32>
  %v = sharc.gather %wide, %rows {axis = 0} : (tensor<3x300xf32>, tensor<2xi64>) -> tensor<2x300xf32>
  %ee = sharc.exp %e : tensor<2x3x4xf32>
  %ge = sharc.exp %g : tensor<3x4x2xf32>
  %ve = sharc.exp %v : tensor<2x300xf32>
  %r0 = sharc.reduce %ee {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %r1 = sharc.reduce %ge {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<3x4x2xf32>) -> tensor<f32>
  %r2 = sharc.reduce %ve {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<2x300xf32>) -> tensor<f32>
  %l0 = sharc.add %r0, %r1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %l = sharc.add %l0, %r2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK: struct [[G_IDS:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int64_t *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t k = i % 4, j = (i / 4) % 6, o = i / 24;
// CHECK-NEXT:     int64_t index = int64_t(p1[j]);
// CHECK-NEXT:     if (index < -10 || index >= 10) { raise([[#G_IDS_CODE:]]); p2[i] = float(0); return; }
// CHECK-NEXT:     if (index < 0) index += 10;
// CHECK-NEXT:     p2[i] = p0[(o * 10 + index) * 4 + k];
// CHECK: struct [[G_COLS:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int32_t *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t k = i % 2, j = (i / 2) % 4, o = i / 8;
// CHECK-NEXT:     int64_t index = int64_t(p1[j]);
// CHECK-NEXT:     if (index < -5 || index >= 5) { raise([[#G_IDS_CODE+1]]); p2[i] = float(0); return; }
// CHECK-NEXT:     if (index < 0) index += 5;
// CHECK-NEXT:     p2[i] = p0[(o * 5 + index) * 2 + k];
// CHECK: struct [[G_ROWS:K[0-9]+]] {
// CHECK:          const int64_t k = i % 300, j = (i / 300) % 2, o = i / 600;
// CHECK:          p2[i] = p0[(o * 3 + index) * 300 + k];

// The scatters follow the forward kernels, the last being the loss sum.
// CHECK:          const float v4 = float((v3 + v2));
// CHECK-NEXT:     p3[i] = static_cast<float>(v4);
// CHECK-NEXT:   }
// CHECK-NEXT: };
// CHECK-EMPTY:
// The gradient of wide: two blocks, 256 and 44 columns.
// CHECK-NEXT: struct [[S_ROWS:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int64_t *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t r = i % 3, o = i / 3;
// CHECK-NEXT:     for (int64_t k0 = 0; k0 < 300; k0 += 256) {
// CHECK-NEXT:       const int64_t width = 300 - k0 < 256 ? 300 - k0 : 256;
// CHECK-NEXT:       double acc[256];
// CHECK-NEXT:       for (int64_t k = 0; k < width; ++k) acc[k] = double(p0[i * 300 + k0 + k]);
// CHECK-NEXT:       for (int64_t j = 0; j < 2; ++j) {
// CHECK:                const float *from = p2 + (o * 2 + j) * 300 + k0;
// The gradient of w along axis 1: destination rows (o, r) of [3, 5, 2].
// CHECK: struct [[S_COLS:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const int32_t *p1;
// CHECK-NEXT:   const float *p2;
// CHECK-NEXT:   float *p3;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const int64_t r = i % 5, o = i / 5;
// CHECK-NEXT:     for (int64_t k0 = 0; k0 < 2; k0 += 2) {
// CHECK-NEXT:       const int64_t width = 2 - k0 < 2 ? 2 - k0 : 2;
// CHECK-NEXT:       double acc[2];
// CHECK-NEXT:       for (int64_t k = 0; k < width; ++k) acc[k] = double(p0[i * 2 + k0 + k]);
// CHECK-NEXT:       for (int64_t j = 0; j < 4; ++j) {
// CHECK-NEXT:         int64_t index = int64_t(p1[j]);
// CHECK-NEXT:         if (index < -5 || index >= 5) { raise([[#G_IDS_CODE+4]]); continue; }
// CHECK-NEXT:         if (index < 0) index += 5;
// CHECK-NEXT:         if (index != r) continue;
// CHECK-NEXT:         const float *from = p2 + (o * 4 + j) * 2 + k0;
// CHECK-NEXT:         for (int64_t k = 0; k < width; ++k) acc[k] += double(from[k]);
// CHECK-NEXT:       }
// CHECK-NEXT:       for (int64_t k = 0; k < width; ++k) p3[i * 2 + k0 + k] = static_cast<float>(acc[k]);
// CHECK-NEXT:     }
// The embedding gradient: 10 rows of 4, 6 ids.
// CHECK: struct [[S_IDS:K[0-9]+]] {
// CHECK:          const int64_t r = i % 10, o = i / 10;
// CHECK:            for (int64_t j = 0; j < 6; ++j) {
// CHECK:                if (index < -10 || index >= 10) { raise([[#G_IDS_CODE+5]]); continue; }
// CHECK:                const float *from = p2 + (o * 6 + j) * 4 + k0;

// CHECK-LABEL: const char *const messages[] = {
// CHECK-NEXT: "gather index out of range for dimension 0 of size 10 in loc(
// CHECK-NEXT: "gather index out of range for dimension 1 of size 5 in loc(
// CHECK-NEXT: "gather index out of range for dimension 0 of size 3 in loc(
// CHECK-NEXT: "scatter_add index out of range for dimension 0 of size 3 in loc(
// CHECK-NEXT: "scatter_add index out of range for dimension 1 of size 5 in loc(
// CHECK-NEXT: "scatter_add index out of range for dimension 0 of size 10 in loc(
// CHECK-NEXT: nullptr};

// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[G_IDS]]{reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<int64_t *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[G_COLS]]{reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<int32_t *>(ctx->buffers[5]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// CHECK-NEXT: sharc::kern::launch(ctx, 600, 1, [[G_ROWS]]{reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<int64_t *>(ctx->buffers[6]), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// exp and its backward (one kernel text for the three shapes' fusions): the
// last result is the update rows each scatter reads.
// CHECK: sharc::kern::launch(ctx, 600, 1, [[EXP:K[0-9]+]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[D_ROWS:[0-9]+]]))});
// CHECK: sharc::kern::launch(ctx, 24, 1, [[EXP]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[D_COLS:[0-9]+]]))});
// CHECK: sharc::kern::launch(ctx, 24, 1, [[EXP]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[D_IDS:[0-9]+]]))});
// Each scatter starts from zeros broadcast into the arena (3 x 300, then
// 3 x 5 x 2, then 10 x 4 elements) and writes the gradient the update reads.
// CHECK: sharc::kern::launch(ctx, 900, 1, [[ZEROS:K[0-9]+]]{reinterpret_cast<float *>(ctx->buffers[{{[0-9]+}}]), reinterpret_cast<float *>((ctx->arena + [[Z:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 3, 304, [[S_ROWS]]{reinterpret_cast<float *>((ctx->arena + [[Z]])), reinterpret_cast<int64_t *>(ctx->buffers[6]), reinterpret_cast<float *>((ctx->arena + [[D_ROWS]])), reinterpret_cast<float *>((ctx->arena + [[DWIDE:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 30, 1, [[ZEROS]]{reinterpret_cast<float *>(ctx->buffers[{{[0-9]+}}]), reinterpret_cast<float *>((ctx->arena + [[Z]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 15, 6, [[S_COLS]]{reinterpret_cast<float *>((ctx->arena + [[Z]])), reinterpret_cast<int32_t *>(ctx->buffers[5]), reinterpret_cast<float *>((ctx->arena + [[D_COLS]])), reinterpret_cast<float *>((ctx->arena + [[DW:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 40, 1, [[ZEROS]]{reinterpret_cast<float *>(ctx->buffers[{{[0-9]+}}]), reinterpret_cast<float *>((ctx->arena + [[Z]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 10, 10, [[S_IDS]]{reinterpret_cast<float *>((ctx->arena + [[Z]])), reinterpret_cast<int64_t *>(ctx->buffers[4]), reinterpret_cast<float *>((ctx->arena + [[D_IDS]])), reinterpret_cast<float *>((ctx->arena + [[DTABLE:[0-9]+]]))});
// The SGD updates read the three scattered gradients.
// CHECK: [[SGD:K[0-9]+]]{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DTABLE]])), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[0])},
// CHECK-NEXT: [[SGD]]{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DW]])), reinterpret_cast<float *>(ctx->buffers[1]), reinterpret_cast<float *>(ctx->buffers[1])},
// CHECK-NEXT: [[SGD]]{{{.*}}, reinterpret_cast<float *>((ctx->arena + [[DWIDE]])), reinterpret_cast<float *>(ctx->buffers[2]), reinterpret_cast<float *>(ctx->buffers[2])},
// CHECK-NEXT: }, {40, 30, 900}};
