"""sharc's output files on a full disk.

`sharc eval --output-dir DIR` and `sharc eval --train --dump-state DIR` write
every file of DIR under a temporary name and rename them into place only when
all were written (runtime/AtomicFile.h).  Here DIR lies on a small tmpfs the
test mounts on a directory of its own and fills (or, where mounting is not
permitted, the SHARC_TEST_WRITE_LIMIT hook simulates it; see full_disk.py):
the command must fail with status 1 and "PATH: No space left on device" for
the file that did not fit, and leave the previous files byte-identical, with
no temporary file beside them.  With room again, the same command replaces
them.
"""

import pathlib
import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from test_train import mlp  # noqa: F401  (the MLP and 12 rows of data)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import full_disk  # noqa: E402

disk = pytest.fixture(params=full_disk.MODES)(full_disk.make_disk)


def run_on(sharc, monkeypatch, disk, *args):
    """Runs sharc in the environment of `disk`."""
    for name, value in disk.env().items():
        monkeypatch.setenv(name, value)
    return sharc(*args)


def assert_no_space(result, path):
    assert result.returncode == 1, (
        f"exit status {result.returncode}\nstdout:\n{result.stdout}\n"
        f"stderr:\n{result.stderr}")
    assert f"sharc: error: {path}: No space left on device" in result.stderr, result.stderr


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory):
    """(model, first input, second input): y1 = Relu(x) and y2 = Neg(x) on
    x f32[64, 64], two outputs of 16 KiB (five 4 KiB pages as .npy files)."""
    directory = tmp_path_factory.mktemp("two-outputs")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [64, 64])
               for name in ("y1", "y2")]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Neg", ["x"], ["y2"])],
        "two_outputs", [x], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = directory / "two_outputs.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(3)
    inputs = []
    for i in (1, 2):
        np.save(directory / f"x{i}.npy", rng.standard_normal((64, 64)).astype(np.float32))
        inputs.append(directory / f"x{i}.npy")
    return path, inputs[0], inputs[1]


# Free pages, and the output that no longer fits.
@pytest.mark.parametrize("free_pages,failing", [(0, "y1"), (5, "y2")])
def test_output_dir_on_a_full_disk(sharc, monkeypatch, disk, two_outputs, free_pages,
                                   failing):
    model, x1, x2 = two_outputs
    out = disk.path / "out"
    result = sharc("eval", model, "--input", f"x={x1}", "--output-dir", out)
    assert result.returncode == 0, result.stderr
    previous = full_disk.snapshot(out)
    assert sorted(previous) == ["y1.npy", "y2.npy"]

    disk.fill(free_pages * full_disk.PAGE)
    result = run_on(sharc, monkeypatch, disk, "eval", model, "--input", f"x={x2}",
                    "--output-dir", out)
    assert_no_space(result, out / f"{failing}.npy")
    assert full_disk.snapshot(out) == previous

    disk.free()
    result = run_on(sharc, monkeypatch, disk, "eval", model, "--input", f"x={x2}",
                    "--output-dir", out)
    assert result.returncode == 0, result.stderr
    assert sorted(full_disk.snapshot(out)) == ["y1.npy", "y2.npy"]
    np.testing.assert_array_equal(np.load(out / "y1.npy"), np.maximum(np.load(x2), 0))
    np.testing.assert_array_equal(np.load(out / "y2.npy"), -np.load(x2))


@pytest.mark.parametrize("free_pages", [0, 3])
def test_dump_state_on_a_full_disk(sharc, monkeypatch, disk, mlp, free_pages):
    model, inputs, _ = mlp
    state = disk.path / "state"
    train = ["eval", model, "--train", *inputs, "--dump-state", state]
    result = sharc(*train, "--steps", 1)
    assert result.returncode == 0, result.stderr
    previous = full_disk.snapshot(state)
    assert len(previous) > 3 and all(name.endswith(".npy") for name in previous
                                     if name != "sharc-state.txt")

    disk.fill(free_pages * full_disk.PAGE)
    result = run_on(sharc, monkeypatch, disk, *train, "--steps", 2)
    assert result.returncode == 1, result.stderr
    match = re.search(rf"sharc: error: {re.escape(str(state))}/(\S+\.npy): "
                      "No space left on device", result.stderr)
    assert match and match[1] in previous, result.stderr
    assert full_disk.snapshot(state) == previous

    disk.free()
    result = run_on(sharc, monkeypatch, disk, *train, "--steps", 2)
    assert result.returncode == 0, result.stderr
    replaced = full_disk.snapshot(state)
    assert sorted(replaced) == sorted(previous)
    assert replaced != previous


def test_new_directories_on_a_full_disk_are_removed(sharc, monkeypatch, disk, two_outputs,
                                                    mlp):
    """Directories that --output-dir and --dump-state create for a set that
    then fails are removed again: the disk holds what it held before."""
    model, x1, _ = two_outputs
    disk.fill(0)
    before = sorted(p.name for p in disk.path.iterdir())
    result = run_on(sharc, monkeypatch, disk, "eval", model, "--input", f"x={x1}",
                    "--output-dir", disk.path / "new" / "out")
    assert_no_space(result, disk.path / "new" / "out" / "y1.npy")
    mlp_model, inputs, _ = mlp
    result = run_on(sharc, monkeypatch, disk, "eval", mlp_model, "--train", *inputs,
                    "--dump-state", disk.path / "state")
    assert result.returncode == 1 and "No space left on device" in result.stderr, result.stderr
    assert sorted(p.name for p in disk.path.iterdir()) == before
