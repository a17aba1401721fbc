"""What the torch fast-ISM readers share: a traced node's shape and name, the node being
classified (``Context``), its arguments, and its operation with its tensor input left free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx
from torch import nn

from ..local_graph import LocalNode


def shape_of(node: Any) -> tuple[int, ...] | None:
    """The output shape ``ShapeProp`` recorded for a node (None for non-tensors)."""
    meta = getattr(node, "meta", {}).get("tensor_meta")
    shape = getattr(meta, "shape", None)
    return tuple(shape) if shape is not None else None


def describe(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"layer {module_name(node)!r} ({type(modules[str(node.target)]).__name__})"
    if node.op == "call_function":
        return f"function {getattr(node.target, '__name__', node.target)!s} (node {node.name!r})"
    return f"method .{node.target}() (node {node.name!r})"


def module_name(node: fx.Node) -> str:
    """The module's path in the user's model (the tracing wrapper's prefix removed)."""
    target = str(node.target)
    return target.removeprefix("model.")


class Context:
    """The node being classified, its output shape and its first local input."""

    def __init__(self, node: fx.Node, reader: Any) -> None:
        self.node, self.reader = node, reader
        self.shape: tuple[int, ...] = shape_of(node) or ()
        self.name = describe(node, reader.modules)
        self.tensors = [a for a in node.all_input_nodes if a.op != "get_attr"]
        self.source: LocalNode = reader.local(self.tensors[0])
        self.axis = self.source.length_axis

    def make(
        self, kind: str, apply: Any = None, out_axis: int | None = None, **kw: Any
    ) -> LocalNode:
        axis = self.axis if out_axis is None else out_axis
        shape = self.shape
        return LocalNode(
            self.name,
            kind,  # type: ignore[arg-type]
            tuple(self.reader.position(a) for a in self.tensors),
            shape[axis],
            axis,
            apply,
            channels=shape[3 - axis],
            **kw,
        )


def argument(node: fx.Node, at: int, name: str, default: Any = None) -> Any:
    if len(node.args) > at:
        return node.args[at]
    return node.kwargs.get(name, default)


def bind(node: fx.Node) -> Callable[[torch.Tensor], Any]:
    """The node's operation with its one tensor input left free (constants bound)."""
    (tensor,) = [a for a in node.all_input_nodes if a.op != "get_attr"]
    root = node.graph.owning_module

    def swap(value: Any, x: torch.Tensor) -> Any:
        if value is tensor:
            return x
        if isinstance(value, fx.Node) and value.op == "get_attr":
            return _attribute(root, str(value.target))
        return value

    args, kwargs = node.args, node.kwargs
    if node.op == "call_method":
        method = str(node.target)

        def call_method(x: torch.Tensor) -> torch.Tensor:
            rest = [swap(a, x) for a in args[1:]]
            return getattr(x, method)(*rest, **{k: swap(v, x) for k, v in kwargs.items()})

        return call_method
    function = cast(Any, node.target)

    def call(x: torch.Tensor) -> torch.Tensor:
        return function(*[swap(a, x) for a in args], **{k: swap(v, x) for k, v in kwargs.items()})

    return call


def _attribute(root: Any, target: str) -> Any:
    value = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def reduce_node(ctx: Context, how: str, keepdim: bool) -> LocalNode:
    """A sum (``how="sum"``), mean or maximum over every position of the node's one input,
    keeping that axis as size 1 (``keepdim``) or dropping it."""
    length, axis = ctx.source.length, ctx.axis

    def apply(total: torch.Tensor) -> torch.Tensor:
        out = total / length if how == "mean" else total
        return out.unsqueeze(axis) if keepdim else out

    return LocalNode(
        ctx.name,
        "reduce",
        (ctx.reader.position(ctx.tensors[0]),),
        length,
        axis,
        apply,
        how="max" if how == "max" else "sum",
        channels=ctx.source.channels,
    )
