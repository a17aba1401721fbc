"""A fit into a features store killed by SIGKILL at random moments (as soon as the file appears,
after a random delay, or once the store reports a random number of completed rows), then rerun
to completion: every dataset of the store equals an uninterrupted run's bit for bit, and so
does top-k.

One driver process imports torch once (no TensorFlow), warms up with a fit in memory, and
forks a writer per kill.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from store_models import (
    BATCH,
    assert_same_datasets,
    datasets,
    leftovers,
    python,
    query_data,
    torch_model,
    torch_states,
    train_data,
    weights,
)
from tracin_models import one_torch_thread

import seqattrib as sa
from seqattrib.io import read_store

N_TRAIN, SEEDS = 240, 10
KW = {"proj_dim": 16, "batch_size": BATCH}

DRIVER = """
import json, os, random, signal, sys, time
import numpy as np, torch, seqattrib as sa, store_models as m
from seqattrib.io import read_store
torch.set_num_threads(1)
ws = m.weights(2)
model, states = m.torch_model(ws), m.torch_states(ws)
X, y = m.train_data({n})
folder = {folder!r}
sa.TRAK(model, states, **{kw!r}).fit(X[:64], y[:64]).top_k(X[:2], y[:2], 1)  # first-call costs

def writer(path):
    fd = os.open(path + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    try:
        sa.TRAK(model, states, **{kw!r}).fit(X, y, store=path)
        code = 0
    except BaseException as exc:
        print(repr(exc), file=sys.stderr)
        code = 4
    sys.stderr.flush()
    os._exit(code)

def completed(path):
    try:
        return read_store(path).n_completed
    except Exception:
        return -1

def launch(path, when, rows):
    \"\"\"Fork a writer; return its pid and, if it already ended, its wait status.\"\"\"
    pid = os.fork()
    if pid == 0:
        writer(path)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return pid, status
        if when == "created" and os.path.exists(path):
            return pid, None
        if when == "rows" and completed(path) >= rows:
            return pid, None
        if isinstance(when, float):
            time.sleep(when)
            return pid, None
        time.sleep(0.0002)

start = time.perf_counter()
warm = folder + "/uninterrupted.h5"
pid, status = launch(warm, "created", 0)
if status is None:
    _, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, open(warm + ".stderr").read()
whole = time.perf_counter() - start
total = read_store(warm).n_completed
results = []
for seed in range({seeds}):
    rng = random.Random(seed)
    when = ("created", "rows", rng.uniform(0.05, 0.95) * whole)[seed % 3]
    rows = rng.randrange(1, total)
    path = f"{{folder}}/killed-{{seed}}.h5"
    pid, status = launch(path, when, rows)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    results.append(dict(path=path, when=str(when), rows=rows, status=status,
                        completed=completed(path) if os.path.exists(path) else None))
print(json.dumps(dict(whole=whole, total=total, warm=warm, results=results)))
"""


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


def test_killed_fits_resume_to_the_store_of_an_uninterrupted_run(tmp_path):
    code = DRIVER.format(n=N_TRAIN, folder=str(tmp_path), kw=KW, seeds=SEEDS)
    done = python(code, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    total = report["total"]
    assert total > 0

    ws = weights(2)
    states = torch_states(ws)
    X, y = train_data(N_TRAIN)
    X_test, y_test = query_data(5)
    reference = tmp_path / "reference.h5"
    whole = sa.TRAK(torch_model(ws), states, **KW).fit(X, y, store=reference)
    want = datasets(reference)
    assert_same_datasets(datasets(report["warm"]), want)  # another process, the same bytes
    want_top = whole.top_k(X_test, y_test, 10)

    midway = 0
    for result in report["results"]:
        status = result["status"]
        assert status == 0 or status & 0x7F == 9, result  # done before the kill, or killed
        if result["completed"] is not None:  # a killed file reads, and claims no more rows
            assert 0 <= result["completed"] <= total, result
            midway += 0 < result["completed"] < total
        trak = sa.TRAK(torch_model(ws), states, **KW).fit(X, y, store=result["path"])
        info = read_store(result["path"])
        assert info.finished and info.n_completed == total, result
        assert_same_datasets(datasets(result["path"]), want)
        top = trak.top_k(X_test, y_test, 10)
        np.testing.assert_array_equal(top[0], want_top[0])
        assert top[1].tobytes() == want_top[1].tobytes(), result
    assert midway >= 2, f"fewer than two kills landed between the first and the last row: {report}"
    assert leftovers(tmp_path) == []
