"""Seeded random projections, drawn with NumPy so every backend projects with the same matrix.

A Gaussian (Johnson-Lindenstrauss) projection ``R^n -> R^d`` with entries ``N(0, 1/d)`` keeps
inner products in expectation: ``E <P g1, P g2> = <g1, g2>``. The matrix is drawn in blocks of
rows, block ``j`` from the seed sequence ``(seed, j)``, so it depends only on ``(n, d, seed)``
and never on how the caller chunks its work.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: Rows of the projection matrix drawn per NumPy call (part of the matrix's definition).
BLOCK_ROWS = 4096


class RandomProjection:
    """A seeded Gaussian projection of ``n_features``-vectors to ``proj_dim`` dimensions.

    Parameters
    ----------
    n_features : int
        Length of the vectors to project (flattened parameter gradients).
    proj_dim : int
        Output dimension ``d``.
    seed : int
        Seed; the same ``(n_features, proj_dim, seed)`` always gives the same matrix.
    """

    def __init__(self, n_features: int, proj_dim: int, seed: int) -> None:
        self.n_features, self.proj_dim, self.seed = int(n_features), int(proj_dim), int(seed)

    @property
    def nbytes(self) -> int:
        """Size of the float32 matrix."""
        return self.n_features * self.proj_dim * 4

    def blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, rows)``: the matrix in row blocks, rows of shape (stop - start, d)."""
        scale = np.float32(1.0 / np.sqrt(self.proj_dim))
        for j, start in enumerate(range(0, self.n_features, BLOCK_ROWS)):
            stop = min(start + BLOCK_ROWS, self.n_features)
            rng = np.random.default_rng([self.seed, j])
            rows = rng.standard_normal((stop - start, self.proj_dim), dtype=np.float32)
            yield start, stop, rows * scale

    def matrix(self) -> np.ndarray:
        """The whole matrix, shape (n_features, proj_dim), float32."""
        out = np.empty((self.n_features, self.proj_dim), dtype=np.float32)
        for start, stop, rows in self.blocks():
            out[start:stop] = rows
        return out
