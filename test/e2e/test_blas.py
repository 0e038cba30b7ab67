"""The BLAS library's kernels (runtime/Blas.h).  OpenBLAS picks its kernels
from the CPU when it loads, and falls back to generic SSE kernels on CPUs
newer than the library; OPENBLAS_CORETYPE, read only at load time, overrides
that.  sharc and the training binaries check at start-up and run themselves
again with OPENBLAS_CORETYPE set when the kernels are generic on a CPU with
AVX2 or AVX-512 (SHARC_BLAS_CORE=NAME asks for a core, =keep leaves the
library's choice), so that both multiply with the same kernels: another core
changes the bits of a product, and the evaluator and the binaries must agree
bit for bit.  On this machine OpenBLAS knows the CPU, so the re-run is
exercised through SHARC_BLAS_CORE, and the generic case through a user's
OPENBLAS_CORETYPE."""

import ctypes
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from conftest import cpu_flags

MODELS = pathlib.Path(__file__).resolve().parents[1] / "models"
MODEL = MODELS / "tiny-gpt.onnx"
DATA = [f"--input=tokens={MODELS / 'tiny-gpt-tokens.npy'}",
        f"--input=targets={MODELS / 'tiny-gpt-targets.npy'}"]
RECIPE = ["--optimizer", "adamw", "--lr", "0.001"]
SUMMARY = re.compile(r"^summary: host threads per rank (\d+), BLAS (.*), "
                     r"(\S+) kernels$", re.MULTILINE)
NOTE = "sharc: note: OpenBLAS chose its"


def cpu_level():
    """'avx512', 'avx2' or 'older', from /proc/cpuinfo (as Blas.cpp's
    cpuSimdLevel)."""
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "older"


def library_core():
    """The core OpenBLAS picks for this process (same library, same CPU)."""
    library = ctypes.CDLL("libopenblas.so.0")
    library.openblas_get_corename.restype = ctypes.c_char_p
    return library.openblas_get_corename().decode()


def environment(**values):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "SHARC_BLAS_CORE")}
    env.update(values)
    return env


def run(command, env, timeout=300):
    return subprocess.run(list(map(str, command)), capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def binary(sharc, tmp_path_factory):
    out = tmp_path_factory.mktemp("blas") / "out"
    result = sharc("compile", MODEL, *RECIPE, "--world-size", 2, "-o", out)
    assert result.returncode == 0, result.stderr
    return out / "train"


def train(binary, env, ranks=2):
    return run([shutil.which("mpirun"), "--allow-run-as-root",
                "--oversubscribe", "-np", ranks, binary, *DATA, "--steps", 3],
               env)


def evaluate(sharc_path, env):
    return run([sharc_path, "eval", MODEL, "--train", "--steps", 3, *RECIPE,
                "--world-size", 2, *DATA], env)


def steps(stdout):
    return [line.split()[:4] for line in stdout.splitlines()
            if line.startswith("step ")]


def test_the_summary_names_the_kernels_in_use(binary):
    result = train(binary, environment())
    assert result.returncode == 0, result.stderr
    match = SUMMARY.search(result.stdout)
    assert match, result.stdout
    assert match.group(2).startswith("OpenBLAS ")
    assert match.group(3) == library_core()
    assert NOTE not in result.stderr and "warning" not in result.stderr
    # bf16 products (runtime/GemmBf16.h): oneDNN's bf16 kernels exactly where
    # the CPU has bf16 instructions.
    bf16 = re.search(r"^summary: bf16 GEMM (.*)$", result.stdout, re.MULTILINE)
    assert bf16, result.stdout
    if {"avx512_bf16", "amx_bf16"} & cpu_flags():
        assert re.fullmatch(r"oneDNN \d+\.\d+\.\d+, \S+ kernels",
                            bf16.group(1)), bf16.group(1)
    else:
        assert bf16.group(1) == "widened to f32"
    widened = train(binary, environment(SHARC_BF16_GEMM="widened"))
    assert widened.returncode == 0, widened.stderr
    assert "summary: bf16 GEMM widened to f32\n" in widened.stdout


def test_a_requested_core_reruns_sharc_and_the_binary(sharc, binary):
    """SHARC_BLAS_CORE=Haswell: both run again with OPENBLAS_CORETYPE=Haswell
    (one note per job: rank 0's), the binary's summary says so, and the
    evaluator's step lines are the binary's."""
    from conftest import sharc_path
    core = "Haswell" if library_core() != "Haswell" else "Sandybridge"
    env = environment(SHARC_BLAS_CORE=core)
    result = train(binary, env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(NOTE) == 1, result.stderr
    assert f"OPENBLAS_CORETYPE={core}" in result.stderr
    assert SUMMARY.search(result.stdout).group(3) == core
    evaluated = evaluate(sharc_path(), env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stderr.count(NOTE) == 1, evaluated.stderr
    assert steps(evaluated.stdout) == steps(result.stdout)
    assert len(steps(result.stdout)) == 3


def test_a_users_generic_core_is_kept_with_a_warning(binary):
    env = environment(OPENBLAS_CORETYPE="Prescott")
    result = train(binary, env)
    assert result.returncode == 0, result.stderr
    assert SUMMARY.search(result.stdout).group(3) == "Prescott"
    warned = "sharc: warning: OpenBLAS runs its Prescott kernels" in \
        result.stderr
    # A warning (once per job) only where better kernels exist.
    assert warned == (cpu_level() != "older"), result.stderr
    if warned:
        assert result.stderr.count("sharc: warning: OpenBLAS") == 1
        better = "SkylakeX" if cpu_level() == "avx512" else "Haswell"
        assert f"OPENBLAS_CORETYPE={better}" in result.stderr
    kept = train(binary, environment(OPENBLAS_CORETYPE="Prescott",
                                     SHARC_BLAS_CORE="keep"))
    assert kept.returncode == 0, kept.stderr
    assert "sharc: warning" not in kept.stderr and NOTE not in kept.stderr
