"""A full disk for the tests of sharc's file writing (runtime/AtomicFile.h).

`FullDisk(parent, mode)` makes a new directory `parent/disk` and, in mode
"tmpfs", mounts a small tmpfs on it; `fill(free_bytes)` then fills that file
system until only `free_bytes` (whole 4 KiB pages) are left.  In mode
"injected", or where mounting is not permitted (not root), nothing is mounted
and `env()` holds SHARC_TEST_WRITE_LIMIT=free_bytes instead, the hook of
AtomicFile.h that makes the writes of a sharc process fail with ENOSPC once
they have used that many bytes.  Either way a sharc process run with the
variables of `env()` added to its environment finds `free_bytes` of room.

Only what the object created is touched: `close()` unmounts the tmpfs it
mounted on the directory it made (which takes the filler file with it) and
removes that directory, nothing else.
"""

import errno
import os
import pathlib
import subprocess

PAGE = 4096


class FullDisk:
    def __init__(self, parent: pathlib.Path, mode: str, size: int = 4 << 20):
        assert mode in ("tmpfs", "injected"), mode
        self.path = pathlib.Path(parent) / "disk"
        self.path.mkdir()  # fails if it exists: only a directory of our own
        self.mounted = False
        self.limit = None
        if mode == "tmpfs":
            result = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                 str(self.path)],
                capture_output=True, text=True)
            self.mounted = result.returncode == 0 and os.path.ismount(self.path)
            if not self.mounted:
                print(f"full_disk: cannot mount a tmpfs ({result.stderr.strip()}); "
                      "simulating the full disk with SHARC_TEST_WRITE_LIMIT")
        self.mode = "tmpfs" if self.mounted else "injected"

    def fill(self, free_bytes: int = 0):
        """Leaves `free_bytes` (a multiple of the page size) of room."""
        assert free_bytes % PAGE == 0
        if not self.mounted:
            self.limit = free_bytes
            return
        filler = self.path / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            block = b"\0" * PAGE
            size = 0
            while True:
                try:
                    written = os.write(fd, block)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    break
                size += written
                if written < PAGE:
                    break
            size -= size % PAGE
            os.ftruncate(fd, max(0, size - free_bytes))
        finally:
            os.close(fd)

    def free(self):
        """Makes room again (removes the filler, or lifts the limit)."""
        self.limit = None
        if self.mounted:
            (self.path / "filler").unlink(missing_ok=True)

    def env(self):
        """Environment variables for a sharc process (an empty value means
        no limit)."""
        limit = "" if self.limit is None else str(self.limit)
        return {"SHARC_TEST_WRITE_LIMIT": limit}

    def close(self):
        """Unmounts the tmpfs (with everything on it) and removes the then
        empty directory; in mode "injected" the test's tmp_path cleanup
        removes the directory."""
        if self.mounted:
            subprocess.run(["umount", str(self.path)], check=True)
            self.mounted = False
            self.path.rmdir()


MODES = ("tmpfs", "injected")


def make_disk(tmp_path, request):
    """Body of a pytest fixture parametrized over MODES:
    `disk = pytest.fixture(params=full_disk.MODES)(full_disk.make_disk)`."""
    disk = FullDisk(tmp_path, request.param)
    try:
        yield disk
    finally:
        disk.close()


def snapshot(directory: pathlib.Path):
    """{name: bytes} of every entry of `directory` (regular files only)."""
    result = {}
    for entry in sorted(pathlib.Path(directory).iterdir()):
        assert entry.is_file() and not entry.is_symlink(), entry
        result[entry.name] = entry.read_bytes()
    return result
