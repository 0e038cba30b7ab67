"""Compiled training binaries against the reference evaluator.

`sharc compile` builds OUTDIR/train for each model of models.py; the binary
runs 20 steps under `mpirun -np N` (N = 1, 2, 4, compiled with --world-size N)
and its per-step losses and learning rates must equal those of
`sharc eval --train` on the same global batch (one rank accumulating N times
as many micro-batches), rtol 1e-5.  Also checked: the run summary (planned
arena and collective bytes equal the measured ones), bit-identical reruns,
the manifest and report, model names that try to inject code, and error
paths of the compile command.
"""

import json
import os
import pathlib
import re
import select
import shutil
import subprocess
import time

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import models
from conftest import cpu_flags

STEPS = 20
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)", re.MULTILINE)
SUMMARY = re.compile(r"^summary: (.*) planned (\S+) measured (\S+)$", re.MULTILINE)
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01",
          "--scheduler", "WarmupLR", "--warmup-max-lr", "0.003",
          "--warmup-num-steps", "5"]
COMPILED = list(models.MODEL_NAMES)


def mpirun(np_, *args, timeout=600):
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found"
    return subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
         *map(str, args)],
        capture_output=True, text=True, timeout=timeout)


def parse_steps(stdout):
    steps = [(int(k), float(loss), float(lr))
             for k, loss, lr in STEP_LINE.findall(stdout)]
    assert [k for k, _, _ in steps] == list(range(1, len(steps) + 1)), stdout
    return ([loss for _, loss, _ in steps], [lr for _, _, lr in steps])


@pytest.fixture(scope="module", params=COMPILED)
def case(request, tmp_path_factory):
    """(name, model path, --input args, work directory)."""
    case = models.make_training_case(request.param)
    directory = tmp_path_factory.mktemp(f"compile-{case.name}")
    path = directory / f"{case.name}.onnx"
    models.export(case, path)
    # 37 rows: no global batch divides it, so the data wraps mid-step.
    data = models.make_inputs(case.name, 37, torch.Generator().manual_seed(11))
    args = []
    for name, tensor in data.items():
        file = directory / f"{name}.npy"
        np.save(file, tensor.numpy())
        args += ["--input", f"{name}={file}"]
    return case.name, path, args, directory


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_binary_matches_evaluator(sharc, case, ranks):
    name, path, inputs, directory = case
    extra = ["--freeze", "key.bias"] if name == "bert" else []
    out = directory / f"out-{ranks}"
    result = sharc("compile", path, *RECIPE, *extra, "--world-size", ranks,
                   "--reduce-bucket-size", 3000, "-o", out, "--report")
    assert result.returncode == 0, result.stderr
    assert "report: arena peak bytes" in result.stdout
    assert (out / "train").is_file() and (out / "manifest.json").is_file()

    run = mpirun(ranks, out / "train", *inputs, "--steps", STEPS,
                 "--log-every", 1)
    assert run.returncode == 0, run.stderr
    losses, lrs = parse_steps(run.stdout)

    reference = sharc("eval", path, "--train", "--steps", STEPS, *RECIPE,
                      *extra, "--grad-accum", ranks, *inputs)
    assert reference.returncode == 0, reference.stderr
    ref_losses, ref_lrs = parse_steps(reference.stdout)
    assert len(losses) == STEPS
    if ranks == 1:
        # One rank runs the evaluator's arithmetic in the evaluator's order:
        # every printed digit agrees (a change to the emitted code that moves
        # a bit shows here).
        assert STEP_LINE.findall(run.stdout) == STEP_LINE.findall(
            reference.stdout)
    else:
        # The evaluator simulating the N ranks: every digit agrees too.
        simulated = sharc("eval", path, "--train", "--steps", STEPS, *RECIPE,
                          *extra, "--world-size", ranks, *inputs)
        assert simulated.returncode == 0, simulated.stderr
        assert STEP_LINE.findall(run.stdout) == STEP_LINE.findall(
            simulated.stdout)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(lrs, ref_lrs, rtol=1e-12)

    summary = {what: (planned, measured)
               for what, planned, measured in SUMMARY.findall(run.stdout)}
    assert set(summary) == {"arena bytes", "collective bytes per step",
                            "collective calls per step"}, run.stdout
    for what, (planned, measured) in summary.items():
        assert float(planned) == float(measured), (what, run.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["world_size"] == ranks
    assert int(summary["arena bytes"][0]) == manifest["arena_bytes"]
    # All-reduce bytes by the nccl-tests formula over the trainable gradients
    # plus the loss.
    grad_bytes = manifest["gradient_bytes"]
    reduce = manifest["collectives"][0]
    if ranks == 1:
        assert reduce["calls_per_step"] == 0
    else:
        expected = sum(2 * (ranks - 1) * b // ranks for b in [4])  # the loss
        assert reduce["bytes_per_step"] >= expected
        assert reduce["bytes_per_step"] <= 2 * (ranks - 1) * (grad_bytes + 4) / ranks
        assert int(summary["collective bytes per step"][0]) == reduce["bytes_per_step"]

    if ranks == 2:
        # Deterministic: the same binary, data and N give identical output.
        again = mpirun(ranks, out / "train", *inputs, "--steps", STEPS)
        assert again.returncode == 0, again.stderr
        assert STEP_LINE.findall(again.stdout) == STEP_LINE.findall(run.stdout)


def test_manifest_lists_every_state_tensor(sharc, case):
    name, path, inputs, directory = case
    out = directory / "out-manifest"
    result = sharc("compile", path, "--optimizer", "adamw", "-o", out,
                   "--emit-only")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    roles = {}
    for buffer in manifest["buffers"]:
        roles.setdefault(buffer["role"], []).append(buffer)
        if buffer["role"] in ("param", "state"):
            array = np.load(out / buffer["file"])
            assert list(array.shape) == buffer["shape"]
            assert array.nbytes == buffer["bytes"]
    params = [b for b in roles["param"] if b["trainable"]]
    states = [b for b in roles["state"] if b["name"] != "step"]
    assert len(states) == 2 * len(params)  # exp_avg and exp_avg_sq
    assert manifest["optimizer_state_bytes"] == sum(b["bytes"] for b in roles["state"])
    assert manifest["compute_copy_bytes"] == 0  # fp32: no 16-bit copies
    assert not (out / "train").exists()
    # The optimizer writes parameters and moments in place: the only copies
    # into persistent buffers left are the loss, the learning rate and the
    # gradients' norm (the step's outputs).
    source = (out / "program.cpp").read_text()
    assert len(re.findall(r"sharc::kern::copy\(ctx, ctx->buffers\[", source)) == 3


# --------------------------------------------------------------------------
# Names that try to inject code
# --------------------------------------------------------------------------

EVIL = '"; system("x"); //'


def evil_model(path):
    """A linear classifier whose input, initializer and node names are C++
    code (and a trigraph and a newline)."""
    weight = helper.make_tensor(EVIL, TensorProto.FLOAT, [3, 4],
                                np.linspace(-1, 1, 12).tolist())
    bias = helper.make_tensor("b??/\n*/", TensorProto.FLOAT, [4], [0.1, 0.2, 0.3, 0.4])
    nodes = [
        helper.make_node("MatMul", ["x\\\"", EVIL], ["h"], name='"); abort(); ("'),
        helper.make_node("Add", ["h", "b??/\n*/"], ["logits"], name="*/ #include"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                         reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes, "evil",
        [helper.make_tensor_value_info("x\\\"", TensorProto.FLOAT, [5, 3]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


def test_names_never_reach_generated_code_unescaped(sharc, tmp_path):
    path = tmp_path / "evil.onnx"
    evil_model(path)
    out = tmp_path / "out"
    result = sharc("compile", path, "--optimizer", "sgd", "--lr", "0.1", "-o", out)
    assert result.returncode == 0, result.stderr
    source = (out / "program.cpp").read_text()
    assert "system(" not in source.replace('system(\\"x\\")', "")
    assert "abort()" not in source
    assert "#include \"runtime/Errors.h\"" in source
    # The escaped name is in the buffer table and reads back as the name.
    manifest = json.loads((out / "manifest.json").read_text())
    names = {b["name"] for b in manifest["buffers"]}
    assert "x\\\"" in names
    x = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
    labels = np.array([0, 1, 2, 3, 0], dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "labels.npy", labels)
    inputs = ["--input", f"x\\\"={tmp_path / 'x.npy'}",
              "--input", f"labels={tmp_path / 'labels.npy'}"]
    run = mpirun(1, out / "train", *inputs, "--steps", 3)
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", path, "--train", "--optimizer", "sgd", "--lr",
                      "0.1", "--steps", 3, *inputs)
    assert reference.returncode == 0, reference.stderr
    np.testing.assert_allclose(parse_steps(run.stdout)[0],
                               parse_steps(reference.stdout)[0], rtol=1e-6)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_compile_errors(sharc, tmp_path):
    case = models.make_training_case("mlp")
    path = tmp_path / "mlp.onnx"
    models.export(case, path)

    result = sharc("compile", path, "--target", "tpu", "-o", tmp_path / "a")
    assert result.returncode == 1
    assert "--target must be cpu or cuda, not 'tpu'" in result.stderr

    result = sharc("compile", path)
    assert result.returncode == 1 and "needs -o OUTDIR" in result.stderr

    result = sharc("compile", path, "--cuda-arch", "90", "-o", tmp_path / "b")
    assert result.returncode == 1 and "--cuda-arch" in result.stderr

    # Never overwrite a directory that is not a sharc output.
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    result = sharc("compile", path, "-o", precious)
    assert result.returncode == 1 and "not a sharc compile output" in result.stderr
    assert (precious / "notes.txt").read_text() == "keep"

    # A failing compile leaves nothing behind.
    result = sharc("compile", path, "--optimizer", "nope", "-o", tmp_path / "c")
    assert result.returncode == 1
    assert not (tmp_path / "c").exists()
    assert not (tmp_path / "c.partial").exists()

    # A binary compiled for 2 ranks refuses to run on 1.
    out = tmp_path / "two"
    assert sharc("compile", path, "--world-size", 2, "-o", out).returncode == 0
    run = mpirun(1, out / "train", "--steps", 1, timeout=60)
    assert run.returncode != 0
    assert "compiled for 2 ranks" in run.stderr + run.stdout


@pytest.mark.parametrize("zero", [
    [], ["--zero-stage", 2],
    ["--zero-stage", 3, "--param-persistence-threshold", 0,
     "--max-reuse-distance", 0]], ids=["stage-0", "stage-2", "stage-3"])
def test_a_rank_that_dies_ends_every_rank(sharc, tmp_path, zero):
    """Killing one rank of a running 2-rank job (SIGKILL, no chance to clean
    up) ends the whole job with a non-zero status within a bounded time --
    at ZeRO stages 2 and 3 too, whose steps are mostly started
    reduce-scatters and all-gathers (the kill lands mid-collective)."""
    case = models.make_training_case("mlp")
    path = tmp_path / "mlp.onnx"
    models.export(case, path)
    data = models.make_inputs("mlp", 64, torch.Generator().manual_seed(3))
    inputs = []
    for name, tensor in data.items():
        np.save(tmp_path / f"{name}.npy", tensor.numpy())
        inputs += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out = tmp_path / "out"
    assert sharc("compile", path, "--world-size", 2, *zero,
                 "-o", out).returncode == 0
    launcher = shutil.which("mpirun")
    job = subprocess.Popen(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         str(out / "train"), *inputs, "--steps", "100000000", "--log-every",
         "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        binary = str(out / "train")
        victims = []
        for _ in range(200):  # wait until both ranks run
            listing = subprocess.run(["pgrep", "-f", binary], capture_output=True,
                                     text=True).stdout.split()
            victims = [int(pid) for pid in listing if int(pid) != job.pid]
            if len(victims) >= 2:
                break
            time.sleep(0.1)
        assert len(victims) >= 2, "the ranks did not start"
        # Past MPI's start-up on both ranks: the first step line (it needs
        # both) has been printed.  A rank killed during MPI_Init ends the job
        # through another path, with another message.
        ready, _, _ = select.select([job.stdout], [], [], 60)
        assert ready and job.stdout.readline().startswith("step 1 "), \
            "no first step line"
        os.kill(victims[-1], 9)
        _, stderr = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    # mpirun reports the rank that died and why.
    assert "signal 9" in stderr or "Killed" in stderr, stderr


def test_mlir_flags_apply_to_the_compile_pipeline(sharc, tmp_path):
    case = models.make_training_case("mlp")
    path = tmp_path / "mlp.onnx"
    models.export(case, path)
    result = sharc("compile", path, "--emit-only", "-o", tmp_path / "a",
                   "--mlir-print-ir-after-all")
    assert result.returncode == 0, result.stderr
    for name in ["sharc-autodiff", "sharc-optimizer", "sharc-prepare-emission",
                 "sharc-fuse", "sharc-update-in-place", "sharc-plan-memory"]:
        assert f"IR Dump After" in result.stderr and f"({name})" in result.stderr, name
    result = sharc("compile", path, "--emit-only", "-o", tmp_path / "b",
                   "--mlir-timing")
    assert result.returncode == 0, result.stderr
    assert "Execution time report" in result.stderr
    for phase in ["PrepareEmission", "UpdateInPlace", "emit-program"]:
        assert phase in result.stderr, phase


def test_accumulation_clipping_and_sgd_in_the_binary(sharc, case):
    """Gradient accumulation inside the binary (GAS = 2 micro-batches per rank
    per step), global-norm clipping after the all-reduce and SGD with
    momentum, on 2 ranks, against the evaluator on the same global batch."""
    name, path, inputs, directory = case
    recipe = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
              "--clip", "0.5"]
    out = directory / "out-gas"
    result = sharc("compile", path, *recipe, "--grad-accum", 2,
                   "--world-size", 2, "-o", out)
    assert result.returncode == 0, result.stderr
    run = mpirun(2, out / "train", *inputs, "--steps", 8)
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", path, "--train", "--steps", 8, *recipe,
                      "--grad-accum", 4, *inputs)
    assert reference.returncode == 0, reference.stderr
    np.testing.assert_allclose(parse_steps(run.stdout)[0],
                               parse_steps(reference.stdout)[0], rtol=1e-5)


def test_bad_data_values_stop_every_rank_with_the_node(sharc, tmp_path):
    """A class label outside the classes and a token id outside the embedding
    table are caught inside the kernels; the step stops every rank with the
    ONNX node named."""
    for name, bad_input, bad_value, message in (
            ("mlp", "labels", 42, "a loss target is not a class index in [0, 10)"),
            ("gpt", "tokens", 1000, "gather index out of range")):
        case = models.make_training_case(name)
        path = tmp_path / f"{name}.onnx"
        models.export(case, path)
        data = models.make_inputs(name, 8, torch.Generator().manual_seed(5))
        inputs = []
        for input_name, tensor in data.items():
            array = tensor.numpy().copy()
            if input_name == bad_input:
                array.reshape(-1)[3] = bad_value
            np.save(tmp_path / f"{name}-{input_name}.npy", array)
            inputs += ["--input", f"{input_name}={tmp_path / f'{name}-{input_name}.npy'}"]
        out = tmp_path / f"out-{name}"
        assert sharc("compile", path, "--world-size", 2, "-o", out).returncode == 0
        run = mpirun(2, out / "train", *inputs, "--steps", 2, timeout=60)
        assert run.returncode != 0
        assert message in run.stderr and "step failed" in run.stderr, run.stderr
        assert f'{path.name}"' in run.stderr  # the location names the model


@pytest.mark.parametrize("ranks", [1, 2])
def test_activation_epilogues_in_the_binary(sharc, tmp_path, ranks):
    """Bias + tanh-GELU (storing the pre-activation for the backward pass)
    and bias + ReLU run as GEMM epilogues; the binary's losses still equal
    the evaluator's."""
    path = tmp_path / "epilogues.onnx"
    models.make_epilogue_model(path)
    rng = np.random.default_rng(6)
    np.save(tmp_path / "x.npy", rng.standard_normal((29, 16)).astype(np.float32))
    np.save(tmp_path / "labels.npy", rng.integers(0, 10, 29).astype(np.int64))
    inputs = ["--input", f"x={tmp_path / 'x.npy'}",
              "--input", f"labels={tmp_path / 'labels.npy'}"]
    out = tmp_path / "out"
    result = sharc("compile", path, *RECIPE, "--world-size", ranks, "-o", out,
                   "--report")
    assert result.returncode == 0, result.stderr
    # The three forward GEMMs carry the epilogues.
    assert "(3 with a bias or activation epilogue)" in result.stdout
    source = (out / "program.cpp").read_text()
    assert source.count("GemmActivation::geluTanh") == 1
    assert source.count("GemmActivation::relu") == 1
    assert source.count("args.aux = ") == 1
    run = mpirun(ranks, out / "train", *inputs, "--steps", STEPS,
                 "--log-every", 1)
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", path, "--train", "--steps", STEPS, *RECIPE,
                      "--grad-accum", ranks, *inputs)
    assert reference.returncode == 0, reference.stderr
    losses = parse_steps(run.stdout)[0]
    assert len(losses) == STEPS
    np.testing.assert_allclose(losses, parse_steps(reference.stdout)[0],
                               rtol=1e-5)


def test_reduce_bucket_size_comes_from_the_config(sharc, tmp_path):
    """zero_optimization.reduce_bucket_size sets the gradient all-reduce's
    buckets (the flag overrides it): the manifest's all-reduce calls equal a
    greedy bucketing of the trainable parameters, in order, computed here,
    plus one for the loss."""
    model = pathlib.Path(__file__).resolve().parents[1] / "models" / "tiny-gpt.onnx"

    def all_reduce_calls(out):
        manifest = json.loads((out / "manifest.json").read_text())
        calls, = [c["calls_per_step"] for c in manifest["collectives"]
                  if c["kind"] == "all_reduce"]
        sizes = [int(np.prod(b["shape"])) for b in manifest["buffers"]
                 if b["role"] == "param" and b["trainable"]]
        return calls, sizes

    def expected_calls(sizes, bucket):
        buckets, filled = 0, 0
        for size in sizes:
            if filled and filled + size > bucket:
                buckets, filled = buckets + 1, 0
            filled += size
        return buckets + (1 if filled else 0) + 1  # + the loss

    for bucket, flag in ((5000, None), (40000, None), (5000, 40000)):
        config = tmp_path / f"ds-{bucket}.json"
        config.write_text(json.dumps(
            {"zero_optimization": {"stage": 0, "reduce_bucket_size": bucket}}))
        out = tmp_path / f"out-{bucket}-{flag}"
        extra = ["--reduce-bucket-size", flag] if flag else []
        result = sharc("compile", model, "--config", config, "--world-size", 2,
                       *extra, "--emit-only", "-o", out)
        assert result.returncode == 0, result.stderr
        calls, sizes = all_reduce_calls(out)
        assert calls == expected_calls(sizes, flag or bucket), (bucket, flag)
    # The bucket sizes make a difference on this model.
    assert expected_calls(sizes, 5000) != expected_calls(sizes, 40000)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("ranks,gas", [(1, 1), (2, 2)])
def test_pipelines_and_translation_reproduce_compile(sharc, tmp_path, target,
                                                     ranks, gas):
    """sharc-opt with the train and compile pipelines, then sharc-translate,
    write the very file `sharc compile` writes (the pipelines and the code
    generator are libraries the CLI calls)."""
    from conftest import sharc_path
    tools = sharc_path().parent
    model = pathlib.Path(__file__).resolve().parents[1] / "models" / "tiny-gpt.onnx"
    flags = {"optimizer": "adamw", "lr": "0.003", "weight-decay": "0.01",
             "world-size": ranks, "grad-accum": gas,
             "reduce-bucket-size": 20000}
    out = tmp_path / "out"
    result = sharc("compile", model, "--target", target, "--emit-only",
                   *[f"--{k}={v}" for k, v in flags.items()], "-o", out)
    assert result.returncode == 0, result.stderr
    compiled = (out / ("program.cu" if target == "cuda" else "program.cpp"))

    mlir = tmp_path / "model.mlir"
    result = sharc("import", model, "-o", mlir, "--mlir-print-debuginfo")
    assert result.returncode == 0, result.stderr
    pipeline = " ".join(f"{k}={v}" for k, v in flags.items())
    opt = subprocess.run(
        [tools / "sharc-opt", mlir, f"--sharc-train-pipeline={pipeline}",
         "--sharc-compile-pipeline", "--mlir-print-debuginfo"],
        capture_output=True, timeout=300)
    assert opt.returncode == 0, opt.stderr.decode()
    # What the CLI records for checkpoints, as the manifest states it.
    manifest = json.loads((out / "manifest.json").read_text())
    translated = subprocess.run(
        [tools / "sharc-translate", "--emit-program", f"--target={target}",
         f"--model={model}", f"--sharc-version={manifest['sharc_version']}",
         f"--model-hash={manifest['model_hash']}",
         f"--training-config={manifest['training_config']}"],
        input=opt.stdout, capture_output=True, timeout=300)
    assert translated.returncode == 0, translated.stderr.decode()
    assert translated.stdout == compiled.read_bytes()


def collective_schedule(program):
    """(ticket, line number of its start, line number of its wait) for each
    all-reduce of an emitted program."""
    lines = program.splitlines()
    starts = {m.group(1): i for i, line in enumerate(lines)
              if (m := re.search(r"const uint64_t (ticket\d+) = "
                                 r"ctx->comm->startAllReduce\(", line))}
    waits = {m.group(1): i for i, line in enumerate(lines)
             if (m := re.search(r"ctx->comm->wait\((ticket\d+)\);", line))}
    assert starts.keys() == waits.keys(), (starts, waits)
    return [(t, starts[t], waits[t]) for t in sorted(starts, key=starts.get)]


def test_overlap_comm_moves_waits_not_results(sharc, tmp_path):
    """zero_optimization.overlap_comm (and --overlap-comm, which overrides it)
    decides where the all-reduces start and wait: off, each wait follows its
    start; on (the default), some collective overlaps other work.  The
    training is the same to the last printed digit either way."""
    model = pathlib.Path(__file__).resolve().parents[1] / "models" / "tiny-gpt.onnx"
    models_dir = model.parent
    data = [f"--input=tokens={models_dir / 'tiny-gpt-tokens.npy'}",
            f"--input=targets={models_dir / 'tiny-gpt-targets.npy'}"]
    runs = {}
    for name, overlap, flag in (("default", None, []),
                                ("off", False, []),
                                ("flag", False, ["--overlap-comm"])):
        zero = {"stage": 0, "reduce_bucket_size": 5000}
        if overlap is not None:
            zero["overlap_comm"] = overlap
        config = tmp_path / f"ds-{name}.json"
        config.write_text(json.dumps({"zero_optimization": zero, **DS_TRAINING}))
        out = tmp_path / name
        result = sharc("compile", model, "--config", config, "--world-size", 2,
                       *flag, "-o", out)
        assert result.returncode == 0, result.stderr
        program = (out / "program.cpp").read_text()
        run = mpirun(2, out / "train", *data, "--steps", 6)
        assert run.returncode == 0, run.stderr
        runs[name] = (program, STEP_LINE.findall(run.stdout))

    schedule = {name: collective_schedule(program)
                for name, (program, _) in runs.items()}
    assert len(schedule["off"]) > 2  # several buckets and the loss
    assert all(wait == start + 1 for _, start, wait in schedule["off"])
    assert any(wait > start + 1 for _, start, wait in schedule["default"])
    assert runs["flag"][0] == runs["default"][0]
    steps = runs["default"][1]
    assert len(steps) == 6
    assert runs["off"][1] == steps and runs["flag"][1] == steps


DS_TRAINING = {"train_micro_batch_size_per_gpu": 2,
               "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("name", ["mlp", "gpt", "bert", "cnn"])
def test_bf16_binary_matches_evaluator(sharc, tmp_path, name, ranks):
    """--precision bf16 compiles (bf16 compute, fp32 master weights): the CPU
    binary under `mpirun -np N` prints the step lines of `sharc eval --train
    --precision bf16 --world-size N` digit for digit; against one rank with
    N times the micro-batches (another summation order of the gradients, so
    an fp32 master weight can differ in its last bit and its bf16 copy round
    the other way) within 1e-3."""
    case = models.make_training_case(name)
    model = tmp_path / f"{name}.onnx"
    models.export(case, model)
    _, inputs = models.write_data(name, 37, 3, tmp_path)
    out = tmp_path / "out"
    result = sharc("compile", model, "--precision", "bf16", *RECIPE,
                   "--world-size", ranks, "-o", out)
    assert result.returncode == 0, result.stderr
    # The fp32 masters are the parameters; the bf16 copies, at most one per
    # parameter (not those only the fp32 policy ops read), are half as big.
    manifest = json.loads((out / "manifest.json").read_text())
    assert 0 < manifest["compute_copy_bytes"] <= manifest["parameter_bytes"] // 2
    assert all(buffer["type"] == "f32" for buffer in manifest["buffers"]
               if buffer["role"] == "param")
    run = mpirun(ranks, out / "train", *inputs, "--steps", 6)
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", model, "--train", "--steps", 6, "--precision",
                      "bf16", *RECIPE, "--world-size", ranks, *inputs)
    assert reference.returncode == 0, reference.stderr
    assert STEP_LINE.findall(run.stdout) == STEP_LINE.findall(reference.stdout)
    losses, _ = parse_steps(run.stdout)
    one_rank = sharc("eval", model, "--train", "--steps", 6, "--precision",
                     "bf16", *RECIPE, "--grad-accum", ranks, *inputs)
    np.testing.assert_allclose(losses, parse_steps(one_rank.stdout)[0],
                               rtol=1e-3)
    # Not the fp32 training.
    fp32 = sharc("eval", model, "--train", "--steps", 6, *RECIPE,
                 "--grad-accum", ranks, *inputs)
    assert parse_steps(fp32.stdout)[0] != losses


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_threads_do_not_change_the_bits(sharc, tmp_path, monkeypatch, precision):
    """One rank with two threads (`mpirun --bind-to none`, SHARC_NUM_THREADS=2)
    prints the evaluator's step lines digit for digit.  The GPT is large
    enough for the thread pool (250 rows per micro-batch: GEMMs cut into row
    blocks of 128 and 122 rows, and over 2^18 multiply-adds, which gemm()
    shares out between the threads).  Both run OpenBLAS's Haswell kernels
    (SHARC_BLAS_CORE, where the CPU has AVX2 and FMA): their sums depend on
    where a product is cut, so a cut by thread count rather than by the
    shape's blocks (gemmRowBlock, runtime/Gemm.h) changes these digits
    (checked: cutting each product in halves at two threads fails the bf16
    case).
    The Cooperlake kernels sum alike however a product is cut (checked with
    cuts at 64 rows, at halves and at 125 rows, and OpenBLAS's own threads),
    so with them the test could not see such a change."""
    blas_core = []
    if {"avx2", "fma"} <= cpu_flags():
        monkeypatch.setenv("SHARC_BLAS_CORE", "Haswell")
        blas_core = ["-x", "SHARC_BLAS_CORE"]
    config = models.GptConfig(vocab=96, seq=50, dim=64, heads=2, layers=1,
                              batch=5)
    case = models.make_training_case("gpt", gpt_config=config)
    model = tmp_path / "gpt.onnx"
    models.export(case, model)
    _, inputs = models.write_data("gpt", 12, 3, tmp_path, config=config)
    out = tmp_path / "out"
    precision_args = ["--precision", precision]
    result = sharc("compile", model, *precision_args, *RECIPE, "-o", out)
    assert result.returncode == 0, result.stderr
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found"
    run = subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to",
         "none", "-np", "1", "-x", "SHARC_NUM_THREADS", *blas_core,
         str(out / "train"),
         *inputs, "--steps", "4", "--log-every", "1"],
        capture_output=True, text=True, timeout=600,
        env=os.environ | {"SHARC_NUM_THREADS": "2"})
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", model, "--train", "--steps", 4, *precision_args,
                      *RECIPE, *inputs)
    assert reference.returncode == 0, reference.stderr
    assert len(STEP_LINE.findall(run.stdout)) == 4, run.stdout
    assert STEP_LINE.findall(run.stdout) == STEP_LINE.findall(reference.stdout)


SCALED_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+) scale (\S+)"
                         r"(?: ms \S+ (?:tokens|samples)/s \S+)?( skipped)?$", re.MULTILINE)
# A first scale high enough that the first steps overflow, a window short
# enough that it grows again within the run.
FP16 = ["--precision", "fp16", "--initial-scale-power", "24",
        "--loss-scale-window", "3"]


def expected_scales(skipped, scale, window, hysteresis):
    """The scale of every step given which steps overflowed, by DeepSpeed
    0.19.8's DynamicLossScaler rule (docs/semantics.md), written out here as
    the test's independent reference."""
    scales, left, last = [], hysteresis, -1
    for step, overflow in enumerate(skipped):
        scales.append(scale)
        if overflow:
            if hysteresis == 1 or left == 1:
                scale = max(scale / 2, 1.0)
            else:
                left -= 1
            last = step
        else:
            stable = step - last - 1
            if stable > 0 and stable % window == 0:
                left, scale = hysteresis, scale * 2
    return scales


def fp16_runs(sharc, tmp_path, name, ranks, steps=14):
    """The fp16 step lines of the binary on `ranks` ranks and of the
    evaluator (GAS `ranks`), as (step, loss, lr, scale, skipped) tuples."""
    case = models.make_training_case(name)
    model = tmp_path / f"{name}.onnx"
    models.export(case, model)
    _, inputs = models.write_data(name, 37, 3, tmp_path)
    out = tmp_path / "out"
    result = sharc("compile", model, *FP16, *RECIPE, "--world-size", ranks,
                   "-o", out)
    assert result.returncode == 0, result.stderr
    # The scaler's state starts where DeepSpeed's does.
    first = {name: np.load(out / "weights" / f"{name}.npy").item()
             for name in ("loss_scale", "loss_scale_hysteresis",
                          "last_overflow_step", "skipped_steps", "step")}
    assert first == {"loss_scale": 2.0 ** 24, "loss_scale_hysteresis": 2,
                     "last_overflow_step": -1, "skipped_steps": 0, "step": 0}
    run = mpirun(ranks, out / "train", *inputs, "--steps", steps)
    assert run.returncode == 0, run.stderr
    reference = sharc("eval", model, "--train", "--steps", steps, *FP16,
                      *RECIPE, "--world-size", ranks, *inputs)
    assert reference.returncode == 0, reference.stderr
    binary = SCALED_LINE.findall(run.stdout)
    evaluated = SCALED_LINE.findall(reference.stdout)
    assert len(binary) == steps and len(evaluated) == steps, run.stdout
    skipped = sum(bool(line[4]) for line in binary)
    assert re.search(rf"^summary: skipped steps {skipped} ", run.stdout,
                     re.MULTILINE), run.stdout
    return binary, evaluated


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("name", ["mlp", "gpt", "bert", "cnn"])
def test_fp16_binary_matches_evaluator(sharc, tmp_path, name, ranks):
    """--precision fp16 with DeepSpeed's dynamic loss scaler: the CPU binary
    under `mpirun -np N` prints the step lines of `sharc eval --train
    --world-size N`, scale and skipped steps included, digit for digit.
    The scales follow DeepSpeed's rule from the skipped steps, and the run
    overflows (the first scale, 2^24, is too high) and recovers."""
    binary, evaluated = fp16_runs(sharc, tmp_path, name, ranks)
    assert binary == evaluated
    scales = [float(line[3]) for line in binary]
    skipped = [bool(line[4]) for line in binary]
    assert skipped[0] and not all(skipped), binary
    assert scales == expected_scales(skipped, 2.0 ** 24, 3, 2)
