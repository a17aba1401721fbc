"""Read a Keras 3 model's local prefix for fast ISM, from its functional layer graph.

A functional model (or a built ``Sequential``, through the functional model it keeps) records
every layer call as a ``Node``: ``node.operation`` is the layer, ``node.input_tensors`` and
``node.outputs`` the symbolic ``KerasTensor`` s it read and wrote, and the model lists its nodes
by depth (``model._nodes_by_depth``, deepest first is a topological order). Lengths are worked
out from ``row_shape`` with each layer's own padding rule, so models built with a free length
(``keras.Input((None, 4))``) work too.

A layer call becomes a ``LocalNode`` when every tensor it reads is local and the layer acts per
position or through a sliding window (``Conv1D``, valid pooling, activations, inference-mode
normalisation and dropout, ``Permute``, ``Add``, ``Cropping1D``). Any other call (``Dense``,
``Flatten``, global pooling, ``Lambda``, recurrent layers, ``keras.ops`` operations, nested
models, unknown layers; also a softmax or layer normalisation across positions and an
activation function fast ISM does not know, each noted in ``LocalGraph.notes``) is part of the
tail, and the local tensors it reads are the cut. A layer of a local kind whose configuration
cannot be windowed (pooling with ``"same"`` padding, a channels-first convolution, parameters
that vary along the positions) raises ``GraphUnsupported`` naming it.

The tail re-runs the model's own nodes from the cut values (as ``Functional.call`` does, with
``training=False``) rather than through ``keras.Model(cut_tensors, outputs)``: that
constructor clones the graph onto the model's layers on every call, and fails when a cut tensor
is itself a model output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from ._local_graph import GraphUnsupported, LocalGraph, LocalNode, NothingLocal

layers = keras.layers

#: Identity at inference (the tail and ``model(x, training=False)`` agree).
_IDENTITY_LAYERS: tuple[type, ...] = tuple(
    getattr(layers, name)
    for name in (
        "Identity",
        "Dropout",
        "SpatialDropout1D",
        "GaussianNoise",
        "GaussianDropout",
        "AlphaDropout",
        "ActivityRegularization",
    )
    if hasattr(layers, name)
)
#: Elementwise layers (parameters, if any, shared by every position).
_ELEMENTWISE_LAYERS: tuple[type, ...] = (layers.ReLU, layers.LeakyReLU, layers.ELU)
#: Keras activations that act along axis -1 (all others are elementwise).
_LAST_AXIS_ACTIVATIONS = {"softmax", "log_softmax", "glu", "sparsemax"}
#: TensorFlow functions passed as activations that are elementwise, by name.
_TF_ELEMENTWISE = {
    "relu",
    "relu6",
    "elu",
    "selu",
    "gelu",
    "sigmoid",
    "tanh",
    "softplus",
    "softsign",
    "swish",
    "silu",
    "exp",
    "leaky_relu",
    "identity",
    "abs",
    "square",
    "log_sigmoid",
}
_KERAS_ACTIVATIONS = {
    id(getattr(keras.activations, name))
    for name in dir(keras.activations)
    if not name.startswith("_") and callable(getattr(keras.activations, name))
}


class _NonLocal:
    """Why a layer call ends the prefix (for the message when it reads the input directly);
    ``note``: worth a line in ``LocalGraph.notes`` (a layer of a local kind sent to the tail)."""

    def __init__(self, reason: str, note: bool = False) -> None:
        self.reason = reason
        self.note = note


def _describe(op: Any) -> str:
    return f"layer '{op.name}' ({type(op).__name__})"


def _plain(layer: Any, cls: type) -> bool:
    """``layer`` is a ``cls`` whose ``call`` is the Keras one (not a subclass overriding it)."""
    own = getattr(type(layer), "call", None)
    return isinstance(layer, cls) and own is getattr(cls, "call", None)


def _unsupported(op: Any, why: str) -> GraphUnsupported:
    return GraphUnsupported(f"{_describe(op)}: {why}")


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


def _topological_nodes(graph: Any) -> list[Any]:
    by_depth = graph._nodes_by_depth
    return [node for depth in sorted(by_depth, reverse=True) for node in by_depth[depth]]


def _axes(axis: Any) -> set[int]:
    values = axis if isinstance(axis, (list, tuple)) else [axis]
    return {int(a) % 3 for a in values}


def _activation_ok(fn: Any, channel_axis: int) -> str | None:
    """None when ``fn`` acts per position on a tensor with channels on ``channel_axis``, else
    why not."""
    name = getattr(fn, "__name__", type(fn).__name__)
    if id(fn) in _KERAS_ACTIVATIONS:
        if name in _LAST_AXIS_ACTIVATIONS and channel_axis != 2:
            return f"activation '{name}' acts along the positions (axis -1)"
        return None
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("tensorflow") and name in _TF_ELEMENTWISE:
        return None
    return (
        f"activation {name!r} is a custom function, so fast ISM cannot tell that it acts per "
        "position"
    )


def _identity(w: Any) -> Any:
    return w


def _add(*windows: Any) -> Any:
    out = windows[0]
    for w in windows[1:]:
        out = out + w
    return out


def _swap(w: Any) -> Any:
    return ops.transpose(w, (0, 2, 1))


def _call_inference(layer: Any) -> Callable[[Any], Any]:
    def apply(w: Any) -> Any:
        return layer(w, training=False)

    return apply


def _conv_apply(layer: Any) -> Callable[[Any], Any]:
    """The layer's convolution with valid padding, plus bias and activation."""

    def apply(w: Any) -> Any:
        dtype = layer.compute_dtype
        out = ops.conv(
            ops.cast(w, dtype),
            ops.cast(layer.kernel, dtype),
            strides=list(layer.strides),
            padding="valid",
            dilation_rate=list(layer.dilation_rate),
            data_format="channels_last",
        )
        if layer.use_bias:
            out = out + ops.cast(layer.bias, dtype)
        return layer.activation(out) if layer.activation is not None else out

    return apply


def _same_pad_left(length: int, kernel: int, stride: int, dilation: int) -> int:
    """TensorFlow's "SAME" rule: the extra padding goes on the right."""
    total = max((math.ceil(length / stride) - 1) * stride + (kernel - 1) * dilation + 1 - length, 0)
    return total // 2


class _Reader:
    """Walks the functional graph once, classifying every layer call."""

    def __init__(self, graph: Any, row_shape: tuple[int, int]) -> None:
        self.graph = graph
        self.row_shape = row_shape
        self.nodes: list[LocalNode] = []
        self.tensors: list[Any] = []  # the KerasTensor of each local node
        self.channels: list[int | None] = []
        self.index: dict[int, int] = {}  # id(KerasTensor) -> local node
        self.notes: list[str] = []

    # ------------------------------------------------------------------ walk
    def read(self) -> LocalGraph:
        graph = self.graph
        inputs = list(graph.inputs)
        if len(inputs) != 1:
            raise GraphUnsupported(
                f"model '{graph.name}' takes {len(inputs)} inputs; fast ISM needs exactly one"
            )
        x = inputs[0]
        shape = tuple(x.shape)
        if len(shape) != 3:
            raise GraphUnsupported(
                f"the model's input has shape {shape}; fast ISM needs (batch, L, 4) or "
                "(batch, 4, L)"
            )
        row = tuple(int(d) for d in self.row_shape)
        if len(row) != 2 or any(
            d is not None and d != r for d, r in zip(shape[1:], row, strict=True)
        ):
            raise GraphUnsupported(
                f"rows of shape {row} do not fit the model's input shape {shape[1:]}"
            )
        axis = 1 if row[1] == 4 else 2
        self._add(x, LocalNode(x._keras_history.operation.name, "input", (), row[axis - 1], axis))

        first_reader: tuple[Any, str] | None = None
        tail_nodes: list[Any] = []
        cut_ids: set[int] = set()
        for node in _topological_nodes(graph):
            if node.is_input:
                continue
            op = node.operation
            reads = [self.index.get(id(t)) for t in node.input_tensors]
            local = None
            if reads and all(i is not None for i in reads):
                local = self._classify(op, node, reads)  # type: ignore[arg-type]
            if isinstance(local, LocalNode):
                self._add(node.outputs[0], local)
                continue
            tail_nodes.append(node)
            if isinstance(local, _NonLocal) and local.note:
                self.notes.append(f"{_describe(op)} ends the local prefix: {local.reason}")
            for i in reads:
                if i is None:
                    continue
                cut_ids.add(i)
                if i == 0 and first_reader is None:
                    reason = (
                        local.reason
                        if isinstance(local, _NonLocal)
                        else "it also reads tensors computed by non-local layers"
                    )
                    first_reader = (op, reason)
        for t in graph.outputs:
            if id(t) in self.index:
                cut_ids.add(self.index[id(t)])
        if not cut_ids:
            raise GraphUnsupported("the model's output does not depend on its input")
        if cut_ids == {0}:
            if first_reader is None:
                raise GraphUnsupported(f"model '{graph.name}' has no layers")
            op, reason = first_reader
            raise NothingLocal(
                f"{_describe(op)} reads the input directly ({reason}): no local layers before "
                "it, so fast ISM has nothing to reuse"
            )
        cut = sorted(cut_ids)
        nodes, cut = self._needed(cut)
        tail = _Tail(graph, [self.tensors[i] for i in sorted(cut_ids)], tail_nodes)
        return LocalGraph(nodes, cut, tail, self.notes)

    def _add(self, tensor: Any, node: LocalNode) -> None:
        shape = tuple(tensor.shape)
        expected = shape[node.length_axis]
        if expected is not None and expected != node.length:
            raise GraphUnsupported(
                f"layer '{node.name}': worked out {node.length} positions but Keras says {expected}"
            )
        self.index[id(tensor)] = len(self.nodes)
        self.nodes.append(node)
        self.tensors.append(tensor)
        self.channels.append(shape[3 - node.length_axis])

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

    # ------------------------------------------------------------------ layers
    def _classify(self, op: Any, node: Any, reads: Sequence[int]) -> LocalNode | _NonLocal:
        """A LocalNode for a position-local layer call, else why not; raises for a local
        kind of layer configured in a way that cannot be windowed."""
        if not isinstance(op, keras.Layer):
            return _NonLocal(f"the Keras operation '{op.name}' is not a position-local layer")
        if isinstance(op, keras.Model):
            return _NonLocal("a nested model")
        if isinstance(op, layers.Lambda):
            return _NonLocal("arbitrary function; fast ISM needs position-local layers")
        if len(node.outputs) != 1:
            return _NonLocal("it returns several tensors")
        if _plain(op, layers.Add):
            return self._merge_add(op, reads)
        if len(reads) != 1:
            return _NonLocal("it reads several tensors")
        first = reads[0]
        src = self.nodes[first]
        length, axis = src.length, src.length_axis
        channel_axis = 3 - axis

        def pointwise(apply: Callable[..., Any], out_axis: int = axis) -> LocalNode:
            return LocalNode(op.name, "pointwise", (first,), length, out_axis, apply)

        if _plain(op, layers.Conv1D):
            return self._conv(op, first)
        if _plain(op, layers.MaxPooling1D) or _plain(op, layers.AveragePooling1D):
            return self._pool(op, first)
        if _plain(op, layers.Cropping1D):
            left, right = (int(c) for c in op.cropping)
            if axis != 1:  # crops the channels of each position
                return pointwise(_call_inference(op))
            return LocalNode(op.name, "crop", (first,), length - left - right, 1, offset=left)
        if _plain(op, layers.Permute):
            dims = tuple(op.dims)
            if dims == (1, 2):
                return pointwise(_identity)
            return pointwise(_swap, channel_axis)
        if any(_plain(op, cls) for cls in _IDENTITY_LAYERS):
            return pointwise(_identity)
        if any(_plain(op, cls) for cls in _ELEMENTWISE_LAYERS):
            return pointwise(_call_inference(op))
        if _plain(op, layers.Activation):
            why = _activation_ok(op.activation, channel_axis)
            return _NonLocal(why, note=True) if why else pointwise(_call_inference(op))
        if _plain(op, layers.Softmax):
            if _axes(op.axis) != {channel_axis}:  # e.g. attention pooling: a global op
                return _NonLocal(f"softmax over axis {op.axis} mixes positions", note=True)
            return pointwise(_call_inference(op))
        if _plain(op, layers.BatchNormalization):
            if _axes(op.axis) != {channel_axis}:
                raise _unsupported(
                    op, f"normalises along axis {op.axis}, not the channel axis {channel_axis}"
                )
            return pointwise(_call_inference(op))
        if _plain(op, layers.LayerNormalization):
            if _axes(op.axis) != {channel_axis}:  # statistics over positions: a global op
                return _NonLocal(f"normalises over axes {op.axis}, across positions", note=True)
            return pointwise(_call_inference(op))
        if _plain(op, layers.PReLU):
            alpha_shape = tuple(op.alpha.shape)
            if alpha_shape[axis - 1] != 1:
                raise _unsupported(
                    op,
                    f"alpha of shape {alpha_shape} varies along the positions; fast ISM needs "
                    f"shared_axes=[{axis}]",
                )
            return pointwise(_call_inference(op))
        if _plain(op, layers.Rescaling):
            sizes = [int(np.size(v)) for v in (op.scale, op.offset)]
            ranks = [int(np.ndim(v)) for v in (op.scale, op.offset)]
            if any(s != 1 for s in sizes) and (axis != 1 or max(ranks) > 1):
                raise _unsupported(op, "scale or offset varies along the positions")
            return pointwise(_call_inference(op))
        return _NonLocal("not a position-local layer")

    def _conv(self, op: Any, first: int) -> LocalNode | _NonLocal:
        src = self.nodes[first]
        if op.data_format != "channels_last":
            raise _unsupported(
                op,
                f"data_format={op.data_format!r}; fast ISM reads channels_last convolutions "
                "only (put a Permute((2, 1)) first)",
            )
        if src.length_axis != 1:
            raise _unsupported(
                op,
                "convolves along axis 1 but the positions lie on axis 2 (a (4, L) input "
                "needs Permute((2, 1)) first)",
            )
        if getattr(op, "quantization_mode", None):
            return _NonLocal(f"quantized ({op.quantization_mode}) convolution", note=True)
        why = _activation_ok(op.activation, 2)
        if why:
            return _NonLocal(why, note=True)
        kernel, stride, dilation = op.kernel_size[0], op.strides[0], op.dilation_rate[0]
        length = src.length
        reach = (kernel - 1) * dilation
        if op.padding == "valid":
            pad_left, out = 0, (length - reach - 1) // stride + 1
        elif op.padding == "same":
            pad_left, out = _same_pad_left(length, kernel, stride, dilation), -(-length // stride)
        elif op.padding == "causal":
            pad_left, out = reach, (length - 1) // stride + 1
        else:
            raise _unsupported(op, f"padding={op.padding!r}")
        if out < 1:
            raise _unsupported(op, f"{length} positions are too few for its kernel")
        return LocalNode(
            op.name,
            "window",
            (first,),
            out,
            1,
            _conv_apply(op),
            kernel=kernel,
            dilation=dilation,
            stride=stride,
            pad_left=pad_left,
        )

    def _pool(self, op: Any, first: int) -> LocalNode:
        src = self.nodes[first]
        if op.padding != "valid":
            raise _unsupported(
                op,
                f"padding={op.padding!r} pads with values other than zeros; fast ISM needs "
                "padding='valid' pooling",
            )
        if op.data_format != "channels_last":
            raise _unsupported(op, f"data_format={op.data_format!r}; channels_last only")
        if src.length_axis != 1:
            raise _unsupported(op, "pools along axis 1 but the positions lie on axis 2")
        kernel, stride = op.pool_size[0], op.strides[0]
        out = (src.length - kernel) // stride + 1
        if out < 1:
            raise _unsupported(op, f"{src.length} positions are too few for its pool size")
        return LocalNode(
            op.name, "window", (first,), out, 1, _call_inference(op), kernel=kernel, stride=stride
        )

    def _merge_add(self, op: Any, reads: Sequence[int]) -> LocalNode:
        shapes = {
            (self.nodes[i].length, self.nodes[i].length_axis, self.channels[i]) for i in reads
        }
        if len(shapes) != 1:
            raise _unsupported(
                op,
                "adds tensors of different shapes (length, length axis, channels: "
                f"{sorted(shapes, key=str)}); fast ISM needs identical shapes",
            )
        src = self.nodes[reads[0]]
        return LocalNode(op.name, "add", tuple(reads), src.length, src.length_axis, _add)


class _Tail:
    """The model's nodes after the cut, run from the cut values with ``training=False``.

    Mirrors ``Functional.call``: each node's recorded arguments are filled in from the values
    computed so far, and ``training`` is forced to False on every layer that takes it.
    """

    def __init__(self, graph: Any, cut_tensors: list[Any], nodes: list[Any]) -> None:
        self.graph = graph
        self.cut_tensors = cut_tensors
        self.nodes = nodes

    def __call__(self, *values: Any) -> Any:
        if len(values) != len(self.cut_tensors):
            raise ValueError(f"tail takes {len(self.cut_tensors)} values, got {len(values)}")
        computed = {id(t): v for t, v in zip(self.cut_tensors, values, strict=True)}
        for node in self.nodes:
            args, kwargs = node.arguments.fill_in(computed)
            op = node.operation
            if "training" in getattr(op, "_call_context_args", ()):
                kwargs = {**kwargs, "training": False}
            outputs = op(*args, **kwargs)
            for t, v in zip(node.outputs, keras.tree.flatten(outputs), strict=True):
                computed[id(t)] = v
        flat = [computed[id(t)] for t in self.graph.outputs]
        out = keras.tree.pack_sequence_as(self.graph._outputs_struct, flat)
        if isinstance(out, (list, tuple)) and len(out) == 1:
            return out[0]  # as Functional.call (unpack_singleton)
        return out


def keras_local_graph(model: Any, row_shape: tuple[int, int]) -> LocalGraph:
    """The local prefix of a Keras 3 model for inputs of shape ``(batch, *row_shape)``.

    Parameters
    ----------
    model : keras.Model
        A functional model, or a ``Sequential`` built with an input shape, with one 3-D
        input.
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
    return _Reader(_functional(model), (int(row_shape[0]), int(row_shape[1]))).read()
