"""BatchNormalization in training mode (issue 16): batch statistics in
forward and their gradient in backward, the running mean and variance
updated as buffers that the optimizer does not train (ONNX's momentum
formula), local statistics on each data-parallel rank and rank 0's running
statistics kept (as PyTorch's DistributedDataParallel broadcasts rank 0's
buffers), consecutive micro-batches updating them in turn.

The reference is PyTorch: a small CNN (Conv2d, BatchNorm2d, ReLU, pooling,
Linear, cross-entropy) exported by the TorchScript exporter in training mode
trains with PyTorch's AdamW losses step by step, and its running statistics
follow ONNX's formula applied to the statistics of the batches PyTorch's
BatchNorm saw (ONNX updates the running variance with the population
variance; PyTorch's BatchNorm with the unbiased one, so that one is
recomputed from the batches).  A model exported in inference mode gets a
warning, and its statistics stay as they are."""

import warnings

import numpy as np
import pytest
import torch

from binaries import losses_of, run_binary

ROWS, STEPS = 8, 5
RECIPE = ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01",
          "--clip", "0"]
MOMENTUM = float(np.float32(0.9))  # the exported attribute, a float32


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # No bias: BatchNorm cancels it, so its gradient is rounding noise,
        # which AdamW would turn into steps of lr in either direction.
        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return torch.nn.functional.cross_entropy(self.fc(h), y)


def fresh_net():
    torch.manual_seed(0)
    net = Net()
    # Running statistics away from their defaults, so that a wrong update
    # shows.
    with torch.no_grad():
        net.bn.running_mean.copy_(torch.tensor([0.5, -0.2, 0.1, 0.3]))
        net.bn.running_var.copy_(torch.tensor([1.5, 0.7, 2.0, 1.1]))
    return net


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("batchnorm")
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(ROWS, 3, 6, 6)) * 2 + 0.5).astype(np.float32)
    y = rng.integers(0, 3, ROWS).astype(np.int64)
    np.save(directory / "x.npy", x)
    np.save(directory / "y.npy", y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            fresh_net().train(), (torch.from_numpy(x), torch.from_numpy(y)),
            str(directory / "train.onnx"), dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False, input_names=["x", "y"],
            output_names=["loss"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        # The dynamo exporter writes even a training model's BatchNorm in
        # inference mode (the TorchScript exporter folds an eval-mode one
        # into the convolution).
        torch.onnx.export(
            fresh_net().train(), (torch.from_numpy(x), torch.from_numpy(y)),
            str(directory / "eval.onnx"), dynamo=True, optimize=False,
            input_names=["x", "y"], output_names=["loss"],
            dynamic_shapes=({0: torch.export.Dim("batch")},
                            {0: torch.export.Dim("batch")}))
    return directory


def exported_statistics(path):
    """The running statistics in the file (the TorchScript exporter runs the
    model once to trace it, which in training mode updates them)."""
    import onnx
    from onnx import numpy_helper
    values = {init.name: numpy_helper.to_array(init)
              for init in onnx.load(str(path)).graph.initializer}
    return values["bn.running_mean"], values["bn.running_var"]


def pytorch_run(x, y, parts, start, rank0_only=False):
    """PyTorch's trajectory from the running statistics `start`: each step
    splits the rows into `parts` equal micro-batches (or ranks), averages
    their gradients and takes one AdamW step.  Returns the step losses (the
    mean over the parts), the running statistics after the last step by
    ONNX's formula (each part's forward updates them in turn, or only rank
    0's part: `rank0_only`, data parallelism), and PyTorch's own running
    variance (from unbiased batch variances)."""
    net = fresh_net().train()
    with torch.no_grad():
        net.bn.running_mean.copy_(torch.tensor(start[0]))
        net.bn.running_var.copy_(torch.tensor(start[1]))
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01,
                                  weight_decay=0.01)
    mean = net.bn.running_mean.double().numpy().copy()
    var = net.bn.running_var.double().numpy().copy()
    seen = []
    net.bn.register_forward_pre_hook(lambda _, args: seen.append(
        args[0].detach().double().numpy()))
    losses = []
    xs, ys = torch.from_numpy(x).chunk(parts), torch.from_numpy(y).chunk(parts)
    for _ in range(STEPS):
        optimizer.zero_grad()
        total = 0.0
        for index, (xp, yp) in enumerate(zip(xs, ys)):
            loss = net(xp, yp)
            (loss / parts).backward()
            total += loss.item() / parts
            batch = seen.pop()
            if rank0_only and index != 0:
                continue
            mean = mean * MOMENTUM + batch.mean((0, 2, 3)) * (1 - MOMENTUM)
            var = var * MOMENTUM + batch.var((0, 2, 3)) * (1 - MOMENTUM)
        optimizer.step()
        losses.append(total)
    return losses, mean, var, net.bn.running_var.double().numpy()

def data(directory):
    return ["--input", f"x={directory / 'x.npy'}",
            "--input", f"y={directory / 'y.npy'}"]


def shapes(rows):
    return ["--input-shape", f"x={rows}x3x6x6", "--input-shape", f"y={rows}"]


def statistics(state):
    return (np.load(state / "bn.running_mean.npy"),
            np.load(state / "bn.running_var.npy"))


@pytest.mark.parametrize("split", ["one batch", "two micro-batches"])
def test_trains_as_pytorch_on_the_evaluator(sharc, workdir, tmp_path, split):
    x, y = np.load(workdir / "x.npy"), np.load(workdir / "y.npy")
    parts = 1 if split == "one batch" else 2
    losses, mean, var, own = pytorch_run(
        x, y, parts, exported_statistics(workdir / "train.onnx"))
    state = tmp_path / "state"
    result = sharc("eval", workdir / "train.onnx", "--train", "--steps",
                   STEPS, *RECIPE, *shapes(ROWS // parts), "--grad-accum",
                   parts, *data(workdir), "--dump-state", state)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(losses_of(result.stdout), losses, rtol=1e-4)
    got_mean, got_var = statistics(state)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_var, var, rtol=1e-4)
    # PyTorch's own running variance (unbiased batch variances) differs:
    # the comparison above can tell them apart.
    assert not np.allclose(got_var, own, rtol=1e-3)

@pytest.mark.parametrize("stage", [0, 3])
def test_two_ranks_in_the_binary(sharc, workdir, tmp_path, stage):
    """Two ranks, each normalizing with its own half's statistics (as
    PyTorch's BatchNorm under DistributedDataParallel): PyTorch's losses,
    and rank 0's running statistics, at ZeRO stages 0 and 3."""
    x, y = np.load(workdir / "x.npy"), np.load(workdir / "y.npy")
    losses, mean, var, _ = pytorch_run(
        x, y, 2, exported_statistics(workdir / "train.onnx"), rank0_only=True)
    out = tmp_path / "out"
    compiled = sharc("compile", workdir / "train.onnx", *RECIPE,
                     "--world-size", 2, "--zero-stage", stage,
                     *shapes(ROWS // 2), "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    state = tmp_path / "state"
    stdout = run_binary(out, 2, *data(workdir), "--steps", STEPS,
                        "--save-state", state)
    np.testing.assert_allclose(losses_of(stdout), losses, rtol=1e-4)
    if stage == 3:
        consolidated = tmp_path / "whole"
        result = sharc("consolidate", state, "-o", consolidated)
        assert result.returncode == 0, result.stderr
        state = consolidated
    got_mean, got_var = statistics(state)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_var, var, rtol=1e-4)


def test_inference_mode_export_is_warned_about(sharc, workdir, tmp_path):
    """An inference-mode BatchNorm (here the dynamo exporter's) normalizes
    with the running statistics: sharc warns once, and training leaves the
    statistics as they are (buffers the optimizer does not train, though the
    loss depends on them)."""
    state = tmp_path / "state"
    result = sharc("eval", workdir / "eval.onnx", "--train", "--steps", 2,
                   *RECIPE, *shapes(ROWS), *data(workdir), "--dump-state",
                   state)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("warning: BatchNormalization in inference "
                               "mode (training_mode 0)") == 1, result.stderr
    assert "training=torch.onnx.TrainingMode.TRAINING" in result.stderr
    got_mean, got_var = statistics(state)
    start_mean, start_var = exported_statistics(workdir / "eval.onnx")
    np.testing.assert_array_equal(got_mean, start_mean)
    np.testing.assert_array_equal(got_var, start_var)
    trained = tmp_path / "trained"
    result = sharc("eval", workdir / "train.onnx", "--train", "--steps", 2,
                   *RECIPE, *shapes(ROWS), *data(workdir), "--dump-state",
                   trained)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
