"""Tests of the training binary's main (runtime/TrainMain.cpp) on the CPU.

The binaries under test link TrainMain with FakeProgram.cpp, a hand-written
linear regression (param w f32[4], state step i64, inputs x f32[rows, 4] and
y f32[rows], micro-batch 2, GAS 1, lr 0.1) compiled for 1 rank
($SHARC_FAKE_TRAIN_NP1) and for 2 ranks ($SHARC_FAKE_TRAIN_NP2).  They run
under $SHARC_MPIEXEC (default mpirun); losses and saved state are compared with
the same training computed by numpy.  The NVMe variants
($SHARC_FAKE_TRAIN_NVME_NP1, _NP2) train with momentum, whose state
w.momentum is offloaded to NVMe: files of each rank's own under --nvme-path.
"""

import os
import pathlib
import re
import selectors
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

BUILD = pathlib.Path(__file__).resolve().parents[2] / "build" / "test" / "runtime"
MPIEXEC = os.environ.get("SHARC_MPIEXEC", "mpirun")
TIMEOUT = 60

STEP_LINE = re.compile(
    r"^step (\d+) loss (\S+) lr (\S+) ms (\d+\.\d{3}) samples/s (\d+\.\d)$"
)
MICRO_BATCH = 2
LEARNING_RATE = 0.1


def binary(ranks: int) -> pathlib.Path:
    path = pathlib.Path(
        os.environ.get(f"SHARC_FAKE_TRAIN_NP{ranks}", BUILD / f"sharc-fake-train-np{ranks}")
    )
    assert path.is_file(), f"{path} not built"
    return path


def mpirun(ranks: int, program, *args, env=None, cwd=None):
    """Runs `program args` on `ranks` ranks; returns the CompletedProcess."""
    command = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
               str(program), *map(str, args)]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          env=full_env, cwd=cwd)


def write_weights(directory: pathlib.Path, w=None, step=0):
    directory.mkdir(parents=True, exist_ok=True)
    if w is None:
        w = np.array([0.5, -0.25, 0.125, 1.0], np.float32)
    np.save(directory / "w.npy", np.asarray(w, np.float32))
    np.save(directory / "step.npy", np.array(step, np.int64))


@pytest.fixture
def data(tmp_path):
    """Six rows of data (the batch of 2 ranks wraps around them) and weights."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = rng.standard_normal(6).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    write_weights(tmp_path / "weights")
    return tmp_path, x, y


def reference(x, y, w, ranks, steps, first_step=0, v=None):
    """Losses of `steps` SGD steps on the global batches of the sharding rule,
    and the final weights (float64); with a momentum `v`, SGD with momentum
    (v = MOMENTUM v + grad, w -= lr v), and the final momentum too."""
    w = np.asarray(w, np.float64).copy()
    if v is not None:
        v = np.asarray(v, np.float64).copy()
    rows = MICRO_BATCH * ranks
    losses = []
    for k in range(first_step, first_step + steps):
        index = np.arange(k * rows, (k + 1) * rows) % x.shape[0]
        xb, yb = x[index].astype(np.float64), y[index].astype(np.float64)
        residual = xb @ w - yb
        losses.append(np.mean(residual**2))
        grad = 2 * xb.T @ residual / rows
        if v is None:
            w -= LEARNING_RATE * grad
        else:
            v = MOMENTUM * v + grad
            w -= LEARNING_RATE * v
    return (np.array(losses), w) if v is None else (np.array(losses), w, v)


def parse(stdout: str):
    steps, summary = [], []
    for line in stdout.splitlines():
        if line.startswith("step "):
            match = STEP_LINE.match(line)
            assert match, f"malformed step line: {line!r}"
            steps.append((int(match[1]), float(match[2]), float(match[3]),
                          float(match[4]), float(match[5])))
        elif line.startswith("summary: "):
            summary.append(line)
        elif line.startswith("offload: "):
            continue  # NVMe offload's start line (test_nvme_*)
        else:
            pytest.fail(f"unexpected output line: {line!r}")
    return steps, summary


def inputs(directory):
    return ["--input", f"x={directory / 'x.npy'}", "--input", f"y={directory / 'y.npy'}"]


@pytest.mark.parametrize("ranks,steps", [(1, 5), (2, 7)])
def test_losses_and_summary(data, ranks, steps):
    directory, x, y = data
    result = mpirun(ranks, binary(ranks), *inputs(directory), "--steps", steps,
                    "--weights", directory / "weights")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    lines, summary = parse(result.stdout)
    assert [line[0] for line in lines] == list(range(1, steps + 1))
    w0 = np.load(directory / "weights" / "w.npy")
    expected, _ = reference(x, y, w0, ranks, steps)
    np.testing.assert_allclose([line[1] for line in lines], expected, rtol=1e-5, atol=1e-6)
    assert all(line[2] == LEARNING_RATE for line in lines)
    assert all(line[4] > 0 for line in lines)

    # The fake program all-reduces 16 + 4 bytes per step and uses 28 arena bytes.
    bytes_per_step = sum(2 * (ranks - 1) * b // ranks for b in (16, 4))
    assert len(summary) == 7, summary
    assert re.fullmatch(rf"summary: steps {steps}, mean step ms \d+\.\d{{3}}, samples/s \d+\.\d",
                        summary[0]), summary[0]
    # The threads and the BLAS kernels in use (runtime/Blas.h), and what
    # multiplies bf16 matrices (runtime/GemmBf16.h).
    assert re.fullmatch(r"summary: host threads per rank \d+, BLAS OpenBLAS \S+, \S+ kernels",
                        summary[1]), summary[1]
    assert re.fullmatch(r"summary: bf16 GEMM (oneDNN \S+, \S+ kernels|widened to f32)",
                        summary[2]), summary[2]
    assert summary[3] == "summary: arena bytes planned 28 measured 28"
    assert summary[4].startswith("summary: peak memory bytes per rank planned "), summary[4]
    assert summary[5] == (f"summary: collective bytes per step planned {bytes_per_step} "
                          f"measured {bytes_per_step}")
    assert summary[6] == "summary: collective calls per step planned 2 measured 2"


def test_log_every(data):
    directory, _, _ = data
    result = mpirun(1, binary(1), *inputs(directory), "--steps", 7, "--log-every", 3,
                    "--weights", directory / "weights")
    assert result.returncode == 0, result.stderr
    lines, _ = parse(result.stdout)
    assert [line[0] for line in lines] == [1, 3, 6, 7]


@pytest.mark.parametrize("ranks", [1, 2])
def test_save_state_and_resume(data, ranks):
    directory, x, y = data
    saved = directory / "saved" / "nested"
    result = mpirun(ranks, binary(ranks), *inputs(directory), "--steps", 3,
                    "--weights", directory / "weights", "--save-state", saved)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in saved.iterdir()) == ["sharc-state.txt", "step.npy", "w.npy"]
    w_saved = np.load(saved / "w.npy")
    step_saved = np.load(saved / "step.npy")
    assert w_saved.dtype == np.float32 and w_saved.shape == (4,)
    assert step_saved.dtype == np.int64 and step_saved.shape == () and step_saved == 3
    w0 = np.load(directory / "weights" / "w.npy")
    losses, w_final = reference(x, y, w0, ranks, 5)
    _, w_after3 = reference(x, y, w0, ranks, 3)
    np.testing.assert_allclose(w_saved, w_after3, rtol=1e-5, atol=1e-6)

    # Resuming from the saved state continues the step numbers and the data.
    result = mpirun(ranks, binary(ranks), *inputs(directory), "--steps", 2,
                    "--weights", saved, "--save-state", directory / "final")
    assert result.returncode == 0, result.stderr
    lines, summary = parse(result.stdout)
    assert [line[0] for line in lines] == [4, 5]
    np.testing.assert_allclose([line[1] for line in lines], losses[3:], rtol=1e-5, atol=1e-6)
    assert summary[0].startswith("summary: steps 2,")
    np.testing.assert_allclose(np.load(directory / "final" / "w.npy"), w_final,
                               rtol=1e-5, atol=1e-6)
    assert np.load(directory / "final" / "step.npy") == 5


def test_default_weights_next_to_binary(data):
    directory, x, y = data
    bin_dir = directory / "out"
    bin_dir.mkdir()
    shutil.copy(binary(1), bin_dir / "train")
    write_weights(bin_dir / "weights", w=[1, 2, 3, 4])
    result = mpirun(1, bin_dir / "train", *inputs(directory), "--steps", 2)
    assert result.returncode == 0, result.stderr
    lines, _ = parse(result.stdout)
    expected, _ = reference(x, y, [1, 2, 3, 4], 1, 2)
    np.testing.assert_allclose([line[1] for line in lines], expected, rtol=1e-5, atol=1e-6)


def test_progress_line(data):
    """With --log-every > 1, 10 s without a step line print `... step K/S`."""
    directory, _, _ = data
    result = mpirun(1, binary(1), *inputs(directory), "--steps", 4, "--log-every", 100,
                    "--weights", directory / "weights", env={"SHARC_FAKE_SLEEP_MS": "5200"})
    assert result.returncode == 0, result.stderr
    lines, _ = parse(result.stdout)
    assert [line[0] for line in lines] == [1, 4]
    assert float(lines[0][3]) >= 5200
    assert "... step 3/4" in result.stderr.splitlines(), result.stderr
    assert "... step 2/4" not in result.stderr


def test_help(data):
    result = mpirun(1, binary(1), "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert "x: f32 [rows, 4]" in result.stdout and "y: f32 [rows]" in result.stdout


def test_misplanned_program_fails(data):
    """A program whose collectives differ from its plan ends with an error
    after the summary; an arena used below its plan is only a warning."""
    directory, _, _ = data
    result = mpirun(1, binary(1), *inputs(directory), "--steps", 2, "--weights",
                    directory / "weights", env={"SHARC_FAKE_MISPLAN": "1"})
    assert result.returncode != 0, result.stdout
    _, summary = parse(result.stdout)
    assert "summary: arena bytes planned 28 measured 24" in summary
    assert "summary: collective calls per step planned 2 measured 3" in summary
    assert "warning: the first step used 24 arena bytes, the plan 28" in result.stderr
    assert "error: 3 collective calls per step, the plan 2" in result.stderr


def test_a_step_that_writes_past_its_arena_fails(data):
    """The arena is followed by a guard filled with the sentinel: a write
    past the plan shows in the measured figure and is an error."""
    directory, _, _ = data
    result = mpirun(1, binary(1), *inputs(directory), "--steps", 1, "--weights",
                    directory / "weights", env={"SHARC_FAKE_MISPLAN": "2"})
    assert result.returncode != 0, result.stdout
    _, summary = parse(result.stdout)
    assert "summary: arena bytes planned 28 measured 40" in summary, summary
    assert "error: the first step wrote 40 arena bytes, past the plan's 28" \
        in result.stderr


def test_peak_memory_is_measured(data):
    """The peak is the process's resident set (getrusage), not the plan:
    at least the planned buffers, arena and staging, plus the code and
    libraries (the resident set before the buffers, also printed)."""
    directory, _, _ = data
    result = mpirun(1, binary(1), *inputs(directory), "--steps", 2, "--weights",
                    directory / "weights")
    assert result.returncode == 0, result.stderr
    match = re.search(r"^summary: peak memory bytes per rank planned (\d+) "
                      r"measured (\d+) \(peak resident set, getrusage; "
                      r"planned: buffers (\d+), arena (\d+), communication "
                      r"staging (\d+); held before them (\d+)\)$",
                      result.stdout, re.MULTILINE)
    assert match, result.stdout
    planned, measured, buffers, arena, staging, before = map(int, match.groups())
    assert planned == buffers + arena + staging
    # Every buffer 256-byte aligned in one pool; one rank needs no staging.
    assert buffers % 256 == 0 and buffers > 0 and staging == 0
    assert before > (1 << 20) and measured >= before + planned


def expect_failure(result, *messages):
    assert result.returncode != 0, result.stdout
    for message in messages:
        assert message in result.stderr, result.stderr
    assert "sharc: rank " in result.stderr


@pytest.mark.parametrize("ranks", [1, 2])
def test_missing_weights_file(data, ranks):
    directory, _, _ = data
    (directory / "weights" / "w.npy").unlink()
    result = mpirun(ranks, binary(ranks), *inputs(directory), "--weights", directory / "weights")
    expect_failure(result, "parameter 'w'", str(directory / "weights" / "w.npy"))


@pytest.mark.parametrize("ranks", [1, 2])
def test_wrong_weight_shape(data, ranks):
    directory, _, _ = data
    np.save(directory / "weights" / "w.npy", np.zeros(5, np.float32))
    result = mpirun(ranks, binary(ranks), *inputs(directory), "--weights", directory / "weights")
    expect_failure(result, str(directory / "weights" / "w.npy"),
                   "expects a f32 array of shape [4], got a f32 array of shape [5]")


def test_wrong_state_type(data):
    directory, _, _ = data
    np.save(directory / "weights" / "step.npy", np.array(0, np.int32))
    result = mpirun(1, binary(1), *inputs(directory), "--weights", directory / "weights")
    expect_failure(result, str(directory / "weights" / "step.npy"),
                   "state 'step' expects a i64 array of shape [], got a i32 array of shape []")


def test_malformed_weights_file(data):
    directory, _, _ = data
    (directory / "weights" / "w.npy").write_bytes(b"not a numpy file")
    result = mpirun(1, binary(1), *inputs(directory), "--weights", directory / "weights")
    expect_failure(result, "parameter 'w'", str(directory / "weights" / "w.npy"))


@pytest.mark.parametrize("ranks", [1, 2])
def test_missing_input_file(data, ranks):
    directory, _, _ = data
    result = mpirun(ranks, binary(ranks), "--input", f"x={directory / 'nope.npy'}",
                    "--input", f"y={directory / 'y.npy'}", "--weights", directory / "weights")
    expect_failure(result, "input 'x'", str(directory / "nope.npy"))


def test_wrong_input_shape(data):
    directory, _, _ = data
    np.save(directory / "x3.npy", np.zeros((6, 3), np.float32))
    result = mpirun(1, binary(1), "--input", f"x={directory / 'x3.npy'}",
                    "--input", f"y={directory / 'y.npy'}", "--weights", directory / "weights")
    expect_failure(result, "input 'x'", str(directory / "x3.npy"), "[rows, 4]")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--bogus"], "unknown argument '--bogus'"),
        (["--steps"], "--steps: missing value"),
        (["--steps", "zero"], "--steps: expected a positive integer, got 'zero'"),
        (["--log-every", "0"], "--log-every: expected a positive integer, got '0'"),
        (["--input", "z=z.npy"], "the program has no input named 'z' (its inputs: x, y)"),
        (["--input", "x"], "--input: expected NAME=FILE.npy, got 'x'"),
        (["--input", "x=a.npy"], "missing --input y=FILE.npy"),
        (["--input", "x=a.npy", "--input", "y=b.npy", "--input", "x=c.npy"],
         "--input 'x' is given more than once"),
        *[(["--collective-timeout", value],
           "--collective-timeout: expected a positive number of seconds of at most 604800, "
           f"got '{value}'")
          for value in ["0", "-3", "inf", "nan", "3s", "604801", ""]],
        (["--collective-timeout"], "--collective-timeout: missing value"),
    ],
)
@pytest.mark.parametrize("ranks", [1, 2])
def test_command_line_errors(data, ranks, args, message):
    result = mpirun(ranks, binary(ranks), *args)
    expect_failure(result, message)
    # Errors every rank detects alike are reported once.
    assert result.stderr.count("sharc: rank ") == 1, result.stderr


@pytest.mark.parametrize("compiled,launched", [(2, 1), (1, 2), (2, 3)])
def test_wrong_world_size(data, compiled, launched):
    directory, _, _ = data
    result = mpirun(launched, binary(compiled), *inputs(directory), "--weights",
                    directory / "weights")
    expect_failure(result,
                   f"this program was compiled for {compiled} rank"
                   f"{'s' if compiled > 1 else ''} (--world-size {compiled}) but runs on "
                   f"{launched}; recompile with sharc compile --world-size {launched} "
                   f"or launch with mpirun -np {compiled}")


def test_collective_timeout_flag(data):
    """A short timeout does not disturb normal steps; --help documents it."""
    directory, x, y = data
    result = mpirun(2, binary(2), *inputs(directory), "--steps", 7, "--weights",
                    directory / "weights", "--collective-timeout=0.5")
    assert result.returncode == 0, result.stderr
    lines, _ = parse(result.stdout)
    expected, _ = reference(x, y, np.load(directory / "weights" / "w.npy"), 2, 7)
    np.testing.assert_allclose([line[1] for line in lines], expected, rtol=1e-5, atol=1e-6)
    result = mpirun(1, binary(1), "--help")
    assert "[--collective-timeout SECONDS]" in result.stdout


def stat_fields(pid: int):
    """The fields of /proc/PID/stat after the command name (field 3 onwards)."""
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def rank_processes(root: int, program: pathlib.Path):
    """{rank: (pid, start time)} of the MPI ranks running `program` among the
    descendants of process `root` (the launcher this test started)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(stat_fields(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue
    descendants, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        descendants |= frontier
    ranks = {}
    for pid in descendants:
        try:
            command = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environment = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            started = stat_fields(pid)[19]
        except OSError:
            continue
        if command[0] != str(program).encode():
            continue
        for item in environment:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(item.split(b"=", 1)[1])] = (pid, started)
    return ranks


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("stopped", [0, 1])
def test_stopped_rank_ends_the_job(data, stopped):
    """A rank stopped with SIGSTOP mid-run: the other waits in a collective
    without spinning a core, and after --collective-timeout 3 the job ends
    with an error naming the collective, the step, the timeout and the
    stopped rank."""
    directory, _, _ = data
    program = binary(2)
    command = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", str(program),
               *inputs(directory), "--steps", str(10**15), "--log-every", str(10**15),
               "--weights", str(directory / "weights"), "--collective-timeout", "3"]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    ranks = {}
    try:
        # Training is under way once step 1 is printed.
        with selectors.DefaultSelector() as selector:
            selector.register(launcher.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=TIMEOUT), "no step line"
        first = launcher.stdout.readline()
        assert first.startswith("step 1 "), first
        deadline = time.monotonic() + TIMEOUT
        while len(ranks) < 2 and time.monotonic() < deadline:
            ranks = rank_processes(launcher.pid, program)
        assert sorted(ranks) == [0, 1], ranks
        waiting = ranks[1 - stopped][0]

        os.kill(ranks[stopped][0], signal.SIGSTOP)
        start = time.monotonic()
        time.sleep(0.5)
        cpu_start = cpu_seconds(waiting)
        time.sleep(2)
        waiting_cpu = cpu_seconds(waiting) - cpu_start
        _, stderr = launcher.communicate(timeout=TIMEOUT)
        elapsed = time.monotonic() - start
    finally:
        # Only the processes this test started: the launcher and its ranks
        # (the same pid and start time), should any be left.
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
        for pid, started in ranks.values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    if stat_fields(pid)[19] == started:
                        os.kill(pid, sig)
                except (OSError, IndexError):
                    pass

    assert launcher.returncode != 0, stderr
    # 3 s timeout + 1 s for the peers to answer + the abort; far below TIMEOUT.
    assert 3 <= elapsed < 20, (elapsed, stderr)
    assert waiting_cpu < 0.5, f"the waiting rank used {waiting_cpu} s of CPU in 2 s"
    pattern = (rf"sharc: rank {1 - stopped}: error: all-reduce #[12] of step \d+ "
               r"\(\d+ f32 elements?\) did not complete within the collective timeout of 3 s "
               rf"\(--collective-timeout\); no answer from rank {stopped} "
               r"\(stopped, hung, or busy outside any collective\)")
    assert re.search(pattern, stderr), stderr


# --- NVMe offload (runtime/Swap.h) ---------------------------------------------

MOMENTUM = 0.9
OFFLOAD_LINE = re.compile(r"^offload: 1 buffer, 4096 bytes per rank in (\S+) "
                          r"\(NVMe, io_uring, (O_DIRECT|buffered)\)$", re.MULTILINE)
NVME_SUMMARY = ("summary: NVMe bytes per step planned read 4096 written 4096 "
                "measured read 4096 written 4096")


def nvme_binary(ranks: int) -> pathlib.Path:
    path = pathlib.Path(os.environ.get(f"SHARC_FAKE_TRAIN_NVME_NP{ranks}",
                                       BUILD / f"sharc-fake-train-nvme-np{ranks}"))
    assert path.is_file(), f"{path} not built"
    return path


@pytest.fixture
def nvme_data(data):
    """`data` with an initial momentum and an empty folder `nvme` for the
    offload files."""
    directory, x, y = data
    np.save(directory / "weights" / "w.momentum.npy",
            np.array([0.25, -0.5, 0.125, 0.0625], np.float32))
    (directory / "nvme").mkdir()
    return directory, x, y


def swap_folders(nvme: pathlib.Path, ranks: int):
    """The ranks' offload folders in `nvme`, by rank."""
    folders = {}
    for entry in nvme.iterdir():
        match = re.fullmatch(rf"sharc-swap-rank-(\d+)-of-{ranks}\.\d+", entry.name)
        if match:
            folders[int(match[1])] = entry
    return folders


@pytest.mark.parametrize("ranks", [1, 2])
def test_nvme_losses_state_and_summary(nvme_data, ranks):
    directory, x, y = nvme_data
    nvme = directory / "nvme"
    result = mpirun(ranks, nvme_binary(ranks), *inputs(directory), "--steps", 5,
                    "--weights", directory / "weights", "--nvme-path", nvme,
                    "--save-state", directory / "saved")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    match = OFFLOAD_LINE.search(result.stdout)
    assert match, result.stdout
    folder = pathlib.Path(match[1])
    assert folder.parent == nvme
    assert re.fullmatch(rf"sharc-swap-rank-0-of-{ranks}\.\d+", folder.name), folder
    lines, summary = parse(result.stdout)
    w0 = np.load(directory / "weights" / "w.npy")
    v0 = np.load(directory / "weights" / "w.momentum.npy")
    expected, w_final, v_final = reference(x, y, w0, ranks, 5, v=v0)
    np.testing.assert_allclose([line[1] for line in lines], expected, rtol=1e-5, atol=1e-6)
    assert summary[3] == "summary: arena bytes planned 8192 measured 8192"
    assert summary[-1] == NVME_SUMMARY, summary
    assert len(summary) == 8, summary
    saved = directory / "saved"
    assert sorted(p.name for p in saved.iterdir()) == [
        "sharc-state.txt", "step.npy", "w.momentum.npy", "w.npy"]
    np.testing.assert_allclose(np.load(saved / "w.npy"), w_final, rtol=1e-5, atol=1e-6)
    momentum = np.load(saved / "w.momentum.npy")
    assert momentum.dtype == np.float32 and momentum.shape == (4,)
    np.testing.assert_allclose(momentum, v_final, rtol=1e-5, atol=1e-6)
    assert np.load(saved / "step.npy") == 5
    # Every rank's folder is gone with the run.
    assert list(nvme.iterdir()) == []


@pytest.mark.parametrize("ranks", [1, 2])
def test_nvme_state_loads_with_and_without_offload(nvme_data, ranks):
    """A state saved with offload resumes without it and the other way
    round: the state folder is the same."""
    directory, x, y = nvme_data
    w0 = np.load(directory / "weights" / "w.npy")
    v0 = np.load(directory / "weights" / "w.momentum.npy")
    losses, w5, v5 = reference(x, y, w0, ranks, 5, v=v0)
    common = [*inputs(directory), "--nvme-path", directory / "nvme"]
    plain = {"SHARC_FAKE_OFFLOAD": "0"}
    for first, second in [({}, plain), (plain, {})]:
        tag = "offloaded" if not first else "plain"
        result = mpirun(ranks, nvme_binary(ranks), *common, "--steps", 3, "--weights",
                        directory / "weights", "--save-state", directory / tag, env=first)
        assert result.returncode == 0, result.stderr
        assert bool(OFFLOAD_LINE.search(result.stdout)) == (not first)
        result = mpirun(ranks, nvme_binary(ranks), *common, "--steps", 2, "--weights",
                        directory / tag, "--save-state", directory / (tag + "-resumed"),
                        env=second)
        assert result.returncode == 0, result.stderr
        assert bool(OFFLOAD_LINE.search(result.stdout)) == (not second)
        lines, summary = parse(result.stdout)
        assert [line[0] for line in lines] == [4, 5]
        np.testing.assert_allclose([line[1] for line in lines], losses[3:], rtol=1e-5,
                                   atol=1e-6)
        assert (NVME_SUMMARY in summary) == (not second)
        resumed = directory / (tag + "-resumed")
        np.testing.assert_allclose(np.load(resumed / "w.npy"), w5, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.load(resumed / "w.momentum.npy"), v5, rtol=1e-5,
                                   atol=1e-6)
    # The same files, byte for byte, whether w.momentum was offloaded or not.
    for name in ["w.npy", "w.momentum.npy", "step.npy"]:
        assert (directory / "offloaded" / name).read_bytes() == \
            (directory / "plain" / name).read_bytes(), name
    assert list((directory / "nvme").iterdir()) == []


def test_nvme_files_exist_while_running(nvme_data):
    """While the run goes, each rank has its own folder (mode 0700) with a
    4096-byte file; both are gone after."""
    directory, _, _ = nvme_data
    nvme = directory / "nvme"
    command = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2",
               str(nvme_binary(2)), *inputs(directory), "--steps", "12", "--weights",
               str(directory / "weights"), "--nvme-path", str(nvme)]
    environment = dict(os.environ, SHARC_FAKE_SLEEP_MS="250")
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=environment)
    try:
        seen = {}
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            for rank, folder in swap_folders(nvme, 2).items():
                try:
                    files = {p.name: p.stat().st_size for p in folder.iterdir()}
                    mode = folder.stat().st_mode & 0o7777
                except FileNotFoundError:
                    continue
                if files:
                    seen[rank] = (files, mode)
            time.sleep(0.05)
        stdout, stderr = launcher.communicate(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    assert launcher.returncode == 0, stderr
    assert seen == {0: ({"w.momentum.swp": 4096}, 0o700),
                    1: ({"w.momentum.swp": 4096}, 0o700)}, seen
    assert NVME_SUMMARY in stdout
    assert list(nvme.iterdir()) == []


def test_nvme_path_from_the_program_or_the_flag(nvme_data):
    """The path compiled into the program (offload_optimizer.nvme_path) is
    the default; --nvme-path overrides it."""
    directory, _, _ = nvme_data
    compiled, flag = directory / "compiled", directory / "flag"
    compiled.mkdir()
    flag.mkdir()
    args = [*inputs(directory), "--weights", directory / "weights", "--steps", 1]
    env = {"SHARC_FAKE_NVME_PATH": str(compiled)}
    result = mpirun(1, nvme_binary(1), *args, env=env)
    assert result.returncode == 0, result.stderr
    assert pathlib.Path(OFFLOAD_LINE.search(result.stdout)[1]).parent == compiled
    result = mpirun(1, nvme_binary(1), *args, "--nvme-path", flag, env=env)
    assert result.returncode == 0, result.stderr
    assert pathlib.Path(OFFLOAD_LINE.search(result.stdout)[1]).parent == flag
    assert list(compiled.iterdir()) == [] and list(flag.iterdir()) == []


@pytest.mark.parametrize("ranks", [1, 2])
def test_nvme_path_errors(nvme_data, ranks):
    directory, _, _ = nvme_data
    args = [*inputs(directory), "--weights", directory / "weights"]
    result = mpirun(ranks, nvme_binary(ranks), *args)
    expect_failure(result, "this program offloads 1 buffer(s) to NVMe but has no folder "
                   "for their files: pass --nvme-path DIR (or compile with "
                   "zero_optimization.offload_optimizer.nvme_path)")
    assert result.stderr.count("sharc: rank ") == 1, result.stderr
    missing = directory / "missing"
    result = mpirun(ranks, nvme_binary(ranks), *args, "--nvme-path", missing)
    expect_failure(result, f"NVMe offload: {missing}: No such file or directory (the "
                   "offload folder must be an existing directory)")
    (directory / "file").write_text("x")
    result = mpirun(ranks, nvme_binary(ranks), *args, "--nvme-path", directory / "file")
    expect_failure(result, f"NVMe offload: {directory / 'file'}: Not a directory")
    result = mpirun(ranks, nvme_binary(ranks), *args, "--nvme-path=")
    expect_failure(result, "--nvme-path: empty directory name")
    result = mpirun(1, nvme_binary(1), "--help")
    assert "[--nvme-path DIR]" in result.stdout


def test_nvme_into_device_memory_is_refused_on_cuda(nvme_data):
    directory, _, _ = nvme_data
    result = mpirun(1, nvme_binary(1), *inputs(directory), "--nvme-path",
                    directory / "nvme", env={"SHARC_FAKE_TARGET": "cuda"})
    expect_failure(result, "this CUDA program offloads buffers to NVMe but has no "
                   "host memory to read them into")


def test_nvme_misplanned_traffic_fails(nvme_data):
    """NVMe bytes that differ from the plan end the run after the summary,
    like collectives; fatal() removes the files."""
    directory, _, _ = nvme_data
    result = mpirun(1, nvme_binary(1), *inputs(directory), "--steps", 2, "--weights",
                    directory / "weights", "--nvme-path", directory / "nvme",
                    env={"SHARC_FAKE_MISPLAN": "3"})
    expect_failure(result, "error: NVMe offload read 8192 and wrote 4096 bytes per step, "
                   "the plan 4096 and 4096")
    _, summary = parse(result.stdout)
    assert ("summary: NVMe bytes per step planned read 4096 written 4096 measured read "
            "8192 written 4096") in summary
    assert list((directory / "nvme").iterdir()) == []


def run_until_folders(directory, extra_env):
    """Starts a 2-rank NVMe run that goes on until stopped; returns the
    launcher and the ranks' folders once both exist."""
    nvme = directory / "nvme"
    command = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2",
               str(nvme_binary(2)), *inputs(directory), "--steps", str(10**15),
               "--log-every", str(10**15), "--weights", str(directory / "weights"),
               "--nvme-path", str(nvme)]
    environment = dict(os.environ, **extra_env)
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=environment)
    deadline = time.monotonic() + TIMEOUT
    folders = {}
    while time.monotonic() < deadline and launcher.poll() is None:
        folders = swap_folders(nvme, 2)
        if len(folders) == 2 and all((f / "w.momentum.swp").exists()
                                     for f in folders.values()):
            break
        time.sleep(0.05)
    return launcher, folders


def stop(launcher, ranks):
    """Ends what is left of the processes this test started."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.communicate()
    for pid, started in ranks.values():
        try:
            if stat_fields(pid)[19] == started:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_nvme_signalled_rank_removes_every_ranks_files(nvme_data, sig):
    """A rank that receives SIGTERM, SIGINT or SIGHUP removes its files and
    ends by the signal; mpirun then sends SIGTERM to the other rank, which
    removes its own."""
    directory, _, _ = nvme_data
    launcher, folders = run_until_folders(directory, {"SHARC_FAKE_SLEEP_MS": "50"})
    ranks = {}
    try:
        assert sorted(folders) == [0, 1], (folders, launcher.poll())
        deadline = time.monotonic() + TIMEOUT
        while len(ranks) < 2 and time.monotonic() < deadline:
            ranks = rank_processes(launcher.pid, nvme_binary(2))
        assert sorted(ranks) == [0, 1], ranks
        os.kill(ranks[1][0], sig)
        _, stderr = launcher.communicate(timeout=TIMEOUT)
    finally:
        stop(launcher, ranks)
    assert launcher.returncode != 0, stderr
    assert list((directory / "nvme").iterdir()) == []


def test_nvme_truncated_file_is_fatal_and_removes_every_ranks_files(nvme_data):
    """Rank 1's file truncated under the run: its next read fails, fatal()
    names the file, the offset and what happened, and every rank's files
    go."""
    directory, _, _ = nvme_data
    launcher, folders = run_until_folders(directory, {"SHARC_FAKE_SLEEP_MS": "50"})
    try:
        assert sorted(folders) == [0, 1], (folders, launcher.poll())
        victim = folders[1] / "w.momentum.swp"
        deadline = time.monotonic() + TIMEOUT
        while launcher.poll() is None and time.monotonic() < deadline:
            try:
                os.truncate(victim, 0)
            except FileNotFoundError:
                break
            time.sleep(0.01)
        _, stderr = launcher.communicate(timeout=TIMEOUT)
    finally:
        stop(launcher, {})
    assert launcher.returncode != 0, stderr
    assert re.search(rf"sharc: rank 1: error: NVMe offload: {re.escape(str(victim))}: read "
                     r"\d+ of 4096 bytes at offset 0 \(the file is shorter than the 4096 "
                     r"bytes sharc wrote: was it truncated under the run\?\)", stderr), stderr
    assert list((directory / "nvme").iterdir()) == []
