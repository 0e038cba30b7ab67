//===- GemmFatalMain.cpp - gemm() argument errors -------------------------===//
//
// Usage: sharc-gemm-fatal CASE.  Calls gemm() (without MPI) with the invalid
// arguments named by CASE, which must end the process through fatal().
//
//===----------------------------------------------------------------------===//

#include "runtime/Gemm.h"

#include <cstdio>
#include <string>

using namespace sharc::rt;

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sharc-gemm-fatal CASE\n");
    return 2;
  }
  std::string which = argv[1];
  float a[64] = {}, b[64] = {}, c[64] = {};
  GemmArgs args;
  args.m = 2;
  args.n = 3;
  args.k = 4;
  args.a = a;
  args.lda = 4;
  args.b = b;
  args.ldb = 3;
  args.c = c;
  args.ldc = 3;
  if (which == "negative-m") {
    args.m = -1;
  } else if (which == "small-lda") {
    args.transA = true; // A is stored 4 x 2
    args.lda = 1;
  } else if (which == "overlapping-c") {
    args.batch = 2;
    args.strideC = 5; // each C spans 6 elements
  } else if (which == "integer-type") {
    args.type = DType::i32;
  } else if (which == "null-b") {
    args.b = nullptr;
  } else if (which == "overlapping-outer-c") {
    args.outerBatch = 2;
    args.outerStrideC = 5; // each C spans 6 elements
  } else if (which == "bias-with-beta") {
    args.bias = b;
    args.beta = 1;
  } else if (which == "aux-without-activation") {
    args.aux = c;
  } else {
    std::fprintf(stderr, "sharc-gemm-fatal: unknown case %s\n", argv[1]);
    return 2;
  }
  gemm(args);
  std::fprintf(stderr, "sharc-gemm-fatal: gemm() returned\n");
  return 0;
}
