// RUN: sharc-opt %s --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// GEMM epilogues on batched and transposed products (gemm.mlir has the plain
// ones): relu(x w + b) with x [2x4x8] is one taller 8x3 GEMM with the bias
// and ReLU epilogue; gelu_tanh(u v + b) over broadcast batches [2,1] x [1,3]
// keeps both batch levels and writes the pre-activation through args.aux
// with the same layout as C; relu(xt^T w) has an activation and no bias.
// Each is written straight into the fusion's results (no separate kernel).
//
// Buffers: 0 x, 1 w, 2 b, 3 u, 4 v, 5 xt, 6 step, 7 o1, 8 o2, 9 o2a, 10 o3.

func.func @train_step(%x: tensor<2x4x8xf32> {sharc.input = "x"},
                      %w: tensor<8x3xf32> {sharc.input = "w"},
                      %b: tensor<3xf32> {sharc.input = "b"},
                      %u: tensor<2x1x4x8xf32> {sharc.input = "u"},
                      %v: tensor<1x3x8x3xf32> {sharc.input = "v"},
                      %xt: tensor<8x4xf32> {sharc.input = "xt"},
                      %step: tensor<i64> {sharc.state = #sharc.state<"", "step">},
                      %o1: tensor<2x4x3xf32> {sharc.state = #sharc.state<"", "o1">},
                      %o2: tensor<2x3x4x3xf32> {sharc.state = #sharc.state<"", "o2">},
                      %o2a: tensor<2x3x4x3xf32> {sharc.state = #sharc.state<"", "o2a">},
                      %o3: tensor<4x3xf32> {sharc.state = #sharc.state<"", "o3">})
    -> (tensor<f32> {sharc.output = "loss"}, tensor<f64> {sharc.output = "lr"},
        tensor<2x4x3xf32> {sharc.state = #sharc.state<"", "o1">},
        tensor<2x3x4x3xf32> {sharc.state = #sharc.state<"", "o2">},
        tensor<2x3x4x3xf32> {sharc.state = #sharc.state<"", "o2a">},
        tensor<4x3xf32> {sharc.state = #sharc.state<"", "o3">}) {
  %lr = sharc.constant dense<0.25> : tensor<f64>
  %loss = sharc.constant dense<0.0> : tensor<f32>
  %0 = sharc.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x3xf32>) -> tensor<2x4x3xf32>
  %1 = sharc.add %0, %b : (tensor<2x4x3xf32>, tensor<3xf32>) -> tensor<2x4x3xf32>
  %2 = sharc.relu %1 : tensor<2x4x3xf32>
  %3 = sharc.matmul %u, %v : (tensor<2x1x4x8xf32>, tensor<1x3x8x3xf32>) -> tensor<2x3x4x3xf32>
  %4 = sharc.add %3, %b : (tensor<2x3x4x3xf32>, tensor<3xf32>) -> tensor<2x3x4x3xf32>
  %5 = sharc.gelu %4 {approximation = #sharc.gelu_approximation<tanh>} : tensor<2x3x4x3xf32>
  %6 = sharc.matmul %xt, %w {transpose_lhs = true} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %7 = sharc.relu %6 : tensor<4x3xf32>
  return %loss, %lr, %2, %5, %4, %7 : tensor<f32>, tensor<f64>, tensor<2x4x3xf32>, tensor<2x3x4x3xf32>, tensor<2x3x4x3xf32>, tensor<4x3xf32>
}

// No kernels at all: the epilogues are the GEMMs'.
// CHECK-NOT: struct K
// CHECK-LABEL: extern "C" void sharcProgramStep(const sharc::rt::StepContext *ctx) {
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 8; args.n = 3; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[0]); args.lda = 8; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[1]); args.ldb = 3; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[O1:[0-9]+]])); args.ldc = 3; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: args.bias = reinterpret_cast<float *>(ctx->buffers[2]);
// CHECK-NEXT: args.activation = sharc::rt::GemmActivation::relu;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = false; args.transB = false;
// CHECK-NEXT: args.m = 4; args.n = 3; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[3]); args.lda = 8; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[4]); args.ldb = 3; args.strideB = 24;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[O2:[0-9]+]])); args.ldc = 3; args.strideC = 12;
// CHECK-NEXT: args.batch = 3;
// CHECK-NEXT: args.outerBatch = 2; args.outerStrideA = 32; args.outerStrideB = 0; args.outerStrideC = 36;
// CHECK-NEXT: args.bias = reinterpret_cast<float *>(ctx->buffers[2]);
// CHECK-NEXT: args.activation = sharc::rt::GemmActivation::geluTanh;
// CHECK-NEXT: args.aux = reinterpret_cast<float *>((ctx->arena + [[O2A:[0-9]+]]));
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// CHECK-NEXT: {
// CHECK-NEXT: sharc::rt::GemmArgs args;
// CHECK-NEXT: args.type = sharc::rt::DType::f32;
// CHECK-NEXT: args.transA = true; args.transB = false;
// CHECK-NEXT: args.m = 4; args.n = 3; args.k = 8;
// CHECK-NEXT: args.a = reinterpret_cast<float *>(ctx->buffers[5]); args.lda = 4; args.strideA = 0;
// CHECK-NEXT: args.b = reinterpret_cast<float *>(ctx->buffers[1]); args.ldb = 3; args.strideB = 0;
// CHECK-NEXT: args.c = reinterpret_cast<float *>((ctx->arena + [[O3:[0-9]+]])); args.ldc = 3; args.strideC = 0;
// CHECK-NEXT: args.batch = 1;
// CHECK-NEXT: args.activation = sharc::rt::GemmActivation::relu;
// CHECK-NEXT: sharc::kern::gemm(ctx, args);
// CHECK-NEXT: }
// The results: the activations, and the pre-activation from aux.
// CHECK:      sharc::kern::copy(ctx, ctx->buffers[7], (ctx->arena + [[O1]]), 96);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[8], (ctx->arena + [[O2]]), 288);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[9], (ctx->arena + [[O2A]]), 288);
// CHECK-NEXT: sharc::kern::copy(ctx, ctx->buffers[10], (ctx->arena + [[O3]]), 48);
