"""Models exported with a dynamic batch axis (docs/onnx.md, "Dynamic input
dimensions"): `sharc eval` takes the dimensions from its --input files,
training binds the batch to the config's micro-batch, and --input-shape still
overrides both.  References: onnxruntime on the same file for inference, the
same model exported with a static batch for training."""

import json
import re
import shutil
import subprocess

import numpy as np
import onnxruntime
import pytest

import models

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)", re.MULTILINE)
LOSS = re.compile(r"^loss = (\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamic")
    case = models.make_training_case("gpt")
    static, dynamic = root / "static.onnx", root / "dynamic.onnx"
    models.export(case, static)
    models.export(case, dynamic, dynamic_batch=True)
    data, inputs = models.write_data("gpt", 37, 5, root)
    micro = case.inputs["tokens"].shape[0]
    config = root / "ds_config.json"
    config.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}))
    return dict(root=root, static=static, dynamic=dynamic, data=data,
                inputs=inputs, micro=micro, config=config)


def steps_of(result):
    assert result.returncode == 0, result.stderr
    lines = STEP_LINE.findall(result.stdout)
    assert lines, result.stdout
    return lines


def test_eval_takes_the_dimensions_from_its_inputs(sharc, gpt, tmp_path):
    """Three rows, which is not the exported batch: sharc's loss is
    onnxruntime's on the same file and rows."""
    feeds = {name: value[:3].numpy() for name, value in gpt["data"].items()}
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args.append(f"--input={name}={tmp_path / f'{name}.npy'}")
    result = sharc("eval", gpt["dynamic"], *args)
    assert result.returncode == 0, result.stderr
    loss = float(LOSS.search(result.stdout).group(1))
    session = onnxruntime.InferenceSession(str(gpt["dynamic"]),
                                           providers=["CPUExecutionProvider"])
    reference = float(session.run(["loss"], feeds)[0])
    np.testing.assert_allclose(loss, reference, rtol=1e-5)


def test_training_binds_the_batch_to_the_micro_batch(sharc, gpt, tmp_path):
    """eval --train and the compiled binary of the dynamic model print the
    static model's step lines; without a micro-batch the error says how to
    give one; --input-shape still works."""
    common = ["--train", "--steps", 4, "--config", gpt["config"], *gpt["inputs"]]
    expected = steps_of(sharc("eval", gpt["static"], *common))
    assert steps_of(sharc("eval", gpt["dynamic"], *common)) == expected
    out = tmp_path / "out"
    result = sharc("compile", gpt["dynamic"], "--config", gpt["config"],
                   "-o", out)
    assert result.returncode == 0, result.stderr
    run = subprocess.run([shutil.which("mpirun"), "--allow-run-as-root",
                          "-np", "1", str(out / "train"), *gpt["inputs"],
                          "--steps", "4"],
                         capture_output=True, text=True, timeout=600)
    assert steps_of(run) == expected

    result = sharc("eval", gpt["dynamic"], "--train", *gpt["inputs"])
    assert result.returncode == 1
    assert "graph input 'tokens' has dynamic dimension 0 ('batch')" in \
        result.stderr, result.stderr
    assert "train_micro_batch_size_per_gpu" in result.stderr
    micro = gpt["micro"]
    shapes = [f"--input-shape=tokens={micro}x16", f"--input-shape=targets={micro}x16"]
    result = sharc("eval", gpt["dynamic"], *shapes, *common)
    assert steps_of(result) == expected
