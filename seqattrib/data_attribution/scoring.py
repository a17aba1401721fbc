"""Scores of test examples against a training set, one block of training rows at a time.

A method hands a ``score_block(rows) -> (n_test_group, n_rows) float32`` for a group of test
examples; these functions stream the training blocks past it and keep only what is asked for:

- ``streamed_top_k``: the ``k`` best training examples of every test example, by a partial
  selection per block merged into the running best, never the whole (n_test, n_train) matrix.
  The order is the one of a stable sort of each full row: highest (or lowest) score first, ties
  broken by the lower training index.
- ``dense_scores``: every score, into an array or an HDF5 dataset (``scores_file``).

Host memory is the group's block of scores (``n_test_group x block rows``) plus the
``n_test_group x k`` best so far, whatever the training set's size.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._errors import parameter_error, refuse_existing
from .._optional import import_optional
from ..io.hdf5 import LIBVER
from .examples import checked_source

ScoreBlock = Callable[[slice], np.ndarray]
#: Test examples whose scores are computed together by default (``max_cpu_sequences``).
DEFAULT_GROUP = 1024


def check_k(k: Any, proponents: Any, n_train: int, func: str) -> int:
    """``k`` as an int in [1, n_train]; ``proponents`` a bool."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= int(k) <= n_train:
        raise parameter_error(
            func, "k", f"an integer in [1, {n_train}] (the number of training examples)", k
        )
    if not isinstance(proponents, bool):
        raise parameter_error(func, "proponents", "True or False", proponents, error=TypeError)
    return int(k)


def check_group(max_cpu_sequences: Any, func: str) -> int:
    """The number of test examples scored together: a positive int."""
    if (
        isinstance(max_cpu_sequences, bool)
        or not isinstance(max_cpu_sequences, numbers.Integral)
        or int(max_cpu_sequences) < 1
    ):
        raise parameter_error(
            func,
            "max_cpu_sequences",
            "a positive integer (test examples whose scores are held together)",
            max_cpu_sequences,
        )
    return int(max_cpu_sequences)


def test_groups(n_test: int, group: int) -> Iterator[slice]:
    """Consecutive groups of at most ``group`` test rows."""
    for start in range(0, n_test, group):
        yield slice(start, min(start + group, n_test))


def train_blocks(n_train: int, block_rows: int) -> Iterator[slice]:
    """The fixed grid of training rows the scores are computed in."""
    for start in range(0, n_train, block_rows):
        yield slice(start, min(start + block_rows, n_train))


def _block_best(key: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` smallest entries of each row of ``key``, smallest first, ties in
    column order (the first ``k`` of a stable argsort)."""
    n_rows, n_cols = key.shape
    if n_cols <= k:
        return np.argsort(key, axis=1, kind="stable")
    kth = np.partition(key, k - 1, axis=1)[:, k - 1 : k]
    mask = key <= kth  # at least k per row; more only where the k-th value is tied
    plain = mask.sum(axis=1) == k
    out = np.empty((n_rows, k), np.int64)
    if plain.any():
        columns = np.nonzero(mask[plain])[1].reshape(-1, k)
        order = np.argsort(np.take_along_axis(key[plain], columns, 1), axis=1, kind="stable")
        out[plain] = np.take_along_axis(columns, order, 1)
    for row in np.nonzero(~plain)[0]:
        out[row] = np.argsort(key[row], kind="stable")[:k]
    return out


def fixed_rows(product: Callable[[np.ndarray], np.ndarray], a: np.ndarray, rows: int) -> np.ndarray:
    """``product(a)`` computed on blocks of exactly ``rows`` rows of ``a`` (the last padded with
    copies of its first row): BLAS results of a row depend on the number of rows in its
    product, so a test example's scores then never depend on the other test examples."""
    parts = []
    for start in range(0, len(a), rows):
        block = a[start : start + rows]
        m = len(block)
        if m < rows:
            block = np.concatenate([block, np.repeat(block[:1], rows - m, axis=0)])
        parts.append(product(block)[:m])
    return np.concatenate(parts)


def streamed_top_k(
    score_block: ScoreBlock, blocks: Iterator[slice], n_group: int, k: int, proponents: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best training rows of each of ``n_group`` test rows over ``blocks`` (in
    increasing order): indices int64 (n_group, k) and their float32 scores."""
    best_index = np.empty((n_group, 0), np.int64)
    best_score = np.empty((n_group, 0), np.float32)
    sign = np.float32(-1.0 if proponents else 1.0)
    for rows in blocks:
        scores = score_block(rows)
        columns = _block_best(sign * scores, k)
        index = np.concatenate([best_index, columns + rows.start], axis=1)
        score = np.concatenate([best_score, np.take_along_axis(scores, columns, 1)], axis=1)
        # earlier blocks hold lower indices: a stable sort keeps them first among ties
        order = np.argsort(sign * score, axis=1, kind="stable")[:, :k]
        best_index = np.take_along_axis(index, order, 1)
        best_score = np.take_along_axis(score, order, 1)
    return best_index, best_score


def dense_scores(score_block: ScoreBlock, blocks: Iterator[slice], out: Any, rows: slice) -> None:
    """Write the scores of the test rows ``rows`` into ``out[rows, :]`` (an array or an HDF5
    dataset) block by block."""
    for train in blocks:
        out[rows, train] = score_block(train)


GroupScores = Callable[[Any, Any, int, str], Iterator[tuple[slice, ScoreBlock, Iterator[slice]]]]


def score_matrix(
    groups: GroupScores,
    X_test: Any,
    y_test: Any,
    n_train: int,
    options: dict[str, Any],
    attrs: dict[str, Any],
    func: str,
) -> Any:
    """``scores`` of TRAK and TracIn: every score of ``X_test``, group by group of test rows
    (``groups(source, y_test, group, func)``), into a new array or streamed to the HDF5 file
    ``options["out"]``; ``options`` also holds ``overwrite`` and ``max_cpu_sequences``."""
    target = check_scores_out(options["out"], options["overwrite"], func)
    group = check_group(options["max_cpu_sequences"], func)
    source = checked_source(X_test, "X_test", func)
    n_test = source.n_sequences
    if target is None:
        matrix = np.empty((n_test, n_train), np.float32)
        for rows, block, blocks in groups(source, y_test, group, func):
            dense_scores(block, blocks, matrix, rows)
        return matrix
    with scores_file(target, n_test, n_train, attrs) as dataset:
        for rows, block, blocks in groups(source, y_test, group, func):
            dense_scores(block, blocks, dataset, rows)
    return target


def best_scores(
    groups: GroupScores,
    X_test: Any,
    y_test: Any,
    n_train: int,
    k: Any,
    proponents: Any,
    max_cpu_sequences: Any,
    func: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``top_k`` of TRAK and TracIn: the ``k`` best training rows of each test row, streamed
    group by group of test rows and block by block of training rows."""
    k = check_k(k, proponents, n_train, func)
    group = check_group(max_cpu_sequences, func)
    source = checked_source(X_test, "X_test", func)
    indices = np.empty((source.n_sequences, k), np.int64)
    values = np.empty((source.n_sequences, k), np.float32)
    for rows, block, blocks in groups(source, y_test, group, func):
        n = rows.stop - rows.start
        indices[rows], values[rows] = streamed_top_k(block, blocks, n, k, proponents)
    return indices, values


def check_scores_out(out: Any, overwrite: Any, func: str) -> str | None:
    """The checked ``out`` of ``scores``: None or a new (or overwritable) file path."""
    if out is None:
        return None
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise parameter_error(func, "out", "None or a file path", out, error=TypeError)
    if not isinstance(overwrite, bool):
        raise parameter_error(func, "overwrite", "True or False", overwrite, error=TypeError)
    path = os.fspath(out)
    refuse_existing(func, "out", path, overwrite)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise parameter_error(
            func, "out", "a path in an existing folder", path, f"Create {directory} first."
        )
    return path


@contextmanager
def scores_file(path: str, n_test: int, n_train: int, attrs: dict[str, Any]) -> Iterator[Any]:
    """An HDF5 file with a ``scores`` dataset (n_test, n_train) float32, written under a
    temporary name and renamed to ``path`` when the block completes without error."""
    h5py = import_optional("h5py")
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with h5py.File(partial, "w", libver=LIBVER) as f:
            chunks = (max(1, min(n_test, 256)), max(1, min(n_train, 4096)))
            dataset = f.create_dataset(
                "scores", shape=(n_test, n_train), dtype=np.float32, chunks=chunks
            )
            for key, value in attrs.items():
                f.attrs[key] = value
            yield dataset
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
