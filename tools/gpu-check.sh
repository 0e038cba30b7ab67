#!/bin/bash
# The GPU check (docs/runtime.md, "GPU check"): on a machine with a GPU, the
# CUDA target's losses against the CPU target's for the MLP, GPT and BERT test
# models and a GEMM-epilogue classifier (20 steps, mpirun -np 1, and -np 2 with 2+ GPUs), and step times of a
# larger GPT on both targets.
#
#   tools/gpu-check.sh [--build-dir BUILD] [--work-dir DIR] [--cuda-arch sm_XX]
#                      [--ranks 1,2] [--steps 20] [--tolerance 1e-4]
#                      [--timing-gpt V,S,D,H,L,B | none] [--timing-steps 10]
#                      [--prepare-only | --run-only] [--jobs J]
#
# Prints one line per check,
#   gpu-check: MODEL N=K max_rel_loss_diff D PASS|FAIL
#   gpu-check: timing MODEL target T ms/step X tokens/s
# and exits 0 when every comparison passed.  Without a GPU (no nvidia-smi, no
# GPU listed, or the CUDA binary's deviceInit failing) it stops at once with
# "gpu-check: error: ..." and exit status 1.  --prepare-only exports and
# compiles everything into the work directory without a GPU; --run-only runs a
# prepared work directory (only mpirun and python3 needed there).
# The Python: $PYTHON, else the set-up script's virtual environment
# (.venv-path), else python3; export and compile need torch and onnx in it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

fail() {
  echo "gpu-check: error: $*" >&2
  exit 1
}

prepare_only=0
for arg in "$@"; do
  case "$arg" in
    --prepare-only) prepare_only=1 ;;
    -h|--help) prepare_only=1 ;;
  esac
done

if [ "$prepare_only" = 0 ]; then
  command -v nvidia-smi >/dev/null 2>&1 ||
    fail "no GPU: nvidia-smi not found (this check needs an NVIDIA GPU and driver;" \
         "use --prepare-only to export and compile without one)"
  if ! gpus=$(nvidia-smi -L 2>&1); then
    fail "no GPU: nvidia-smi -L failed: $gpus"
  fi
  echo "$gpus" | grep -q '^GPU [0-9]' || fail "no GPU: nvidia-smi lists none"
  echo "$gpus" | sed 's/^/gpu-check: found /'
fi

python=${PYTHON:-}
if [ -z "$python" ] && [ -f "$repo/.venv-path" ] &&
   [ -x "$(cat "$repo/.venv-path")/bin/python3" ]; then
  python="$(cat "$repo/.venv-path")/bin/python3"
fi
python=${python:-python3}
exec "$python" "$repo/tools/gpu_check.py" "$@"
