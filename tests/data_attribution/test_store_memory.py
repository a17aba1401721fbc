"""Host memory of a fit into a features store and a top-k over it does not grow with the
training set beyond the bookkeeping of a few dozen bytes per sequence.

Each size runs in its own fresh interpreter, which samples its own anonymous resident memory
(``RssAnon`` of /proc/self/status: the pages of the memory-mapped training set are file-backed
and do not count) from a thread while it fits and ranks; the two interpreters do the same
work but for the number of training sequences, so first-call costs (lazy imports, the first
gradients) cancel in the difference. The training set is a uint8 memmap of
n and of 4n sequences. Host blocks (of sequences checked, digested, or of features scored) are
capped by a constant number of bytes sized for millions of sequences; here the caps are lowered
to 256 rows, so that both sizes span many blocks, as a large training set does, and one block
costs the same at both sizes.

The bound, per training sequence added: 256 bytes, half of what holding the projected features
in memory costs (n_checkpoints x proj_dim x 4 = 2 x 64 x 4 = 512 bytes per sequence). What a
fit needs per sequence is O(1) bookkeeping: digests of the sequence and of its label (16 + 16
bytes), its label (8) and an out-to-loss weight per checkpoint (8 x 2), about 100 bytes with a
copy of each, leaving the rest for allocator and HDF5 slack. A dense (n_test, n_train) block of
float32 scores for the 256 test sequences would cost 1024 bytes per sequence.
"""

from __future__ import annotations

import json
import os

import pytest
from store_models import python

N = 4000
BOUND_PER_SEQUENCE = 256

PROBE = """
import gc, json, numpy as np, torch, seqattrib as sa, store_models as m
from seqattrib.data_attribution import examples, trak_kernel
from seqattrib.io import features
torch.set_num_threads(1)
trak_kernel.HOST_BYTES = 256 * 8 * 64  # blocks of 256 rows of 64 float64 features
examples.HOST_BLOCK = features._HASH_BLOCK = 256  # sequences checked, digested
n, folder = {n}, {folder!r}
ws = m.weights(2)
model, states = m.torch_model(ws), m.torch_states(ws)
rng = np.random.default_rng(0)
X = np.memmap(folder + "/X.u8", np.uint8, "w+", shape=(n, m.LENGTH, 4))
y = np.memmap(folder + "/y.i8", np.int64, "w+", shape=(n,))
for start in range(0, n, 1000):
    stop = min(start + 1000, n)
    X[start:stop] = np.eye(4, dtype=np.uint8)[rng.integers(0, 4, (stop - start, m.LENGTH))]
    y[start:stop] = rng.integers(0, m.N_OUTPUTS, stop - start)
X.flush(); y.flush(); del X, y
X = np.memmap(folder + "/X.u8", np.uint8, "r", shape=(n, m.LENGTH, 4))
y = np.memmap(folder + "/y.i8", np.int64, "r", shape=(n,))
X_test, y_test = m.query_data(256)
kw = dict(proj_dim=64, batch_size=256)

def run(rows, store):
    trak = sa.TRAK(model, states, **kw).fit(X[:rows], y[:rows], store=store)
    return trak.top_k(X_test, y_test, 10)

gc.collect()
with m.peak_anonymous_rss() as rss:
    indices, _ = run(n, folder + "/features.h5")
assert indices.shape == (256, 10)
print(json.dumps(dict(baseline=rss[0], peak=rss[1])))
"""


def _growth(n: int, folder) -> int:
    folder.mkdir()
    done = python(PROBE.format(n=n, folder=str(folder)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rss = json.loads(done.stdout.strip().splitlines()[-1])
    return rss["peak"] - rss["baseline"]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc/self/status")
def test_peak_memory_per_added_training_sequence_is_bounded(tmp_path):
    small = _growth(N, tmp_path / "small")
    large = _growth(4 * N, tmp_path / "large")
    per_sequence = (large - small) / (3 * N)
    assert per_sequence <= BOUND_PER_SEQUENCE, (
        f"peak anonymous memory grew by {per_sequence:.0f} bytes per added training sequence "
        f"(n={N}: {small} bytes, 4n: {large} bytes), more than {BOUND_PER_SEQUENCE}"
    )
