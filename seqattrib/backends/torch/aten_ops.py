"""Which aten operations of a ``torch.export`` graph are position-local (fast ISM).

``classify(node, reader)`` is the export reader's counterpart of ``local_ops.classify``: it
turns one aten node whose tensor inputs are all local into a ``LocalNode``, or returns None for
an operation that ends the prefix. Besides the operations of ``local_ops`` (as aten ops), it
reads a *pooling block*: the positions split into groups of p (``reshape`` of (B, C, L) into
(B, C, L / p, p)), operations that act within each group (a 1x1 ``conv2d`` for attention
logits, a softmax over the group, products), and a sum, mean or maximum over the group. That is
Enformer's attention pooling (and einops' ``reduce(x, "b c (n p) -> b c n", "max", p=2)``): one
window node of kernel p and stride p, whose ``apply`` runs the block on a window.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import torch
import torch.fx as fx
from torch.fx.node import map_arg

from ..local_graph import GraphUnsupported, LocalNode
from .nodes import Context, argument, bind, reduce_node, shape_of
from .window_ops import conv, pad, pool

_UNARY = {
    "relu",
    "relu6",
    "gelu",
    "silu",
    "mish",
    "elu",
    "selu",
    "celu",
    "leaky_relu",
    "softplus",
    "sigmoid",
    "tanh",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "abs",
    "neg",
    "sign",
    "square",
    "erf",
    "clamp",
    "clamp_min",
    "clamp_max",
    "clone",
    "_to_copy",
}
#: Pointwise operations that may return their input itself (not a new tensor).
_PASS_THROUGH = {"alias", "detach", "contiguous", "to", "lift_fresh_copy"}
_DROPOUT = {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}
_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "rsub"}
_MERGES = {"add", "sub", "mul", "div", "maximum", "minimum"}
_IN_PLACE_MERGES: dict[str, Callable[..., torch.Tensor]] = {
    "add": torch.Tensor.add_,
    "sub": torch.Tensor.sub_,
    "mul": torch.Tensor.mul_,
}
_COMMUTING = {"add", "mul", "maximum", "minimum"}
_SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax"}
_CONVOLUTIONS = {"conv1d", "convolution"}
#: Reshapes and views (a view of the same shape is pointwise; a split of the positions may
#: start a pooling block).
VIEW_OPS = {"view", "reshape", "_unsafe_view"}
_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max"}


def op_name(node: fx.Node) -> str:
    """The aten operation of a node, without its overload (``conv1d``); "" for anything else."""
    packet = getattr(node.target, "overloadpacket", None)
    return str(getattr(packet, "__name__", "")) if packet is not None else ""


def classify(node: fx.Node, reader: Any) -> LocalNode | None:
    """The LocalNode of aten ``node`` (whose tensor inputs are all local), or None."""
    shape = shape_of(node)
    if shape is None or node.op != "call_function":
        return None
    ctx = Context(node, reader)
    ctx.name = reader.describe(node)
    if any(reader.local(a).kind == "reduce" for a in ctx.tensors):
        return None  # a tensor without positions
    name = op_name(node)
    if name in _REDUCTIONS or name == "adaptive_avg_pool1d":
        return _reduce(ctx, name)
    if name in VIEW_OPS and len(shape) == 4:
        return _pool_block(ctx)
    if len(shape) != 3:
        return None
    if name in _UNARY or name in _PASS_THROUGH or name in _DROPOUT:
        if len(ctx.tensors) != 1 or (name in _DROPOUT and argument(node, 2, "train")):
            return None
        fresh = name in _UNARY
        return ctx.make("pointwise", bind(node), macs=ctx.source.channels, fresh=fresh)
    if name in _BINARY:
        if len(ctx.tensors) == 2 and name in _MERGES:
            return _merge(ctx, name)
        if len(ctx.tensors) == 1 and _constant_operands(ctx, 3):
            return ctx.make("pointwise", bind(node), macs=ctx.source.channels, fresh=True)
        return None
    if name == "cat":
        return _concatenate(ctx)
    if name in _CONVOLUTIONS or (name == "conv2d" and len(shape) == 3):
        return _convolution(ctx, name)
    if name in ("max_pool1d", "avg_pool1d"):
        return _pool(ctx, name)
    if name in ("constant_pad_nd", "pad"):
        return _pad(ctx, name)
    if name in ("slice", "narrow"):
        return _slice(ctx, name)
    if name in ("permute", "transpose"):
        return _transpose(ctx, name)
    if name in VIEW_OPS | {"squeeze"} and shape == shape_of(ctx.tensors[0]):
        return ctx.make("pointwise", bind(node))  # a view that keeps the shape
    return _per_position(ctx, name)


# ---------------------------------------------------------------------- per position
def _per_position(ctx: Context, name: str) -> LocalNode | None:
    """Normalisation, dense layers and softmax over the channels of each position."""
    node, channels = ctx.node, ctx.source.channels
    if len(ctx.tensors) != 1:
        return None
    if name == "batch_norm":
        if argument(node, 5, "training") or ctx.axis != 2:
            return None
        return ctx.make("pointwise", bind(node), macs=2 * channels, fresh=True)
    if name in ("layer_norm", "rms_norm") and ctx.axis == 1:
        if list(argument(node, 1, "normalized_shape")) != [channels]:
            return None
        return ctx.make("pointwise", bind(node), macs=4 * channels, fresh=True)
    if name == "linear" and ctx.axis == 1:
        weight = shape_of(cast(fx.Node, node.args[1])) or (0, 0)
        return ctx.make("pointwise", bind(node), macs=weight[0] * weight[1], fresh=True)
    if name in _SOFTMAX:
        dim = argument(node, 1, "dim")
        if isinstance(dim, int) and dim % 3 == 3 - ctx.axis:
            return ctx.make("pointwise", bind(node), macs=4 * channels, fresh=True)
    return None


def _merge(ctx: Context, name: str) -> LocalNode | None:
    """An op of two local tensors of one length (a residual sum, a gate); the channels of one
    may broadcast (size 1)."""
    node = ctx.node
    args = node.args[:2]
    if not all(isinstance(a, fx.Node) for a in args) or set(node.kwargs) - {"alpha"}:
        return None
    a, b = cast(fx.Node, args[0]), cast(fx.Node, args[1])
    shape_a, shape_b = shape_of(a) or (), shape_of(b) or ()
    axis = ctx.axis
    if ctx.reader.local(b).length_axis != axis or len(shape_a) != 3 or len(shape_b) != 3:
        return None
    if shape_a[axis] != shape_b[axis] or shape_a[0] != shape_b[0]:
        return None
    c_a, c_b = shape_a[3 - axis], shape_b[3 - axis]
    if c_a != c_b and 1 not in (c_a, c_b):
        return None
    function, kwargs = cast(Callable[..., torch.Tensor], node.target), dict(node.kwargs)

    def apply(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return function(x, y, **kwargs)

    overwrite = _IN_PLACE_MERGES.get(name) if shape_a == shape_b else None

    def in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return overwrite(x, y, **kwargs)  # type: ignore[misc]

    plain = kwargs.get("alpha", 1) == 1
    position = ctx.reader.position
    return LocalNode(
        ctx.name,
        "merge",
        (position(a), position(b)),
        ctx.shape[axis],
        axis,
        apply,
        channels=ctx.shape[3 - axis],
        macs=ctx.shape[3 - axis],
        fresh=True,
        in_place=in_place if overwrite is not None else None,
        commutes=bool(name in _COMMUTING and plain and shape_a == shape_b),
        how="sum" if name == "add" and plain else "",
    )


def _concatenate(ctx: Context) -> LocalNode | None:
    """Local tensors of one length joined along their channels."""
    parts = argument(ctx.node, 0, "tensors")
    dim = argument(ctx.node, 1, "dim", 0)
    if not all(isinstance(p, fx.Node) and ctx.reader.local(p) for p in parts):
        return None
    sources = [ctx.reader.local(p) for p in parts]
    if len({(s.length_axis, s.length) for s in sources}) != 1 or dim % 3 != 3 - ctx.axis:
        return None

    def apply(*windows: torch.Tensor) -> torch.Tensor:
        return torch.cat(windows, dim=dim)

    return LocalNode(
        ctx.name,
        "merge",
        tuple(ctx.reader.position(p) for p in parts),
        ctx.shape[ctx.axis],
        ctx.axis,
        apply,
        channels=ctx.shape[3 - ctx.axis],
        fresh=True,
    )


# ---------------------------------------------------------------------- windows
def _convolution(ctx: Context, name: str) -> LocalNode | None:
    node = ctx.node
    weight_node, bias_node = node.args[1], argument(node, 2, "bias")
    if not isinstance(weight_node, fx.Node) or weight_node.op != "get_attr":
        return None
    if name == "convolution":
        if argument(node, 6, "transposed"):
            return None
        groups = argument(node, 8, "groups", 1)
    else:
        groups = argument(node, 6, "groups", 1)
    weight = _attribute(node, weight_node)
    if weight.dim() != 3:
        return None
    padding = argument(node, 4, "padding", [0])
    layer = SimpleNamespace(
        weight=weight,
        bias=_attribute(node, bias_node) if isinstance(bias_node, fx.Node) else None,
        kernel_size=(weight.shape[2],),
        stride=tuple(argument(node, 3, "stride", [1])),
        padding=padding if isinstance(padding, str) else tuple(padding),
        dilation=tuple(argument(node, 5, "dilation", [1])),
        groups=groups,
        padding_mode="zeros",
        in_channels=weight.shape[1] * groups,
        out_channels=weight.shape[0],
    )
    return conv(ctx, cast(Any, layer))


def _pool(ctx: Context, name: str) -> LocalNode:
    node = ctx.node
    kernel = argument(node, 1, "kernel_size")
    settings = {
        "kernel_size": kernel,
        "stride": argument(node, 2, "stride") or kernel,
        "padding": argument(node, 3, "padding", 0),
    }
    if name == "max_pool1d":
        settings |= {
            "dilation": argument(node, 4, "dilation", 1),
            "ceil_mode": argument(node, 5, "ceil_mode", False),
            "count_include_pad": True,
        }
        return pool(ctx, "max", settings)
    settings |= {
        "dilation": 1,
        "ceil_mode": argument(node, 4, "ceil_mode", False),
        "count_include_pad": argument(node, 5, "count_include_pad", True),
    }
    return pool(ctx, "avg", settings)


def _pad(ctx: Context, name: str) -> LocalNode | None:
    node = ctx.node
    widths = list(argument(node, 1, "pad"))
    mode = argument(node, 2, "mode", "constant") if name == "pad" else "constant"
    value = argument(node, 3 if name == "pad" else 2, "value", 0.0)
    along = widths[0:2] if ctx.axis == 2 else (widths[2:4] if len(widths) >= 4 else [0, 0])
    other = widths[2:] if ctx.axis == 2 else widths[0:2] + widths[4:]
    if mode != "constant":
        if any(along):
            raise GraphUnsupported(
                f"{ctx.name}: {mode!r} padding of the positions reads values from inside the "
                "sequence; fast ISM needs constant padding"
            )
        return None
    if any(other):
        return None if any(along) else ctx.make("pointwise", bind(node))
    return pad(ctx, int(along[0]), int(along[1]), float(value or 0.0))


def _slice(ctx: Context, name: str) -> LocalNode | None:
    node = ctx.node
    dim = argument(node, 1, "dim", 0) % 3
    if name == "narrow":
        start, step = argument(node, 2, "start"), 1
    else:
        start, step = argument(node, 2, "start"), argument(node, 4, "step", 1)
    if dim == 3 - ctx.axis:  # a slice of the channels of each position
        return ctx.make("pointwise", bind(node))
    if dim != ctx.axis or step != 1 or not isinstance(start or 0, int):
        return None
    offset, _, _ = slice(start, None).indices(ctx.source.length)
    return ctx.make("crop", offset=offset)


def _transpose(ctx: Context, name: str) -> LocalNode | None:
    args: Any = ctx.node.args[1:]
    dims = tuple(d % 3 for d in (args[0] if name == "permute" else args))
    if dims not in ((1, 2), (2, 1), (0, 2, 1)):
        return None

    def apply(w: torch.Tensor) -> torch.Tensor:
        return w.transpose(1, 2)

    return ctx.make("pointwise", apply, out_axis=3 - ctx.axis)


# ---------------------------------------------------------------------- reductions
def _reduce(ctx: Context, name: str) -> LocalNode | None:
    """A sum, mean or maximum over every position (the output keeps or drops that axis)."""
    node, axis = ctx.node, ctx.axis
    if len(ctx.tensors) != 1 or len(shape_of(ctx.tensors[0]) or ()) != 3:
        return None
    if name == "adaptive_avg_pool1d":
        if list(argument(node, 1, "output_size")) != [1] or axis != 2:
            return None
        how, keepdim = "mean", True
    else:
        dim = argument(node, 1, "dim")
        keepdim = bool(argument(node, 2, "keepdim", False))
        if set(node.kwargs) - {"keepdim"} or not isinstance(dim, (list, tuple)) or len(dim) != 1:
            return None
        if dim[0] % 3 != axis:
            return None
        how = _REDUCTIONS[name]
    return reduce_node(ctx, how, keepdim)


# ---------------------------------------------------------------------- pooling blocks
def _pool_block(ctx: Context) -> LocalNode | None:
    """The positions split into groups of p, operations within each group, and a sum, mean or
    maximum over the group: a window of kernel p and stride p (see the module docstring).

    Registers the block's inner nodes with the reader (``absorbed``) and its last node as the
    one that holds the window node's values (``block_ends``)."""
    reshape, axis = ctx.node, ctx.axis
    source, out = shape_of(ctx.tensors[0]) or (), ctx.shape
    if len(ctx.tensors) != 1 or len(source) != 3:
        return None
    split = out[:axis] == source[:axis] and out[axis + 2 :] == source[axis + 1 :]
    if not split or out[axis] * out[axis + 1] != source[axis]:
        return None
    groups, p = out[axis], out[axis + 1]
    inner, end = _block_nodes(reshape, axis, groups)
    if end is None:
        return None
    end_shape = shape_of(end) or ()
    macs = sum(_block_macs(n, axis) for n in [*inner, end]) / groups
    steps = [*inner[1:], end]

    def apply(w: torch.Tensor) -> torch.Tensor:
        width = w.shape[axis]
        values = {reshape: w.reshape(*w.shape[:axis], width // p, p, *w.shape[axis + 1 :])}
        for step in steps:
            args, kwargs = map_arg((step.args, step.kwargs), lambda n: _value(n, values))
            values[step] = cast(Callable[..., torch.Tensor], step.target)(*args, **kwargs)
        return values[end]

    ctx.reader.absorbed.update(inner[1:])
    ctx.reader.block_ends[reshape] = end
    return LocalNode(
        ctx.reader.describe(end),
        "window",
        (ctx.reader.position(ctx.tensors[0]),),
        end_shape[axis],
        axis,
        apply,
        kernel=p,
        stride=p,
        channels=end_shape[3 - axis],
        macs=macs,
        fresh=True,
    )


def _block_nodes(reshape: fx.Node, axis: int, groups: int) -> tuple[list[fx.Node], Any]:
    """The nodes of a pooling block from its ``reshape`` on, and its last node (a reduction
    over the group axis), or (nodes, None) where the nodes after the reshape are anything
    else or are read from outside the block."""
    inner, end = [reshape], None
    members = {reshape}
    node = reshape.next
    while node.op != "output":
        if any(a in members for a in node.all_input_nodes):
            if end is not None:
                return inner, None
            if _block_end(node, members, axis):
                end = node
            elif _within_groups(node, members, axis, groups):
                inner.append(node)
                members.add(node)
            else:
                return inner, None
        node = node.next
    if any(u not in members and u is not end for n in inner for u in n.users):
        return inner, None
    return inner, end


def _block_end(node: fx.Node, members: set[fx.Node], axis: int) -> bool:
    if op_name(node) not in _REDUCTIONS or not all(a in members for a in node.all_input_nodes):
        return False
    dim = argument(node, 1, "dim")
    keepdim = argument(node, 2, "keepdim", False)
    if node.kwargs.keys() - {"keepdim"} or not isinstance(dim, (list, tuple)) or len(dim) != 1:
        return False
    return not keepdim and dim[0] % 4 == axis + 1 and len(shape_of(node) or ()) == 3


def _within_groups(node: fx.Node, members: set[fx.Node], axis: int, groups: int) -> bool:
    """Whether ``node`` acts within each group of positions of its block inputs: its output
    keeps the groups (axis ``axis`` of a 4-D tensor) and it never mixes them."""
    shape = shape_of(node) or ()
    if node.op != "call_function" or len(shape) != 4 or shape[axis] != groups:
        return False
    others = [a for a in node.all_input_nodes if a not in members]
    if any(a.op != "get_attr" for a in others):
        return False
    name = op_name(node)
    if name in _UNARY or name in _PASS_THROUGH:
        return len(node.all_input_nodes) == 1
    if name in _BINARY:
        return all(_broadcasts(a, axis) for a in others)
    if name in _SOFTMAX:
        dim = argument(node, 1, "dim")
        return isinstance(dim, int) and dim % 4 not in (0, axis)
    if name == "conv2d" and axis == 2:  # (B, C, groups, p): a 1x1 convolution of channels
        weight = shape_of(cast(fx.Node, node.args[1])) or ()
        ones = (None, 1, [1], [1, 1], (1, 1))
        strides_ok = argument(node, 3, "stride", 1) in ones
        padding_ok = argument(node, 4, "padding", 0) in (None, 0, [0], [0, 0], (0, 0))
        dilation_ok = argument(node, 5, "dilation", 1) in ones
        return tuple(weight[2:]) == (1, 1) and strides_ok and padding_ok and dilation_ok
    if name == "linear" and axis == 1:  # (B, groups, p, C): a dense layer on the channels
        return True
    return False


def _broadcasts(node: fx.Node, axis: int) -> bool:
    """A constant tensor that is the same for every group (size 1 along the groups)."""
    shape = shape_of(node) or ()
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return len(padded) == 4 and padded[0] == 1 and padded[axis] == 1


def _block_macs(node: fx.Node, axis: int) -> float:
    """Multiply-adds of a block node (a pooling block's window cost)."""
    shape = shape_of(node) or ()
    per_example = float(math.prod(shape[1:]))
    if op_name(node) in ("conv2d", "linear"):
        weight = shape_of(cast(fx.Node, node.args[1])) or ()
        return per_example * (weight[1] if op_name(node) == "linear" else math.prod(weight[1:]))
    return per_example


# ---------------------------------------------------------------------- helpers
def _constant_operands(ctx: Context, rank: int) -> bool:
    """The node's operands other than its one local tensor are numbers or parameters and
    buffers that do not vary along the positions."""
    for a in (*ctx.node.args, *ctx.node.kwargs.values()):
        if isinstance(a, fx.Node) and a.op == "get_attr":
            shape = shape_of(a) or ()
            padded = (1,) * (rank - len(shape)) + tuple(shape)
            if len(padded) != rank or padded[0] != 1 or padded[ctx.axis] != 1:
                return False
        elif not isinstance(a, (fx.Node, int, float, bool)):
            return False
    return True


def _attribute(node: fx.Node, attribute: fx.Node) -> Any:
    value: Any = node.graph.owning_module
    for part in str(attribute.target).split("."):
        value = getattr(value, part)
    return value


def _value(node: fx.Node, values: dict[fx.Node, torch.Tensor]) -> Any:
    if node in values:
        return values[node]
    return _attribute(node, node)
