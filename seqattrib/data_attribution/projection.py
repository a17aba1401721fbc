"""Seeded random projections, drawn with NumPy so every backend projects with the same matrix,
and the one projector of TracIn and TRAK that applies them on the device.

A random projection ``R^n -> R^d`` keeps inner products in expectation:
``E <P g1, P g2> = <g1, g2>`` (Johnson-Lindenstrauss). Three kinds:

- dense Gaussian entries ``N(0, 1/d)`` and dense Rademacher entries ``+-1/sqrt(d)`` (one random
  bit each), ``RandomProjection``. The matrix is drawn in blocks of rows, block ``j`` from the
  seed sequence ``(seed, j)``, so it depends only on ``(n, d, seed, kind)`` and never on how the
  caller chunks its work. ``Projector`` holds it on the device when it fits in
  ``PROJECTION_BYTES`` and otherwise regenerates it chunk by chunk of parameters for every
  batch, so device memory stays bounded whatever the number of parameters (at a cost that
  grows with ``n * d`` per batch).
- sparse, ``SparseProjection``: every parameter lands in ``s`` output coordinates with
  independent random signs (a sparse Johnson-Lindenstrauss transform, the block construction of
  Kane and Nelson: ``s`` CountSketches into disjoint blocks of about ``d / s`` coordinates). It
  is built once, ``O(s n)`` integers on the device, and applied to a batch by gathering,
  multiplying by the signs and summing: ``O(s n)`` work per example instead of ``O(d n)``, and
  deterministic on every device (no scatter-add).

``make_projection`` picks one: ``"auto"`` is the dense Rademacher matrix when it fits in
``PROJECTION_BYTES`` and the sparse one above.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import parameter_error
from .outputs import Tensor

if TYPE_CHECKING:
    from .gradients import ParameterBackend

#: Rows of the projection matrix drawn per NumPy call (part of the matrix's definition).
BLOCK_ROWS = 4096
KINDS = ("gaussian", "rademacher")
#: What ``make_projection`` accepts.
PROJECTION_KINDS = ("auto", "rademacher", "gaussian", "sparse")
#: Device bytes of a projection matrix held whole; larger ones are applied in chunks of rows.
#: Also the bound of ``"auto"``: a dense Rademacher matrix up to this size, sparse above, and
#: the device bytes of the gathered values a sparse projection holds at once.
PROJECTION_BYTES = 256 * 2**20
#: On a CPU, the bytes of gathered values a sparse projection holds at once: few enough rows
#: that they stay in cache (on a BPNet-sized model, one thread, 4 rows of 117k parameters at
#: s = 4 ran 2.2x faster than 64 rows at once).
CPU_GATHER_BYTES = 8 * 2**20
#: Nonzeros per parameter of a sparse projection (``s``), from the sweep of
#: ``benchmarks/bench_projection.py`` (d = 2048, a BPNet-sized model, one CPU thread): the
#: variance of inner products does not depend on ``s``; the tail does (two dominant
#: coordinates that share an output cost about ``sqrt(d) / s`` standard deviations: the largest
#: error over heavy-tailed vectors was 24 standard deviations at s = 1, 11 at s = 4, 6.2 at
#: s = 8, 4.5 to 5.4 for dense matrices); the cost grows with ``s`` (0.065 of the per-example
#: gradient passes at s = 4, 0.14 at s = 8, 0.33 at s = 16).
SPARSE_NONZEROS = 8


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

    def describe(self) -> dict[str, Any]:
        """The settings that define the matrix besides ``(n_features, proj_dim, seed)``."""
        return {"kind": self.kind}

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


class SparseProjection:
    """A seeded sparse projection of ``n_features``-vectors to ``proj_dim``: each feature lands
    in exactly ``nonzeros`` output coordinates, with value ``+-1/sqrt(nonzeros)``.

    The output coordinates are cut into ``s = nonzeros`` contiguous blocks, block ``r`` of
    width ``w_r = d // s`` or ``d // s + 1`` (the first ``d % s`` blocks are the wider ones).
    Block ``r`` is a CountSketch of its own: a uniformly random permutation ``pi_r`` of the
    features and independent random signs ``sigma_r``, both from the seed sequence
    ``(seed, n_features, proj_dim, s, r)``; feature ``i`` goes to coordinate
    ``pi_r(i) mod w_r`` of the block, with sign ``sigma_r(i)``. So ``E <P a, P b> = <a, b>``,
    and over the seeds

    ``Var <P a, P b> = sum_r p_r / s^2 * (|a|^2 |b|^2 + <a, b>^2 - 2 sum_i a_i^2 b_i^2)``

    where ``p_r <= 1 / w_r`` is the chance that two features share a coordinate of block ``r``:
    at most ``(|a|^2 |b|^2 + <a, b>^2) / d`` (up to the rounding of ``d / s``), the variance of
    a dense Rademacher projection, whatever ``s``. A larger ``s`` thins the tails of the error
    (a collision of two large features costs ``1/s`` of what it costs with ``s = 1``).

    As an array (``indices``, ``signs``, both of shape (m, d), ``m = ceil(n / min_r w_r)``):
    column ``k`` of block ``r`` lists the features of that coordinate (row ``j`` holds
    ``pi_r^-1(j w_r + k)``) and their signs, padded with feature 0 and sign 0; the projection
    of ``g`` is ``sum_j g[indices[j]] * signs[j]``.

    Parameters
    ----------
    n_features : int
        Length of the vectors to project (flattened parameter gradients).
    proj_dim : int
        Output dimension ``d``.
    seed : int
        Seed; the same ``(n_features, proj_dim, seed, nonzeros)`` always gives the same
        projection, in every process.
    nonzeros : int
        Output coordinates per feature, ``s`` (1 is a CountSketch); at most ``proj_dim``.
    """

    kind = "sparse"

    def __init__(
        self, n_features: int, proj_dim: int, seed: int, nonzeros: int = SPARSE_NONZEROS
    ) -> None:
        if not 1 <= int(nonzeros) <= int(proj_dim):
            raise ValueError(f"nonzeros must be in [1, proj_dim={proj_dim}], got {nonzeros}")
        self.n_features, self.proj_dim, self.seed = int(n_features), int(proj_dim), int(seed)
        self.nonzeros = int(nonzeros)

    def describe(self) -> dict[str, Any]:
        """The settings that define the matrix besides ``(n_features, proj_dim, seed)``."""
        return {"kind": self.kind, "nonzeros": self.nonzeros}

    @property
    def widths(self) -> list[int]:
        """Width of each block of output coordinates, ``w_r``."""
        s, d = self.nonzeros, self.proj_dim
        return [d // s + (r < d % s) for r in range(s)]

    @property
    def depth(self) -> int:
        """Rows ``m`` of ``indices`` and ``signs``: features per coordinate, padded."""
        return -(-self.n_features // min(self.widths))

    def permutation(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``r``'s ``pi_r^-1`` (feature at each position, (n_features,) int64) and
        the signs of the features in that order ((n_features,) +-1 int8)."""
        n, s = self.n_features, self.nonzeros
        rng = np.random.default_rng([self.seed, n, self.proj_dim, s, r])
        order = rng.permutation(n)
        signs = rng.integers(0, 2, n, dtype=np.int8) * np.int8(2) - np.int8(1)
        return order, signs

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, signs)``: (m, d) features (int64) and their signs ``+-1/sqrt(s)``
        (float32, 0 in the padding)."""
        n, m = self.n_features, self.depth
        indices = np.zeros((m, self.proj_dim), np.int64)
        signs = np.zeros((m, self.proj_dim), np.float32)
        scale = np.float32(1.0 / np.sqrt(self.nonzeros))
        start = 0
        for r, width in enumerate(self.widths):
            order, sign = self.permutation(r)
            flat_indices = np.zeros(m * width, np.int64)
            flat_signs = np.zeros(m * width, np.float32)
            flat_indices[:n], flat_signs[:n] = order, sign * scale
            indices[:, start : start + width] = flat_indices.reshape(m, width)
            signs[:, start : start + width] = flat_signs.reshape(m, width)
            start += width
        return indices, signs


Projection = RandomProjection | SparseProjection


def make_projection(n_features: int, proj_dim: int, seed: int, kind: str = "auto") -> Projection:
    """The projection of ``kind`` for ``n_features``-vectors (one per checkpoint).

    Parameters
    ----------
    n_features : int
        Length of the vectors to project (the number of parameters traced).
    proj_dim : int
        Output dimension ``d``.
    seed : int
        Seed of the projection.
    kind : {"auto", "rademacher", "gaussian", "sparse"}
        ``"auto"``: the dense Rademacher matrix when its ``4 n d`` bytes fit in
        ``PROJECTION_BYTES`` (held on the device), else the sparse projection (a dense matrix
        that large would be regenerated for every batch). A sparse projection has
        ``SPARSE_NONZEROS`` nonzeros per feature, or ``proj_dim`` when that is smaller.

    Returns
    -------
    RandomProjection or SparseProjection
    """
    if kind not in PROJECTION_KINDS:
        raise parameter_error(
            "make_projection",
            "kind",
            "one of " + ", ".join(repr(k) for k in PROJECTION_KINDS),
            kind,
            "Pass 'auto' unless a particular projection is needed.",
        )
    if kind == "auto":
        kind = "rademacher" if n_features * proj_dim * 4 <= PROJECTION_BYTES else "sparse"
    if kind == "sparse":
        return SparseProjection(n_features, proj_dim, seed, min(SPARSE_NONZEROS, proj_dim))
    return RandomProjection(n_features, proj_dim, seed, kind)


class Projector:
    """Projects batches of flattened gradients (device, (rows, n_features)) to host arrays
    (rows, d).

    ``projection=None``: no projection, the gradients themselves. A dense matrix is copied to
    the device once when it fits in ``PROJECTION_BYTES``; when it does not, every batch is
    projected in chunks of parameters (columns of the gradients), each chunk's rows of the
    matrix regenerated and copied within that budget. A sparse projection copies its indices
    and signs to the device once; a batch is gathered, signed and summed, as many rows at a
    time as keep the gathered values within ``PROJECTION_BYTES`` on an accelerator, within
    ``CPU_GATHER_BYTES`` (in cache) on a CPU.
    """

    def __init__(self, backend: ParameterBackend, projection: Projection | None) -> None:
        self.backend = backend
        self.projection = projection
        self.matrix: Tensor | None = None  # a dense matrix held whole
        self.regenerated: RandomProjection | None = None  # a dense one applied in chunks
        self.indices: Tensor | None = None  # a sparse one: (m * d,) features
        self.signs: Tensor | None = None  # ... and (m, d) signs
        self.chunk = 0
        if isinstance(projection, SparseProjection):
            indices, signs = projection.arrays()
            dtype = "int32" if projection.n_features < 2**31 else "int64"
            self.indices = backend.asarray(indices.reshape(-1), dtype)
            self.signs = backend.asarray(signs)
            budget = PROJECTION_BYTES if backend.on_accelerator() else CPU_GATHER_BYTES
            self.chunk = max(budget // (4 * indices.size), 1)
        elif projection is not None:
            fit = PROJECTION_BYTES // (4 * projection.proj_dim) // BLOCK_ROWS * BLOCK_ROWS
            self.chunk = max(fit, BLOCK_ROWS)
            if self.chunk >= projection.n_features:
                self.matrix = backend.asarray(projection.matrix())
            else:
                self.regenerated = projection

    def __call__(self, grads: Tensor) -> np.ndarray:
        be = self.backend
        if self.indices is not None:
            return be.to_numpy(self._sparse(grads, self.indices, self.signs))
        if self.matrix is not None:
            return be.to_numpy(be.matmul(grads, self.matrix))
        if self.regenerated is None:
            return be.to_numpy(grads)
        total = None
        n_features = self.regenerated.n_features
        for start in range(0, n_features, self.chunk):
            stop = min(start + self.chunk, n_features)
            columns = be.take(grads, be.asarray(np.arange(start, stop), "int64"), axis=1)
            part = be.matmul(columns, be.asarray(self.regenerated.rows(start, stop)))
            total = part if total is None else total + part
        return be.to_numpy(total)

    def _sparse(self, grads: Tensor, indices: Tensor, signs: Tensor) -> Tensor:
        """The sparse projection of a batch: gather, sign, sum over the ``m`` rows."""
        be = self.backend
        rows = int(grads.shape[0])
        depth, proj_dim = (int(n) for n in signs.shape)
        parts = []
        for start in range(0, rows, self.chunk):
            stop = min(start + self.chunk, rows)
            part = grads
            if stop - start < rows:
                part = be.take(grads, be.asarray(np.arange(start, stop), "int64"), axis=0)
            gathered = be.reshape(be.take(part, indices, axis=1), (-1, depth, proj_dim))
            parts.append(be.sum(gathered * signs, axis=(1,)))
        return be.concat(parts)
