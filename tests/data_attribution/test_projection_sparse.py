"""The sparse projection (a sparse Johnson-Lindenstrauss transform) and ``make_projection``.

Truth used here, for vectors a, b of n features and the sparse projection P of d outputs with
s nonzeros per feature (s CountSketches into disjoint blocks of w_r outputs, each with a
uniformly random permutation and independent signs, scaled by 1/sqrt(s)):

    <Pa, Pb> - <a, b> = (1/s) sum_r sum_{i != j, same bucket of block r} sigma_i sigma_j a_i b_j

Every term has mean 0 over the signs (unbiased), and the terms of distinct pairs are
uncorrelated, so over the seeds

    Var = sum_r p_r / s^2 * Q,   Q = |a|^2 |b|^2 + <a, b>^2 - 2 sum_i a_i^2 b_i^2,

with p_r = sum_k L_k (L_k - 1) / (n (n - 1)) the chance that two features share a bucket of
block r (L_k the features of bucket k). Balanced loads give p_r <= 1 / w_r, so
Var <= (|a|^2 |b|^2 + <a, b>^2) / (s min_r w_r) <= 2 |a|^2 |b|^2 / (s floor(d / s)), the
CountSketch bound. The error is a sum of many small uncorrelated terms, near Gaussian: the
tests allow 6 standard deviations (a 2e-9 event for a Gaussian; at most 1/36 for any law, by
Chebyshev, and the draws here are fixed by their seeds).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CROSS_FRAMEWORK, FLOAT32, assert_close

from seqattrib.data_attribution import projection as projection_module
from seqattrib.data_attribution.projection import (
    PROJECTION_BYTES,
    SPARSE_NONZEROS,
    Projector,
    RandomProjection,
    SparseProjection,
    make_projection,
)

REPO = Path(__file__).resolve().parents[2]


def torch_backend():
    from seqattrib.backends.torch.core import TorchBackend

    return TorchBackend()


def dense(projection: SparseProjection) -> np.ndarray:
    """The (n, d) matrix of ``projection``, written out entry by entry from its arrays."""
    indices, signs = projection.arrays()
    matrix = np.zeros((projection.n_features, projection.proj_dim))
    columns = np.broadcast_to(np.arange(projection.proj_dim), indices.shape)
    np.add.at(matrix, (indices.ravel(), columns.ravel()), signs.ravel())
    return matrix


def project(projection: SparseProjection, vectors: np.ndarray) -> np.ndarray:
    """``vectors @ P`` in float64 from the arrays (the definition, on the host)."""
    indices, signs = projection.arrays()
    return (vectors[:, indices] * signs).sum(axis=1)


def collision_rate(projection: SparseProjection) -> float:
    """``sum_r p_r / s^2``: the variance of <Pa, Pb> is this times Q(a, b)."""
    n, s = projection.n_features, projection.nonzeros
    rate = 0.0
    for width in projection.widths:
        loads = np.bincount(np.arange(n) % width, minlength=width).astype(np.float64)
        rate += (loads * (loads - 1)).sum() / (n * (n - 1)) / s**2
    return rate


def q_factor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Q(a, b) row by row."""
    na, nb, ab = (a * a).sum(1), (b * b).sum(1), (a * b).sum(1)
    return na * nb + ab**2 - 2 * (a * a * b * b).sum(1)


def vector_families(n: int, per_family: int, seed: int) -> dict[str, np.ndarray]:
    """Random and gradient-like test vectors, (per_family, n) each."""
    rng = np.random.default_rng(seed)
    shape = (per_family, n)
    sparse = np.zeros(shape)
    for row in sparse:
        hot = rng.choice(n, 12, replace=False)
        row[hot] = rng.standard_normal(12)
    # gradient-like: layers of very different scales, a shared offset (biases), a few spikes
    scales = np.repeat(10.0 ** rng.uniform(-2, 1, 8), -(-n // 8))[:n]
    gradient = rng.standard_normal(shape) * scales + 0.3 * scales
    gradient[:, rng.choice(n, 5, replace=False)] += 40.0
    # one output channel of a flattened convolution: every 16th feature of a stretch
    strided = np.zeros(shape)
    strided[:, 16 * np.arange(n // 32) + 3] = rng.standard_normal((per_family, n // 32))
    return {
        "gaussian": rng.standard_normal(shape),
        "sparse": sparse,
        "heavy_tailed": rng.standard_t(1.5, shape),
        "gradient_like": gradient,
        "strided": strided,
    }


@pytest.mark.parametrize("nonzeros", [1, 3, SPARSE_NONZEROS])
def test_inner_products_within_six_standard_deviations(nonzeros):
    n, d = 3000, 256
    families = vector_families(n, 60, seed=1)
    a = np.concatenate(list(families.values()))
    b = np.concatenate([np.roll(v, 1, axis=0) for v in families.values()])  # other vectors
    b[::2] = 0.5 * a[::2] + b[::2]  # correlated pairs too
    projection = SparseProjection(n, d, seed=11, nonzeros=nonzeros)
    pa, pb = project(projection, a), project(projection, b)
    rate = collision_rate(projection)
    assert rate <= 1 / (nonzeros * (d // nonzeros))  # the CountSketch bound
    for x, y, px, py in ((a, b, pa, pb), (a, a, pa, pa)):  # inner products, squared norms
        exact, sketched = (x * y).sum(1), (px * py).sum(1)
        sd = np.sqrt(rate * q_factor(x, y))
        rounding = 1e-9 * np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
        assert np.all(np.abs(sketched - exact) <= 6 * sd + rounding)


def test_variance_over_seeds_matches_theory_and_no_bias():
    n, d, seeds = 1000, 64, 400
    families = vector_families(n, 1, seed=2)
    a = np.concatenate([families["gaussian"], families["gradient_like"], families["sparse"]])
    b = 0.6 * a + np.concatenate([families["heavy_tailed"], families["gaussian"], a[:1]])
    errors = []
    for seed in range(seeds):
        projection = SparseProjection(n, d, seed=seed)
        errors.append((project(projection, a) * project(projection, b)).sum(1))
    errors = np.array(errors) - (a * b).sum(1)
    theory = collision_rate(SparseProjection(n, d, 0)) * q_factor(a, b)
    # sample variances of 400 draws: within 25% (3.5 standard errors for Gaussian draws)
    assert np.all(np.abs(errors.var(axis=0) / theory - 1) < 0.25)
    # unbiased: the mean error within 4 standard errors of 0 (a sign-free sketch of these
    # vectors, which share an offset, is off by many)
    assert np.all(np.abs(errors.mean(axis=0)) < 4 * np.sqrt(theory / seeds))


@pytest.mark.parametrize(("n", "d", "nonzeros"), [(1000, 64, 4), (37, 50, 3), (500, 7, 7)])
def test_each_feature_in_exactly_s_blocks_with_signs(n, d, nonzeros):
    projection = SparseProjection(n, d, seed=3, nonzeros=nonzeros)
    matrix = dense(projection)
    values = np.unique(np.abs(matrix[matrix != 0]))
    np.testing.assert_allclose(values, 1 / np.sqrt(nonzeros), rtol=1e-7)
    edges = np.cumsum([0, *projection.widths])
    assert edges[-1] == d
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        block = matrix[:, lo:hi] != 0
        assert np.all(block.sum(axis=1) == 1)  # one output of every block per feature
        loads = block.sum(axis=0)  # features spread evenly over the block's outputs
        assert loads.max() - loads.min() <= 1
    assert abs((matrix > 0).mean() / (matrix != 0).mean() - 0.5) < 0.1


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_projector_equals_the_dense_product(framework, monkeypatch):
    n, d = 900, 40
    projection = SparseProjection(n, d, seed=4)
    grads = np.random.default_rng(0).standard_normal((13, n)).astype(np.float32)
    if framework == "torch":
        backend = torch_backend()
    else:
        from seqattrib.backends.tensorflow.core import TensorFlowBackend

        backend = TensorFlowBackend()
    expected = grads.astype(np.float64) @ dense(projection)
    features = Projector(backend, projection)(backend.asarray(grads))
    assert features.dtype == np.float32
    assert_close(features, expected, FLOAT32)
    # a few rows at a time (one at a time here) gives the same features
    monkeypatch.setattr(projection_module, "CPU_GATHER_BYTES", 1)
    one_row = Projector(backend, projection)
    assert one_row.chunk == 1
    assert_close(one_row(backend.asarray(grads)), expected, FLOAT32)


def test_torch_and_tensorflow_project_alike():
    from seqattrib.backends.tensorflow.core import TensorFlowBackend

    n, d = 5000, 128
    grads = np.random.default_rng(5).standard_normal((9, n)).astype(np.float32)
    projection = SparseProjection(n, d, seed=6)
    ours = [
        Projector(be, projection)(be.asarray(grads))
        for be in (torch_backend(), TensorFlowBackend())
    ]
    assert_close(ours[0], ours[1], CROSS_FRAMEWORK)
    again = Projector(torch_backend(), SparseProjection(n, d, seed=6))
    np.testing.assert_array_equal(again(torch.from_numpy(grads)), ours[0])


def _digest(n: int, d: int, seed: int, nonzeros: int) -> str:
    indices, signs = SparseProjection(n, d, seed, nonzeros).arrays()
    return hashlib.sha256(indices.tobytes() + signs.tobytes()).hexdigest()


def test_same_settings_same_projection_in_another_process():
    settings = (7001, 300, 2**63 + 5, 4)
    code = (
        "import hashlib\n"
        "from seqattrib.data_attribution.projection import SparseProjection\n"
        f"i, s = SparseProjection(*{settings}).arrays()\n"
        "print(hashlib.sha256(i.tobytes() + s.tobytes()).hexdigest())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == _digest(*settings)
    others = {(7001, 300, 2**63 + 6, 4), (7001, 300, 2**63 + 5, 3), (7002, 300, 2**63 + 5, 4)}
    assert all(_digest(*other) != _digest(*settings) for other in others)


def test_make_projection_auto_keeps_rademacher_under_the_bound():
    n, d, seed = 3000, 64, 9
    auto = make_projection(n, d, seed)
    assert isinstance(auto, RandomProjection) and auto.describe() == {"kind": "rademacher"}
    reference = RandomProjection(n, d, seed, "rademacher").matrix()
    np.testing.assert_array_equal(auto.matrix(), reference)
    grads = np.random.default_rng(0).standard_normal((5, n)).astype(np.float32)
    backend = torch_backend()
    features = Projector(backend, auto)(backend.asarray(grads))
    held = backend.matmul(backend.asarray(grads), backend.asarray(reference))  # as before
    np.testing.assert_array_equal(features, backend.to_numpy(held))
    # the bound itself: a matrix of exactly PROJECTION_BYTES is dense, one more row is sparse
    at_bound = PROJECTION_BYTES // (4 * 2048)
    assert make_projection(at_bound, 2048, seed).describe() == {"kind": "rademacher"}
    above = make_projection(at_bound + 1, 2048, seed)
    assert isinstance(above, SparseProjection)
    assert above.describe() == {"kind": "sparse", "nonzeros": SPARSE_NONZEROS}
    assert (above.n_features, above.proj_dim, above.seed) == (at_bound + 1, 2048, seed)


def test_make_projection_kinds_and_errors():
    assert make_projection(10, 4, 0, "gaussian").describe() == {"kind": "gaussian"}
    np.testing.assert_array_equal(
        make_projection(10, 4, 0, "gaussian").matrix(), RandomProjection(10, 4, 0).matrix()
    )
    assert make_projection(10**6, 2048, 0, "rademacher").describe() == {"kind": "rademacher"}
    assert make_projection(10, 4, 0, "sparse").describe() == {"kind": "sparse", "nonzeros": 4}
    sparse = make_projection(10, 2048, 0, "sparse").describe()
    assert sparse == {"kind": "sparse", "nonzeros": SPARSE_NONZEROS}
    with pytest.raises(ValueError, match=r"The 'kind' parameter of make_projection .*'dense'"):
        make_projection(10, 4, 0, "dense")
    with pytest.raises(ValueError, match="nonzeros"):
        SparseProjection(10, 4, 0, nonzeros=5)
