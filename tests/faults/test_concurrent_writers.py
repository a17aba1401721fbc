"""Two writers on one file: the second is refused, naming the first; readers need no lock."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from _faults import TESTS, leftovers, worker_env
from models import random_one_hot

import seqattrib as sa
from seqattrib.io import read_tracks

N, LENGTH = 40, 24
KWARGS = dict(target=[0, 1], n_baselines=3, n_steps=4, random_state=3, batch_size=15)

WRITER = """
import os, sys, time
sys.path.insert(0, {tests!r})
import numpy as np, torch, models, seqattrib as sa
from seqattrib.io import tracks
torch.set_num_threads(1)
if {pause!r}:
    write = tracks.TrackWriter.write
    def write_then_wait(self, start, block):  # hold the file mid-run until the test says go
        write(self, start, block)
        while not os.path.exists({pause!r}):
            time.sleep(0.01)
    tracks.TrackWriter.write = write_then_wait
model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
X = models.random_one_hot({n}, {length}, seed=8, layout="NCL")
sa.expected_integrated_gradients(model, X, out={path!r}, max_cpu_sequences=4,
                                 overwrite={overwrite!r}, **{kwargs!r})
"""


def _writer(path, pause="", overwrite=False):
    code = WRITER.format(
        tests=str(TESTS),
        pause=str(pause),
        n=N,
        length=LENGTH,
        path=str(path),
        overwrite=overwrite,
        kwargs=KWARGS,
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], env=worker_env(), stderr=subprocess.PIPE, text=True
    )


def _wait_for_rows(path, proc):
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if read_tracks(path).attrs["n_completed"] > 0:
                return
        except (ValueError, FileNotFoundError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"the first writer wrote nothing: {proc.stderr.read()[-2000:]}")


@pytest.mark.parametrize("overwrite", [False, True], ids=["resume", "overwrite"])
def test_a_second_writer_is_refused_and_the_first_finishes_as_if_alone(tmp_path, overwrite):
    import models

    path = tmp_path / "t.h5"
    go = tmp_path / "go"
    first = _writer(path, pause=go)
    try:
        _wait_for_rows(path, first)
        second = _writer(path, overwrite=overwrite)
        _, err = second.communicate(timeout=300)
        assert second.returncode != 0
        last = err.strip().splitlines()[-1]
        assert last.startswith("BlockingIOError: The 'out' parameter"), err[-2000:]
        assert f"pid {first.pid} on host {socket.gethostname()}" in last
        assert "Wait for that run to end or stop it" in last
        during = read_tracks(path)  # a reader needs no lock and sees complete rows only
        assert 0 < during.attrs["n_completed"] < N
    finally:
        go.touch()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
    X = random_one_hot(N, LENGTH, seed=8, layout="NCL")
    alone = sa.expected_integrated_gradients(model, X, **KWARGS)
    tracks = read_tracks(path)
    np.testing.assert_array_equal(tracks.attributions, alone)
    np.testing.assert_array_equal(during.attributions, alone[: len(during.attributions)])
    assert leftovers(tmp_path) == []


def test_a_lock_left_by_a_dead_process_never_blocks_the_rerun(tmp_path):
    import models

    model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
    X = random_one_hot(6, LENGTH, seed=8, layout="NCL")
    path = tmp_path / "t.h5"
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.write(fd, b'pid 1 on host gone since then')\n"
            "os._exit(0)\n",  # dies holding the lock: the OS drops it
            str(path) + ".lock",
        ],
        check=True,
    )
    assert dead.returncode == 0 and os.path.exists(str(path) + ".lock")
    sa.saliency(model, X, out=path)
    assert read_tracks(path).attrs["n_completed"] == 6
    assert leftovers(tmp_path) == []


def test_a_second_writer_through_a_hard_link_is_refused(tmp_path):
    """Another name of the same file (a hard link in another folder) has another lock beside
    it: the lock on the file itself refuses the second writer, and the first finishes alone."""
    import models

    path = tmp_path / "t.h5"
    (tmp_path / "other").mkdir()
    link = tmp_path / "other" / "t.h5"
    go = tmp_path / "go"
    first = _writer(path, pause=go)
    try:
        _wait_for_rows(path, first)
        os.link(path, link)
        second = _writer(link)
        _, err = second.communicate(timeout=300)
        assert second.returncode != 0
        last = err.strip().splitlines()[-1]
        assert last.startswith("BlockingIOError: The 'out' parameter"), err[-2000:]
        assert "another name (a hard link)" in last
    finally:
        go.touch()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
    X = random_one_hot(N, LENGTH, seed=8, layout="NCL")
    alone = sa.expected_integrated_gradients(model, X, **KWARGS)
    np.testing.assert_array_equal(read_tracks(link).attributions, alone)
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "other") == []
