"""The seeded Gaussian projection: defined by (n, d, seed) alone, and inner products kept."""

from __future__ import annotations

import numpy as np

from seqattrib.data_attribution.projection import BLOCK_ROWS, RandomProjection


def test_matrix_is_its_blocks_and_depends_only_on_the_seed():
    n = BLOCK_ROWS + 321
    projection = RandomProjection(n, 16, seed=7)
    matrix = projection.matrix()
    assert matrix.shape == (n, 16) and matrix.dtype == np.float32
    assert projection.nbytes == matrix.nbytes
    np.testing.assert_array_equal(np.concatenate([b for _, _, b in projection.blocks()]), matrix)
    np.testing.assert_array_equal(RandomProjection(n, 16, seed=7).matrix(), matrix)
    assert not np.array_equal(RandomProjection(n, 16, seed=8).matrix(), matrix)
    # a longer vector's matrix extends a shorter one's (rows never depend on the total)
    np.testing.assert_array_equal(RandomProjection(100, 16, seed=7).matrix(), matrix[:100])


def test_inner_products_are_kept_in_expectation():
    rng = np.random.default_rng(0)
    n, d = 3000, 2000
    x, y = rng.standard_normal((2, n))
    y = 0.6 * x + 0.8 * y  # correlated, <x, y> ~ 0.6 n
    matrix = RandomProjection(n, d, seed=1).matrix().astype(np.float64)
    px, py = x @ matrix, y @ matrix
    bound = 5 * np.linalg.norm(x) * np.linalg.norm(y) * np.sqrt(2 / d)  # 5 sigma
    assert abs(px @ py - x @ y) < bound
    assert abs(px @ px / (x @ x) - 1) < 5 * np.sqrt(2 / d)
    entries = matrix.ravel()
    assert abs(entries.mean()) < 1e-3 and abs(entries.var() * d - 1) < 0.01
