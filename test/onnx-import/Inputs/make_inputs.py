"""Writes the binary ONNX models of the onnx-import lit tests (the text format
of ONNX 1.12 cannot express them: names that need sanitizing, float16 and
bfloat16 initializers, external data).

    python3 test/onnx-import/Inputs/make_inputs.py

needs the `onnx` and `numpy` packages (tools/requirements-test.txt).
"""

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent


def model(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=initializers)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def external(name, data_type, dims, location, offset=None, length=None):
    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    return tensor


def main():
    f32 = lambda v: np.array(v, dtype=np.float32)
    np.save(HERE / "x.npy", f32([1, 2]))
    # Parameter names that need sanitizing, and float16/bfloat16 parameters.
    sanitize = model(
        [helper.make_node("Add", ["x", "layer.0.weight"], ["a"]),
         helper.make_node("Add", ["a", "layer_0_weight"], ["b"]),
         helper.make_node("Cast", ["0bias"], ["c"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["b", "c"], ["d"]),
         helper.make_node("Cast", ["a-b"], ["e"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["d", "e"], ["f"]),
         helper.make_node("ReduceSum", ["f"], ["y"], keepdims=0)],
        [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT)],
        [numpy_helper.from_array(f32([1, 2]), "layer.0.weight"),
         numpy_helper.from_array(f32([3, 4]), "layer_0_weight"),
         numpy_helper.from_array(np.array([0.5, 1.5], np.float16), "0bias"),
         helper.make_tensor("a-b", TensorProto.BFLOAT16, [2],
                            [1.0, 2.0])])
    onnx.save(sanitize, HERE / "sanitize.onnx")
    # A truncated protobuf.
    (HERE / "truncated.onnx").write_bytes(
        sanitize.SerializeToString()[:40])

    # External data: w (2 floats at offset 8) and shape (2 int64s, the rest
    # of the file from offset 16).
    data = (np.array([-1, -1], np.float32).tobytes() +
            f32([0.5, 0.25]).tobytes() +
            np.array([2, 1], np.int64).tobytes())
    (HERE / "external.bin").write_bytes(data)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    io = ([("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT)])
    cases = {
        "external": ("external.bin", 8, 8),
        "external-escape": ("../Inputs/external.bin", 8, 8),
        "external-absolute": ("/etc/hostname", 0, 8),
        "external-missing": ("missing.bin", 0, 8),
        "external-past-end": ("external.bin", 28, 8),
        "external-length": ("external.bin", 0, 12),
        "external-link": ("link.bin", 0, 8),
    }
    for name, (location, offset, length) in cases.items():
        onnx.save(model(*(nodes,) + io, [
            external("w", TensorProto.FLOAT, [2], location, offset, length),
            external("shape", TensorProto.INT64, [2], "external.bin", 16)]),
            HERE / f"{name}.onnx")


if __name__ == "__main__":
    main()
