"""The recurrent operators RNN, GRU and LSTM, unrolled by the importer into
primitives whose gradients train them.

The reference is PyTorch: a small sequence model (a bidirectional
batch-first LSTM, a GRU, whose ONNX form resets after the recurrent product,
i.e. linear_before_reset, and a ReLU RNN, then a linear head and a
mean-squared error) exported by the TorchScript exporter trains with
PyTorch's AdamW losses step by step, on the evaluator and in the compiled
binary, with PyTorch's gradients; and a model reading Y_h and Y_c of an LSTM with initial states
(given as model inputs) and the final state of a two-layer RNN does the
same on the evaluator."""

import warnings

import numpy as np
import pytest
import torch

from binaries import losses_of, run_binary

ROWS, STEPS, SEQ = 4, 5, 5
RECIPE = ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01",
          "--clip", "0"]


class Stack(torch.nn.Module):
    """LSTM (bidirectional, batch first) -> GRU -> RNN (ReLU) -> Linear on
    the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(3, 4, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(8, 4)
        self.rnn = torch.nn.RNN(4, 3, nonlinearity="relu")
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x, y):
        h, _ = self.lstm(x)
        g, _ = self.gru(h.transpose(0, 1))
        r, _ = self.rnn(g)
        return torch.nn.functional.mse_loss(self.fc(r[-1]), y)


class States(torch.nn.Module):
    """An LSTM reading its initial states (model inputs, batch first as the
    micro-batch split wants them) and returning its final ones, and a tanh
    RNN of two layers."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(3, 4, batch_first=True)
        self.rnn = torch.nn.RNN(3, 4, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(12, 2)

    def forward(self, x, h0, c0, y):
        _, (h, c) = self.lstm(x, (h0.unsqueeze(0), c0.unsqueeze(0)))
        _, hr = self.rnn(x)
        features = torch.cat([h[0], c[0], hr[1]], dim=1)
        return torch.nn.functional.mse_loss(self.fc(features), y)


MODELS = {
    "stack": (Stack, {"x": (ROWS, SEQ, 3), "y": (ROWS, 2)}),
    "states": (States, {"x": (ROWS, SEQ, 3), "h0": (ROWS, 4),
                        "c0": (ROWS, 4), "y": (ROWS, 2)}),
}


def fresh(name):
    torch.manual_seed(0)
    return MODELS[name][0]()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("recurrent")
    rng = np.random.default_rng(0)
    for name, (_, shapes) in MODELS.items():
        arrays = {key: rng.normal(size=shape).astype(np.float32)
                  for key, shape in shapes.items()}
        for key, array in arrays.items():
            np.save(directory / f"{name}-{key}.npy", array)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                fresh(name), tuple(torch.from_numpy(a) for a in
                                   arrays.values()),
                str(directory / f"{name}.onnx"), dynamo=False,
                do_constant_folding=False, input_names=list(arrays),
                output_names=["loss"])
    return directory


def arrays(directory, name):
    return {key: np.load(directory / f"{name}-{key}.npy")
            for key in MODELS[name][1]}


def data(directory, name):
    return [arg for key in MODELS[name][1]
            for arg in ("--input", f"{key}={directory / f'{name}-{key}.npy'}")]


def pytorch_losses(name, inputs):
    net = fresh(name)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.01,
                                  weight_decay=0.01)
    tensors = [torch.from_numpy(a) for a in inputs.values()]
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = net(*tensors)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


OPS = {"stack": {"LSTM", "GRU", "RNN"}, "states": {"LSTM", "RNN"}}


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_are_pytorchs(sharc, workdir, tmp_path, name):
    """The gradient of every parameter (PyTorch's names: the exporter
    reorders the gates and joins the biases with ops the gradient goes
    through) at the first step."""
    import onnx
    ops = {node.op_type for node in
           onnx.load(str(workdir / f"{name}.onnx")).graph.node}
    assert OPS[name] <= ops, ops
    net = fresh(name)
    net(*[torch.from_numpy(a) for a in arrays(workdir, name).values()]
        ).backward()
    grads = tmp_path / "grads"
    result = sharc("eval", workdir / f"{name}.onnx", "--train", "--steps", 1,
                   *RECIPE, *data(workdir, name), "--dump-grads", grads)
    assert result.returncode == 0, result.stderr
    for param, value in net.named_parameters():
        np.testing.assert_allclose(np.load(grads / f"{param}.npy"),
                                   value.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=param)


@pytest.mark.parametrize("name", list(MODELS))
def test_trains_as_pytorch_on_the_evaluator(sharc, workdir, name):
    losses = pytorch_losses(name, arrays(workdir, name))
    result = sharc("eval", workdir / f"{name}.onnx", "--train", "--steps",
                   STEPS, *RECIPE, *data(workdir, name))
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(losses_of(result.stdout), losses, rtol=2e-5)
    # Training moves the loss: the gradients are not all zero.
    assert losses[-1] < losses[0]


def test_trains_as_pytorch_in_the_binary(sharc, workdir, tmp_path):
    losses = pytorch_losses("stack", arrays(workdir, "stack"))
    out = tmp_path / "out"
    compiled = sharc("compile", workdir / "stack.onnx", *RECIPE, "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    stdout = run_binary(out, 1, *data(workdir, "stack"), "--steps", STEPS)
    np.testing.assert_allclose(losses_of(stdout), losses, rtol=2e-5)
