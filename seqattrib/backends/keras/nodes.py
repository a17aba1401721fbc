"""What the Keras fast-ISM readers share: why a call is not local, a layer's name and kind,
activations that act per position, padding rules, and the call being classified (``Call``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras

from ..local_graph import GraphUnsupported, LocalNode

layers = keras.layers

#: Identity at inference (the tail and ``model(x, training=False)`` agree).
IDENTITY_LAYERS: tuple[type, ...] = tuple(
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
ELEMENTWISE_LAYERS: tuple[type, ...] = (layers.ReLU, layers.LeakyReLU, layers.ELU)
#: Keras activations that act along axis -1 (all others are elementwise).
LAST_AXIS_ACTIVATIONS = {"softmax", "log_softmax", "glu", "sparsemax"}
#: TensorFlow functions passed as activations that are elementwise, by name.
TF_ELEMENTWISE = {
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
KERAS_ACTIVATIONS = {
    id(getattr(keras.activations, name))
    for name in dir(keras.activations)
    if not name.startswith("_") and callable(getattr(keras.activations, name))
}


class NonLocal:
    """Why a layer call ends the prefix (for the message when it reads the input directly);
    ``note``: worth a line in ``LocalGraph.notes`` (a layer of a local kind sent to the tail)."""

    def __init__(self, reason: str, note: bool = False) -> None:
        self.reason = reason
        self.note = note


def describe(op: Any) -> str:
    return f"layer '{op.name}' ({type(op).__name__})"


def plain(layer: Any, cls: type) -> bool:
    """``layer`` is a ``cls`` whose ``call`` is the Keras one (not a subclass overriding it)."""
    own = getattr(type(layer), "call", None)
    return isinstance(layer, cls) and own is getattr(cls, "call", None)


def unsupported(op: Any, why: str) -> GraphUnsupported:
    return GraphUnsupported(f"{describe(op)}: {why}")


def activation_ok(fn: Any, channel_axis: int) -> str | None:
    """None when ``fn`` acts per position on a tensor with channels on ``channel_axis``, else
    why not."""
    name = getattr(fn, "__name__", type(fn).__name__)
    if id(fn) in KERAS_ACTIVATIONS:
        if name in LAST_AXIS_ACTIVATIONS and channel_axis != 2:
            return f"activation '{name}' acts along the positions (axis -1)"
        return None
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("tensorflow") and name in TF_ELEMENTWISE:
        return None
    return (
        f"activation {name!r} is a custom function, so fast ISM cannot tell that it acts per "
        "position"
    )


def linear(fn: Any) -> bool:
    return fn is None or fn is keras.activations.linear or getattr(fn, "__name__", "") == "linear"


def same_pad_left(length: int, kernel: int, stride: int, dilation: int) -> int:
    """TensorFlow's "SAME" rule: the extra padding goes on the right."""
    total = max((math.ceil(length / stride) - 1) * stride + (kernel - 1) * dilation + 1 - length, 0)
    return total // 2


def channels_last_axis(data_format: str) -> int:
    return 1 if data_format == "channels_last" else 2


class Call:
    """One layer call being classified: its single local input, axes and a node builder."""

    def __init__(self, op: Any, first: int, src: LocalNode, channels: int) -> None:
        self.op, self.first, self.src = op, first, src
        self.length, self.axis = src.length, src.length_axis
        self.channel_axis = 3 - self.axis
        self.channels = channels  # the input's channels

    def pointwise(
        self, apply: Callable[..., Any], out_axis: int | None = None, **kw: Any
    ) -> LocalNode:
        axis = self.axis if out_axis is None else out_axis
        kw.setdefault("channels", self.channels)
        kw.setdefault("macs", self.channels)
        return LocalNode(self.op.name, "pointwise", (self.first,), self.length, axis, apply, **kw)
