"""Shared fixtures of the end-to-end tests: where the sharc CLI is, and how to
run it."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def cpu_flags() -> set:
    """The CPU's feature flags (/proc/cpuinfo), empty where it cannot be read."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((l for l in text.splitlines() if l.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def sharc_path() -> pathlib.Path:
    """The sharc binary: $SHARC_BIN_DIR/sharc, by default build/bin/sharc."""
    bin_dir = pathlib.Path(os.environ.get("SHARC_BIN_DIR", REPO_ROOT / "build" / "bin"))
    if not bin_dir.is_absolute():
        bin_dir = REPO_ROOT / bin_dir
    return bin_dir / "sharc"


@pytest.fixture(scope="session")
def sharc():
    """Runs the sharc CLI with the given arguments; returns the CompletedProcess
    (text mode, stdout and stderr captured)."""
    binary = sharc_path()
    assert binary.is_file() and os.access(binary, os.X_OK), (
        f"sharc binary not found at {binary}; build it or set SHARC_BIN_DIR"
    )

    def run(*args, timeout=300):
        return subprocess.run(
            [str(binary), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
