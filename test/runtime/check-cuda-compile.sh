#!/bin/sh
# Usage: check-cuda-compile.sh NVCC SOURCE-DIR WORK-DIR LIBRARY...
# Compiles runtime/GemmCuda.cu once per target architecture (sm_80; sm_90 with
# compute_90 PTX) and links test/runtime/GemmCudaSmoke.cpp with it, the given
# libraries, cuBLASLt and the CUDA runtime into an executable that is not run.
set -e
nvcc="$1"
src="$2"
work="$3"
shift 3
mkdir -p "$work"
flags="-std=c++20 -O2 -I$src"
"$nvcc" $flags -c "$src/runtime/GemmCuda.cu" -o "$work/GemmCuda.sm80.o" \
  -gencode arch=compute_80,code=sm_80
"$nvcc" $flags -c "$src/runtime/GemmCuda.cu" -o "$work/GemmCuda.sm90.o" \
  -gencode "arch=compute_90,code=[sm_90,compute_90]"
"$nvcc" $flags -c "$src/test/runtime/GemmCudaSmoke.cpp" \
  -o "$work/GemmCudaSmoke.o"
"$nvcc" -o "$work/gemm-cuda-smoke" "$work/GemmCudaSmoke.o" \
  "$work/GemmCuda.sm90.o" "$@" -lcublasLt -lcudart
echo "check-cuda-compile: GemmCuda.cu compiled for sm_80 and sm_90, smoke" \
  "driver linked"
