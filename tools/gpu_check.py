#!/usr/bin/env python3
"""The GPU check: the CUDA target's losses against the CPU target's, and step
times.  Run it through tools/gpu-check.sh (which checks for a GPU first and
picks a Python with torch); docs/runtime.md, "GPU check", documents both.

  1. prepare (needs bin/sharc, torch and onnx; no GPU): export the MLP, GPT and
     BERT of test/e2e/models.py, each with its own seed (distinct weights and
     data, 48 rows), its GEMM-epilogue classifier (bias + tanh-GELU with the
     pre-activation stored, bias + ReLU: cuBLASLt's GELU_AUX_BIAS and
     RELU_BIAS), and a larger GPT for timing; `sharc compile` each for
     --target cpu and --target cuda --cuda-arch ARCH at --world-size N for
     every N of --ranks, in parallel.
  2. run (needs a GPU, mpirun): probe the CUDA device (the first CUDA binary
     with --help: deviceInit and NCCL start-up; a failure ends the check at
     once), then run every pair under `mpirun -np N` for --steps steps on the
     same data and compare the losses step by step; then time the larger GPT
     on both targets.

Before the models, gemm-cuda-check (test/runtime/GemmCudaCheck.cpp, built
into WORK/gemm-cuda by prepare) compares gemmCuda with the host gemm() on 192
random GEMMs and epilogues.  Output, one line per check:
  gpu-check: gemm-cuda-check PASS|FAIL   (after the check's own summary line)
  gpu-check: MODEL N=K max_rel_loss_diff D PASS|FAIL   (gpt-bf16 and gpt-fp16:
      the GPT compiled with --precision bf16 / fp16, tolerances 2e-2 / 5e-3,
      and for fp16 the same scales and skipped steps as the CPU binary;
      gpt-recompute: the GPT recomputing its layers, their inputs kept in
      pinned host memory on the GPU)
  gpu-check: timing MODEL target T ms/step X tokens/s
where D = max over steps of |cuda - cpu| / |cpu|, PASS when D < --tolerance
(1e-4); T is the mean step time after --warmup steps and X = tokens per step /
mean step time.  The exit status is 0 when every check passed.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)(?: scale (\S+))? ms (\S+)"
                       r" (?:tokens|samples)/s (\S+)( skipped)?$", re.MULTILINE)
MODELS = ("mlp", "gpt", "bert", "epilogues", "gpt-bf16", "gpt-fp16",
          "gpt-recompute", "dropout")
SEEDS = {"mlp": 101, "gpt": 202, "bert": 303, "epilogues": 505,
         "gpt-large": 404, "gpt-bf16": 606, "gpt-fp16": 707,
         "gpt-recompute": 808, "dropout": 909}
# Models compiled with more than the recipe: gpt-recompute recomputes its
# layers and, on the CUDA target, keeps their inputs in pinned host memory
# (DeepSpeed's cpu_checkpointing; docs/recompute.md) -- the same losses.
CHECKPOINTING = {"activation_checkpointing": {"cpu_checkpointing": True}}
# The 16-bit programs (--precision) and their loss tolerance against the CPU
# binary: both accumulate GEMMs in f32 but in other orders (and cuBLASLt's
# GELU differs in last bits), so a 16-bit activation now and then rounds to
# the neighbouring value, 2^-8 (bf16) or 2^-11 (fp16) relative; the loss, a
# mean over every token, moves far less, and over the steps the weights
# drift apart by the same order.  fp16 must also give the same loss scales
# and skipped steps.
PRECISION = {"gpt-bf16": "bf16", "gpt-fp16": "fp16"}
TOLERANCE = {"gpt-bf16": 2e-2, "gpt-fp16": 5e-3}
ROWS = 48
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01",
          "--scheduler", "WarmupLR", "--warmup-max-lr", "0.003",
          "--warmup-num-steps", "5"]


class CheckError(Exception):
    pass


def say(text):
    print(f"gpu-check: {text}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tools/gpu-check.sh",
        description="Compare the CUDA target's losses with the CPU target's "
                    "and time both (needs a GPU for the run phase).")
    parser.add_argument("--build-dir", default=str(REPO / "build"),
                        help="sharc build directory with bin/sharc (default build)")
    parser.add_argument("--work-dir", default=None,
                        help="models, data and binaries (default BUILD/gpu-check)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="export and compile only (no GPU needed)")
    parser.add_argument("--run-only", action="store_true",
                        help="run what an earlier --prepare-only left in --work-dir")
    parser.add_argument("--cuda-arch", default=None,
                        help="sm_XX (default: the GPU's, else sm_90)")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated world sizes (default 1, and 2 with 2+ GPUs)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--timing-gpt", default="8192,256,512,8,8,8",
                        help="vocab,seq,dim,heads,layers,batch of the timed GPT "
                             "(default 8192,256,512,8,8,8); 'none' skips timing")
    parser.add_argument("--timing-steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="parallel sharc compiles (default: half the cores)")
    return parser.parse_args(argv)


def gpu_count():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    result = subprocess.run([smi, "-L"], capture_output=True, text=True)
    if result.returncode != 0:
        return 0
    return len(re.findall(r"^GPU \d+", result.stdout, re.MULTILINE))


def gpu_arch():
    result = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap",
                             "--format=csv,noheader"], capture_output=True,
                            text=True)
    first = result.stdout.split()[0] if result.returncode == 0 and result.stdout.split() else ""
    if re.fullmatch(r"\d+\.\d+", first):
        major, minor = first.split(".")
        return f"sm_{major}{minor}"
    return "sm_90"


# --------------------------------------------------------------------------
# Prepare: export and compile
# --------------------------------------------------------------------------


def build_case(name, seed, gpt=None):
    """(models.Case, config) with weights perturbed as in make_training_case,
    so that the ONNX initializers are exactly the parameters."""
    sys.path.insert(0, str(REPO / "test" / "e2e"))
    import torch
    import models

    if gpt is None:
        case = models.make_training_case(name, seed)
        return case, None
    config = models.GptConfig(*gpt)
    case = models.make_case("gpt", seed, gpt_config=config)
    noise = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for parameter in case.module.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=noise))
    return case, config


def export_model(key, work, gpt=None):
    """Exports model `key` and ROWS rows of its data; returns the spec."""
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO / "test" / "e2e"))
    import models

    name = "gpt" if key in ("gpt-large", "gpt-recompute", *PRECISION) else key
    directory = work / key
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.onnx"
    if key in ("epilogues", "dropout"):
        rng = np.random.default_rng(SEEDS[key])
        if key == "epilogues":
            models.make_epilogue_model(path)
            arrays = {"x": rng.standard_normal((ROWS, 16)).astype(np.float32),
                      "labels": rng.integers(0, 10, ROWS).astype(np.int64)}
        else:
            import test_dropout
            test_dropout.dropout_model(path)
            arrays = {name: rng.standard_normal((ROWS, width)).astype(np.float32)
                      for name, width in (("x", test_dropout.D),
                                          ("c", test_dropout.H))}
        inputs = []
        for input_name, array in arrays.items():
            file = directory / f"{input_name}.npy"
            np.save(file, array)
            inputs.append(f"{input_name}={file.relative_to(work)}")
        return {"onnx": str(path), "inputs": inputs}
    case, config = build_case(name, SEEDS[key], gpt)
    models.export(case, path)
    rows = ROWS if gpt is None else 4 * config.batch
    data = models.make_inputs(name, rows, torch.Generator().manual_seed(SEEDS[key] + 7),
                              config)
    inputs = []
    for input_name, tensor in data.items():
        file = directory / f"{input_name}.npy"
        np.save(file, tensor.numpy())
        inputs.append(f"{input_name}={file.relative_to(work)}")
    return {"onnx": str(path), "inputs": inputs}


def compile_one(sharc, key, spec, out, target, arch, ranks):
    argv = [str(sharc), "compile", spec["onnx"], *RECIPE, "--target", target,
            "--world-size", str(ranks), "-o", str(out)]
    if key in PRECISION:
        argv += ["--precision", PRECISION[key]]
    if key == "dropout":
        # Training-mode dropout: both targets draw the same Philox masks.
        argv += ["--input-shape", "x=8x16", "--input-shape", "c=8x64"]
    if key == "gpt-recompute":
        config = out.parent / "ds_config.json"
        config.write_text(json.dumps(CHECKPOINTING))
        argv += ["--config", str(config)]
    if target == "cuda":
        argv += ["--cuda-arch", arch]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise CheckError(f"sharc compile failed: {' '.join(argv)}\n{result.stderr}")
    return str(out.relative_to(out.parent.parent) / "train")


def build_gemm_check(build, work):
    """Builds test/runtime/GemmCudaCheck.cpp (gemmCuda against the host gemm()
    on random GEMMs and epilogues) into WORK/gemm-cuda with the build's nvcc
    command line, as ctest's runtime-cuda-compile does."""
    flags = build / "runtime" / "CudaBuildFlags.txt"
    if not flags.is_file():
        raise CheckError(f"{flags} not found: this build has no CUDA toolkit")
    argv = [str(REPO / "test" / "runtime" / "check-cuda-compile.sh"), str(flags),
            str(work / "gemm-cuda"), "gemm-cuda-check",
            str(REPO / "test" / "runtime" / "GemmCudaCheck.cpp"),
            str(REPO / "runtime" / "GemmCuda.cu")]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise CheckError(f"building gemm-cuda-check failed:\n{result.stderr}")


def run_gemm_check(work):
    """Runs gemm-cuda-check; True when it passed."""
    result = subprocess.run([str(work / "gemm-cuda" / "gemm-cuda-check")],
                            capture_output=True, text=True, timeout=1800)
    for line in (result.stdout + result.stderr).splitlines():
        print(line if line.startswith("gemm-cuda-check:") else f"  {line}",
              flush=True)
    ok = result.returncode == 0
    say(f"gemm-cuda-check {'PASS' if ok else 'FAIL'}")
    return ok


def prepare(args, work, arch, ranks_list, timing):
    sharc = pathlib.Path(args.build_dir) / "bin" / "sharc"
    if not os.access(sharc, os.X_OK):
        raise CheckError(f"{sharc} not found; build sharc first (--build-dir)")
    work.mkdir(parents=True, exist_ok=True)
    specs = {key: export_model(key, work) for key in MODELS}
    if timing:
        specs["gpt-large"] = export_model("gpt-large", work, timing)
    jobs = []
    for key, spec in specs.items():
        for ranks in ([1] if key == "gpt-large" else ranks_list):
            for target in ("cpu", "cuda"):
                out = work / key / f"{target}-np{ranks}"
                jobs.append((key, ranks, target, out))
    say(f"compiling {len(jobs)} binaries ({args.jobs} at a time, cuda for {arch})"
        " and gemm-cuda-check")
    build_gemm_check(pathlib.Path(args.build_dir), work)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(compile_one, sharc, key, specs[key], out, target,
                               arch, ranks): (key, ranks, target)
                   for key, ranks, target, out in jobs}
        for future in concurrent.futures.as_completed(futures):
            key, ranks, target = futures[future]
            specs[key].setdefault("binaries", {})[f"{target}-np{ranks}"] = future.result()
    plan = {"arch": arch, "ranks": ranks_list, "timing": bool(timing),
            "specs": specs}
    (work / "plan.json").write_text(json.dumps(plan, indent=2))
    return plan


# --------------------------------------------------------------------------
# Run: probe, compare, time
# --------------------------------------------------------------------------


def mpirun(ranks, binary, *args, timeout=1800):
    launcher = shutil.which("mpirun")
    if not launcher:
        raise CheckError("mpirun not found")
    argv = [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
            binary, *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def absolute(plan, work):
    """The plan's paths (relative to the work directory, so that a prepared
    directory can be copied to a GPU machine) made absolute."""
    for spec in plan["specs"].values():
        spec["inputs"] = [f"{name}={work / path}" for name, path in
                          (i.split("=", 1) for i in spec["inputs"])]
        spec["binaries"] = {k: str(work / v) for k, v in spec["binaries"].items()}
    return plan


def probe_device(plan):
    binary = plan["specs"]["mlp"]["binaries"]["cuda-np1"]
    result = mpirun(1, binary, "--help", timeout=300)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "error:" in line]
        raise CheckError("the CUDA binary cannot start on this machine: "
                         + (errors[0] if errors else result.stderr.strip()[-2000:]))


def run_steps(ranks, binary, inputs, steps):
    result = mpirun(ranks, binary, *[f"--input={i}" for i in inputs],
                    "--steps", steps, "--log-every", 1)
    if result.returncode != 0:
        raise CheckError(f"{binary} failed under mpirun -np {ranks}:\n"
                         f"{result.stderr.strip()[-4000:]}")
    lines = [(int(k), float(loss), float(ms), float(tps), scale, skipped)
             for k, loss, _, scale, ms, tps, skipped
             in STEP_LINE.findall(result.stdout)]
    if [k for k, *_ in lines] != list(range(1, steps + 1)):
        raise CheckError(f"{binary}: expected steps 1..{steps}:\n{result.stdout}")
    return lines


def compare(plan, steps, tolerance):
    ok = True
    for key in MODELS:
        spec = plan["specs"][key]
        for ranks in plan["ranks"]:
            cpu = run_steps(ranks, spec["binaries"][f"cpu-np{ranks}"], spec["inputs"], steps)
            cuda = run_steps(ranks, spec["binaries"][f"cuda-np{ranks}"], spec["inputs"], steps)
            diff = max(abs(g[1] - c[1]) / max(abs(c[1]), 1e-30)
                       for g, c in zip(cuda, cpu))
            passed = diff < TOLERANCE.get(key, tolerance)
            # fp16: the scaler's scales and skipped steps, exactly.
            scaler = [(g[4], g[5]) for g in cuda] == [(c[4], c[5]) for c in cpu]
            passed &= scaler
            ok &= passed
            say(f"{key} N={ranks} max_rel_loss_diff {diff:.3g}"
                f"{'' if scaler else ' scales or skipped steps differ'} "
                f"{'PASS' if passed else 'FAIL'}")
            if not passed:
                for (k, g, *_), (_, c, *_) in zip(cuda, cpu):
                    print(f"  step {k} cpu {c:.9g} cuda {g:.9g}", flush=True)
    return ok


def time_steps(plan, warmup, steps):
    spec = plan["specs"]["gpt-large"]
    for target in ("cpu", "cuda"):
        lines = run_steps(1, spec["binaries"][f"{target}-np1"], spec["inputs"],
                          warmup + steps)
        timed = lines[warmup:]
        mean_ms = sum(ms for _, _, ms, *_ in timed) / len(timed)
        tokens_per_step = timed[0][3] * timed[0][2] / 1e3
        say(f"timing gpt target {target} {mean_ms:.3f} ms/step "
            f"{tokens_per_step / (mean_ms / 1e3):.1f} tokens/s")


def main(argv=None):
    args = parse_args(argv)
    work = pathlib.Path(args.work_dir or pathlib.Path(args.build_dir) / "gpu-check").resolve()
    try:
        if args.run_only:
            plan_file = work / "plan.json"
            if not plan_file.is_file():
                raise CheckError(f"{plan_file} not found; run with --prepare-only first")
            plan = json.loads(plan_file.read_text())
        else:
            gpus = 0 if args.prepare_only else gpu_count()
            arch = args.cuda_arch or (gpu_arch() if gpus else "sm_90")
            if args.ranks:
                ranks_list = [int(r) for r in args.ranks.split(",")]
            else:
                ranks_list = [1, 2] if args.prepare_only or gpus >= 2 else [1]
            timing = None
            if args.timing_gpt != "none":
                timing = tuple(int(v) for v in args.timing_gpt.split(","))
                if len(timing) != 6:
                    raise CheckError("--timing-gpt needs vocab,seq,dim,heads,layers,batch")
            plan = prepare(args, work, arch, ranks_list, timing)
        if args.prepare_only:
            say(f"prepared {work} (run it with --run-only --work-dir {work})")
            return 0
        plan = absolute(plan, work)
        gpus = gpu_count()
        skipped = [r for r in plan["ranks"] if r > gpus]
        if skipped:
            say(f"skipping N={','.join(map(str, skipped))}: {gpus} GPU(s)")
        plan["ranks"] = [r for r in plan["ranks"] if r <= gpus]
        probe_device(plan)
        ok = run_gemm_check(work)
        ok &= compare(plan, args.steps, args.tolerance)
        if plan["timing"]:
            time_steps(plan, args.warmup, args.timing_steps)
        say("all checks passed" if ok else "some checks FAILED")
        return 0 if ok else 1
    except CheckError as error:
        say(f"error: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
