#!/usr/bin/env bash
# Installs everything sharc needs on Debian 12, as root.
#   tools/install-deps.sh          build dependencies (Debian packages)
#   tools/install-deps.sh --test   also the Python test environment
# The Python environment lives in $SHARC_VENV (default ~/.cache/sharc/venv-<hash>),
# keyed by the requirements so that unchanged requirements are not reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build ccache g++ python3
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools clang-22 libclang-rt-22-dev
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libopenblas-dev openmpi-bin libopenmpi-dev googletest libgtest-dev
  liburing-dev libdnnl-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "sharc: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = "--test" ]; then
  reqs=tools/requirements-test.txt
  torch_pkgs="torch==2.15.0 nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13"
  hash=$( (cat "$reqs"; echo "$torch_pkgs"; python3 --version) | sha256sum | cut -c1-12)
  venv=${SHARC_VENV:-$HOME/.cache/sharc/venv-$hash}
  if [ ! -f "$venv/.complete" ]; then
    echo "sharc: creating the Python test environment in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$reqs"
    # The PyPI torch wheel declares the whole CUDA stack as dependencies; the
    # tests use its CPU path, which needs only these few of them (the rest of
    # the CUDA libraries come from the toolkit in /usr/local/cuda).
    "$venv/bin/pip" install -q --no-deps $torch_pkgs
    "$venv/bin/python" -c "import torch, onnx, onnxruntime, numpy"
    touch "$venv/.complete"
  fi
  # DeepSpeed, the oracle of the mixed-precision tests (docs/semantics.md):
  # its pure-Python dependencies, then the release itself from its sdist,
  # without its dependencies (which would replace torch) and without
  # building its C++ ops (they are built on first use, and the tests use
  # none).
  deepspeed=deepspeed==0.19.8
  if [ ! -f "$venv/.$deepspeed" ]; then
    echo "sharc: installing $deepspeed into $venv"
    "$venv/bin/pip" install -q wheel==0.48.0 hjson==3.1.0 ninja==1.13.2 \
      psutil==7.2.2 py-cpuinfo==9.0.0 pydantic==2.14.4 tqdm==4.70.1 \
      msgpack==1.2.4 einops==0.8.2
    DS_BUILD_OPS=0 "$venv/bin/pip" install -q --no-deps --no-build-isolation \
      "$deepspeed"
    DS_ACCELERATOR=cpu "$venv/bin/python" -c \
      "import deepspeed.runtime.fp16.loss_scaler"
    touch "$venv/.$deepspeed"
  fi
  # Packages added to the environment after it was made, each installed
  # once (its own marker file, so the environment's hash stays): PACKAGE==V
  # and a module that must then import.
  add_package() {
    if [ ! -f "$venv/.$1" ]; then
      echo "sharc: installing $1 into $venv"
      "$venv/bin/pip" install -q "$1"
      "$venv/bin/python" -c "import $2"
      touch "$venv/.$1"
    fi
  }
  # matplotlib, for tools/plot-metrics.py and its test.
  add_package matplotlib==3.10.7 matplotlib
  # TensorBoard, whose reader checks the event files sharc writes, and which
  # DeepSpeed's tensorboard monitor (torch's SummaryWriter) needs in the
  # oracle.
  add_package tensorboard==2.21.0 \
    tensorboard.backend.event_processing.event_accumulator
  # Hugging Face transformers (its models, randomly initialised: nothing is
  # downloaded) and onnxscript, which torch.onnx's dynamo exporter needs: the
  # real-model tests (test/e2e/test_hf_models.py).
  add_package transformers==5.23.0 transformers
  add_package onnxscript==0.7.2 onnxscript
  # torchvision (its ResNet-18, randomly initialised): the real-model tests
  # (test/e2e/test_torchvision_models.py).  Its wheel requires the torch
  # installed above (2.15.0), which pip keeps.
  add_package torchvision==0.29.2 torchvision
  echo "$venv" > .venv-path
fi
