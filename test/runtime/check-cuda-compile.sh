#!/bin/sh
# Usage: check-cuda-compile.sh FLAGS-FILE WORK-DIR NAME MAIN.cpp [SOURCE.cu...]
# Compiles each CUDA source and MAIN.cpp with the nvcc command line recorded in
# FLAGS-FILE (CudaBuildFlags.txt, written by cmake/SharcCuda.cmake: sm_80 and
# sm_90 code plus compute_90 PTX) and links them with the runtime libraries,
# NCCL, cuBLASLt, the CUDA runtime, MPI and BLAS into WORK-DIR/NAME, which is
# not run (there may be no GPU).
set -e
set -f # the recorded arguments are split on spaces, never globbed
flags="$1"
work="$2"
name="$3"
main="$4"
shift 4
value() { sed -n "s/^$1=//p" "$flags"; }
nvcc=$(value NVCC)
compile="$nvcc $(value NVCC_FLAGS) $(value INCLUDE_FLAGS)"
arch=$(value CUDA_ARCH_FLAGS)
mkdir -p "$work"
objects=""
for source in "$@"; do
  object="$work/$(basename "$source" .cu).o"
  $compile $arch -c "$source" -o "$object"
  objects="$objects $object"
done
$compile -c "$main" -o "$work/$name.o"
$nvcc -o "$work/$name" "$work/$name.o" $objects $(value RUNTIME_LIBRARIES) \
  $(value LINK_LIBRARIES) $(value LINK_FLAGS)
echo "check-cuda-compile: $name linked from $(basename "$main")$objects" \
  "(not run)"
