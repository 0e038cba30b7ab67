"""Activation checkpointing (sharc-rematerialize, --recompute layers|auto;
docs/recompute.md).

Backward recomputes each repeated layer's forward values from the layer's
input instead of keeping them (layers), or the segments of forward that cost
the fewest FLOPs within --activation-memory (auto).  The copies are the same ops in the same order,
so the evaluator and the CPU binaries print the step lines of the run without
recomputation digit for digit and save the same state; the planned arena and
the measured peak fall.  A model without repeated layers gets a warning and
the same step.
"""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

import models

STEP = re.compile(r"^step \d+ loss \S+ lr \S+", re.MULTILINE)
ARENA = re.compile(r"^report: arena peak bytes (\d+)$", re.MULTILINE)
PEAK = re.compile(r"^summary: peak memory bytes per rank planned (\d+) measured (\d+) "
                  r".*?, arena (\d+),", re.MULTILINE)
HUGE_PAGE = 2 << 20


def allocated(arena):
    """The bytes the CPU runtime allocates for an arena (runtime/DeviceHost.cpp:
    256-byte blocks; from 2 MiB on, whole transparent huge pages, which the
    resident set counts whole)."""
    rounded = -(-max(arena, 1) // 256) * 256
    return -(-rounded // HUGE_PAGE) * HUGE_PAGE if rounded >= HUGE_PAGE else rounded
FOUND = re.compile(r"remark: sharc-rematerialize: (\d+) layers found; backward "
                   r"recomputes (\d+) forward ops \(\d+ FLOPs\) instead of "
                   r"keeping (\d+) bytes")
AUTO = re.compile(r"remark: sharc-rematerialize: (\d+) of (\d+) segments "
                  r"recomputed to fit (\d+) bytes; backward recomputes \d+ "
                  r"forward ops \((\d+) FLOPs\) instead of keeping (\d+) bytes "
                  r"of their values; activation memory (\d+) -> (\d+) bytes")
WITHIN = re.compile(r"remark: sharc-rematerialize: activation memory (\d+) bytes "
                    r"is within (\d+) bytes; nothing is recomputed")
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return models.export_training_cases(tmp_path_factory.mktemp("recompute"))


def mpirun(ranks, *args):
    return subprocess.run(
        [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np",
         str(ranks), *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", ["gpt", "bert", "mlp", "cnn"])
def test_evaluator_losses_are_unchanged(sharc, exported, name):
    """The evaluator's step lines with and without recomputation, all
    digits; the transformers have repeated layers, the MLP and the CNN get
    the warning."""
    path, inputs = exported[name]
    freeze = ["--freeze", "key.bias"] if name == "bert" else []
    lines = {}
    for policy in ("none", "layers"):
        result = sharc("eval", path, "--train", *inputs, "--steps", 4, *RECIPE,
                       *freeze, "--recompute", policy)
        assert result.returncode == 0, result.stderr
        lines[policy] = STEP.findall(result.stdout)
        found = FOUND.search(result.stderr)
        if policy == "layers" and name in ("gpt", "bert"):
            assert found and int(found.group(1)) >= 2, result.stderr
        elif policy == "layers":
            assert "no repeated layers found in forward" in result.stderr
        else:
            assert not found and "sharc-rematerialize" not in result.stderr
    assert len(lines["none"]) == 4 and lines["none"] == lines["layers"]


def unchecked_memory(sharc, *args):
    """The gradient function's activation memory without recomputation: what
    --recompute auto says when its limit is above it (--emit-only for
    compile)."""
    result = sharc(*args, "--recompute", "auto", "--activation-memory",
                   10**15)
    assert result.returncode == 0, result.stderr
    within = WITHIN.search(result.stderr)
    assert within, result.stderr
    return int(within.group(1))


def test_evaluator_auto_within_a_limit(sharc, exported):
    """--recompute auto on the GPT at 85 % of its activation memory: some
    segments recomputed, the memory within the limit, the FLOPs fewer than
    --recompute layers recomputes, the step lines of no recomputation; a
    limit below what recomputing every segment leaves is refused with the
    shortfall."""
    path, inputs = exported["gpt"]
    run = lambda *flags: sharc("eval", path, "--train", *inputs, "--steps", 4,
                               *RECIPE, *flags)
    peak = unchecked_memory(sharc, "eval", path, "--train", *inputs,
                            "--steps", 1, *RECIPE)
    limit = peak * 85 // 100
    auto = run("--recompute", "auto", "--activation-memory", limit)
    assert auto.returncode == 0, auto.stderr
    chosen, segments, fit, flops, kept, before, after = map(
        int, AUTO.search(auto.stderr).groups())
    assert 0 < chosen <= segments and fit == limit and kept > 0
    assert before == peak and after <= limit, auto.stderr
    layers = run("--recompute", "layers")
    layer_flops = int(re.search(r"\((\d+) FLOPs\)", layers.stderr).group(1))
    assert flops < layer_flops, (auto.stderr, layers.stderr)
    none = run("--recompute", "none")
    assert STEP.findall(auto.stdout) == STEP.findall(none.stdout)
    assert len(STEP.findall(none.stdout)) == 4

    short = run("--recompute", "auto", "--activation-memory", 1000)
    assert short.returncode != 0 and not STEP.findall(short.stdout)
    floor = re.search(r"the activation memory cannot fall to 1000 bytes: "
                      r"recomputing every one of the (\d+) segments leaves "
                      r"(\d+) bytes, (\d+) bytes over", short.stderr)
    assert floor, short.stderr
    assert int(floor.group(1)) == segments
    assert int(floor.group(3)) == int(floor.group(2)) - 1000


@pytest.mark.parametrize("flags,message", [
    (["--recompute", "auto"], "--recompute auto needs --activation-memory"),
    (["--recompute", "layers", "--activation-memory", 10**6],
     "--activation-memory applies to --recompute auto only"),
    (["--recompute", "auto", "--activation-memory", 0],
     "--activation-memory must be a positive number of bytes, got 0"),
    (["--recompute", "sometimes"],
     "--recompute 'sometimes': expected none, layers or auto")])
def test_recompute_flags_are_checked(sharc, exported, tmp_path, flags, message):
    path, _ = exported["gpt"]
    out = tmp_path / "out"
    result = sharc("compile", path, *RECIPE, *flags, "-o", out)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert not out.exists()


# peak_at_activations: whether the layers' activations set the arena's peak
# on this small model (d 32, T 16, whose GELU keeps no tanh for the backward
# pass): in fp32 on one rank and at stage 3; at stage 2 and under bf16 it
# stands elsewhere.
@pytest.mark.parametrize("ranks,flags,policy,peak_at_activations", [
    (1, [], "layers", True), (2, ["--zero-stage", 2], "layers", False),
    (2, ["--zero-stage", 3, "--param-persistence-threshold", 0, "--grad-accum", 2],
     "layers", True),
    (2, ["--zero-stage", 1, "--precision", "bf16"], "layers", False),
    (2, ["--zero-stage", 2], "auto", False)])
def test_binaries_train_as_without(sharc, exported, tmp_path, ranks, flags,
                                   policy, peak_at_activations):
    """The GPT compiled with and without recomputation (layers: fp32 on 1
    rank, ZeRO stage 2, stage 3 with GAS 2, bf16 at stage 1; auto at 85 % of
    the activation memory at stage 2): the same step lines and saved state,
    less activation memory, and a planned arena no larger (smaller where the
    activations set its peak)."""
    path, inputs = exported["gpt"]
    flags = [*RECIPE, "--world-size", ranks, *flags]
    limit = []
    if policy == "auto":
        peak = unchecked_memory(sharc, "compile", path, *flags, "--emit-only",
                                "-o", tmp_path / "probe")
        limit = ["--activation-memory", peak * 85 // 100]
    runs = {}
    for name in ("none", policy):
        out = tmp_path / name
        result = sharc("compile", path, *flags, "--recompute", name,
                       *(limit if name == "auto" else []), "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        arena = int(ARENA.search(result.stdout).group(1))
        if name != "none":
            fell = re.search(r"activation memory (\d+) -> (\d+) bytes", result.stderr)
            assert fell and int(fell.group(2)) < int(fell.group(1)), result.stderr
        run = mpirun(ranks, out / "train", *inputs, "--steps", 4,
                     "--save-state", tmp_path / f"state-{name}")
        assert run.returncode == 0, run.stderr
        runs[name] = (STEP.findall(run.stdout), arena)
    assert runs["none"][0] == runs[policy][0] and len(runs["none"][0]) == 4
    if peak_at_activations:
        assert runs[policy][1] < runs["none"][1], runs
    else:
        assert runs[policy][1] <= runs["none"][1], runs
    saved = lambda d: sorted(p.relative_to(d) for p in d.rglob("*.npy"))
    none, other = tmp_path / "state-none", tmp_path / f"state-{policy}"
    assert saved(none) == saved(other)
    for name in saved(none):
        np.testing.assert_array_equal(np.load(none / name), np.load(other / name))


def test_measured_peak_falls_as_planned(sharc, tmp_path):
    """A GPT of 4 layers (d 256, 256 tokens per step, 1 rank), with
    --recompute layers and auto (at the least activation memory it can
    reach): the
    measured peak (getrusage) falls by the planned fall, within 10 % of it
    (the fall can be no larger than what the remark says is no longer
    kept).  The arenas are allocated in whole 2 MiB huge pages, so the fall
    the resident set can show is that of the allocations: the planned arenas
    rounded as the runtime rounds them."""
    config = models.GptConfig(vocab=512, seq=128, dim=256, heads=4, layers=4, batch=2)
    path = tmp_path / "gpt.onnx"
    models.export(models.make_training_case("gpt", gpt_config=config), path)
    _, inputs = models.write_data("gpt", 4, 5, tmp_path, config=config)
    # The least activation memory recomputation reaches: what auto says of
    # a limit below it.
    probe = sharc("compile", path, *RECIPE, "--recompute", "auto",
                  "--activation-memory", 1, "--emit-only", "-o",
                  tmp_path / "probe")
    limit = int(re.search(r"recomputing every one of the \d+ segments leaves "
                          r"(\d+) bytes", probe.stderr).group(1))
    peaks, kept = {}, {}
    for policy, extra in (("none", []), ("layers", []),
                          ("auto", ["--activation-memory", limit])):
        out = tmp_path / policy
        result = sharc("compile", path, *RECIPE, "--recompute", policy, *extra,
                       "-o", out)
        assert result.returncode == 0, result.stderr
        if policy == "layers":
            kept[policy] = int(FOUND.search(result.stderr).group(3))
        elif policy == "auto":
            kept[policy] = int(AUTO.search(result.stderr).group(5))
        run = mpirun(1, out / "train", *inputs, "--steps", 2)
        assert run.returncode == 0, run.stderr
        peaks[policy] = tuple(map(int, PEAK.search(run.stdout).groups()))
    for policy in ("layers", "auto"):
        planned = peaks["none"][0] - peaks[policy][0]
        measured = peaks["none"][1] - peaks[policy][1]
        assert 0 < planned <= kept[policy], (policy, peaks, kept)
        # The planned fall plus what rounding the two arenas adds to each.
        slack = lambda arena: allocated(arena) - arena
        fall = planned + slack(peaks["none"][2]) - slack(peaks[policy][2])
        assert abs(measured - fall) <= 0.1 * fall, (policy, peaks, fall)


CPU_CHECKPOINTING = {"activation_checkpointing": {"cpu_checkpointing": True}}
MEMORY = re.compile(r"^report: per rank memory: (?:cpu|cuda) device (\d+) bytes .*?, "
                    r"pinned host (\d+), NVMe \d+; moved per step: PCIe (\d+),",
                    re.MULTILINE)


@pytest.mark.parametrize("flags", [
    ["--zero-stage", 3, "--param-persistence-threshold", 0, "--grad-accum", 2],
    ["--zero-stage", 2, "--grad-accum", 2, "--precision", "bf16"]])
def test_checkpoints_in_host_memory_train_as_without(sharc, exported, tmp_path,
                                                     flags):
    """DeepSpeed's cpu_checkpointing, the CUDA target's program run on the
    CPU (--host-update): each recomputed layer's input goes to host memory
    after its forward and comes back for its backward; the GPT on 2 ranks
    (ZeRO 3 with GAS 2, bf16 at ZeRO 2) prints the step lines and saves the
    state of the same recomputation without it, and the report puts the
    checkpoints in (pinned) host memory, each copied out and back once per
    micro-batch."""
    path, inputs = exported["gpt"]
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(CPU_CHECKPOINTING))
    runs = {}
    for name, extra in (("device", ["--recompute", "layers"]),
                        ("host", ["--config", config, "--host-update"])):
        out = tmp_path / name
        result = sharc("compile", path, *RECIPE, "--world-size", 2, *flags,
                       *extra, "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        device, host, moved = map(int, MEMORY.search(result.stdout).groups())
        run = mpirun(2, out / "train", *inputs, "--steps", 4,
                     "--save-state", tmp_path / f"state-{name}")
        assert run.returncode == 0, run.stderr
        runs[name] = (STEP.findall(run.stdout), host, moved, result.stdout)
    assert runs["device"][0] == runs["host"][0] and len(runs["host"][0]) == 4
    assert runs["device"][1:3] == (0, 0)
    host, moved = runs["host"][1:3]
    # Out and back once per micro-batch (GAS 2).
    assert host > 0 and moved == 2 * 2 * host, runs["host"][3]
    assert "each recomputed layer's input is kept in host memory" in runs["host"][3]
    saved = lambda d: sorted(p.relative_to(d) for p in d.rglob("*.npy"))
    device_state, host_state = tmp_path / "state-device", tmp_path / "state-host"
    assert saved(device_state) == saved(host_state)
    for name in saved(device_state):
        np.testing.assert_array_equal(np.load(device_state / name),
                                      np.load(host_state / name))


def test_checkpoints_in_host_memory_lower_the_device_plan(sharc, tmp_path):
    """Where the checkpoints set the device's peak (a GPT of 16 narrow
    layers, 8 x 256 tokens), keeping them in host memory lowers the device
    arena, by no more than their bytes."""
    config = models.GptConfig(vocab=256, seq=256, dim=128, heads=4, layers=16,
                              batch=8)
    path = tmp_path / "gpt.onnx"
    models.export(models.make_training_case("gpt", gpt_config=config), path)
    block = tmp_path / "ds_config.json"
    block.write_text(json.dumps(CPU_CHECKPOINTING))
    plans = {}
    for name, extra in (("device", ["--recompute", "layers"]),
                        ("host", ["--config", block, "--host-update"]),
                        ("cuda", ["--config", block, "--target", "cuda"])):
        result = sharc("compile", path, *RECIPE, *extra, "--plan")
        assert result.returncode == 0, result.stderr
        plans[name] = tuple(map(int, MEMORY.search(result.stdout).groups()))
    device, host = plans["device"], plans["host"]
    assert host[1] > 0 and device[1] == 0
    assert device[0] - host[1] <= host[0] < device[0], plans
    # The CUDA target plans the same program, the checkpoints in pinned host
    # memory.
    assert plans["cuda"][1] == host[1], plans
