// RUN: sharc-opt %s --sharc-index-masks | FileCheck %s
// RUN: sharc-opt %s --sharc-index-masks --sharc-fuse | FileCheck %s --check-prefix=FUSED

// Triangular constants become index predicates, one per use, built before
// the reader at its shape: attention's causal mask (true above the diagonal,
// k = 1) read by a select of the scores' shape, and an additive float mask
// (0 on and below the diagonal, -inf above it: `c - r >= 1 ? -inf : 0`) read
// by an add and, at its own shape, by a transpose.  A constant that is no
// triangle (an anti-diagonal pattern) and a triangle that differs in one
// leading slice stay.  After sharc-fuse the predicate is in the select's
// fusion with the iotas cloned in: the constant is gone and no i1 value is
// stored.

func.func @main(%s: tensor<2x4x4xf32>, %t: tensor<1x4x4xf32>)
    -> (tensor<2x4x4xf32>, tensor<1x4x4xf32>, tensor<4x1x4xf32>,
        tensor<2x4x4xf32>, tensor<2x2x2xf32>) {
  %causal = sharc.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %ninf = sharc.constant dense<0xFF800000> : tensor<f32>
  %masked = sharc.select %causal, %ninf, %s : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %additive = sharc.constant dense<[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]> : tensor<1x4x4xf32>
  %biased = sharc.add %t, %additive : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
  %moved = sharc.transpose %additive {permutation = array<i64: 1, 0, 2>} : (tensor<1x4x4xf32>) -> tensor<4x1x4xf32>
  %anti = sharc.constant dense<[[false, false, false, true], [false, false, true, false], [false, true, false, false], [true, false, false, false]]> : tensor<4x4xi1>
  %other = sharc.select %anti, %ninf, %s : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %uneven = sharc.constant dense<[[[false, true], [false, false]], [[false, false], [false, false]]]> : tensor<2x2x2xi1>
  %zero = sharc.constant dense<0.0> : tensor<f32>
  %one = sharc.constant dense<1.0> : tensor<f32>
  %picked = sharc.select %uneven, %one, %zero : (tensor<2x2x2xi1>, tensor<f32>, tensor<f32>) -> tensor<2x2x2xf32>
  return %masked, %biased, %moved, %other, %picked : tensor<2x4x4xf32>, tensor<1x4x4xf32>, tensor<4x1x4xf32>, tensor<2x4x4xf32>, tensor<2x2x2xf32>
}

// CHECK-LABEL: func.func @main(
// CHECK-NOT:     dense<{{\[\[}}false, true, true, true]
// CHECK:         %[[COL:.*]] = sharc.iota {dimension = 2 : i64} : tensor<2x4x4xi64>
// CHECK-NEXT:    %[[ROW:.*]] = sharc.iota {dimension = 1 : i64} : tensor<2x4x4xi64>
// CHECK-NEXT:    %[[OFF:.*]] = sharc.sub %[[COL]], %[[ROW]]
// CHECK-NEXT:    %[[K:.*]] = sharc.constant dense<1> : tensor<i64>
// CHECK-NEXT:    %[[CAUSAL:.*]] = sharc.compare %[[OFF]], %[[K]] {predicate = #sharc.predicate<ge>} : (tensor<2x4x4xi64>, tensor<i64>) -> tensor<2x4x4xi1>
// CHECK-NEXT:    sharc.select %[[CAUSAL]], %{{.*}}, %arg0 : (tensor<2x4x4xi1>, tensor<f32>, tensor<2x4x4xf32>)
// The float mask, at the add's shape (its own) and again for the transpose.
// CHECK-NEXT:    %[[FCOL:.*]] = sharc.iota {dimension = 2 : i64} : tensor<1x4x4xi64>
// CHECK-NEXT:    %[[FROW:.*]] = sharc.iota {dimension = 1 : i64} : tensor<1x4x4xi64>
// CHECK-NEXT:    %[[FOFF:.*]] = sharc.sub %[[FCOL]], %[[FROW]]
// CHECK-NEXT:    %[[FK:.*]] = sharc.constant dense<1> : tensor<i64>
// CHECK-NEXT:    %[[FCOND:.*]] = sharc.compare %[[FOFF]], %[[FK]]
// CHECK-NEXT:    %[[NINF:.*]] = sharc.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:    %[[ZERO:.*]] = sharc.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[ADDITIVE:.*]] = sharc.select %[[FCOND]], %[[NINF]], %[[ZERO]] : (tensor<1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x4x4xf32>
// CHECK-NEXT:    sharc.add %arg1, %[[ADDITIVE]]
// CHECK-NEXT:    sharc.iota {dimension = 2 : i64} : tensor<1x4x4xi64>
// CHECK:         %[[AGAIN:.*]] = sharc.select %{{.*}} : (tensor<1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x4x4xf32>
// CHECK-NEXT:    sharc.transpose %[[AGAIN]]
// CHECK-NEXT:    sharc.constant dense<{{\[\[}}false, false, false, true]
// CHECK:         sharc.constant dense<{{\[\[\[}}false, true], [false, false]], {{\[\[}}false, false], [false, false]]]>
// CHECK:         return

// FUSED-LABEL: func.func @main(
// FUSED-NOT:     sharc.iota
// FUSED:         sharc.fusion
// FUSED:           sharc.iota {dimension = 2 : i64} : tensor<2x4x4xi64>
// FUSED:           sharc.iota {dimension = 1 : i64} : tensor<2x4x4xi64>
// FUSED:           sharc.compare
// FUSED:           sharc.select
// FUSED:           sharc.yield %{{.*}} : tensor<2x4x4xf32>
