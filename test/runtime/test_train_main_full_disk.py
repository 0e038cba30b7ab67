"""`--save-state` of the training binary's main (runtime/TrainMain.cpp) on a
full disk: a tmpfs mounted on a directory of the test's own and filled (or,
where mounting is not permitted, the SHARC_TEST_WRITE_LIMIT hook; see
test/full_disk.py), with the fake program and helpers of test_train_main.py.
The save must fail naming the file and the reason, exit non-zero and leave
the previous state byte-identical, without temporary files.  NVMe offload's
files, reserved whole at start-up, must fail the same way and leave nothing.
"""

import pathlib
import re
import sys

import numpy as np
import pytest

from test_train_main import (binary, data, expect_failure, inputs, mpirun,  # noqa: F401
                             nvme_binary, nvme_data)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import full_disk  # noqa: E402

disk = pytest.fixture(params=full_disk.MODES)(full_disk.make_disk)


@pytest.mark.parametrize("free_pages", [0, 1])
@pytest.mark.parametrize("ranks", [1, 2])
def test_save_state_on_a_full_disk(data, disk, ranks, free_pages):
    """With no room, w.npy (written first) fails; with one page, w.npy is
    written and step.npy is not: neither replaces its previous version."""
    directory, _, _ = data
    state = disk.path / "state"
    args = [*inputs(directory), "--weights", directory / "weights", "--save-state", state]
    result = mpirun(ranks, binary(ranks), *args, "--steps", 1)
    assert result.returncode == 0, result.stderr
    previous = full_disk.snapshot(state)
    assert sorted(previous) == ["sharc-state.txt", "step.npy", "w.npy"]

    disk.fill(free_pages * full_disk.PAGE)
    result = mpirun(ranks, binary(ranks), *args, "--steps", 2, env=disk.env())
    name = "w.npy" if free_pages == 0 else "step.npy"
    expect_failure(result, f"--save-state: {state / name}: No space left on device")
    assert full_disk.snapshot(state) == previous

    # With room again the same command replaces the state.
    disk.free()
    result = mpirun(ranks, binary(ranks), *args, "--steps", 2, env=disk.env())
    assert result.returncode == 0, result.stderr
    assert sorted(full_disk.snapshot(state)) == ["sharc-state.txt", "step.npy", "w.npy"]
    assert np.load(state / "step.npy") == 2


def test_save_state_to_a_new_directory_on_a_full_disk(data, disk):
    """The directories --save-state creates for a save that fails are removed
    again."""
    directory, _, _ = data
    disk.fill(0)
    before = sorted(p.name for p in disk.path.iterdir())
    result = mpirun(1, binary(1), *inputs(directory), "--weights", directory / "weights",
                    "--save-state", disk.path / "new" / "state", env=disk.env())
    expect_failure(result, f"--save-state: {disk.path / 'new' / 'state' / 'w.npy'}: "
                   "No space left on device")
    assert sorted(p.name for p in disk.path.iterdir()) == before


@pytest.mark.parametrize("ranks", [1, 2])
def test_nvme_offload_files_on_a_full_disk(nvme_data, disk, ranks):
    """No room for the offload files: each rank's error names its file and
    the reason, and no folder is left."""
    directory, _, _ = nvme_data
    disk.fill(0)
    before = sorted(p.name for p in disk.path.iterdir())
    result = mpirun(ranks, nvme_binary(ranks), *inputs(directory), "--weights",
                    directory / "weights", "--nvme-path", disk.path, env=disk.env())
    assert result.returncode != 0, result.stdout
    assert re.search(rf"sharc: rank \d: error: NVMe offload: {re.escape(str(disk.path))}/"
                     rf"sharc-swap-rank-\d-of-{ranks}\.\d+/w\.momentum\.swp: cannot reserve "
                     r"4096 bytes: No space left on device", result.stderr), result.stderr
    assert sorted(p.name for p in disk.path.iterdir()) == before
