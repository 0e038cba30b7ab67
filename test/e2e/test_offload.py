"""ZeRO-Offload of the optimizer state to NVMe on the CPU binaries
(sharc-offload-optimizer, runtime/Swap.h; docs/offload.md).

With `--offload-optimizer nvme --nvme-path DIR` every rank keeps its optimizer
state (Adam's moments, SGD's momentum: this rank's ZeRO slices) in files of its
own under DIR, reads each sub-group of it before the update and writes it back
after, through io_uring.  Offloading moves bytes, not values: the binaries print
the step lines of the same run without offload digit for digit and save the
same state bit for bit (stages 1, 2 and 3, N = 1 and 2, fp32, bf16 and fp16
with skipped steps, with and without pipelining).  During a run the files have
the sizes the plan states and after it they are gone; the measured peak
memory per rank falls by the offloaded bytes; and the faults (an unwritable
folder, a full disk, a file truncated under the run) end every rank with an
error naming the path, leave no file behind and leave the last saved state as
it was.  Destructive tests work only in folders and mounts the test made.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import models

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import full_disk  # noqa: E402

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) lr (\S+)(?: scale (\S+))? ms .*?"
                       r"( skipped)?$", re.MULTILINE)
PEAK_LINE = re.compile(r"^summary: peak memory bytes per rank planned (\d+) "
                       r"measured (\d+)", re.MULTILINE)
NVME_LINE = re.compile(r"^summary: NVMe bytes per step planned read (\d+) written "
                       r"(\d+) measured read (\S+) written (\S+)", re.MULTILINE)
MEMORY_LINE = re.compile(r"^report: per rank memory: cpu device (\d+) bytes .*?, "
                         r"pinned host 0, NVMe (\d+); moved per step: PCIe 0, NVMe "
                         r"read (\d+) written (\d+)$", re.MULTILINE)
RECIPE = ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01",
          "--scheduler", "WarmupLR", "--warmup-max-lr", "0.003",
          "--warmup-num-steps", "3"]
STAGE3 = ["--zero-stage", 3, "--param-persistence-threshold", 0]
FP16 = ["--precision", "fp16", "--initial-scale-power", "24",
        "--loss-scale-window", "3"]
PAGE = 4096


def mpirun(ranks, *args, timeout=600):
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found"
    return subprocess.run(
        [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         *map(str, args)], capture_output=True, text=True, timeout=timeout)


def mpirun_background(ranks, *args):
    return subprocess.Popen(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)


def steps_of(result):
    assert result.returncode == 0, result.stderr
    lines = STEP_LINE.findall(result.stdout)
    assert lines, result.stdout
    return lines


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (model path, --input args)."""
    return models.export_training_cases(tmp_path_factory.mktemp("offload"))


def frozen(name):
    return ["--freeze", "key.bias"] if name == "bert" else []


def nvme(folder, *extra):
    return ["--offload-optimizer", "nvme", "--nvme-path", folder, *extra]


def compile_program(sharc, path, out, *flags):
    result = sharc("compile", path, *flags, "-o", out, "--report")
    assert result.returncode == 0, result.stderr
    return result


def offloaded_buffers(out):
    """The manifest's buffers that live on NVMe."""
    manifest = json.loads((out / "manifest.json").read_text())
    return [b for b in manifest["buffers"] if b["storage"] == "nvme"], manifest


def swap_bytes(nbytes):
    return (nbytes + PAGE - 1) // PAGE * PAGE


def states_equal(a, b):
    """Two saved states (runtime/StateDir.h) hold the same files, bit for bit."""
    files = lambda d: sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())
    assert files(a) == files(b)
    for name in files(a):
        if name.suffix == ".npy":
            np.testing.assert_array_equal(np.load(a / name), np.load(b / name))


def assert_offloaded(buffers, manifest, precision, ranks):
    """What moved: the optimizer state, and under mixed precision with
    partitioned masters (N > 1) the fp32 master slices too, whose 16-bit
    copies the step then carries on the device, derived from them."""
    assert buffers
    moved = {b["name"] for b in buffers}
    states = [b for b in manifest["buffers"] if b["role"] == "state"
              and "." in b["name"] and "derived_from" not in b]
    assert all(b["name"] in moved for b in states)
    copies = [b for b in manifest["buffers"] if "derived_from" in b]
    masters = {b["derived_from"] for b in copies}
    assert {b["name"] for b in buffers if b["role"] == "param"} == masters
    if precision != "fp32" and ranks > 1:
        assert copies and all(b["storage"] == "device" and "file" not in b
                              for b in copies)
        assert manifest["carried_copy_bytes"] == sum(b["bytes"] for b in copies)
    else:
        assert not copies


def train_both_ways(sharc, exported, tmp_path, name, ranks, stage, precision,
                    offload, common=()):
    """Compiles model `name` for `ranks` ranks at ZeRO `stage` in `precision`
    without offload and with the flags `offload` (both with the flags
    `common`), trains 6 steps with each and saves the state; returns
    {"device"|"offload": (step lines, state folder, compile result, run
    result)} after checking that both print the same step lines and save the
    same state."""
    path, inputs = exported[name]
    zero = STAGE3 if stage == 3 else ["--zero-stage", stage]
    mixed = {"fp32": [], "bf16": ["--precision", "bf16"], "fp16": FP16}[precision]
    flags = [*RECIPE, *frozen(name), *mixed, "--world-size", ranks,
             "--reduce-bucket-size", 2000, *zero, *common]
    runs = {}
    for mode, extra in (("device", []), ("offload", offload)):
        out = tmp_path / f"out-{mode}"
        report = compile_program(sharc, path, out, *flags, *extra)
        state = tmp_path / f"state-{mode}"
        result = mpirun(ranks, out / "train", *inputs, "--steps", 6,
                        "--save-state", state)
        runs[mode] = (steps_of(result), state, report, result)
    assert runs["offload"][0] == runs["device"][0]
    states_equal(runs["device"][1], runs["offload"][1])
    return runs


@pytest.mark.parametrize("name,ranks,stage,precision", [
    ("mlp", 2, 1, "fp32"), ("gpt", 2, 1, "fp32"), ("bert", 2, 1, "fp32"),
    ("cnn", 2, 1, "fp32"), ("gpt", 1, 1, "fp32"), ("gpt", 2, 2, "fp32"),
    ("gpt", 2, 3, "fp32"), ("gpt", 2, 2, "bf16"), ("gpt", 2, 1, "fp16"),
])
def test_nvme_offload_trains_as_without(sharc, exported, tmp_path, name, ranks,
                                        stage, precision):
    """The same step lines (all digits, fp16's skipped steps included) and
    the same saved state with and without offload; the offload folder holds
    nothing after the run.  Sub-groups of 300 elements split every model's
    state into several."""
    folder = tmp_path / "nvme"
    folder.mkdir()
    runs = train_both_ways(sharc, exported, tmp_path, name, ranks, stage,
                           precision, nvme(folder, "--sub-group-size", 300))
    runs["nvme"] = runs.pop("offload")
    if precision == "fp16":
        assert any(line[4] for line in runs["nvme"][0])
    assert list(folder.iterdir()) == []
    # The report and the run agree on what moves: every offloaded buffer is
    # read and written once per step, whole 4096-byte blocks.
    buffers, manifest = offloaded_buffers(tmp_path / "out-offload")
    assert_offloaded(buffers, manifest, precision, ranks)
    planned = sum(swap_bytes(b["bytes"]) for b in buffers)
    memory = MEMORY_LINE.search(runs["nvme"][2].stdout)
    assert memory, runs["nvme"][2].stdout
    assert tuple(map(int, memory.groups()[1:])) == (planned, planned, planned)
    moved = NVME_LINE.search(runs["nvme"][3].stdout)
    assert moved, runs["nvme"][3].stdout
    assert moved.groups() == (str(planned),) * 4
    # Without offload nothing is on NVMe.
    memory = MEMORY_LINE.search(runs["device"][2].stdout)
    assert memory and tuple(map(int, memory.groups()[1:])) == (0, 0, 0)


@pytest.mark.parametrize("name,ranks,stage,precision", [
    ("mlp", 1, 1, "fp32"), ("gpt", 2, 1, "fp32"), ("gpt", 2, 2, "bf16"),
    ("gpt", 2, 3, "fp16"), ("cnn", 2, 2, "fp32"),
])
def test_host_update_trains_as_without(sharc, exported, tmp_path, name, ranks,
                                       stage, precision):
    """ZeRO-Offload to the CPU as the CUDA target runs it (--host-update on
    the CPU target): the optimizer state in host memory, its update on the
    host on copies of what it reads, the new parameters copied back.  The
    same step lines and saved state as without offload; the binary counts
    the bytes copied and finds the plan's."""
    runs = train_both_ways(sharc, exported, tmp_path, name, ranks, stage,
                           precision, ["--offload-optimizer", "cpu", "--host-update"])
    runs["host"] = runs.pop("offload")
    _, manifest = offloaded_buffers(tmp_path / "out-offload")
    in_host = [b for b in manifest["buffers"] if b["storage"] == "host"]
    assert_offloaded(in_host, manifest, precision, ranks)
    copied = re.search(r"^summary: host memory .*; host transfer bytes per step "
                       r"planned (\d+) measured (\S+)$", runs["host"][3].stdout,
                       re.MULTILINE)
    assert copied, runs["host"][3].stdout
    assert copied.group(1) == copied.group(2) == \
        str(manifest["transfer_bytes_per_step"])
    assert "report: ZeRO-Offload to the CPU (optimizer state): each rank keeps " \
        "its optimizer state in host memory" in runs["host"][2].stdout


@pytest.mark.parametrize("stage,precision", [(2, "bf16"), (3, "fp32")])
def test_nvme_host_update_trains_as_without(sharc, exported, tmp_path, stage,
                                            precision):
    """NVMe offload as the CUDA target runs it (--host-update): the files read
    into host memory and written from it, the update on the host.  The same
    step lines and state as without offload; the NVMe and copy bytes are the
    plan's."""
    folder = tmp_path / "nvme"
    folder.mkdir()
    runs = train_both_ways(sharc, exported, tmp_path, "gpt", 2, stage, precision,
                           [*nvme(folder, "--sub-group-size", 300), "--host-update"])
    result = runs["offload"][3].stdout
    assert NVME_LINE.search(result), result
    copied = re.search(r"host transfer bytes per step planned (\d+) measured (\S+)$",
                       result, re.MULTILINE)
    assert copied and copied.group(1) == copied.group(2) != "0", result
    assert list(folder.iterdir()) == []


def test_resume_derives_the_carried_copies(sharc, exported, tmp_path):
    """bf16 at ZeRO stage 2 with the optimizer state and the fp32 masters
    offloaded: a run saved after 3 steps and resumed for 3 more prints the
    steps of one run of 6 (the resumed run derives its 16-bit copies from
    the saved masters, which is what the step carries), and the state it
    saves is that run's, resuming a run without offload as well."""
    path, inputs = exported["gpt"]
    folder = tmp_path / "nvme"
    folder.mkdir()
    flags = [*RECIPE, "--precision", "bf16", "--world-size", 2, "--zero-stage", 2,
             "--reduce-bucket-size", 2000]
    compile_program(sharc, path, tmp_path / "plain", *flags)
    compile_program(sharc, path, tmp_path / "offload", *flags,
                    *nvme(folder, "--sub-group-size", 300))
    whole = steps_of(mpirun(2, tmp_path / "plain" / "train", *inputs, "--steps", 6,
                            "--save-state", tmp_path / "whole"))
    first = steps_of(mpirun(2, tmp_path / "offload" / "train", *inputs, "--steps", 3,
                            "--save-state", tmp_path / "half"))
    second = steps_of(mpirun(2, tmp_path / "offload" / "train", *inputs, "--steps", 3,
                             "--weights", tmp_path / "half",
                             "--save-state", tmp_path / "resumed"))
    assert first + second == whole
    states_equal(tmp_path / "whole", tmp_path / "resumed")
    # The saved state holds no 16-bit copy: it resumes without offload too.
    plain = steps_of(mpirun(2, tmp_path / "plain" / "train", *inputs, "--steps", 3,
                            "--weights", tmp_path / "half"))
    assert plain == second


@pytest.mark.parametrize("precision,optimizer", [
    ("fp32", "none"), ("fp32", "cpu"), ("bf16", "none"), ("bf16", "cpu"),
    ("fp16", "nvme")])
def test_parameter_offload_trains_as_without(sharc, exported, tmp_path, precision,
                                             optimizer):
    """ZeRO stage 3's parameter offload as the CUDA target runs it
    (--offload-param cpu --host-update): the slices the gathers read (the
    fp32 slices, or under mixed precision the carried 16-bit copies) stay in
    host memory and each gather reads a copy made on the device for it, in
    every micro-batch (GAS 2).  With or without the optimizer offloaded (to
    the CPU or NVMe), the same step lines and state as without offload."""
    folder = tmp_path / "nvme"
    folder.mkdir()
    moved = {"none": [], "cpu": ["--offload-optimizer", "cpu"],
             "nvme": nvme(folder, "--sub-group-size", 300)}[optimizer]
    runs = train_both_ways(
        sharc, exported, tmp_path, "gpt", 2, 3, precision,
        ["--offload-param", "cpu", "--host-update", *moved],
        common=["--grad-accum", 2, "--max-reuse-distance", 0])
    _, manifest = offloaded_buffers(tmp_path / "out-offload")
    in_host = {b["name"] for b in manifest["buffers"] if b["storage"] == "host"}
    gathered = [b for b in manifest["buffers"]
                if ("derived_from" in b if precision != "fp32" else
                    b["role"] == "param" and "file_shape" in b)]
    assert gathered and all(b["name"] in in_host for b in gathered)
    assert "report: ZeRO-Offload of the parameters (stage 3)" in runs["offload"][2].stdout
    copied = re.search(r"host transfer bytes per step planned (\d+) measured (\S+)$",
                       runs["offload"][3].stdout, re.MULTILINE)
    assert copied and copied.group(1) == copied.group(2) != "0"


@pytest.mark.parametrize("precision,optimizer,host", [
    ("fp32", "none", False), ("bf16", "none", False), ("fp16", "nvme", False),
    ("fp32", "nvme", True), ("bf16", "cpu", True), ("bf16", "none", True)])
def test_parameter_offload_to_nvme_trains_as_without(sharc, exported, tmp_path,
                                                     precision, optimizer, host):
    """ZeRO stage 3's parameter offload to NVMe (--offload-param nvme): the
    slices the gathers read (the fp32 slices, or the carried 16-bit copies)
    live in files; each gather, in every micro-batch (GAS 2), reads a swap-in
    of its own, into the arena or (--host-update, the CUDA target's program)
    into host memory and then to the device.  With the optimizer state on
    the device, on the host or on NVMe, the same step lines and saved state
    as without offload; the files are the planned ones and are read as many
    times as the plan says."""
    folder = tmp_path / "nvme"
    folder.mkdir()
    moved = {"none": [], "cpu": ["--offload-optimizer", "cpu"],
             "nvme": ["--offload-optimizer", "nvme", "--sub-group-size", 300]}[optimizer]
    runs = train_both_ways(
        sharc, exported, tmp_path, "gpt", 2, 3, precision,
        ["--offload-param", "nvme", "--nvme-path", folder, *moved,
         *(["--host-update"] if host else [])],
        common=["--grad-accum", 2, "--max-reuse-distance", 0])
    assert list(folder.iterdir()) == []
    buffers, manifest = offloaded_buffers(tmp_path / "out-offload")
    on_nvme = {b["name"] for b in buffers}
    gathered = [b for b in manifest["buffers"]
                if ("derived_from" in b if precision != "fp32" else
                    b["role"] == "param" and "file_shape" in b)]
    assert gathered and all(b["name"] in on_nvme for b in gathered)
    report = runs["offload"][2].stdout
    assert "report: ZeRO-Offload of the parameters to NVMe (stage 3)" in report
    # Each gathered slice is read once per gather: at least once per
    # micro-batch in forward, and written once per step.
    planned = re.search(r"NVMe bytes per step planned read (\d+) written (\d+) "
                        r"measured read (\S+) written (\S+)",
                        runs["offload"][3].stdout)
    assert planned, runs["offload"][3].stdout
    read, written = int(planned.group(1)), int(planned.group(2))
    assert planned.groups()[2:] == planned.groups()[:2]
    per_step = sum(swap_bytes(b["bytes"]) for b in buffers)
    gathered_bytes = sum(swap_bytes(b["bytes"]) for b in gathered)
    assert written == per_step
    assert read >= per_step - gathered_bytes + 2 * gathered_bytes


def test_host_update_needs_cpu_offload(sharc, exported, tmp_path):
    path, _ = exported["mlp"]
    result = sharc("compile", path, "--world-size", 2, "--zero-stage", 1,
                   "--host-update", "--plan")
    assert result.returncode == 1
    assert "--host-update needs --offload-optimizer or --offload-param cpu or nvme" \
        in result.stderr


def test_pipelining_changes_only_when(sharc, exported, tmp_path):
    """pipeline_read / pipeline_write off: each sub-group's reads and writes
    are waited for at once; the step lines do not change."""
    path, inputs = exported["gpt"]
    folder = tmp_path / "nvme"
    folder.mkdir()
    lines = []
    for extra in ([], ["--pipeline-read=false", "--pipeline-write=false"]):
        out = tmp_path / f"out-{len(extra)}"
        compile_program(sharc, path, out, *RECIPE, "--world-size", 2,
                        "--zero-stage", 2, *nvme(folder, "--sub-group-size", 100),
                        *extra)
        lines.append(steps_of(mpirun(2, out / "train", *inputs, "--steps", 4)))
    assert lines[0] == lines[1]


def test_files_have_the_planned_sizes_during_the_run(sharc, exported, tmp_path):
    """While the binary runs, each rank's folder under the NVMe path holds one
    file per offloaded buffer of the planned size (the buffer's bytes in
    whole 4096-byte blocks); once it ends, nothing is left."""
    path, inputs = exported["gpt"]
    folder = tmp_path / "nvme"
    folder.mkdir()
    out = tmp_path / "out"
    compile_program(sharc, path, out, *RECIPE, "--world-size", 2,
                    "--zero-stage", 2, *nvme(folder))
    buffers, _ = offloaded_buffers(out)
    expected = sorted(swap_bytes(b["bytes"]) for b in buffers)
    job = mpirun_background(2, out / "train", *inputs, "--steps", 100000,
                            "--log-every", 100000)
    seen = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(seen) < 2:
            for rank_dir in folder.iterdir():
                sizes = sorted(f.stat().st_size for f in rank_dir.iterdir())
                if len(sizes) == len(expected):
                    seen[rank_dir.name] = sizes
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.communicate(timeout=120)
    assert len(seen) == 2, seen
    assert all(sizes == expected for sizes in seen.values()), (seen, expected)
    assert sorted(int(re.fullmatch(r"sharc-swap-rank-(\d)-of-2\.\d+", name).group(1))
                  for name in seen) == [0, 1], seen
    # SIGTERM ended both ranks; their files went with them.
    assert list(folder.iterdir()) == []


def test_memory_falls_by_the_offloaded_bytes(sharc, tmp_path):
    """On a GPT of 27.3 M parameters at N = 2, ZeRO stage 1, 512 tokens per
    rank and step: with the optimizer state on NVMe the measured peak (rank
    0's resident set, getrusage) falls below the run without offload by the
    optimizer state bytes it moved, within 10 % either way, as the plan says.
    (The sub-groups in flight fit under the step's peak, set by the
    activations here; at 64 tokens per rank the update is the peak and they
    add to it: docs/offload.md.)"""
    config = models.GptConfig(vocab=8192, seq=128, dim=512, heads=8, layers=6,
                              batch=4)
    path = tmp_path / "gpt.onnx"
    models.export(models.make_training_case("gpt", gpt_config=config), path)
    _, inputs = models.write_data("gpt", 8, 5, tmp_path, config=config)
    folder = tmp_path / "nvme"
    folder.mkdir()
    peaks = {}
    for mode, extra in (("device", []),
                        ("nvme", nvme(folder, "--sub-group-size", 1000000))):
        out = tmp_path / f"out-{mode}"
        compile_program(sharc, path, out, "--optimizer", "adamw", "--lr", "0.001",
                        "--world-size", 2, "--zero-stage", 1,
                        "--reduce-bucket-size", 5000000,
                        "--allgather-bucket-size", 5000000, *extra)
        if mode == "nvme":
            buffers, manifest = offloaded_buffers(out)
            offloaded = sum(b["bytes"] for b in buffers)
            # Every moment is offloaded: the optimizer state but the step
            # counter.
            assert offloaded == manifest["optimizer_state_bytes"] - 8
        run = mpirun(2, out / "train", *inputs, "--steps", 2)
        assert run.returncode == 0, run.stderr
        match = PEAK_LINE.search(run.stdout)
        assert match, run.stdout
        peaks[mode] = tuple(map(int, match.groups()))
        shutil.rmtree(out)
    planned = peaks["device"][0] - peaks["nvme"][0]
    measured = peaks["device"][1] - peaks["nvme"][1]
    assert abs(planned - offloaded) <= 0.1 * offloaded, (peaks, offloaded)
    assert abs(measured - offloaded) <= 0.1 * offloaded, (peaks, offloaded)


def test_report_and_plan(sharc, exported, tmp_path):
    """--report and --plan state the same split: device bytes, NVMe bytes
    (the offloaded buffers in whole blocks) and the bytes read and written
    per step; the manifest marks each buffer's storage."""
    path, _ = exported["gpt"]
    folder = tmp_path / "nvme"
    flags = [*RECIPE, "--world-size", 2, "--zero-stage", 3,
             "--param-persistence-threshold", 0, *nvme(folder)]
    out = tmp_path / "out"
    report = compile_program(sharc, path, out, *flags, "--emit-only")
    plan = sharc("compile", path, *flags, "--plan")
    assert plan.returncode == 0, plan.stderr
    assert MEMORY_LINE.findall(plan.stdout) == MEMORY_LINE.findall(report.stdout)
    assert "report: ZeRO-Offload to NVMe (optimizer state)" in report.stdout
    buffers, manifest = offloaded_buffers(out)
    planned = sum(swap_bytes(b["bytes"]) for b in buffers)
    assert manifest["nvme_bytes"] == planned
    assert manifest["nvme_read_bytes_per_step"] == planned
    assert manifest["nvme_write_bytes_per_step"] == planned
    device, on_nvme, read, written = map(int, MEMORY_LINE.search(report.stdout).groups())
    assert (on_nvme, read, written) == (planned, planned, planned)
    assert device == manifest["device_bytes"]
    # Against the same step without offload: the device holds what it held
    # but the offloaded buffers, and the arena the swaps read into.
    baseline = tmp_path / "baseline"
    compile_program(sharc, path, baseline, *flags[:-4], "--emit-only")
    before = json.loads((baseline / "manifest.json").read_text())
    assert device == before["device_bytes"] - sum(b["bytes"] for b in buffers) + \
        manifest["arena_bytes"] - before["arena_bytes"]


@pytest.fixture(scope="module")
def gpt_program(sharc, exported, tmp_path_factory):
    """The test GPT compiled for 2 ranks at ZeRO stage 2 with NVMe offload
    (the folder given at run time), and a state saved by it after 3 steps:
    the last checkpoint, which no fault may touch."""
    path, inputs = exported["gpt"]
    directory = tmp_path_factory.mktemp("gpt-nvme")
    (directory / "nvme").mkdir()
    out = directory / "out"
    compile_program(sharc, path, out, *RECIPE, "--world-size", 2,
                    "--zero-stage", 2, *nvme(directory / "nvme"))
    state = directory / "state"
    run = mpirun(2, out / "train", *inputs, "--steps", 3, "--save-state", state)
    assert run.returncode == 0, run.stderr
    assert list((directory / "nvme").iterdir()) == []
    return out, inputs, state


def snapshot_tree(directory):
    return {p.relative_to(directory): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_failed(result, *needles):
    assert result.returncode != 0, result.stdout
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert "sharc: rank" in result.stderr and "error:" in result.stderr


def test_missing_and_unwritable_folder(gpt_program, tmp_path):
    """A folder that does not exist, a file, and a read-only file system:
    every rank stops with an error naming the path, before the first step,
    and the saved state it resumes from is as it was."""
    out, inputs, state = gpt_program
    before = snapshot_tree(state)
    missing = tmp_path / "missing"
    result = mpirun(2, out / "train", *inputs, "--steps", 2, "--weights", state,
                    "--save-state", state, "--nvme-path", missing, timeout=120)
    assert_failed(result, str(missing))
    assert "step 1" not in result.stdout
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    result = mpirun(2, out / "train", *inputs, "--steps", 2,
                    "--nvme-path", a_file, timeout=120)
    assert_failed(result, str(a_file), "Not a directory")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs",
                              str(read_only)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.strip()}")
    try:
        result = mpirun(2, out / "train", *inputs, "--steps", 2, "--weights", state,
                        "--save-state", state, "--nvme-path", read_only, timeout=120)
        assert_failed(result, str(read_only), "Read-only file system")
        assert list(read_only.iterdir()) == []
    finally:
        subprocess.run(["umount", str(read_only)], check=True)
    assert snapshot_tree(state) == before


disk = pytest.fixture(params=full_disk.MODES)(full_disk.make_disk)


def test_full_disk(gpt_program, disk):
    """The offload folder on a full disk (a small tmpfs the test mounts and
    fills, or the simulated limit): the files do not fit, every rank stops
    with "No space left on device" naming the file, nothing is left on the
    disk, and the saved state is as it was."""
    out, inputs, state = gpt_program
    before = snapshot_tree(state)
    disk.fill(8 * PAGE)
    env = {**os.environ, **disk.env()}
    result = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "SHARC_TEST_WRITE_LIMIT", str(out / "train"), *inputs,
         "--steps", "2", "--weights", str(state), "--save-state", str(state),
         "--nvme-path", str(disk.path)],
        capture_output=True, text=True, timeout=120, env=env)
    assert_failed(result, str(disk.path), "No space left on device")
    assert [p.name for p in disk.path.iterdir()] in ([], ["filler"])
    assert snapshot_tree(state) == before
    disk.free()


def test_file_truncated_under_the_run(gpt_program, tmp_path):
    """One of rank 1's files cut short while the job runs: a read that finds
    it short fails, rank 1 stops naming the file and every rank ends,
    the files of both ranks are gone, and the saved state the run resumed
    from (and would have saved to) is as it was."""
    out, inputs, state = gpt_program
    before = snapshot_tree(state)
    folder = tmp_path / "nvme"
    folder.mkdir()
    job = mpirun_background(2, out / "train", *inputs, "--steps", 1000000,
                            "--log-every", 1000000, "--weights", state,
                            "--save-state", state, "--nvme-path", folder)
    try:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline:
            for rank_dir in folder.glob("sharc-swap-rank-1-of-2.*"):
                files = sorted(rank_dir.iterdir(), key=lambda f: f.stat().st_size)
                if files:
                    victim = files[-1]
            time.sleep(0.1)
        assert victim is not None, "rank 1's files never appeared"
        # Each step reads the file whole, then writes it whole: a cut that
        # falls between the two is overwritten (harmlessly: the state is in
        # memory then), so cut until a read sees it.
        deadline = time.monotonic() + 120
        while job.poll() is None and time.monotonic() < deadline:
            try:
                os.truncate(victim, 0)
            except FileNotFoundError:
                break  # the job is ending: the file is being removed
            time.sleep(0.02)
        stdout, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode != 0, stdout
    assert "sharc: rank 1: error: NVMe offload: " + str(victim) in stderr, stderr
    assert "truncated" in stderr, stderr
    assert list(folder.iterdir()) == []
    assert snapshot_tree(state) == before
