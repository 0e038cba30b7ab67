#!/usr/bin/env bash
# One-command set-up on a fresh Debian 12 machine (as root).
#   tools/setup.sh example   install, build, and run the bundled example
#   tools/setup.sh test      install, build, and run every test suite
# BUILD_DIR (default: build) selects the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
# Debian's ninja, also once the test environment (whose DeepSpeed brings a
# ninja of its own) is first on PATH: two ninja versions would each throw
# away the other's build log and rebuild everything.
system_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case "$mode" in
  example) tools/install-deps.sh ;;
  test) tools/install-deps.sh --test
        venv=$(cat .venv-path)
        export PATH="$venv/bin:$PATH" ;;
  *) echo "usage: tools/setup.sh example|test" >&2; exit 2 ;;
esac

build=${BUILD_DIR:-build}
jobs=$(nproc)
ninja=$(PATH=$system_path command -v ninja)
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_MAKE_PROGRAM="$ninja" -DPython3_EXECUTABLE="$(command -v python3)"
fi
echo "sharc: building in $build"
"$ninja" -C "$build" -j "$jobs"

if [ "$mode" = example ]; then
  model=test/models/tiny-gpt.onnx
  echo "sharc: importing $model"
  "$build/bin/sharc" import "$model" -o "$build/tiny-gpt.mlir"
  echo "sharc: wrote $build/tiny-gpt.mlir ($(grep -c 'sharc\.' "$build/tiny-gpt.mlir") sharc ops)"
  echo "sharc: evaluating the loss of $model on the bundled batch"
  data=(--input tokens=test/models/tiny-gpt-tokens.npy
        --input targets=test/models/tiny-gpt-targets.npy)
  "$build/bin/sharc" eval "$model" "${data[@]}"
  echo "sharc: training it for 10 steps with test/models/tiny-gpt-ds_config.json on the evaluator"
  "$build/bin/sharc" eval "$model" --train --steps 10 \
    --config test/models/tiny-gpt-ds_config.json "${data[@]}"
  echo "sharc: compiling the training step for 2 data-parallel ranks (CPU target)"
  "$build/bin/sharc" compile "$model" --config test/models/tiny-gpt-ds_config.json \
    --world-size 2 -o "$build/tiny-gpt-train" --report
  echo "sharc: training 10 steps with mpirun -np 2 $build/tiny-gpt-train/train" \
    "(a checkpoint every 5 steps, the metrics in $build/tiny-gpt-metrics.jsonl)"
  rm -f "$build/tiny-gpt-metrics.jsonl"
  mpirun --allow-run-as-root --oversubscribe -np 2 "$build/tiny-gpt-train/train" \
    "${data[@]}" --steps 10 --save-dir "$build/tiny-gpt-checkpoints" \
    --save-every 5 --metrics "$build/tiny-gpt-metrics.jsonl"
else
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
fi
