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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._errors import parameter_error

if TYPE_CHECKING:
    import os

    import pandas

Sign = Literal["both", "positive", "negative"]

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
    scaled = (X - xmin).astype(np.float64) / bin_width
    return np.clip(np.floor(scaled), 0, n_bins - 1).astype(np.int64)


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
        return np.einsum("nlc,nlc->nl", X, S.astype(X.dtype))
    if X.ndim == 3:
        if (np.count_nonzero(X, axis=-1) > 1).any():
            raise parameter_error(
                func, one_hot_name, "the one-hot sequences for hypothetical contributions",
                None, "Pass the sequences the tracks were computed on to project them.",
            )  # fmt: skip
        return X.sum(axis=-1)
    return X


def _null_of(X: np.ndarray, max_length: int, n_bins: int) -> _Null | None:
    """The null of the (N, L) tracks ``X``; None when all values are equal (no seqlets)."""
    xmin, xmax = X.min(), X.max()
    width = _bin_range(xmin, xmax, n_bins)
    if width is None:
        return None
    counts = _histogram(X, xmin, width, n_bins)
    return _Null(xmin, width, _null_tables(counts, max_length))


def _fdr(
    p_value: np.ndarray, control_p: np.ndarray, n_windows: int, n_control_windows: int
) -> np.ndarray:
    """The empirical FDR of seqlets with p-values ``p_value`` against the control seqlets'
    ``control_p`` (see :func:`seqlets`)."""
    if not p_value.shape[0]:
        return np.zeros(0, dtype=np.float64)
    order = np.argsort(p_value, kind="stable")
    sorted_p = p_value[order]
    n_real = np.searchsorted(sorted_p, sorted_p, side="right")
    n_control = np.searchsorted(np.sort(control_p), sorted_p, side="right")
    raw = n_control * (n_windows / n_control_windows) / n_real
    q = np.minimum(np.minimum.accumulate(raw[::-1])[::-1], 1.0)
    fdr = np.empty_like(q)
    fdr[order] = q
    return fdr


def _signed_calls(
    X: np.ndarray,
    controls: np.ndarray | None,
    sign: int,
    threshold: float,
    min_length: int,
    max_length: int,
    flank: int,
    n_bins: int,
) -> Seqlets:
    """The seqlets of one sign of the (N, L) tracks (negative: the method on -X)."""
    Xs = X if sign > 0 else -X
    null = _null_of(Xs, max_length, n_bins)
    if null is None or X.shape[1] < min_length:
        return Seqlets.empty()
    ex, start, end, attribution, p_value = _call(
        Xs, null, threshold, min_length, max_length, flank, n_bins
    )
    fdr = np.full(ex.shape[0], np.nan)
    if controls is not None:
        Cs = controls if sign > 0 else -controls
        control_p = _call(Cs, null, threshold, min_length, max_length, 0, n_bins)[4]
        fdr = _fdr(
            p_value,
            control_p,
            X.shape[0] * (X.shape[1] - min_length + 1),
            Cs.shape[0] * max(Cs.shape[1] - min_length + 1, 1),
        )
    n = ex.shape[0]
    return Seqlets(
        example=ex,
        target=np.zeros(n, dtype=np.int64),
        start=start,
        end=end,
        sign=np.full(n, sign, dtype=np.int8),
        attribution=attribution if sign > 0 else -attribution,
        p_value=p_value,
        fdr=fdr,
    )


def _ordered(parts: list[Seqlets]) -> Seqlets:
    """The seqlets of ``parts`` in order of example, start and sign (positive first)."""
    merged = Seqlets.concat(parts)
    return merged.take(np.lexsort((-merged.sign, merged.start, merged.example)))


def seqlets(
    attributions: Any,
    one_hot: Any = None,
    *,
    threshold: float = 0.01,
    min_length: int = 4,
    max_length: int = 25,
    flank: int = 0,
    sign: Sign = "both",
    controls: Any = None,
    control_one_hot: Any = None,
    max_fdr: float | None = None,
    n_bins: int = 1000,
) -> Seqlets:
    """Call seqlets, the spans of high contribution, on tracks held in memory.

    Use this on an array; use :func:`iter_seqlets` to call them straight from a tracks file,
    block by block. The method is the recursive-seqlet method (see the module): p-values of
    binned span sums against the tracks' own distribution, a span kept when every inner span of
    at least ``min_length`` is below ``threshold``.

    Parameters
    ----------
    attributions : array of shape (N, L, 4) or (N, L)
        Contributions: hypothetical (with ``one_hot``), projected on the observed bases (zeros
        elsewhere), or already summed over the alphabet (N, L).
    one_hot : array of shape (N, L, 4), optional
        The sequences; (N, L, 4) contributions are projected on them, ``(attributions *
        one_hot).sum(-1)``. Needed for hypothetical contributions.
    threshold : float
        The p-value every inner span of a seqlet must be below (a ranking score, not an error
        rate; see ``controls`` for one).
    min_length, max_length : int
        The shortest and the longest seqlet, flanks excluded.
    flank : int
        Positions added on each side of every seqlet after calling (clipped to the sequence).
    sign : {"both", "positive", "negative"}
        Which seqlets: of high positive contributions (sign +1), of strongly negative ones
        (sign -1, called on the negated tracks with their own null), or both.
    controls : array of shape (M, L', 4) or (M, L'), optional
        Tracks of the same kind for sequences without the signal (attributions of
        dinucleotide-shuffled sequences or of background regions, same model, target and
        settings). Each seqlet then gets an empirical false-discovery rate: seqlets are called on
        the controls with the same bins, null and settings; for a seqlet with p-value ``p``,
        ``FDR(p) = (C(p) * W / W_c) / R(p)``, where ``C(p)`` and ``R(p)`` count the control and
        the real seqlets of its sign with a p-value at most ``p``, and ``W`` and ``W_c`` the
        windows of ``min_length`` in the tracks and in the controls. As in Benjamini–Hochberg,
        the reported rate is the smallest ``FDR(p')`` over ``p' >= p``, capped at 1.
    control_one_hot : array of shape (M, L', 4), optional
        The sequences of the controls, to project hypothetical control contributions.
    max_fdr : float, optional
        Keep only the seqlets whose false-discovery rate is at most this (needs ``controls``).
    n_bins : int
        The number of bins of the contributions.

    Returns
    -------
    Seqlets
        One row per seqlet, in order of example, start and sign; ``target`` is 0 and ``fdr``
        is NaN without controls.
    """
    threshold, min_length, max_length, flank, n_bins = _check_settings(
        _FUNC, threshold, min_length, max_length, flank, sign, n_bins, max_fdr
    )
    X = _projected(_FUNC, "attributions", attributions, one_hot, "one_hot")
    C = None
    if controls is not None:
        C = _projected(_FUNC, "controls", controls, control_one_hot, "control_one_hot")
    elif max_fdr is not None:
        raise parameter_error(
            _FUNC, "max_fdr", "None without controls", max_fdr,
            "Pass controls= (tracks of shuffled sequences) to estimate false-discovery rates.",
        )  # fmt: skip
    if X.shape[1] < max_length:
        raise parameter_error(
            _FUNC, "max_length", f"at most the sequence length {X.shape[1]}", max_length
        )
    signs = {"both": (1, -1), "positive": (1,), "negative": (-1,)}[sign]
    parts = [
        _signed_calls(X, C, s, threshold, min_length, max_length, flank, n_bins) for s in signs
    ]
    result = _ordered(parts)
    if max_fdr is not None:
        result = result.take(result.fdr <= max_fdr)
    return result


def iter_seqlets(
    path: str | os.PathLike[str],
    *,
    target: int | None = None,
    block_size: int = 1024,
    threshold: float = 0.01,
    min_length: int = 4,
    max_length: int = 25,
    flank: int = 0,
    sign: Sign = "both",
    controls: Any = None,
    control_one_hot: Any = None,
    max_fdr: float | None = None,
    n_bins: int = 1000,
) -> Iterator[Seqlets]:
    """Call seqlets on a tracks file block by block (see :func:`seqlets`)."""
    raise NotImplementedError
