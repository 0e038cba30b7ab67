"""Error paths of the sharc CLI: broken models and inputs must make `sharc
import` / `sharc eval` exit with status 1 and a clear message that names the
file (and the node where one is at fault), never crash."""

import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models

SUBCOMMANDS = ("import", "eval")


def make_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    )


def float_input(name, shape=(2, 3)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def valid_model():
    """y = relu(x + w), x: f32[2, 3] input, w: f32[2, 3] initializer."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    return make_model(nodes, [float_input("x")], [float_input("y")], [w])


def write_model(path, model):
    path.write_bytes(model.SerializeToString())
    return path


def write_x(directory):
    path = directory / "x.npy"
    np.save(path, np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    return path


def run(sharc, subcommand, model_path, inputs):
    if subcommand == "import":
        return sharc("import", model_path)
    args = []
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    return sharc("eval", model_path, *args)


def assert_clean_error(result, *names):
    """Exit status 1, an error message naming every one of `names`, and no
    crash report."""
    message = result.stderr
    assert result.returncode == 1, (
        f"exit status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{message}"
    )
    assert "error" in message.lower(), message
    for name in names:
        assert name in message, f"{name!r} not named in:\n{message}"
    assert "Stack dump" not in message and "PLEASE submit" not in message, message


def test_valid_model_is_accepted(tmp_path, sharc):
    # The baseline the broken variants below are derived from.
    path = write_model(tmp_path / "valid.onnx", valid_model())
    x = write_x(tmp_path)
    result = run(sharc, "eval", path, {"x": x})
    assert result.returncode == 0, result.stderr
    assert "y f32[2, 3]" in result.stdout, result.stdout


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_truncated_model(tmp_path, sharc, subcommand):
    case = models.make_case("mlp")
    full = tmp_path / "full.onnx"
    models.export(case, full)
    data = full.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception):
        onnx.load_from_string(path.read_bytes())
    x = tmp_path / "x.npy"
    np.save(x, case.inputs["x"].numpy())
    labels = tmp_path / "labels.npy"
    np.save(labels, case.inputs["labels"].numpy())
    result = run(sharc, subcommand, path, {"x": x, "labels": labels})
    assert_clean_error(result, "truncated.onnx")


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_random_bytes(tmp_path, sharc, subcommand):
    path = tmp_path / "noise.onnx"
    path.write_bytes(random.Random(1234).randbytes(4096))
    with pytest.raises(Exception):
        onnx.load_from_string(path.read_bytes())
    result = run(sharc, subcommand, path, {"x": write_x(tmp_path)})
    assert_clean_error(result, "noise.onnx")


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_cycle(tmp_path, sharc, subcommand):
    # a = x + b; b = relu(a): neither node can run first.
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="cycle_add"),
        helper.make_node("Relu", ["a"], ["b"], name="cycle_relu"),
    ]
    model = make_model(nodes, [float_input("x")], [float_input("b")])
    path = write_model(tmp_path / "cyclic.onnx", model)
    result = run(sharc, subcommand, path, {"x": write_x(tmp_path)})
    assert_clean_error(result, "cyclic.onnx")
    assert "cycle_add" in result.stderr or "cycle_relu" in result.stderr, result.stderr


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_undefined_node_input(tmp_path, sharc, subcommand):
    nodes = [helper.make_node("Add", ["x", "ghost_value"], ["y"], name="lonely_add")]
    model = make_model(nodes, [float_input("x")], [float_input("y")])
    path = write_model(tmp_path / "undefined.onnx", model)
    result = run(sharc, subcommand, path, {"x": write_x(tmp_path)})
    assert_clean_error(result, "undefined.onnx", "lonely_add", "ghost_value")


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_unknown_op(tmp_path, sharc, subcommand):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="fine_relu"),
        helper.make_node("FrobnicateTensor", ["r"], ["y"], name="frob_node"),
    ]
    model = make_model(nodes, [float_input("x")], [float_input("y")])
    path = write_model(tmp_path / "unknown_op.onnx", model)
    result = run(sharc, subcommand, path, {"x": write_x(tmp_path)})
    assert_clean_error(result, "unknown_op.onnx", "frob_node", "FrobnicateTensor")


def test_missing_graph_input_value(tmp_path, sharc):
    nodes = [helper.make_node("Add", ["x", "second_input"], ["y"], name="add")]
    model = make_model(
        nodes, [float_input("x"), float_input("second_input")], [float_input("y")]
    )
    path = write_model(tmp_path / "two_inputs.onnx", model)
    result = run(sharc, "eval", path, {"x": write_x(tmp_path)})
    assert_clean_error(result, "second_input")


def write_truncated_npy(path):
    np.save(path, np.ones((2, 3), dtype=np.float32))
    data = path.read_bytes()
    path.write_bytes(data[:-7])


def write_garbage_npy(path):
    path.write_bytes(b"this is not a numpy file\n" * 4)


def write_bad_header_npy(path):
    # Valid magic and version, a header that is not a dict literal.
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3"
    header = header.ljust(118) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)


def write_uint8_npy(path):
    np.save(path, np.ones((2, 3), dtype=np.uint8))


@pytest.mark.parametrize(
    "writer",
    [write_truncated_npy, write_garbage_npy, write_bad_header_npy, write_uint8_npy],
    ids=["truncated", "garbage", "bad-header", "uint8"],
)
def test_malformed_npy_input(tmp_path, sharc, writer):
    model_path = write_model(tmp_path / "valid.onnx", valid_model())
    bad = tmp_path / "bad_input.npy"
    writer(bad)
    result = run(sharc, "eval", model_path, {"x": bad})
    assert_clean_error(result, "bad_input.npy")
