"""Which torch operations are position-local, and what they do to a window (fast ISM).

``classify(node, reader)`` turns one traced ``torch.fx`` node whose tensor inputs are all local
into a ``LocalNode``, returns None for an operation that ends the prefix (dense layers on the
flattened tensor, unknown functions), or raises ``GraphUnsupported`` for a local kind of
operation configured in a way that cannot be windowed (circular padding).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from ..local_graph import GraphUnsupported, LocalNode
from .nodes import Context, argument, bind, reduce_node, shape_of
from .window_ops import conv, functional_pad, pad, pair, pool

_POINTWISE_MODULES = (
    nn.ReLU,
    nn.ReLU6,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.LeakyReLU,
    nn.Softplus,
    nn.Sigmoid,
    nn.Tanh,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Identity,
    nn.Dropout,
    nn.Dropout1d,
    nn.AlphaDropout,
)
_POINTWISE_FUNCTIONS = {
    torch.relu,
    F.relu,
    F.relu6,
    F.gelu,
    F.silu,
    F.mish,
    F.elu,
    F.selu,
    F.leaky_relu,
    F.softplus,
    F.hardtanh,
    F.hardswish,
    F.hardsigmoid,
    torch.sigmoid,
    F.sigmoid,
    torch.tanh,
    F.tanh,
    torch.exp,
    torch.log,
    torch.sqrt,
    torch.abs,
    torch.neg,
    torch.square,
    torch.clamp,
    F.dropout,
}
_POINTWISE_METHODS = {
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "abs",
    "neg",
    "square",
    "clamp",
    "contiguous",
    "float",
    "clone",
    "detach",
}
_SCALAR_OPS = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.pow,
    torch.add,
    torch.sub,
    torch.mul,
    torch.div,
    torch.pow,
}
_MERGE_OPS: dict[Any, Callable[..., Any]] = {
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.truediv: operator.truediv,
    torch.add: torch.add,
    torch.sub: torch.sub,
    torch.mul: torch.mul,
    torch.maximum: torch.maximum,
    torch.minimum: torch.minimum,
}
#: In-place forms of activations whose output is a new tensor.
_IN_PLACE_MODULES: dict[type, Callable[[torch.Tensor], torch.Tensor]] = {
    nn.ReLU: torch.relu_,
    nn.Sigmoid: torch.sigmoid_,
    nn.Tanh: torch.tanh_,
}
_IN_PLACE_FUNCTIONS: dict[Any, Callable[[torch.Tensor], torch.Tensor]] = {
    torch.relu: torch.relu_,
    F.relu: torch.relu_,
    torch.sigmoid: torch.sigmoid_,
    F.sigmoid: torch.sigmoid_,
    torch.tanh: torch.tanh_,
    F.tanh: torch.tanh_,
    torch.exp: torch.exp_,
}
_IN_PLACE_METHODS = {"relu": torch.relu_, "sigmoid": torch.sigmoid_, "tanh": torch.tanh_}
#: Activations that may return their input itself (not a new tensor).
_PASS_THROUGH_MODULES = (nn.Identity, nn.Dropout, nn.Dropout1d, nn.AlphaDropout)
_PASS_THROUGH = {F.dropout, "contiguous", "float", "detach"}
_IN_PLACE_MERGES: dict[Any, Callable[..., torch.Tensor]] = {
    operator.add: torch.Tensor.add_,
    torch.add: torch.Tensor.add_,
    operator.sub: torch.Tensor.sub_,
    torch.sub: torch.Tensor.sub_,
    operator.mul: torch.Tensor.mul_,
    torch.mul: torch.Tensor.mul_,
}
_COMMUTING = {operator.add, torch.add, operator.mul, torch.mul, torch.maximum, torch.minimum}
_POOL_FUNCTIONS = {F.max_pool1d: "max", F.avg_pool1d: "avg"}
_REDUCE_FUNCTIONS = {torch.mean: "mean", torch.sum: "sum", torch.amax: "max"}
_REDUCE_METHODS = {"mean": "mean", "sum": "sum", "amax": "max"}
_ADAPTIVE = {F.adaptive_avg_pool1d: "mean", F.adaptive_max_pool1d: "max"}


def classify(node: fx.Node, reader: Any) -> LocalNode | None:
    """The LocalNode of ``node`` (whose tensor inputs are all local), or None."""
    shape = shape_of(node)
    if shape is None:
        return None
    ctx = Context(node, reader)
    if any(reader.local(a).kind == "reduce" for a in ctx.tensors):
        return None  # a tensor without positions
    reduced = _reduce(ctx)
    if reduced is not None or len(shape) != 3:
        return reduced
    if node.op == "call_module":
        return _module(ctx, reader.modules[str(node.target)])
    if node.op == "call_function":
        return _function(ctx)
    if node.op == "call_method":
        return _method(ctx)
    return None


# ---------------------------------------------------------------------- modules
def _module(ctx: Context, module: nn.Module) -> LocalNode | None:
    if isinstance(module, _POINTWISE_MODULES):
        fresh = not isinstance(module, _PASS_THROUGH_MODULES)
        in_place = _IN_PLACE_MODULES.get(type(module))
        return ctx.make(
            "pointwise", module, macs=ctx.source.channels, fresh=fresh, in_place=in_place
        )
    if isinstance(module, nn.BatchNorm1d):
        if not module.track_running_stats or ctx.axis != 2:
            raise GraphUnsupported(f"{ctx.name}: needs running statistics on (N, C, L)")
        return ctx.make("pointwise", module, macs=2 * ctx.source.channels, fresh=True)
    if isinstance(module, nn.LayerNorm) and ctx.axis == 1:
        if tuple(module.normalized_shape) == (ctx.source.channels,):
            return ctx.make("pointwise", module, macs=4 * ctx.source.channels, fresh=True)
        return None
    if isinstance(module, nn.Linear) and ctx.axis == 1:  # per position, on (N, L, C)
        macs = module.in_features * module.out_features
        return ctx.make("pointwise", module, macs=macs, fresh=True)
    if isinstance(module, nn.Conv1d):
        return conv(ctx, module)
    if isinstance(module, (nn.MaxPool1d, nn.AvgPool1d)):
        avg = isinstance(module, nn.AvgPool1d)
        settings = {
            "kernel_size": module.kernel_size,
            "stride": module.stride,
            "padding": module.padding,
            "dilation": 1 if avg else module.dilation,
            "ceil_mode": module.ceil_mode,
            "count_include_pad": getattr(module, "count_include_pad", True),
        }
        return pool(ctx, "avg" if avg else "max", settings)
    if isinstance(module, (nn.ConstantPad1d, nn.ZeroPad1d)):
        left, right = pair(module.padding)
        return pad(ctx, left, right, float(getattr(module, "value", 0.0)))
    return None


# ---------------------------------------------------------------------- functions
def _function(ctx: Context) -> LocalNode | None:
    node, target = ctx.node, ctx.node.target
    if target in _POINTWISE_FUNCTIONS and len(ctx.tensors) == 1:
        plain = len(node.args) == 1 and not node.kwargs
        in_place = _IN_PLACE_FUNCTIONS.get(target) if plain else None
        fresh = target not in _PASS_THROUGH
        return ctx.make(
            "pointwise", bind(node), macs=ctx.source.channels, fresh=fresh, in_place=in_place
        )
    if target in (F.softmax, F.log_softmax, torch.softmax, torch.log_softmax):
        dim = argument(node, 1, "dim")
        if len(ctx.tensors) == 1 and isinstance(dim, int) and dim % 3 == 3 - ctx.axis:
            return ctx.make("pointwise", bind(node), macs=4 * ctx.source.channels)
        return None
    if target in _POOL_FUNCTIONS and len(ctx.tensors) == 1:
        kind = _POOL_FUNCTIONS[cast(Any, target)]
        names = ["kernel_size", "stride", "padding"]
        names += ["dilation", "ceil_mode"] if kind == "max" else ["ceil_mode", "count_include_pad"]
        values = dict(zip(names, node.args[1:], strict=False)) | dict(node.kwargs)
        settings = {
            "kernel_size": values["kernel_size"],
            "stride": values.get("stride"),
            "padding": values.get("padding", 0),
            "dilation": values.get("dilation", 1),
            "ceil_mode": values.get("ceil_mode", False),
            "count_include_pad": values.get("count_include_pad", True),
        }
        return pool(ctx, kind, settings)
    if target is F.pad and len(ctx.tensors) == 1:
        return functional_pad(ctx)
    if target in _MERGE_OPS and len(ctx.tensors) == 2:
        return _merge(ctx, _MERGE_OPS[cast(Any, target)])
    if target in (torch.cat, torch.concat, torch.concatenate):
        return _concatenate(ctx)
    if target in _SCALAR_OPS and _constant_operand(ctx):
        return ctx.make("pointwise", bind(node), macs=ctx.source.channels, fresh=True)
    if target is operator.getitem:
        return _crop(ctx)
    if target in (torch.transpose, torch.permute):
        return _transpose(ctx, node.args[1:])
    return None


def _merge(ctx: Context, op: Callable[..., Any]) -> LocalNode | None:
    """An op of two local tensors of one shape (a residual sum, a gate)."""
    node = ctx.node
    args = node.args[:2]
    if not all(isinstance(a, fx.Node) for a in args) or set(node.kwargs) - {"alpha"}:
        return None
    a, b = cast(fx.Node, args[0]), cast(fx.Node, args[1])
    if shape_of(a) != shape_of(b) or ctx.reader.local(b).length_axis != ctx.axis:
        return None
    kwargs = dict(node.kwargs)

    def apply(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return op(x, y, **kwargs)

    overwrite = _IN_PLACE_MERGES.get(node.target)

    def in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return overwrite(x, y, **kwargs)  # type: ignore[misc]

    # inputs from the arguments, not all_input_nodes: ``h + h`` has two inputs
    position = ctx.reader.position
    return LocalNode(
        ctx.name,
        "merge",
        (position(a), position(b)),
        ctx.shape[ctx.axis],
        ctx.axis,
        apply,
        channels=ctx.shape[3 - ctx.axis],
        macs=ctx.source.channels,
        fresh=True,
        in_place=in_place if overwrite is not None else None,
        commutes=bool(
            op in _COMMUTING and set(kwargs) <= {"alpha"} and kwargs.get("alpha", 1) == 1
        ),
        how="sum" if op in (operator.add, torch.add) and kwargs.get("alpha", 1) == 1 else "",
    )


def _concatenate(ctx: Context) -> LocalNode | None:
    """Local tensors of one length joined along their channels."""
    node = ctx.node
    parts = argument(node, 0, "tensors")
    dim = argument(node, 1, "dim", 0)
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, fx.Node) for p in parts):
        return None
    sources = [ctx.reader.local(p) for p in parts]
    if any(s is None for s in sources) or not isinstance(dim, int):
        return None
    axes = {s.length_axis for s in sources}
    lengths = {s.length for s in sources}
    if len(axes) != 1 or len(lengths) != 1 or dim % 3 != 3 - ctx.axis:
        return None

    def apply(*windows: torch.Tensor) -> torch.Tensor:
        return torch.cat(windows, dim=dim)

    position = ctx.reader.position
    return LocalNode(
        ctx.name,
        "merge",
        tuple(position(p) for p in parts),
        ctx.shape[ctx.axis],
        ctx.axis,
        apply,
        channels=ctx.shape[3 - ctx.axis],
        fresh=True,
    )


def _crop(ctx: Context) -> LocalNode | None:
    index: Any = ctx.node.args[1]
    if not isinstance(index, tuple):
        return None
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (4 - len(index)) + index[at + 1 :]
    index = index + (slice(None),) * (3 - len(index))
    if len(index) != 3 or not all(isinstance(i, slice) for i in index):
        return None
    if index[0] != slice(None):
        return None
    item = index[ctx.axis]
    channels = index[3 - ctx.axis]
    if item == slice(None):  # a slice of the channels of each position
        return ctx.make("pointwise", bind(ctx.node))
    if channels != slice(None) or item.step not in (None, 1):
        return None
    start, _, _ = item.indices(ctx.source.length)
    return ctx.make("crop", offset=start)


def _transpose(ctx: Context, dims: Any) -> LocalNode | None:
    dims = tuple(d % 3 if isinstance(d, int) else d for d in dims)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(d % 3 for d in dims[0])
    if dims not in ((1, 2), (2, 1), (0, 2, 1)):
        return None

    def apply(w: torch.Tensor) -> torch.Tensor:
        return w.transpose(1, 2)

    return ctx.make("pointwise", apply, out_axis=3 - ctx.axis)


# ---------------------------------------------------------------------- methods
def _method(ctx: Context) -> LocalNode | None:
    node = ctx.node
    if node.target in _POINTWISE_METHODS and len(ctx.tensors) == 1:
        plain = len(node.args) == 1 and not node.kwargs
        in_place = _IN_PLACE_METHODS.get(str(node.target)) if plain else None
        fresh = node.target not in _PASS_THROUGH
        return ctx.make(
            "pointwise", bind(node), macs=ctx.source.channels, fresh=fresh, in_place=in_place
        )
    if node.target in ("transpose", "permute"):
        return _transpose(ctx, node.args[1:])
    return None


# ---------------------------------------------------------------------- reductions
def _reduce(ctx: Context) -> LocalNode | None:
    """A sum, mean or maximum over every position (the output keeps or drops that axis)."""
    node = ctx.node
    if len(ctx.tensors) != 1:
        return None
    how, keepdim = None, False
    if node.op in ("call_function", "call_method"):
        table = _REDUCE_FUNCTIONS if node.op == "call_function" else _REDUCE_METHODS
        how = cast(dict[Any, str], table).get(node.target)
        if how is not None:
            dim = argument(node, 1, "dim")
            keepdim = bool(argument(node, 2, "keepdim", False))
            if set(node.kwargs) - {"dim", "keepdim"}:
                return None
            if isinstance(dim, (tuple, list)) and len(dim) == 1:
                dim = dim[0]
            if not isinstance(dim, int) or dim % 3 != ctx.axis:
                return None
        elif node.op == "call_function" and node.target in _ADAPTIVE:
            how, keepdim = _ADAPTIVE[cast(Any, node.target)], True
            if argument(node, 1, "output_size") not in (1, (1,), [1]) or ctx.axis != 2:
                return None
    elif node.op == "call_module":
        module = ctx.reader.modules[str(node.target)]
        if isinstance(module, (nn.AdaptiveAvgPool1d, nn.AdaptiveMaxPool1d)):
            if module.output_size not in (1, (1,)) or ctx.axis != 2:
                return None
            how = "mean" if isinstance(module, nn.AdaptiveAvgPool1d) else "max"
            keepdim = True
    if how is None:
        return None
    return reduce_node(ctx, how, keepdim)


# ---------------------------------------------------------------------- helpers
def _constant_operand(ctx: Context) -> bool:
    """One local tensor and constants: numbers, or parameters and buffers that do not vary
    along the positions."""
    node = ctx.node
    if set(node.kwargs) - {"alpha"} or len(ctx.tensors) != 1:
        return False
    for a in node.args:
        if isinstance(a, fx.Node) and a.op == "get_attr":
            shape = shape_of(a) or ()
            padded = (1,) * (3 - len(shape)) + tuple(shape)
            if len(padded) != 3 or padded[0] != 1 or padded[ctx.axis] != 1:
                return False
        elif not isinstance(a, (fx.Node, int, float)):
            return False
    return True
