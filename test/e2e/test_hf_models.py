"""Real models as people export them (issue 16): Hugging Face transformers'
GPT-2 (GPT2LMHeadModel) and BERT (BertForSequenceClassification), small
configurations, randomly initialised (nothing is downloaded), exported by
torch.onnx's dynamo exporter and by its TorchScript exporter (in training
mode, opset 17), with dynamic batch and sequence axes.  Each
imports with PyTorch's loss and trains on the evaluator and on the compiled
CPU binary (one and two ranks) with the losses PyTorch's own AdamW gives the
same model on the same rows, step by step (dropout off).

The exporter runs with optimize=False: its ONNX optimizer (the default)
folds constants into initializers and merges initializers of equal values,
so that a freshly initialised model's LayerNorm weights become one tensor and
its zero biases vanish -- a model that can no longer be trained as PyTorch
trains it (docs/onnx.md, "Exporting from PyTorch for training")."""

import warnings

import numpy as np
import pytest
import torch

from binaries import losses_of, run_binary

STEPS = 10
ROWS, SEQ, VOCAB = 4, 16, 128
# fp32 both sides, summed in different orders: measured below 2e-6 relative
# over these steps.
RTOL = 1e-4


def gpt2(dropout=0.0):
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout))


def bert(dropout=0.0):
    from transformers import BertConfig, BertForSequenceClassification
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=SEQ, num_labels=3,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout))


class ModelLoss(torch.nn.Module):
    """The model's own loss: GPT-2's causal-LM loss (labels shifted inside),
    BERT's classification cross-entropy."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, labels):
        return self.m(input_ids=input_ids, labels=labels).loss


# name: (builder, labels of the rows: the tokens (GPT-2) or classes (BERT))
MODELS = {
    "gpt2": (gpt2, lambda ids: ids),
    "bert": (bert, lambda ids: ids[:, 0] % 3),
}


EXPORTERS = ("dynamo", "torchscript")


def export_model(name, directory, dropout=0.0, exporter="dynamo"):
    """Exports model `name` (in training mode: its Dropout nodes train) with
    the loss by `exporter`; writes ROWS rows of ids and labels.  Returns
    (path, ids, labels)."""
    build, make_labels = MODELS[name]
    ids = torch.randint(0, VOCAB, (ROWS, SEQ),
                        generator=torch.Generator().manual_seed(1))
    labels = make_labels(ids)
    np.save(directory / "ids.npy", ids.numpy())
    np.save(directory / "labels.npy", labels.numpy())
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    label_axes = {0: batch, 1: seq} if labels.dim() == 2 else {0: batch}
    path = directory / f"{name}.onnx"
    torch.manual_seed(0)
    names = dict(input_names=["input_ids", "labels"], output_names=["loss"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ModelLoss(build(dropout)).train()
        if exporter == "dynamo":
            torch.onnx.export(model, (ids, labels), str(path), dynamo=True,
                              optimize=False, **names,
                              dynamic_shapes=({0: batch, 1: seq}, label_axes))
        else:
            axes = {"input_ids": {0: "batch", 1: "seq"},
                    "labels": {0: "batch", 1: "seq"} if labels.dim() == 2
                    else {0: "batch"}}
            torch.onnx.export(model, (ids, labels), str(path), dynamo=False,
                              opset_version=17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, **names,
                              dynamic_axes=axes)
    return path, ids, labels


@pytest.fixture(scope="module",
                params=[(name, exporter) for name in MODELS
                        for exporter in EXPORTERS],
                ids=lambda param: "-".join(param))
def exported(request, tmp_path_factory):
    """(name, model path, its --input flags and label shape, PyTorch's
    losses)."""
    name, exporter = request.param
    build, _ = MODELS[name]
    directory = tmp_path_factory.mktemp(f"hf-{name}-{exporter}")
    path, ids, labels = export_model(name, directory, exporter=exporter)
    # PyTorch's trajectory: AdamW on the whole batch every step.
    torch.manual_seed(0)
    model = ModelLoss(build())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                  weight_decay=0.01)
    losses = []
    for _ in range(STEPS):
        loss = model(ids, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    inputs = ["--input", f"input_ids={directory / 'ids.npy'}",
              "--input", f"labels={directory / 'labels.npy'}"]
    label_dims = list(labels.shape[1:])
    return name, path, inputs, label_dims, losses


RECIPE = ["--optimizer", "adamw", "--lr", "0.001", "--weight-decay", "0.01",
          "--clip", "0"]


def shapes(rows, label_dims):
    labels = "x".join(map(str, [rows] + label_dims))
    return ["--input-shape", f"input_ids={rows}x{SEQ}",
            "--input-shape", f"labels={labels}"]

def test_imports_with_pytorchs_loss(sharc, exported):
    name, path, inputs, _, losses = exported
    result = sharc("eval", path, *inputs)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split("=")[1]) == pytest.approx(
        losses[0], rel=1e-6), name


def test_trains_as_pytorch_on_the_evaluator(sharc, exported):
    name, path, inputs, label_dims, losses = exported
    result = sharc("eval", path, "--train", "--steps", STEPS, *RECIPE,
                   *shapes(ROWS, label_dims), *inputs)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(losses_of(result.stdout), losses, rtol=RTOL,
                               err_msg=name)

@pytest.mark.parametrize("ranks", [1, 2])
def test_trains_as_pytorch_in_the_binary(sharc, exported, ranks):
    name, path, inputs, label_dims, losses = exported
    out = path.parent / f"out-{ranks}"
    compiled = sharc("compile", path, *RECIPE, "--world-size", ranks,
                     *shapes(ROWS // ranks, label_dims), "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    np.testing.assert_allclose(
        losses_of(run_binary(out, ranks, *inputs, "--steps", STEPS)),
        losses, rtol=RTOL, err_msg=name)


@pytest.mark.parametrize("name", MODELS)
def test_trains_with_dropout(sharc, tmp_path, name):
    """Exported in training mode with dropout 0.1 (GPT-2's embedding and
    residual dropouts, BERT's hidden ones and its classifier's): the
    Dropout nodes import in training mode and train.  The run is
    deterministic and the same global rows get the same masks: the
    evaluator on one rank, the same run again, and the binary on two ranks
    give the same losses.  The masks act: the first loss differs from the
    model's loss without dropout (PyTorch in eval mode), but by little."""
    import onnx
    path, ids, labels = export_model(name, tmp_path, dropout=0.1)
    modes = [node.input[2] if len(node.input) > 2 else ""
             for node in onnx.load(str(path)).graph.node
             if node.op_type == "Dropout"]
    assert any(modes), "no training-mode Dropout in the export"
    label_dims = list(labels.shape[1:])
    inputs = ["--input", f"input_ids={tmp_path / 'ids.npy'}",
              "--input", f"labels={tmp_path / 'labels.npy'}"]
    runs = []
    for _ in range(2):
        result = sharc("eval", path, "--train", "--steps", STEPS, *RECIPE,
                       *shapes(ROWS, label_dims), *inputs)
        assert result.returncode == 0, result.stderr
        runs.append(losses_of(result.stdout))
    assert runs[0] == runs[1]
    out = tmp_path / "out-2"
    compiled = sharc("compile", path, *RECIPE, "--world-size", 2,
                     *shapes(ROWS // 2, label_dims), "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    np.testing.assert_allclose(
        losses_of(run_binary(out, 2, *inputs, "--steps", STEPS)),
        runs[0], rtol=1e-5, err_msg=name)
    torch.manual_seed(0)
    without = ModelLoss(MODELS[name][0](0.1)).eval()(ids, labels).item()
    assert runs[0][0] != pytest.approx(without, rel=1e-4)
    assert runs[0][0] == pytest.approx(without, rel=0.2)


class TwoNorms(torch.nn.Module):
    """Two fresh LayerNorms (equal weights: the optimizer merges them) and
    scalar constants (it folds them into initializers)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.first = torch.nn.LayerNorm(4)
        self.second = torch.nn.LayerNorm(4)

    def forward(self, x):
        return (self.second(self.first(self.linear(x))) * 0.5 + 2.0).pow(
            2).mean()


@pytest.mark.parametrize("optimize", [True, False])
def test_optimized_export_is_warned_about(sharc, tmp_path, optimize):
    """The dynamo exporter's ONNX optimizer (optimize=True, its default)
    merges the two LayerNorms' parameters and folds the scalars into
    initializers: sharc warns, naming the folded ones and the fix; the
    export with optimize=False keeps every parameter and gets no warning."""
    import onnx
    path = tmp_path / "two-norms.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TwoNorms(), (torch.randn(2, 4),), str(path),
                          dynamo=True, optimize=optimize,
                          input_names=["x"], output_names=["loss"])
    names = {init.name for init in onnx.load(str(path)).graph.initializer}
    assert ("second.weight" in names) == (not optimize), names
    result = sharc("import", path, "-o", tmp_path / "two-norms.mlir")
    assert result.returncode == 0, result.stderr
    if optimize:
        assert "warning: float initializers named like the constants that " \
               "torch.onnx's ONNX optimizer folds ('val_" in result.stderr
        assert "export with torch.onnx.export(..., dynamo=True, " \
               "optimize=False)" in result.stderr
    else:
        assert "warning" not in result.stderr, result.stderr
