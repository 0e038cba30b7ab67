"""Initializers that torch.onnx.export merged by value (docs/onnx.md,
"Exporting from PyTorch for training"), on a real export: a GPT whose fresh
LayerNorms all hold ones and zeros, exported in eval mode (the default), has
one LayerNorm weight and bias reached through Identity nodes named after the
others.  sharc warns, naming them and the fix; with --untie-initializers it
trains the same parameters, digit for digit, as the export in training mode
(where PyTorch keeps them apart), and without it the run differs."""

import re
import warnings

import numpy as np
import pytest
import torch

import models

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)", re.MULTILINE)
TRAIN = ["--train", "--steps", 5, "--optimizer", "adamw", "--lr", "0.01"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("merged")
    case = models.make_case("gpt")
    merged, separate = root / "eval-mode.onnx", root / "training-mode.onnx"
    models.export(case, merged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(case.module, tuple(case.inputs.values()),
                          str(separate), input_names=list(case.inputs),
                          output_names=["loss"], opset_version=case.opset,
                          do_constant_folding=False, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    _, inputs = models.write_data("gpt", 37, 5, root)
    return dict(root=root, merged=merged, separate=separate, inputs=inputs)


def steps_of(result):
    assert result.returncode == 0, result.stderr
    lines = STEP_LINE.findall(result.stdout)
    assert lines, result.stdout
    return lines


def test_merged_initializers_are_named_with_the_fix(sharc, exports):
    result = sharc("import", exports["merged"])
    assert result.returncode == 0, result.stderr
    assert "warning: initializers merged by value" in result.stderr
    assert "'model.blocks.0.ln1.weight' is also" in result.stderr
    assert "'model.ln_f.weight'" in result.stderr
    assert "training=torch.onnx.TrainingMode.TRAINING" in result.stderr
    assert "--untie-initializers" in result.stderr
    # Nothing to say about an export that keeps them apart, or once untied.
    for args in ([exports["separate"]], [exports["merged"], "--untie-initializers"]):
        result = sharc("import", *args)
        assert result.returncode == 0, result.stderr
        assert "merged by value" not in result.stderr


def test_untied_training_is_pytorchs(sharc, exports, tmp_path):
    separate = sharc("eval", exports["separate"], *TRAIN, *exports["inputs"],
                     "--dump-state", tmp_path / "separate")
    untied = sharc("eval", exports["merged"], "--untie-initializers", *TRAIN,
                   *exports["inputs"], "--dump-state", tmp_path / "untied")
    tied = sharc("eval", exports["merged"], *TRAIN, *exports["inputs"])
    assert steps_of(untied) == steps_of(separate)
    assert steps_of(tied) != steps_of(separate)
    # The untied parameters are the training-mode export's, under its names.
    files = sorted(p.name for p in (tmp_path / "separate").glob("*.npy"))
    assert sorted(p.name for p in (tmp_path / "untied").glob("*.npy")) == files
    assert "model.ln_f.weight.npy" in files
    for name in files:
        a = np.load(tmp_path / "separate" / name)
        b = np.load(tmp_path / "untied" / name)
        assert a.tobytes() == b.tobytes(), name


def test_untied_state_exports_as_separate_initializers(sharc, exports,
                                                       tmp_path):
    """sharc export --untie-initializers writes each untied parameter as an
    initializer of its own in place of its Identity node: the same model, for
    onnxruntime, as the training-mode export with the same trained values."""
    import onnx
    import onnxruntime
    states = {}
    for name, args in (("separate", [exports["separate"]]),
                       ("untied", [exports["merged"], "--untie-initializers"])):
        result = sharc("eval", *args, *TRAIN, *exports["inputs"],
                       "--dump-state", tmp_path / name)
        assert result.returncode == 0, result.stderr
        states[name] = tmp_path / name
    out = tmp_path / "untied.onnx"
    result = sharc("export", states["untied"], "--model", exports["merged"],
                   "--untie-initializers", "-o", out)
    assert result.returncode == 0, result.stderr
    reference = tmp_path / "separate.onnx"
    result = sharc("export", states["separate"], "--model",
                   exports["separate"], "-o", reference)
    assert result.returncode == 0, result.stderr
    model = onnx.load(str(out))
    assert not [n for n in model.graph.node if n.op_type == "Identity"
                and n.input[0] in {i.name for i in model.graph.initializer}]
    assert sorted(i.name for i in model.graph.initializer) == sorted(
        i.name for i in onnx.load(str(reference)).graph.initializer)
    feeds = {"tokens": np.load(exports["root"] / "tokens.npy")[:2],
             "targets": np.load(exports["root"] / "targets.npy")[:2]}
    losses = [onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]).run(["loss"], feeds)[0]
        for path in (out, reference)]
    assert losses[0] == losses[1]
    # Without the flag the untied state is another model's.
    result = sharc("export", states["untied"], "--model", exports["merged"],
                   "-o", tmp_path / "refused.onnx")
    assert result.returncode == 1
    assert "saved from another model" in result.stderr, result.stderr
