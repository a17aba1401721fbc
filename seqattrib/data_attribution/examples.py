"""The examples data attribution scores: checked sequences, labels and the targets they give the
losses, and the ranking of training examples (``top_k``)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..backends import Backend
from ..engine import SequenceSource, as_source
from ..engine.outputs import Head
from .outputs import Ops, Tensor

#: Rows per host-side block of products and input checks.
HOST_BLOCK = 8192


@dataclass(frozen=True)
class Labels:
    """Checked labels of the examples, one per sequence.

    ``values``: host array, ``dtype``: the dtype of their device copy; ``depth``: the number of
    classes when they are class labels that a built-in loss or output function takes as
    one-hot rows (``outputs``), else None.
    """

    values: np.ndarray
    dtype: str
    depth: int | None = None

    def targets(self, ops: Ops, values: Tensor) -> Tensor:
        """What the losses receive for ``values`` (rows of ``self.values``, on a backend's
        device or on the host with ``outputs.NUMPY``): one-hot rows, or the values."""
        return values if self.depth is None else ops.one_hot(values, self.depth)


@contextmanager
def named(param: str) -> Iterator[None]:
    """Errors about the sequences name the parameter that holds them (``X_train``...)."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        message = str(exc).replace("The 'X' parameter", f"The {param!r} parameter", 1)
        raise type(exc)(message) from exc


def checked_source(X: Any, param: str, func: str, *, scan: bool = True) -> SequenceSource:
    """Validate X (named ``param`` in errors) and, with ``scan``, check every sequence is
    one-hot-like (without: each is checked when it is read)."""
    with named(param):
        source = as_source(X, None, func)
        if scan:
            for start in range(0, source.n_sequences, HOST_BLOCK):
                source.read(start, start + HOST_BLOCK)
    return source


def n_outputs(
    backend: Backend, model: Any, source: SequenceSource, head: Head | None = None
) -> int:
    """Outputs of the model after ``head`` (one forward pass of one sequence; inside a
    session)."""
    x = backend.asarray(source.read(0, 1))
    return int(backend.forward(model, x, Head() if head is None else head).shape[1])


def label_array(y: Any, n: int, param: str, func: str) -> np.ndarray:
    """``y`` as an array of numeric, finite labels, one per sequence (checks every method
    shares; what the labels must be for a loss or task is checked by the method)."""
    try:
        values = np.asarray(y)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise parameter_error(func, param, "an array", type(y).__name__, error=TypeError) from exc
    if values.ndim == 0 or len(values) != n:
        raise parameter_error(
            func,
            param,
            f"one label per sequence ({n} of them)",
            f"{0 if values.ndim == 0 else len(values)} labels",
            "Pass the labels of the same sequences, in the same order.",
            described=True,
        )
    if values.dtype.kind not in "biuf":
        raise parameter_error(
            func, param, "numeric labels", f"dtype {values.dtype}", error=TypeError, described=True
        )
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        i = int(np.argwhere(~np.isfinite(values))[0][0])
        raise parameter_error(
            func,
            param,
            "finite",
            f"{values.reshape(n, -1)[i].tolist()!r} for sequence {i}",
            described=True,
        )
    return values


def class_labels(values: np.ndarray, n_outputs: int, setting: str, param: str, func: str) -> Labels:
    """Integer class labels of shape (n,), each in [0, n_outputs), taken as one-hot rows;
    ``setting`` names the option that asks for them (e.g. "loss='cross_entropy'")."""
    if values.dtype.kind not in "iu" or values.ndim != 1:
        raise parameter_error(
            func,
            param,
            f"integer class labels of shape (n,) for {setting}",
            values,
            "Pass class indices (not one-hot rows or floats), e.g. y.argmax(1).astype(int).",
        )
    bad = (values < 0) | (values >= n_outputs)
    if bad.any():
        i = int(np.argmax(bad))
        raise parameter_error(
            func,
            param,
            f"class labels in [0, {n_outputs}) (the model has {n_outputs} outputs)",
            f"the label {values[i].item()!r} for sequence {i}",
            described=True,
        )
    return Labels(values.astype(np.int64), "int64", n_outputs)


def ranked(
    score: Callable[[], np.ndarray], n_train: int, k: Any, proponents: Any, func: str
) -> tuple[np.ndarray, np.ndarray]:
    """``top_k`` of TracIn and TRAK: check ``k`` and ``proponents``, then the ``k`` highest
    (or lowest, most negative first) entries of each row of ``score()`` and their columns."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= int(k) <= n_train:
        raise parameter_error(
            func, "k", f"an integer in [1, {n_train}] (the number of training examples)", k
        )
    if not isinstance(proponents, bool):
        raise parameter_error(func, "proponents", "True or False", proponents, error=TypeError)
    scores = score()
    order = np.argsort(-scores if proponents else scores, axis=1, kind="stable")[:, : int(k)]
    return order.astype(np.int64), np.take_along_axis(scores, order, axis=1)
