"""sharc compile --memory-budget BYTES (docs/budget.md): the search over ZeRO
stage, offload, micro-batch and recomputation for the fastest plan that fits.

On a GPT of 27.4M parameters exported with a free batch dimension (so that the
micro-batch is searched too) at N = 2 ranks: for three budgets (one every
configuration fits, one halfway down, and the smallest plan the search finds)
the chosen plan's bytes are within the budget, the binary's measured peak
(getrusage, less what the process held before its buffers) is within it too,
and it trains to the losses of the unconstrained plan; a budget one byte
below the smallest plan (with the runtime's reserve) is refused with that
shortfall and writes nothing.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest

import models

CHOSEN = re.compile(r"^plan: chosen: (.*), (\d+) bytes per rank, estimated "
                    r"([\d.]+) ms per step$", re.MULTILINE)
ROW = re.compile(r"^plan: +(\d) (\S+) +(\d+) x (\d+) +(none|layers|auto \d+) +"
                 r"(\d+|-) +([\d.]+|-)  (.*)$", re.MULTILINE)
PEAK = re.compile(r"^summary: peak memory bytes per rank planned (\d+) measured "
                  r"(\d+) .*held before them (\d+)\)$", re.MULTILINE)
STEP = re.compile(r"^step \d+ loss (\S+)", re.MULTILINE)
SHORT = re.compile(r"nothing fits; the smallest plan \((.*)\) needs (\d+) bytes "
                   r"per rank and the runtime (\d+) outside it, (\d+) bytes over")
CONFIG = models.GptConfig(vocab=8192, seq=256, dim=512, heads=8, layers=6, batch=2)
SHAPES = ["--input-shape", "tokens=2x256", "--input-shape", "targets=2x256"]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    directory = tmp_path_factory.mktemp("budget")
    path = directory / "gpt.onnx"
    case = models.make_training_case("gpt", gpt_config=CONFIG)
    models.export(case, path, dynamic_batch=True)
    _, inputs = models.write_data("gpt", 8, 5, directory, config=CONFIG)
    return path, inputs


def mpirun(ranks, *args):
    return subprocess.run(
        [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np",
         str(ranks), *map(str, args)], capture_output=True, text=True, timeout=600)


def compile_within(sharc, path, budget, *extra):
    return sharc("compile", path, *SHAPES, "--world-size", 2, "--optimizer",
                 "adamw", "--lr", "0.001", "--memory-budget", budget, *extra)


def test_budgets_fit_when_run(sharc, gpt, tmp_path):
    path, inputs = gpt
    # The smallest plan the search finds: what it says of a budget of 1.
    probe = compile_within(sharc, path, 1, "--plan")
    assert probe.returncode == 1, probe.stderr
    _, smallest, reserve, over = SHORT.search(probe.stderr).groups()
    least = int(smallest) + int(reserve)
    assert int(over) == least - 1
    # The smallest plan is the smallest row of the table.
    rows = ROW.findall(probe.stdout)
    assert len(rows) >= 8, probe.stdout
    assert min(int(r[5]) for r in rows if r[5] != "-") == int(smallest)
    fastest = compile_within(sharc, path, 10**12, "--plan")
    assert fastest.returncode == 0, fastest.stderr
    most = int(CHOSEN.search(fastest.stdout).group(2)) + int(reserve)
    assert least < most

    runs = {}
    for name, budget in (("all", 10**12), ("half", (least + most) // 2),
                         ("least", least)):
        out = tmp_path / name
        result = compile_within(sharc, path, budget, "-o", out)
        assert result.returncode == 0, result.stderr
        chosen, planned, _ = CHOSEN.search(result.stdout).groups()
        assert int(planned) + int(reserve) <= budget
        run = mpirun(2, out / "train", *inputs, "--steps", 2)
        assert run.returncode == 0, run.stderr
        summary, measured, held = map(int, PEAK.search(run.stdout).groups())
        # The binary plans what the search said, and what the process
        # holds beyond what it held before its buffers fits the budget.
        assert summary == int(planned), (summary, planned)
        assert measured - held <= budget, (name, budget, measured, held)
        runs[name] = (chosen, [float(x) for x in STEP.findall(run.stdout)])
    # Tighter budgets choose other plans; every plan trains alike (another
    # micro-batch sums in another order).
    assert runs["all"][0] != runs["least"][0], runs
    for name in ("half", "least"):
        np.testing.assert_allclose(runs[name][1], runs["all"][1], rtol=1e-5)
        assert len(runs[name][1]) == 2


def test_a_budget_below_the_least_is_refused(sharc, gpt, tmp_path):
    path, _ = gpt
    probe = compile_within(sharc, path, 1, "--plan")
    _, smallest, reserve, _ = SHORT.search(probe.stderr).groups()
    out = tmp_path / "out"
    result = compile_within(sharc, path, int(smallest) + int(reserve) - 1,
                            "-o", out)
    assert result.returncode == 1
    short = SHORT.search(result.stderr)
    assert short and short.group(2) == smallest and short.group(4) == "1", \
        result.stderr
    assert not out.exists() and not list(tmp_path.glob("out.partial-*"))


@pytest.mark.parametrize("flags,message", [
    (["--memory-budget", 0], "--memory-budget must be a positive number of bytes"),
    (["--memory-budget", -5], "--memory-budget must be a positive number of bytes")])
def test_budget_flag_is_checked(sharc, gpt, tmp_path, flags, message):
    path, _ = gpt
    result = sharc("compile", path, *SHAPES, *flags, "-o", tmp_path / "out")
    assert result.returncode == 1 and message in result.stderr, result.stderr
