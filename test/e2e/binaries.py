"""Running a compiled training binary and reading its step lines, shared by
the end-to-end tests of real models, Dropout and BatchNorm."""

import shutil
import subprocess


def run_binary(out, ranks, *args, timeout=600):
    """OUT/train under `mpirun -np RANKS` with ARGS; its stdout (the run must
    succeed)."""
    run = subprocess.run(
        [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe",
         "-np", str(ranks), str(out / "train"), *map(str, args)],
        capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr
    return run.stdout


def step_lines(stdout):
    """The first four words of each `step N loss L ...` line."""
    return [line.split()[:4] for line in stdout.splitlines()
            if line.startswith("step ")]


def losses_of(stdout):
    """The loss of each step line."""
    return [float(line[3]) for line in step_lines(stdout)]
