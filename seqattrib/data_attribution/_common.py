"""Pieces shared by the data-attribution methods: checked inputs, labels and gradient batches."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..backends import Backend
from ..engine import SequenceSource, as_source
from ..engine.outputs import Head

#: Rows per host-side block of products and input checks.
HOST_BLOCK = 8192
#: batch_size="auto": one batch of flattened float32 gradients within this many bytes...
AUTO_BYTES = 64 * 2**20
#: ... and between these many rows (a 6.7k-parameter CNN on 200 bp, one CPU thread, ran fastest
#: at 128 rows, about 1.1x slower at 64 and at 256; peak memory grows with the rows).
AUTO_MIN_ROWS, AUTO_MAX_ROWS = 8, 128


@dataclass
class Labels:
    values: np.ndarray
    dtype: str  # backend dtype of the device copy


@dataclass(frozen=True)
class GradientPlan:
    """What ``fit`` settles for every later call: the parameters traced and the batch size."""

    names: list[str]  # trainable parameters
    n_params: int
    rows: int  # examples per device batch


def gradient_plan(
    backend: Backend, model: Any, batch_size: int | None, func: str, method: str
) -> GradientPlan:
    """The trainable parameters (read outside the session: the torch session switches
    ``requires_grad`` off) and the batch size (``None``, i.e. "auto", depends on their number).
    """
    params = backend.trainable_parameters(model)
    if not params:
        raise parameter_error(
            func,
            "model",
            "a model with trainable parameters",
            "a model without any",
            f"Unfreeze the parameters whose training {method} should trace.",
            described=True,
        )
    n_params = sum(int(np.prod(shape)) for _, shape in params)
    rows = batch_size or min(max(AUTO_BYTES // (4 * n_params), AUTO_MIN_ROWS), AUTO_MAX_ROWS)
    return GradientPlan([name for name, _ in params], n_params, rows)


def checked_source(X: Any, param: str, func: str) -> SequenceSource:
    """Validate X (named ``param`` in errors) and check every sequence is one-hot-like."""
    try:
        source = as_source(X, None, func)
        for start in range(0, source.n_sequences, HOST_BLOCK):
            source.read(start, start + HOST_BLOCK)
    except (ValueError, TypeError) as exc:
        message = str(exc).replace("The 'X' parameter", f"The {param!r} parameter", 1)
        raise type(exc)(message) from exc
    return source


def n_outputs(backend: Backend, model: Any, source: SequenceSource) -> int:
    """Outputs of the model (one forward pass of one sequence; inside a session)."""
    return int(backend.forward(model, backend.asarray(source.read(0, 1)), Head()).shape[1])


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
    """Integer class labels of shape (n,), each in [0, n_outputs); ``setting`` names the option
    that asks for them (e.g. "loss='cross_entropy'")."""
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
    return Labels(values.astype(np.int64), "int64")


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
