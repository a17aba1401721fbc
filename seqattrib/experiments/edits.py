"""Motifs and the edits the in-silico experiments make to background sequences.

A motif is held as an (m, 4) float32 array in ``ACGT`` order: a one-hot column is a base, an
all-zero column (``N`` in a string) keeps the background's base there. Every function here works
on one sequence or on the host in the (length, 4) layout; the experiments turn edits into rows
of the engine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import parameter_error

#: Orientations of an inserted motif: as given, or its reverse complement.
ORIENTATIONS = ("+", "-")
_BASES = {"A": 0, "C": 1, "G": 2, "T": 3}


def as_motif(motif: Any, func: str, param: str = "motif") -> np.ndarray:
    """A motif as an (m, 4) float32 array with one-hot or all-zero (keep the background)
    columns.

    Parameters
    ----------
    motif : str or array
        A sequence (``ACGT``, either case; ``N`` keeps the background base); a one-hot array of
        shape (m, 4) or (4, m) (a leading axis of size 1 is dropped); or a position weight
        matrix of the same shapes (probabilities, counts or log-odds), of which the consensus
        (the highest-scoring base at each position) is inserted. A (4, 4) array is read as
        (m, 4).
    func, param : str
        The caller and the parameter, for messages.

    Returns
    -------
    array of shape (m, 4), float32
    """
    if isinstance(motif, str):
        return _from_string(motif, func, param)
    try:
        array = np.asarray(motif, dtype=np.float64)
    except (TypeError, ValueError):
        raise parameter_error(
            func, param, "a sequence string, a one-hot array or a position weight matrix", motif,
            error=TypeError,
        ) from None  # fmt: skip
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or 4 not in array.shape or min(array.shape) < 1:
        raise parameter_error(
            func,
            param,
            "a sequence string, or an array of shape (motif_length, 4) or (4, motif_length)",
            motif,
            "Pass e.g. 'GATAAG', or a one-hot or position weight matrix with 4 bases.",
        )
    if array.shape[1] != 4:
        array = array.T
    if not np.isfinite(array).all():
        raise parameter_error(func, param, "finite values", motif, "Replace NaN or inf entries.")
    if np.isin(array, (0.0, 1.0)).all() and (array.sum(axis=1) <= 1).all():
        return array.astype(np.float32)
    return np.eye(4, dtype=np.float32)[array.argmax(axis=1)]


def _from_string(motif: str, func: str, param: str) -> np.ndarray:
    text = motif.strip().upper()
    if not text:
        raise parameter_error(func, param, "a non-empty sequence", motif, "Pass e.g. 'GATAAG'.")
    bad = sorted(set(text) - set("ACGTN"))
    if bad:
        raise parameter_error(
            func,
            param,
            "a sequence of A, C, G, T and N",
            motif,
            f"Remove or replace the character {bad[0]!r} (N keeps the background base).",
        )
    columns = np.zeros((len(text), 4), dtype=np.float32)
    for i, base in enumerate(text):
        if base in _BASES:
            columns[i, _BASES[base]] = 1.0
    return columns


def reverse_complement(motif: np.ndarray) -> np.ndarray:
    """The reverse complement of an (m, 4) motif (or any (..., m, 4) one-hot array)."""
    return np.ascontiguousarray(motif[..., ::-1, ::-1])


def oriented(motif: np.ndarray, orientation: str) -> np.ndarray:
    """``motif`` on the ``"+"`` strand, or its reverse complement for ``"-"``."""
    return motif if orientation == "+" else reverse_complement(motif)


def centred_start(length: int, motif_length: int) -> int:
    """Where a motif (or an arrangement of motifs) of ``motif_length`` starts when its middle
    is the sequence's middle (tangermeme's default)."""
    return length // 2 - motif_length // 2


def check_start(start: Any, motif_length: int, length: int, func: str, param: str) -> int:
    """``start`` checked to place ``motif_length`` bases inside a sequence of ``length``."""
    if motif_length > length:
        raise parameter_error(
            func,
            "motif",
            f"at most as long as the backgrounds ({length} bp)",
            f"a motif of {motif_length} bp",
            "Use longer backgrounds or a shorter motif.",
            described=True,
        )
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
        raise parameter_error(func, param, "an int or None", start, error=TypeError)
    if not 0 <= start <= length - motif_length:
        raise parameter_error(
            func,
            param,
            f"between 0 and {length - motif_length} (the backgrounds are {length} bp, the "
            f"motif {motif_length} bp)",
            start,
            "Positions are 0-based starts of the motif; by default it is centred.",
        )
    return int(start)


def placement(motifs: Sequence[tuple[np.ndarray, int]], length: int) -> tuple[np.ndarray, ...]:
    """The edit that writes each (motif, start) into a sequence of ``length``, later ones over
    earlier ones: ``content`` (length, 4) and ``mask`` (length, 1), so that an edited sequence is
    ``x * (1 - mask) + content`` (``N`` columns of a motif keep the background)."""
    content = np.zeros((length, 4), dtype=np.float32)
    mask = np.zeros((length, 1), dtype=np.float32)
    for motif, start in motifs:
        span = slice(start, start + len(motif))
        written = motif.sum(axis=1, keepdims=True) > 0
        content[span] = np.where(written, motif, content[span])
        mask[span] = np.where(written, 1.0, mask[span])
    return content, mask


def insert(x_nlc: np.ndarray, motifs: Sequence[tuple[np.ndarray, int]]) -> np.ndarray:
    """Sequences (..., length, 4) with each (motif, start) written in (a copy)."""
    content, mask = placement(motifs, x_nlc.shape[-2])
    return (x_nlc * (1.0 - mask) + content).astype(np.float32)


def window_rng(seed: int, x_nlc: np.ndarray, start: int, end: int) -> np.random.Generator:
    """A generator that depends only on ``seed``, the sequence (an (L, 4) array) and the window
    [start, end): a window's shuffles are the same in any subset, order or shard of X."""
    data = np.ascontiguousarray(x_nlc, dtype=np.float32).tobytes()
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "little")
    return np.random.default_rng([seed, digest, start, end])


def shuffled_window(
    x_nlc: np.ndarray, start: int, end: int, n_shuffles: int, seed: int, how: str
) -> np.ndarray:
    """``n_shuffles`` copies of one sequence with the window [start, end) replaced.

    Parameters
    ----------
    x_nlc : array of shape (length, 4)
    start, end : int
        The window, 0-based, end exclusive.
    n_shuffles : int
    seed : int
    how : {"dinuc_shuffle", "shuffle", "N"}
        Dinucleotide-preserving shuffles of the window, mononucleotide shuffles, or all-zero
        (``N``) columns.

    Returns
    -------
    array of shape (n_shuffles, length, 4), float32
    """
    from ..attribution.baselines import dinucleotide_shuffle, shuffle

    rows = np.repeat(x_nlc[None].astype(np.float32), n_shuffles, axis=0)
    if how == "N":
        rows[:, start:end] = 0.0
        return rows
    rng = window_rng(seed, x_nlc, start, end)
    draw = dinucleotide_shuffle if how == "dinuc_shuffle" else shuffle
    rows[:, start:end] = draw(x_nlc[start:end], n_shuffles, rng)
    return rows
