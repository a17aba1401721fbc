"""Seqlets: the spans of a contribution track that stand out, called by the recursive-seqlet
method.

Use :func:`seqlets` on arrays held in memory and :func:`iter_seqlets` on a tracks file, block by
block. Both return :class:`Seqlets`, one row per seqlet as columns; the example indices are the
rows of the array or file, and ``start``/``end`` are 0-based, half-open positions within the
sequence.

The method (the one tangermeme's ``recursive_seqlets`` implements): every contribution is placed
in one of ``n_bins`` equal bins spanning the smallest to the largest value of all the tracks; the
histogram of the bins, convolved with itself, gives the distribution of a sum of ``k`` bins drawn
independently, for every length ``k``; the p-value of a span is the chance that such a sum of its
length reaches the span's binned sum. A span is a seqlet when every span of at least
``min_length`` inside it has a p-value below ``threshold``; seqlets are taken from the longest
length down, at each length in order of p-value, and never overlap. Negative seqlets are the
same method on the negated tracks (with the null of the negated tracks).

The defaults (``threshold=3e-5``, ``min_length=6``, ``max_length=25``, ``flank=0``) come from a
sweep on the demo's tracks, checked on a trained model (the motifs guide, "Choosing the
defaults"). tangermeme's are ``threshold=0.01`` and lengths 4 to 25: pass those to get its calls.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._errors import parameter_error

if TYPE_CHECKING:
    import pandas

Sign = Literal["both", "positive", "negative"]

#: The defaults, chosen from a sweep on the demo tracks and checked on a trained model (the
#: guide's "Choosing the defaults"): a strict p-value and seqlets at least as long as the
#: shortest common transcription-factor motifs (an E-box is 6 bp).
THRESHOLD = 3e-5
MIN_LENGTH = 6
MAX_LENGTH = 25
FLANK = 0

_COLUMNS = ("example", "target", "start", "end", "sign", "attribution", "p_value", "fdr")
_DTYPES = {
    "example": np.int64,
    "target": np.int64,
    "start": np.int64,
    "end": np.int64,
    "sign": np.int8,
    "attribution": np.float64,
    "p_value": np.float64,
    "fdr": np.float64,
}


@dataclass(frozen=True)
class Seqlets:
    """Seqlets as columns, one row per seqlet (all arrays the same length n).

    Attributes
    ----------
    example : array of shape (n,), int64
        The row of the tracks (the index into the array, or the file's row).
    target : array of shape (n,), int64
        The target of the tracks (the file's ``targets`` value; 0 for an array).
    start, end : arrays of shape (n,), int64
        0-based, half-open span within the sequence, flanks included.
    sign : array of shape (n,), int8
        +1 for a positive seqlet, -1 for a negative one.
    attribution : array of shape (n,), float64
        The sum of the projected contributions over ``[start, end)``.
    p_value : array of shape (n,), float64
        The recursive-seqlet p-value of the span without its flanks (a ranking score).
    fdr : array of shape (n,), float64
        The empirical false-discovery rate against control tracks; NaN without controls.
    """

    example: np.ndarray
    target: np.ndarray
    start: np.ndarray
    end: np.ndarray
    sign: np.ndarray
    attribution: np.ndarray
    p_value: np.ndarray
    fdr: np.ndarray

    def __len__(self) -> int:
        return int(self.example.shape[0])

    def to_frame(self) -> pandas.DataFrame:
        """The seqlets as a pandas DataFrame with one column per field."""
        from .._optional import import_optional

        pd = import_optional("pandas")
        return pd.DataFrame({name: getattr(self, name) for name in _COLUMNS})

    @classmethod
    def empty(cls) -> Seqlets:
        """No seqlets."""
        return cls(**{name: np.zeros(0, dtype=_DTYPES[name]) for name in _COLUMNS})

    @classmethod
    def concat(cls, parts: list[Seqlets]) -> Seqlets:
        """The rows of ``parts``, one after the other."""
        if not parts:
            return cls.empty()
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS})

    def take(self, index: np.ndarray) -> Seqlets:
        """The rows at ``index`` (integer positions or a boolean mask)."""
        return Seqlets(**{name: getattr(self, name)[index] for name in _COLUMNS})


@dataclass(frozen=True)
class _Null:
    """The bins and the null distributions of binned span sums of one sign of the tracks.

    ``rcdfs[k, s]`` is the chance that a sum of ``k`` independent binned values is at least ``s``.
    """

    xmin: np.floating[Any]
    bin_width: float
    rcdfs: np.ndarray


def _bins(X: np.ndarray, xmin: np.floating[Any], bin_width: float, n_bins: int) -> np.ndarray:
    """The bin of every value of ``X`` (its dtype for the difference, float64 for the ratio),
    values outside the range placed in the end bins."""
    scaled = (X - xmin).astype(np.float64)
    scaled /= bin_width
    np.clip(scaled, 0, n_bins - 1, out=scaled)
    return scaled.astype(np.int64)  # truncation: the floor of the non-negative values


def _histogram(X: np.ndarray, xmin: np.floating[Any], bin_width: float, n_bins: int) -> np.ndarray:
    """The count of values of ``X`` in each bin (int64, exact, so blocks add up)."""
    return np.bincount(_bins(X, xmin, bin_width, n_bins).ravel(), minlength=n_bins)


def _bin_range(xmin: np.floating[Any], xmax: np.floating[Any], n_bins: int) -> float | None:
    """The bin width of values from ``xmin`` to ``xmax``; None when they are all equal."""
    if xmax == xmin:
        return None
    return float(xmax - xmin) / (n_bins - 1)


def _null_tables(counts: np.ndarray, max_length: int) -> np.ndarray:
    """``rcdfs`` of :class:`_Null` from the histogram ``counts``, for lengths up to
    ``max_length``: the histogram convolved with itself once per length (all terms are
    non-negative, so the small tail probabilities keep their relative precision), each reverse
    cumulative sum summed down from the top."""
    n_bins = counts.shape[0]
    f = counts.astype(np.float64) / counts.sum()
    width = (n_bins - 1) * max_length + 2
    rcdfs = np.zeros((max_length + 1, width), dtype=np.float64)
    pdf = np.ones(1)
    for k in range(1, max_length + 1):
        pdf = np.convolve(pdf, f)
        rcdfs[k, : pdf.shape[0]] = np.cumsum(pdf[::-1])[::-1]
    return rcdfs


def _local_minima(g: np.ndarray, rank: np.ndarray, length: int) -> np.ndarray:
    """Whether each candidate (sorted by its place ``g``) ranks before every other candidate
    closer than ``length`` to it (the candidates it would overlap)."""
    best = np.ones(g.shape[0], dtype=bool)
    for d in range(1, min(length, g.shape[0])):
        near = (g[d:] - g[:-d]) < length
        later_wins = near & (rank[d:] < rank[:-d])
        best[:-d] &= ~later_wins
        best[d:] &= ~(near & ~later_wins)
    return best


def _overlapping(g: np.ndarray, picked: np.ndarray, length: int) -> np.ndarray:
    """Whether each candidate (sorted by ``g``) is closer than ``length`` to a picked one."""
    hit = picked.copy()
    for d in range(1, min(length, g.shape[0])):
        near = (g[d:] - g[:-d]) < length
        hit[:-d] |= near & picked[d:]
        hit[d:] |= near & picked[:-d]
    return hit


def _greedy(g: np.ndarray, p: np.ndarray, length: int) -> np.ndarray:
    """The candidates of one length that the sequential decoder calls, among candidates that
    overlap no earlier seqlet: in order of (p, place), each one that overlaps none called before.

    Computed in rounds: a candidate that ranks before every candidate still open within reach is
    called by the sequential decoder too; the candidates it overlaps are closed."""
    order = np.lexsort((g, p))
    rank = np.empty(g.shape[0], dtype=np.int64)
    rank[order] = np.arange(g.shape[0])
    called = np.zeros(g.shape[0], dtype=bool)
    open_ = np.arange(g.shape[0])
    while open_.shape[0]:
        og, orank = g[open_], rank[open_]
        best = _local_minima(og, orank, length)
        called[open_[best]] = True
        open_ = open_[~_overlapping(og, best, length)]
    return called


def _call(
    X: np.ndarray,
    null: _Null,
    threshold: float,
    min_length: int,
    max_length: int,
    flank: int,
    n_bins: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The seqlets of the (n, L) tracks ``X`` against ``null``: example, start, end (flanks
    included), attribution sum and p-value, in order of example and start."""
    n, length_seq = X.shape
    binned = _bins(X, null.xmin, null.bin_width, n_bins)
    csum = np.zeros((n, length_seq + 1), dtype=np.int64)
    np.cumsum(binned, axis=1, out=csum[:, 1:])
    del binned
    rcdfs = null.rcdfs

    # The spans of each length whose every inner span of at least min_length is below the
    # threshold, kept sparse: P is the largest p-value of the span's prefixes, Q of all its
    # inner spans. A span of length k + 1 qualifies only if both its spans of length k do.
    sums = csum[:, min_length:] - csum[:, :-min_length]
    p_dense = rcdfs[min_length, sums]
    ex, k = np.nonzero(p_dense < threshold)
    P = p_dense[ex, k]
    Q = P
    del sums, p_dense
    levels: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = [(min_length, ex, k, P)]
    for length in range(min_length + 1, max_length + 1):
        pair = np.nonzero((ex[1:] == ex[:-1]) & (k[1:] == k[:-1] + 1))[0]
        ex, k = ex[pair], k[pair]
        s = csum[ex, k + length] - csum[ex, k]
        P = np.maximum(rcdfs[length, s], P[pair])
        Q = np.maximum(P, Q[pair + 1])
        keep = Q < threshold
        ex, k, P, Q = ex[keep], k[keep], P[keep], Q[keep]
        levels.append((length, ex, k, P))

    stride = length_seq + 1
    called_start = np.zeros(0, dtype=np.int64)
    called_end = np.zeros(0, dtype=np.int64)
    out_ex, out_k, out_len = [], [], []
    for length, ex, k, P in reversed(levels):
        if not ex.shape[0]:
            continue
        g = ex * stride + k
        at = np.searchsorted(called_end, g, side="right")
        inside = at < called_start.shape[0]
        free = np.ones(g.shape[0], dtype=bool)
        free[inside] = called_start[at[inside]] >= g[inside] + length
        g, ex, k, P = g[free], ex[free], k[free], P[free]
        picked = _greedy(g, P, length)
        out_ex.append(ex[picked])
        out_k.append(k[picked])
        out_len.append(np.full(int(picked.sum()), length, dtype=np.int64))
        called_start = np.concatenate([called_start, g[picked]])
        called_end = np.concatenate([called_end, g[picked] + length])
        order = np.argsort(called_start, kind="stable")
        called_start, called_end = called_start[order], called_end[order]

    if not out_ex:
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return empty_i, empty_i, empty_i, empty_f, empty_f
    ex = np.concatenate(out_ex)
    k = np.concatenate(out_k)
    lengths = np.concatenate(out_len)
    order = np.lexsort((k, ex))
    ex, k, lengths = ex[order], k[order], lengths[order]
    p_value = rcdfs[lengths, csum[ex, k + lengths] - csum[ex, k]]
    start = np.maximum(k - flank, 0)
    end = np.minimum(k + lengths + flank, length_seq)
    xsum = np.zeros((n, length_seq + 1), dtype=np.float64)
    np.cumsum(X, axis=1, dtype=np.float64, out=xsum[:, 1:])
    attribution = xsum[ex, end] - xsum[ex, start]
    return ex, start, end, attribution, p_value


_FUNC = "seqlets"


def _check_int(func: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise parameter_error(func, name, f"an integer >= {low}", value, error=TypeError)
    if value < low:
        raise parameter_error(func, name, f"an integer >= {low}", value)
    return int(value)


def _check_settings(
    func: str,
    threshold: float,
    min_length: int,
    max_length: int,
    flank: int,
    sign: str,
    n_bins: int,
    max_fdr: float | None,
) -> tuple[float, int, int, int, int]:
    """The settings, checked (one-line errors naming the parameter)."""
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(
        threshold, (int, float, np.number)
    ):
        raise parameter_error(func, "threshold", "a p-value in (0, 1]", threshold, error=TypeError)
    if not 0 < float(threshold) <= 1:
        raise parameter_error(
            func, "threshold", "a p-value in (0, 1]", threshold, "Pass e.g. threshold=1e-4."
        )
    min_length = _check_int(func, "min_length", min_length, 1)
    max_length = _check_int(func, "max_length", max_length, 1)
    if max_length < min_length:
        raise parameter_error(
            func, "max_length", f"at least min_length={min_length}", max_length,
            "Raise max_length or lower min_length.",
        )  # fmt: skip
    flank = _check_int(func, "flank", flank, 0)
    n_bins = _check_int(func, "n_bins", n_bins, 2)
    if sign not in ("both", "positive", "negative"):
        raise parameter_error(func, "sign", "'both', 'positive' or 'negative'", sign)
    if max_fdr is not None and not (
        isinstance(max_fdr, (int, float, np.number))
        and not isinstance(max_fdr, (bool, np.bool_))
        and 0 <= float(max_fdr) <= 1
    ):
        raise parameter_error(func, "max_fdr", "None or a rate in [0, 1]", max_fdr)
    return float(threshold), min_length, max_length, flank, n_bins


def _projected(
    func: str, name: str, attributions: Any, one_hot: Any, one_hot_name: str
) -> np.ndarray:
    """(N, L) projected contributions from (N, L) tracks, (N, L, 4) projected tracks, or
    (N, L, 4) hypothetical tracks with their one-hot; float32 or float64."""
    X = np.asarray(attributions)
    if X.ndim not in (2, 3) or (X.ndim == 3 and X.shape[-1] != 4) or 0 in X.shape:
        raise parameter_error(
            func, name, "a non-empty array of shape (N, L, 4) or (N, L)", X,
            "Select one target of (N, K, L, 4) tracks, e.g. attributions[:, k].",
        )  # fmt: skip
    if X.dtype.kind not in "fiu":
        raise parameter_error(func, name, "an array of numbers", X, error=TypeError)
    if X.dtype != np.float64:
        X = X.astype(np.float32)
    if not np.isfinite(X).all():
        raise parameter_error(
            func, name, "finite contributions", "an array with NaN or infinite values",
            "Recompute the tracks, or drop the rows that hold them.", described=True,
        )  # fmt: skip
    if one_hot is not None:
        S = np.asarray(one_hot)
        if X.ndim != 3 or S.shape != X.shape:
            raise parameter_error(
                func, one_hot_name, f"None or a one-hot array of shape {X.shape[:2] + (4,)}",
                S, f"Pass the sequences the {name} were computed on, or {one_hot_name}=None.",
            )  # fmt: skip
        return _project(X, S)
    if X.ndim == 3:
        if (np.count_nonzero(X, axis=-1) > 1).any():
            raise parameter_error(
                func, one_hot_name, "the one-hot sequences for hypothetical contributions",
                None, "Pass the sequences the tracks were computed on to project them.",
            )  # fmt: skip
        return X.sum(axis=-1)
    return X


#: Blocks of tracks: a function that starts a pass over them, yielding (first row, (n, K, L)
#: projected contributions of the K selected targets), in order of rows.
Blocks = Callable[[], Iterator[tuple[int, np.ndarray]]]
#: Bytes of contributions in one block when ``block_size`` is not given.
_BLOCK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class _Settings:
    threshold: float
    min_length: int
    max_length: int
    flank: int
    signs: tuple[int, ...]
    n_bins: int
    max_fdr: float | None


def _signed(X: np.ndarray, sign: int) -> np.ndarray:
    return X if sign > 0 else -X


def _fit_nulls(
    blocks: Blocks, n_targets: int, settings: _Settings
) -> dict[tuple[int, int], _Null | None]:
    """The null of every target and sign (None where all values are equal), from two passes
    over the blocks: the smallest and largest values, then the histogram. Both are exact
    (integer counts), so any blocking of the rows gives the same null."""
    lo: list[Any] = [None] * n_targets
    hi: list[Any] = [None] * n_targets
    for _, block in blocks():
        for j in range(n_targets):
            b_lo, b_hi = block[:, j].min(), block[:, j].max()
            lo[j] = b_lo if lo[j] is None else min(lo[j], b_lo)
            hi[j] = b_hi if hi[j] is None else max(hi[j], b_hi)
    ranges: dict[tuple[int, int], tuple[Any, float] | None] = {}
    for j in range(n_targets):
        for s in settings.signs:
            xmin, xmax = (lo[j], hi[j]) if s > 0 else (-hi[j], -lo[j])
            width = _bin_range(xmin, xmax, settings.n_bins)
            ranges[j, s] = None if width is None else (xmin, width)
    counts = {key: np.zeros(settings.n_bins, np.int64) for key, r in ranges.items() if r}
    if counts:
        for _, block in blocks():
            for j, s in counts:
                xmin, width = ranges[j, s]  # type: ignore[misc]
                counts[j, s] += _histogram(_signed(block[:, j], s), xmin, width, settings.n_bins)
    return {
        key: None
        if r is None
        else _Null(r[0], r[1], _null_tables(counts[key], settings.max_length))
        for key, r in ranges.items()
    }


def _p_values(
    blocks: Blocks, nulls: dict[tuple[int, int], _Null | None], settings: _Settings
) -> tuple[dict[tuple[int, int], np.ndarray], int, int]:
    """The p-values of all seqlets of every target and sign in the blocks, and the number of
    rows and the sequence length of the blocks."""
    found: dict[tuple[int, int], list[np.ndarray]] = {key: [] for key in nulls}
    rows = length = 0
    for _, block in blocks():
        rows += block.shape[0]
        length = block.shape[2]
        for (j, s), null in nulls.items():
            if null is not None:
                calls = _call(
                    _signed(block[:, j], s), null, settings.threshold, settings.min_length,
                    settings.max_length, 0, settings.n_bins,
                )  # fmt: skip
                found[j, s].append(calls[4])
    return {key: np.concatenate(v) if v else np.zeros(0) for key, v in found.items()}, rows, length


@dataclass(frozen=True)
class _FdrTable:
    """The false-discovery rate at each p-value of the seqlets of one target and sign."""

    p_value: np.ndarray
    fdr: np.ndarray

    def lookup(self, p_value: np.ndarray) -> np.ndarray:
        return self.fdr[np.searchsorted(self.p_value, p_value, side="right") - 1]


def _fdr_table(
    real_p: np.ndarray, control_p: np.ndarray, n_windows: int, n_control_windows: int
) -> _FdrTable:
    """The empirical FDR (defined in :func:`seqlets`) at each of the seqlets' p-values."""
    sorted_p = np.sort(real_p)
    n_real = np.searchsorted(sorted_p, sorted_p, side="right")
    n_control = np.searchsorted(np.sort(control_p), sorted_p, side="right")
    raw = n_control * (n_windows / n_control_windows) / np.maximum(n_real, 1)
    fdr = np.minimum(np.minimum.accumulate(raw[::-1])[::-1], 1.0)
    return _FdrTable(sorted_p, fdr)


def _fdr_tables(
    blocks: Blocks,
    controls: Blocks,
    nulls: dict[tuple[int, int], _Null | None],
    settings: _Settings,
) -> dict[tuple[int, int], _FdrTable]:
    """The FDR tables of every target and sign: a pass over the tracks and one over the
    controls, calling seqlets with the tracks' nulls."""
    real, rows, length = _p_values(blocks, nulls, settings)
    control, c_rows, c_length = _p_values(controls, nulls, settings)
    n_windows = rows * (length - settings.min_length + 1)
    n_control_windows = c_rows * (c_length - settings.min_length + 1)
    return {key: _fdr_table(real[key], control[key], n_windows, n_control_windows) for key in nulls}


def _block_seqlets(
    first_row: int,
    block: np.ndarray,
    targets: list[int],
    nulls: dict[tuple[int, int], _Null | None],
    fdr: dict[tuple[int, int], _FdrTable] | None,
    settings: _Settings,
) -> Seqlets:
    """The seqlets of one block, in order of example, target, start and sign (positive
    first)."""
    parts = []
    for (j, s), null in nulls.items():
        if null is None:
            continue
        ex, start, end, attribution, p_value = _call(
            _signed(block[:, j], s), null, settings.threshold, settings.min_length,
            settings.max_length, settings.flank, settings.n_bins,
        )  # fmt: skip
        n = ex.shape[0]
        parts.append(
            Seqlets(
                example=ex + first_row,
                target=np.full(n, targets[j], dtype=np.int64),
                start=start,
                end=end,
                sign=np.full(n, s, dtype=np.int8),
                attribution=attribution * s,
                p_value=p_value,
                fdr=np.full(n, np.nan) if fdr is None else fdr[j, s].lookup(p_value),
            )
        )
    merged = Seqlets.concat(parts)
    merged = merged.take(np.lexsort((-merged.sign, merged.start, merged.target, merged.example)))
    if settings.max_fdr is not None:
        merged = merged.take(merged.fdr <= settings.max_fdr)
    return merged


def _generate(
    blocks: Blocks, controls: Blocks | None, targets: list[int], settings: _Settings
) -> Iterator[Seqlets]:
    """The seqlets of each block of tracks (the nulls, and the FDR tables with controls, from
    earlier passes over all of them)."""
    nulls = _fit_nulls(blocks, len(targets), settings)
    fdr = None if controls is None else _fdr_tables(blocks, controls, nulls, settings)
    for first_row, block in blocks():
        yield _block_seqlets(first_row, block, targets, nulls, fdr, settings)


def _array_blocks(X: np.ndarray) -> Blocks:
    """One block of all rows of (N, L) projected tracks."""
    return lambda: iter([(0, X[:, None])])


@dataclass(frozen=True)
class _TracksSource:
    """The projected contributions of chosen targets of a tracks file, block by block."""

    path: str
    func: str
    param: str
    targets: list[int]
    index: list[int] | None
    rows: int
    length: int
    block_size: int

    @classmethod
    def open(
        cls, path: Any, target: Any, block_size: int | None, func: str, param: str
    ) -> _TracksSource:
        """Check the file and the targets chosen from it (one-line errors)."""
        from ..io.tracks_format import open_tracks

        with open_tracks(path, func, param) as f:
            if "attributions" not in f:
                raise parameter_error(
                    func, param, "a tracks file of attributions", os.fspath(path),
                    "Other results (dependency maps, predictions) have no seqlets.",
                    described=True,
                )  # fmt: skip
            data = f["attributions"]
            axis = int(f.attrs["alphabet_axis"])
            squeezed = data.ndim == 3
            sample = data.shape[1:] if squeezed else data.shape[2:]
            if f["sequences"].shape[1:] != sample or 4 not in sample:
                raise parameter_error(
                    func, param, "a tracks file with the one-hot sequences of its rows",
                    os.fspath(path),
                    "Its contributions cannot be projected: rewrite the tracks from one-hot "
                    "sequences.", described=True,
                )  # fmt: skip
            length = sample[0] if axis == -1 else sample[1]
            file_targets = [int(t) for t in f.json_attribute("settings")["targets"]]
            rows = int(f.attrs["n_completed"])
            row_bytes = int(np.prod(sample)) * 4
        chosen = _choose_targets(file_targets, target, func, param)
        index = None if squeezed else [file_targets.index(t) for t in chosen]
        if block_size is None:
            block_size = max(1, _BLOCK_BYTES // (row_bytes * len(chosen)))
        else:
            block_size = _check_int(func, "block_size", block_size, 1)
        return cls(os.fspath(path), func, param, chosen, index, rows, int(length), block_size)

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """A pass over the rows: (first row, (n, K, L) float32 projected contributions)."""
        from ..io.tracks_format import open_tracks

        with open_tracks(self.path, self.func, self.param) as f:
            data, sequences = f["attributions"], f["sequences"]
            ism = str(f.attrs["method"]) == "ism"
            ncl = int(f.attrs["alphabet_axis"]) != -1
            for first in range(0, self.rows, self.block_size):
                stop = min(self.rows, first + self.block_size)
                block = data[first:stop]
                block = block[:, None] if self.index is None else block[:, self.index]
                one_hot = sequences[first:stop].astype(np.float32)
                if ncl:
                    block = block.transpose(0, 1, 3, 2)
                    one_hot = one_hot.transpose(0, 2, 1)
                if ism:
                    block = block - block.mean(axis=-1, keepdims=True)
                projected = _project(block, one_hot[:, None])
                if not np.isfinite(projected).all():
                    bad = first + int(np.nonzero(~np.isfinite(projected).all(axis=(1, 2)))[0][0])
                    raise parameter_error(
                        self.func, self.param, "a tracks file of finite contributions",
                        f"NaN or infinite values in row {bad} of {self.path!r}",
                        "Recompute the tracks of that row.", described=True,
                    )  # fmt: skip
                yield first, projected


def _choose_targets(file_targets: list[int], target: Any, func: str, param: str) -> list[int]:
    """The targets chosen: all of the file's (None), one, or several. ``param`` names the
    file: for a controls file, its targets must hold the ones chosen from the tracks."""
    if target is None:
        return file_targets
    chosen = [target] if isinstance(target, (int, np.integer)) else target
    if (
        not isinstance(chosen, (list, tuple, np.ndarray))
        or not len(chosen)
        or any(
            isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)) for t in chosen
        )
        or len(set(chosen)) != len(chosen)
    ):
        raise parameter_error(
            func, "target", "None, a target of the file or a list of distinct ones", target
        )
    missing = [int(t) for t in chosen if int(t) not in file_targets]
    if missing and param == "controls":
        raise parameter_error(
            func, "controls", f"a tracks file with the targets {[int(t) for t in chosen]}",
            f"a file of the targets {file_targets}",
            "Compute the controls for the same targets as the tracks.", described=True,
        )  # fmt: skip
    if missing:
        raise parameter_error(
            func, "target", f"targets of the file ({file_targets})", missing,
            "Choose among the targets the tracks were computed for.",
        )  # fmt: skip
    return [int(t) for t in chosen]


def _project(X: np.ndarray, one_hot: np.ndarray) -> np.ndarray:
    """Contributions at the observed bases, summed over the alphabet (the last axis)."""
    return (X * one_hot.astype(X.dtype)).sum(axis=-1)


def _settings(
    func: str,
    threshold: float,
    min_length: int,
    max_length: int,
    flank: int,
    sign: str,
    n_bins: int,
    max_fdr: float | None,
    has_controls: bool,
) -> _Settings:
    threshold, min_length, max_length, flank, n_bins = _check_settings(
        func, threshold, min_length, max_length, flank, sign, n_bins, max_fdr
    )
    if max_fdr is not None and not has_controls:
        raise parameter_error(
            func, "max_fdr", "None without controls", max_fdr,
            "Pass controls= (tracks of shuffled sequences) to estimate false-discovery rates.",
        )  # fmt: skip
    signs = {"both": (1, -1), "positive": (1,), "negative": (-1,)}[sign]
    return _Settings(threshold, min_length, max_length, flank, signs, n_bins, max_fdr)


def _check_length(func: str, param: str, length: int, settings: _Settings) -> None:
    if length < settings.max_length:
        raise parameter_error(
            func, param, f"tracks at least max_length={settings.max_length} long",
            f"tracks of length {length}", "Lower max_length.", described=True,
        )  # fmt: skip


def seqlets(
    attributions: Any,
    one_hot: Any = None,
    *,
    threshold: float = THRESHOLD,
    min_length: int = MIN_LENGTH,
    max_length: int = MAX_LENGTH,
    flank: int = FLANK,
    sign: Sign = "both",
    controls: Any = None,
    control_one_hot: Any = None,
    max_fdr: float | None = None,
    n_bins: int = 1000,
) -> Seqlets:
    """Call seqlets, the spans of high contribution, on tracks held in memory.

    Use this on an array; use :func:`iter_seqlets` to call them straight from a tracks file,
    block by block (with the same results). The method is the recursive-seqlet method (see
    :mod:`seqattrib.motifs.seqlets`): p-values of binned span sums against the distribution of
    the tracks themselves, a span kept when every inner span of at least ``min_length`` is below
    ``threshold``.

    Parameters
    ----------
    attributions : array of shape (N, L, 4) or (N, L)
        Contributions of one target: hypothetical (with ``one_hot``), projected on the observed
        bases (zeros elsewhere), or already summed over the alphabet (N, L).
    one_hot : array of shape (N, L, 4), optional
        The sequences; (N, L, 4) contributions are projected on them, ``(attributions *
        one_hot).sum(-1)``. Needed for hypothetical contributions.
    threshold : float
        The p-value every inner span of a seqlet must be below (a ranking score, not an error
        rate; ``controls`` give one).
    min_length, max_length : int
        The shortest and the longest seqlet, flanks excluded.
    flank : int
        Positions added on each side of every seqlet after calling (clipped to the sequence).
    sign : {"both", "positive", "negative"}
        Which seqlets: of high positive contributions (sign +1), of strongly negative ones
        (sign -1, called on the negated tracks with their own null), or both.
    controls : array of shape (M, L', 4) or (M, L'), or path, optional
        Tracks of the same kind for sequences without the signal (attributions of
        dinucleotide-shuffled sequences or of background regions, same model, target and
        settings), or a tracks file of one target holding them. Each seqlet then gets an
        empirical false-discovery rate: seqlets are called on the controls with the bins, null
        and settings of the tracks; for a seqlet with p-value ``p``,
        ``FDR(p) = (C(p) * W / W_c) / R(p)``, where ``C(p)`` and ``R(p)`` count the control and
        the real seqlets of its sign with a p-value at most ``p``, and ``W`` and ``W_c`` the
        windows of ``min_length`` in the tracks and in the controls. As in Benjamini–Hochberg,
        the rate reported is the smallest ``FDR(p')`` over the seqlets' ``p' >= p``, capped
        at 1.
    control_one_hot : array of shape (M, L', 4), optional
        The sequences of the controls, to project (M, L', 4) control contributions.
    max_fdr : float, optional
        Keep only the seqlets whose false-discovery rate is at most this (needs ``controls``).
    n_bins : int
        The number of bins of the contributions.

    Returns
    -------
    Seqlets
        One row per seqlet, in order of example, start and sign (positive first); ``target``
        is 0, and ``fdr`` is NaN without controls.

    Examples
    --------
    >>> calls = seqlets(attributions, one_hot, controls=shuffled, control_one_hot=shuffled_x)
    >>> calls.to_frame().head()  # doctest: +SKIP
    """
    func = "seqlets"
    settings = _settings(
        func, threshold, min_length, max_length, flank, sign, n_bins, max_fdr,
        controls is not None,
    )  # fmt: skip
    X = _projected(func, "attributions", attributions, one_hot, "one_hot")
    _check_length(func, "attributions", X.shape[1], settings)
    control_blocks = None
    if isinstance(controls, (str, os.PathLike)):
        source = _TracksSource.open(controls, None, None, func, "controls")
        if len(source.targets) != 1:
            raise parameter_error(
                func, "controls", "a tracks file of one target", os.fspath(controls),
                "Pass the control tracks of the target as an array.", described=True,
            )  # fmt: skip
        _check_length(func, "controls", source.length, settings)
        control_blocks = source.blocks
    elif controls is not None:
        C = _projected(func, "controls", controls, control_one_hot, "control_one_hot")
        _check_length(func, "controls", C.shape[1], settings)
        control_blocks = _array_blocks(C)
    return next(_generate(_array_blocks(X), control_blocks, [0], settings))


def iter_seqlets(
    path: str | os.PathLike[str],
    *,
    target: int | list[int] | None = None,
    block_size: int | None = None,
    threshold: float = THRESHOLD,
    min_length: int = MIN_LENGTH,
    max_length: int = MAX_LENGTH,
    flank: int = FLANK,
    sign: Sign = "both",
    controls: Any = None,
    control_one_hot: Any = None,
    max_fdr: float | None = None,
    n_bins: int = 1000,
) -> Iterator[Seqlets]:
    """Call seqlets on a tracks file block by block: the seqlets of each block of rows.

    Use this on a tracks file of any size (host memory holds one block); :func:`seqlets` is the
    same method on an array, and gives the same seqlets. The p-values need the distribution of
    the whole file, so the file is read in passes: the range of its values, their histogram,
    (with controls, the seqlets of the tracks and of the controls), then the seqlets, block by
    block. Hypothetical contributions are projected on the file's one-hot sequences (ISM
    scores after centring each position on its mean, as the exports do).

    Parameters
    ----------
    path : str or os.PathLike
        A tracks file written with ``out=`` (its completed rows are read).
    target : int or list of int, optional
        The target(s) of the file to call seqlets on (the file's ``targets`` values); default:
        all of them. Each target has its own null.
    block_size : int, optional
        Rows per block; default: as many as hold 64 MiB of contributions.
    threshold, min_length, max_length, flank, sign, max_fdr, n_bins
        As in :func:`seqlets`.
    controls : path or array of shape (M, L', 4) or (M, L'), optional
        Control tracks (see :func:`seqlets`): a tracks file holding the chosen targets, or an
        array when one target is chosen.
    control_one_hot : array of shape (M, L', 4), optional
        The sequences of array controls, to project (M, L', 4) contributions.

    Yields
    ------
    Seqlets
        The seqlets of one block of rows, in order of example (the file's row), target, start
        and sign (positive first).
    """
    func = "iter_seqlets"
    settings = _settings(
        func, threshold, min_length, max_length, flank, sign, n_bins, max_fdr,
        controls is not None,
    )  # fmt: skip
    source = _TracksSource.open(path, target, block_size, func, "path")
    _check_length(func, "path", source.length, settings)
    control_blocks = None
    if isinstance(controls, (str, os.PathLike)):
        control = _TracksSource.open(controls, source.targets, block_size, func, "controls")
        _check_length(func, "controls", control.length, settings)
        control_blocks = control.blocks
    elif controls is not None:
        if len(source.targets) != 1:
            raise parameter_error(
                func, "controls", "a tracks file when several targets are chosen",
                "an array", "Pass a control tracks file, or choose one target.", described=True,
            )  # fmt: skip
        C = _projected(func, "controls", controls, control_one_hot, "control_one_hot")
        _check_length(func, "controls", C.shape[1], settings)
        control_blocks = _array_blocks(C)
    if source.rows == 0:
        return iter(())
    return _generate(source.blocks, control_blocks, source.targets, settings)
