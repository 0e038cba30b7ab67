"""Small PyTorch models for sharc's end-to-end tests.

Every model is wrapped so that its forward takes the model inputs followed by
the labels and returns the scalar cross-entropy loss, which is the single
output of the exported ONNX graph (named ``loss``).  Weights and example
inputs come from fixed seeds, so a case is the same on every run.

    case = make_case("gpt")
    export(case, "gpt.onnx")
    loss = reference_loss(case)

Models:
  mlp   Linear/ReLU/Tanh classifier.
  gpt   GPT-style decoder: token + position embeddings, two pre-LayerNorm
        blocks with causal self-attention (triangular mask) and a tanh-GELU
        MLP, a final LayerNorm and an untied LM head; next-token loss.
  bert  BERT-style encoder exported at opset 13, so that LayerNorm and the
        erf GELU arrive decomposed into elementary ops: token + position +
        segment embeddings, two post-LayerNorm blocks with bidirectional
        attention and a padding mask, a tanh pooler and a classifier.
  cnn   Conv/ReLU/MaxPool, Conv/ReLU/AvgPool, GlobalAveragePool, Linear.
"""

import dataclasses
import math
import warnings
from typing import Dict

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper

MODEL_NAMES = ("mlp", "gpt", "bert", "cnn")


# --------------------------------------------------------------------------
# MLP
# --------------------------------------------------------------------------


class Mlp(nn.Module):
    def __init__(self, features=16, hidden=32, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


class MlpLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Mlp()

    def forward(self, x, labels):
        return F.cross_entropy(self.model(x), labels)


# --------------------------------------------------------------------------
# GPT
# --------------------------------------------------------------------------


@dataclasses.dataclass
class GptConfig:
    vocab: int = 64
    seq: int = 16
    dim: int = 32
    heads: int = 2
    layers: int = 2
    batch: int = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.proj = nn.Linear(config.dim, config.dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        head_dim = dim // self.heads
        q, k, v = self.qkv(x).split(dim, dim=2)
        q = q.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        # Position j is visible from position i when j <= i.
        causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
        scores = scores.masked_fill(~causal, float("-inf"))
        attention = F.softmax(scores, dim=-1)
        y = (attention @ v).transpose(1, 2).reshape(batch, seq, dim)
        return self.proj(y)


class GptBlock(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.dim)
        self.attention = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.dim)
        self.fc = nn.Linear(config.dim, 4 * config.dim)
        self.out = nn.Linear(4 * config.dim, config.dim)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
        return x + self.out(h)


class Gpt(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab, config.dim)
        self.position_embedding = nn.Embedding(config.seq, config.dim)
        self.blocks = nn.ModuleList(GptBlock(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.dim)
        self.lm_head = nn.Linear(config.dim, config.vocab, bias=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], dtype=torch.long)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class GptLoss(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.model = Gpt(config)

    def forward(self, tokens, targets):
        logits = self.model(tokens)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        )


# --------------------------------------------------------------------------
# BERT
# --------------------------------------------------------------------------


@dataclasses.dataclass
class BertConfig:
    vocab: int = 50
    seq: int = 12
    dim: int = 32
    heads: int = 4
    layers: int = 2
    classes: int = 3
    batch: int = 3


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.heads = config.heads
        self.query = nn.Linear(config.dim, config.dim)
        self.key = nn.Linear(config.dim, config.dim)
        self.value = nn.Linear(config.dim, config.dim)
        self.attention_out = nn.Linear(config.dim, config.dim)
        self.ln1 = nn.LayerNorm(config.dim, eps=1e-12)
        self.intermediate = nn.Linear(config.dim, 4 * config.dim)
        self.output = nn.Linear(4 * config.dim, config.dim)
        self.ln2 = nn.LayerNorm(config.dim, eps=1e-12)

    def split_heads(self, x):
        batch, seq, dim = x.shape
        return x.view(batch, seq, self.heads, dim // self.heads).permute(0, 2, 1, 3)

    def forward(self, x, mask_bias):
        batch, seq, dim = x.shape
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dim // self.heads)
        probabilities = F.softmax(scores + mask_bias, dim=-1)
        context = torch.matmul(probabilities, v).permute(0, 2, 1, 3)
        context = context.reshape(batch, seq, dim)
        x = self.ln1(x + self.attention_out(context))
        h = F.gelu(self.intermediate(x))
        return self.ln2(x + self.output(h))


class Bert(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab, config.dim)
        self.position_embeddings = nn.Embedding(config.seq, config.dim)
        self.token_type_embeddings = nn.Embedding(2, config.dim)
        self.embedding_ln = nn.LayerNorm(config.dim, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.layers))
        self.pooler = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.classes)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        x = self.embedding_ln(x)
        # [batch, 1, 1, seq]: 0 where attended, -10000 at padding.
        mask_bias = (1.0 - attention_mask[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


class BertLoss(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.model = Bert(config)

    def forward(self, input_ids, token_type_ids, attention_mask, labels):
        return F.cross_entropy(
            self.model(input_ids, token_type_ids, attention_mask), labels
        )


# --------------------------------------------------------------------------
# CNN
# --------------------------------------------------------------------------


class Cnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1)
        self.pool2 = nn.AvgPool2d(2)
        self.conv3 = nn.Conv2d(16, 16, kernel_size=3, padding=1, groups=2)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, images):
        x = self.pool1(F.relu(self.conv1(images)))
        x = self.pool2(F.relu(self.conv2(x)))
        x = F.relu(self.conv3(x))
        x = torch.flatten(self.global_pool(x), 1)
        return self.fc(x)


class CnnLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Cnn()

    def forward(self, images, labels):
        return F.cross_entropy(self.model(images), labels)


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """A loss-returning module, its example inputs (graph input name -> tensor,
    in argument order) and the opset to export it at."""

    name: str
    module: nn.Module
    inputs: Dict[str, torch.Tensor]
    opset: int


def make_inputs(name: str, batch: int, generator: torch.Generator,
                config=None) -> Dict[str, torch.Tensor]:
    """Random inputs of model `name` (graph input name -> tensor, in argument
    order) with `batch` rows; `config` is the model's GptConfig/BertConfig."""
    if name == "mlp":
        return {
            "x": torch.randn(batch, 16, generator=generator),
            "labels": torch.randint(0, 10, (batch,), generator=generator),
        }
    if name == "gpt":
        config = config or GptConfig()
        shape = (batch, config.seq)
        return {
            "tokens": torch.randint(0, config.vocab, shape, generator=generator),
            "targets": torch.randint(0, config.vocab, shape, generator=generator),
        }
    if name == "bert":
        config = config or BertConfig()
        shape = (batch, config.seq)
        lengths = torch.randint(config.seq // 2, config.seq + 1, (batch,),
                                generator=generator)
        attention_mask = (torch.arange(config.seq)[None, :] < lengths[:, None])
        token_types = (torch.arange(config.seq)[None, :] >= lengths[:, None] // 2)
        return {
            "input_ids": torch.randint(0, config.vocab, shape, generator=generator),
            "token_type_ids": token_types.to(torch.long),
            "attention_mask": attention_mask.to(torch.float32),
            "labels": torch.randint(0, config.classes, (batch,),
                                    generator=generator),
        }
    if name == "cnn":
        return {
            "images": torch.randn(batch, 3, 16, 16, generator=generator),
            "labels": torch.randint(0, 10, (batch,), generator=generator),
        }
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")


def make_case(name: str, seed: int = 0, gpt_config: GptConfig = None) -> Case:
    """Builds model `name` with weights and inputs drawn from `seed`."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    if name == "mlp":
        module, batch, opset, config = MlpLoss(), 8, 17, None
    elif name == "gpt":
        config = gpt_config or GptConfig()
        module, batch, opset = GptLoss(config), config.batch, 17
    elif name == "bert":
        config = BertConfig()
        module, batch, opset = BertLoss(config), config.batch, 13
    elif name == "cnn":
        module, batch, opset, config = CnnLoss(), 4, 17, None
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    inputs = make_inputs(name, batch, generator, config)
    module.eval()
    return Case(name, module, inputs, opset)


def make_training_case(name: str, seed: int = 0,
                       gpt_config: GptConfig = None) -> Case:
    """make_case(name, seed) with every parameter perturbed by its own noise,
    so that no two parameters hold equal values.  The exporter merges
    initializers with equal values (LayerNorm's fresh weights are all ones),
    which would tie parameters that PyTorch trains separately; with distinct
    values the ONNX initializers are exactly the parameters, under the names
    of named_parameters(), and sharc and PyTorch train the same weights."""
    case = make_case(name, seed, gpt_config)
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for parameter in case.module.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return case


def export(case: Case, path, dynamic_batch: bool = False) -> None:
    """Exports `case` with the TorchScript exporter; the output is `loss`.
    With `dynamic_batch`, dimension 0 of every input is left free (sharc
    then takes it from --input-shape)."""
    names = list(case.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            case.module,
            tuple(case.inputs.values()),
            str(path),
            input_names=names,
            output_names=["loss"],
            opset_version=case.opset,
            do_constant_folding=False,
            dynamo=False,
            dynamic_axes=({name: {0: "batch"} for name in names}
                          if dynamic_batch else None),
        )


def reference_loss(case: Case) -> float:
    """PyTorch's loss on the example inputs (float32, as exported)."""
    with torch.no_grad():
        return float(case.module(*case.inputs.values()))


def save_inputs(case: Case, directory) -> Dict[str, str]:
    """Writes every example input as DIRECTORY/NAME.npy; returns name -> path."""
    paths = {}
    for name, tensor in case.inputs.items():
        path = f"{directory}/{name}.npy"
        np.save(path, tensor.numpy())
        paths[name] = path
    return paths


def write_data(name: str, rows: int, seed: int, directory, scale: float = 1.0,
               config=None):
    """Random inputs of model `name` (of `config`, else the default one) with
    `rows` rows (make_inputs, the first input multiplied by `scale`), written
    as DIRECTORY/NAME.npy; returns the tensors and the matching
    `--input=NAME=PATH` arguments."""
    data = make_inputs(name, rows, torch.Generator().manual_seed(seed), config)
    if scale != 1.0:
        first = next(iter(data))
        data[first] = data[first] * scale
    args = []
    for input_name, tensor in data.items():
        path = f"{directory}/{input_name}.npy"
        np.save(path, tensor.numpy())
        args.append(f"--input={input_name}={path}")
    return data, args


def export_training_cases(directory, rows: int = 37, seed: int = 5,
                          names=MODEL_NAMES):
    """Every model of `names` (all of MODEL_NAMES by default) exported as
    DIRECTORY/NAME/NAME.onnx with `rows` rows of data (write_data; 37 rows by
    default: the data wraps mid-step at every world size); returns name ->
    (model path, --input args)."""
    cases = {}
    for name in names:
        (directory / name).mkdir()
        path = directory / name / f"{name}.onnx"
        export(make_training_case(name), path)
        _, inputs = write_data(name, rows, seed, directory / name)
        cases[name] = (path, inputs)
    return cases


def make_epilogue_model(path):
    """A classifier whose GEMMs all end in cuBLASLt-style epilogues: ONNX
    Gelu (opset 20, tanh approximation) and Relu after bias adds."""
    rng = np.random.default_rng(5)
    sizes = [16, 32, 24, 10]
    inits, nodes, x = [], [], "x"
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1 / np.sqrt(fan_in)
        inits += [
            helper.make_tensor(f"w{i}", TensorProto.FLOAT, [fan_in, fan_out],
                               rng.uniform(-bound, bound, (fan_in, fan_out))
                               .astype(np.float32).ravel()),
            helper.make_tensor(f"b{i}", TensorProto.FLOAT, [fan_out],
                               rng.uniform(-bound, bound, fan_out)
                               .astype(np.float32))]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"p{i}"]),
                  helper.make_node("Add", [f"p{i}", f"b{i}"], [f"z{i}"])]
        x = f"z{i}"
        if i == 0:
            nodes.append(helper.make_node("Gelu", [x], ["g0"],
                                          approximate="tanh"))
            x = "g0"
        elif i == 1:
            nodes.append(helper.make_node("Relu", [x], ["r1"]))
            x = "r1"
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [x, "labels"],
                                  ["loss"], reduction="mean"))
    graph = helper.make_graph(
        nodes, "epilogues",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [8])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    onnx.save(model, path)

