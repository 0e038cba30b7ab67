#!/usr/bin/env python3
"""Benchmark: how long `sharc compile` takes on large models, and its peak memory.

A benchmark, not a test: it checks nothing and only prints numbers.  For each
layer count of --layers it exports the GPT of test/e2e/models.py with GPT-2
124M's other sizes by default (d 768, 12 heads, T 1024, vocab 50257, an untied
head: 163 M parameters at 12 layers) with tools/benchmark-cpu.py's export, then
runs

    sharc compile MODEL.onnx --optimizer adamw --emit-only -o OUT

--rounds times (alternating over the models) and prints, per model, the
parameters and their bytes, the ONNX file's size, the median and minimum wall
time, the compiler's peak resident set (getrusage of the process: everything
it touched, file pages it mapped included) and that peak over the parameter
bytes, and at the end each model's time over the first's.  With --build it
also times the build of OUT/train (without --emit-only), once per model.

    tools/benchmark-compile.py --layers 12,48 --rounds 3

Exports are kept under --work-dir (default a temporary folder) and reused when
it is given again; a 48-layer model takes 1.7 GB there and about a minute to
export.
"""

import argparse
import importlib.util
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_benchmark_cpu():
    spec = importlib.util.spec_from_file_location(
        "benchmark_cpu", ROOT / "tools" / "benchmark-cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_measured(argv):
    """Runs argv; returns (wall seconds, peak RSS bytes of that process)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"benchmark-compile: {' '.join(map(str, argv))} failed "
                 f"({code}):\n{output.decode(errors='replace')}")
    return wall, usage.ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="12,48",
                        help="comma-separated layer counts (default 12,48)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", action="store_true",
                        help="also time one full compile (OUT/train built) per model")
    parser.add_argument("--build-dir", default="build",
                        help="the sharc build to run (default build)")
    parser.add_argument("--work-dir", help="keep the exports here and reuse them")
    args = parser.parse_args()
    layers = [int(n) for n in args.layers.split(",") if n]
    if not layers or min(layers) < 1 or args.rounds < 1:
        sys.exit("benchmark-compile: --layers needs positive counts, --rounds >= 1")
    sharc = (ROOT / args.build_dir / "bin" / "sharc").resolve()
    if not sharc.exists():
        sys.exit(f"benchmark-compile: {sharc} does not exist (build sharc first)")
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="sharc-compile-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    bench = load_benchmark_cpu()

    models = {}
    for n in layers:
        folder = work / f"gpt-l{n}"
        onnx_path = folder / "gpt.onnx"
        count_file = folder / "parameters.txt"
        if not (onnx_path.exists() and count_file.exists()):
            print(f"exporting {n} layers to {onnx_path} ...", flush=True)
            spec = types.SimpleNamespace(
                model="gpt", vocab=args.vocab, seq=args.seq, dim=args.dim,
                heads=args.heads, layers=n, batch=1, seed=0, threads=os.cpu_count(),
                work_dir=str(folder), world_size=1)
            _, onnx_path, _, n_params = bench.prepare(spec)
            count_file.write_text(f"{n_params}\n")
        models[n] = (onnx_path, int(count_file.read_text()))

    times = {n: [] for n in layers}
    peaks = {n: [] for n in layers}
    for r in range(args.rounds):
        for n in layers:
            out = work / f"out-l{n}"
            shutil.rmtree(out, ignore_errors=True)
            wall, peak = run_measured([sharc, "compile", models[n][0], "--optimizer",
                                       "adamw", "--emit-only", "-o", out])
            times[n].append(wall)
            peaks[n].append(peak)
            print(f"round {r + 1}: {n} layers {wall:.2f} s, peak RSS "
                  f"{peak / 2**20:.0f} MiB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    builds = {}
    if args.build:
        for n in layers:
            out = work / f"out-l{n}"
            shutil.rmtree(out, ignore_errors=True)
            builds[n] = run_measured([sharc, "compile", models[n][0], "--optimizer",
                                      "adamw", "-o", out])
            shutil.rmtree(out, ignore_errors=True)

    print()
    print(f"sharc {sharc}; GPT d {args.dim}, {args.heads} heads, T {args.seq}, "
          f"vocab {args.vocab}; `sharc compile --optimizer adamw --emit-only`, "
          f"{args.rounds} rounds; {os.cpu_count()} cores")
    print("| layers | parameters | parameter MB | ONNX MB | median s | min s | "
          "peak RSS MB (max) | peak / parameter bytes |"
          + (" full build s | build peak MB |" if args.build else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.build else ""))
    for n in layers:
        onnx_path, n_params = models[n]
        param_bytes = 4 * n_params
        peak = max(peaks[n])
        row = (f"| {n} | {n_params / 1e6:.1f} M | {param_bytes / 1e6:.0f} | "
               f"{onnx_path.stat().st_size / 1e6:.0f} | "
               f"{statistics.median(times[n]):.2f} | {min(times[n]):.2f} | "
               f"{peak / 1e6:.0f} | {peak / param_bytes:.2f} |")
        if args.build:
            row += f" {builds[n][0]:.1f} | {builds[n][1] / 1e6:.0f} |"
        print(row)
    base = layers[0]
    for n in layers[1:]:
        print(f"{n} layers / {base} layers: median time "
              f"{statistics.median(times[n]) / statistics.median(times[base]):.2f}x, "
              f"parameters {models[n][1] / models[base][1]:.2f}x")


if __name__ == "__main__":
    main()
