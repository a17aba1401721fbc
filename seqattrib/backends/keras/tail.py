"""A Keras functional graph as one flat list of layer calls, and a runner for part of it.

Nested functional models are inlined: a call of a nested model is replaced by its own calls,
its inputs become aliases of the tensors the outer call passed, and its outputs aliases of its
own output tensors. Every tensor is keyed by ``(scope..., id(KerasTensor))``, where the scope
names the nested calls it sits in, so a nested model called twice keeps two sets of tensors.

``Run`` re-runs a list of calls from given tensors, as ``Functional.call`` does: each node's
recorded arguments are filled in from the values computed so far, and ``training`` is forced
to False on every layer that takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras

Key = tuple[Any, ...]


@dataclass
class Call:
    """One layer call of the flat graph."""

    op: Any  # the layer or operation
    node: Any  # its keras Node (arguments, input_tensors, outputs)
    inputs: list[Key]
    outputs: list[Key]


@dataclass
class Flat:
    """A functional graph with nested functional models inlined."""

    name: str
    input_key: Key
    input_name: str
    output_keys: list[Key]
    struct: Any  # the outer model's output structure
    calls: list[Call] = field(default_factory=list)
    read: list[bool] = field(default_factory=list)  # which outputs the output function reads

    def calls_for(self, key: Key) -> list[Call]:
        """The calls that ``key`` depends on, in order."""
        needed = {key}
        chosen = []
        for call in reversed(self.calls):
            if any(k in needed for k in call.outputs):
                chosen.append(call)
                needed.update(call.inputs)
        return chosen[::-1]


def _topological_nodes(graph: Any) -> list[Any]:
    by_depth = graph._nodes_by_depth
    return [node for depth in sorted(by_depth, reverse=True) for node in by_depth[depth]]


def flatten(graph: Any, functional: Callable[[Any], Any]) -> Flat:
    """The calls of ``graph`` with every nested functional model inlined (``functional`` maps
    a model to its functional graph, raising for one it cannot read)."""
    x = graph.inputs[0]
    alias: dict[Key, Key] = {}
    flat = Flat(graph.name, (id(x),), x._keras_history.operation.name, [], graph._outputs_struct)
    _inline(graph, (), alias, flat, functional)
    flat.output_keys = [_resolve(alias, (id(t),)) for t in graph.outputs]
    flat.read = [True] * len(flat.output_keys)
    return flat


def _resolve(alias: dict[Key, Key], key: Key) -> Key:
    while key in alias:
        key = alias[key]
    return key


def _nested(op: Any, functional: Callable[[Any], Any]) -> Any:
    """The functional graph of a nested model call, or None for any other operation."""
    if not isinstance(op, keras.Model):
        return None
    try:
        return functional(op)
    except Exception:  # noqa: BLE001 - a model without a graph is an opaque tail call
        return None


def _inline(
    graph: Any, scope: tuple[Any, ...], alias: dict[Key, Key], flat: Flat, functional: Any
) -> None:
    for node in _topological_nodes(graph):
        if node.is_input:
            continue
        op = node.operation
        inputs = [_resolve(alias, (*scope, id(t))) for t in node.input_tensors]
        inner = _nested(op, functional)
        if inner is not None and len(inner.inputs) == len(inputs):
            inner_scope = (*scope, id(node))
            for t, key in zip(inner.inputs, inputs, strict=True):
                alias[(*inner_scope, id(t))] = key
            _inline(inner, inner_scope, alias, flat, functional)
            for t, inner_t in zip(node.outputs, inner.outputs, strict=True):
                alias[(*scope, id(t))] = _resolve(alias, (*inner_scope, id(inner_t)))
            continue
        flat.calls.append(Call(op, node, inputs, [(*scope, id(t)) for t in node.outputs]))


class Run:
    """Runs ``calls`` from the values of ``inputs`` (keys, in argument order) and returns the
    values of ``outputs`` (packed as ``struct`` when given; one value alone unpacked; None for
    an output given as None)."""

    def __init__(
        self,
        calls: list[Call],
        inputs: list[Key],
        outputs: list[Key | None] | None,
        struct: Any = None,
    ) -> None:
        self.calls, self.inputs, self.outputs, self.struct = calls, inputs, outputs, struct

    def all_values(self, *values: Any) -> dict[Key, Any]:
        """Every tensor's value (eagerly, for inspection)."""
        return self._run(values)

    def _run(self, values: tuple[Any, ...]) -> dict[Key, Any]:
        if len(values) != len(self.inputs):
            raise ValueError(f"takes {len(self.inputs)} values, got {len(values)}")
        computed = dict(zip(self.inputs, values, strict=True))
        for call in self.calls:
            node = call.node
            given = {
                id(t): computed[k] for t, k in zip(node.input_tensors, call.inputs, strict=True)
            }
            args, kwargs = node.arguments.fill_in(given)
            if "training" in getattr(call.op, "_call_context_args", ()):
                kwargs = {**kwargs, "training": False}
            out = call.op(*args, **kwargs)
            for key, value in zip(call.outputs, keras.tree.flatten(out), strict=True):
                computed[key] = value
        return computed

    def __call__(self, *values: Any) -> Any:
        computed = self._run(values)
        assert self.outputs is not None
        flat = [None if k is None else computed[k] for k in self.outputs]
        if self.struct is None:
            return flat[0] if len(flat) == 1 else flat
        out = keras.tree.pack_sequence_as(self.struct, flat)
        if isinstance(out, (list, tuple)) and len(out) == 1:
            return out[0]  # as Functional.call (unpack_singleton)
        return out
