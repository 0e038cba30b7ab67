"""Activation checkpointing (sharc-rematerialize, --recompute layers;
docs/recompute.md).

Backward recomputes each repeated layer's forward values from the layer's
input instead of keeping them.  The copies are the same ops in the same order,
so the evaluator and the CPU binaries print the step lines of the run without
recomputation digit for digit and save the same state; the planned arena and
the measured peak fall.  A model without repeated layers gets a warning and
the same step.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest

import models

STEP = re.compile(r"^step \d+ loss \S+ lr \S+", re.MULTILINE)
ARENA = re.compile(r"^report: arena peak bytes (\d+)$", re.MULTILINE)
PEAK = re.compile(r"^summary: peak memory bytes per rank planned (\d+) measured (\d+)",
                  re.MULTILINE)
FOUND = re.compile(r"remark: sharc-rematerialize: (\d+) layers found; backward "
                   r"recomputes (\d+) forward ops instead of keeping (\d+) bytes")
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


@pytest.mark.parametrize("ranks,flags", [
    (1, []), (2, ["--zero-stage", 2]),
    (2, ["--zero-stage", 3, "--param-persistence-threshold", 0, "--grad-accum", 2]),
    (2, ["--zero-stage", 1, "--precision", "bf16"])])
def test_binaries_train_as_without(sharc, exported, tmp_path, ranks, flags):
    """The GPT compiled with and without recomputation (fp32 on 1 rank, ZeRO
    stage 2, stage 3 with GAS 2, bf16 at stage 1): the same step lines and
    saved state, and a planned arena no larger (smaller in fp32)."""
    path, inputs = exported["gpt"]
    runs = {}
    for policy in ("none", "layers"):
        out = tmp_path / policy
        result = sharc("compile", path, *RECIPE, "--world-size", ranks, *flags,
                       "--recompute", policy, "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        arena = int(ARENA.search(result.stdout).group(1))
        run = mpirun(ranks, out / "train", *inputs, "--steps", 4,
                     "--save-state", tmp_path / f"state-{policy}")
        assert run.returncode == 0, run.stderr
        runs[policy] = (STEP.findall(run.stdout), arena)
    assert runs["none"][0] == runs["layers"][0] and len(runs["none"][0]) == 4
    # In fp32 the layers' activations set the arena's peak; under bf16 on
    # this small model it stands elsewhere (it does not rise).
    if "bf16" in flags:
        assert runs["layers"][1] <= runs["none"][1], runs
    else:
        assert runs["layers"][1] < runs["none"][1], runs
    saved = lambda d: sorted(p.relative_to(d) for p in d.rglob("*.npy"))
    none, layers = tmp_path / "state-none", tmp_path / "state-layers"
    assert saved(none) == saved(layers)
    for name in saved(none):
        np.testing.assert_array_equal(np.load(none / name), np.load(layers / name))


def test_measured_peak_falls_as_planned(sharc, tmp_path):
    """A GPT of 4 layers (d 256, 256 tokens per step, 1 rank): the measured
    peak (getrusage) falls by the planned fall, within 10 % of the planned
    activations no longer kept (the fall can be no larger than what the
    remark says is no longer kept)."""
    config = models.GptConfig(vocab=512, seq=128, dim=256, heads=4, layers=4, batch=2)
    path = tmp_path / "gpt.onnx"
    models.export(models.make_training_case("gpt", gpt_config=config), path)
    _, inputs = models.write_data("gpt", 4, 5, tmp_path, config=config)
    peaks = {}
    for policy in ("none", "layers"):
        out = tmp_path / policy
        result = sharc("compile", path, *RECIPE, "--recompute", policy, "-o", out)
        assert result.returncode == 0, result.stderr
        if policy == "layers":
            kept = int(FOUND.search(result.stderr).group(3))
        run = mpirun(1, out / "train", *inputs, "--steps", 2)
        assert run.returncode == 0, run.stderr
        peaks[policy] = tuple(map(int, PEAK.search(run.stdout).groups()))
    planned = peaks["none"][0] - peaks["layers"][0]
    measured = peaks["none"][1] - peaks["layers"][1]
    assert 0 < planned <= kept, (peaks, kept)
    assert abs(measured - planned) <= 0.1 * planned, (peaks, planned, measured)
