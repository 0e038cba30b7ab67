// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s
// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline="fuse=false" | sharc-translate --emit-program | FileCheck %s --check-prefix=UNFUSED

// A bf16 model body (as sharc-mixed-precision leaves it): the f32 master
// weight is cast to bf16 once per step, the GEMM takes bf16 operands
// (DType::bf16, f32 accumulation inside), the elementwise kernels store
// sharc::kern::bf16 values rounded once, the softmax (the fp32 policy) reads
// f32 (sixteen-bit-refused.mlir: a 16-bit softmax is refused).  The bias,
// read at a broadcast index, is loaded through sharc::kern::gather16 (a
// 32-bit-word gather, which x86 vectorizes).

func.func @main(%x: tensor<4x3xf32> {sharc.input = "x"},
                %w: tensor<3x5xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
                %b: tensor<5xf32> {sharc.param = #sharc.param<"b", "fc.bias">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %x16 = sharc.cast %x : tensor<4x3xf32> to tensor<4x3xbf16>
  %w16 = sharc.cast %w : tensor<3x5xf32> to tensor<3x5xbf16>
  %b16 = sharc.cast %b : tensor<5xf32> to tensor<5xbf16>
  %mm = sharc.matmul %x16, %w16 : (tensor<4x3xbf16>, tensor<3x5xbf16>) -> tensor<4x5xbf16>
  %0 = sharc.add %mm, %b16 : (tensor<4x5xbf16>, tensor<5xbf16>) -> tensor<4x5xbf16>
  %1 = sharc.tanh %0 : tensor<4x5xbf16>
  %2 = sharc.cast %1 : tensor<4x5xbf16> to tensor<4x5xf32>
  %3 = sharc.softmax %2 {axis = 1 : i64} : tensor<4x5xf32>
  %4 = sharc.reduce %3 {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1>} : (tensor<4x5xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}

// The cast of an f32 value to bf16: one rounding, stored as bf16 bits.
// CHECK-LABEL: struct K0 {
// CHECK-NEXT: const float *p0;
// CHECK-NEXT: sharc::kern::bf16 *p1;
// CHECK: const float v0 = float(p0[i]);
// CHECK-NEXT: const float v1 = sharc::kern::roundBF16(v0);
// CHECK-NEXT: p1[i] = static_cast<sharc::kern::bf16>(v1);
// tanh of a bf16 value: computed in double, rounded once to bf16; the cast
// up to f32 is exact.
// CHECK-LABEL: struct K1 {
// CHECK-NEXT: const sharc::kern::bf16 *p0;
// CHECK-NEXT: const sharc::kern::bf16 *p1;
// CHECK: const float v0 = float(p0[i]);
// CHECK-NEXT: const float v1 = float(sharc::kern::gather16(p1, int64_t(uint32_t(i) % 5u)));
// CHECK-NEXT: const float v2 = sharc::kern::roundBF16((v0 + v1));
// CHECK-NEXT: const float v3 = sharc::kern::roundBF16(sharc::math::tanh(double(v2)));
// CHECK-NEXT: const float v4 = float(v3);
// CHECK-LABEL: extern "C" void sharcProgramStep(
// The forward GEMM and the weight gradient's GEMM on bf16 operands.
// CHECK: args.type = sharc::rt::DType::bf16;
// CHECK: args.type = sharc::rt::DType::bf16;
// UNFUSED: sharc::kern::roundBF16(sharc::math::tanh(double(
