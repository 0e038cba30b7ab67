"""Gradients of ONNX operators that sharc imports as compositions of its own
ops (frontends/onnx/OpImporters.cpp), against PyTorch's autograd.

ONNX's node tests (the onnx-backend test) check each operator's forward
values; here each one is trained: a model whose parameters P (and, where
the operator has a second float input, Q) go through the operator, times a
data input X, summed into the loss.  `sharc eval --train --dump-grads` gives
the first step's gradients, which must equal autograd's through the same
function written with torch ops (relative error below 1e-5 in float32).
The parameter values stay away from kinks and ties (|p| in [0.2, 1.5] and
distinct), where the gradient is not defined.  Forward values that ONNX's
node tests do not reach (NaNs, ties, halves, signs) are compared with
numpy's.  A few of the models are also compiled, and the CPU binary must
print the evaluator's step lines."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

F = torch.nn.functional
SHAPE = (3, 4)


def unary(op, torch_fn, **attrs):
    return dict(op=op, inputs=1, attrs=attrs, torch=torch_fn)


def reduction(op, torch_fn, axes=(1,), keepdims=1):
    return dict(op=op, inputs=1, attrs=dict(axes=list(axes),
                                            keepdims=keepdims),
                torch=torch_fn, reduced=(axes, keepdims))


CASES = {
    "Elu": unary("Elu", lambda p: F.elu(p, 0.7), alpha=0.7),
    "Selu": unary("Selu", F.selu),
    "Celu": unary("Celu", lambda p: F.celu(p, 0.8), alpha=0.8),
    "HardSigmoid": unary("HardSigmoid",
                         lambda p: torch.clamp(0.3 * p + 0.4, 0, 1),
                         alpha=0.3, beta=0.4),
    "HardSwish": unary("HardSwish", F.hardswish),
    "Softsign": unary("Softsign", F.softsign),
    "ThresholdedRelu": unary("ThresholdedRelu",
                             lambda p: torch.where(p > 0.3, p, 0.0),
                             alpha=0.3),
    "Shrink": unary("Shrink", lambda p: torch.where(
        p < -0.3, p + 0.1, torch.where(p > 0.3, p - 0.1, 0.0)),
        lambd=0.3, bias=0.1),
    "Sin": unary("Sin", torch.sin),
    "Cos": unary("Cos", torch.cos),
    "Tan": unary("Tan", torch.tan),
    "Sinh": unary("Sinh", torch.sinh),
    # The inverse functions, at parameters inside their domains (`values`).
    "Asin": dict(unary("Asin", torch.asin), values=lambda p: p * 0.6),
    "Acos": dict(unary("Acos", torch.acos), values=lambda p: p * 0.6),
    "Atan": unary("Atan", torch.atan),
    "Asinh": unary("Asinh", torch.asinh),
    "Acosh": dict(unary("Acosh", torch.acosh),
                  values=lambda p: np.abs(p) + 1.1),
    "Atanh": dict(unary("Atanh", torch.atanh), values=lambda p: p * 0.6),
    "Cosh": unary("Cosh", torch.cosh),
    "PRelu": dict(op="PRelu", inputs=2, attrs={}, second=(4,),
                  torch=lambda p, q: torch.where(p < 0, q * p, p)),
    "Sum": dict(op="Sum", inputs=2, attrs={}, second=SHAPE,
                torch=lambda p, q: p + q),
    "Mean": dict(op="Mean", inputs=2, attrs={}, second=SHAPE,
                 torch=lambda p, q: (p + q) / 2),
    "ReduceMin": reduction("ReduceMin",
                           lambda p: torch.amin(p, 1, keepdim=True)),
    "ReduceSumSquare": reduction("ReduceSumSquare",
                                 lambda p: (p * p).sum(1, keepdim=True)),
    "ReduceL1": reduction("ReduceL1", lambda p: p.abs().sum(1, keepdim=True)),
    "ReduceL2": reduction("ReduceL2",
                          lambda p: p.norm(dim=1, keepdim=True)),
    "ReduceLogSum": reduction("ReduceLogSum",
                              lambda p: p.abs().sum(1, keepdim=True).log(),
                              axes=(1,)),
    "ReduceLogSumExp": reduction("ReduceLogSumExp",
                                 lambda p: torch.logsumexp(p, 0),
                                 axes=(0,), keepdims=0),
    # Operators with constant integer inputs (`consts`, after P).
    "CumSum": dict(op="CumSum", inputs=1, attrs={},
                   consts=[np.array(1)], torch=lambda p: torch.cumsum(p, 1)),
    "CumSumReverseExclusive": dict(
        op="CumSum", inputs=1, attrs=dict(reverse=1, exclusive=1),
        consts=[np.array(0)],
        torch=lambda p: torch.flip(torch.cumsum(torch.flip(p, [0]), 0),
                                   [0]) - p),
    "GatherND": dict(op="GatherND", inputs=1, attrs={},
                     consts=[np.array([[0, 1], [2, -1], [0, 1]])],
                     torch=lambda p: p[[0, 2, 0], [1, 3, 1]]),
    "GatherElements": dict(
        op="GatherElements", inputs=1, attrs=dict(axis=1),
        consts=[np.array([[0, 0, 3], [1, 2, 2], [3, -1, 0]])],
        torch=lambda p: torch.gather(
            p, 1, torch.tensor([[0, 0, 3], [1, 2, 2], [3, 3, 0]]))),
    # Scatter: the gradients of data (where not overwritten) and updates.
    "ScatterElements": dict(
        op="ScatterElements", inputs=2, attrs=dict(axis=1), second=(3, 2),
        consts_between=[np.array([[0, 3], [2, 1], [-1, 0]])],
        torch=lambda p, q: p.scatter(
            1, torch.tensor([[0, 3], [2, 1], [3, 0]]), q)),
    "ScatterNDAdd": dict(
        op="ScatterND", inputs=2, attrs=dict(reduction="add"), second=(3, 4),
        consts_between=[np.array([[2], [0], [2]])],
        torch=lambda p, q: p.index_add(0, torch.tensor([2, 0, 2]), q)),
    "PadConstant": dict(
        op="Pad", inputs=1, attrs={},
        consts=[np.array([0, 1, 1, 2]), np.array(0.5, dtype=np.float32)],
        torch=lambda p: F.pad(p, (1, 2, 0, 1), value=0.5)),
    "PadReflect": dict(
        op="Pad", inputs=1, attrs=dict(mode="reflect"),
        consts=[np.array([0, 2, 0, 1])],
        torch=lambda p: F.pad(p[None], (2, 1), mode="reflect")[0]),
    "Tile": dict(op="Tile", inputs=1, attrs={}, consts=[np.array([2, 3])],
                 torch=lambda p: p.repeat(2, 3)),
    "InstanceNormalization": dict(
        op="InstanceNormalization", inputs=1, attrs=dict(epsilon=1e-3),
        shape=(2, 3, 4), consts=[np.array([0.5, -1.0, 2.0], np.float32),
                                 np.array([0.1, 0.2, -0.3], np.float32)],
        torch=lambda p: F.instance_norm(
            p, weight=torch.tensor([0.5, -1.0, 2.0]),
            bias=torch.tensor([0.1, 0.2, -0.3]), eps=1e-3)),
    "MeanVarianceNormalization": dict(
        op="MeanVarianceNormalization", inputs=1, attrs=dict(axes=[1]),
        torch=lambda p: (p - p.mean(1, keepdim=True)) / p.var(
            1, unbiased=False, keepdim=True).sqrt()),
    "DepthToSpaceCRD": dict(
        op="DepthToSpace", inputs=1, attrs=dict(blocksize=2, mode="CRD"),
        shape=(1, 8, 2, 3), torch=lambda p: F.pixel_shuffle(p, 2)),
    # Resize (roi, scales, sizes after P) against F.interpolate, whose
    # bilinear and bicubic are ONNX's half_pixel linear and cubic (A -0.75)
    # with the taps clamped into the image, and whose nearest is asymmetric
    # floor.
    "ResizeLinear": dict(
        op="Resize", inputs=1, attrs=dict(mode="linear"), shape=(1, 2, 3, 4),
        consts=[np.zeros(0, np.float32),
                np.array([1, 1, 2, 1.5], np.float32)],
        torch=lambda p: F.interpolate(p, scale_factor=(2, 1.5),
                                      mode="bilinear", align_corners=False)),
    "ResizeCubicDown": dict(
        op="Resize", inputs=1, attrs=dict(mode="cubic"), shape=(1, 1, 6, 5),
        consts=[np.zeros(0, np.float32),
                np.array([1, 1, 0.5, 0.8], np.float32)],
        torch=lambda p: F.interpolate(p, scale_factor=(0.5, 0.8),
                                      mode="bicubic", align_corners=False)),
    "ResizeNearest": dict(
        op="Resize", inputs=1,
        attrs=dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor"),
        shape=(1, 2, 3, 4),
        consts=[np.zeros(0, np.float32), np.array([1, 1, 2, 3], np.float32)],
        torch=lambda p: F.interpolate(p, scale_factor=(2, 3), mode="nearest")),
    "ResizeLinearAlignCornersSizes": dict(
        op="Resize", inputs=1,
        attrs=dict(mode="linear", coordinate_transformation_mode="align_corners"),
        shape=(1, 2, 3, 4),
        consts=[np.zeros(0, np.float32), np.zeros(0, np.float32),
                np.array([1, 2, 5, 7])],
        torch=lambda p: F.interpolate(p, size=(5, 7), mode="bilinear",
                                      align_corners=True)),
    # ConvTranspose (X and W both parameters): F.conv_transpose2d, strided,
    # padded, with output padding and two groups.
    "ConvTranspose": dict(
        op="ConvTranspose", inputs=2,
        attrs=dict(strides=[2, 2], pads=[1, 0, 1, 0], output_padding=[1, 1],
                   group=2),
        shape=(1, 2, 3, 3), second=(2, 3, 3, 2),
        torch=lambda p, q: F.conv_transpose2d(
            p, q, stride=2, padding=(1, 0), output_padding=1, groups=2)),
    # Einsum: the patterns exporters emit (batched and attention products,
    # broadcast "...", implicit outputs, outer products) and diagonals.
    "EinsumBatchMatmul": dict(
        op="Einsum", inputs=2, attrs=dict(equation="bij,bjk->bik"),
        shape=(2, 3, 4), second=(2, 4, 5),
        torch=lambda p, q: torch.einsum("bij,bjk->bik", p, q)),
    "EinsumAttention": dict(
        op="Einsum", inputs=2, attrs=dict(equation="bhqd,bhkd->bhqk"),
        shape=(1, 2, 3, 4), second=(1, 2, 5, 4),
        torch=lambda p, q: torch.einsum("bhqd,bhkd->bhqk", p, q)),
    "EinsumBroadcastEllipsis": dict(
        op="Einsum", inputs=2, attrs=dict(equation="...ij,jk->...ik"),
        shape=(2, 3, 4), second=(4, 5),
        torch=lambda p, q: torch.einsum("...ij,jk->...ik", p, q)),
    "EinsumImplicit": dict(
        op="Einsum", inputs=2, attrs=dict(equation="ij,jk"),
        shape=(3, 4), second=(4, 2),
        torch=lambda p, q: torch.einsum("ij,jk", p, q)),
    "EinsumOuterSum": dict(
        op="Einsum", inputs=2, attrs=dict(equation="ia,j->ij"),
        shape=(3, 4), second=(5,),
        torch=lambda p, q: torch.einsum("ia,j->ij", p, q)),
    "EinsumDiagonal": dict(
        op="Einsum", inputs=1, attrs=dict(equation="bii->bi"),
        shape=(2, 3, 3), torch=lambda p: torch.einsum("bii->bi", p)),
    "EinsumTrace": dict(
        op="Einsum", inputs=1, attrs=dict(equation="bii->b"), shape=(2, 4, 4),
        torch=lambda p: torch.einsum("bii->b", p)),
    "LRN": dict(
        op="LRN", inputs=1, attrs=dict(size=3, alpha=0.3, beta=0.6, bias=1.5),
        shape=(2, 4, 3),
        torch=lambda p: F.local_response_norm(p, 3, alpha=0.3, beta=0.6,
                                              k=1.5)),
    "ReduceProd": reduction("ReduceProd",
                            lambda p: torch.prod(p, 1, keepdim=True)),
    "ReduceProdOddAxes": dict(
        op="ReduceProd", inputs=1, attrs=dict(axes=[0, 2], keepdims=0),
        shape=(3, 2, 5), torch=lambda p: torch.prod(torch.prod(p, 2), 0)),
    "TopK": dict(op="TopK", inputs=1, attrs=dict(axis=1),
                 consts=[np.array([3])], outputs=["I"],
                 torch=lambda p: torch.topk(p, 3, 1).values),
    "TopKSmallest": dict(op="TopK", inputs=1, attrs=dict(axis=0, largest=0),
                         consts=[np.array([2])], outputs=["I"],
                         torch=lambda p: torch.topk(p, 2, 0,
                                                    largest=False).values),
    "Compress": dict(op="Compress", inputs=1, attrs=dict(axis=1),
                     consts=[np.array([True, False, True, True])],
                     torch=lambda p: p[:, [0, 2, 3]]),
    "ReverseSequence": dict(
        op="ReverseSequence", inputs=1, attrs=dict(time_axis=0, batch_axis=1),
        shape=(4, 3), consts=[np.array([2, 4, 1])],
        torch=lambda p: torch.stack([
            torch.cat([p[:n, b].flip(0), p[n:, b]])
            for b, n in enumerate([2, 4, 1])], 1)),
    # DFT (axis 1) of a real and of a complex signal, one-sided, inverse.
    "DFT": dict(op="DFT", inputs=1, attrs=dict(axis=1), shape=(2, 5, 1),
                torch=lambda p: torch.view_as_real(
                    torch.fft.fft(p[..., 0], dim=1))),
    "DFTOnesided": dict(op="DFT", inputs=1, attrs=dict(axis=1, onesided=1),
                        shape=(2, 6, 1), torch=lambda p: torch.view_as_real(
                            torch.fft.rfft(p[..., 0], dim=1))),
    "DFTInverseComplex": dict(
        op="DFT", inputs=1, attrs=dict(axis=1, inverse=1), shape=(2, 5, 2),
        torch=lambda p: torch.view_as_real(
            torch.fft.ifft(torch.view_as_complex(p), dim=1))),
    # GridSample (X and the grid both parameters; grid points beyond
    # [-1, 1] exercise the padding) against F.grid_sample.
    "GridSampleBilinear": dict(
        op="GridSample", inputs=2, attrs={}, shape=(1, 2, 3, 4),
        second=(1, 2, 3, 2),
        torch=lambda p, q: F.grid_sample(p, q, align_corners=False)),
    "GridSampleBorderAligned": dict(
        op="GridSample", inputs=2,
        attrs=dict(padding_mode="border", align_corners=1),
        shape=(2, 1, 4, 3), second=(2, 3, 2, 2),
        torch=lambda p, q: F.grid_sample(p, q, padding_mode="border",
                                         align_corners=True)),
    "GridSampleBicubicReflection": dict(
        op="GridSample", inputs=2,
        attrs=dict(mode="bicubic", padding_mode="reflection"),
        shape=(1, 2, 4, 5), second=(1, 3, 2, 2),
        torch=lambda p, q: F.grid_sample(p, q, mode="bicubic",
                                         padding_mode="reflection",
                                         align_corners=False)),
    # GroupNormalization: scale and bias per channel (opset 21), per group
    # (opset 18).
    "GroupNormalization": dict(
        op="GroupNormalization", inputs=1, opset=21,
        attrs=dict(num_groups=2, epsilon=1e-3), shape=(2, 4, 3),
        consts=[np.array([0.5, -1.0, 2.0, 1.5], np.float32),
                np.array([0.1, 0.2, -0.3, 0.4], np.float32)],
        torch=lambda p: F.group_norm(
            p, 2, weight=torch.tensor([0.5, -1.0, 2.0, 1.5]),
            bias=torch.tensor([0.1, 0.2, -0.3, 0.4]), eps=1e-3)),
    "GroupNormalizationPerGroup": dict(
        op="GroupNormalization", inputs=1, opset=18, deprecated=True,
        attrs=dict(num_groups=2), shape=(2, 4, 3),
        consts=[np.array([0.5, -1.0], np.float32),
                np.array([0.1, -0.3], np.float32)],
        torch=lambda p: F.group_norm(
            p, 2, weight=torch.tensor([0.5, 0.5, -1.0, -1.0]),
            bias=torch.tensor([0.1, 0.1, -0.3, -0.3]))),
    "PadEdge": dict(
        op="Pad", inputs=1, attrs=dict(mode="edge"),
        consts=[np.array([1, 0, 2, 0])],
        torch=lambda p: F.pad(p.T[None], (1, 2), mode="replicate")[0].T),
}


def parameter_values(shape, seed):
    """Distinct values with |v| in [0.2, 1.5], mixed signs."""
    generator = np.random.default_rng(seed)
    count = int(np.prod(shape))
    magnitudes = np.linspace(0.2, 1.5, count)
    generator.shuffle(magnitudes)
    signs = generator.choice([-1.0, 1.0], count)
    return (magnitudes * signs).reshape(shape).astype(np.float32)


def constant_nodes(prefix, values, names):
    """Constant nodes holding `values` (a float initializer would be a
    parameter), named PREFIX0, PREFIX1, ..., appended to `names`."""
    nodes = []
    for index, value in enumerate(values):
        name = f"{prefix}{index}"
        nodes.append(helper.make_node(
            "Constant", [], [name],
            value=numpy_helper.from_array(np.asarray(value), name)))
        names.append(name)
    return nodes


def build(case, path, p, q):
    """P (and Q) -> op -> times X -> ReduceSum -> loss."""
    initializers = [numpy_helper.from_array(p, "P")]
    op_inputs = ["P"]
    # Constant inputs between P and Q (a Scatter's indices).
    between = constant_nodes("B", case.get("consts_between", []), op_inputs)
    if case["inputs"] == 2:
        initializers.append(numpy_helper.from_array(q, "Q"))
        op_inputs.append("Q")
    # Constant inputs after them (and `outputs`, more outputs of the op).
    constants = constant_nodes("C", case.get("consts", []), op_inputs)
    out_shape = list(case["torch"](*(torch.from_numpy(v) for v in
                                     ([p, q] if case["inputs"] == 2 else [p])
                                     )).shape)
    nodes = between + constants + [
             helper.make_node(case["op"], op_inputs,
                              ["Y"] + case.get("outputs", []),
                              **case["attrs"]),
             helper.make_node("Mul", ["Y", "X"], ["Z"]),
             helper.make_node("ReduceSum", ["Z"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, case["op"].lower(),
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, out_shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializers)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", case.get("opset", 17))])
    # onnx 1.23's checker refuses GroupNormalization-18, deprecated since
    # 21 (models of opsets 18 to 20 hold it).
    if not case.get("deprecated"):
        onnx.checker.check_model(model)
    onnx.save(model, path)
    return out_shape


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_autograd(sharc, tmp_path, name):
    case = CASES[name]
    p = parameter_values(case.get("shape", SHAPE), 1)
    if name == "ReduceLogSum":
        p = np.abs(p)
    p = case.get("values", lambda v: v)(p).astype(np.float32)
    q = parameter_values(case.get("second", SHAPE), 2)
    path = tmp_path / f"{name}.onnx"
    out_shape = build(case, path, p, q)
    x = np.random.default_rng(3).uniform(0.5, 1.5, out_shape)
    x = x.astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    grads = tmp_path / "grads"
    result = sharc("eval", path, "--train", "--steps", 1, "--optimizer", "sgd",
                   "--input", f"X={tmp_path / 'x.npy'}", "--dump-grads", grads)
    assert result.returncode == 0, result.stderr

    params = [torch.tensor(p, requires_grad=True)]
    if case["inputs"] == 2:
        params.append(torch.tensor(q, requires_grad=True))
    loss = (case["torch"](*params) * torch.from_numpy(x)).sum()
    loss.backward()
    for label, param in zip("PQ", params):
        expected = param.grad.numpy()
        actual = np.load(grads / f"{label}.npy")
        assert actual.shape == expected.shape, label
        error = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
        assert error < 1e-5, f"{name}: gradient of {label}: {error:.3g}"


# Values the node tests do not reach: (op, attrs, inputs (name -> array; the
# constant ones are Constant nodes), numpy's result).
NAN = np.float32("nan")
FORWARD = {
    # A NaN is the maximum (numpy: the first NaN), ties go to the first
    # index, or the last with select_last_index.
    "ArgMaxNaN": ("ArgMax", dict(axis=1, keepdims=0),
                  {"X": np.array([[1, NAN, 3, NAN], [2, 5, 5, 1]], np.float32)},
                  {}, lambda x: np.argmax(x, 1)),
    "ArgMinLast": ("ArgMin", dict(axis=1, keepdims=1, select_last_index=1),
                   {"X": np.array([[4, 1, 1, 7], [0, 2, 0, 0]], np.int64)},
                   {}, lambda x: 3 - np.argmin(x[:, ::-1], 1)[:, None]),
    "RoundHalvesToEven": ("Round", {},
                          {"X": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5,
                                          2.4999998, -3.7, NAN], np.float32)},
                          {}, np.round),
    "ModPythonSign": ("Mod", {},
                      {"X": np.array([-7, 7, -7, 7, 0], np.int64),
                       "D": np.array([3, -3, -3, 3, 5], np.int64)},
                      {}, np.mod),
    "ModFmod": ("Mod", dict(fmod=1),
                {"X": np.array([-7.5, 7.5, -7.5, 5.0], np.float32),
                 "D": np.array([2.0, -2.0, -2.0, 2.5], np.float32)},
                {}, np.fmod),
    "OneHotNegative": ("OneHot", dict(axis=0),
                       {"X": np.array([0, -1, 2, 5], np.int64)},
                       {"depth": np.array(3, np.int64),
                        "values": np.array([-1.0, 4.0], np.float32)},
                       lambda x: np.where(
                           np.arange(3)[:, None] == np.where(x < 0, x + 3, x),
                           4.0, -1.0).astype(np.float32)),
}


@pytest.mark.parametrize("name", FORWARD)
def test_values_match_numpy(sharc, tmp_path, name):
    op, attrs, data, constants, expected_fn = FORWARD[name]
    nodes = [helper.make_node("Constant", [], [key],
                              value=numpy_helper.from_array(value, key))
             for key, value in constants.items()]
    nodes.append(helper.make_node(op, [*data, *constants], ["Y"], **attrs))
    expected = np.asarray(expected_fn(*data.values()))
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(
            key, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for key, value in data.items()],
        [helper.make_tensor_value_info(
            "Y", helper.np_dtype_to_tensor_dtype(
                np.dtype(np.int64) if op.startswith("Arg") else expected.dtype),
            expected.shape)])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    args = []
    for key, value in data.items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--input", f"{key}={tmp_path / f'{key}.npy'}"]
    result = sharc("eval", path, *args, "--output-dir", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "Y.npy"),
                                  expected)


# The composed operators added for real models, compiled: the CPU binary's
# step lines must be the evaluator's (SGD, two steps, one rank).
COMPILED = ["ReduceProdOddAxes", "TopK", "Compress", "ReverseSequence",
            "DFTOnesided", "GridSampleBicubicReflection", "GroupNormalization",
            "CumSum", "EinsumBatchMatmul", "ResizeLinear"]


@pytest.mark.parametrize("name", COMPILED)
def test_binary_matches_evaluator(sharc, tmp_path, name):
    from binaries import run_binary, step_lines
    case = CASES[name]
    p = parameter_values(case.get("shape", SHAPE), 1)
    q = parameter_values(case.get("second", SHAPE), 2)
    path = tmp_path / f"{name}.onnx"
    out_shape = build(case, path, p, q)
    x = np.random.default_rng(3).uniform(0.5, 1.5, out_shape)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    data = ["--input", f"X={tmp_path / 'x.npy'}"]
    recipe = ["--optimizer", "sgd", "--lr", "0.1"]
    evaluator = sharc("eval", path, "--train", "--steps", 2, *recipe, *data)
    assert evaluator.returncode == 0, evaluator.stderr
    out = tmp_path / "out"
    compiled = sharc("compile", path, *recipe, "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    assert step_lines(run_binary(out, 1, *data, "--steps", 2)) == \
        step_lines(evaluator.stdout)
