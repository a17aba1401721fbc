"""``space``: two or more motifs at each distance and orientation (spacing and cooperativity)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from ..attribution.options import RunOptions, shared_docs
from . import edits
from .marginalize import (
    EditMethod,
    background_shuffles,
    background_source,
    check_shuffles,
    run_edits,
    split_rows,
)

__all__ = ["space"]


def _distances(distances: Any, n_motifs: int, func: str) -> np.ndarray:
    """(S, n_motifs - 1) gaps: an int or a list of ints (every pair the same gap), or rows."""
    array = np.asarray(distances)
    if array.ndim == 0:
        array = array[None]
    if array.ndim == 1:
        array = np.repeat(array[:, None], n_motifs - 1, axis=1)
    if (
        array.ndim != 2
        or array.shape[1] != n_motifs - 1
        or len(array) == 0
        or array.dtype.kind not in "iu"
    ):
        raise parameter_error(
            func,
            "distances",
            f"an int, a list of ints, or rows of {n_motifs - 1} ints (one gap per pair of "
            "adjacent motifs)",
            distances,
            "A distance is the number of bases between one motif's end and the next one's start.",
        )
    if (array < 0).any():
        raise parameter_error(
            func, "distances", "non-negative gaps between motifs", distances,
            "Overlapping motifs are not a spacing; start at 0.",
        )  # fmt: skip
    return array.astype(np.int64)


def _orientations(orientations: Any, n_motifs: int, func: str) -> list[str]:
    """One string of '+'/'-' per motif for each arrangement."""
    if orientations == "all":
        return ["".join(o) for o in itertools.product("+-", repeat=n_motifs)]
    given = [orientations] if isinstance(orientations, str) else list(orientations)
    if not given or any(
        not isinstance(o, str) or len(o) != n_motifs or set(o) - set("+-") for o in given
    ):
        raise parameter_error(
            func,
            "orientations",
            f"'all' or strings of {n_motifs} characters '+' or '-' (one per motif)",
            orientations,
            "Pass e.g. ['++', '+-'] ('-': the reverse complement).",
        )
    return given


@shared_docs
def space(
    model: Any,
    backgrounds: Any,
    motifs: Sequence[Any],
    *,
    distances: Any,
    orientations: str | Sequence[str] = "all",
    position: int | None = None,
    n_shuffles: int | None = None,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    alphabet_axis: int | None = None,
    random_state: int | np.random.Generator | None = 0,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    shard: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray] | str:
    """The model's output on backgrounds with motifs inserted at each distance and orientation.

    Use this for spacing and cooperativity: how the effect of two (or more) motifs together
    depends on the gap between them and on their strands. Compare ``after - before`` with the
    sum of each motif's own effect (``marginalize``) to see cooperativity.

    Parameters
    ----------
    [[model]]
    backgrounds : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot background sequences (numpy array, memmap or h5py dataset, read in pieces).
    motifs : sequence of str or array
        Two or more motifs, each as ``marginalize`` takes one, inserted left to right.
    distances : int, sequence of int, or array of shape (n_distances, n_motifs - 1)
        Gaps in bases between one motif's end and the next one's start: each int is the same
        gap between every adjacent pair; rows give one gap per pair.
    orientations : "all", str or sequence of str
        One character per motif, ``"+"`` as given or ``"-"`` its reverse complement (e.g.
        ``["++", "+-"]``); ``"all"``: every combination.
    position : int, optional
        0-based start of the first motif; default: each arrangement centred on the backgrounds.
    n_shuffles : int, optional
        Use ``n_shuffles`` dinucleotide shuffles of each background instead of the background
        itself (a sequence's shuffles depend only on ``random_state`` and its content).
    [[target]]
    [[output_fn]]
    [[alphabet_axis]]
    random_state : int, numpy.random.Generator or None
        Seeds the background shuffles.
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the predictions into this HDF5 file (dataset ``predictions`` of shape
        (n_sequences, [K,] rows), rows ordered as the background then each orientation's
        distances, per shuffle) and return its path; a rerun with the same settings resumes it.
    [[overwrite]]
    [[shard]]

    Returns
    -------
    before : ndarray of float32, shape (n_sequences[, n_shuffles][, K])
        The backgrounds' outputs (K: a list or None target).
    after : ndarray of float32, shape (n_sequences[, n_shuffles], n_orientations, n_distances[, K])
        With the motifs inserted; ``after - before[..., None, None, :]`` is the spacing curve of
        each orientation and target. With ``out``: the file's path.
    """
    name = "space"
    options = RunOptions.check(
        name, target=target, output_fn=output_fn, alphabet_axis=alphabet_axis,
        batch_size=batch_size, max_cpu_sequences=max_cpu_sequences, device=device,
        verbose=verbose, backend=backend, out=out, overwrite=overwrite, regions=None,
        shard=shard,
    )  # fmt: skip
    source = background_source(backgrounds, alphabet_axis, name)
    shuffles = check_shuffles(n_shuffles, name)
    if isinstance(motifs, str) or len(motifs) < 2:
        raise parameter_error(
            name, "motifs", "a list of two or more motifs", motifs,
            "Use marginalize for one motif.",
        )  # fmt: skip
    parsed = [edits.as_motif(m, name, f"motifs[{i}]") for i, m in enumerate(motifs)]
    gaps = _distances(distances, len(parsed), name)
    strands = _orientations(orientations, len(parsed), name)
    length = source.length
    widths = [len(m) for m in parsed]
    arrangements: list[tuple[tuple[np.ndarray, int], ...]] = [()]
    for strand in strands:
        for row in gaps:
            span = sum(widths) + int(row.sum())
            if span > length:
                raise parameter_error(
                    name,
                    "distances",
                    f"gaps that fit the backgrounds ({length} bp)",
                    f"{row.tolist()}, which with the motifs spans {span} bp",
                    "Use smaller distances or longer backgrounds.",
                    described=True,
                )
            start = edits.centred_start(length, span) if position is None else position
            edits.check_start(start, span, length, name, "position")
            placed = []
            for motif, strand_of, gap in zip(parsed, strand, [*row.tolist(), 0], strict=True):
                placed.append((edits.oriented(motif, strand_of), start))
                start += len(motif) + gap
            arrangements.append(tuple(placed))
    method = EditMethod(
        name,
        source,
        tuple(arrangements),
        shuffles or 1,
        None if shuffles is None else background_shuffles(shuffles),
        {"n_shuffles": shuffles},
        random_state,
    )
    predictions, squeeze = run_edits(method, model, options)
    if isinstance(predictions, str):
        return predictions
    rows = split_rows(predictions, squeeze, (shuffles or 1, len(arrangements)))
    before = rows[:, :, 0]
    after = rows[:, :, 1:].reshape(
        len(rows), shuffles or 1, len(strands), len(gaps), *rows.shape[3:]
    )
    if shuffles is None:
        return before[:, 0], after[:, 0]
    return before, after
