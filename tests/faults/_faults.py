"""Shared pieces of the fault-injection suite (imported by its test files): small tmpfs mounts,
worker subprocesses, and the check that no temporary file is left beside a results file."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
REPO = TESTS.parent


class Tmpfs:
    """A tmpfs mounted on ``path`` (root only); ``resize`` and ``read_only`` remount it."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            check=True,
            capture_output=True,
        )

    def remount(self, options: str) -> None:
        subprocess.run(
            ["mount", "-o", f"remount,{options}", str(self.path)], check=True, capture_output=True
        )

    def resize(self, size: str) -> None:
        self.remount(f"size={size}")

    def fill(self, leave: int) -> Path:
        """A ballast file that leaves about ``leave`` bytes free; remove it to free space."""
        ballast = self.path / f"ballast-{uuid.uuid4().hex}"
        stats = os.statvfs(self.path)
        size = max(0, stats.f_bavail * stats.f_frsize - leave)
        with open(ballast, "wb") as f:
            f.write(b"\0" * size)
        return ballast

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


@contextmanager
def tmpfs_mounts(folder: Path) -> Iterator[Callable[[str], Tmpfs]]:
    """``mount(size)`` mounts a small tmpfs under ``folder`` (skipping the test where mounting
    is refused); every mount is undone on exit."""
    mounted: list[Tmpfs] = []

    def mount(size: str) -> Tmpfs:
        if sys.platform != "linux" or os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root on Linux")
        try:
            fs = Tmpfs(folder / f"tmpfs{len(mounted)}", size)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            pytest.skip(f"cannot mount a tmpfs here: {exc}")
        mounted.append(fs)
        return fs

    try:
        yield mount
    finally:
        for fs in mounted:
            fs.unmount()


def leftovers(folder: Path, prefix: str = "") -> list[str]:
    """Temporary files a writer may leave beside its output (of the outputs whose names start
    with ``prefix``): none may remain after a successful run."""
    suffixes = (".lock", ".creating", ".partial", ".recovering", ".tmp")
    return sorted(
        p.name for p in folder.iterdir() if p.name.startswith(prefix) and p.name.endswith(suffixes)
    )


def worker_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]))
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


class Stopped(Exception):
    """Raised by :func:`write_partially` to stop a run."""


def write_partially(
    method: Callable[..., object],
    model: object,
    X: object,
    path: Path,
    blocks: int,
    **kwargs: object,
) -> None:
    """The file a run of ``method`` leaves when it is stopped after ``blocks`` writes."""
    from seqattrib.io import tracks

    calls: list[int] = []
    write = tracks.TrackWriter.write

    def stop_after(self: tracks.TrackWriter, start: int, block: dict) -> None:
        if len(calls) == blocks:
            raise Stopped
        calls.append(start)
        write(self, start, block)

    tracks.TrackWriter.write = stop_after  # type: ignore[method-assign]
    try:
        with pytest.raises(Stopped):
            method(model, X, out=path, **kwargs)
    finally:
        tracks.TrackWriter.write = write  # type: ignore[method-assign]
