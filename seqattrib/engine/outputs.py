"""Policies every method applies alike, whatever the framework: the model's outputs as a
(batch, K) tensor, full float32 arithmetic, and how K targets share a backward pass.

Backends call a ``Head`` inside their forward passes (also while TensorFlow traces); the
check it makes is written here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
class TargetAxis:
    """Whether results keep their target axis (axis 1 of a block, the first of a row shape).

    An int ``target`` drops it, a list or None keeps it; this decides it for the row shapes
    that sinks and files are made with and for the rows written to them alike.
    """

    drop: bool

    def rows(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """Row shapes ``{name: (K, ...)}`` as stored and returned."""
        return {name: shape[1:] if self.drop else shape for name, shape in shapes.items()}

    def block(self, block: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Rows ``{name: (n, K, ...)}`` as stored and returned."""
        return {name: values[:, 0] for name, values in block.items()} if self.drop else block


@dataclass(frozen=True)
class Head:
    """The model's raw output (a tensor, tuple or dict) as a (batch, K) tensor.

    ``output_fn`` (framework-native, or a named head of ``seqattrib.heads``) maps the raw
    output first; what it returns is checked on every call (a framework tensor of rank 1 or 2
    with the batch of the raw output), and an error it raises is reported as an ``output_fn``
    error, chained to the original (a named head's own error, which names the head's parameter
    and the model's outputs, is raised as it is). Equal heads (the same ``output_fn``, and equal
    named heads) are equal, so compiled functions keyed by a head are reused across calls;
    ``func`` only names the caller in messages.
    """

    output_fn: Callable[[Any], Any] | None = None
    func: str = field(default="the model", compare=False)

    def __call__(self, raw: Any) -> Any:
        out = raw if self.output_fn is None else self._apply(raw)
        if isinstance(out, (tuple, list, dict)) or not hasattr(out, "shape"):
            raise parameter_error(
                self.func,
                "output_fn",
                "given when the model returns a tuple, list or dict"
                if self.output_fn is None
                else "a function returning a (batch, n_outputs) tensor",
                f"{'an output' if self.output_fn is None else 'a result'} of type "
                f"{type(out).__name__}",
                "Pass output_fn=lambda out: ... returning a (batch, n_outputs) tensor.",
                described=True,
                error=OutputShapeError,
            )
        if self.output_fn is not None and isinstance(out, np.ndarray | np.generic):
            raise parameter_error(
                self.func,
                "output_fn",
                "a function returning a (batch, n_outputs) tensor of the model's framework",
                f"a NumPy array of shape {out.shape}",
                "Write output_fn with the framework's operations (torch or keras.ops / tf), "
                "so that gradients reach the input.",
                described=True,
                error=OutputShapeError,
            )
        rank = len(out.shape)
        if rank not in (1, 2):
            raise parameter_error(
                self.func,
                "output_fn",
                "given when the model output is not (batch, n_outputs)"
                if self.output_fn is None
                else "a function returning a (batch, n_outputs) tensor",
                f"{'an output' if self.output_fn is None else 'a result'} of shape "
                f"{tuple(out.shape)}",
                "Pass output_fn that reduces it, e.g. lambda out: out.sum(-1).",
                described=True,
                error=OutputShapeError,
            )
        if self.output_fn is not None:
            batches, rows = _batches(raw), out.shape[0]
            if batches and isinstance(rows, int) and rows not in batches:
                raise parameter_error(
                    self.func,
                    "output_fn",
                    f"a function returning a (batch, n_outputs) tensor, one row for each of "
                    f"the {max(batches)} inputs of the batch",
                    f"a result of shape {tuple(out.shape)}",
                    "Reduce over the model's other axes (e.g. out.sum(-1)), never over the "
                    "batch axis 0.",
                    described=True,
                    error=OutputShapeError,
                )
        return out[:, None] if rank == 1 else out

    def _apply(self, raw: Any) -> Any:
        assert self.output_fn is not None
        try:
            return self.output_fn(raw)
        except OutputShapeError:
            raise  # a named head that does not fit the outputs: its message names them
        except Exception as exc:
            if type(exc).__name__ in _OUT_OF_MEMORY or _HOST_OUT_OF_MEMORY in str(exc):
                raise  # the batch sizer's business, not the function's
            raise parameter_error(
                self.func,
                "output_fn",
                "a function that takes the model's raw output",
                f"a function that raised {type(exc).__name__}: {_first_line(exc)} (given "
                f"{describe_output(raw)})",
                described=True,
                error=OutputShapeError,
            ) from exc


#: Errors of a framework that mean the device ran out of memory (left to the batch sizer).
_OUT_OF_MEMORY = ("OutOfMemoryError", "ResourceExhaustedError")
#: ... and how torch's CPU allocator words it (a plain RuntimeError).
_HOST_OUT_OF_MEMORY = "can't allocate memory"


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:200]


def _batches(raw: Any) -> set[int]:
    """The sizes of axis 0 of the tensors of a raw model output (one is the batch), where
    known."""
    if isinstance(raw, dict):
        return set().union(*(_batches(v) for v in raw.values()))
    if isinstance(raw, (tuple, list)):
        return set().union(*(_batches(v) for v in raw))
    shape = getattr(raw, "shape", None)
    first = shape[0] if shape is not None and len(shape) else None
    return {first} if isinstance(first, int) else set()


def describe_output(raw: Any) -> str:
    """The raw output as output_fn saw it: type and shapes."""
    if isinstance(raw, dict):
        parts = ", ".join(f"{k!r}: {describe_output(v)}" for k, v in raw.items())
        return "{" + parts + "}"
    if isinstance(raw, (tuple, list)):
        inner = ", ".join(describe_output(v) for v in raw)
        return f"{type(raw).__name__}({inner})"
    shape = getattr(raw, "shape", None)
    return type(raw).__name__ if shape is None else f"a tensor of shape {tuple(shape)}"


@contextmanager
def model_session(backend: Any, model: Any, device: Any) -> Iterator[Any]:
    """The backend's session (eval mode on ``device``) with full float32 arithmetic: TF32 and
    other reduced-precision matmuls moved EIG of a conv model by 1e-2 of its largest value on
    an H200. Yields the resolved device; restores the model and the user's settings after."""
    with backend.full_float32(), backend.session(model, device) as resolved:
        yield resolved
