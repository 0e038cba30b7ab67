// RUN: sharc-opt %S/../passes/optimizer-buffers.mlir --sharc-train-pipeline="optimizer=sgd lr=0.1 world-size=2" --sharc-compile-pipeline | sharc-translate --emit-program | FileCheck %s

// A buffer (BatchNorm's running mean) on two ranks: the step broadcasts rank
// 0's new value (3 floats, 12 bytes, nccl-tests' factor 1) into the result
// and counts it as the step's one broadcast; the all-reduces carry the loss
// and w's gradient.
// CHECK: const sharc::rt::ProgramInfo info = {
// CHECK: {2u, 0u, 0u, 1u},
// CHECK-NEXT: {{[{][0-9]+}}u, 0u, 0u, 12u},
// CHECK: ctx->comm->broadcast({{.*}}, 3, sharc::rt::DType::f32, 0);
