"""One-hot encoding and decoding of DNA (alphabet ``ACGT`` in that order, ``N`` = zero column)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._errors import parameter_error

ALPHABET = "ACGT"

LOOKUP = np.full(256, 255, dtype=np.uint8)
for _code, _base in enumerate(ALPHABET):
    LOOKUP[ord(_base)] = _code
    LOOKUP[ord(_base.lower())] = _code
LOOKUP[ord("N")] = 4
LOOKUP[ord("n")] = 4
_EYE = np.vstack([np.eye(4), np.zeros((1, 4))])


def _codes(seq: str, index: int) -> np.ndarray:
    raw = seq.encode("latin-1", errors="replace")
    codes = LOOKUP[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(codes == 255)
    if bad.size:
        pos = int(bad[0])
        raise parameter_error(
            "one_hot",
            "seqs",
            "DNA made of A, C, G, T or N (either case)",
            f"the character {seq[pos]!r} at position {pos} of sequence {index}",
            "Replace other IUPAC codes by N, or remove the sequence.",
            described=True,
        )
    return codes


def one_hot(
    seqs: str | Iterable[str],
    *,
    layout: Literal["NLC", "NCL"] = "NLC",
    dtype: DTypeLike = np.float32,
) -> np.ndarray:
    """One-hot encode DNA sequences of equal length.

    Use this to turn strings into the arrays every seqattrib method takes.

    Parameters
    ----------
    seqs : str or iterable of str
        Sequences of equal length over ``ACGTN`` (either case; soft-masked lowercase is fine).
        ``N`` becomes an all-zero column.
    layout : {"NLC", "NCL"}
        ``"NLC"`` gives shape (n_sequences, length, 4) (Keras/TF habit), ``"NCL"`` gives
        (n_sequences, 4, length) (PyTorch habit).
    dtype : numpy dtype
        float32 by default; int8 saves memory and is cast on the device.

    Returns
    -------
    ndarray of shape (n_sequences, length, 4) or (n_sequences, 4, length)
    """
    if layout not in ("NLC", "NCL"):
        raise parameter_error("one_hot", "layout", "'NLC' or 'NCL'", layout)
    if isinstance(seqs, (str, bytes)):
        seqs = [seqs.decode() if isinstance(seqs, bytes) else seqs]
    seqs = list(seqs)
    if not seqs:
        raise parameter_error("one_hot", "seqs", "a non-empty list of sequences", seqs)
    for i, s in enumerate(seqs):
        if not isinstance(s, str):
            raise parameter_error(
                "one_hot",
                "seqs",
                "strings",
                f"{type(s).__name__} at index {i}",
                described=True,
                error=TypeError,
            )
    lengths = {len(s) for s in seqs}
    if len(lengths) != 1:
        first = len(seqs[0])
        odd = next(i for i, s in enumerate(seqs) if len(s) != first)
        raise parameter_error(
            "one_hot",
            "seqs",
            "sequences of one length",
            f"length {first} for sequence 0 but {len(seqs[odd])} for sequence {odd}",
            "Cut or pad the sequences to a common length (pad with N).",
            described=True,
        )
    codes = np.stack([_codes(s, i) for i, s in enumerate(seqs)])
    X = _EYE.astype(_check_dtype(dtype))[codes]
    if layout == "NCL":
        X = np.ascontiguousarray(X.transpose(0, 2, 1))
    return X


def _check_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    """A numeric NumPy dtype (float, integer or bool), or the template error naming ``dtype``."""
    try:
        checked = np.dtype(dtype)
    except TypeError as exc:
        raise _dtype_error(dtype) from exc
    if checked.kind not in "fiub":
        raise _dtype_error(dtype)
    return checked


def _dtype_error(dtype: object) -> Exception:
    return parameter_error(
        "one_hot",
        "dtype",
        "a real numeric NumPy dtype",
        dtype,
        "Pass e.g. dtype=np.float32 (the default) or dtype=np.int8.",
        error=TypeError,
    )


def decode(X: ArrayLike, *, alphabet_axis: int | None = None) -> list[str]:
    """Turn one-hot arrays back into strings.

    Parameters
    ----------
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        A position whose largest value is below 0.5 (an all-zero or soft column) decodes to ``N``.
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in X, one of its last two: -1 for (..., length, 4), -2 for
        (..., 4, length); inferred when exactly one of them has size 4.

    Returns
    -------
    list of str
    """
    from .._validation import check_alphabet_axis
    from ..engine.source import infer_alphabet_axis

    arr = np.asarray(X)
    given = check_alphabet_axis(alphabet_axis, arr.ndim, "decode")
    if arr.ndim == 2:
        arr = arr[None]
    axis = infer_alphabet_axis(arr.shape, given, "decode")
    nlc = arr if axis == -1 else arr.transpose(0, 2, 1)
    idx = np.argmax(nlc, axis=-1)
    idx[np.max(nlc, axis=-1) < 0.5] = 4
    letters = np.frombuffer(b"ACGTN", dtype=np.uint8)[idx]
    return [row.tobytes().decode("ascii") for row in letters]
