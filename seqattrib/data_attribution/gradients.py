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
) -> GradientPlan:
    """The trainable parameters (read outside the session: the torch session switches
    ``requires_grad`` off; none when ``traced`` is False) and the batch size (``None``, i.e.
    "auto": ``auto_batch_size`` of their number).
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
    n_params = sum(int(np.prod(shape)) for _, shape in params)
    return GradientPlan(
        [name for name, _ in params], n_params, batch_size or auto_batch_size(n_params)
    )


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
        x, y = source.read(start, stop), labels.values[start:stop]
        if pad and stop - start < rows:
            fill = rows - (stop - start)
            x = np.concatenate([x, np.repeat(x[:1], fill, axis=0)])
            y = np.concatenate([y, np.repeat(y[:1], fill, axis=0)])
        x_device = backend.asarray(x)
        yield start, stop, x_device, labels.targets(backend, backend.asarray(y, labels.dtype))


def gradient_batches(
    backend: ParameterBackend,
    model: Any,
    fn: Callable[[Any, Any], Any],
    source: SequenceSource,
    labels: Labels,
    plan: GradientPlan,
    *,
    pad: bool = False,
) -> Iterator[tuple[int, int, Tensor, Tensor]]:
    """``(start, stop, x, gradients)``: per-example gradients of ``fn`` (a loss or model
    output function) with respect to the plan's parameters, (rows, n_params) on the device,
    batch by batch (``pad`` as for ``device_batches``)."""
    for start, stop, x, y in device_batches(backend, source, labels, plan.rows, pad=pad):
        yield start, stop, x, backend.per_example_gradients(model, x, y, fn, plan.names, Head())
