"""Sliding-window Keras layers for fast ISM: convolutions (their activation a separate node, so
the linear part can run as a transposed convolution of a change), pooling with its padding
value, and global pooling (a reduction over every position)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from keras import ops

from ..local_graph import LocalNode
from .nodes import (
    Call,
    NonLocal,
    activation_ok,
    channels_last_axis,
    layers,
    linear,
    plain,
    same_pad_left,
    unsupported,
)


# ---------------------------------------------------------------------- convolution
def conv(call: Call) -> LocalNode | list[LocalNode] | NonLocal:
    op = call.op
    fmt = op.data_format
    if channels_last_axis(fmt) != call.axis:
        raise unsupported(
            op,
            f"data_format={fmt!r} convolves along axis {channels_last_axis(fmt)} but the "
            f"positions lie on axis {call.axis} (a Permute((2, 1)) in front would swap them)",
        )
    if getattr(op, "quantization_mode", None):
        return NonLocal(f"quantized ({op.quantization_mode}) convolution", note=True)
    activation = None if linear(op.activation) else op.activation
    if activation is not None:
        why = activation_ok(activation, call.channel_axis)
        if why:
            return NonLocal(why, note=True)
    kernel, stride, dilation = op.kernel_size[0], op.strides[0], op.dilation_rate[0]
    length = call.length
    reach = (kernel - 1) * dilation
    if op.padding == "valid":
        pad_left, out = 0, (length - reach - 1) // stride + 1
    elif op.padding == "same":
        pad_left, out = same_pad_left(length, kernel, stride, dilation), -(-length // stride)
    elif op.padding == "causal":
        pad_left, out = reach, (length - 1) // stride + 1
    else:
        raise unsupported(op, f"padding={op.padding!r}")
    if out < 1:
        raise unsupported(op, f"{length} positions are too few for its kernel")
    filters = int(op.filters)
    groups = int(getattr(op, "groups", 1))
    conv = LocalNode(
        op.name,
        "window",
        (call.first,),
        out,
        call.axis,
        _conv_apply(op),
        kernel=kernel,
        dilation=dilation,
        stride=stride,
        pad_left=pad_left,
        channels=filters,
        macs=kernel * call.channels // groups * filters,
        fresh=True,
        transposed=_conv_transposed(op) if stride == 1 and groups == 1 else None,
    )
    if activation is None:
        return conv
    act = LocalNode(
        f"{op.name} activation",
        "pointwise",
        (-1,),  # the convolution
        out,
        call.axis,
        activation,
        channels=filters,
        macs=filters,
        fresh=True,
    )
    return [conv, act]


def _bias_shape(layer: Any) -> tuple[int, ...]:
    return (1, -1, 1) if layer.data_format == "channels_first" else (1, 1, -1)


def _conv_apply(layer: Any) -> Callable[[Any], Any]:
    """The layer's convolution with valid padding, plus bias (no activation)."""

    def apply(w: Any) -> Any:
        dtype = layer.compute_dtype
        out = ops.conv(
            ops.cast(w, dtype),
            ops.cast(layer.kernel, dtype),
            strides=list(layer.strides),
            padding="valid",
            dilation_rate=list(layer.dilation_rate),
            data_format=layer.data_format,
        )
        if layer.use_bias:
            out = out + ops.reshape(ops.cast(layer.bias, dtype), _bias_shape(layer))
        return out

    return apply


def _conv_transposed(layer: Any) -> Callable[[Any], Any]:
    """The convolution (no bias) of an input change, over every output position the change
    reaches: a transposed convolution with the flipped kernel."""

    def transposed(change: Any) -> Any:
        dtype = layer.compute_dtype
        kernel = ops.flip(ops.transpose(ops.cast(layer.kernel, dtype), (0, 2, 1)), axis=0)
        out = ops.conv_transpose(
            ops.cast(change, dtype),
            kernel,
            strides=1,
            padding="valid",
            dilation_rate=layer.dilation_rate[0],
            data_format=layer.data_format,
        )
        return out

    return transposed


# ---------------------------------------------------------------------- pooling
def pool(call: Call) -> LocalNode:
    op = call.op
    fmt = op.data_format
    if channels_last_axis(fmt) != call.axis:
        raise unsupported(op, f"data_format={fmt!r} pools an axis that does not hold the positions")
    kernel, stride = op.pool_size[0], op.strides[0]
    maximum = plain(op, layers.MaxPooling1D)
    if op.padding == "valid":
        pad_left, out = 0, (call.length - kernel) // stride + 1
    elif op.padding == "same":
        pad_left, out = same_pad_left(call.length, kernel, stride, 1), -(-call.length // stride)
    else:
        raise unsupported(op, f"padding={op.padding!r}")
    if out < 1:
        raise unsupported(op, f"{call.length} positions are too few for its pool size")
    # "same" max pooling ignores its padding (-inf); "same" average pooling leaves it out of
    # the count (NaN, averaged over the values that are not)
    fill = -math.inf if maximum else (math.nan if op.padding == "same" else 0.0)

    def apply(w: Any) -> Any:
        pool = ops.max_pool if maximum else ops.average_pool
        if not maximum and op.padding == "same":
            valid = ops.logical_not(ops.isnan(w))
            total = ops.average_pool(ops.where(valid, w, 0.0), kernel, stride, "valid", fmt)
            count = ops.average_pool(ops.cast(valid, w.dtype), kernel, stride, "valid", fmt)
            return total / count
        return pool(w, kernel, stride, "valid", fmt)

    return LocalNode(
        op.name,
        "window",
        (call.first,),
        out,
        call.axis,
        apply,
        kernel=kernel,
        stride=stride,
        pad_left=pad_left,
        fill=fill,
        channels=call.channels,
        macs=kernel * call.channels,
        fresh=True,
    )


def global_pool(call: Call) -> LocalNode:
    op = call.op
    if channels_last_axis(op.data_format) != call.axis:
        raise unsupported(op, f"data_format={op.data_format!r} pools an axis without positions")
    mean = plain(op, layers.GlobalAveragePooling1D)
    keepdims = bool(getattr(op, "keepdims", False))
    length, axis = call.length, call.axis

    def apply(total: Any) -> Any:
        out = total / length if mean else total
        return ops.expand_dims(out, axis) if keepdims else out

    return LocalNode(
        op.name,
        "reduce",
        (call.first,),
        length,
        axis,
        apply,
        how="sum" if mean else "max",
        channels=call.channels,
    )
