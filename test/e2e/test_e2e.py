"""End-to-end comparison with PyTorch.

Each model of models.py is exported to ONNX at test time, its example inputs
are written as .npy files, and the loss printed by `sharc eval` (the reference
evaluator) must match PyTorch's loss on the same inputs.
"""

import importlib.util
import pathlib
import re

import numpy as np
import onnx
import pytest

import models

LOSS_LINE = re.compile(r"^loss = (\S+)\s*$", re.MULTILINE)
PARAM_ATTR = re.compile(r'#sharc\.param<"[^"]*", "([^"]*)">')


@pytest.fixture(scope="module", params=models.MODEL_NAMES)
def exported(request, tmp_path_factory):
    """(case, model path, {input name: .npy path}, work directory)."""
    case = models.make_case(request.param)
    directory = tmp_path_factory.mktemp(case.name)
    path = directory / f"{case.name}.onnx"
    models.export(case, path)
    inputs = models.save_inputs(case, directory)
    return case, path, inputs, directory


def input_args(inputs):
    args = []
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    return args


def test_loss_matches_pytorch(exported, sharc):
    case, path, inputs, directory = exported
    expected = models.reference_loss(case)
    out_dir = directory / "outputs"
    result = sharc("eval", path, *input_args(inputs), "--output-dir", out_dir)
    assert result.returncode == 0, result.stderr
    match = LOSS_LINE.search(result.stdout)
    assert match, f"no 'loss = VALUE' line in:\n{result.stdout}"
    printed = float(match.group(1))
    assert printed == pytest.approx(expected, rel=1e-5), (
        f"{case.name}: sharc {printed!r}, PyTorch {expected!r}"
    )

    # The written output holds the same float32 scalar: nine significant
    # digits identify a float32 exactly.
    written = np.load(out_dir / "loss.npy")
    assert written.dtype == np.float32 and written.shape == ()
    assert np.float32(printed) == written


def test_import_has_one_parameter_per_float_initializer(exported, sharc):
    case, path, inputs, directory = exported
    result = sharc("import", path)
    assert result.returncode == 0, result.stderr
    assert "func.func @main" in result.stdout
    model = onnx.load(str(path))
    floats = {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
    }
    initializers = [t.name for t in model.graph.initializer if t.data_type in floats]
    assert initializers
    signature = result.stdout[result.stdout.index("func.func @main") :]
    signature = signature[: signature.index("{\n")]
    # #sharc.param<"sanitized name", "ONNX initializer name">
    sources = PARAM_ATTR.findall(signature)
    assert sorted(sources) == sorted(initializers), signature


def test_bundled_example(sharc):
    """test/models/tiny-gpt.onnx (written by make_example.py) still evaluates
    to PyTorch's loss for the model models.py builds from the same seed."""
    directory = pathlib.Path(__file__).resolve().parents[1] / "models"
    spec = importlib.util.spec_from_file_location(
        "make_example", directory / "make_example.py"
    )
    make_example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_example)
    case = models.make_case("gpt", seed=0, gpt_config=make_example.CONFIG)
    tokens = np.load(directory / "tiny-gpt-tokens.npy")
    targets = np.load(directory / "tiny-gpt-targets.npy")
    assert np.array_equal(tokens, case.inputs["tokens"].numpy())
    assert np.array_equal(targets, case.inputs["targets"].numpy())
    result = sharc(
        "eval",
        directory / "tiny-gpt.onnx",
        "--input",
        f"tokens={directory / 'tiny-gpt-tokens.npy'}",
        "--input",
        f"targets={directory / 'tiny-gpt-targets.npy'}",
    )
    assert result.returncode == 0, result.stderr
    match = LOSS_LINE.search(result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) == pytest.approx(models.reference_loss(case), rel=1e-5)
