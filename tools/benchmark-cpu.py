#!/usr/bin/env python3
"""Benchmark: sharc's compiled CPU training binary against PyTorch eager.

A benchmark, not a test: it checks nothing and only prints numbers.  For one
model of test/e2e/models.py (built with the given sizes, weights perturbed as
in make_training_case so that the ONNX initializers are exactly the
parameters), it

  1. exports the loss-returning module to ONNX and writes random data
     (ROWS = 4 x batch rows of every input) as .npy files;
  2. runs `sharc compile MODEL.onnx --optimizer adamw ...` and then
     `mpirun --bind-to none -np 1 OUT/train` (the rank may use every core, as
     PyTorch does) for WARMUP + STEPS steps under /usr/bin/time -v,
     with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = T;
  3. runs the same fp32 AdamW step in PyTorch eager on the CPU (forward loss,
     backward, torch.optim.AdamW.step, zero_grad) in a separate Python
     subprocess with torch.set_num_threads(T), on the same data rows in the
     same order, for WARMUP + STEPS steps;

(with --precision bf16: `sharc compile --precision bf16`, bf16 compute with fp32 master
weights, against the same step under torch.autocast('cpu', torch.bfloat16), PyTorch's bf16 recipe with fp32
parameters); repeats 2 and 3 ROUNDS times alternately (the machine's speed drifts), and
prints each round's medians, then the mean, median and minimum step time over
the STEPS steps after warm-up of all rounds (on a loaded machine the median is the number to trust), the peak
resident set size of each process, sharc's planned bytes (arena + parameters
+ optimizer state + inputs, from OUT/manifest.json) and PyTorch's
parameter + gradient + optimizer-state tensor bytes.

    tools/benchmark-cpu.py --model gpt --dim 128 --layers 4 --seq 64 \\
        --batch 8 --vocab 512 --steps 20 --threads 2

Results go in docs/performance.md.
"""

import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "test" / "e2e"))

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+) ms (\S+)", re.MULTILINE)
ARENA_LINE = re.compile(r"^summary: arena bytes planned (\d+) measured (\d+)",
                        re.MULTILINE)
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare sharc's compiled CPU training binary with "
                    "PyTorch eager (fp32 AdamW step).")
    parser.add_argument("--model", choices=("gpt", "mlp", "bert"), default="gpt")
    parser.add_argument("--steps", type=int, default=20,
                        help="timed steps after warm-up (default 20)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first (default 3)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run sharc and PyTorch alternately this many times "
                             "(default 3): a shared machine's speed drifts, so "
                             "each ratio compares runs made back to back")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="CPU threads for both (default: all cores)")
    parser.add_argument("--build-dir", default="build",
                        help="sharc build directory with bin/sharc (default build)")
    parser.add_argument("--dim", type=int, default=128, help="hidden size (gpt, bert; mlp hidden)")
    parser.add_argument("--layers", type=int, default=4, help="blocks (gpt, bert)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (gpt, bert)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length (gpt, bert)")
    parser.add_argument("--batch", type=int, default=8, help="micro-batch rows")
    parser.add_argument("--vocab", type=int, default=512, help="vocabulary (gpt, bert)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: sharc compile --precision bf16 (bf16 compute, "
                             "fp32 master weights) against PyTorch under "
                             "torch.autocast('cpu', torch.bfloat16) with fp32 "
                             "parameters")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", help="keep files here (default: a temporary folder)")
    parser.add_argument("--torch-worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --------------------------------------------------------------------------
# The model (both sides build it the same way)
# --------------------------------------------------------------------------


def build_case(args):
    """models.Case for args.model with the requested sizes; mirrors
    models.make_case + make_training_case (seed, seed+1 data, seed+2 noise)."""
    import torch
    import models

    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed + 1)
    if args.model == "gpt":
        config = models.GptConfig(vocab=args.vocab, seq=args.seq, dim=args.dim,
                                  heads=args.heads, layers=args.layers,
                                  batch=args.batch)
        module, opset = models.GptLoss(config), 17
    elif args.model == "bert":
        config = models.BertConfig(vocab=args.vocab, seq=args.seq, dim=args.dim,
                                   heads=args.heads, layers=args.layers,
                                   batch=args.batch)
        module, opset = models.BertLoss(config), 13
    else:
        config = None
        module, opset = models.MlpLoss(), 17
        module.model = models.Mlp(features=16, hidden=args.dim, classes=10)
    inputs = models.make_inputs(args.model, args.batch, generator, config)
    module.eval()
    noise = torch.Generator().manual_seed(args.seed + 2)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=noise))
    return models.Case(args.model, module, inputs, opset), config


def config_of(args):
    return {k: getattr(args, k) for k in (
        "model", "dim", "layers", "heads", "seq", "batch", "vocab", "lr",
        "weight_decay", "seed", "steps", "warmup", "threads")}


# --------------------------------------------------------------------------
# PyTorch side (runs in its own process so that its RSS is its own)
# --------------------------------------------------------------------------


def torch_worker(spec_path):
    spec = json.loads(pathlib.Path(spec_path).read_text())
    args = argparse.Namespace(**spec["args"])
    rss_start_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    rss_import_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    case, _ = build_case(args)
    module = case.module
    data = [torch.from_numpy(np.load(spec["inputs"][name])) for name in case.inputs]
    rows = data[0].shape[0]
    optimizer = torch.optim.AdamW(module.parameters(), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=args.weight_decay)
    total = args.warmup + args.steps
    times, losses = [], []
    for step in range(total):
        # Same rows as the binary: step k takes rows k*B .. k*B+B-1 modulo R.
        index = torch.arange(step * args.batch, (step + 1) * args.batch) % rows
        batch = [tensor[index] for tensor in data]
        start = time.perf_counter()
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = module(*batch)
        else:
            loss = module(*batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - start) * 1e3)
        losses.append(float(loss))
    # Tensor bytes held at the end of a step (gradients are freed by
    # zero_grad, so count them as one more copy of the parameters).
    param_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    state_bytes = sum(t.numel() * t.element_size()
                      for state in optimizer.state.values()
                      for t in state.values() if torch.is_tensor(t))
    result = {
        "step_ms": times, "losses": losses,
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_start_kb": rss_start_kb, "rss_after_import_kb": rss_import_kb,
        "param_bytes": param_bytes, "grad_bytes": param_bytes,
        "state_bytes": state_bytes, "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    pathlib.Path(spec["result"]).write_text(json.dumps(result))


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def thread_env(threads):
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    return env


def run_checked(command, env=None, what=""):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"benchmark-cpu: {what} failed (status {result.returncode}):\n"
                 f"$ {' '.join(map(str, command))}\n{result.stdout}{result.stderr}")
    return result


def compile_sharc(args, work, onnx_path):
    """Compiles the model once; returns (OUT directory, seconds)."""
    sharc = (REPO / args.build_dir / "bin" / "sharc").resolve()
    if not sharc.is_file():
        sys.exit(f"benchmark-cpu: {sharc} not found; build sharc first")
    out = work / "out"
    start = time.perf_counter()
    run_checked([sharc, "compile", onnx_path, "--optimizer", "adamw",
                 "--lr", repr(args.lr), "--weight-decay", repr(args.weight_decay),
                 "--precision", args.precision, "-o", out],
                what="sharc compile")
    return out, time.perf_counter() - start


def run_sharc(args, out, compile_s, input_files):
    manifest = json.loads((out / "manifest.json").read_text())

    launcher = shutil.which("mpirun")
    if not launcher:
        sys.exit("benchmark-cpu: mpirun not found")
    timer = "/usr/bin/time"
    use_timer = os.access(timer, os.X_OK)
    command = [launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "1",
               "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS",
               "-x", "MKL_NUM_THREADS"]
    if use_timer:
        command += [timer, "-v"]
    command += [out / "train"]
    for name, path in input_files.items():
        command += ["--input", f"{name}={path}"]
    command += ["--steps", str(args.warmup + args.steps), "--log-every", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = run_checked(list(map(str, command)), env=thread_env(args.threads),
                         what="the compiled binary")
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    steps = [(int(k), float(loss), float(ms))
             for k, loss, _, ms in STEP_LINE.findall(result.stdout)]
    match = MAX_RSS.search(result.stderr + result.stdout)
    if match:
        max_rss_kb, rss_source = int(match.group(1)), "/usr/bin/time -v"
    else:
        # Largest child of this process so far (mpirun or the binary).
        max_rss_kb, rss_source = max(children, before), "getrusage(CHILDREN)"
    arena = ARENA_LINE.search(result.stdout)
    input_bytes = sum(b["bytes"] for b in manifest["buffers"] if b["role"] == "input")
    return {
        "compile_s": compile_s,
        "step_ms": [ms for _, _, ms in steps],
        "losses": [loss for _, loss, _ in steps],
        "max_rss_kb": max_rss_kb, "rss_source": rss_source,
        "arena_planned": manifest["arena_bytes"],
        "arena_measured": int(arena.group(2)) if arena else None,
        "param_bytes": manifest["parameter_bytes"],
        "state_bytes": manifest["optimizer_state_bytes"],
        "grad_bytes": manifest["gradient_bytes"],
        "input_bytes": input_bytes,
        "gemm_calls": manifest.get("gemm_calls_per_step"),
        "kernels": manifest.get("kernels"),
    }


def run_torch(args, work, input_files):
    spec = {"args": vars(args) | {"torch_worker": None},
            "inputs": {k: str(v) for k, v in input_files.items()},
            "result": str(work / "torch-result.json")}
    spec_path = work / "torch-spec.json"
    spec_path.write_text(json.dumps(spec))
    env = thread_env(args.threads)
    run_checked([sys.executable, str(pathlib.Path(__file__).resolve()),
                 "--torch-worker", str(spec_path)], env=env,
                what="the PyTorch run")
    return json.loads((work / "torch-result.json").read_text())


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def median(values):
    values = sorted(values)
    if not values:
        return float("nan")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def mib(nbytes):
    return nbytes / (1 << 20)


def main():
    args = parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker)
        return
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.rounds < 1:
        sys.exit("benchmark-cpu: --steps, --threads and --rounds must be >= 1, "
                 "--warmup >= 0")
    os.environ.update({k: v for k, v in thread_env(args.threads).items()
                       if k.endswith("_NUM_THREADS")})
    import numpy as np
    import torch
    import models

    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="sharc-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    case, config = build_case(args)
    onnx_path = work / f"{args.model}.onnx"
    models.export(case, onnx_path)
    rows = 4 * args.batch
    data = models.make_inputs(args.model, rows,
                              torch.Generator().manual_seed(args.seed + 11), config)
    input_files = {}
    for name, tensor in data.items():
        input_files[name] = work / f"{name}.npy"
        np.save(input_files[name], tensor.numpy())
    n_params = sum(p.numel() for p in case.module.parameters())
    del case

    out, compile_s = compile_sharc(args, work, onnx_path)
    w = args.warmup
    s_ms, t_ms, round_lines = [], [], []
    for r in range(args.rounds):
        sharc = run_sharc(args, out, compile_s, input_files)
        pt = run_torch(args, work, input_files)
        s_round, t_round = sharc["step_ms"][w:], pt["step_ms"][w:]
        s_ms += s_round
        t_ms += t_round
        round_lines.append((median(s_round), median(t_round)))
        print(f"round {r + 1}: median step ms sharc {median(s_round):.2f} "
              f"torch {median(t_round):.2f} (torch/sharc "
              f"{median(t_round) / median(s_round):.2f})", flush=True)
    print()
    s_mean, t_mean = mean(s_ms), mean(t_ms)
    s_rss, t_rss = sharc["max_rss_kb"] * 1024, pt["max_rss_kb"] * 1024
    s_planned = (sharc["arena_planned"] + sharc["param_bytes"]
                 + sharc["state_bytes"] + sharc["input_bytes"])
    t_tensors = pt["param_bytes"] + pt["grad_bytes"] + pt["state_bytes"]

    sizes = (f"dim {args.dim}, layers {args.layers}, heads {args.heads}, "
             f"seq {args.seq}, vocab {args.vocab}, " if args.model != "mlp"
             else f"hidden {args.dim}, ")
    print(f"precision {args.precision}")
    print(f"model {args.model}: {sizes}batch {args.batch}; {n_params} parameters; "
          f"fp32 AdamW lr {args.lr} weight decay {args.weight_decay}")
    print(f"threads {args.threads}; {args.steps} timed steps after {w} warm-up; "
          f"torch {pt['torch']} ({pt['threads']} threads); work dir {work}")
    print(f"sharc compile {sharc['compile_s']:.1f} s; {sharc['kernels']} kernels, "
          f"{sharc['gemm_calls']} GEMM calls per step")
    print()
    rows_out = [
        ("step ms (mean)", f"{s_mean:.2f}", f"{t_mean:.2f}", t_mean / s_mean),
        ("step ms (median)", f"{median(s_ms):.2f}", f"{median(t_ms):.2f}",
         median(t_ms) / median(s_ms)),
        ("step ms (min)", f"{min(s_ms):.2f}", f"{min(t_ms):.2f}",
         min(t_ms) / min(s_ms)),
        ("peak RSS MiB", f"{mib(s_rss):.1f}", f"{mib(t_rss):.1f}", t_rss / s_rss),
        ("tensor MiB", f"{mib(s_planned):.1f}", f"{mib(t_tensors):.1f}",
         t_tensors / s_planned),
    ]
    print(f"{'':18} {'sharc':>10} {'torch':>10} {'torch/sharc':>12}")
    for label, a, b, ratio in rows_out:
        print(f"{label:18} {a:>10} {b:>10} {ratio:>12.2f}")
    ratios = [t / s for s, t in round_lines]
    print(f"torch/sharc of the rounds' medians: "
          + ", ".join(f"{x:.2f}" for x in ratios)
          + f" (median {median(ratios):.2f}); step times pooled over "
          f"{args.rounds} round(s)")
    print()
    print(f"sharc tensor bytes: arena {sharc['arena_planned']} planned "
          f"({sharc['arena_measured']} measured, holds activations and gradients) "
          f"+ parameters {sharc['param_bytes']} + optimizer state "
          f"{sharc['state_bytes']} + inputs {sharc['input_bytes']}; "
          f"peak RSS by {sharc['rss_source']}")
    print(f"torch tensor bytes: parameters {pt['param_bytes']} + gradients "
          f"{pt['grad_bytes']} + optimizer state {pt['state_bytes']} "
          f"(activations not counted); RSS after `import torch` "
          f"{mib(pt['rss_after_import_kb'] * 1024):.1f} MiB")
    last = args.warmup + args.steps
    print(f"loss at step 1: sharc {sharc['losses'][0]:.6f} torch {pt['losses'][0]:.6f}; "
          f"at step {last}: sharc {sharc['losses'][-1]:.6f} "
          f"torch {pt['losses'][-1]:.6f}")


if __name__ == "__main__":
    main()
