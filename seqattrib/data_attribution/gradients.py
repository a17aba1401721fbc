"""Per-example gradients in device batches: the backend data attribution needs, the parameters
traced, the one ``batch_size="auto"`` rule, and the batches themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from .._errors import parameter_error
from ..backends import Backend, ParameterGradients, capability, get_backend
from ..engine import SequenceSource
from ..engine.outputs import Head
from .examples import Labels
from .outputs import Tensor
from .selection import select_parameters

#: batch_size="auto": one batch of flattened float32 per-example gradients within this many
#: bytes...
AUTO_BYTES = 64 * 2**20
#: ... and between these many rows: a 6.7k-parameter CNN on 200 bp, one CPU thread, ran fastest
#: at 128 rows, about 1.1x slower at 64 and at 256; peak memory grows with the rows.
AUTO_MIN_ROWS, AUTO_MAX_ROWS = 8, 128
#: Rows of a pass that traces no parameters (forward passes and d loss / d outputs only:
#: TracIn's layer="last"), which holds no per-example gradients of the parameters.
AUTO_FORWARD_ROWS = 256


class ParameterBackend(Backend, ParameterGradients, Protocol):
    """A backend with the parameter-gradients capability (both of ours)."""


def parameter_backend(model: Any, func: str) -> ParameterBackend:
    """The backend of ``model``, or a TypeError when it lacks ``ParameterGradients``."""
    backend = get_backend(model)
    capability(backend, ParameterGradients, func)  # type: ignore[type-abstract]  # a Protocol
    return cast(ParameterBackend, backend)


def auto_batch_size(n_params: int) -> int:
    """Examples per device batch for ``batch_size="auto"``, the one rule of TracIn and TRAK.

    A batch of per-example gradients holds ``4 * n_params`` bytes per example: as many
    examples as keep it within ``AUTO_BYTES``, clamped to ``[AUTO_MIN_ROWS, AUTO_MAX_ROWS]``
    (the measured best on a CPU; at least a few rows so that large models still batch). A pass
    that traces no parameters (``n_params=0``) holds only activations and outputs per example:
    ``AUTO_FORWARD_ROWS``.
    """
    if n_params == 0:
        return AUTO_FORWARD_ROWS
    return min(max(AUTO_BYTES // (4 * n_params), AUTO_MIN_ROWS), AUTO_MAX_ROWS)


@dataclass(frozen=True)
class GradientPlan:
    """What ``fit`` settles for every later call: the parameters traced and the batch size."""

    names: list[str]  # trainable parameters traced
    n_params: int
    rows: int  # examples per device batch


def gradient_plan(
    backend: ParameterBackend,
    model: Any,
    batch_size: int | None,
    func: str,
    method: str,
    *,
    traced: bool = True,
    parameters: Any = None,
) -> GradientPlan:
    """The trainable parameters traced (``parameters``: a selection for
    ``selection.select_parameters``, None for all; read outside the session: the torch session
    switches ``requires_grad`` off; none when ``traced`` is False) and the batch size (``None``,
    i.e. "auto": ``auto_batch_size`` of their number).
    """
    if not traced:
        return GradientPlan([], 0, batch_size or auto_batch_size(0))
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
    names = [name for name, _ in params]
    if parameters is not None:
        names = select_parameters(backend, model, parameters, func)
    shapes = dict(params)
    n_params = sum(int(np.prod(shapes[name])) for name in names)
    return GradientPlan(names, n_params, batch_size or auto_batch_size(n_params))


def device_batches(
    backend: ParameterBackend,
    source: SequenceSource,
    labels: Labels,
    rows: int,
    *,
    pad: bool = False,
) -> Iterator[tuple[int, int, Tensor, Tensor]]:
    """``(start, stop, x, targets)`` on the device, ``rows`` examples at a time.

    ``pad``: the last batch is filled up to ``rows`` with copies of its first example, so that
    every batch has the same shape (which decides the rounding); rows past ``stop - start``
    are the copies.
    """
    for start in range(0, source.n_sequences, rows):
        stop = min(start + rows, source.n_sequences)
        x, y = source.read(start, stop), np.asarray(labels.values[start:stop], labels.dtype)
        if pad and stop - start < rows:
            fill = rows - (stop - start)
            x = np.concatenate([x, np.repeat(x[:1], fill, axis=0)])
            y = np.concatenate([y, np.repeat(y[:1], fill, axis=0)])
        x_device = backend.asarray(x)
        yield start, stop, x_device, labels.targets(backend, backend.asarray(y, labels.dtype))


@dataclass(frozen=True)
class Rows:
    """Which examples a pass computes, for its errors: the function, the parameter that holds
    the examples ("X_train", "X_test"), the checkpoint (its index in ``checkpoints``) and what
    ``fn`` is ("loss", "output function")."""

    func: str
    param: str
    checkpoint: int
    fn: str


def non_finite(rows: Rows, row: int, what: str, more: int) -> ValueError:
    """The one-line error for a NaN or inf in what example ``row`` gives at a checkpoint."""
    return cast(
        ValueError,
        parameter_error(
            rows.func,
            "model",
            "a model with finite outputs, losses and gradients at every checkpoint",
            f"NaN or inf {what} for sequence {row} of {rows.param} at checkpoints"
            f"[{rows.checkpoint}]" + (f" (and {more} more of its batch)" if more else ""),
            "Check the model with that checkpoint on that sequence (a diverged checkpoint, a "
            "log of zero, an overflow), or leave the sequence out.",
            described=True,
        ),
    )


def _bad_rows(values: np.ndarray) -> np.ndarray:
    """Which rows of host ``values`` (one per example) hold a NaN or inf."""
    return np.asarray(~np.isfinite(values.reshape(len(values), -1)).all(axis=1), dtype=bool)


def check_finite(values: np.ndarray, start: int, rows: Rows, what: str) -> None:
    """Refuse host ``values`` (one row per example from ``start``) with a NaN or inf."""
    bad = _bad_rows(values)
    if bad.any():
        raise non_finite(rows, start + int(np.argmax(bad)), what, int(bad.sum()) - 1)


def _check_gradients(
    backend: ParameterBackend,
    model: Any,
    fn: Callable[[Any, Any], Any],
    batch: tuple[int, int, Tensor, Tensor],
    grads: Tensor,
    rows: Rows,
    head: Head,
) -> None:
    """Refuse a batch whose gradients hold a NaN or inf (one sum per example crosses to the
    host), naming its first such example and whether its output or its ``fn`` value (a loss)
    is already not finite."""
    start, stop, x, y = batch
    n = stop - start
    if np.isfinite(backend.to_numpy(backend.sum(grads, axis=(1,)))[:n]).all():
        return
    bad = _bad_rows(backend.to_numpy(grads)[:n])
    if not bad.any():
        return  # finite gradients whose sum overflowed
    outputs = backend.forward(model, x, head)
    out_bad = _bad_rows(backend.to_numpy(outputs)[:n])
    fn_bad = _bad_rows(np.asarray(backend.to_numpy(fn(outputs, y)), np.float64)[:n])
    either = bad | out_bad | fn_bad
    first = int(np.argmax(either))
    if out_bad[first]:
        what = "model outputs"
    elif fn_bad[first]:
        what = rows.fn
    else:
        what = f"gradients of the {rows.fn}"
    raise non_finite(rows, start + first, what, int(either.sum()) - 1)


def gradient_batches(
    backend: ParameterBackend,
    model: Any,
    fn: Callable[[Any, Any], Any],
    source: SequenceSource,
    labels: Labels,
    plan: GradientPlan,
    rows: Rows,
    *,
    pad: bool = False,
    head: Head | None = None,
) -> Iterator[tuple[int, int, Tensor, Tensor]]:
    """``(start, stop, x, gradients)``: per-example gradients of ``fn`` (a loss or model
    output function, of the outputs ``head`` gives) with respect to the plan's parameters,
    (rows, n_params) on the device, batch by batch (``pad`` as for ``device_batches``). A NaN
    or inf gradient is an error naming the example (``rows``) and whether its output or ``fn``
    value is not finite."""
    head = Head() if head is None else head
    for batch in device_batches(backend, source, labels, plan.rows, pad=pad):
        start, stop, x, y = batch
        grads = backend.per_example_gradients(model, x, y, fn, plan.names, head)
        _check_gradients(backend, model, fn, batch, grads, rows, head)
        yield start, stop, x, grads
