"""ZeRO stages 1, 2 and 3 (sharc-zero, docs/zero.md) against stage 0.

Stage 1 keeps each rank's slice of the optimizer state and updates only that
slice; stage 2 also reduce-scatters each gradient bucket where backward
completes it; stage 3 also keeps only each rank's slice of the parameters,
all-gathered before forward and backward read them.  None may change the
training: on the evaluator simulating N ranks and on the CPU binaries under
`mpirun -np N`, stages 1, 2 and 3 print stage 0's step lines digit for digit
(fp32, bf16, fp16 with skipped steps), and the states they save hold the
same tensors bit for bit: each rank saves its slices of what ZeRO
partitions, and `sharc consolidate` reassembles them into the whole tensors
that stage 0 and the evaluator save (runtime/StateDir.h).  With gradient clipping every
stage sums the global norm alike: over each rank's slice of each gradient,
then over the ranks in rank order (stage 0 too, on the rows of its
all-reduced gradients), so clipped runs print the same digits at every stage
as well.  The report's per-rank optimizer
state is the ZeRO formula, and the configuration errors name their key.
"""

import json
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import models

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)(?: scale (\S+))?",
                       re.MULTILINE)
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01",
          "--scheduler", "WarmupLR", "--warmup-max-lr", "0.003",
          "--warmup-num-steps", "3"]
CLIP = ["--clip", "0.5"]
# Stage 3 partitions every parameter of the small test models (DeepSpeed's
# default threshold, 1e5 elements, would keep them all whole).
STAGE3 = ["--zero-stage", 3, "--param-persistence-threshold", 0]
FP16 = ["--precision", "fp16", "--initial-scale-power", "24",
        "--loss-scale-window", "3"]


def mpirun(ranks, *args):
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found"
    return subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (model path, --input args)."""
    return models.export_training_cases(tmp_path_factory.mktemp("zero"))


def steps_of(result):
    assert result.returncode == 0, result.stderr
    lines = STEP_LINE.findall(result.stdout)
    assert lines, result.stdout
    return lines


def frozen(name):
    return ["--freeze", "key.bias"] if name == "bert" else []


@pytest.mark.parametrize("name", models.MODEL_NAMES)
@pytest.mark.parametrize("ranks", [2, 4])
def test_stages_train_as_stage_zero_on_the_evaluator(sharc, exported, name,
                                                     ranks):
    path, inputs = exported[name]
    run = lambda *stage: steps_of(sharc(
        "eval", path, "--train", "--steps", 6, *RECIPE, *frozen(name),
        "--world-size", ranks, "--reduce-bucket-size", 500, *stage, *inputs))
    stage_zero = run()
    assert run("--zero-stage", 1) == stage_zero
    assert run("--zero-stage", 2) == stage_zero
    assert run(*STAGE3) == stage_zero
    # A threshold that keeps the smaller parameters whole.
    assert run("--zero-stage", 3, "--param-persistence-threshold", 64) == \
        stage_zero


@pytest.mark.parametrize("name,stage", [("gpt", 1), ("bert", 1), ("gpt", 2),
                                        ("gpt", 3)])
def test_clipped_stages(sharc, exported, tmp_path, name, stage):
    """Clipping under ZeRO: the norm from the slices and one all-reduce; the
    binary prints the evaluator's digits and stage 0's (whose norm adds the
    same partial sums in the same order), and the clipping is active (the
    losses differ from unclipped ones)."""
    path, inputs = exported[name]
    out = tmp_path / "out"
    zero = ["--zero-stage", stage, "--param-persistence-threshold", 0]
    result = sharc("compile", path, *RECIPE, *CLIP, *frozen(name),
                   "--world-size", 2, *zero, "--reduce-bucket-size", 2000,
                   "-o", out)
    assert result.returncode == 0, result.stderr
    binary = steps_of(mpirun(2, out / "train", *inputs, "--steps", 6))
    run = lambda *extra: steps_of(sharc(
        "eval", path, "--train", "--steps", 6, *RECIPE, *frozen(name),
        "--world-size", 2, "--reduce-bucket-size", 2000, *extra, *inputs))
    assert binary == run(*CLIP, *zero)
    assert binary == run(*CLIP)
    losses = lambda lines: [float(loss) for _, loss, _, _ in lines]
    assert losses(binary) != losses(run())


@pytest.mark.parametrize("precision", [["--precision", "bf16"], FP16],
                         ids=["bf16", "fp16"])
def test_sixteen_bit_stages_train_as_stage_zero(sharc, exported, tmp_path,
                                                precision):
    """Mixed precision composes: the overflow test (fp16: the first steps
    overflow and are skipped) sums over the slices and the ranks."""
    path, inputs = exported["gpt"]
    run = lambda *stage: steps_of(sharc(
        "eval", path, "--train", "--steps", 8, *RECIPE, *precision,
        "--world-size", 2, "--reduce-bucket-size", 2000, *stage, *inputs))
    stage_zero = run()
    assert run("--zero-stage", 1) == stage_zero
    assert run("--zero-stage", 2) == stage_zero
    assert run(*STAGE3) == stage_zero
    # The binaries keep each rank's slice of the fp32 masters (at stage 1
    # too: forward reads them only as 16-bit copies), gather the 16-bit
    # compute copies (in 16 bits: the all-gather moves 2-byte elements) and
    # print the same digits.
    for zero in (["--zero-stage", 1], [*STAGE3, "--max-reuse-distance", 0]):
        out = tmp_path / f"out-{zero[1]}"
        result = sharc("compile", path, *RECIPE, *precision, "--world-size",
                       2, "--reduce-bucket-size", 2000, *zero, "-o", out)
        assert result.returncode == 0, result.stderr
        assert steps_of(mpirun(2, out / "train", *inputs, "--steps", 8)) == \
            stage_zero
        manifest = json.loads((out / "manifest.json").read_text())
        params = [b for b in manifest["buffers"] if b["role"] == "param"]
        elements = [int(np.prod(b["file_shape"])) for b in params]
        assert manifest["parameter_bytes"] == \
            sum(4 * (-(-n // 2)) for n in elements)
        padded = sum(2 * 2 * (-(-n // 2)) for n in elements)
        gathered = {c["kind"]: c
                    for c in manifest["collectives"]}["all_gather"]
        # Each 16-bit copy gathered once (stage 1: kept for the step), at
        # stage 3 at most twice (forward and backward).
        if zero[1] == 1:
            assert gathered["bytes_per_step"] == padded // 2
        else:
            assert padded // 2 <= gathered["bytes_per_step"] <= padded
    if precision == FP16:
        result = sharc("eval", path, "--train", "--steps", 8, *RECIPE,
                       *precision, "--world-size", 2, "--zero-stage", 2,
                       *inputs)
        assert " skipped" in result.stdout


def state_files(directory):
    """File name -> array (the binary and the evaluator both name the files
    after the ONNX names)."""
    return {p.name: np.load(p)
            for p in sorted(pathlib.Path(directory).glob("*.npy"))}


def assert_same_files(a, b):
    files_a, files_b = state_files(a), state_files(b)
    assert sorted(files_a) == sorted(files_b)
    for file in files_a:
        assert files_a[file].shape == files_b[file].shape, file
        assert files_a[file].tobytes() == files_b[file].tobytes(), file


@pytest.mark.parametrize("ranks", [2, 4])
def test_binary_stages(sharc, exported, tmp_path, ranks):
    """The compiled stage-1, 2 and 3 binaries print the evaluator's digits
    and stage 0's, save their states with each rank's slices in its own
    folder (which `sharc consolidate` makes stage 0's files, bit for bit),
    resume from them at other stages, and report each rank's
    share of the optimizer state (from stage 2 on of the gradients, at stage
    3 of the parameters)."""
    path, inputs = exported["gpt"]
    outs = {}
    # Stage 3 gathers each parameter again in backward (reuse distance 0),
    # prefetching one parameter ahead.
    extra = {3: ["--param-persistence-threshold", 0, "--max-reuse-distance", 0,
                 "--prefetch-bucket-size", 1]}
    for stage in (0, 1, 2, 3):
        out = tmp_path / f"out-{stage}"
        result = sharc("compile", path, *RECIPE, "--world-size", ranks,
                       "--zero-stage", stage, "--reduce-bucket-size", 3000,
                       *extra.get(stage, []), "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        outs[stage] = (out, result.stdout)
    runs = {}
    for stage, (out, _) in outs.items():
        runs[stage] = mpirun(ranks, out / "train", *inputs, "--steps", 6,
                             "--save-state", tmp_path / f"state-{stage}")
    for stage in (1, 2, 3):
        assert steps_of(runs[stage]) == steps_of(runs[0])
    for stage in (1, 2, 3):
        evaluator = sharc("eval", path, "--train", "--steps", 6, *RECIPE,
                          "--world-size", ranks, "--zero-stage", stage,
                          "--reduce-bucket-size", 3000, *inputs,
                          *extra.get(stage, []),
                          "--dump-state", tmp_path / f"state-eval-{stage}")
        assert steps_of(runs[stage]) == steps_of(evaluator)
        # Each rank saved its own slices; consolidated, they are stage 0's
        # and the evaluator's whole tensors.
        state = tmp_path / f"state-{stage}"
        for rank in range(ranks):
            assert list((state / f"rank-{rank}-of-{ranks}").glob("*.npy"))
        consolidated = tmp_path / f"consolidated-{stage}"
        result = sharc("consolidate", state, "-o", consolidated)
        assert result.returncode == 0, result.stderr
        assert_same_files(consolidated, tmp_path / "state-0")
        assert_same_files(consolidated, tmp_path / f"state-eval-{stage}")
    # Stage 3 partitions every parameter: only the step counter is whole.
    assert [p.name for p in (tmp_path / "state-3").glob("*.npy")] == \
        ["step.npy"]

    # Resuming from the saved state continues the run: 6 + 3 steps are the
    # first 9 of one run; a stage-1 state (its slices read by each rank)
    # resumes at stages 2 and 3, a stage-3 state at stage 0 (reassembled),
    # and the consolidated state resumes as the partitioned one does.
    for stage, state in [(2, "state-1"), (3, "state-1"), (0, "state-3"),
                         (3, "consolidated-3")]:
        out = outs[stage][0]
        resumed = mpirun(ranks, out / "train", *inputs, "--steps", 3,
                         "--weights", tmp_path / state)
        whole = mpirun(ranks, out / "train", *inputs, "--steps", 9)
        assert steps_of(resumed) == steps_of(whole)[6:], (stage, state)
    out = outs[2][0]

    # Per rank: AdamW's two moments of ceil(n / N) elements per parameter,
    # and the 8-byte step counter.
    manifest = json.loads((out / "manifest.json").read_text())
    params = [b for b in manifest["buffers"] if b["role"] == "param"]
    elements = [int(np.prod(b["shape"], dtype=np.int64)) for b in params]
    expected = sum(2 * 4 * (-(-n // ranks)) for n in elements) + 8
    assert manifest["optimizer_state_bytes"] == expected
    stage0 = json.loads((outs[0][0] / "manifest.json").read_text())
    assert stage0["optimizer_state_bytes"] == 2 * 4 * sum(elements) + 8
    for stage in (1, 2, 3):
        report = re.search(r"gradient bytes (\d+), optimizer state bytes "
                           r"(\d+)", outs[stage][1])
        assert report and int(report.group(2)) == expected
        # Stage 2 keeps each rank's gradient slices (ceil(n / N) elements
        # per parameter) past backward, stage 1 the whole gradients.
        gradients = sum(4 * (-(-n // ranks)) for n in elements) \
            if stage >= 2 else 4 * sum(elements)
        assert int(report.group(1)) == gradients
        assert json.loads((outs[stage][0] / "manifest.json").read_text())[
            "gradient_bytes"] == gradients
    # The gradients go out once (reduce-scatter) and the new parameters
    # come back once (all-gather): (N - 1) / N of the padded bytes each.
    collectives = {c["kind"]: c for c in manifest["collectives"]}
    padded = sum(4 * ranks * (-(-n // ranks)) for n in elements)
    assert collectives["reduce_scatter"]["bytes_per_step"] == \
        (ranks - 1) * padded // ranks
    assert collectives["all_gather"]["bytes_per_step"] == \
        (ranks - 1) * padded // ranks
    for stage in (1, 2, 3):
        planned = re.search(r"summary: collective bytes per step planned "
                            r"(\d+) measured (\d+)", runs[stage].stdout)
        assert planned and planned.group(1) == planned.group(2)

    # Stage 3: each rank keeps its slices of the parameters (ceil(n / N)
    # elements each), gathers each one in forward and again in backward
    # where backward reads it (the position embedding is only read in
    # forward: its gradient is a scatter), and frees them in between.
    out, report = outs[3]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameter_bytes"] == \
        sum(4 * (-(-n // ranks)) for n in elements)
    match = re.search(r"report: per rank: gathered parameters peak bytes "
                      r"(\d+)", report)
    assert match and 0 < int(match.group(1)) < padded
    assert manifest["gathered_parameter_peak_bytes"] == int(match.group(1))
    gathered = {c["kind"]: c for c in manifest["collectives"]}["all_gather"]
    once = (ranks - 1) * padded // ranks
    assert once < gathered["bytes_per_step"] <= 2 * once
    # The parameters it no longer keeps outweigh the gathered ones in its
    # arena.
    stage2 = json.loads((outs[2][0] / "manifest.json").read_text())
    assert manifest["parameter_bytes"] + manifest["arena_bytes"] < \
        stage2["parameter_bytes"] + stage2["arena_bytes"]


def config(tmp_path, zero):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 8,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
        "zero_optimization": zero}))
    return path


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_config_stages(sharc, exported, tmp_path, stage):
    path, inputs = exported["mlp"]
    out = tmp_path / "out"
    zero = {"stage": stage, "allgather_bucket_size": 100,
            "reduce_scatter": True, "contiguous_gradients": True}
    if stage == 3:
        # DeepSpeed's names; the 32 x 32 hidden layer's weight is above the
        # threshold, the rest stays whole.
        zero.update({"stage3_param_persistence_threshold": 600,
                     "stage3_max_reuse_distance": 0})
    result = sharc("compile", path, "--config", config(tmp_path, zero),
                   "--world-size", 2, "-o", out, "--report")
    assert result.returncode == 0, result.stderr
    assert f"report: ZeRO stage {stage}:" in result.stdout
    source = (out / "program.cpp").read_text()
    # Stage 2 starts each reduce-scatter in backward and waits at the update.
    scatter = "startReduceScatter(" if stage >= 2 else "reduceScatter("
    assert f"ctx->comm->{scatter}" in source
    assert "ctx->comm->allGather(" in source
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["zero_stage"] == stage
    sliced = [b["name"] for b in manifest["buffers"]
              if b["role"] == "param" and "file_shape" in b]
    if stage == 3:
        assert sliced == ["model_fc2_weight"], sliced
        # Gathered in forward and again in backward.
        assert source.count("ctx->comm->allGather(") >= 2
    else:
        assert sliced == []


@pytest.mark.parametrize("stage", [2, 3])
def test_stages_with_gradient_accumulation(sharc, exported, tmp_path, stage):
    """Stages 2 and 3 with micro-batches: each micro-batch's gradients are
    reduce-scattered in the micro-batch loop, which sums this rank's slices
    (DeepSpeed's stage 2 does the same).  That sums over the ranks first and
    over the micro-batches second, stage 0 the other way round, so the
    losses agree with stage 0's within rounding, and the binary prints the
    evaluator's digits; the config's gradient_accumulation_steps does it
    too."""
    path, inputs = exported["gpt"]
    zero = ["--zero-stage", stage, "--param-persistence-threshold", 0]
    run = lambda *extra: steps_of(sharc(
        "eval", path, "--train", "--steps", 6, *RECIPE, "--world-size", 2,
        "--grad-accum", 3, "--reduce-bucket-size", 2000, *extra, *inputs))
    losses = lambda lines: [float(loss) for _, loss, _, _ in lines]
    staged = run(*zero)
    np.testing.assert_allclose(losses(staged), losses(run()), rtol=1e-6)
    out = tmp_path / "out"
    result = sharc("compile", path, *RECIPE, "--world-size", 2,
                   "--grad-accum", 3, "--reduce-bucket-size", 2000, *zero,
                   "-o", out, "--report")
    assert result.returncode == 0, result.stderr
    assert steps_of(mpirun(2, out / "train", *inputs, "--steps", 6)) == staged
    # The reduce-scatters run once per micro-batch: three times the bytes.
    manifest = json.loads((out / "manifest.json").read_text())
    elements = [int(np.prod(b.get("file_shape", b["shape"])))
                for b in manifest["buffers"] if b["role"] == "param"]
    padded = sum(4 * 2 * (-(-n // 2)) for n in elements)
    collectives = {c["kind"]: c for c in manifest["collectives"]}
    assert collectives["reduce_scatter"]["bytes_per_step"] == 3 * padded // 2
    if stage == 3:
        # Each micro-batch gathers every parameter (once: DeepSpeed's reuse
        # distance keeps it from forward to backward), as DeepSpeed's
        # forward-backward passes do; nothing gathered crosses micro-batches.
        assert collectives["all_gather"]["bytes_per_step"] == 3 * padded // 2
        assert "startAllGather(" in program_in_loop(out / "program.cpp")
    config_path = tmp_path / "ds_config.json"
    config_path.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
        "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
        "zero_optimization": {"stage": stage}}))
    mlp, mlp_inputs = exported["mlp"]
    result = sharc("eval", mlp, "--train", "--steps", 2, "--config",
                   config_path, "--world-size", 2, *mlp_inputs)
    assert result.returncode == 0, result.stderr


def test_partitioned_state_at_another_world_size_and_refusals(
        sharc, exported, tmp_path):
    """A state saved at stage 3 on 4 ranks (each rank its slices) resumes
    on 2: each rank reassembles its slice from the 4 slice files, as it
    would from the consolidated state.  A torn save (a slice folder of
    another save), a missing slice and a damaged index are refused with
    the file named, and no rank starts training."""
    path, inputs = exported["gpt"]
    state = tmp_path / "state"
    four = tmp_path / "four"
    result = sharc("compile", path, *RECIPE, "--world-size", 4, *STAGE3,
                   "-o", four)
    assert result.returncode == 0, result.stderr
    steps_of(mpirun(4, four / "train", *inputs, "--steps", 4,
                    "--save-state", state))
    consolidated = tmp_path / "consolidated"
    assert sharc("consolidate", state, "-o", consolidated).returncode == 0
    two = tmp_path / "two"
    result = sharc("compile", path, *RECIPE, "--world-size", 2, *STAGE3,
                   "-o", two)
    assert result.returncode == 0, result.stderr
    resumed = mpirun(2, two / "train", *inputs, "--steps", 3,
                     "--weights", state)
    assert steps_of(resumed) == steps_of(
        mpirun(2, two / "train", *inputs, "--steps", 3,
               "--weights", consolidated))

    def refused(damage, message):
        broken = tmp_path / f"broken-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(state, broken)
        target = damage(broken)
        result = mpirun(2, two / "train", *inputs, "--steps", 1,
                        "--weights", broken)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
        assert str(target) in result.stderr, result.stderr
        assert not STEP_LINE.search(result.stdout)

    def torn(broken):
        target = broken / "rank-2-of-4" / "sharc-save-id.txt"
        target.write_text("0000000000000000\n")
        return target

    def missing(broken):
        target = next((broken / "rank-1-of-4").glob("*.npy"))
        target.unlink()
        return target

    def damaged(broken):
        target = broken / "sharc-state.txt"
        target.write_text(target.read_text().replace("ranks 4", "ranks four"))
        return target

    refused(torn, "belongs to another save")
    refused(missing, "No such file or directory")
    refused(damaged, "ranks must be an integer")
    result = sharc("consolidate", state, "-o", state)
    assert result.returncode != 0
    assert "the output directory is the state's own" in result.stderr


def test_partitioned_save_that_fails_leaves_nothing(exported, sharc, tmp_path):
    """A save that fails on a rank (a disk that fills up, simulated per
    process by SHARC_TEST_WRITE_LIMIT) ends every rank with an error and
    replaces nothing: a previous state in the folder is left as it was, and
    no temporary file stays."""
    path, inputs = exported["gpt"]
    out = tmp_path / "out"
    result = sharc("compile", path, *RECIPE, "--world-size", 2, *STAGE3,
                   "-o", out)
    assert result.returncode == 0, result.stderr
    state = tmp_path / "state"
    steps_of(mpirun(2, out / "train", *inputs, "--steps", 2,
                    "--save-state", state))
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    launcher = shutil.which("mpirun")
    result = subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "SHARC_TEST_WRITE_LIMIT=20000", str(out / "train"),
         *map(str, inputs), "--steps", "1", "--save-state", str(state)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "--save-state" in result.stderr, result.stderr
    assert "No space left on device" in result.stderr, result.stderr
    after = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("zero,message", [
    ({"stage": 4}, "zero_optimization.stage"),
    ({"stage": 3, "stage3_param_persistence_threshold": -1},
     "zero_optimization.stage3_param_persistence_threshold"),
    ({"stage": 3, "stage3_max_reuse_distance": "far"},
     "zero_optimization.stage3_max_reuse_distance"),
    ({"stage": 3, "stage3_prefetch_bucket_size": -1},
     "zero_optimization.stage3_prefetch_bucket_size"),
    ({"stage": 3, "max_live_parameters": "many"},
     "zero_optimization.max_live_parameters"),
    ({"stage": 1, "reduce_scatter": False},
     "zero_optimization.reduce_scatter: false is not supported yet"),
    ({"stage": 1, "allgather_partitions": False},
     "zero_optimization.allgather_partitions: false is not supported yet"),
    ({"stage": 1, "allgather_bucket_size": 0},
     "zero_optimization.allgather_bucket_size"),
])
def test_config_errors(sharc, exported, tmp_path, zero, message):
    path, _ = exported["mlp"]
    result = sharc("compile", path, "--config", config(tmp_path, zero),
                   "--world-size", 2, "-o", tmp_path / "out")
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def program_in_loop(path):
    """The generated code of the micro-batch loop's body."""
    source = path.read_text()
    begin = source.index("for (int64_t micro")
    return source[begin:source.index("\n  }\n", begin)]


GATHERED_PEAK = re.compile(r"^report: per rank: gathered parameters peak "
                           r"bytes (\d+)", re.MULTILINE)


def test_prefetch_and_live_parameters(sharc, exported, tmp_path):
    """DeepSpeed's stage-3 prefetch: after each parameter gather's wait, the
    gathers that follow start while they add fewer elements than
    min(stage3_prefetch_bucket_size, stage3_max_live_parameters - live).
    Without prefetch the gathered parameters' planned peak is the least; one
    parameter ahead (a bucket of 1) holds more, DeepSpeed's default bucket
    (5e7: every later gather of this GPT) the most, and a live limit of one
    element prefetches nothing.  The losses do not change."""
    path, inputs = exported["gpt"]
    peaks, losses = {}, {}
    for name, keys in [("none", {"stage3_prefetch_bucket_size": 0}),
                       ("one", {"stage3_prefetch_bucket_size": 1}),
                       ("default", {}),
                       ("live", {"stage3_max_live_parameters": 1})]:
        out = tmp_path / name
        zero = {"stage": 3, "stage3_param_persistence_threshold": 0,
                "stage3_max_reuse_distance": 0, **keys}
        config_path = tmp_path / f"{name}.json"
        config_path.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
            "zero_optimization": zero}))
        result = sharc("compile", path, "--config", config_path,
                       "--world-size", 2, "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        peaks[name] = int(GATHERED_PEAK.search(result.stdout).group(1))
        run = mpirun(2, out / "train", *inputs, "--steps", 3)
        assert run.returncode == 0, run.stderr
        losses[name] = [loss for _, loss, _, _ in steps_of(run)]
    assert peaks["none"] < peaks["one"] < peaks["default"], peaks
    assert peaks["live"] == peaks["none"], peaks
    assert all(value == losses["none"] for value in losses.values()), losses
    result = sharc("compile", path, "--optimizer", "sgd", "--lr", "0.1",
                   "--world-size", 2, "--zero-stage", 3,
                   "--prefetch-bucket-size", -1, "-o", tmp_path / "bad")
    assert result.returncode != 0
    assert ("option 'prefetch-bucket-size' must be between 0 and "
            "1099511627776, got -1") in result.stderr, result.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("stage,message", [
    (4, "option 'zero-stage' must be between 0 and 3, got 4"),
    (-1, "option 'zero-stage' must be between 0 and 3, got -1")])
def test_zero_stage_flag_range(sharc, exported, tmp_path, stage, message):
    path, inputs = exported["mlp"]
    out = tmp_path / "out"
    for command in (["eval", path, "--train", "--steps", 1, *inputs],
                    ["compile", path, "--emit-only", "-o", out]):
        result = sharc(*command, "--optimizer", "sgd", "--lr", "0.1",
                       "--world-size", 2, "--zero-stage", stage)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
    assert not out.exists()


PEAK_LINE = re.compile(r"^summary: peak memory bytes per rank planned (\d+) "
                       r"measured (\d+)", re.MULTILINE)


def test_measured_memory_falls_by_the_planned_amount(sharc, tmp_path):
    """On a GPT of 27.3 M parameters at N = 2, each stage's measured peak
    (rank 0's resident set, getrusage) falls below stage 0's by what the
    plan says it saves, within 10 % either way; stage 2 plans less than
    stage 1 (its gradients die in backward), stage 3 less than stage 2 (it
    keeps half the parameters and gathers each one where it is read,
    forward and backward apart)."""
    config = models.GptConfig(vocab=8192, seq=64, dim=512, heads=8, layers=6,
                              batch=1)
    path = tmp_path / "gpt.onnx"
    models.export(models.make_training_case("gpt", gpt_config=config), path)
    _, inputs = models.write_data("gpt", 8, 5, tmp_path, config=config)
    peaks = {}
    for stage in (0, 1, 2, 3):
        out = tmp_path / f"out-{stage}"
        reuse = (["--max-reuse-distance", 0, "--prefetch-bucket-size", 1]
                 if stage == 3 else [])
        result = sharc("compile", path, "--optimizer", "adamw", "--lr", "0.001",
                       "--world-size", 2, "--zero-stage", stage,
                       "--reduce-bucket-size", 5000000,
                       "--allgather-bucket-size", 5000000, *reuse, "-o", out)
        assert result.returncode == 0, result.stderr
        run = mpirun(2, out / "train", *inputs, "--steps", 2)
        assert run.returncode == 0, run.stderr
        match = PEAK_LINE.search(run.stdout)
        assert match, run.stdout
        peaks[stage] = tuple(map(int, match.groups()))
        shutil.rmtree(out)
    assert peaks[3][0] < peaks[2][0] < peaks[1][0] < peaks[0][0]
    for stage in (1, 2, 3):
        planned = peaks[0][0] - peaks[stage][0]
        measured = peaks[0][1] - peaks[stage][1]
        assert abs(measured - planned) <= 0.1 * planned, (stage, peaks)


SCHEDULE_LINE = re.compile(r"^report: schedule: (\S+): (\d+) of (\d+) started calls "
                           r"overlap compute \((\d+) to (\d+) ", re.MULTILINE)


def test_report_shows_what_each_collective_overlaps(sharc, exported, tmp_path):
    """--report's schedule lines (and the manifest's `schedule`) say, for each
    kind of started collective, how many overlap compute: with overlap_comm
    (the default) stage 3's reduce-scatters and prefetched all-gathers do,
    and the gradient all-reduce of stage 0 does; without it every wait
    follows its start and none does.  The plan (--plan) says the same as the
    compile."""
    path, _ = exported["gpt"]
    counts = {}
    for overlap in ("true", "false"):
        for stage in (0, 3):
            flags = [*RECIPE, "--world-size", 2, "--zero-stage", stage,
                     "--param-persistence-threshold", 0, "--max-reuse-distance", 0,
                     "--reduce-bucket-size", 3000, f"--overlap-comm={overlap}"]
            out = tmp_path / f"out-{overlap}-{stage}"
            result = sharc("compile", path, *flags, "--emit-only", "-o", out, "--report")
            assert result.returncode == 0, result.stderr
            lines = {kind: tuple(map(int, rest))
                     for kind, *rest in SCHEDULE_LINE.findall(result.stdout)}
            plan = sharc("compile", path, *flags, "--plan")
            assert SCHEDULE_LINE.findall(plan.stdout) == \
                SCHEDULE_LINE.findall(result.stdout)
            manifest = json.loads((out / "manifest.json").read_text())
            for kind, (overlapping, started, _, _) in lines.items():
                entries = [e for e in manifest["schedule"]
                           if e["kind"] == kind.replace("-", "_")]
                assert len(entries) == started
                assert sum(e["compute_calls_between"] > 0 for e in entries) == \
                    overlapping
            counts[overlap, stage] = lines
    assert counts["true", 0]["all-reduce"][0] >= 1
    assert counts["true", 3]["reduce-scatter"][0] >= 1
    assert counts["true", 3]["all-gather"][0] >= 1
    for stage in (0, 3):
        assert all(overlapping == 0 for overlapping, *_ in counts["false", stage].values())
    # Without overlap stage 3's gathers block: no started all-gather at all.
    assert "all-gather" not in counts["false", 3]
