"""Read a torch model's local prefix for fast ISM, through ``torch.fx``.

The model is traced symbolically; shapes come from one example forward pass (``ShapeProp``).
Operations that act per position or through a sliding window become ``LocalNode`` s; the first
operation on each path that is anything else (``Linear`` on a flattened tensor, a mean over
positions, an unknown function) ends the prefix, and everything from there on is copied into a
tail ``GraphModule`` whose inputs are the cut nodes.
"""

from __future__ import annotations

import operator
from typing import Any, cast

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from ._local_graph import GraphUnsupported, LocalGraph, LocalNode, NothingLocal

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
    torch.sigmoid,
    F.sigmoid,
    torch.tanh,
    F.tanh,
    torch.exp,
    torch.square,
    F.dropout,
    torch.nn.functional.hardtanh,
}
_POINTWISE_METHODS = {"relu", "sigmoid", "tanh", "exp", "square", "contiguous", "float"}
_SCALAR_OPS = {operator.add, operator.sub, operator.mul, operator.truediv, torch.add, torch.mul}
_POOL_FUNCTIONS = {F.max_pool1d: "max", F.avg_pool1d: "avg"}


def torch_local_graph(model: Any, row_shape: tuple[int, int], length_axis: int) -> LocalGraph:
    """The local prefix of ``model`` for inputs of shape ``(batch, *row_shape)``.

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
        traced = fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - any tracing failure means: no fast path
        raise GraphUnsupported(
            f"torch.fx could not trace {type(model).__name__} ({type(exc).__name__}: {exc})"
        ) from exc
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise GraphUnsupported(f"{type(model).__name__} takes {len(placeholders)} inputs, not 1")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    example = torch.zeros((1, *row_shape), device=device)
    with torch.no_grad():
        ShapeProp(traced).propagate(example)
    modules = dict(traced.named_modules())
    _refuse_in_place(traced, modules)
    reader = _Reader(traced, modules, length_axis)
    return reader.read(placeholders[0])


class _Reader:
    def __init__(self, traced: fx.GraphModule, modules: dict[str, nn.Module], axis: int) -> None:
        self.traced, self.modules, self.input_axis = traced, modules, axis
        self.nodes: list[LocalNode] = []
        self.index: dict[fx.Node, int] = {}

    # ------------------------------------------------------------------ walk
    def read(self, placeholder: fx.Node) -> LocalGraph:
        length = (_shape(placeholder) or ())[self.input_axis]
        self._add(placeholder, LocalNode("input", "input", (), length, self.input_axis))
        for node in self.traced.graph.nodes:
            if node.op in ("placeholder", "output", "get_attr") or node in self.index:
                continue
            inputs = [a for a in node.all_input_nodes if a.op != "get_attr"]
            if not inputs or not all(a in self.index for a in inputs):
                continue
            local = self._local(node)
            if local is not None:
                self._add(node, local)
        users_outside = [
            n for n in self.index if any(u not in self.index for u in n.users)
        ]  # read by the rest of the model (or the output)
        if not users_outside:
            raise GraphUnsupported("the model's output does not depend on its input")
        if users_outside == [placeholder]:
            first = next(u for u in placeholder.users if u not in self.index)
            raise NothingLocal(
                f"{_describe(first, self.modules)} reads the input directly: nothing to reuse"
            )
        cut = [self.index[n] for n in users_outside]
        return LocalGraph(self.nodes, cut, self._tail(users_outside))

    def _add(self, node: fx.Node, local: LocalNode) -> None:
        self.index[node] = len(self.nodes)
        self.nodes.append(local)

    def _tail(self, cut_nodes: list[fx.Node]) -> fx.GraphModule:
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        for i, node in enumerate(cut_nodes):
            env[node] = graph.placeholder(f"cut{i}")
        for node in self.traced.graph.nodes:
            if node in env or node in self.index:
                continue
            env[node] = graph.node_copy(node, lambda n: env[n])
        return fx.GraphModule(self.traced, graph)

    # ------------------------------------------------------------------ one node
    def _local(self, node: fx.Node) -> LocalNode | None:
        shape = _shape(node)
        if shape is None or len(shape) != 3:
            return None
        name = _describe(node, self.modules)
        parent = node.all_input_nodes[0]
        if parent not in self.index:
            return None
        source = self.nodes[self.index[parent]]
        axis = source.length_axis

        def make(kind: str, apply: Any = None, out_axis: int = axis, **kw: Any) -> LocalNode:
            return LocalNode(
                name,
                kind,  # type: ignore[arg-type]
                tuple(self.index[a] for a in node.all_input_nodes if a.op != "get_attr"),
                shape[out_axis],
                out_axis,
                apply,
                **kw,
            )

        if node.op == "call_module":
            module = self.modules[str(node.target)]
            if isinstance(module, _POINTWISE_MODULES):
                return make("pointwise", module)
            if isinstance(module, nn.BatchNorm1d):
                if not module.track_running_stats or axis != 2:
                    raise GraphUnsupported(f"{name}: needs running statistics on (N, C, L)")
                return make("pointwise", module)
            if isinstance(module, nn.Conv1d):
                return self._conv(module, name, axis, make)
            if isinstance(module, (nn.MaxPool1d, nn.AvgPool1d)):
                return self._pool(module, name, axis, make)
            return None
        if node.op == "call_function":
            target = node.target
            if target in _POINTWISE_FUNCTIONS and _only_tensor_arg(node):
                return make("pointwise", _bind(node))
            if target in _POOL_FUNCTIONS and _only_tensor_arg(node):
                return self._pool_function(node, name, axis, make)
            if target in (operator.add, torch.add) and _two_local(node, self.index):
                a, b = cast(fx.Node, node.args[0]), cast(fx.Node, node.args[1])
                if _shape(a) != _shape(b) or self.nodes[self.index[b]].length_axis != axis:
                    return None
                # inputs from the arguments, not all_input_nodes: ``h + h`` has two inputs
                return LocalNode(
                    name,
                    "add",
                    (self.index[a], self.index[b]),
                    shape[axis],
                    axis,
                    lambda x, y: x + y,
                )
            if target in _SCALAR_OPS and _scalar_operand(node):
                return make("pointwise", _bind(node))
            if target is operator.getitem:
                return self._crop(node, source, make)
            if target in (torch.transpose, torch.permute):
                return self._transpose(node, axis, make, node.args[1:])
            return None
        if node.op == "call_method":
            if node.target in _POINTWISE_METHODS and _only_tensor_arg(node):
                return make("pointwise", _bind(node))
            if node.target in ("transpose", "permute"):
                return self._transpose(node, axis, make, node.args[1:])
        return None

    def _conv(self, m: nn.Conv1d, name: str, axis: int, make: Any) -> LocalNode:
        if axis != 2 or m.padding_mode != "zeros":
            raise GraphUnsupported(
                f"{name}: padding_mode={m.padding_mode!r} on positions along axis {axis}; "
                "fast ISM supports zero padding on (N, C, L)"
            )
        k, d, s = m.kernel_size[0], m.dilation[0], m.stride[0]
        if m.padding == "same":
            pad = d * (k - 1) // 2
        elif m.padding == "valid":
            pad = 0
        else:
            pad = int(m.padding[0])

        def apply(w: torch.Tensor, m: nn.Conv1d = m) -> torch.Tensor:
            return F.conv1d(w, m.weight, m.bias, m.stride, 0, m.dilation, m.groups)

        return make("window", apply, kernel=k, dilation=d, stride=s, pad_left=pad)

    def _pool(self, m: Any, name: str, axis: int, make: Any) -> LocalNode:
        k, s, pad = _int(m.kernel_size), _int(m.stride or m.kernel_size), _int(m.padding)
        d = _int(getattr(m, "dilation", 1))
        if axis != 2 or pad != 0 or m.ceil_mode:
            raise GraphUnsupported(f"{name}: fast ISM needs pooling without padding or ceil_mode")
        return make("window", m, kernel=k, dilation=d, stride=s)

    def _pool_function(self, node: fx.Node, name: str, axis: int, make: Any) -> LocalNode:
        kind = _POOL_FUNCTIONS[cast(Any, node.target)]
        names = ["kernel_size", "stride", "padding", "dilation" if kind == "max" else "ceil_mode"]
        values = dict(zip(names, node.args[1:], strict=False)) | dict(node.kwargs)
        k = _int(values["kernel_size"])
        s = _int(values.get("stride") or k)
        pad, d = _int(values.get("padding", 0)), _int(values.get("dilation", 1))
        if axis != 2 or pad != 0 or values.get("ceil_mode", False):
            raise GraphUnsupported(f"{name}: fast ISM needs pooling without padding or ceil_mode")
        return make("window", _bind(node), kernel=k, dilation=d, stride=s)

    def _crop(self, node: fx.Node, source: LocalNode, make: Any) -> LocalNode | None:
        index: Any = node.args[1]
        if not isinstance(index, tuple):
            return None
        index = tuple(index)
        if Ellipsis in index:
            at = index.index(Ellipsis)
            index = index[:at] + (slice(None),) * (4 - len(index)) + index[at + 1 :]
        index = index + (slice(None),) * (3 - len(index))
        if len(index) != 3 or not all(isinstance(i, slice) for i in index):
            return None
        for axis, other in enumerate(index):
            if axis != source.length_axis and other != slice(None):
                return None
        item = index[source.length_axis]
        if item.step not in (None, 1):
            return None
        start, _, _ = item.indices(source.length)
        return make("crop", offset=start)

    def _transpose(self, node: fx.Node, axis: int, make: Any, dims: Any) -> LocalNode | None:
        dims = tuple(d % 3 if isinstance(d, int) else d for d in dims)
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(d % 3 for d in dims[0])
        if dims not in ((1, 2), (2, 1), (0, 2, 1)):
            return None

        def apply(w: torch.Tensor) -> torch.Tensor:
            return w.transpose(1, 2)

        return make("pointwise", apply, out_axis=3 - axis)


# ---------------------------------------------------------------------- helpers
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
                f"{_describe(node, modules)} works in place; fast ISM needs layers that leave "
                "their inputs unchanged (e.g. inplace=False)"
            )


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = getattr(node, "meta", {}).get("tensor_meta")
    shape = getattr(meta, "shape", None)
    return tuple(shape) if shape is not None else None


def _describe(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"layer {node.target!r} ({type(modules[str(node.target)]).__name__})"
    if node.op == "call_function":
        return f"function {getattr(node.target, '__name__', node.target)!s} (node {node.name!r})"
    return f"method .{node.target}() (node {node.name!r})"


def _only_tensor_arg(node: fx.Node) -> bool:
    return len(node.all_input_nodes) == 1


def _two_local(node: fx.Node, index: dict[fx.Node, int]) -> bool:
    args = node.args[:2]
    return (
        len(args) == 2
        and not node.kwargs
        and all(isinstance(a, fx.Node) and a in index for a in args)
    )


def _scalar_operand(node: fx.Node) -> bool:
    args = node.args[:2]
    return (
        len(args) == 2
        and not node.kwargs
        and sum(isinstance(a, fx.Node) for a in args) == 1
        and all(isinstance(a, (fx.Node, int, float)) for a in args)
    )


def _bind(node: fx.Node) -> Any:
    """The node's operation with its one tensor input left free."""
    (tensor,) = node.all_input_nodes

    def swap(value: Any, x: torch.Tensor) -> Any:
        return x if value is tensor else value

    args, kwargs = node.args, node.kwargs
    if node.op == "call_method":
        method = str(node.target)

        def call_method(x: torch.Tensor) -> torch.Tensor:
            return getattr(x, method)(*[swap(a, x) for a in args[1:]], **kwargs)

        return call_method
    function = cast(Any, node.target)

    def call(x: torch.Tensor) -> torch.Tensor:
        return function(*[swap(a, x) for a in args], **{k: swap(v, x) for k, v in kwargs.items()})

    return call


def _int(value: Any) -> int:
    return int(value[0] if isinstance(value, (tuple, list)) else value)
