// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// GEMM calls of a three-layer MLP's training step: relu(x w1 + b1) and
// gelu_tanh(h w2 + b2) are each one GEMM whose epilogue adds the bias and
// applies the activation (the GELU GEMM also writes the pre-activation, which
// its backward reads, through args.aux); the transpose of w3 is no copy but
// the GEMM's transB flag, reading w3's own buffer.  In the backward pass the
// input gradients are C = dY W^T (transB) and the weight gradients
// C = X^T dY (transA), reading the forward's stored activations.  Every
// m/n/k and leading dimension is pinned; arena offsets are tracked from the
// GEMM that writes a value to the kernels and GEMMs that read it.
//
// Buffers of @train_step: 0 w1, 1 b1, 2 w2, 3 b2, 4 w3, 5 step, 6 x.

func.func @main(%x: tensor<8x4xf32> {sharc.input = "x"},
                %w1: tensor<4x6xf32> {sharc.param = #sharc.param<"w1", "fc1.weight">},
                %b1: tensor<6xf32> {sharc.param = #sharc.param<"b1", "fc1.bias">},
                %w2: tensor<6x5xf32> {sharc.param = #sharc.param<"w2", "fc2.weight">},
                %b2: tensor<5xf32> {sharc.param = #sharc.param<"b2", "fc2.bias">},
                %w3: tensor<3x5xf32> {sharc.param = #sharc.param<"w3", "fc3.weight">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w1 : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  %1 = sharc.add %0, %b1 : (tensor<8x6xf32>, tensor<6xf32>) -> tensor<8x6xf32>
  %2 = sharc.relu %1 : tensor<8x6xf32>
  %3 = sharc.matmul %2, %w2 : (tensor<8x6xf32>, tensor<6x5xf32>) -> tensor<8x5xf32>
  %4 = sharc.add %3, %b2 : (tensor<8x5xf32>, tensor<5xf32>) -> tensor<8x5xf32>
  %5 = sharc.gelu %4 {approximation = #sharc.gelu_approximation<tanh>} : tensor<8x5xf32>
  %w3t = sharc.transpose %w3 {permutation = array<i64: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
  %6 = sharc.matmul %5, %w3t : (tensor<8x5xf32>, tensor<5x3xf32>) -> tensor<8x3xf32>
  %7 = sharc.reduce %6 {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>} : (tensor<8x3xf32>) -> tensor<f32>
  return %7 : tensor<f32>
}

// Kernels are defined in the order of their first launch: the loss mean, the
// seed's scale 1/24 and its broadcast, then the backward kernels.
// CHECK: struct [[MEAN:K[0-9]+]] {
// CHECK: struct [[SEED:K[0-9]+]] {
// CHECK: const float v1 = float((v0 * 0.0416666679f));
// CHECK: struct [[BCAST:K[0-9]+]] {
// The GELU backward, dz = gelu_tanh'(z) * dg with z the aux output (p0):
// 0.5 (1 + t + z (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2)),
// t = tanh(sqrt(2/pi) (z + 0.044715 z^3)).
// CHECK: struct [[GELU_GRAD:K[0-9]+]] {
// CHECK-NEXT:   const float *p0;
// CHECK-NEXT:   const float *p1;
// CHECK-NEXT:   float *p2;
// CHECK-NEXT:   SHARC_HD void operator()(int64_t i) const {
// CHECK-NEXT:     const float v0 = float(p0[i]);
// CHECK-NEXT:     const float v1 = float(p1[i]);
// CHECK-NEXT:     const float v2 = float((v0 * v0));
// CHECK-NEXT:     const float v3 = float((v2 * v0));
// CHECK-NEXT:     const float v4 = float((v3 * 0.0447149985f));
// CHECK-NEXT:     const float v5 = float((v0 + v4));
// CHECK-NEXT:     const float v6 = float((v5 * 0.797884583f));
// CHECK-NEXT:     const float v7 = float(sharc::math::tanh(double(v6)));
// CHECK-NEXT:     const float v8 = float((v2 * 0.134145007f));
// CHECK-NEXT:     const float v9 = float((v8 + 1.0f));
// CHECK-NEXT:     const float v10 = float((v9 * 0.797884583f));
// CHECK-NEXT:     const float v11 = float((v7 * v7));
// CHECK-NEXT:     const float v12 = float((1.0f - v11));
// CHECK-NEXT:     const float v13 = float((v0 * v12));
// CHECK-NEXT:     const float v14 = float((v13 * v10));
// CHECK-NEXT:     const float v15 = float((v7 + 1.0f));
// CHECK-NEXT:     const float v16 = float((v15 + v14));
// CHECK-NEXT:     const float v17 = float((v16 * 0.5f));
// CHECK-NEXT:     const float v18 = float((v1 * v17));
// CHECK-NEXT:     p2[i] = static_cast<float>(v18);
// The b2 gradient: a column sum of dz over the 8 rows.
// CHECK: struct [[DB2:K[0-9]+]] {
// CHECK: for (int64_t r = 0; r < 8; ++r)
// CHECK-NEXT: for (int64_t k = 0; k < width; ++k) acc[k] += double(p0[r * 5 + j0 + k]);
// The ReLU backward reads the GEMM's activated output: h > 0 ? dh : 0.
// CHECK: struct [[RELU_GRAD:K[0-9]+]] {
// CHECK: const int64_t v2 = int64_t(v0 > 0.0f);
// CHECK-NEXT: const float v3 = float((v2 ? v1 : 0.0f));
// No kernel moves data: the transpose of w3 is a GEMM flag.
// CHECK-NOT: const int64_t offset =
// CHECK: const sharc::rt::BufferSpec buffers[] = {
// CHECK-NEXT: {"w1", "fc1.weight", "fc1.weight.npy", sharc::rt::BufferRole::param, sharc::rt::DType::f32, 2, {4, 6}, 24, 96, nullptr, false, 2, {4, 6}, sharc::rt::BufferStorage::device, -1},
// 8 GEMM calls per step: 3 forward, 5 backward.
// CHECK: {0u, 0u, 0u, 0u},
// CHECK-NEXT: {0u, 0u, 0u, 0u},
// CHECK-NEXT: {{[0-9]+}}, 8,
// CHECK-NEXT: {"", 1048576, 8, false, true, 0u, 0u},
// CHECK-NEXT: 0, 0u,
// CHECK-NEXT: "", "",
// CHECK-NEXT: "", ""};

// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// h = relu(x w1 + b1): bias and ReLU in the epilogue, no aux output.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 8; args.n = 6; args.k = 4;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[6]); args.lda = 4; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[0]); args.ldb = 6; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[H:[0-9]+]])); args.ldc = 6; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: args.bias = reinterpret_cast<float *>(ctx->buffers[1]);
// CHECK-NEXT: args.activation = sharc::rt::GemmActivation::relu;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// g = gelu_tanh(h w2 + b2), the pre-activation h w2 + b2 written to aux.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 8; args.n = 5; args.k = 6;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[H]])); args.lda = 6; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[2]); args.ldb = 5; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[G:[0-9]+]])); args.ldc = 5; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: args.bias = reinterpret_cast<float *>(ctx->buffers[3]);
// CHECK-NEXT: args.activation = sharc::rt::GemmActivation::geluTanh;
// CHECK-NEXT: args.aux = reinterpret_cast<float *>((ctx->arena + [[PRE:[0-9]+]]));
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// y = g w3^T: w3 [3x5] read as is with transB, no epilogue.
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = true;
// CHECK-NEXT: args.m = 8; args.n = 3; args.k = 5;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[G]])); args.lda = 5; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[4]); args.ldb = 5; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})); args.ldc = 3; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }

// The mean of y, then the seed 1/24 broadcast to dy [8x3].
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 24, [[MEAN]]{
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 1, [[SEED]]{
// CHECK-NEXT: sharc::kern::launch(ctx, 24, 1, [[BCAST]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[DY:[0-9]+]]))});
// Backward.  dg = dy w3.
// CHECK: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 8; args.n = 5; args.k = 3;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[DY]])); args.lda = 3; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[4]); args.ldb = 5; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[DG:[0-9]+]])); args.ldc = 5; args.strideC = 0;
// dw3 = dy^T g: [3x5] with k = 8, A transposed (lda = 3, its stored width).
// CHECK: args.transA = true; args.transB = false;
// CHECK-NEXT: args.m = 3; args.n = 5; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[DY]])); args.lda = 3; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>((ctx->arena + [[G]])); args.ldb = 5; args.strideB = 0;
// The GELU backward reads the pre-activation from aux and dg.
// CHECK: sharc::kern::launch(ctx, 40, 1, [[GELU_GRAD]]{reinterpret_cast<float *>((ctx->arena + [[PRE]])), reinterpret_cast<float *>((ctx->arena + [[DG]])), reinterpret_cast<float *>((ctx->arena + [[DZ2:[0-9]+]]))});
// CHECK-NEXT: sharc::kern::launch(ctx, 1, 128, [[DB2]]{reinterpret_cast<float *>((ctx->arena + [[DZ2]])), reinterpret_cast<float *>((ctx->arena + {{[0-9]+}}))});
// dh = dz2 w2^T.
// CHECK: args.transA = false; args.transB = true;
// CHECK-NEXT: args.m = 8; args.n = 6; args.k = 5;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[DZ2]])); args.lda = 5; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[2]); args.ldb = 5; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[DH:[0-9]+]])); args.ldc = 6; args.strideC = 0;
// dw2 = h^T dz2.
// CHECK: args.transA = true; args.transB = false;
// CHECK-NEXT: args.m = 6; args.n = 5; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>((ctx->arena + [[H]])); args.lda = 6; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>((ctx->arena + [[DZ2]])); args.ldb = 5; args.strideB = 0;
// The ReLU backward reads the activated h.
// CHECK: sharc::kern::launch(ctx, 48, 1, [[RELU_GRAD]]{reinterpret_cast<float *>((ctx->arena + [[H]])), reinterpret_cast<float *>((ctx->arena + [[DH]])), reinterpret_cast<float *>((ctx->arena + [[DZ1:[0-9]+]]))});
// dw1 = x^T dz1.
// CHECK: args.transA = true; args.transB = false;
// CHECK-NEXT: args.m = 4; args.n = 6; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[6]); args.lda = 4; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>((ctx->arena + [[DZ1]])); args.ldb = 6; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[DW1:[0-9]+]])); args.ldc = 6; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NOT: sharc::kern::gemm(
// The SGD update of w1 (24 elements) reads the dw1 the last GEMM wrote.
// CHECK: const sharc::kern::Group<[[SGD:K[0-9]+]], 5> group{{[{][{]}}
// CHECK-NEXT: [[SGD]]{reinterpret_cast<float *>((ctx->arena + {{[0-9]+}})), reinterpret_cast<float *>((ctx->arena + [[DW1]])), reinterpret_cast<float *>(ctx->buffers[0]), reinterpret_cast<float *>(ctx->buffers[0])},
// CHECK-NOT: sharc::kern::gemm(
// CHECK: ctx->comm->waitAll();
