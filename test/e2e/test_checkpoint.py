"""Checkpoints and exact resume (docs/checkpoints.md), on the CPU training
binaries and the evaluator.

A GPT trained with AdamW and a 3-step warm-up at ZeRO stage 2 on two ranks:
runs interrupted after a checkpoint (in the warm-up and after it) and resumed
print the uninterrupted run's step lines digit for digit and end in its state
byte for byte; the evaluator and the binaries resume from each other's
checkpoints; another world size with the same global batch resumes within
rounding, another global batch is refused; --save-every and --keep-last keep
the newest checkpoints and leave what sharc did not write; damaged, foreign
and mismatched checkpoints are refused naming the file and the difference; a
full disk during a save leaves the last checkpoint as it was.  Every
destructive case works in the test's own temporary folders.
"""

import pathlib
import re
import shutil
import subprocess
import types

import numpy as np
import pytest

import models
from conftest import sharc_path

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)", re.MULTILINE)
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01",
          "--scheduler", "WarmupLR", "--warmup-max-lr", "0.003",
          "--warmup-num-steps", "3"]
ZERO2 = ["--world-size", 2, "--zero-stage", 2]
STEPS = 7


def mpirun(ranks, *args, env=None):
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found"
    extra = []
    for key, value in (env or {}).items():
        extra += ["-x", f"{key}={value}"]
    return subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         *extra, *map(str, args)], capture_output=True, text=True, timeout=600)


def steps_of(result):
    assert result.returncode == 0, result.stderr
    return STEP_LINE.findall(result.stdout)


def refused(result, *fragments):
    """A run that stopped before its first step with an error naming all of
    `fragments`."""
    assert result.returncode != 0, result.stdout
    assert not STEP_LINE.search(result.stdout), result.stdout
    for fragment in fragments:
        assert str(fragment) in result.stderr, result.stderr


def state_contents(directory):
    """Relative path -> contents of every file of a saved state, with the
    save id (which every save draws anew) left out of the index and the
    slice folders' id files."""
    contents = {}
    for path in sorted(pathlib.Path(directory).rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.name == "sharc-state.txt":
            data = re.sub(rb"save-id \S+\n", b"", data)
        elif path.name == "sharc-save-id.txt":
            data = data.split(b"\n", 1)[1]
        contents[str(path.relative_to(directory))] = data
    return contents


def arrays(directory):
    return {p.name: np.load(p) for p in sorted(pathlib.Path(directory).glob("*.npy"))}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoint")
    cases = models.export_training_cases(root, names=("gpt", "mlp"))
    model, inputs = cases["gpt"]
    program = root / "zero2"
    result = subprocess.run([str(sharc_path()), "compile", str(model), *RECIPE,
                             *map(str, ZERO2), "-o", str(program)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    full = mpirun(2, program / "train", *inputs, "--steps", STEPS,
                  "--save-state", root / "full-state")
    full_steps = steps_of(full)
    assert len(full_steps) == STEPS
    return types.SimpleNamespace(root=root, cases=cases, model=model,
                                 inputs=inputs, train=program / "train",
                                 full_steps=full_steps,
                                 full_state=root / "full-state")


@pytest.mark.parametrize("stop", [2, 5])
def test_interrupted_runs_resume_bit_identically(assets, tmp_path, stop):
    """Stopped after step `stop` (2: in the warm-up, 5: after it) and
    resumed from the checkpoint: the same step lines (loss and learning
    rate, every digit) and the same final state, byte for byte, as the run
    that was never stopped."""
    save_dir = tmp_path / "checkpoints"
    first = mpirun(2, assets.train, *assets.inputs, "--steps", stop,
                   "--save-dir", save_dir)
    assert f"checkpoint: step {stop} saved in {save_dir}/step-{stop:08d}" in \
        first.stdout
    assert sorted(p.name for p in save_dir.iterdir()) == [f"step-{stop:08d}"]
    second = mpirun(2, assets.train, *assets.inputs, "--steps", STEPS - stop,
                    "--resume", save_dir, "--save-state", tmp_path / "state")
    assert f"resume: from {save_dir}/step-{stop:08d} (step {stop}; saved by 2 " \
        "rank(s) at ZeRO stage 2)" in second.stdout
    assert steps_of(first) + steps_of(second) == assets.full_steps
    assert state_contents(tmp_path / "state") == \
        state_contents(assets.full_state)


def test_evaluator_and_binaries_share_checkpoints(sharc, assets, tmp_path):
    """A checkpoint of the evaluator resumes in the binary, and one of the
    binary (each rank's slices) in the evaluator: both continue with the
    uninterrupted run's digits, and the evaluator ends in its state."""
    evaluated = tmp_path / "evaluated"
    result = sharc("eval", assets.model, "--train", "--steps", 3, *RECIPE,
                   *ZERO2, *assets.inputs, "--save-dir", evaluated)
    assert steps_of(result) == assets.full_steps[:3]
    resumed = mpirun(2, assets.train, *assets.inputs, "--steps", STEPS - 3,
                     "--resume", evaluated)
    assert steps_of(resumed) == assets.full_steps[3:]

    compiled = tmp_path / "compiled"
    steps_of(mpirun(2, assets.train, *assets.inputs, "--steps", 3,
                    "--save-dir", compiled))
    result = sharc("eval", assets.model, "--train", "--steps", STEPS - 3,
                   *RECIPE, *ZERO2, *assets.inputs, "--resume", compiled,
                   "--dump-state", tmp_path / "dumped")
    assert steps_of(result) == assets.full_steps[3:]
    consolidated = tmp_path / "consolidated"
    assert sharc("consolidate", assets.full_state, "-o",
                 consolidated).returncode == 0
    dumped, whole = arrays(tmp_path / "dumped"), arrays(consolidated)
    assert sorted(dumped) == sorted(whole)
    for name in dumped:
        assert dumped[name].tobytes() == whole[name].tobytes(), name


def test_another_world_size_resumes_within_rounding(sharc, assets, tmp_path):
    """One rank with two micro-batches per step has the global batch of two
    ranks with one: it resumes their checkpoint (reassembling each tensor
    from the two ranks' slices) and continues their losses up to the order
    of summation.  A different global batch is refused, naming it."""
    save_dir = tmp_path / "checkpoints"
    steps_of(mpirun(2, assets.train, *assets.inputs, "--steps", 4,
                    "--save-dir", save_dir))
    one = tmp_path / "one"
    result = sharc("compile", assets.model, *RECIPE, "--world-size", 1,
                   "--zero-stage", 2, "--grad-accum", 2, "-o", one)
    assert result.returncode == 0, result.stderr
    resumed = steps_of(mpirun(1, one / "train", *assets.inputs, "--steps",
                              STEPS - 4, "--resume", save_dir))
    expected = assets.full_steps[4:]
    assert [step for step, _, _ in resumed] == [s for s, _, _ in expected]
    assert [lr for _, _, lr in resumed] == [lr for _, _, lr in expected]
    np.testing.assert_allclose([float(loss) for _, loss, _ in resumed],
                               [float(loss) for _, loss, _ in expected],
                               rtol=1e-5)
    result = sharc("eval", assets.model, "--train", *RECIPE, "--world-size",
                   1, *assets.inputs, "--resume", save_dir)
    refused(result, f"{save_dir}/step-00000004/sharc-state.txt",
            "config.train-batch-size is 4 there, 2 here")


def test_save_every_and_keep_last(assets, tmp_path):
    """--save-every 2 --keep-last 2 over 7 steps saves after steps 2, 4, 6
    and 7 and keeps the last two; the folder's other contents (a file, a
    folder named like a checkpoint without an index) are left alone and never
    taken for checkpoints."""
    save_dir = tmp_path / "checkpoints"
    (save_dir / "step-00000001").mkdir(parents=True)
    (save_dir / "step-00000001" / "mine.txt").write_text("mine")
    (save_dir / "notes.txt").write_text("notes")
    result = mpirun(2, assets.train, *assets.inputs, "--steps", STEPS,
                    "--save-dir", save_dir, "--save-every", 2,
                    "--keep-last", 2)
    assert steps_of(result) == assets.full_steps
    saved = re.findall(r"^checkpoint: step (\d+) saved in (\S+)", result.stdout,
                       re.MULTILINE)
    assert [int(step) for step, _ in saved] == [2, 4, 6, 7]
    assert f"removed {save_dir}/step-00000002" in result.stdout
    assert f"removed {save_dir}/step-00000004" in result.stdout
    assert sorted(p.name for p in save_dir.iterdir()) == [
        "notes.txt", "step-00000001", "step-00000006", "step-00000007"]
    assert (save_dir / "step-00000001" / "mine.txt").read_text() == "mine"
    assert state_contents(save_dir / "step-00000007") == \
        state_contents(assets.full_state)


def test_saving_a_step_again(assets, tmp_path):
    """A run resumed from an earlier checkpoint saves a step that the folder
    holds already: a checkpoint sharc wrote is replaced (by an equal one), a
    folder of the user's of that name stops the run and stays as it was."""
    save_dir = tmp_path / "checkpoints"
    steps_of(mpirun(2, assets.train, *assets.inputs, "--steps", 4,
                    "--save-dir", save_dir, "--save-every", 2))
    before = state_contents(save_dir / "step-00000004")
    old_id = (save_dir / "step-00000004" / "sharc-state.txt").read_text()
    shutil.rmtree(save_dir / "step-00000004")
    shutil.copytree(save_dir / "step-00000002", save_dir / "step-00000004")
    # The copy is step 2's checkpoint under step 4's name: not listed (its
    # step is 2), and replaced when step 4 is saved again.
    resumed = mpirun(2, assets.train, *assets.inputs, "--steps", 2,
                     "--resume", save_dir / "step-00000002",
                     "--save-dir", save_dir)
    assert steps_of(resumed) == assets.full_steps[2:4]
    assert state_contents(save_dir / "step-00000004") == before
    assert (save_dir / "step-00000004" / "sharc-state.txt").read_text() != old_id

    user = save_dir / "step-00000006"
    user.mkdir()
    (user / "data.bin").write_bytes(b"mine")
    result = mpirun(2, assets.train, *assets.inputs, "--steps", 2,
                    "--resume", save_dir / "step-00000004",
                    "--save-dir", save_dir)
    assert result.returncode != 0
    assert f"{user} exists and is not a checkpoint sharc wrote" in \
        result.stderr, result.stderr
    assert [p.name for p in user.iterdir()] == ["data.bin"]
    assert not [p for p in save_dir.iterdir() if p.name.startswith(".")]


def test_damaged_foreign_and_mismatched_checkpoints(sharc, assets, tmp_path):
    """Refused before the first step, naming the file and what is wrong: a
    flipped byte in a whole tensor or in a rank's slice (its checksum), a
    truncated file, another model's checkpoint, another configuration's, a
    folder without checkpoints; --resume with --weights."""
    source = tmp_path / "source"
    steps_of(mpirun(2, assets.train, *assets.inputs, "--steps", 2,
                    "--save-dir", source))
    checkpoint = source / "step-00000002"

    def damaged(change):
        copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(checkpoint, copy)
        target = change(copy)
        return mpirun(2, assets.train, *assets.inputs, "--resume", copy), target

    def flip(path):
        data = bytearray(path.read_bytes())
        data[-3] ^= 0x40
        path.write_bytes(bytes(data))
        return path

    result, target = damaged(lambda copy: flip(copy / "model.lm_head.weight.npy"))
    refused(result, target, "does not match its checksum")
    result, target = damaged(
        lambda copy: flip(copy / "rank-1-of-2" / "model.lm_head.weight.exp_avg.npy"))
    refused(result, target, "does not match its checksum")

    def truncate(copy):
        path = copy / "model.ln_f.weight.npy"
        path.write_bytes(path.read_bytes()[:-8])
        return path

    result, target = damaged(truncate)
    refused(result, target)

    mlp, mlp_inputs = assets.cases["mlp"]
    other_model = tmp_path / "mlp-checkpoints"
    assert sharc("eval", mlp, "--train", *RECIPE, *mlp_inputs, "--save-dir",
                 other_model).returncode == 0
    refused(mpirun(2, assets.train, *assets.inputs, "--resume", other_model),
            f"{other_model}/step-00000001/sharc-state.txt", "model-hash is",
            "saved from another model", str(mlp))

    other_config = tmp_path / "lr-checkpoints"
    result = sharc("eval", assets.model, "--train", *RECIPE, "--lr", "0.002",
                   *ZERO2, *assets.inputs, "--save-dir", other_config)
    assert result.returncode == 0, result.stderr
    refused(mpirun(2, assets.train, *assets.inputs, "--resume", other_config),
            "config.lr is 0.002 there, 0.003 here",
            f"--weights {other_config}/step-00000001")

    empty = tmp_path / "empty"
    empty.mkdir()
    refused(mpirun(2, assets.train, *assets.inputs, "--resume", empty),
            f"--resume {empty}: no checkpoint there")
    refused(mpirun(2, assets.train, *assets.inputs, "--resume", source,
                   "--weights", checkpoint),
            "--weights and --resume both choose where the run starts")
    refused(mpirun(2, assets.train, *assets.inputs, "--keep-last", 2),
            "--keep-last needs --save-dir DIR")
    result = sharc("eval", assets.model, "--train", *assets.inputs,
                   "--save-every", 2)
    refused(result, "--save-every needs --save-dir DIR")


def test_a_full_disk_during_a_checkpoint_keeps_the_last_one(assets, tmp_path):
    """A save that runs out of space (simulated per process by
    SHARC_TEST_WRITE_LIMIT) ends the run with the reason; the checkpoint
    before it is left byte for byte and nothing of the failed one stays."""
    save_dir = tmp_path / "checkpoints"
    steps_of(mpirun(2, assets.train, *assets.inputs, "--steps", 2,
                    "--save-dir", save_dir))
    before = {p: p.read_bytes() for p in save_dir.rglob("*") if p.is_file()}
    result = mpirun(2, assets.train, *assets.inputs, "--steps", 2,
                    "--resume", save_dir, "--save-dir", save_dir,
                    env={"SHARC_TEST_WRITE_LIMIT": 20000})
    assert result.returncode != 0
    assert "--save-dir" in result.stderr, result.stderr
    assert "No space left on device" in result.stderr, result.stderr
    after = {p: p.read_bytes() for p in save_dir.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in save_dir.iterdir()) == ["step-00000002"]


def test_metrics_follow_the_run_and_plot(sharc, assets, tmp_path):
    """--metrics writes one JSON line per step with the step line's loss and
    learning rate (the binary and the evaluator alike); a resumed run
    appends to the same file, continuing the step numbers; a symbolic link
    is refused; tools/plot-metrics.py draws the file to a PNG and names a
    malformed line."""
    import json
    metrics = tmp_path / "metrics.jsonl"
    save_dir = tmp_path / "checkpoints"
    first = mpirun(2, assets.train, *assets.inputs, "--steps", 3,
                   "--save-dir", save_dir, "--metrics", metrics)
    second = mpirun(2, assets.train, *assets.inputs, "--steps", STEPS - 3,
                    "--resume", save_dir, "--metrics", metrics)
    lines = steps_of(first) + steps_of(second)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(str(r["step"]), f"{r['loss']:.9g}", f"{r['lr']:.9g}")
            for r in records] == lines == assets.full_steps
    for record in records:
        assert record["skipped"] is False
        assert record["ms"] > 0 and record["tokens_per_s"] > 0
        assert record["peak_memory_bytes"] > 0
    evaluated = tmp_path / "evaluated.jsonl"
    result = sharc("eval", assets.model, "--train", "--steps", STEPS,
                   *RECIPE, *ZERO2, *assets.inputs, "--metrics", evaluated)
    assert result.returncode == 0, result.stderr
    assert [(r["step"], r["loss"], r["lr"]) for r in map(
        json.loads, evaluated.read_text().splitlines())] == \
        [(r["step"], r["loss"], r["lr"]) for r in records]

    link = tmp_path / "link.jsonl"
    link.symlink_to(metrics)
    before = metrics.read_bytes()
    refused(mpirun(2, assets.train, *assets.inputs, "--metrics", link),
            f"--metrics: {link}")
    assert metrics.read_bytes() == before

    plot = pathlib.Path(__file__).resolve().parents[2] / "tools" / "plot-metrics.py"
    png = tmp_path / "curves.png"
    result = subprocess.run(["python3", str(plot), str(metrics), str(evaluated),
                             "-o", str(png)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image
    assert matplotlib.image.imread(str(png)).shape[2] in (3, 4)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(metrics.read_text().splitlines()[0] + "\n{\"step\": \n")
    result = subprocess.run(["python3", str(plot), str(broken), "-o",
                             str(tmp_path / "broken.png")],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert f"{broken}:2: not a JSON line" in result.stderr, result.stderr
    assert not (tmp_path / "broken.png").exists()
