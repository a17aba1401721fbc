"""The examples data attribution scores: checked sequences, and labels with the targets they give
the losses (checked by ``selection.check_labels``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

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
