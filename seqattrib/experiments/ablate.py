"""``ablate`` and ``tile_shuffle``: what windows of the sequences themselves contribute."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from .._validation import check_positive_int
from ..attribution.options import RunOptions, shared_docs
from ..engine import as_source
from . import edits
from .marginalize import EditMethod, run_edits, split_rows

__all__ = ["ablate", "tile_shuffle"]

_HOW = ("dinuc_shuffle", "shuffle", "N")


def _window_bases(
    windows: list[tuple[int, int]], n_shuffles: int, how: str
) -> Callable[[np.ndarray, int], np.ndarray]:
    """Bases: each sequence, then ``n_shuffles`` copies of it per window, the window replaced."""

    def build(x_nlc: np.ndarray, seed: int) -> np.ndarray:
        out = np.empty((len(x_nlc), 1 + len(windows) * n_shuffles, *x_nlc.shape[1:]), np.float32)
        for i, x in enumerate(x_nlc):
            out[i, 0] = x
            for w, (start, end) in enumerate(windows):
                rows = slice(1 + w * n_shuffles, 1 + (w + 1) * n_shuffles)
                out[i, rows] = edits.shuffled_window(x, start, end, n_shuffles, seed, how)
        return out

    return build


def _check_how(how: Any, n_shuffles: Any, func: str) -> int:
    if how not in _HOW:
        raise parameter_error(
            func, "how", "'dinuc_shuffle', 'shuffle' or 'N'", how,
            "'N' replaces the window with all-zero (N) columns.",
        )  # fmt: skip
    if n_shuffles is None:
        return 1 if how == "N" else 20
    count = check_positive_int(n_shuffles, "n_shuffles", func)
    if how == "N" and count != 1:
        raise parameter_error(
            func, "n_shuffles", "None or 1 when how='N' (every replacement is the same)",
            n_shuffles,
        )  # fmt: skip
    return count


def _run_windows(
    func: str,
    model: Any,
    X: Any,
    windows: list[tuple[int, int]] | None,
    window_args: tuple[Any, Any] | None,
    n_shuffles: Any,
    how: Any,
    random_state: Any,
    options: RunOptions,
    alphabet_axis: Any,
) -> tuple[np.ndarray, np.ndarray] | str:
    source = as_source(X, alphabet_axis, func)
    count = _check_how(how, n_shuffles, func)
    length = source.length
    if windows is None:
        assert window_args is not None
        size, stride = window_args
        size = check_positive_int(size, "window", func)
        if size > length:
            raise parameter_error(
                func, "window", f"at most the length of X ({length} bp)", size,
            )  # fmt: skip
        step = size if stride is None else check_positive_int(stride, "stride", func)
        windows = [(s, s + size) for s in range(0, length - size + 1, step)]
    method = EditMethod(
        func,
        source,
        ((),),
        1 + len(windows) * count,
        _window_bases(windows, count, how),
        {"windows": [list(w) for w in windows], "n_shuffles": count, "how": how},
        random_state,
    )
    predictions, squeeze = run_edits(method, model, options)
    if isinstance(predictions, str):
        return predictions
    rows = split_rows(predictions, squeeze, (1 + len(windows) * count,))
    before = rows[:, 0]
    after = rows[:, 1:].reshape(len(rows), len(windows), count, *rows.shape[2:])
    return before, after


@shared_docs
def ablate(
    model: Any,
    X: Any,
    *,
    start: int,
    end: int,
    n_shuffles: int | None = None,
    how: Literal["dinuc_shuffle", "shuffle", "N"] = "dinuc_shuffle",
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
    """The model's output on sequences before and after one window is shuffled or removed.

    Use this to test a region you already suspect (a motif instance, a peak summit): its
    shuffles keep the composition and remove the grammar. ``tile_shuffle`` does this for every
    window along the sequence.

    Parameters
    ----------
    [[model]]
    [[X]]
    start, end : int
        The window, 0-based, end exclusive.
    n_shuffles : int, optional
        Shuffles of the window per sequence (default 20; 1 for ``how="N"``).
    how : {"dinuc_shuffle", "shuffle", "N"}
        Dinucleotide-preserving shuffles of the window, mononucleotide shuffles, or N
        (all-zero) columns. A window's shuffles depend only on ``random_state``, the sequence's
        content and the window.
    [[target]]
    [[output_fn]]
    [[alphabet_axis]]
    random_state : int, numpy.random.Generator or None
        Seeds the shuffles.
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the predictions into this HDF5 file (dataset ``predictions`` of shape
        (n_sequences, [K,] 1 + n_shuffles): the sequence, then its shuffles) and return its path;
        a rerun with the same settings resumes it.
    [[overwrite]]
    [[shard]]

    Returns
    -------
    before : ndarray of float32, shape (n_sequences[, K])
    after : ndarray of float32, shape (n_sequences, n_shuffles[, K])
        With ``out``: the file's path.
    """
    func = "ablate"
    options = _options(func, locals())
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise parameter_error(func, name, "an int", value, error=TypeError)
    length = as_source(X, alphabet_axis, func).length
    if not 0 <= start < end <= length:
        raise parameter_error(
            func, "end" if 0 <= start < length else "start",
            f"a window with 0 <= start < end <= {length} (the length of X)", (start, end),
            "Positions are 0-based and end is exclusive, as in Python slices.", described=True,
        )  # fmt: skip
    result = _run_windows(
        func, model, X, [(int(start), int(end))], None, n_shuffles, how, random_state, options,
        alphabet_axis,
    )  # fmt: skip
    if isinstance(result, str):
        return result
    before, after = result
    return before, after[:, 0]


@shared_docs
def tile_shuffle(
    model: Any,
    X: Any,
    *,
    window: int,
    stride: int | None = None,
    n_shuffles: int | None = None,
    how: Literal["dinuc_shuffle", "shuffle", "N"] = "dinuc_shuffle",
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
    """Every window of the sequences shuffled (or removed) in turn: the effect per window.

    Use this to find which regions a prediction rests on at a resolution coarser than a base
    (CREsted's window shuffle; marginal footprints); ``ism`` gives single bases.

    Parameters
    ----------
    [[model]]
    [[X]]
    window : int
        Bases per window.
    stride : int, optional
        Bases between window starts (default: ``window``, windows side by side). Windows start
        at 0, stride, ... while they fit.
    n_shuffles : int, optional
        Shuffles per window and sequence (default 20; 1 for ``how="N"``).
    how : {"dinuc_shuffle", "shuffle", "N"}
        Dinucleotide-preserving shuffles, mononucleotide shuffles, or N (all-zero) columns. A
        window's shuffles depend only on ``random_state``, the sequence's content and the
        window.
    [[target]]
    [[output_fn]]
    [[alphabet_axis]]
    random_state : int, numpy.random.Generator or None
        Seeds the shuffles.
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the predictions into this HDF5 file (dataset ``predictions`` of shape
        (n_sequences, [K,] 1 + n_windows * n_shuffles): the sequence, then each window's
        shuffles) and return its path; a rerun with the same settings resumes it.
    [[overwrite]]
    [[shard]]

    Returns
    -------
    before : ndarray of float32, shape (n_sequences[, K])
    after : ndarray of float32, shape (n_sequences, n_windows, n_shuffles[, K])
        ``after.mean(axis=2) - before[:, None]`` is the effect of each window. With ``out``:
        the file's path.
    """
    func = "tile_shuffle"
    options = _options(func, locals())
    result = _run_windows(
        func, model, X, None, (window, stride), n_shuffles, how, random_state, options,
        alphabet_axis,
    )  # fmt: skip
    return result


def _options(func: str, arguments: dict[str, Any]) -> RunOptions:
    return RunOptions.check(
        func, target=arguments["target"], output_fn=arguments["output_fn"],
        alphabet_axis=arguments["alphabet_axis"], batch_size=arguments["batch_size"],
        max_cpu_sequences=arguments["max_cpu_sequences"], device=arguments["device"],
        verbose=arguments["verbose"], backend=arguments["backend"], out=arguments["out"],
        overwrite=arguments["overwrite"], regions=None, shard=arguments["shard"],
    )  # fmt: skip
