"""Models, data and file helpers for the tests of the features store and of streamed top-k.

A tiny convnet (conv(4->4, 3), conv(4->4, 3, dilation 2), mean, dense(4->3): 119 parameters),
two checkpoints, ~50 bp sequences, and training sets with exact duplicates (equal sequence and
label) placed at the same position of different batches, so that their scores tie exactly.

Imported by subprocesses too (kills, locks, memory): nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import models
import numpy as np

HERE = Path(__file__).parent
TESTS = HERE.parent
REPO = TESTS.parent

LENGTH = 50
N_OUTPUTS = 3
SMALL = {"filters": 4, "width": 3}
#: rows per device batch in these tests: many blocks for a few hundred sequences
BATCH = 16


def weights(n: int = 2, first_seed: int = 10, filters: int = 4) -> list[dict[str, np.ndarray]]:
    return [
        models.convnet_weights(n_outputs=N_OUTPUTS, filters=filters, width=3, seed=first_seed + i)
        for i in range(n)
    ]


def torch_model(ws: Sequence[dict[str, np.ndarray]]) -> Any:
    return models.torch_model("convnet", ws[0], "NLC")


def torch_states(ws: Sequence[dict[str, np.ndarray]]) -> list[dict]:
    import copy

    return [copy.deepcopy(models.torch_model("convnet", w, "NLC").state_dict()) for w in ws]


def keras_model(ws: Sequence[dict[str, np.ndarray]]) -> tuple[Any, list[list[np.ndarray]]]:
    """The Keras twin and its checkpoints (``get_weights()`` lists)."""
    model = models.keras_model("convnet", ws[0], LENGTH, "NLC")
    lists = [models.keras_model("convnet", w, LENGTH, "NLC").get_weights() for w in ws]
    return model, lists


#: (original, copy) rows of the duplicated training examples: the same position in a batch of
#: BATCH rows, in different full batches
DUPLICATES = ((3, 3 + 4 * BATCH), (17, 17 + 6 * BATCH), (30, 30 + 2 * BATCH))


def train_data(n: int, seed: int = 1, labels: int = N_OUTPUTS) -> tuple[np.ndarray, np.ndarray]:
    """(n, LENGTH, 4) float32 one-hot and int64 class labels, with the DUPLICATES rows copied."""
    X = models.random_one_hot(n, LENGTH, seed=seed)
    y = np.random.default_rng(seed).integers(0, labels, n)
    for original, copy in DUPLICATES:
        if copy < n:
            X[copy], y[copy] = X[original], y[original]
    return X, y


def query_data(n: int, seed: int = 2, labels: int = N_OUTPUTS) -> tuple[np.ndarray, np.ndarray]:
    X = models.random_one_hot(n, LENGTH, seed=seed)
    return X, np.random.default_rng(seed).integers(0, labels, n)


def stable_ranking(dense: np.ndarray, k: int, proponents: bool) -> tuple[np.ndarray, np.ndarray]:
    """The reference top-k: a stable sort of every row (ties: the lower index first)."""
    order = np.argsort(-dense if proponents else dense, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(dense, order, axis=1)


# --------------------------------------------------------------------------- files
def datasets(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every dataset of an HDF5 file, by its full name, read whole."""
    import h5py

    found: dict[str, np.ndarray] = {}
    with h5py.File(path, "r", locking=False) as f:
        f.visititems(
            lambda name, obj: (
                found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return found


def assert_same_datasets(actual: dict[str, np.ndarray], desired: dict[str, np.ndarray]) -> None:
    """The same dataset names, dtypes, shapes and bytes."""
    assert sorted(actual) == sorted(desired), (sorted(actual), sorted(desired))
    assert desired, "no datasets at all"
    for name, want in desired.items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype)
        if want.dtype.kind == "O":
            assert list(got.ravel()) == list(want.ravel()), name
        else:
            assert got.tobytes() == want.tobytes(), f"dataset {name!r} differs"


def snapshot(path: str | os.PathLike[str]) -> tuple[int, bytes]:
    """A file's modification time (ns) and bytes."""
    return os.stat(path).st_mtime_ns, Path(path).read_bytes()


def leftovers(folder: Path, prefix: str = "") -> list[str]:
    suffixes = (".lock", ".creating", ".partial", ".recovering", ".tmp")
    return sorted(
        p.name for p in folder.iterdir() if p.name.startswith(prefix) and p.name.endswith(suffixes)
    )


def one_line(exc: BaseException) -> str:
    """The message of a refusal, checked to be one line."""
    message = str(exc)
    assert message and "\n" not in message.strip(), message
    return message


# --------------------------------------------------------------------------- subprocesses
def worker_env() -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS), str(HERE)]),
        OMP_NUM_THREADS="1",
    )
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def python(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (torch only, no TensorFlow)."""
    return subprocess.run(
        [sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def popen(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code], env=worker_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


#: training sequences of the subprocesses of ``hooked_fit``
HOOKED_N = 240

#: Python lines a subprocess runs before its fit: after ``n`` writes into HDF5 datasets it
#: either dies by SIGKILL ("kill") or waits for the file ``go`` ("pause"); "none" does nothing.
HOOK = """
import os, signal, time, h5py
_write = h5py.Dataset.__setitem__
_calls = [0]
def _hooked(self, key, value):
    _write(self, key, value)
    _calls[0] += 1
    if _calls[0] == {n}:
        if {action!r} == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if {action!r} == "pause":
            print("paused", flush=True)
            while not os.path.exists({go!r}):
                time.sleep(0.01)
if {action!r} != "none":
    h5py.Dataset.__setitem__ = _hooked
"""


def hooked_fit(
    store: str | os.PathLike[str],
    fit: str,
    action: str = "none",
    n: int = 0,
    go: str | os.PathLike[str] = "",
) -> str:
    """The code of a subprocess that builds the store models and runs ``fit`` (an expression in
    ``trak``, ``X``, ``y``, ``store``), with the HOOK."""
    return (
        HOOK.format(n=n, action=action, go=str(go))
        + "import numpy as np, torch, seqattrib as sa, store_models as m\n"
        + "torch.set_num_threads(1)\n"
        + "ws = m.weights(2)\n"
        + f"X, y = m.train_data({HOOKED_N})\n"
        + f"store = {str(store)!r}\n"
        + "trak = sa.TRAK(m.torch_model(ws), m.torch_states(ws), proj_dim=16, batch_size=m.BATCH)\n"
        + f"{fit}\n"
        + "print('done', flush=True)\n"
    )


# --------------------------------------------------------------------------- memory
def anonymous_rss() -> int:
    """This process's resident anonymous memory in bytes (``RssAnon`` of /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise OSError("no RssAnon in /proc/self/status")


@contextmanager
def peak_anonymous_rss(interval: float = 0.002) -> Iterator[list[int]]:
    """Sample ``anonymous_rss`` on a thread while the block runs: ``[baseline, peak]``."""
    result = [anonymous_rss(), 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            result[1] = max(result[1], anonymous_rss())
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        result[1] = max(result[1], anonymous_rss())
