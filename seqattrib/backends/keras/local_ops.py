"""Which Keras 3 layers are position-local, and what they do to a window (fast ISM).

``classify(op, reads, reader)`` turns one layer call whose tensor inputs are all local into
``LocalNode`` s (a convolution with an activation becomes two: the convolution, then the
activation, so the linear part can run as a transposed convolution of a change), returns a
``NonLocal`` naming why the call ends the prefix, or raises ``GraphUnsupported`` for a local
kind of layer configured in a way that cannot be windowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from ..local_graph import LocalNode
from .nodes import (
    ELEMENTWISE_LAYERS,
    IDENTITY_LAYERS,
    Call,
    NonLocal,
    activation_ok,
    channels_last_axis,
    describe,
    layers,
    plain,
    unsupported,
)
from .window_ops import conv, global_pool, pool

__all__ = ["NonLocal", "classify", "describe"]

_MERGES: dict[type, Callable[..., Any]] = {
    layers.Add: lambda *w: _fold(ops.add, w),
    layers.Subtract: lambda a, b: ops.subtract(a, b),
    layers.Multiply: lambda *w: _fold(ops.multiply, w),
    layers.Maximum: lambda *w: _fold(ops.maximum, w),
    layers.Minimum: lambda *w: _fold(ops.minimum, w),
    layers.Average: lambda *w: _fold(ops.add, w) / len(w),
}


def _fold(op: Callable[[Any, Any], Any], windows: Sequence[Any]) -> Any:
    out = windows[0]
    for w in windows[1:]:
        out = op(out, w)
    return out


def _axes(axis: Any) -> set[int]:
    values = axis if isinstance(axis, (list, tuple)) else [axis]
    return {int(a) % 3 for a in values}


def _identity(w: Any) -> Any:
    return w


def _swap(w: Any) -> Any:
    return ops.transpose(w, (0, 2, 1))


def _call_inference(layer: Any) -> Callable[[Any], Any]:
    def apply(w: Any) -> Any:
        return layer(w, training=False)

    return apply


def classify(
    op: Any, reads: Sequence[int], nodes: list[LocalNode], channels: list[int | None]
) -> LocalNode | list[LocalNode] | NonLocal:
    """A LocalNode (or a convolution and its activation) for a position-local layer call whose
    inputs are the local nodes ``reads``; else why not. Raises for a local kind of layer
    configured in a way that cannot be windowed."""
    if not isinstance(op, keras.Layer):
        return NonLocal(f"the Keras operation '{op.name}' is not a position-local layer")
    if isinstance(op, keras.Model):
        return NonLocal("a model that is not functional (its call() has no layer graph)")
    if isinstance(op, layers.Lambda):
        return NonLocal("arbitrary function; fast ISM needs position-local layers")
    if any(nodes[i].kind == "reduce" or nodes[i].length == 0 for i in reads):
        return NonLocal("it reads a tensor without positions")
    for cls, apply in _MERGES.items():
        if plain(op, cls):
            return _merge(op, reads, nodes, channels, apply, "same")
    if plain(op, layers.Concatenate):
        return _merge(op, reads, nodes, channels, None, "concatenate")
    if len(reads) != 1:
        return NonLocal("it reads several tensors")
    first = reads[0]
    call = Call(op, first, nodes[first], channels[first] or 1)
    return _single(call)


def _single(call: Call) -> LocalNode | list[LocalNode] | NonLocal:
    op, axis, channel_axis = call.op, call.axis, call.channel_axis
    if plain(op, layers.Conv1D):
        return conv(call)
    if plain(op, layers.MaxPooling1D) or plain(op, layers.AveragePooling1D):
        return pool(call)
    if plain(op, layers.GlobalAveragePooling1D) or plain(op, layers.GlobalMaxPooling1D):
        return global_pool(call)
    if plain(op, layers.ZeroPadding1D):
        left, right = (int(p) for p in op.padding)
        if channels_last_axis(getattr(op, "data_format", "channels_last")) != axis:
            return NonLocal(f"pads axis {3 - axis}, not the positions")
        return LocalNode(
            op.name,
            "window",
            (call.first,),
            call.length + left + right,
            axis,
            _identity,
            pad_left=left,
            channels=call.channels,
        )
    if plain(op, layers.Cropping1D):
        left, right = (int(c) for c in op.cropping)
        if axis != 1:  # crops the channels of each position
            return call.pointwise(_call_inference(op), channels=call.channels - left - right)
        return LocalNode(
            op.name,
            "crop",
            (call.first,),
            call.length - left - right,
            1,
            offset=left,
            channels=call.channels,
        )
    if plain(op, layers.Permute):
        if tuple(op.dims) == (1, 2):
            return call.pointwise(_identity)
        return call.pointwise(_swap, channel_axis)
    if plain(op, layers.Dense) and axis == 1:  # acts on the channels of each position
        units = int(op.units)
        return call.pointwise(
            _call_inference(op), channels=units, macs=units * call.channels, fresh=True
        )
    if any(plain(op, cls) for cls in IDENTITY_LAYERS):
        return call.pointwise(_identity)
    return _normalising(call)


def _normalising(call: Call) -> LocalNode | NonLocal:
    """Activations, normalisations, rescaling."""
    op, axis, channel_axis = call.op, call.axis, call.channel_axis
    if any(plain(op, cls) for cls in ELEMENTWISE_LAYERS):
        return call.pointwise(_call_inference(op), fresh=True)
    if plain(op, layers.Activation):
        why = activation_ok(op.activation, channel_axis)
        return NonLocal(why, note=True) if why else call.pointwise(_call_inference(op), fresh=True)
    if plain(op, layers.Softmax):
        if _axes(op.axis) != {channel_axis}:  # e.g. attention pooling: a global op
            return NonLocal(f"softmax over axis {op.axis} mixes positions", note=True)
        return call.pointwise(_call_inference(op), fresh=True)
    if plain(op, layers.BatchNormalization):
        if _axes(op.axis) != {channel_axis}:
            raise unsupported(
                op, f"normalises along axis {op.axis}, not the channel axis {channel_axis}"
            )
        return call.pointwise(_call_inference(op), fresh=True, macs=2 * call.channels)
    if plain(op, layers.LayerNormalization):
        if _axes(op.axis) != {channel_axis}:  # statistics over positions: a global op
            return NonLocal(f"normalises over axes {op.axis}, across positions", note=True)
        return call.pointwise(_call_inference(op), fresh=True)
    if plain(op, layers.PReLU):
        alpha_shape = tuple(op.alpha.shape)
        if alpha_shape[axis - 1] != 1:
            raise unsupported(
                op,
                f"alpha of shape {alpha_shape} varies along the positions; fast ISM needs "
                f"shared_axes=[{axis}]",
            )
        return call.pointwise(_call_inference(op), fresh=True)
    if plain(op, layers.Rescaling):
        sizes = [int(np.size(v)) for v in (op.scale, op.offset)]
        ranks = [int(np.ndim(v)) for v in (op.scale, op.offset)]
        if any(s != 1 for s in sizes) and (axis != 1 or max(ranks) > 1):
            raise unsupported(op, "scale or offset varies along the positions")
        return call.pointwise(_call_inference(op), fresh=True)
    return NonLocal("not a position-local layer")


# ---------------------------------------------------------------------- merges
def _merge(
    op: Any,
    reads: Sequence[int],
    nodes: list[LocalNode],
    channels: list[int | None],
    apply: Callable[..., Any] | None,
    kind: str,
) -> LocalNode:
    sources = [nodes[i] for i in reads]
    lengths = {(s.length, s.length_axis) for s in sources}
    if kind == "same":
        shapes = {
            (s.length, s.length_axis, channels[i]) for s, i in zip(sources, reads, strict=True)
        }
        if len(shapes) != 1:
            raise unsupported(
                op,
                "combines tensors of different shapes (length, length axis, channels: "
                f"{sorted(shapes, key=str)}); fast ISM needs identical shapes",
            )
        total = channels[reads[0]] or 1
    else:
        axis = sources[0].length_axis
        if len(lengths) != 1 or int(op.axis) % 3 != 3 - axis:
            raise unsupported(
                op,
                f"concatenates along axis {op.axis}; fast ISM needs tensors of one length "
                f"joined along their channels (axis {3 - axis})",
            )
        total = sum(channels[i] or 1 for i in reads)
        along = int(op.axis)

        def apply(*windows: Any) -> Any:
            return ops.concatenate(windows, axis=along)

    src = sources[0]
    assert apply is not None
    return LocalNode(
        op.name,
        "merge",
        tuple(reads),
        src.length,
        src.length_axis,
        apply,
        channels=total,
        macs=total,
        fresh=True,
        how="sum" if plain(op, layers.Add) else "",
    )
