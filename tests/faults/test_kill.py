"""Killed writers: SIGKILL and SIGTERM at random moments (right after the file appears
included), then a rerun that resumes and ends with the file an uninterrupted run writes.

One driver process imports torch once and forks a writer per kill, so 48 kills cost seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _faults import TESTS, leftovers, worker_env
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.io import read_tracks

N, LENGTH = 40, 24
#: EIG with 3 baselines x 5 trapezoid points: 15 rows per sequence.
KWARGS = dict(
    target=[0, 2],
    n_baselines=3,
    n_steps=4,
    quadrature="riemann_trapezoid",
    random_state=7,
    max_cpu_sequences=2,
)
ALIGNED, MISALIGNED = 15, 7

DRIVER = """
import json, os, random, signal, sys, time
sys.path.insert(0, {tests!r})
import numpy as np, torch, h5py, models, seqattrib as sa
torch.set_num_threads(1)
model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
X = models.random_one_hot({n}, {length}, seed=5, layout="NCL")
kwargs = dict({kwargs}, batch_size={batch_size})
folder = {folder!r}

def writer(path):
    fd = os.open(path + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    try:
        sa.expected_integrated_gradients(model, X, out=path, **kwargs)
        code = 0
    except InterruptedError as exc:
        print(exc, file=sys.stderr)
        code = 3
    except BaseException as exc:
        print(repr(exc), file=sys.stderr)
        code = 4
    sys.stderr.flush()
    os._exit(code)

def launch(path, when):
    pid = os.fork()
    if pid == 0:
        writer(path)
    if when == "created":  # as soon as the file appears
        while not os.path.exists(path) and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.0002)
    else:
        time.sleep(when)
    return pid

start = time.perf_counter()
_, status = os.waitpid(launch(folder + "/warm.h5", 0.0), 0)
assert os.waitstatus_to_exitcode(status) == 0
whole = time.perf_counter() - start
results = []
for seed in range({seeds}):
    for name in ("SIGKILL", "SIGTERM"):
        rng = random.Random(seed)
        middle = rng.uniform(0.1 * whole, 0.9 * whole)
        when = "created" if seed % 5 == 0 else (0.0 if seed % 5 == 1 else middle)
        path = f"{{folder}}/{{name}}-{{seed}}.h5"
        pid = launch(path, when)
        os.kill(pid, getattr(signal, name))
        _, status = os.waitpid(pid, 0)
        results.append(dict(path=path, signal=name, when=str(when), status=status))
print(json.dumps(dict(whole=whole, results=results)))
"""


def _kill_many(folder: Path, batch_size: int, seeds: int) -> dict:
    code = DRIVER.format(
        tests=str(TESTS),
        n=N,
        length=LENGTH,
        kwargs=repr(KWARGS),
        batch_size=batch_size,
        folder=str(folder),
        seeds=seeds,
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model():
    import models

    return models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")


@pytest.fixture(scope="module")
def X():
    return random_one_hot(N, LENGTH, seed=5, layout="NCL")


def _check_killed_then_resume(model, X, report, batch_size, exact):
    reference = sa.expected_integrated_gradients(model, X, batch_size=batch_size, **KWARGS)
    terminated = midway = 0
    for result in report["results"]:
        path = Path(result["path"])
        status, name = result["status"], result["signal"]
        stderr = Path(str(path) + ".stderr")  # absent when killed before writing anything
        message = stderr.read_text() if stderr.exists() else ""
        if name == "SIGTERM" and status >> 8 == 3:  # stopped itself, with a one-line message
            terminated += 1
            last = message.strip().splitlines()[-1]
            assert "stopped by SIGTERM" in last and "Rerun the same command to resume" in last
        else:  # killed by the signal, or done before it came
            assert status == 0 or status & 0x7F in (9, 15), (result, message)
        if path.exists():  # the file claims only complete rows, equal to the reference rows
            partial = read_tracks(path)
            done = partial.attrs["n_completed"]
            assert partial.attributions.shape[0] == done
            np.testing.assert_array_equal(partial.attributions, reference[:done])
            midway += 0 < done < N
        resumed = sa.expected_integrated_gradients(
            model, X, batch_size=batch_size, out=path, **KWARGS
        )
        tracks = read_tracks(resumed)
        assert tracks.attrs["n_completed"] == N
        if exact:
            np.testing.assert_array_equal(tracks.attributions, reference)
        else:
            assert_close(tracks.attributions, reference, FLOAT32)
        stderr.unlink(missing_ok=True)
        assert leftovers(path.parent, path.name) == [], result
    return terminated, midway


@pytest.mark.slow
def test_kills_at_random_points_then_rerun_equals_an_uninterrupted_run_bit_for_bit(
    model, X, tmp_path
):
    report = _kill_many(tmp_path, ALIGNED, seeds=24)
    assert len(report["results"]) == 48
    terminated, midway = _check_killed_then_resume(model, X, report, ALIGNED, exact=True)
    assert terminated >= 5, "SIGTERM never reached a running writer"
    assert midway >= 1, "no kill landed between the first and the last row"


@pytest.mark.slow
def test_kills_with_batches_across_sequences_resume_within_rounding(model, X, tmp_path):
    report = _kill_many(tmp_path, MISALIGNED, seeds=6)
    _, midway = _check_killed_then_resume(model, X, report, MISALIGNED, exact=False)
    assert midway >= 1, "no kill landed between the first and the last row"


KILL_DURING_CREATION = """
import h5py
create = h5py.Group.create_dataset
def create_then_die(self, name, *args, **kwargs):
    if name == "sequences":
        os.kill(os.getpid(), signal.SIGKILL)
    return create(self, name, *args, **kwargs)
h5py.Group.create_dataset = create_then_die
"""
KILL_BEFORE_THE_FIRST_ROWS = """
from seqattrib.io import tracks
class Killed(tracks.TrackWriter):
    def write(self, start, block):
        os.kill(os.getpid(), signal.SIGKILL)
tracks.TrackWriter = Killed
"""


@pytest.mark.parametrize(
    "kill", [KILL_DURING_CREATION, KILL_BEFORE_THE_FIRST_ROWS], ids=["creating", "created"]
)
def test_a_run_killed_in_its_first_milliseconds_is_resumed_not_refused(model, X, tmp_path, kill):
    path = tmp_path / "early.h5"
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "import os, signal, numpy as np, torch, models, seqattrib as sa\n"
        f"{kill}\n"
        "model = models.torch_model('convnet', models.convnet_weights(n_outputs=3), 'NCL')\n"
        f"X = models.random_one_hot({N}, {LENGTH}, seed=5, layout='NCL')\n"
        f"sa.expected_integrated_gradients(model, X, out={str(path)!r}, batch_size=15, "
        f"**{KWARGS!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=worker_env(), capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    sa.expected_integrated_gradients(model, X, out=path, batch_size=15, **KWARGS)
    reference = sa.expected_integrated_gradients(model, X, batch_size=15, **KWARGS)
    np.testing.assert_array_equal(read_tracks(path).attributions, reference)
    assert leftovers(tmp_path) == []
