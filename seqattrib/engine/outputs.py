"""Policies every method applies alike, whatever the framework: the model's outputs as a
(batch, K) tensor, full float32 arithmetic, and how K targets share a backward pass.

Backends call a ``Head`` inside their forward passes (also while TensorFlow traces); the
check it makes is written here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .._errors import parameter_error

#: Run the K vector-Jacobian products of several targets as one vectorised backward on a CPU:
#: a backward over K x rows falls out of the cache there (BPNet-like, 128 rows, K=5 cost 5.4x
#: one target vectorised, 3.5x as K passes), so the K passes run one after another.
VECTORISE_ON_CPU = False
#: ... and on accelerators, where one large backward beats K smaller ones.
VECTORISE_ON_ACCELERATOR = True


class OutputShapeError(ValueError):
    """The model's output (through ``output_fn``) is not a (batch, K) tensor."""


def vectorise_targets(backend: Any) -> bool:
    """Whether the K target gradients run as one vectorised backward in this session."""
    return VECTORISE_ON_ACCELERATOR if backend.on_accelerator() else VECTORISE_ON_CPU


@dataclass(frozen=True)
class Head:
    """The model's raw output (a tensor, tuple or dict) as a (batch, K) tensor.

    ``output_fn`` (framework-native) maps the raw output first. Equal heads (the same
    ``output_fn``) are equal, so compiled functions keyed by a head are reused across calls.
    """

    output_fn: Callable[[Any], Any] | None = None

    def __call__(self, raw: Any) -> Any:
        out = self.output_fn(raw) if self.output_fn is not None else raw
        if isinstance(out, (tuple, list, dict)) or not hasattr(out, "shape"):
            raise parameter_error(
                "the model",
                "output_fn",
                "given when the model returns a tuple, list or dict",
                f"an output of type {type(out).__name__}",
                "Pass output_fn=lambda out: ... returning a (batch, n_outputs) tensor.",
                described=True,
                error=OutputShapeError,
            )
        rank = len(out.shape)
        if rank == 1:
            return out[:, None]
        if rank != 2:
            raise parameter_error(
                "the model",
                "output_fn",
                "given when the model output is not (batch, n_outputs)",
                f"an output of shape {tuple(out.shape)}",
                "Pass output_fn that reduces it, e.g. lambda out: out.sum(-1).",
                described=True,
                error=OutputShapeError,
            )
        return out


@contextmanager
def model_session(backend: Any, model: Any, device: Any) -> Iterator[Any]:
    """The backend's session (eval mode on ``device``) with full float32 arithmetic: TF32 and
    other reduced-precision matmuls moved EIG of a conv model by 1e-2 of its largest value on
    an H200. Yields the resolved device; restores the model and the user's settings after."""
    with backend.full_float32(), backend.session(model, device) as resolved:
        yield resolved
