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
  3. runs the same fp32 AdamW step in PyTorch on the CPU (forward loss,
     backward, torch.optim.AdamW.step, zero_grad) in a separate Python
     subprocess with torch.set_num_threads(T), on the same data rows in the
     same order, for WARMUP + STEPS steps, once per variant of
     --torch-variants (default all three): `eager` (AdamW's default
     multi-tensor update), `fused` (AdamW(fused=True), its fused kernel) and
     `compile` (the module under torch.compile, inductor's generated C++,
     with the fused AdamW; its compilation happens in the warm-up steps);

(with --precision bf16: `sharc compile --precision bf16`, bf16 compute with fp32 master
weights, against the same step under torch.autocast('cpu', torch.bfloat16), PyTorch's bf16 recipe with fp32
parameters); repeats 2 and 3 ROUNDS times alternately (the machine's speed drifts), and
prints the BLAS library the binary links and its kernels (OpenBLAS's core), and
prints each round's medians, then the mean, median and minimum step time over
the STEPS steps after warm-up of all rounds (on a loaded machine the median is the number to trust), the peak
resident set size of each process, sharc's planned bytes (arena + parameters
+ optimizer state + inputs, from OUT/manifest.json) and PyTorch's
parameter + gradient + optimizer-state tensor bytes.

    tools/benchmark-cpu.py --model gpt --dim 128 --layers 4 --seq 64 \\
        --batch 8 --vocab 512 --steps 20 --threads 2

With --compare-stages [LIST] (no PyTorch run) it compiles the model once per
ZeRO stage of LIST (default 0,1,2,3) and world size of --world-sizes (default
1,2,4; stages above 0 only from 2 ranks), passing --compile-flags to every
configuration and --zero-flags to the stages above 0, runs every binary under `mpirun -np N` ROUNDS times alternately and
prints one table: per rank, the median step time, the peak memory the binary
prints as planned (persistent buffers + arena + communication staging) and
measured (rank 0's peak resident set, getrusage), the measured saving against
stage 0 at the same N, the planned arena and gathered-parameter peak, and the
collective bytes per step planned and counted by the runtime.  Its default
size is the GPT of the ZeRO memory test (dim 512, seq 64; pass --layers 6
--heads 8 --vocab 8192 --batch 1 for exactly that model):

    tools/benchmark-cpu.py --compare-stages --layers 6 --heads 8 \\
        --vocab 8192 --batch 1 --threads 1 \\
        --compile-flags "--reduce-bucket-size 5000000" \\
        --zero-flags "--max-reuse-distance 0"

With --compare-recompute [FRACTIONS] (no PyTorch run) it compiles the model
with --recompute none, layers, and auto at a limit each FRACTION (default
0.5,0) of the way from the least activation memory recomputation reaches to
none's (both asked of sharc compile first), runs the binaries alternately
ROUNDS times and prints per rank the median step time, the planned and
measured peak memory, the arena, the segments recomputed and their GFLOP
(docs/recompute.md):

    tools/benchmark-cpu.py --compare-recompute --dim 512 --layers 6 \
        --heads 8 --vocab 8192 --seq 256 --batch 2 --steps 3 --threads 2

With --compare-precisions (no PyTorch run) it instead compiles the same model
once per precision (`sharc compile --precision fp32|bf16|fp16 --world-size N`,
default all three), runs the binaries alternately ROUNDS times under
`mpirun -np N` (N = --world-size, default 1; every rank runs the same program
on its own micro-batch, so each rank's figures are the same) and prints one
table of per-rank memory and step time, with the ratios bf16/fp32 and
fp16/fp32.  Its default size (GPT, dim 256, 4 layers, 4 heads, seq 256,
batch 8, vocab 512; 10 timed steps after 2 warm-up) is one where activations
dominate memory.  The figures, per rank:

  planned (OUT/manifest.json, the same figures as `sharc compile --report`):
    parameters       the fp32 master weights (parameter_bytes);
    optimizer state  AdamW's moments and step (and fp16's loss-scaler state)
                     (optimizer_state_bytes);
    arena            the planned peak of the one static arena
                     (arena_bytes): activations and temporaries, and also the
                     fp32 gradients and the 16-bit compute copies of the
                     parameters, which live in the arena; so
    gradients, 16-bit compute copies
                     (gradient_bytes, compute_copy_bytes) are shown as parts
                     of the arena, not added to the total;
    inputs/outputs   the other persistent buffers of the manifest;
    total            parameters + optimizer state + arena + inputs/outputs.
  measured (by the running binary and the OS, not taken from the plan):
    arena            `summary: arena bytes planned P measured M`: the
                     runtime (runtime/TrainMain.cpp) fills the planned P
                     bytes and a 64 KiB guard after them with a sentinel
                     byte (0xA5) before step 1 and, after step 1, scans for
                     the highest byte that no longer holds it (a write past
                     the plan shows, and is an error).  It is the highest
                     byte written, not the peak of bytes live at once;
    RSS in steps     the largest VmRSS of each rank's process
                     (/proc/PID/status), sampled every 20 ms from the line
                     of step 2 on (while steps 3.. run); this includes the
                     whole planned arena (the sentinel fill touched every
                     page of it), code, MPI and BLAS, the input staging
                     buffers and any heap memory the runtime allocates
                     outside the plan (e.g. for GEMM operands);
    peak RSS         "Maximum resident set size" of /usr/bin/time -v around
                     each rank (the binary's own `summary: peak memory
                     bytes per rank` reads the same figure, getrusage).
                     Before commit 078bc91 it included a host copy of the
                     whole arena that the sentinel scan made after step 1.
  step ms: the binary's own per-step times (the `ms` field of its step
  lines), pooled over the timed steps of every round: median and minimum,
  and the median of each round.

    tools/benchmark-cpu.py --compare-precisions --threads 2 --rounds 3
    tools/benchmark-cpu.py --compare-precisions --world-size 2 --threads 1

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
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "test" / "e2e"))

# fp16 programs add ` scale S` after the learning rate and ` skipped` at the
# end of a step whose gradients overflowed.
STEP_LINE = re.compile(r"^step (?P<step>\d+) loss (?P<loss>\S+) lr (?P<lr>\S+)"
                       r"(?: scale (?P<scale>\S+))? ms (?P<ms>\S+)"
                       r"(?: (?:tokens|samples)/s \S+)?(?P<skipped> skipped)?$", re.MULTILINE)
SKIPPED_LINE = re.compile(r"^summary: skipped steps (\d+)", re.MULTILINE)
COLLECTIVE_LINE = re.compile(
    r"^summary: collective bytes per step planned (\d+) measured (\S+)", re.MULTILINE)
ARENA_LINE = re.compile(r"^summary: arena bytes planned (\d+) measured (\d+)",
                        re.MULTILINE)
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")
PEAK_LINE = re.compile(r"^summary: peak memory bytes per rank planned (\d+) "
                       r"measured (\d+)", re.MULTILINE)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare sharc's compiled CPU training binary with "
                    "PyTorch eager (fp32 AdamW step), or (--compare-precisions) "
                    "its fp32, bf16 and fp16 binaries with each other.")
    parser.add_argument("--model", choices=("gpt", "mlp", "bert"), default="gpt")
    parser.add_argument("--steps", type=int,
                        help="timed steps after warm-up (default 20; "
                             "--compare-precisions: 10)")
    parser.add_argument("--warmup", type=int,
                        help="untimed steps first (default 3; "
                             "--compare-precisions: 2)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run sharc and PyTorch alternately this many times "
                             "(default 3): a shared machine's speed drifts, so "
                             "each ratio compares runs made back to back")
    parser.add_argument("--torch-variants", default="eager,fused,compile",
                        metavar="LIST",
                        help="PyTorch variants to run (eager, fused, compile; "
                             "default all three): eager AdamW, "
                             "AdamW(fused=True), and torch.compile of the "
                             "module with the fused AdamW")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="CPU threads for both (default: all cores)")
    parser.add_argument("--build-dir", default="build",
                        help="sharc build directory with bin/sharc (default build)")
    parser.add_argument("--dim", type=int,
                        help="hidden size (gpt, bert; mlp hidden) (default 128; "
                             "--compare-precisions: 256)")
    parser.add_argument("--layers", type=int, default=4, help="blocks (gpt, bert)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (gpt, bert)")
    parser.add_argument("--seq", type=int,
                        help="sequence length (gpt, bert) (default 64; "
                             "--compare-precisions: 256)")
    parser.add_argument("--batch", type=int, default=8,
                        help="micro-batch rows (per rank)")
    parser.add_argument("--vocab", type=int, default=512, help="vocabulary (gpt, bert)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--precision", choices=("fp32", "bf16"),
                        help="bf16: sharc compile --precision bf16 (bf16 compute, "
                             "fp32 master weights) against PyTorch under "
                             "torch.autocast('cpu', torch.bfloat16) with fp32 "
                             "parameters (default fp32)")
    parser.add_argument("--compare-precisions", nargs="?", metavar="LIST",
                        const="fp32,bf16,fp16",
                        help="instead of the PyTorch comparison: compile the "
                             "model once per precision of LIST (default "
                             "fp32,bf16,fp16), run the binaries alternately and "
                             "print per-rank planned and measured memory and "
                             "step time, with the ratios to fp32")
    parser.add_argument("--world-size", type=int, default=1,
                        help="--compare-precisions: data-parallel ranks "
                             "(sharc compile --world-size N, mpirun -np N; "
                             "default 1)")
    parser.add_argument("--compare-stages", nargs="?", metavar="LIST",
                        const="0,1,2,3",
                        help="instead of the PyTorch comparison: compile the "
                             "model once per ZeRO stage of LIST (default "
                             "0,1,2,3) and world size of --world-sizes, run "
                             "the binaries alternately and print per-rank "
                             "step time, planned and measured peak memory and "
                             "collective bytes")
    parser.add_argument("--world-sizes", default="1,2,4", metavar="LIST",
                        help="--compare-stages: the world sizes (default "
                             "1,2,4; ZeRO stages above 0 need 2 or more)")
    parser.add_argument("--compile-flags", default="", metavar="FLAGS",
                        help="--compare-stages: extra sharc compile flags for "
                             "every configuration, e.g. '--reduce-bucket-size "
                             "5000000'")
    parser.add_argument("--zero-flags", default="", metavar="FLAGS",
                        help="--compare-stages: extra sharc compile flags for "
                             "the stages above 0, e.g. '--max-reuse-distance 0'")
    parser.add_argument("--compare-recompute", nargs="?", metavar="FRACTIONS",
                        const="0.5,0",
                        help="instead of the PyTorch comparison: compile the "
                             "model with --recompute none, layers, and auto "
                             "with a limit each FRACTION (default 0.5,0) of "
                             "the way from the least activation memory "
                             "recomputation reaches to none's; run the "
                             "binaries "
                             "alternately and print per-rank step time, "
                             "planned and measured peak memory and the "
                             "recomputed FLOPs")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", help="keep files here (default: a temporary folder)")
    parser.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torch_worker:
        return args
    compare = args.compare_precisions is not None
    if args.compare_recompute is not None:
        if compare or args.compare_stages is not None:
            parser.error("--compare-recompute is a run of its own")
        try:
            args.compare_recompute = [float(x) for x in
                                      args.compare_recompute.split(",")]
        except ValueError:
            parser.error("--compare-recompute takes comma-separated fractions")
        if not all(0 <= f < 1 for f in args.compare_recompute):
            parser.error("--compare-recompute: fractions in [0, 1)")
        for name, value in {"dim": 512, "seq": 256, "steps": 4,
                            "warmup": 1}.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        if args.precision is None:
            args.precision = "fp32"
        if args.world_size < 1:
            parser.error("--world-size must be >= 1")
        return args
    if args.compare_stages is not None:
        if compare:
            parser.error("--compare-stages and --compare-precisions are "
                         "separate runs")
        try:
            args.compare_stages = [int(x) for x in args.compare_stages.split(",")]
            args.world_sizes = [int(x) for x in args.world_sizes.split(",")]
        except ValueError:
            parser.error("--compare-stages and --world-sizes take "
                         "comma-separated integers")
        if not all(0 <= z <= 3 for z in args.compare_stages) or \
                not all(n >= 1 for n in args.world_sizes):
            parser.error("--compare-stages: stages 0 to 3; --world-sizes: "
                         "at least 1")
        for name, value in {"dim": 512, "seq": 64, "steps": 4,
                            "warmup": 1}.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        args.world_size = max(args.world_sizes)
        if args.precision is None:
            args.precision = "fp32"
        return args
    defaults = ({"dim": 256, "seq": 256, "steps": 10, "warmup": 2} if compare
                else {"dim": 128, "seq": 64, "steps": 20, "warmup": 3})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if compare:
        if args.precision is not None:
            parser.error("--precision is the PyTorch comparison's; "
                         "--compare-precisions takes a LIST")
        precisions = [p.strip() for p in args.compare_precisions.split(",") if p.strip()]
        bad = [p for p in precisions if p not in ("fp32", "bf16", "fp16")]
        if bad or not precisions or len(set(precisions)) != len(precisions):
            parser.error("--compare-precisions: a comma-separated list of "
                         "distinct fp32, bf16, fp16")
        args.compare_precisions = precisions
        if args.world_size < 1:
            parser.error("--world-size must be >= 1")
    else:
        if args.world_size != 1:
            parser.error("--world-size is for --compare-precisions (the "
                         "PyTorch comparison runs one process)")
        if args.precision is None:
            args.precision = "fp32"
    return args


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
    variant = spec["variant"]
    data = [torch.from_numpy(np.load(spec["inputs"][name])) for name in case.inputs]
    rows = data[0].shape[0]
    optimizer = torch.optim.AdamW(module.parameters(), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=args.weight_decay,
                                  fused=variant in ("fused", "compile"))
    step_module = torch.compile(module) if variant == "compile" else module
    total = args.warmup + args.steps
    times, losses = [], []
    for step in range(total):
        # Same rows as the binary: step k takes rows k*B .. k*B+B-1 modulo R.
        index = torch.arange(step * args.batch, (step + 1) * args.batch) % rows
        batch = [tensor[index] for tensor in data]
        start = time.perf_counter()
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = step_module(*batch)
        else:
            loss = step_module(*batch)
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
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
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


def sharc_binary(args):
    sharc = (REPO / args.build_dir / "bin" / "sharc").resolve()
    if not sharc.is_file():
        sys.exit(f"benchmark-cpu: {sharc} not found; build sharc first")
    return sharc


def compile_sharc(args, work, onnx_path, precision=None, world_size=1,
                  name="out", extra=(), stderr=None):
    """Compiles the model once (into WORK/NAME, with the sharc compile flags
    EXTRA); returns (OUT directory, seconds), appending what sharc printed on
    stderr to the list STDERR if given."""
    sharc = sharc_binary(args)
    out = (work / name).resolve()
    start = time.perf_counter()
    command = [sharc, "compile", onnx_path, "--optimizer", "adamw",
               "--lr", repr(args.lr), "--weight-decay", repr(args.weight_decay),
               "--precision", precision or args.precision, "-o", out]
    if world_size != 1:
        command += ["--world-size", str(world_size)]
    command += list(extra)
    result = run_checked(command, what="sharc compile")
    if stderr is not None:
        stderr.append(result.stderr)
    return out, time.perf_counter() - start


def rank_pids(binary):
    """Processes whose argv[0] is `binary` (the ranks of one mpirun job; the
    /usr/bin/time wrapped around each has its own argv[0])."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if argv0 == os.fsencode(binary):
            pids.append(int(entry.name))
    return pids


def vm_rss_kb(pid):
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class RssSampler:
    """Largest VmRSS of each process running `binary`, sampled every
    `period` seconds once start() is called (from a thread of its own)."""

    def __init__(self, binary, expected, period=0.02):
        self.binary, self.expected, self.period = str(binary), expected, period
        self.max_kb = {}
        self.pids = []
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def start(self):
        self.started.set()

    def stop(self):
        self.stopped.set()
        self.started.set()
        self.thread.join()

    def _loop(self):
        self.started.wait()
        while not self.stopped.is_set():
            if len(self.pids) < self.expected:
                self.pids = rank_pids(self.binary)
            for pid in self.pids:
                kb = vm_rss_kb(pid)
                if kb is not None:
                    self.max_kb[pid] = max(self.max_kb.get(pid, 0), kb)
            self.stopped.wait(self.period)


def run_sampled(command, env, binary, ranks, what):
    """Runs `command`, sampling the VmRSS of its `ranks` processes running
    `binary` from the line of step 2 on; returns (stdout, stderr, per-rank
    largest VmRSS in KiB, sorted by pid)."""
    with tempfile.TemporaryFile(mode="w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                   stderr=errors, text=True, env=env)
        sampler = RssSampler(binary, ranks)
        lines = []
        try:
            for line in process.stdout:
                lines.append(line)
                # From the line of step 2 on: every rank has then left
                # step 1 and the arena scan after it (rank 0 prints).
                match = STEP_LINE.match(line.rstrip("\n"))
                if match and int(match["step"]) >= 2:
                    sampler.start()
            status = process.wait()
        finally:
            sampler.stop()
        errors.seek(0)
        stderr = errors.read()
    stdout = "".join(lines)
    if status != 0:
        sys.exit(f"benchmark-cpu: {what} failed (status {status}):\n"
                 f"$ {' '.join(map(str, command))}\n{stdout}{stderr}")
    return stdout, stderr, [sampler.max_kb[pid] for pid in sorted(sampler.max_kb)]


def run_sharc(args, out, compile_s, input_files, world_size=1, sample_rss=False):
    manifest = json.loads((out / "manifest.json").read_text())

    launcher = shutil.which("mpirun")
    if not launcher:
        sys.exit("benchmark-cpu: mpirun not found")
    timer = "/usr/bin/time"
    use_timer = os.access(timer, os.X_OK)
    command = [launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(world_size),
               "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS",
               "-x", "MKL_NUM_THREADS"]
    if use_timer:
        command += [timer, "-v"]
    command += [out / "train"]
    for name, path in input_files.items():
        command += ["--input", f"{name}={path}"]
    command += ["--steps", str(args.warmup + args.steps), "--log-every", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if sample_rss:
        stdout, stderr, step_rss_kb = run_sampled(
            list(map(str, command)), thread_env(args.threads), out / "train",
            world_size, "the compiled binary")
    else:
        result = run_checked(list(map(str, command)), env=thread_env(args.threads),
                             what="the compiled binary")
        stdout, stderr, step_rss_kb = result.stdout, result.stderr, []
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = list(STEP_LINE.finditer(stdout))
    steps = [(int(m["step"]), float(m["loss"]), float(m["ms"])) for m in lines]
    rank_rss_kb = [int(kb) for kb in MAX_RSS.findall(stderr + stdout)]
    if rank_rss_kb:
        max_rss_kb, rss_source = max(rank_rss_kb), "/usr/bin/time -v"
    else:
        # Largest child of this process so far (mpirun or the binary).
        max_rss_kb, rss_source = max(children, before), "getrusage(CHILDREN)"
    arena = ARENA_LINE.search(stdout)
    peak = PEAK_LINE.search(stdout)
    skipped = SKIPPED_LINE.search(stdout)
    collective = COLLECTIVE_LINE.search(stdout)
    input_bytes = sum(b["bytes"] for b in manifest["buffers"] if b["role"] == "input")
    return {
        "manifest": manifest,
        "rank_rss_kb": rank_rss_kb, "step_rss_kb": step_rss_kb,
        "scales": [float(m["scale"]) for m in lines if m["scale"]],
        "skipped_lines": sum(1 for m in lines if m["skipped"]),
        "skipped": int(skipped.group(1)) if skipped else None,
        "collective_planned": int(collective.group(1)) if collective else None,
        "collective_measured": collective.group(2) if collective else None,
        "compile_s": compile_s,
        "step_ms": [ms for _, _, ms in steps],
        "losses": [loss for _, loss, _ in steps],
        "max_rss_kb": max_rss_kb, "rss_source": rss_source,
        "arena_planned": manifest["arena_bytes"],
        "arena_measured": int(arena.group(2)) if arena else None,
        "peak_planned": int(peak.group(1)) if peak else None,
        "peak_measured": int(peak.group(2)) if peak else None,
        "param_bytes": manifest["parameter_bytes"],
        "state_bytes": manifest["optimizer_state_bytes"],
        "grad_bytes": manifest["gradient_bytes"],
        "input_bytes": input_bytes,
        "gemm_calls": manifest.get("gemm_calls_per_step"),
        "kernels": manifest.get("kernels"),
    }


def run_torch(args, work, input_files, variant="eager"):
    result_path = work / f"torch-{variant}-result.json"
    spec = {"args": vars(args) | {"torch_worker": None},
            "variant": variant,
            "inputs": {k: str(v) for k, v in input_files.items()},
            "result": str(result_path)}
    spec_path = work / f"torch-{variant}-spec.json"
    spec_path.write_text(json.dumps(spec))
    env = thread_env(args.threads)
    run_checked([sys.executable, str(pathlib.Path(__file__).resolve()),
                 "--torch-worker", str(spec_path)], env=env,
                what=f"the PyTorch run ({variant})")
    return json.loads(result_path.read_text())


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


# --------------------------------------------------------------------------
# --compare-precisions: fp32 against bf16 and fp16, sharc only
# --------------------------------------------------------------------------


def build_info(args, binary):
    """What the binaries were built from: the sharc build's source tree (its
    commit and uncommitted changes, if it is a git checkout) and the BLAS
    library the binary links (with OpenBLAS's version and core)."""
    lines = []
    build = (REPO / args.build_dir).resolve()
    source = None
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        match = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$",
                          cache.read_text(errors="replace"), re.MULTILINE)
        source = pathlib.Path(match.group(1)) if match else None
    source = source or REPO
    git = ["git", "-C", str(source)]
    commit = subprocess.run(git + ["log", "-1", "--format=%h %cs"],
                            capture_output=True, text=True)
    if commit.returncode == 0:
        # What the compiler and the binaries are built from (the binaries
        # also include runtime/ headers from the sources when compiled).
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no",
                                      "--", "CMakeLists.txt", "cmake", "codegen",
                                      "frontends", "ir", "passes", "runtime",
                                      "tools/sharc"],
                               capture_output=True, text=True).stdout.split("\n")
        dirty = [line[3:] for line in dirty if line.strip()]
        lines.append(f"sharc {build}/bin/sharc, sources {source} at commit "
                     f"{commit.stdout.strip()}"
                     + (f", with uncommitted changes to {', '.join(dirty)}" if dirty
                        else ", no uncommitted changes"))
    else:
        lines.append(f"sharc {build}/bin/sharc, sources {source} (not a git checkout)")
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    blas = re.search(r"^\s*(\S*blas\S*) => (\S+)", ldd, re.MULTILINE | re.IGNORECASE)
    if blas:
        detail = ""
        try:
            import ctypes
            library = ctypes.CDLL(blas.group(2))
            library.openblas_get_config.restype = ctypes.c_char_p
            library.openblas_get_corename.restype = ctypes.c_char_p
            config = library.openblas_get_config().decode().split()
            detail = (f" ({' '.join(config[:2])}, core "
                      f"{library.openblas_get_corename().decode()})")
        except (OSError, AttributeError):
            pass
        lines.append(f"BLAS {blas.group(2)}{detail}")
    dnnl = re.search(r"^\s*(libdnnl\S*) => (\S+)", ldd, re.MULTILINE)
    if dnnl:
        # runtime/GemmBf16.h: oneDNN's bf16 kernels where the CPU has them.
        flags = set()
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
        native = bool({"avx512_bf16", "amx_bf16"} & flags) and \
            os.environ.get("SHARC_BF16_GEMM") != "widened"
        lines.append(f"bf16 GEMMs: {dnnl.group(2)}, " +
                     ("on the CPU's bf16 instructions" if native
                      else "widened to f32 (sgemm)"))
    return lines


def model_line(args, n_params, precision=None):
    """The model, its sizes and the optimizer, for a table's header."""
    sizes = (f"dim {args.dim}, layers {args.layers}, heads {args.heads}, "
             f"seq {args.seq}, vocab {args.vocab}, " if args.model != "mlp"
             else f"hidden {args.dim}, ")
    return (f"model {args.model}: {sizes}micro-batch {args.batch} per rank; "
            f"{n_params} parameters ({mib(4 * n_params):.1f} MiB in fp32); "
            f"{precision + ' ' if precision else ''}AdamW lr {args.lr} "
            f"weight decay {args.weight_decay}")


def run_rounds(args, outs, input_files, ranks_of, label_of):
    """Runs every compiled configuration of OUTS ({config: (OUT, compile
    seconds)}) ROUNDS times alternately, each under mpirun -np
    RANKS_OF(config); returns {config: [run_sharc results]}."""
    runs = {config: [] for config in outs}
    expected = args.warmup + args.steps
    for r in range(args.rounds):
        for config, (out, seconds) in outs.items():
            result = run_sharc(args, out, seconds, input_files,
                               world_size=ranks_of(config))
            if len(result["step_ms"]) != expected:
                sys.exit(f"benchmark-cpu: {label_of(config)}: expected "
                         f"{expected} step lines, found "
                         f"{len(result['step_ms'])}")
            runs[config].append(result)
        print(f"round {r + 1} done", flush=True)
    return runs


def compare_stages(args, work, onnx_path, input_files, n_params):
    """One table of per-rank step time, peak memory (planned by the compiler
    and measured by the binary: getrusage's peak resident set) and collective
    bytes per step (planned, and counted by the runtime) for every world size
    and ZeRO stage."""
    configs = []
    for n in args.world_sizes:
        for stage in args.compare_stages:
            if stage == 0 or n > 1:
                configs.append((n, stage))
    common_flags, extra_flags = args.compile_flags.split(), args.zero_flags.split()
    outs = {}
    for n, stage in configs:
        extra = (["--zero-stage", str(stage)] + common_flags
                 + (extra_flags if stage else []))
        outs[(n, stage)] = compile_sharc(args, work, onnx_path, args.precision, n,
                                         name=f"out-np{n}-zero{stage}",
                                         extra=extra)
        print(f"compiled N = {n}, stage {stage} in "
              f"{outs[(n, stage)][1]:.1f} s", flush=True)
    info = build_info(args, outs[configs[0]][0] / "train")
    w = args.warmup
    runs = run_rounds(args, outs, input_files, lambda config: config[0],
                      lambda config: f"N = {config[0]}, stage {config[1]}")
    print()
    print(model_line(args, n_params, args.precision))
    print(f"{args.threads} thread(s) per rank; {args.steps} timed steps after "
          f"{w} warm-up, {args.rounds} round(s) of every configuration "
          f"alternately; compile flags {' '.join(common_flags) or '(none)'}, "
          f"for stages above 0 also {' '.join(extra_flags) or '(none)'}; "
          f"work dir {work}")
    for line in info:
        print(line)
    print()
    print(f"{'N':>3} {'stage':>5} {'step ms':>9} {'planned MiB':>12} "
          f"{'measured MiB':>13} {'saved vs 0':>11} {'arena MiB':>10} "
          f"{'gathered MiB':>13} {'comm MB/step':>13} {'counted':>9}")
    for n, stage in configs:
        results = runs[(n, stage)]
        last = results[-1]
        manifest = last["manifest"]
        ms = median([x for result in results for x in result["step_ms"][w:]])
        measured = max(result["peak_measured"] for result in results)
        base = runs.get((n, 0))
        saved = ""
        if base and stage:
            saved = f"{mib(max(b['peak_measured'] for b in base) - measured):.1f}"
        comm = last["collective_planned"]
        counted = last["collective_measured"]
        print(f"{n:>3} {stage:>5} {ms:>9.1f} {mib(last['peak_planned']):>12.1f} "
              f"{mib(measured):>13.1f} {saved:>11} "
              f"{mib(manifest['arena_bytes']):>10.1f} "
              f"{mib(manifest.get('gathered_parameter_peak_bytes', 0)):>13.1f} "
              f"{(comm or 0) / 1e6:>13.2f} "
              f"{'=' if str(comm) == str(counted) else counted or '-':>9}")
    print()
    print("planned: the persistent buffers, the arena and the communication "
          "staging (the binary's summary line); measured: peak resident set "
          "(getrusage) of rank 0, the largest over the rounds; saved: stage "
          "0's measured peak at the same N minus this one; comm: planned "
          "collective bytes per step and rank (nccl-tests convention), "
          "'=' when the runtime counted the same")


RECOMPUTE_REMARK = re.compile(
    r"sharc-rematerialize: (?:(?P<layers>\d+) layers found|(?P<chosen>\d+) of "
    r"(?P<segments>\d+) segments recomputed to fit \d+ bytes); backward "
    r"recomputes (?P<ops>\d+) forward ops \((?P<flops>\d+) FLOPs\)")
FLOOR_REMARK = re.compile(r"recomputing every one of the \d+ segments leaves "
                          r"(\d+) bytes")
WITHIN_REMARK = re.compile(r"sharc-rematerialize: activation memory (\d+) "
                           r"bytes is within")


def compare_recompute(args, work, onnx_path, input_files, n_params):
    """One table of per-rank step time, peak memory (planned and measured)
    and recomputed FLOPs for --recompute none, layers, and auto at fractions
    of the model's activation memory."""
    n = args.world_size
    common = args.compile_flags.split()
    # The activation memory without recomputation (what auto says when its
    # limit is above it) and with every segment recomputed (what it says
    # when the limit is below).
    def probe(limit):
        return subprocess.run(
            [sharc_binary(args), "compile", onnx_path, "--optimizer", "adamw",
             "--precision", args.precision, "--world-size", str(n), *common,
             "--recompute", "auto", "--activation-memory", str(limit),
             "--emit-only", "-o", work / "probe"],
            capture_output=True, text=True).stderr
    activation = int(WITHIN_REMARK.search(probe(10**15)).group(1))
    least = FLOOR_REMARK.search(probe(1))
    if not least:
        sys.exit("benchmark-cpu: sharc compile --recompute auto did not say "
                 "its least activation memory")
    floor = int(least.group(1))
    configs = [("none", []), ("layers", [])]
    for fraction in args.compare_recompute:
        limit = floor + int((activation - floor) * fraction)
        configs.append((f"auto {fraction:g}",
                        ["--activation-memory", str(limit)]))
    outs, remarks = {}, {}
    for name, extra in configs:
        printed = []
        out, seconds = compile_sharc(
            args, work, onnx_path, args.precision, n,
            name="out-" + name.replace(" ", "-"),
            extra=common + ["--recompute", name.split()[0]] + extra,
            stderr=printed)
        outs[name] = (out, seconds)
        remarks[name] = RECOMPUTE_REMARK.search(printed[0])
        print(f"compiled --recompute {name} in {seconds:.1f} s", flush=True)
    info = build_info(args, outs["none"][0] / "train")
    w = args.warmup
    runs = run_rounds(args, outs, input_files, lambda name: n,
                      lambda name: f"--recompute {name}")
    print()
    print(model_line(args, n_params, args.precision))
    print(f"{n} rank(s), {args.threads} thread(s) per rank; {args.steps} timed "
          f"steps after {w} warm-up, {args.rounds} round(s) of every "
          f"configuration alternately; compile flags "
          f"{' '.join(common) or '(none)'}; activation memory "
          f"{mib(activation):.1f} MiB without recomputation, "
          f"{mib(floor):.1f} MiB at the least (auto F: a limit F of the way "
          f"from the least to none); work dir {work}")
    for line in info:
        print(line)
    print()
    print(f"{'recompute':>10} {'step ms':>9} {'planned MiB':>12} "
          f"{'measured MiB':>13} {'saved MiB':>10} {'arena MiB':>10} "
          f"{'segments':>9} {'GFLOP':>7} {'losses':>7}")
    base = runs["none"]
    base_measured = max(r["peak_measured"] for r in base)
    for name, _ in configs:
        results = runs[name]
        last = results[-1]
        ms = median([x for result in results for x in result["step_ms"][w:]])
        measured = max(result["peak_measured"] for result in results)
        remark = remarks.get(name)
        segments, gflop = "-", "-"
        if remark:
            segments = (f"{remark['layers']} lay" if remark["layers"] else
                        f"{remark['chosen']}/{remark['segments']}")
            gflop = f"{int(remark['flops']) / 1e9:.2f}"
        same = "=" if last["losses"] == base[-1]["losses"] else "differ"
        print(f"{name:>10} {ms:>9.1f} {mib(last['peak_planned']):>12.1f} "
              f"{mib(measured):>13.1f} {mib(base_measured - measured):>10.1f} "
              f"{mib(last['arena_planned']):>10.1f} {segments:>9} "
              f"{gflop:>7} {same:>7}")
    print()
    print("planned: the persistent buffers, the arena and the communication "
          "staging (the binary's summary line); measured: peak resident set "
          "(getrusage) of rank 0, the largest over the rounds; saved: none's "
          "measured peak minus this one; segments: layers found, or segments "
          "recomputed of those forward has (auto); GFLOP: recomputed per "
          "micro-batch step (the pass's count); losses: '=' when every step's "
          "loss equals none's")


def compare_precisions(args, work, onnx_path, input_files, n_params):
    precisions = args.compare_precisions
    n = args.world_size
    outs = {}
    for precision in precisions:
        outs[precision] = compile_sharc(args, work, onnx_path, precision, n,
                                        name=f"out-{precision}-np{n}")
        print(f"compiled {precision} in {outs[precision][1]:.1f} s", flush=True)
    info = build_info(args, outs[precisions[0]][0] / "train")
    w = args.warmup
    runs = {p: [] for p in precisions}
    for r in range(args.rounds):
        for precision in precisions:
            out, compile_s = outs[precision]
            result = run_sharc(args, out, compile_s, input_files, world_size=n,
                               sample_rss=True)
            if len(result["step_ms"]) != w + args.steps:
                sys.exit(f"benchmark-cpu: {precision}: expected {w + args.steps} "
                         f"step lines, found {len(result['step_ms'])}")
            runs[precision].append(result)
        print(f"round {r + 1}: median step ms "
              + ", ".join(f"{p} {median(runs[p][-1]['step_ms'][w:]):.1f}"
                          for p in precisions), flush=True)
    print()

    def planned(result):
        manifest = result["manifest"]
        persistent = sum(b["bytes"] for b in manifest["buffers"])
        other = persistent - manifest["parameter_bytes"] - manifest["optimizer_state_bytes"]
        return {
            "param": manifest["parameter_bytes"],
            "state": manifest["optimizer_state_bytes"],
            "arena": manifest["arena_bytes"],
            "grad": manifest["gradient_bytes"],
            "copies": manifest.get("compute_copy_bytes", 0),
            "other": other,
            "total": persistent + manifest["arena_bytes"],
        }

    first = {p: runs[p][0] for p in precisions}
    plans = {p: planned(first[p]) for p in precisions}
    for p in precisions:
        for result in runs[p][1:]:
            if result["arena_measured"] != first[p]["arena_measured"]:
                print(f"note: {p}: measured arena differs between rounds "
                      f"({result['arena_measured']} vs {first[p]['arena_measured']})")
    steps = {p: [ms for result in runs[p] for ms in result["step_ms"][w:]]
             for p in precisions}
    step_rss = {p: max(kb for result in runs[p] for kb in result["step_rss_kb"])
                if all(result["step_rss_kb"] for result in runs[p]) else None
                for p in precisions}
    peak_rss = {p: max(result["max_rss_kb"] for result in runs[p]) for p in precisions}

    print(model_line(args, n_params))
    print(f"world size {n} (mpirun -np {n}), {args.threads} thread(s) per rank; "
          f"{args.steps} timed steps after {w} warm-up, {args.rounds} round(s) "
          f"of {', '.join(precisions)} alternately; work dir {work}")
    for line in info:
        print(line)
    print()

    base = "fp32" if "fp32" in precisions else None
    others = [p for p in precisions if p != base] if base else []
    head = f"{'per rank':44}" + "".join(f"{p:>10}" for p in precisions) \
        + "".join(f"{p + '/' + base:>11}" for p in others)
    print(head)

    def row(label, values, with_ratios=True, digits=1):
        cells = "".join(f"{values[p]:>10.{digits}f}" if values[p] is not None
                        else f"{'-':>10}"
                        for p in precisions)
        ratios = ""
        for p in others if with_ratios else ():
            a, b = values[p], values[base]
            ratios += f"{a / b:>11.2f}" if a is not None and b else f"{'-':>11}"
        print(f"{label:44}{cells}{ratios}")

    def plan_row(label, key):
        row(label, {p: mib(plans[p][key]) for p in precisions})

    print("planned MiB (manifest.json)")
    plan_row("  parameters (fp32 master weights)", "param")
    plan_row("  optimizer state (fp32)", "state")
    plan_row("  arena (activations, temporaries, ...)", "arena")
    plan_row("    in it: gradients (fp32)", "grad")
    plan_row("    in it: 16-bit compute copies", "copies")
    plan_row("  inputs, outputs", "other")
    plan_row("  total", "total")
    print("measured MiB")
    row("  arena (sentinel high-water mark)",
        {p: mib(first[p]["arena_measured"]) if first[p]["arena_measured"] is not None
         else None for p in precisions})
    row("  RSS during steps 3.. (VmRSS, max)",
        {p: mib(step_rss[p] * 1024) if step_rss[p] else None for p in precisions})
    row("  peak RSS (time -v)",
        {p: mib(peak_rss[p] * 1024) for p in precisions})
    row("  RSS during steps - planned total",
        {p: mib(step_rss[p] * 1024 - plans[p]["total"]) if step_rss[p] else None
         for p in precisions}, with_ratios=False)
    print("step ms")
    row("  median", {p: median(steps[p]) for p in precisions}, digits=2)
    row("  min", {p: min(steps[p]) for p in precisions}, digits=2)
    for r in range(args.rounds):
        row(f"  median of round {r + 1}",
            {p: median(runs[p][r]["step_ms"][w:]) for p in precisions}, digits=2)
    print()
    for p in precisions:
        last = runs[p][-1]
        extra = ""
        if last["scales"]:
            extra = f", loss scale {last['scales'][-1]:g}"
        if last["skipped"] is not None:
            extra += f", skipped steps {last['skipped']}"
        collectives = ""
        if n > 1:
            collectives = (f"; collective bytes per step planned "
                           f"{last['collective_planned']} measured "
                           f"{last['collective_measured']}")
        ranks = ""
        if n > 1:
            ranks = "; peak RSS per rank MiB " + ", ".join(
                f"{mib(kb * 1024):.1f}" for kb in last["rank_rss_kb"])
            if last["step_rss_kb"]:
                ranks += "; RSS during steps per rank MiB " + ", ".join(
                    f"{mib(kb * 1024):.1f}" for kb in last["step_rss_kb"])
        print(f"{p}: loss at step 1 {last['losses'][0]:.6f}, at step "
              f"{w + args.steps} {last['losses'][-1]:.6f}{extra}; "
              f"{last['kernels']} kernels, {last['gemm_calls']} GEMM calls per step; "
              f"arena planned {plans[p]['arena']} measured {first[p]['arena_measured']} "
              f"bytes{collectives}{ranks}")


def prepare(args):
    """Exports the model and writes the data (4 x batch rows per rank); returns
    (work directory, ONNX path, {input name: .npy path}, parameter count)."""
    import numpy as np
    import torch
    import models

    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="sharc-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    case, config = build_case(args)
    onnx_path = work / f"{args.model}.onnx"
    models.export(case, onnx_path)
    rows = 4 * args.batch * args.world_size
    data = models.make_inputs(args.model, rows,
                              torch.Generator().manual_seed(args.seed + 11), config)
    input_files = {}
    for name, tensor in data.items():
        input_files[name] = work / f"{name}.npy"
        np.save(input_files[name], tensor.numpy())
    n_params = sum(p.numel() for p in case.module.parameters())
    del case
    return work, onnx_path, input_files, n_params


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
    work, onnx_path, input_files, n_params = prepare(args)
    if args.compare_precisions:
        compare_precisions(args, work, onnx_path, input_files, n_params)
        return
    if args.compare_stages:
        compare_stages(args, work, onnx_path, input_files, n_params)
        return
    if args.compare_recompute:
        compare_recompute(args, work, onnx_path, input_files, n_params)
        return

    out, compile_s = compile_sharc(args, work, onnx_path)
    variants = [v for v in args.torch_variants.split(",") if v]
    unknown = set(variants) - {"eager", "fused", "compile"}
    if unknown or not variants:
        sys.exit(f"benchmark-cpu: --torch-variants: unknown "
                 f"{', '.join(sorted(unknown)) or 'empty list'}")
    w = args.warmup
    s_ms, round_ratios = [], {v: [] for v in variants}
    t_ms = {v: [] for v in variants}
    pt = {}
    for r in range(args.rounds):
        sharc = run_sharc(args, out, compile_s, input_files)
        s_round = sharc["step_ms"][w:]
        s_ms += s_round
        line = f"round {r + 1}: median step ms sharc {median(s_round):.2f}"
        for variant in variants:
            pt[variant] = run_torch(args, work, input_files, variant)
            t_round = pt[variant]["step_ms"][w:]
            t_ms[variant] += t_round
            round_ratios[variant].append(median(t_round) / median(s_round))
            line += (f", torch {variant} {median(t_round):.2f} "
                     f"({round_ratios[variant][-1]:.2f}x)")
        print(line, flush=True)
    print()
    first = pt[variants[0]]
    sizes = (f"dim {args.dim}, layers {args.layers}, heads {args.heads}, "
             f"seq {args.seq}, vocab {args.vocab}, " if args.model != "mlp"
             else f"hidden {args.dim}, ")
    print(f"precision {args.precision}")
    print(f"model {args.model}: {sizes}batch {args.batch}; {n_params} parameters; "
          f"fp32 AdamW lr {args.lr} weight decay {args.weight_decay}")
    print(f"threads {args.threads}; {args.steps} timed steps after {w} warm-up; "
          f"torch {first['torch']} ({first['threads']} threads, MKL "
          f"{'yes' if first.get('mkl') else 'no'}, oneDNN "
          f"{'yes' if first.get('mkldnn') else 'no'}); work dir {work}")
    for line in build_info(args, out / "train"):
        print(line)
    print(f"sharc compile {sharc['compile_s']:.1f} s; {sharc['kernels']} kernels, "
          f"{sharc['gemm_calls']} GEMM calls per step")
    print()
    s_planned = (sharc["arena_planned"] + sharc["param_bytes"]
                 + sharc["state_bytes"] + sharc["input_bytes"])
    header = f"{'':18} {'sharc':>10}" + "".join(
        f" {'torch ' + v:>14} {'/sharc':>7}" for v in variants)
    print(header)

    def row(label, mine, theirs, digits=2):
        text = f"{label:18} {mine:>10.{digits}f}"
        for v in variants:
            text += f" {theirs[v]:>14.{digits}f} {theirs[v] / mine:>7.2f}"
        print(text)

    row("step ms (mean)", mean(s_ms), {v: mean(t_ms[v]) for v in variants})
    row("step ms (median)", median(s_ms),
        {v: median(t_ms[v]) for v in variants})
    row("step ms (min)", min(s_ms), {v: min(t_ms[v]) for v in variants})
    row("peak RSS MiB", mib(sharc["max_rss_kb"] * 1024),
        {v: mib(pt[v]["max_rss_kb"] * 1024) for v in variants}, 1)
    row("tensor MiB", mib(s_planned),
        {v: mib(pt[v]["param_bytes"] + pt[v]["grad_bytes"]
                + pt[v]["state_bytes"]) for v in variants}, 1)
    for v in variants:
        print(f"torch {v}/sharc of the rounds' medians: "
              + ", ".join(f"{x:.2f}" for x in round_ratios[v])
              + f" (median {median(round_ratios[v]):.2f})")
    print(f"step times pooled over {args.rounds} round(s)")
    print()
    print(f"sharc tensor bytes: arena {sharc['arena_planned']} planned "
          f"({sharc['arena_measured']} measured, holds activations and gradients) "
          f"+ parameters {sharc['param_bytes']} + optimizer state "
          f"{sharc['state_bytes']} + inputs {sharc['input_bytes']}; "
          f"peak RSS by {sharc['rss_source']}")
    print(f"torch tensor bytes: parameters {first['param_bytes']} + gradients "
          f"{first['grad_bytes']} + optimizer state {first['state_bytes']} "
          f"(activations not counted); RSS after `import torch` "
          f"{mib(first['rss_after_import_kb'] * 1024):.1f} MiB")
    last = args.warmup + args.steps
    print(f"loss at step 1: sharc {sharc['losses'][0]:.6f} "
          + " ".join(f"torch {v} {pt[v]['losses'][0]:.6f}" for v in variants)
          + f"; at step {last}: sharc {sharc['losses'][-1]:.6f} "
          + " ".join(f"torch {v} {pt[v]['losses'][-1]:.6f}" for v in variants))


if __name__ == "__main__":
    main()
