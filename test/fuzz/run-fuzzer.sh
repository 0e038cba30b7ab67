#!/usr/bin/env bash
# Builds the ONNX-importer fuzzer with clang, ASan and UBSan in FUZZ_BUILD
# and runs it for SECONDS, seeded with small models from ONNX's test data.
#   run-fuzzer.sh SOURCE_DIR FUZZ_BUILD SECONDS
set -euo pipefail
src=$1 build=$2 seconds=$3
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
ninja -C "$build" sharc-onnx-import-fuzzer

corpus=$build/corpus
mkdir -p "$corpus"
data=/usr/share/libonnx-testdata/data/node
if [ -d "$data" ]; then
  # A few hundred small real models as seeds.  (No `| head` here: with
  # pipefail, the writer's SIGPIPE would fail the script.)
  mapfile -t seeds < <(find "$data" -name model.onnx -size -4k | sort)
  for f in "${seeds[@]:0:300}"; do
    cp "$f" "$corpus/$(basename "$(dirname "$f")").onnx"
  done
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/test/fuzz/sharc-onnx-import-fuzzer" "$corpus" -max_total_time="$seconds" \
  -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 -artifact_prefix="$build/"
echo "run-fuzzer: no crash in $seconds s"
