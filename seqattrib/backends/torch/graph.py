"""Read a torch model's local prefix for fast ISM, through ``torch.fx``.

The model is traced symbolically inside a one-input wrapper (``_Bound``), so optional arguments
stay at their defaults: ``forward(self, X, X_ctl=None, **kwargs)`` traces as ``forward(X)``,
and ``if X_ctl is None`` takes its branch in Python. Shapes come from one example forward pass
(``ShapeProp``); arithmetic on a tensor's length (``X.shape[2] - trimming``) is folded into
constants, and what only the rest of the model reads (the tuple element a wrapper drops) is
removed. Operations that act per position, through a sliding window, across aligned local
tensors, or as a sum, mean or maximum over positions become ``LocalNode`` s
(``local_ops``); the first operation on each path that is anything else ends the prefix, and
everything from there on is copied into a tail ``GraphModule`` whose inputs are the cut nodes.
A model that torch.fx cannot trace raises ``Untraceable``; ``export_graph`` then reads its
``torch.export`` graph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch import nn
from torch.fx.node import map_arg
from torch.fx.passes.shape_prop import ShapeProp

from ..local_graph import GraphUnsupported, LocalGraph, LocalNode, NothingLocal, unread_outputs
from .local_ops import classify
from .nodes import describe, shape_of

#: The batch size, in folded shape arithmetic (its value is not a constant of the graph).
_BATCH = object()


class _Bound(nn.Module):
    """``model`` called with the input only: every other argument at its default."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> Any:
        return self.model(x)


def torch_local_graph(
    model: Any,
    row_shape: tuple[int, int],
    length_axis: int,
    output_fn: Callable[[Any], Any] | None = None,
) -> LocalGraph:
    """The local prefix of ``model`` for inputs of shape ``(batch, *row_shape)``, without the
    operations only outputs that ``output_fn`` never reads need.

    Raises ``GraphUnsupported`` naming the layer when the model cannot be split.
    """
    if not isinstance(model, nn.Module):
        raise NothingLocal(f"{type(model).__name__} is a plain callable, not a torch.nn.Module")
    if type(model).__module__.split(".")[0] == "keras":
        raise NothingLocal(
            "its graph is read for Keras models on the TensorFlow backend only "
            "(this one runs on the torch backend)"
        )
    try:
        traced = fx.symbolic_trace(_Bound(model))
    except Exception as exc:  # noqa: BLE001 - any tracing failure means: no torch.fx graph
        raise Untraceable(
            f"torch.fx could not trace {type(model).__name__} ({type(exc).__name__}: "
            f"{_first_line(exc)}); fast ISM reads models whose forward pass torch.fx can "
            "trace with the input alone (no loops over tensors, no data-dependent branches)",
            exc,
        ) from exc
    (placeholder,) = [n for n in traced.graph.nodes if n.op == "placeholder"]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    example = torch.zeros((2, *row_shape), device=device)
    with torch.no_grad():
        outputs = ShapeProp(traced).propagate(example)
    _drop_unread_outputs(traced, outputs, output_fn)
    shapes = _fold_shapes(traced)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    modules = dict(traced.named_modules())
    _refuse_in_place(traced, modules)
    reader = _Reader(traced, modules, length_axis, shapes)
    return reader.read(placeholder)


def _drop_unread_outputs(
    traced: fx.GraphModule, outputs: Any, output_fn: Callable[[Any], Any] | None
) -> None:
    """Outputs ``output_fn`` never reads become None, so what only they need is dead code."""
    leaves, spec = pytree.tree_flatten(outputs)
    unread = unread_outputs(output_fn, leaves, lambda values: pytree.tree_unflatten(values, spec))
    if not unread:
        return
    (node,) = [n for n in traced.graph.nodes if n.op == "output"]
    returned, returned_spec = pytree.tree_flatten(node.args[0])
    if len(returned) != len(leaves):
        return
    kept = [None if k in unread else value for k, value in enumerate(returned)]
    node.args = (pytree.tree_unflatten(kept, returned_spec),)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


class Untraceable(GraphUnsupported):
    """torch.fx could not trace the model (``error``); its ``torch.export`` graph may still be
    read (``export_graph``)."""

    def __init__(self, message: str, error: Exception) -> None:
        super().__init__(message)
        self.error = error


class _Reader:
    #: turns one node whose tensor inputs are all local into a LocalNode, or None
    classify = staticmethod(classify)

    def __init__(
        self,
        traced: fx.GraphModule,
        modules: dict[str, nn.Module],
        axis: int,
        shapes: dict[fx.Node, Any],
    ) -> None:
        self.traced, self.modules, self.input_axis = traced, modules, axis
        self.shapes = shapes  # nodes computed from tensor shapes only, and their values
        self.nodes: list[LocalNode] = []
        self.index: dict[fx.Node, int] = {}
        self.absorbed: set[fx.Node] = set()  # inner nodes of a block read as one LocalNode

    # ------------------------------------------------------------------ walk
    def read(self, placeholder: fx.Node) -> LocalGraph:
        shape = shape_of(placeholder) or ()
        length = shape[self.input_axis]
        self._add(
            placeholder,
            LocalNode(
                "input", "input", (), length, self.input_axis, channels=shape[3 - self.input_axis]
            ),
        )
        for node in self.traced.graph.nodes:
            if node.op in ("placeholder", "output", "get_attr") or node in self.index:
                continue
            inputs = [a for a in node.all_input_nodes if a.op != "get_attr"]
            if node in self.absorbed or not inputs or not all(a in self.index for a in inputs):
                continue
            local = self.classify(node, self)
            if local is not None:
                self._add(node, local)
        outside = [n for n in self.index if any(self._reads_values(u, n) for u in n.users)]
        if not outside:
            raise GraphUnsupported("the model's output does not depend on its input")
        if outside == [placeholder]:
            first = next(u for u in placeholder.users if u not in self.index)
            raise NothingLocal(f"{self.describe(first)} reads the input directly: nothing to reuse")
        cut = [self.index[n] for n in outside]
        tail = self._tail(outside)
        return LocalGraph(self.nodes, cut, tail, tail_macs=self._tail_macs())

    def _reads_values(self, user: fx.Node, node: fx.Node) -> bool:
        """Whether ``user`` (outside the prefix) needs the values of local ``node`` (not only
        its shape)."""
        return user not in self.index and user not in self.shapes and user not in self.absorbed

    def describe(self, node: fx.Node) -> str:
        """The node's name in messages."""
        return describe(node, self.modules)

    def _add(self, node: fx.Node, local: LocalNode) -> None:
        self.index[node] = len(self.nodes)
        self.nodes.append(local)

    def local(self, node: Any) -> LocalNode | None:
        """The LocalNode of an fx node read so far (for the op classifiers)."""
        return self.nodes[self.index[node]] if node in self.index else None

    def position(self, node: Any) -> int:
        return self.index[node]

    def _tail(self, cut_nodes: list[fx.Node]) -> _Tail:
        graph = fx.Graph()
        env: dict[fx.Node, Any] = {}
        for i, node in enumerate(cut_nodes):
            env[node] = graph.placeholder(f"cut{i}")
        first = env[cut_nodes[0]]
        for node in self.traced.graph.nodes:
            if node in env or node in self.index or node in self.absorbed:
                continue
            if node in self.shapes and any(a in self.index for a in node.all_input_nodes):
                # the shape of a local tensor: its batch size read from the first cut value
                env[node] = graph.call_function(_with_batch, (first, _encoded(self.shapes[node])))
                continue
            env[node] = graph.node_copy(node, lambda n: env[n])
        return _Tail(fx.GraphModule(self.traced, graph))

    def _tail_macs(self) -> float:
        """Multiply-adds per example of the tail's linear and convolution layers."""
        total = 0.0
        for node in self.traced.graph.nodes:
            if node in self.index or node.op != "call_module":
                continue
            module = self.modules[str(node.target)]
            shape = shape_of(node)
            if shape is None or not shape:
                continue
            per_example = float(torch.Size(shape[1:]).numel())
            if isinstance(module, nn.Linear):
                total += per_example * module.in_features
            elif isinstance(module, nn.Conv1d):
                total += per_example * module.kernel_size[0] * module.in_channels / module.groups
        return total


class _Tail:
    """The rest of the model from the cut values, given in the layout the model made them in:
    windows are positions-major in memory (``windows``), and the rest of a model may
    ``view`` them."""

    def __init__(self, module: fx.GraphModule) -> None:
        self.module = module

    def __call__(self, *values: torch.Tensor) -> Any:
        return self.module(*[v.contiguous() for v in values])


# ---------------------------------------------------------------------- shape arithmetic
_ARITHMETIC = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.mod,
    operator.neg,
    max,
    min,
    int,
}


def _fold_shapes(traced: fx.GraphModule) -> dict[fx.Node, Any]:
    """Replace arithmetic on tensor shapes by its constant value (the example pass fixed every
    size but the batch size). Returns the nodes computed from shapes only, with their values
    (``_BATCH`` standing for the batch size)."""
    known: dict[fx.Node, Any] = {}
    for node in list(traced.graph.nodes):
        value = _shape_value(node, known)
        if value is None:
            continue
        known[node] = value
        if isinstance(value, int) and not isinstance(value, bool):
            for user in list(node.users):
                user.args = map_arg(user.args, _Substitute(node, value))
                user.kwargs = map_arg(user.kwargs, _Substitute(node, value))
    return known


class _Substitute:
    """``node`` replaced by its constant value (in ``map_arg``)."""

    def __init__(self, node: fx.Node, value: int) -> None:
        self.node, self.value = node, value

    def __call__(self, arg: fx.Node) -> Any:
        return self.value if arg is self.node else arg


def _encoded(value: Any) -> Any:
    """A folded shape value for generated code: None stands for the batch size."""
    if value is _BATCH:
        return None
    if isinstance(value, tuple):
        return tuple(None if v is _BATCH else v for v in value)
    return value


def _with_batch(reference: torch.Tensor, value: Any) -> Any:
    """An encoded shape value (``_encoded``) with the batch size of ``reference``."""
    if value is None:
        return reference.shape[0]
    if isinstance(value, tuple):
        return torch.Size(reference.shape[0] if v is None else v for v in value)
    return value


def _shape_value(node: fx.Node, known: dict[fx.Node, Any]) -> Any:
    """The value of a shape query or of arithmetic on known sizes; _BATCH for the batch size;
    None when unknown."""
    args = node.args
    if node.op == "call_function" and node.target is torch.ops.aten.sym_size.int:
        shape = shape_of(args[0])
        return None if shape is None else (_BATCH, *shape[1:])[cast(int, args[1])]
    if node.op == "call_function" and node.target is getattr and args[1] == "shape":
        shape = shape_of(args[0])
        return None if shape is None else (_BATCH, *shape[1:])
    if node.op == "call_method" and node.target in ("size", "dim"):
        shape = shape_of(args[0])
        if shape is None:
            return None
        if node.target == "dim":
            return len(shape)
        if len(args) == 1 and not node.kwargs:
            return (_BATCH, *shape[1:])
        dim = args[1] if len(args) > 1 else node.kwargs.get("dim")
        return None if not isinstance(dim, int) else (_BATCH, *shape[1:])[dim]
    if node.op != "call_function":
        return None
    values = [known.get(a, a) if isinstance(a, fx.Node) else a for a in args]
    if any(isinstance(v, fx.Node) for v in values) or node.kwargs:
        return None
    if node.target is operator.getitem and isinstance(values[0], tuple):
        return values[0][values[1]] if isinstance(values[1], int) else None
    if node.target is len and isinstance(values[0], tuple):
        return len(values[0])
    if node.target in _ARITHMETIC and all(isinstance(v, int) or v is _BATCH for v in values):
        function = cast(Callable[..., Any], node.target)
        return _BATCH if any(v is _BATCH for v in values) else function(*values)
    return None


# ---------------------------------------------------------------------- in-place operations
_IN_PLACE_FUNCTIONS = {operator.iadd, operator.isub, operator.imul, operator.itruediv}


def _refuse_in_place(traced: fx.GraphModule, modules: dict[str, nn.Module]) -> None:
    """An operation that overwrites its input would change reference values kept for later
    mutants (or values another layer still reads): no fast path for such a model."""
    for node in traced.graph.nodes:
        in_place = (
            (node.op == "call_module" and getattr(modules[str(node.target)], "inplace", False))
            or (node.op == "call_function" and node.target in _IN_PLACE_FUNCTIONS)
            or (node.op in ("call_function", "call_method") and node.kwargs.get("inplace"))
            or (
                node.op == "call_method"
                and str(node.target).endswith("_")
                and not str(node.target).endswith("__")
            )
        )
        if in_place:
            raise GraphUnsupported(
                f"{describe(node, modules)} works in place; fast ISM needs layers that leave "
                "their inputs unchanged (e.g. inplace=False)"
            )
