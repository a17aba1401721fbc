"""Per-base scores from attribution tracks."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import parameter_error
from ..engine.source import infer_alphabet_axis


def project(attributions: Any, X: Any, *, alphabet_axis: int | None = None) -> np.ndarray:
    """One score per position: attributions times the one-hot input, summed over the bases.

    Use this for browser tracks and "top base" summaries; keep the full (L, 4) tracks (or the
    hypothetical scores) for logos and TF-MoDISco.

    Parameters
    ----------
    attributions : array of shape (n_sequences, [K,] length, 4) or (n_sequences, [K,] 4, length)
        In the layout of X.
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in X, one of its last two: -1 for (n_sequences, length, 4), -2
        for (n_sequences, 4, length); inferred when exactly one of them has size 4.

    Returns
    -------
    ndarray of shape (n_sequences, [K,] length)
    """
    X = np.asarray(X, dtype=np.float32)
    attributions = np.asarray(attributions, dtype=np.float32)
    axis = infer_alphabet_axis(X.shape, alphabet_axis, "project")
    if attributions.ndim == 4:  # a target axis after the sequences
        X = X[:, None]
        axis = axis if axis == -1 else 2
    if attributions.shape[-2:] != X.shape[-2:] or attributions.shape[0] != X.shape[0]:
        raise parameter_error(
            "project",
            "attributions",
            f"an array matching X of shape {X.shape} (with an optional target axis)",
            f"shape {attributions.shape}",
            described=True,
        )
    return (attributions * X).sum(axis=axis)
