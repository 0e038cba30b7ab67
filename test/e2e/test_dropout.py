"""Training-mode Dropout (issue 16): keep masks from a counter-based
generator (Philox-4x32-10, runtime/Random.h) keyed by the seed, the step, the
global batch row and the position, so that a run is reproducible and the
same global sample gets the same mask whatever the world size, the
micro-batch split, the ZeRO stage, the target or a resume.

The references are independent of the code under test: the binomial
distribution for the keep rate, numpy for the forward values and for the
gradient that the forward's mask implies, and one run against another for
the invariances."""


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from binaries import losses_of, run_binary, step_lines

ROWS, D, H = 8, 16, 64
RATIO = 0.3
STEPS = 5


def dropout_model(path, seed=None, rows="B"):
    """x [B, D] -> h = x w -> dropped = Dropout(h, RATIO, training) -> loss =
    mean((dropped c)^2); outputs the loss, h, the dropped values and the
    mask.  c is a data input so that the gradient has a closed form."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(
        (rng.normal(size=(D, H)) * 0.3).astype(np.float32), "w")
    attrs = {} if seed is None else {"seed": seed}
    nodes = [
        helper.make_node("Constant", [], ["ratio"], value=numpy_helper.from_array(
            np.array(RATIO, np.float32))),
        helper.make_node("Constant", [], ["training"],
                         value=numpy_helper.from_array(np.array(True))),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Dropout", ["h", "ratio", "training"],
                         ["dropped", "mask"], **attrs),
        helper.make_node("Mul", ["dropped", "c"], ["dc"]),
        helper.make_node("Mul", ["dc", "dc"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "dropout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, D]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [rows, H])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [rows, H]),
         helper.make_tensor_value_info("dropped", TensorProto.FLOAT,
                                       [rows, H]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, [rows, H])],
        [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dropout")
    dropout_model(directory / "dropout.onnx")
    dropout_model(directory / "seeded.onnx", seed=1234)
    rng = np.random.default_rng(1)
    # 256 rows: the forward test's batch; training runs take ROWS per step.
    np.save(directory / "x.npy", rng.normal(size=(256, D)).astype(np.float32))
    np.save(directory / "c.npy", rng.normal(size=(256, H)).astype(np.float32))
    return directory


def data(directory):
    return ["--input", f"x={directory / 'x.npy'}",
            "--input", f"c={directory / 'c.npy'}"]


def shapes(rows):
    return ["--input-shape", f"x={rows}x{D}", "--input-shape", f"c={rows}x{H}"]
def evaluate_forward(sharc, directory, rows):
    """The model's outputs on the first `rows` rows (the masks of step 0 on
    global batch rows 0..rows-1, the evaluator's default key)."""
    out = directory / f"forward-{rows}"
    x = np.load(directory / "x.npy")[:rows]
    c = np.load(directory / "c.npy")[:rows]
    np.save(directory / f"x{rows}.npy", x)
    np.save(directory / f"c{rows}.npy", c)
    result = sharc("eval", directory / "dropout.onnx",
                   "--input", f"x={directory / f'x{rows}.npy'}",
                   "--input", f"c={directory / f'c{rows}.npy'}",
                   "--output-dir", out)
    assert result.returncode == 0, result.stderr
    return {name: np.load(out / f"{name}.npy")
            for name in ("loss", "h", "dropped", "mask")}, x, c


def test_keep_rate_and_forward_values(sharc, workdir):
    """The kept fraction is 1 - ratio within 6 binomial standard deviations;
    kept elements are h / (1 - ratio) (rounded to float32, as PyTorch and
    ONNX's reference scale them), dropped ones 0; rows get different
    masks."""
    outputs, _, _ = evaluate_forward(sharc, workdir, 256)
    mask, h, dropped = outputs["mask"], outputs["h"], outputs["dropped"]
    assert mask.dtype == np.bool_ and mask.shape == (256, H)
    n, p = mask.size, 1 - RATIO
    sigma = np.sqrt(n * p * (1 - p))
    assert abs(mask.sum() - n * p) < 6 * sigma, (mask.sum(), n * p)
    scale = np.float32(1 / (1 - RATIO))
    np.testing.assert_array_equal(dropped, np.where(mask, h * scale, 0))
    assert len({row.tobytes() for row in mask}) == 256
    # Each position is kept about as often as any other (over the rows).
    per_position = mask.mean(axis=0)
    assert abs(per_position.mean() - p) < 0.02
    assert per_position.min() > 0.5 and per_position.max() < 0.9


def test_backward_reads_the_forward_mask(sharc, workdir, tmp_path):
    """The first step's gradient equals the closed form with the mask that
    forward drew at that step (step 0, rows 0..B-1):
    d loss / d w = x^T (2 / n) (dropped c) c mask / (1 - ratio)."""
    outputs, x, c = evaluate_forward(sharc, workdir, ROWS)
    grads = tmp_path / "grads"
    result = sharc("eval", workdir / "dropout.onnx", "--train", "--steps", 1,
                   "--optimizer", "sgd", "--lr", "0.1", *shapes(ROWS),
                   "--input", f"x={workdir / f'x{ROWS}.npy'}",
                   "--input", f"c={workdir / f'c{ROWS}.npy'}",
                   "--dump-grads", grads)
    assert result.returncode == 0, result.stderr
    assert losses_of(result.stdout)[0] == pytest.approx(
        float(outputs["loss"]), rel=1e-6)
    mask = outputs["mask"].astype(np.float64)
    n = ROWS * H
    upstream = (2 / n) * outputs["dropped"].astype(np.float64) * c * c
    expected = x.astype(np.float64).T @ (upstream * mask / (1 - RATIO))
    np.testing.assert_allclose(np.load(grads / "w.npy"), expected,
                               rtol=2e-5, atol=1e-7)
    # Backward with another mask (the next row's) would give another
    # gradient: the comparison above can fail.
    other = np.roll(mask, 1, axis=0)
    assert not np.allclose(np.load(grads / "w.npy"),
                           x.T @ (upstream * other / (1 - RATIO)), rtol=1e-3)


RUNS = {
    # name: flags; each run holds ROWS rows per step in all
    "one rank": ["--world-size", 1, *shapes(ROWS)],
    "two ranks": ["--world-size", 2, *shapes(ROWS // 2)],
    "two micro-batches": ["--grad-accum", 2, *shapes(ROWS // 2)],
    "ZeRO-3, two ranks, two micro-batches": [
        "--world-size", 2, "--zero-stage", 3, "--grad-accum", 2,
        *shapes(ROWS // 4)],
}


@pytest.fixture(scope="module")
def evaluator_losses(sharc, workdir):
    losses = {}
    for name, flags in RUNS.items():
        result = sharc("eval", workdir / "dropout.onnx", "--train", "--steps",
                       STEPS, *flags, *data(workdir))
        assert result.returncode == 0, (name, result.stderr)
        losses[name] = losses_of(result.stdout)
    return losses


def test_same_global_sample_same_mask(evaluator_losses):
    """Every split of the same global batch draws the same masks: the
    losses agree (to float32 summation order), step by step; and they
    change from step to step (new masks, new rows)."""
    reference = evaluator_losses["one rank"]
    assert len(reference) == STEPS
    for name, losses in evaluator_losses.items():
        np.testing.assert_allclose(losses, reference, rtol=1e-6, err_msg=name)


def test_seed_attribute_changes_the_masks(sharc, workdir, evaluator_losses):
    result = sharc("eval", workdir / "seeded.onnx", "--train", "--steps",
                   STEPS, *RUNS["one rank"], *data(workdir))
    assert result.returncode == 0, result.stderr
    seeded = losses_of(result.stdout)
    assert all(abs(a - b) > 1e-6 * abs(b) for a, b in
               zip(seeded, evaluator_losses["one rank"])), seeded

@pytest.mark.parametrize("name", ["one rank", "two ranks",
                                  "ZeRO-3, two ranks, two micro-batches"])
def test_binary_draws_the_evaluators_masks(sharc, workdir, evaluator_losses,
                                            name):
    """The compiled CPU binary prints the evaluator's losses digit for digit
    (the same masks, bit for bit the same arithmetic)."""
    flags = RUNS[name]
    ranks = flags[flags.index("--world-size") + 1]
    out = workdir / ("bin-" + name.replace(" ", "").replace(",", "-"))
    compiled = sharc("compile", workdir / "dropout.onnx", *flags, "-o", out)
    assert compiled.returncode == 0, compiled.stderr
    stdout = run_binary(out, ranks, *data(workdir), "--steps", STEPS)
    evaluator = sharc("eval", workdir / "dropout.onnx", "--train", "--steps",
                      STEPS, *flags, *data(workdir))
    assert step_lines(stdout) == step_lines(evaluator.stdout)


def test_resume_continues_the_masks(sharc, workdir, tmp_path):
    """Two steps, a checkpoint, and two more from it (on another world
    size) give the losses of four steps in one run."""
    one = tmp_path / "one"
    two = tmp_path / "two"
    assert sharc("compile", workdir / "dropout.onnx", *RUNS["one rank"],
                 "-o", one).returncode == 0
    assert sharc("compile", workdir / "dropout.onnx", *RUNS["two ranks"],
                 "-o", two).returncode == 0
    straight = losses_of(run_binary(one, 1, *data(workdir), "--steps", 4))
    saves = tmp_path / "saves"
    first = losses_of(run_binary(one, 1, *data(workdir), "--steps", 2,
                                 "--save-dir", saves))
    rest = losses_of(run_binary(two, 2, *data(workdir), "--steps", 2,
                                "--resume", saves))
    np.testing.assert_allclose(first + rest, straight, rtol=1e-6)
