#!/usr/bin/env bash
# Builds a fuzzer with clang, ASan and UBSan in FUZZ_BUILD and runs it for
# SECONDS.  FUZZER is onnx-import (the default), deepspeed-config or npy.
#   run-fuzzer.sh SOURCE_DIR FUZZ_BUILD SECONDS [FUZZER]
# Seeds: small models from ONNX's test data (onnx-import); test/models/*.json
# and test/fuzz/seeds/deepspeed-config (the configs of test/e2e) for
# deepspeed-config; test/models/*.npy and test/fuzz/seeds/npy for npy; plus
# test/fuzz/regressions/FUZZER, the inputs that once crashed it.  The corpus
# grows in FUZZ_BUILD/corpus/FUZZER; a crash leaves FUZZ_BUILD/crash-* (or
# leak-*, oom-*, timeout-*) and fails the script.
set -euo pipefail
src=$1 build=$2 seconds=$3 fuzzer=${4:-onnx-import}
case $fuzzer in
  onnx-import | deepspeed-config | npy) ;;
  *) echo "run-fuzzer: unknown fuzzer '$fuzzer' (onnx-import, deepspeed-config, npy)" >&2
     exit 1 ;;
esac
clang=$(command -v clang++-22 || true)
if [ -z "$clang" ]; then
  echo "run-fuzzer: clang++-22 not found (tools/install-deps.sh installs it)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DSHARC_FUZZ=ON -DBUILD_TESTING=OFF > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
fi
ninja -C "$build" "sharc-$fuzzer-fuzzer"

corpus=$build/corpus/$fuzzer
mkdir -p "$corpus"
seeds=()
case $fuzzer in
  onnx-import)
    data=/usr/share/libonnx-testdata/data/node
    if [ -d "$data" ]; then
      # A few hundred small real models as seeds.  (No `| head` here: with
      # pipefail, the writer's SIGPIPE would fail the script.)
      mapfile -t models < <(find "$data" -name model.onnx -size -4k | sort)
      for f in "${models[@]:0:300}"; do
        cp "$f" "$corpus/$(basename "$(dirname "$f")").onnx"
      done
    fi ;;
  deepspeed-config)
    cp "$src"/test/models/*.json "$corpus/"
    seeds+=("$src/test/fuzz/seeds/$fuzzer") ;;
  npy)
    cp "$src"/test/models/*.npy "$corpus/"
    seeds+=("$src/test/fuzz/seeds/$fuzzer") ;;
esac
if [ -d "$src/test/fuzz/regressions/$fuzzer" ]; then
  seeds+=("$src/test/fuzz/regressions/$fuzzer")
fi
# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons the unused part
# of each new slab when its header code is compiled into our instrumented
# objects (MLIR's attribute uniquer, inlined here), but Debian's libMLIR is
# not instrumented and hands out memory from such a slab without unpoisoning
# it, so ASan would report MLIR's own copies into it (a use-after-poison in
# DenseElementsAttr's storage, seen on the EyeLike seed).  Real overflows are
# still caught by ASan's own redzones.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/test/fuzz/sharc-$fuzzer-fuzzer" "$corpus" "${seeds[@]}" \
  -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
  -print_final_stats=1 -artifact_prefix="$build/"
echo "run-fuzzer: $fuzzer: no crash in $seconds s"
