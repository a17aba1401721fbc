"""What every named head shares: the error it raises, the framework's operations for the tensors
it is given, and the selection of one output of a tuple, list or dict."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._errors import parameter_error
from ..engine.outputs import OutputShapeError, describe_output


class HeadMismatch(OutputShapeError):
    """A head that does not fit the model's outputs; the message names the head's parameter
    and what the model returns."""


class NamedHead:
    """Base of the named heads: frozen dataclasses (equal heads compare and hash equal), called
    with the model's raw output and returning a (batch, K) tensor of its framework."""

    def __call__(self, raw: Any) -> Any:
        raise NotImplementedError


def mismatch(head: str, param: str, expected: str, got: str, fix: str = "") -> HeadMismatch:
    """A ``HeadMismatch`` in the package's template, for the head ``head`` (its factory's
    name) and its parameter ``param``."""
    error = parameter_error(
        f"seqattrib.heads.{head}",
        param,
        expected,
        got,
        fix,
        described=True,
        error=HeadMismatch,
    )
    assert isinstance(error, HeadMismatch)
    return error


def ops_for(x: Any, head: str, param: str) -> ModuleType:
    """The head operations of the backend whose framework ``x`` is a tensor of."""
    from ..backends import tensor_backend

    backend = tensor_backend(x)
    if backend is None:
        raise mismatch(
            head,
            param,
            "an output that is a torch or TensorFlow tensor",
            f"{describe_output(x)}",
            "Pass the model itself (not its predictions as arrays) to the method.",
        )
    ops: ModuleType = backend.head_ops
    return ops


def select(raw: Any, output: Any, head: str, param: str = "output") -> Any:
    """The output ``output`` of the model's raw output: a position of a tuple or list, a key
    of a dict, or None for a model that returns one tensor."""
    described = describe_output(raw)
    if output is None:
        if isinstance(raw, (tuple, list, dict)):
            which = f"one of the keys {list(raw)}" if isinstance(raw, dict) else "its position"
            raise mismatch(
                head,
                param,
                "the output to use when the model returns several",
                f"None for a model returning {described}",
                f"Pass {param}= {which}.",
            )
        return raw
    if isinstance(raw, dict):
        if output not in raw:
            raise mismatch(
                head,
                param,
                f"one of the keys {list(raw)} of the model's outputs",
                f"{output!r} for a model returning {described}",
            )
        return raw[output]
    if isinstance(raw, (tuple, list)):
        position = isinstance(output, int) and not isinstance(output, bool)
        if not position or not -len(raw) <= output < len(raw):
            raise mismatch(
                head,
                param,
                f"a position 0..{len(raw) - 1} of the model's outputs",
                f"{output!r} for a model returning {described}",
            )
        return raw[output]
    raise mismatch(
        head,
        param,
        "None for a model that returns one tensor",
        f"{output!r} for a model returning {described}",
        f"Pass {param}=None if this tensor is the one to use, or check that the model returns "
        "the outputs this head reads.",
    )


def replace(raw: Any, output: Any, value: Any) -> Any:
    """The model's raw output with its output ``output`` (as :func:`select` reads it) replaced
    by ``value``."""
    if output is None:
        return value
    if isinstance(raw, dict):
        return {**raw, output: value}
    items = list(raw)
    items[output] = value
    return type(raw)(items) if isinstance(raw, tuple) else items


def columns(x: Any, ops: ModuleType, head: str, param: str, raw: Any) -> Any:
    """``x`` as a (batch, K) tensor: (batch,) gains an axis; more than two axes is refused."""
    rank = len(ops.shape(x))
    if rank == 1:
        return x[:, None]
    if rank == 2:
        return x
    raise mismatch(
        head,
        param,
        "heads that return (batch,) or (batch, K) values",
        f"a value of shape {tuple(ops.shape(x))} from a model returning {describe_output(raw)}",
    )
