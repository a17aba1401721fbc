"""Sliding-window torch operations for fast ISM: convolutions, pooling with its padding, and
constant padding, as ``LocalNode`` s that run on windows in the channels-last format."""

from __future__ import annotations

import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..local_graph import GraphUnsupported, LocalNode
from .nodes import Context, argument, bind


def conv(ctx: Context, m: nn.Conv1d) -> LocalNode:
    if ctx.axis != 2 or m.padding_mode != "zeros":
        raise GraphUnsupported(
            f"{ctx.name}: padding_mode={m.padding_mode!r} on positions along axis {ctx.axis}; "
            "fast ISM supports zero padding on (N, C, L)"
        )
    k, d, s = m.kernel_size[0], m.dilation[0], m.stride[0]
    if m.padding == "same":
        pad = d * (k - 1) // 2
    elif m.padding == "valid":
        pad = 0
    else:
        pad = int(cast(tuple[int, ...], m.padding)[0])

    def apply(w: torch.Tensor, m: nn.Conv1d = m) -> torch.Tensor:
        out = F.conv2d(channels_last(w), m.weight.unsqueeze(2), m.bias, (1, s), 0, (1, d), m.groups)
        return out.squeeze(2)

    flipped: dict[str, Any] = {}

    def transposed(change: torch.Tensor, m: nn.Conv1d = m) -> torch.Tensor:
        groups, weight = m.groups, m.weight
        version = (weight.data_ptr(), weight._version, weight.device)
        if flipped.get("version") != version:  # the weight as a transposed convolution's
            c_out, c_in, _ = weight.shape  # c_in per group
            flipped["weight"] = (
                weight.detach()
                .view(groups, c_out // groups, c_in, k)
                .transpose(1, 2)
                .reshape(groups * c_in, c_out // groups, 1, k)
                .flip(-1)
            )
            flipped["version"] = version
        out = F.conv_transpose2d(
            channels_last(change), flipped["weight"], None, 1, 0, 0, groups, (1, d)
        )
        return out.squeeze(2)

    macs = k * m.in_channels // m.groups * m.out_channels
    return ctx.make(
        "window",
        apply,
        kernel=k,
        dilation=d,
        stride=s,
        pad_left=pad,
        macs=macs,
        fresh=True,
        transposed=transposed if s == 1 else None,
    )


def pool(ctx: Context, kind: str, settings: dict[str, Any]) -> LocalNode:
    """Max or average pooling along the positions, with padding: max pooling reads -inf
    there; an average that counts the padding reads zeros; one that does not reads NaN and
    averages over the values that are not."""
    k = _int(settings["kernel_size"])
    s = _int(settings["stride"] or k)
    pad, d = _int(settings["padding"]), _int(settings["dilation"])
    ceil_mode, counted = settings["ceil_mode"], settings["count_include_pad"]
    if ctx.axis != 2:
        raise GraphUnsupported(f"{ctx.name}: pools along axis 2 but the positions lie on axis 1")
    if kind == "max":
        fill: float = -math.inf

        def apply(w: torch.Tensor) -> torch.Tensor:
            return F.max_pool2d(channels_last(w), (1, k), (1, s), 0, (1, d)).squeeze(2)

    elif counted and not (ceil_mode and pad):
        fill = 0.0

        def apply(w: torch.Tensor) -> torch.Tensor:
            return F.avg_pool2d(channels_last(w), (1, k), (1, s), 0).squeeze(2)

    elif not counted:
        fill = math.nan

        def apply(w: torch.Tensor) -> torch.Tensor:
            return nan_average(w, k, s)

    else:
        raise GraphUnsupported(
            f"{ctx.name}: an average with ceil_mode=True that counts its padding has no "
            "fixed padding value; use ceil_mode=False or count_include_pad=False"
        )
    return ctx.make(
        "window",
        apply,
        kernel=k,
        dilation=d,
        stride=s,
        pad_left=pad,
        fill=fill,
        macs=k * ctx.source.channels,
        fresh=True,
    )


def nan_average(w: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """Average pooling over the values of each window that are not NaN (padding)."""
    valid = ~torch.isnan(w)
    total = F.avg_pool1d(torch.where(valid, w, 0.0), kernel, stride)
    count = F.avg_pool1d(valid.to(w.dtype), kernel, stride)
    return total / count


def channels_last(w: torch.Tensor) -> torch.Tensor:
    """(B, C, W) as a (B, C, 1, W) channels-last tensor: a view of a positions-major window
    (``windows``), a copy of any other. Convolutions and pooling run on windows in this
    format (oneDNN's channels-last kernels), and their outputs stay positions-major."""
    return w.unsqueeze(2).contiguous(memory_format=torch.channels_last)


def pad(ctx: Context, left: int, right: int, value: float) -> LocalNode:
    """Constant padding (or cropping, where negative) of the positions: a window of one tap."""

    def apply(w: torch.Tensor) -> torch.Tensor:
        return w

    return ctx.make("window", apply, pad_left=left, fill=value)


def functional_pad(ctx: Context) -> LocalNode | None:
    node = ctx.node
    widths = tuple(argument(node, 1, "pad"))
    mode = argument(node, 2, "mode", "constant")
    value = argument(node, 3, "value", 0.0)
    if mode != "constant" or not all(isinstance(p, int) for p in widths):
        if ctx.axis == 2 and len(widths) >= 2 and any(widths[:2]):
            raise GraphUnsupported(
                f"{ctx.name}: {mode!r} padding of the positions reads values from inside the "
                "sequence; fast ISM needs constant padding"
            )
        return None
    along = widths[0:2] if ctx.axis == 2 else (widths[2:4] if len(widths) >= 4 else (0, 0))
    other = widths[2:] if ctx.axis == 2 else widths[0:2] + widths[4:]
    if any(other):
        if any(along):
            return None
        return ctx.make("pointwise", bind(node))  # pads the channels of each position
    return pad(ctx, int(along[0]), int(along[1]), float(value or 0.0))


def pair(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[1])


def _int(value: Any) -> int:
    return int(value[0] if isinstance(value, (tuple, list)) else value)
