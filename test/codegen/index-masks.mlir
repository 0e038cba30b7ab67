// RUN: sharc-opt %s --sharc-train-pipeline="optimizer=sgd lr=0.1" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// A causal mask (a constant 4 x 4 triangle, true above the diagonal) read by a
// select before a softmax: sharc-index-masks makes it `col - row >= 1`, and
// the select's fusion, computed inside the softmax's row kernel, derives both
// indices from the element's position (column i % 4, row (i / 4) % 4).  No
// mask is stored: no bool table in the source and no bool buffer; backward's
// select computes its own copy the same way.

func.func @main(%x: tensor<2x4x4xf32> {sharc.input = "x"},
                %w: tensor<4xf32> {sharc.param = #sharc.param<"w", "w">})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %s = sharc.mul %x, %w : (tensor<2x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  %causal = sharc.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %ninf = sharc.constant dense<0xFF800000> : tensor<f32>
  %masked = sharc.select %causal, %ninf, %s : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p = sharc.softmax %masked {axis = 2} : tensor<2x4x4xf32>
  %l = sharc.reduce %p {kind = #sharc.reduce_kind<sum>, axes = array<i64: 0, 1, 2>} : (tensor<2x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-NOT:   bool
// CHECK:       SHARC_HD double in0(int64_t i) const {
// CHECK:         const int64_t [[COL:u[0-9]+]] = int64_t(((i) % 4));
// CHECK-NEXT:    const int64_t [[ROW:u[0-9]+]] = int64_t(((i) / 4 % 4));
// CHECK-NEXT:    const int64_t [[OFF:u[0-9]+]] = wrapSub([[COL]], [[ROW]]);
// CHECK-NEXT:    const int64_t [[MASK:u[0-9]+]] = int64_t([[OFF]] >= INT64_C(1));
// CHECK-NEXT:    const float {{u[0-9]+}} = float(([[MASK]] ? (-HUGE_VALF) : {{u[0-9]+}}));
// CHECK:       sharc::math::exp
// Backward: the select's gradient, zero where the mask holds.
// CHECK:         int64_t(((i) % 4));
// CHECK-NEXT:    int64_t(((i) / 4 % 4));
// CHECK-NOT:   bool
