#!/usr/bin/env python3
"""Exports a GPT-style training graph of any size as ONNX, for planning.

The graph is the GPT of test/e2e/models.py (token and position embeddings,
pre-LayerNorm blocks of causal self-attention and a tanh-GELU MLP, a final
LayerNorm, an untied LM head, the mean next-token cross-entropy as the single
output `loss`), written with onnx.helper at opset 17, so that no framework has
to hold its weights.

    tools/export-gpt-shapes.py --layers 50 --dim 4096 --heads 32 \\
        --vocab 50304 --seq 1024 --batch 1 -o gpt-10b.onnx
    sharc compile gpt-10b.onnx --plan --world-size 8 --zero-stage 2 ...

--weights none (the default) writes no weights: every initializer is declared
with its shape and points at external data in a file that does not exist
(`<OUT>.weights`), so the model is a few hundred kilobytes at any size;
`sharc compile --plan` reads only the shapes, anything that needs the values
reports the missing file.  --weights random writes random weights inline
(N(0, 0.02), LayerNorm weights 1 and biases 0) for models small enough to
train, so that the graph itself can be checked against onnxruntime.

It prints the parameter count.
"""

import argparse
import math
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def build(args, out_path):
    batch, seq, dim, heads = args.batch, args.seq, args.dim, args.heads
    if dim % heads:
        raise SystemExit(f"--dim {dim} is not a multiple of --heads {heads}")
    head_dim = dim // heads
    rng = np.random.default_rng(args.seed)
    initializers, nodes = [], []
    weights_file = out_path.name + ".weights"
    offset = [0]
    count = [0]

    def param(name, shape, kind):
        size = int(np.prod(shape))
        count[0] += size
        if args.weights == "random":
            if kind == "ones":
                value = np.ones(shape, np.float32)
            elif kind == "zeros":
                value = np.zeros(shape, np.float32)
            else:
                value = (rng.standard_normal(shape) * 0.02).astype(np.float32)
            initializers.append(helper.make_tensor(
                name, TensorProto.FLOAT, shape, value.tobytes(), raw=True))
        else:
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT,
                                 dims=shape)
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", weights_file),
                               ("offset", str(offset[0])),
                               ("length", str(4 * size))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset[0] += 4 * size
            initializers.append(tensor)
        return name

    constants = [0]

    def const(value, dtype):
        """A Constant node (not an initializer: a float initializer is a
        trainable parameter)."""
        constants[0] += 1
        name = f"const_{constants[0]}"
        array = np.array(value, dtype=dtype)
        nodes.append(helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(
                name + "_value", helper.np_dtype_to_tensor_dtype(array.dtype),
                array.shape, array.flatten().tolist())))
        return name

    counter = [0]

    def node(op, inputs, **attrs):
        counter[0] += 1
        name = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, prefix, fan_in, fan_out, bias=True):
        y = node("MatMul", [x, param(prefix + ".weight", [fan_in, fan_out],
                                     "normal")])
        if bias:
            y = node("Add", [y, param(prefix + ".bias", [fan_out], "zeros")])
        return y

    def layer_norm(x, prefix):
        return node("LayerNormalization",
                    [x, param(prefix + ".weight", [dim], "ones"),
                     param(prefix + ".bias", [dim], "zeros")],
                    axis=-1, epsilon=1e-5)

    positions = const(list(range(seq)), np.int64)
    x = node("Add", [
        node("Gather", [param("model.token_embedding.weight", [args.vocab, dim],
                              "normal"), "tokens"]),
        node("Gather", [param("model.position_embedding.weight", [seq, dim],
                              "normal"), positions])])
    heads_shape = const([batch, seq, heads, head_dim], np.int64)
    flat_shape = const([batch, seq, dim], np.int64)
    split = const([dim, dim, dim], np.int64)
    scale = const(1.0 / math.sqrt(head_dim), np.float32)
    causal = const(np.tril(np.ones((seq, seq), dtype=bool)), np.bool_)
    minus_inf = const(-np.inf, np.float32)
    half, one = const(0.5, np.float32), const(1.0, np.float32)
    gelu_a = const(math.sqrt(2.0 / math.pi), np.float32)
    gelu_b = const(0.044715, np.float32)
    for layer in range(args.layers):
        p = f"model.blocks.{layer}"
        qkv = linear(layer_norm(x, p + ".ln1"), p + ".attention.qkv", dim,
                     3 * dim)
        counter[0] += 1
        q, k, v = (f"split_{counter[0]}_{i}" for i in range(3))
        nodes.append(helper.make_node("Split", [qkv, split], [q, k, v],
                                      axis=2))
        q = node("Transpose", [node("Reshape", [q, heads_shape])],
                 perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [k, heads_shape])],
                 perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [v, heads_shape])],
                 perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k]), scale])
        scores = node("Where", [causal, scores, minus_inf])
        y = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        y = node("Reshape", [node("Transpose", [y], perm=[0, 2, 1, 3]),
                             flat_shape])
        x = node("Add", [x, linear(y, p + ".attention.proj", dim, dim)])
        h = linear(layer_norm(x, p + ".ln2"), p + ".fc", dim, 4 * dim)
        cube = node("Mul", [node("Mul", [h, h]), h])
        inner = node("Mul", [gelu_a, node("Add", [h, node("Mul", [gelu_b,
                                                                  cube])])])
        gelu = node("Mul", [node("Mul", [half, h]),
                            node("Add", [one, node("Tanh", [inner])])])
        x = node("Add", [x, linear(gelu, p + ".out", 4 * dim, dim)])
    logits = linear(layer_norm(x, "model.ln_f"), "model.lm_head", dim,
                    args.vocab, bias=False)
    logits = node("Reshape", [logits, const([batch * seq, args.vocab],
                                            np.int64)])
    targets = node("Reshape", ["targets", const([batch * seq], np.int64)])
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [logits, targets],
                                  ["loss"], reduction="mean"))
    graph = helper.make_graph(
        nodes, "gpt",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                       [batch, seq]),
         helper.make_tensor_value_info("targets", TensorProto.INT64,
                                       [batch, seq])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="sharc export-gpt-shapes")
    model.ir_version = 8
    return model, count[0]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--batch", type=int, default=2,
                        help="the micro-batch per rank (rows of tokens)")
    parser.add_argument("--weights", choices=["none", "random"], default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", required=True, type=pathlib.Path)
    args = parser.parse_args()
    for name in ("layers", "dim", "heads", "vocab", "seq", "batch"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1")
    model, parameters = build(args, args.output)
    if args.weights == "random" and parameters > 50_000_000:
        raise SystemExit(f"--weights random with {parameters} parameters: use "
                         "--weights none for models this large")
    # Write under a temporary name, then rename: never a half-written model.
    temporary = args.output.with_name(f".{args.output.name}.tmp")
    onnx.save(model, str(temporary))
    temporary.replace(args.output)
    print(f"export-gpt-shapes: wrote {args.output}: {parameters} parameters "
          f"({args.layers} layers, dim {args.dim}, {args.heads} heads, "
          f"vocabulary {args.vocab}, sequence {args.seq}, micro-batch "
          f"{args.batch}; weights {args.weights})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
