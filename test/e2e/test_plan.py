"""Planning without weights: `sharc compile --plan` (docs/planning.md).

tools/export-gpt-shapes.py writes GPT-style training graphs of any size,
with random weights (small ones) or with none (every initializer points at
an external data file that does not exist).  The graph itself is checked
against onnxruntime; `--plan` on the weightless export prints the report of
a full compile of the same graph with weights, line for line, at several
world sizes, stages and precisions; it never reads or allocates the weights
(a 10-billion-parameter plan runs under an address-space limit far below
the weights' size), and its per-rank parameter bytes are the formula's.
"""

import os
import pathlib
import re
import resource
import subprocess
import sys

import numpy as np
import onnx
import pytest

from conftest import sharc_path

EXPORT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "export-gpt-shapes.py"
SMALL = ["--layers", "2", "--dim", "32", "--heads", "2", "--vocab", "64",
         "--seq", "16", "--batch", "2"]


def export(tmp_path, name, *args):
    path = tmp_path / f"{name}.onnx"
    result = subprocess.run([sys.executable, str(EXPORT), *args, "-o", str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    parameters = int(re.search(r": (\d+) parameters", result.stdout).group(1))
    return path, parameters


def report_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("report: ")]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plan")
    weighted, _ = export(directory, "small", *SMALL, "--weights", "random")
    shapes, parameters = export(directory, "small-shapes", *SMALL)
    rng = np.random.default_rng(3)
    inputs = []
    for name in ("tokens", "targets"):
        np.save(directory / f"{name}.npy", rng.integers(0, 64, (2, 16)).astype(np.int64))
        inputs += ["--input", f"{name}={directory / f'{name}.npy'}"]
    return directory, weighted, shapes, parameters, inputs


def test_the_exported_graph_is_a_gpt(sharc, small):
    """The export runs in onnxruntime, and sharc's loss is onnxruntime's;
    its initializers are the GPT's parameters."""
    ort = pytest.importorskip("onnxruntime")
    directory, weighted, _, parameters, inputs = small
    feeds = {name: np.load(directory / f"{name}.npy") for name in ("tokens", "targets")}
    expected = ort.InferenceSession(str(weighted)).run(None, feeds)[0]
    result = sharc("eval", weighted, *inputs)
    assert result.returncode == 0, result.stderr
    loss = float(re.search(r"loss = (\S+)", result.stdout).group(1))
    assert loss == pytest.approx(float(expected), rel=1e-5)
    model = onnx.load(str(weighted))
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer) == parameters
    # d=32, 2 layers: 12 d^2 + 13 d per layer, embeddings, final LayerNorm, head.
    d, layers, vocab, seq = 32, 2, 64, 16
    assert parameters == layers * (12 * d * d + 13 * d) + vocab * d + seq * d + 2 * d + d * vocab


@pytest.mark.parametrize("flags", [
    ["--world-size", "1"],
    ["--world-size", "2", "--zero-stage", "1"],
    ["--world-size", "2", "--zero-stage", "2", "--precision", "bf16"],
    ["--world-size", "4", "--zero-stage", "3", "--param-persistence-threshold", "0",
     "--precision", "fp16"],
])
def test_plan_is_the_compiles_report(sharc, small, tmp_path, flags):
    """--plan on the weightless model prints what --report prints for a full
    compile of the same graph with weights, line for line, and writes
    nothing."""
    _, weighted, shapes, _, _ = small
    recipe = ["--optimizer", "adamw", "--lr", "1e-3", *flags]
    full = sharc("compile", weighted, *recipe, "--report", "-o", tmp_path / "out",
                 "--emit-only")
    assert full.returncode == 0, full.stderr
    before = sorted(p.name for p in tmp_path.iterdir())
    plan = sharc("compile", shapes, *recipe, "--plan")
    assert plan.returncode == 0, plan.stderr
    assert report_lines(plan.stdout) == report_lines(full.stdout)
    assert len(report_lines(plan.stdout)) >= 5
    assert "planned" in plan.stderr and "nothing written" in plan.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_compile_prints_progress_on_long_stages(small, tmp_path):
    """Reading the model and writing its weights print progress lines once a
    stage runs long (SHARC_PROGRESS_SECONDS=0: at every run of bytes), and
    each stage's last line counts its bytes: the .onnx file and its external
    data, and the data of the initial weight files (read back with numpy).
    By default a small model's compile prints none of them."""
    _, inline, _, _, _ = small
    weighted = tmp_path / "external.onnx"
    onnx.save_model(onnx.load(str(inline)), str(weighted), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.data",
                    size_threshold=0)
    external = sum(int(next(e.value for e in t.external_data if e.key == "length"))
                   for t in onnx.load(str(weighted), load_external_data=False)
                   .graph.initializer if t.external_data)
    assert external > 0
    command = [str(sharc_path()), "compile", str(weighted), "--optimizer", "adamw",
               "--lr", "1e-3", "--emit-only"]
    env = dict(os.environ, SHARC_PROGRESS_SECONDS="0")
    result = subprocess.run(command + ["-o", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()

    def stage(what):
        ticks = [line for line in lines if line.startswith(f"sharc: {what}: ")
                 and ": done, " not in line]
        done = [line for line in lines if line.startswith(f"sharc: {what}: done, ")]
        assert ticks and len(done) == 1, result.stderr
        return int(re.search(r"\((\d+) bytes\) in [\d.]+ s$", done[0]).group(1))

    assert stage(f"reading {weighted}") == weighted.stat().st_size + external
    written = sum(np.load(path).nbytes for path in (tmp_path / "out" / "weights").iterdir())
    assert written > 0
    assert stage("writing the initial weights") == written
    quiet = subprocess.run(command + ["-o", str(tmp_path / "quiet")],
                           capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "reading" not in quiet.stderr and "initial weights" not in quiet.stderr
    bad = subprocess.run(command + ["-o", str(tmp_path / "bad")],
                         env=dict(os.environ, SHARC_PROGRESS_SECONDS="soon"),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 0, bad.stderr
    assert "SHARC_PROGRESS_SECONDS='soon' is not a number" in bad.stderr


def test_weightless_model_needs_plan(sharc, small, tmp_path):
    """Without --plan a weightless model is refused at its missing data,
    naming the initializer and the file; --plan with -o or --emit-only is a
    usage error."""
    _, _, shapes, _, inputs = small
    result = sharc("compile", shapes, "--optimizer", "sgd", "--lr", "0.1",
                   "-o", tmp_path / "out")
    assert result.returncode == 1
    assert "initializer 'model.token_embedding.weight'" in result.stderr
    assert "small-shapes.onnx.weights" in result.stderr
    assert "No such file or directory" in result.stderr
    assert not (tmp_path / "out").exists()
    result = sharc("eval", shapes, *inputs)
    assert result.returncode == 1 and "cannot open external data" in result.stderr
    for extra, message in [(["-o", tmp_path / "out"], "-o does not apply"),
                           (["--emit-only"], "--emit-only does not apply")]:
        result = sharc("compile", shapes, "--plan", *extra)
        assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_ten_billion_parameters_plan_without_their_memory(tmp_path):
    """The seed's 10-billion-parameter case (50 layers, d 4096): --plan runs
    under a 4 GiB address-space limit, a tenth of the 40 GB the fp32 weights
    alone would take, and reports each rank's bytes by the ZeRO formulas:
    fp32 parameters 4 Psi, and at stage 2 on 8 ranks optimizer state
    8 ceil-sliced Psi / 8 plus the step counter."""
    path, parameters = export(tmp_path, "gpt-10b", "--layers", "50", "--dim", "4096",
                              "--heads", "32", "--vocab", "50304", "--seq", "1024",
                              "--batch", "1")
    assert 10_000_000_000 < parameters < 11_000_000_000
    assert path.stat().st_size < 10 << 20
    limit = 4 << 30

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    result = subprocess.run(
        [str(sharc_path()), "compile", str(path), "--plan", "--world-size", "8",
         "--zero-stage", "2", "--optimizer", "adamw", "--lr", "2e-5"],
        capture_output=True, text=True, timeout=900, preexec_fn=limited)
    assert result.returncode == 0, result.stderr
    match = re.search(r"report: per rank: parameter bytes (\d+), gradient bytes (\d+), "
                      r"optimizer state bytes (\d+)", result.stdout)
    assert match, result.stdout
    model = onnx.load(str(path), load_external_data=False)
    sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
    assert sum(sizes) == parameters
    assert int(match.group(1)) == 4 * parameters
    assert int(match.group(2)) == sum(4 * -(-n // 8) for n in sizes)
    assert int(match.group(3)) == sum(8 * -(-n // 8) for n in sizes) + 8
