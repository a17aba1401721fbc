"""Read a Keras 3 model's local prefix for fast ISM, from its functional layer graph.

A functional model (or a built ``Sequential``, through the functional model it keeps) records
every layer call as a ``Node``: ``node.operation`` is the layer, ``node.input_tensors`` and
``node.outputs`` the symbolic ``KerasTensor`` s it read and wrote, and the model lists its nodes
by depth (``model._nodes_by_depth``, deepest first is a topological order). Nested functional
models are read through: their calls are inlined into one flat list (``_Flat``), each tensor
keyed by the nested calls it sits in. Lengths are worked out from ``row_shape`` with each
layer's own padding rule, so models built with a free length (``keras.Input((None, 4))``) work
too.

Tensors that do not depend on the values of the input (a fixed control track that a one-input
model feeds to a two-input model) are found by running the graph on two different inputs: they
become ``fixed`` nodes, computed once per sequence and never per mutant.

A layer call becomes ``LocalNode`` s when every tensor it reads is local or fixed and the layer
acts per position, through a sliding window, on aligned local tensors, or as a global average
or maximum (``local_ops``). Any other call (``Dense`` on a flattened tensor, ``Flatten``,
``Lambda``, recurrent layers, ``keras.ops`` operations, unknown layers) is part of the tail,
and the local tensors it reads are the cut.

The tail re-runs the model's own nodes from the cut values (as ``Functional.call`` does, with
``training=False``, ``tail``) rather than through ``keras.Model(cut_tensors, outputs)``:
that constructor clones the graph onto the model's layers on every call, and fails when a cut
tensor is itself a model output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from ..local_graph import GraphUnsupported, LocalGraph, LocalNode, NothingLocal, unread_outputs
from .local_ops import NonLocal, classify, describe
from .tail import Call, Flat, Run, flatten

Key = tuple[Any, ...]


def _functional(model: Any) -> Any:
    """The functional graph of ``model`` (a functional model, or a built ``Sequential``'s)."""
    if not isinstance(model, keras.Model):
        raise GraphUnsupported(f"{type(model).__name__} is not a Keras model")
    if isinstance(model, keras.Sequential):
        graph = getattr(model, "_functional", None)
        if graph is None:
            raise GraphUnsupported(
                f"Sequential model '{model.name}' is not built with an input shape: it has no "
                "layer graph yet (start it with keras.Input((L, 4)) or call model.build)"
            )
        return graph
    if not hasattr(model, "_nodes_by_depth") or not hasattr(model, "_outputs_struct"):
        raise GraphUnsupported(
            f"model '{model.name}' ({type(model).__name__}) is a subclassed model: its call() "
            "has no layer graph to read; fast ISM needs a functional or Sequential model"
        )
    return model


def _run_twice(flat: Flat, row_shape: tuple[int, int]) -> tuple[dict[Key, Any], dict[Key, Any]]:
    """Every tensor's value for two different random inputs (eagerly)."""
    rng = np.random.default_rng(0)
    everything = Run(flat.calls, [flat.input_key], None)
    a, b = (rng.standard_normal((2, *row_shape)).astype(np.float32) for _ in range(2))
    return everything.all_values(a), everything.all_values(b)


def _fixed_keys(values_a: dict[Key, Any], values_b: dict[Key, Any], flat: Flat) -> set[Key]:
    """Tensors whose values do not depend on the input's: equal for two different inputs."""
    fixed = set()
    for key, value in values_a.items():
        other = values_b.get(key)
        if key == flat.input_key or other is None or not hasattr(value, "shape"):
            continue
        if tuple(value.shape) == tuple(other.shape) and np.array_equal(
            np.asarray(value), np.asarray(other)
        ):
            fixed.add(key)
    return fixed


class _Reader:
    """Walks the flat call list once, classifying every layer call."""

    def __init__(self, flat: Flat, fixed: set[Key], row_shape: tuple[int, int]) -> None:
        self.flat, self.fixed = flat, fixed
        self.row_shape = row_shape
        self.nodes: list[LocalNode] = []
        self.channels: list[int | None] = []
        self.index: dict[Key, int] = {}  # tensor key -> local node
        self.shapes: dict[Key, tuple[Any, ...]] = {}
        self.notes: list[str] = []

    # ------------------------------------------------------------------ walk
    def read(self) -> LocalGraph:
        flat = self.flat
        row = self.row_shape
        axis = 1 if row[1] == 4 else 2
        self._add(flat.input_key, LocalNode(flat.input_name, "input", (), row[axis - 1], axis))
        tail: list[tuple[Call, Any]] = []
        for call in flat.calls:
            for key, tensor in zip(call.outputs, call.node.outputs, strict=True):
                self.shapes[key] = tuple(tensor.shape)
            if all(key in self.fixed for key in call.outputs):
                continue  # computed once per sequence, where it is read
            reads = [self._read(key) for key in call.inputs]
            local: Any = None
            if reads and all(i is not None for i in reads):
                local = classify(call.op, reads, self.nodes, self.channels)  # type: ignore[arg-type]
            if isinstance(local, (LocalNode, list)):
                self._add_all(call, local)
            else:
                tail.append((call, local))
        # the tail: the calls the read outputs need; the local tensors they read are the cut
        outputs = {k for k, read in zip(flat.output_keys, flat.read, strict=True) if read}
        needed = _ancestors([call for call, _ in tail], outputs)
        first_reader: tuple[Any, str] | None = None
        cut: set[int] = set()
        for call, local in tail:
            if call not in needed:
                continue
            if isinstance(local, NonLocal) and local.note:
                self.notes.append(f"{describe(call.op)} ends the local prefix: {local.reason}")
            for key in call.inputs:
                i = self._read(key)
                if i is None:
                    continue
                cut.add(i)
                if i == 0 and first_reader is None:
                    reason = (
                        local.reason
                        if isinstance(local, NonLocal)
                        else ("it also reads tensors computed by non-local layers")
                    )
                    first_reader = (call.op, reason)
        for key in outputs:
            i = self._read(key)
            if i is not None:
                cut.add(i)
        return self._finish(cut, [call for call, _ in tail if call in needed], first_reader)

    def _finish(
        self, cut_ids: set[int], tail: list[Call], first_reader: tuple[Any, str] | None
    ) -> LocalGraph:
        if not cut_ids:
            raise GraphUnsupported("the model's output does not depend on its input")
        moving = {i for i in cut_ids if self.nodes[i].kind != "fixed"}
        if moving == {0}:
            if first_reader is None:
                raise GraphUnsupported(f"model '{self.flat.name}' has no layers")
            op, reason = first_reader
            raise NothingLocal(
                f"{describe(op)} reads the input directly ({reason}): no local layers before "
                "it, so fast ISM has nothing to reuse"
            )
        order = sorted(cut_ids)
        keys = {i: key for key, i in self.index.items()}
        outputs = [
            k if read else None
            for k, read in zip(self.flat.output_keys, self.flat.read, strict=True)
        ]
        run = Run(tail, [keys[i] for i in order], outputs, self.flat.struct)
        nodes, cut = self._needed(order)
        return LocalGraph(nodes, cut, run, self.notes, tail_macs=_tail_macs(tail))

    def _read(self, key: Key) -> int | None:
        """The local node of tensor ``key`` (a fixed node made on first read), or None."""
        if key in self.index:
            return self.index[key]
        if key not in self.fixed:
            return None
        shape = self.shapes.get(key, ())
        axis = self.nodes[0].length_axis
        length = int(shape[axis]) if len(shape) == 3 and shape[axis] is not None else 0
        channels = int(shape[3 - axis]) if len(shape) == 3 and shape[3 - axis] else 1
        apply = Run(self.flat.calls_for(key), [self.flat.input_key], [key])
        node = LocalNode(f"fixed {key[-1]}", "fixed", (0,), length, axis, apply, channels=channels)
        self.index[key] = len(self.nodes)
        self.nodes.append(node)
        self.channels.append(channels)
        return self.index[key]

    def _add_all(self, call: Call, local: LocalNode | list[LocalNode]) -> None:
        parts = local if isinstance(local, list) else [local]
        for a, node in enumerate(parts):
            if a:
                node.inputs = (len(self.nodes) - 1,)
                self.nodes.append(node)
                self.channels.append(node.channels)
                continue
            if len(parts) == 1:
                self._add(call.outputs[0], node)
            else:
                self.nodes.append(node)
                self.channels.append(node.channels)
        if len(parts) > 1:
            self._check_length(call.outputs[0], parts[-1])
            self.index[call.outputs[0]] = len(self.nodes) - 1

    def _add(self, key: Key, node: LocalNode) -> None:
        self._check_length(key, node)
        self.index[key] = len(self.nodes)
        self.nodes.append(node)
        shape = self.shapes.get(key) or (None, *self.row_shape)
        if node.kind != "reduce" and len(shape) == 3:
            node.channels = int(shape[3 - node.length_axis] or node.channels)
        self.channels.append(node.channels)

    def _check_length(self, key: Key, node: LocalNode) -> None:
        shape = self.shapes.get(key)
        if shape is None or node.kind in ("reduce", "input") or len(shape) != 3:
            return
        expected = shape[node.length_axis]
        if expected is not None and expected != node.length:
            raise GraphUnsupported(
                f"layer '{node.name}': worked out {node.length} positions but Keras says {expected}"
            )

    def _needed(self, cut: list[int]) -> tuple[list[LocalNode], list[int]]:
        """Drop local nodes outside the ancestry of the cut; renumber."""
        keep = {0}
        stack = list(cut)
        while stack:
            n = stack.pop()
            if n not in keep:
                keep.add(n)
                stack.extend(self.nodes[n].inputs)
        order = sorted(keep)
        new = {old: i for i, old in enumerate(order)}
        nodes = []
        for old in order:
            node = self.nodes[old]
            node.inputs = tuple(new[i] for i in node.inputs)
            nodes.append(node)
        return nodes, [new[i] for i in cut]


def _ancestors(calls: list[Call], keys: set[Key]) -> list[Call]:
    """The calls that ``keys`` depend on."""
    needed, chosen = set(keys), []
    for call in reversed(calls):
        if any(k in needed for k in call.outputs):
            chosen.append(call)
            needed.update(call.inputs)
    return chosen


def _tail_macs(calls: Sequence[Call]) -> float:
    """Multiply-adds per example of the tail's dense and convolution layers."""
    total = 0.0
    for call in calls:
        op = call.op
        try:
            if isinstance(op, keras.layers.Dense):
                shape = call.node.input_tensors[0].shape
                positions = float(np.prod([d or 1 for d in shape[1:-1]]))
                total += positions * int(shape[-1]) * int(op.units)
            elif isinstance(op, keras.layers.Conv1D):
                out = call.node.outputs[0].shape
                total += (
                    float(np.prod([d or 1 for d in out[1:]]))
                    * int(op.kernel_size[0])
                    * int(call.node.input_tensors[0].shape[-1])
                )
        except (TypeError, ValueError, IndexError):
            continue
    return total


def keras_local_graph(
    model: Any, row_shape: tuple[int, int], output_fn: Callable[[Any], Any] | None = None
) -> LocalGraph:
    """The local prefix of a Keras 3 model for inputs of shape ``(batch, *row_shape)``,
    without the layers only outputs that ``output_fn`` never reads need.

    Parameters
    ----------
    model : keras.Model
        A functional model, or a ``Sequential`` built with an input shape, with one 3-D
        input (nested functional models inside it are read through).
    row_shape : tuple of int
        Per-example input shape, ``(L, 4)`` (positions on axis 1) or ``(4, L)`` (axis 2).

    Returns
    -------
    LocalGraph
        Nodes in topological order (``nodes[0]`` the input), the cut, and a tail that runs
        the rest of the model (``training=False``) from the cut values.

    Raises
    ------
    GraphUnsupported
        When the model cannot be split; the message names the layer and the reason.
    """
    graph = _functional(model)
    inputs = list(graph.inputs)
    if len(inputs) != 1:
        raise GraphUnsupported(
            f"model '{graph.name}' takes {len(inputs)} inputs; fast ISM reads one-input models "
            "(wrap it in a one-input model that computes the other inputs, e.g. a fixed "
            "control track, from the sequence input)"
        )
    shape = tuple(inputs[0].shape)
    if len(shape) != 3:
        raise GraphUnsupported(
            f"the model's input has shape {shape}; fast ISM needs (batch, L, 4) or (batch, 4, L)"
        )
    row = (int(row_shape[0]), int(row_shape[1]))
    if any(d is not None and d != r for d, r in zip(shape[1:], row, strict=True)):
        raise GraphUnsupported(
            f"rows of shape {row} do not fit the model's input shape {shape[1:]}"
        )
    flat = flatten(graph, _functional)
    values_a, values_b = _run_twice(flat, row)
    leaves = [values_a[k] for k in flat.output_keys]

    def rebuild(values: list[Any]) -> Any:
        out = keras.tree.pack_sequence_as(flat.struct, values)
        return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out

    unread = unread_outputs(output_fn, leaves, rebuild)
    flat.read = [k not in unread for k in range(len(flat.output_keys))]
    return _Reader(flat, _fixed_keys(values_a, values_b, flat), row).read()
