"""Seeded random projections, drawn with NumPy so every backend projects with the same matrix,
and the one projector of TracIn and TRAK that applies them on the device.

A random projection ``R^n -> R^d`` with independent entries of mean 0 and variance ``1/d`` keeps
inner products in expectation: ``E <P g1, P g2> = <g1, g2>`` (Johnson-Lindenstrauss). Two kinds:
Gaussian entries ``N(0, 1/d)`` (the default) and Rademacher entries ``+-1/sqrt(d)`` (cheaper to
draw: one random bit each). The matrix is drawn in blocks of rows, block ``j`` from the seed
sequence ``(seed, j)``, so it depends only on ``(n, d, seed, kind)`` and never on how the caller
chunks its work. ``Projector`` holds the matrix on the device when it fits in
``PROJECTION_BYTES`` and otherwise applies it chunk by chunk of parameters, so device memory
stays bounded whatever the number of parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from .outputs import Tensor

if TYPE_CHECKING:
    from .gradients import ParameterBackend

#: Rows of the projection matrix drawn per NumPy call (part of the matrix's definition).
BLOCK_ROWS = 4096
KINDS = ("gaussian", "rademacher")
#: Device bytes of a projection matrix held whole; larger ones are applied in chunks of rows.
PROJECTION_BYTES = 256 * 2**20


class RandomProjection:
    """A seeded Gaussian or Rademacher projection of ``n_features``-vectors to ``proj_dim``.

    Parameters
    ----------
    n_features : int
        Length of the vectors to project (flattened parameter gradients).
    proj_dim : int
        Output dimension ``d``.
    seed : int
        Seed; the same ``(n_features, proj_dim, seed, kind)`` always gives the same matrix.
    kind : {"gaussian", "rademacher"}
        Entries ``N(0, 1/d)`` or ``+-1/sqrt(d)`` with probability 1/2 each.
    """

    def __init__(self, n_features: int, proj_dim: int, seed: int, kind: str = "gaussian") -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.n_features, self.proj_dim, self.seed = int(n_features), int(proj_dim), int(seed)
        self.kind = kind

    @property
    def nbytes(self) -> int:
        """Size of the float32 matrix."""
        return self.n_features * self.proj_dim * 4

    def block(self, j: int) -> np.ndarray:
        """Rows ``j * BLOCK_ROWS`` up to ``(j + 1) * BLOCK_ROWS`` (fewer in the last block)."""
        start = j * BLOCK_ROWS
        rows = min(start + BLOCK_ROWS, self.n_features) - start
        scale = np.float32(1.0 / np.sqrt(self.proj_dim))
        rng = np.random.default_rng([self.seed, j])
        if self.kind == "gaussian":
            return rng.standard_normal((rows, self.proj_dim), dtype=np.float32) * scale
        size = rows * self.proj_dim
        # one random bit per entry, most significant bit of each byte first: a byte indexes
        # its 8 entries in a table of signs
        table = (np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1) * 2.0 - 1) * scale
        signs = table.astype(np.float32)[np.frombuffer(rng.bytes(-(-size // 8)), np.uint8)]
        return signs.reshape(-1)[:size].reshape(rows, self.proj_dim)

    def blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, rows)``: the matrix in row blocks, rows of shape (stop - start, d)."""
        for j, start in enumerate(range(0, self.n_features, BLOCK_ROWS)):
            rows = self.block(j)
            yield start, start + rows.shape[0], rows

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the matrix (``start`` a multiple of ``BLOCK_ROWS``)."""
        if start % BLOCK_ROWS:
            raise ValueError(f"start must be a multiple of {BLOCK_ROWS}, got {start}")
        stop = min(stop, self.n_features)
        parts = [self.block(j) for j in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS))]
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return out[: stop - start]

    def matrix(self) -> np.ndarray:
        """The whole matrix, shape (n_features, proj_dim), float32."""
        out = np.empty((self.n_features, self.proj_dim), dtype=np.float32)
        for start, stop, rows in self.blocks():
            out[start:stop] = rows
        return out


class Projector:
    """Projects batches of flattened gradients (device, (rows, n_features)) to host arrays
    (rows, d).

    ``projection=None``: no projection, the gradients themselves. Otherwise the matrix is
    copied to the device once when it fits in ``PROJECTION_BYTES``; when it does not, every
    batch is projected in chunks of parameters (columns of the gradients), each chunk's rows of
    the matrix regenerated and copied within that budget.
    """

    def __init__(self, backend: ParameterBackend, projection: RandomProjection | None) -> None:
        self.backend = backend
        self.projection = projection
        self.matrix: Tensor | None = None
        self.chunk = 0
        if projection is not None:
            fit = PROJECTION_BYTES // (4 * projection.proj_dim) // BLOCK_ROWS * BLOCK_ROWS
            self.chunk = max(fit, BLOCK_ROWS)
            if self.chunk >= projection.n_features:
                self.matrix = backend.asarray(projection.matrix())

    def __call__(self, grads: Tensor) -> np.ndarray:
        be = self.backend
        if self.projection is None:
            return be.to_numpy(grads)
        if self.matrix is not None:
            return be.to_numpy(be.matmul(grads, self.matrix))
        total = None
        n_features = self.projection.n_features
        for start in range(0, n_features, self.chunk):
            stop = min(start + self.chunk, n_features)
            columns = be.take(grads, be.asarray(np.arange(start, stop), "int64"), axis=1)
            part = be.matmul(columns, be.asarray(self.projection.rows(start, stop)))
            total = part if total is None else total + part
        return be.to_numpy(total)
