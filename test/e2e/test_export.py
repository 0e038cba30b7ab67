"""sharc export (docs/checkpoints.md, "The trained model, out"): a GPT trained
at ZeRO stage 3 on two ranks (every parameter partitioned, each rank saving
its slices) is written back as ONNX with its trained weights.  onnxruntime
runs the file and gives the loss that sharc's evaluator computes on the
original model with the trained weights as inputs; the initializers are the
consolidated checkpoint's arrays; external data works the same; a checkpoint
of another model and an output that is the model itself are refused."""

import re
import shutil
import subprocess
import types

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime
import pytest

import models
from conftest import sharc_path

RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01"]
STAGE3 = ["--world-size", 2, "--zero-stage", 3,
          "--param-persistence-threshold", 0]
LOSS = re.compile(r"^loss = (\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    cases = {}
    for name in ("gpt", "mlp"):
        (root / name).mkdir()
        path = root / name / f"{name}.onnx"
        case = models.make_training_case(name)
        models.export(case, path)
        data, inputs = models.write_data(name, 37, 5, root / name)
        # One micro-batch (the model's static batch) for inference.
        feeds = {key: value[:case.inputs[key].shape[0]].numpy()
                 for key, value in data.items()}
        cases[name] = types.SimpleNamespace(path=path, inputs=inputs,
                                            feeds=feeds)
    gpt = cases["gpt"]
    sharc = str(sharc_path())
    program = root / "zero3"
    result = subprocess.run([sharc, "compile", str(gpt.path), *RECIPE,
                             *map(str, STAGE3), "-o", str(program)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    launcher = shutil.which("mpirun")
    result = subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         str(program / "train"), *gpt.inputs, "--steps", "4", "--save-dir",
         str(root / "checkpoints")], capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stderr
    checkpoint = root / "checkpoints" / "step-00000004"
    assert any(checkpoint.glob("rank-1-of-2/*.npy"))
    consolidated = root / "consolidated"
    result = subprocess.run([sharc, "consolidate", str(checkpoint), "-o",
                             str(consolidated)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return types.SimpleNamespace(root=root, cases=cases, checkpoint=checkpoint,
                                 consolidated=consolidated)


def onnxruntime_loss(path, feeds):
    session = onnxruntime.InferenceSession(str(path),
                                           providers=["CPUExecutionProvider"])
    return float(session.run(["loss"], feeds)[0])


def evaluator_loss(sharc, path, feeds, directory, parameters=()):
    """sharc eval's loss of the model at `path` on `feeds`, with the
    parameters given as NAME=FILE.npy overriding its initializers."""
    args = []
    for name, value in feeds.items():
        file = directory / f"feed-{name}.npy"
        np.save(file, value)
        args.append(f"--input={name}={file}")
    result = sharc("eval", path, *args, *[f"--input={p}" for p in parameters])
    assert result.returncode == 0, result.stderr
    return float(LOSS.search(result.stdout).group(1))


def float_initializers(model):
    return {init.name: numpy_helper.to_array(init)
            for init in model.graph.initializer
            if init.data_type == onnx.TensorProto.FLOAT}


@pytest.mark.parametrize("external", [False, True])
def test_exported_model_runs_in_onnxruntime(sharc, trained, tmp_path,
                                            external):
    gpt = trained.cases["gpt"]
    out = tmp_path / "trained.onnx"
    result = sharc("export", trained.checkpoint, "--model", gpt.path, "-o",
                   out, *(["--external-data"] if external else []))
    assert result.returncode == 0, result.stderr
    assert f"sharc: wrote {out}: " in result.stdout
    assert "(step 4)" in result.stdout
    data = tmp_path / "trained.onnx.data"
    assert data.exists() == external
    onnx.checker.check_model(str(out))

    # The initializers are the trained (consolidated) values, bit for bit,
    # and every one of the original model's is there.
    exported = float_initializers(onnx.load(str(out)))
    original = float_initializers(onnx.load(str(gpt.path)))
    assert sorted(exported) == sorted(original)
    changed = 0
    for name, value in exported.items():
        whole = np.load(trained.consolidated / f"{name}.npy")
        assert value.shape == whole.shape, name
        assert value.tobytes() == whole.tobytes(), name
        changed += not np.array_equal(value, original[name])
    assert changed > len(exported) // 2

    # onnxruntime on the file = the evaluator on the original model with the
    # trained weights as inputs; both differ from the untrained loss.
    runtime = onnxruntime_loss(out, gpt.feeds)
    parameters = [f"{name}={trained.consolidated / (name + '.npy')}"
                  for name in exported]
    evaluated = evaluator_loss(sharc, gpt.path, gpt.feeds, tmp_path,
                               parameters)
    np.testing.assert_allclose(runtime, evaluated, rtol=1e-5)
    assert abs(runtime - onnxruntime_loss(gpt.path, gpt.feeds)) > 1e-4


def test_export_refusals(sharc, trained, tmp_path):
    """A checkpoint of another model, an output that is the model itself and
    a missing state are refused, and nothing is written."""
    gpt, mlp = trained.cases["gpt"], trained.cases["mlp"]
    other = tmp_path / "mlp-checkpoints"
    result = sharc("eval", mlp.path, "--train", *RECIPE, *mlp.inputs,
                   "--save-dir", other)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "trained.onnx"
    result = sharc("export", other / "step-00000001", "--model", gpt.path,
                   "-o", out)
    assert result.returncode == 1
    assert str(gpt.path) in result.stderr
    assert "saved from another model" in result.stderr, result.stderr
    assert not out.exists()

    before = gpt.path.read_bytes()
    result = sharc("export", trained.checkpoint, "--model", gpt.path, "-o",
                   gpt.path)
    assert result.returncode == 1
    assert "is the model itself" in result.stderr, result.stderr
    assert gpt.path.read_bytes() == before

    missing = tmp_path / "missing"
    result = sharc("export", missing, "--model", gpt.path, "-o", out)
    assert result.returncode == 1
    assert str(missing) in result.stderr, result.stderr
    assert not out.exists()
