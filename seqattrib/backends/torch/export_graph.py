"""Read a torch model's local prefix for fast ISM from its ``torch.export`` graph.

Used where ``torch.fx`` cannot trace a model: Python that reads tensor shapes
(``if n % self.pool_size``), einops patterns, ``x.ndim`` branches, the way Enformer-class models
are written. ``torch.export`` (non-strict) runs the forward pass on fake tensors and records the
aten operations it makes, with the batch size left free. The graph is then read as the
``torch.fx`` one is (``graph._Reader``), with the aten classifier of ``aten_ops``; its tail
returns the model's output structure (a dict of heads, a tuple).
"""

from __future__ import annotations

import math
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from ..local_graph import GraphUnsupported, LocalGraph, LocalNode, unread_outputs
from . import aten_ops
from .graph import _BATCH, Untraceable, _Bound, _fold_shapes, _Reader, _Tail, torch_local_graph
from .nodes import shape_of


def torch_model_graph(
    model: Any,
    row_shape: tuple[int, int],
    length_axis: int,
    output_fn: Callable[[Any], Any] | None = None,
) -> LocalGraph:
    """The local prefix of ``model`` for inputs of shape ``(batch, *row_shape)``, read through
    torch.fx, or from its torch.export graph where torch.fx cannot trace it.

    Raises ``GraphUnsupported`` naming the layer (or the line of code) when neither can.
    """
    try:
        return torch_local_graph(model, row_shape, length_axis, output_fn)
    except Untraceable as exc:
        failure = exc.error
    # outside the handler: an export failure is not chained to the torch.fx one
    return exported_local_graph(model, row_shape, length_axis, output_fn, failure)


def exported_local_graph(
    model: nn.Module,
    row_shape: tuple[int, int],
    length_axis: int,
    output_fn: Callable[[Any], Any] | None,
    fx_error: Exception,
) -> LocalGraph:
    """The local prefix of ``model`` (which torch.fx could not trace: ``fx_error``) read from
    its ``torch.export`` graph for inputs of shape ``(batch, *row_shape)``.

    Raises ``GraphUnsupported`` naming what stopped both readers when export fails too.
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    example = torch.zeros((2, *row_shape), device=device)
    try:
        with _tracing_precision():
            program = torch.export.export(
                _Bound(model),
                (example,),
                dynamic_shapes=({0: torch.export.Dim.AUTO},),
                strict=False,
            )
    except Exception as exc:  # noqa: BLE001 - any export failure means: no fast path
        raise GraphUnsupported(
            f"neither torch.fx nor torch.export could read {type(model).__name__}: torch.fx "
            f"stopped at {construct(fx_error)}; torch.export stopped at {construct(exc)}. Fast "
            "ISM reads models whose forward pass one of them can trace with the input alone "
            "(no branches or loops on tensor values)"
        ) from exc
    module = cast(fx.GraphModule, program.module())
    out_spec = program.module_call_graph[0].signature.out_spec
    placeholder = _without_checks(module)
    with torch.no_grad():
        flat = ShapeProp(module).propagate(example)
    _drop_unread_outputs(module, list(flat), out_spec, output_fn)
    shapes = _fold_shapes(module)
    _free_batch_in_views(module, shapes)
    module.graph.eliminate_dead_code()
    module.recompile()
    modules = dict(module.named_modules())
    reader = _ExportReader(module, modules, length_axis, shapes, out_spec)
    _refuse_in_place(module, reader)
    return reader.read(placeholder)


@contextmanager
def _tracing_precision() -> Iterator[None]:
    """cuDNN's TF32 settings as torch.export can read them.

    Export saves and restores cuDNN's flags through the legacy ``allow_tf32`` getter, which
    raises while the convolution and RNN precisions are set through the new API (as the
    backend sets them to full float32 for a call). Export computes nothing (it traces fake
    tensors), so those settings are put back to their defaults while it runs and restored
    after.
    """
    cudnn = torch.backends.cudnn
    settings: list[Any] = [getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None)]
    try:
        readable = cudnn.allow_tf32 is not None
    except RuntimeError:
        readable = False
    if readable or not all(hasattr(s, "fp32_precision") for s in settings):
        yield
        return
    saved = [s.fp32_precision for s in settings]
    for setting in settings:
        setting.fp32_precision = "tf32"
    try:
        yield
    finally:
        for setting, value in zip(settings, saved, strict=True):
            setting.fp32_precision = value


def construct(exc: BaseException) -> str:
    """What stopped a tracer: the error's first line and the line of the model's code that
    raised it (the innermost frame outside torch, einops and seqattrib)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    if len(first) > 200:
        first = first[:197] + "..."
    where = ""
    for error in (exc, exc.__cause__, exc.__context__):
        frame = _model_frame(error)
        if frame is not None:
            where = f" in `{frame.line}` ({os.path.basename(frame.filename)}:{frame.lineno})"
            break
    return f"{type(exc).__name__}: {first}{where}"


_LIBRARIES = ("/torch/", "/einops/", "/seqattrib/", "/functorch/")
_STANDARD_LIBRARY = os.path.dirname(os.__file__)


def _model_frame(exc: BaseException | None) -> traceback.FrameSummary | None:
    if exc is None:
        return None
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        library = any(part in path for part in _LIBRARIES) or path.startswith("<")
        standard = path.startswith(_STANDARD_LIBRARY) and "-packages/" not in path
        if not library and not standard and frame.line:
            return frame
    return None


def _without_checks(module: fx.GraphModule) -> fx.Node:
    """Remove the export's checks of its inputs and metadata (they read the input but compute
    nothing); returns the input placeholder."""
    for node in list(module.graph.nodes):
        checks = node.op == "call_module" and str(node.target) == "_guards_fn"
        asserts = node.op == "call_function" and aten_ops.op_name(node).startswith("_assert")
        if (checks or asserts) and not node.users:
            module.graph.erase_node(node)
    (placeholder,) = [n for n in module.graph.nodes if n.op == "placeholder"]
    return placeholder


def _drop_unread_outputs(
    module: fx.GraphModule,
    leaves: list[Any],
    out_spec: Any,
    output_fn: Callable[[Any], Any] | None,
) -> None:
    """Outputs ``output_fn`` never reads become None, so what only they need is dead code."""
    unread = unread_outputs(
        output_fn, leaves, lambda values: pytree.tree_unflatten(values, out_spec)
    )
    (node,) = [n for n in module.graph.nodes if n.op == "output"]
    returned = list(node.args[0])  # type: ignore[arg-type]
    if not unread or len(returned) != len(leaves):
        return
    node.args = (tuple(None if k in unread else v for k, v in enumerate(returned)),)


def _free_batch_in_views(module: fx.GraphModule, shapes: dict[fx.Node, Any]) -> None:
    """``reshape(x, [batch, 24, 64, 2])`` as ``reshape(x, [-1, 24, 64, 2])``: a view whose
    only size that is not a constant is the batch size reads no shape node."""
    for node in module.graph.nodes:
        if aten_ops.op_name(node) not in aten_ops.VIEW_OPS or len(node.args) < 2:
            continue
        sizes = node.args[1]
        if not isinstance(sizes, (list, tuple)):
            continue
        free = [k for k, s in enumerate(sizes) if isinstance(s, fx.Node)]
        if len(free) == 1 and shapes.get(sizes[free[0]]) is _BATCH:
            fixed = [-1 if k == free[0] else s for k, s in enumerate(sizes)]
            node.args = (node.args[0], fixed, *node.args[2:])


def _refuse_in_place(module: fx.GraphModule, reader: _ExportReader) -> None:
    """An operation that overwrites its input would change reference values kept for later
    mutants: no fast path for such a model (as ``graph._refuse_in_place``)."""
    for node in module.graph.nodes:
        name = aten_ops.op_name(node)
        if name.endswith("_") and not name.endswith("__"):
            raise GraphUnsupported(
                f"{reader.describe(node)} works in place; fast ISM needs layers that leave "
                "their inputs unchanged (e.g. inplace=False)"
            )


class _ExportReader(_Reader):
    classify = staticmethod(aten_ops.classify)

    def __init__(
        self,
        traced: fx.GraphModule,
        modules: dict[str, nn.Module],
        axis: int,
        shapes: dict[fx.Node, Any],
        out_spec: Any,
    ) -> None:
        super().__init__(traced, modules, axis, shapes)
        self.out_spec = out_spec
        self.block_ends: dict[fx.Node, fx.Node] = {}  # a pooling block's reshape: its end

    def _add(self, node: fx.Node, local: LocalNode) -> None:
        super()._add(node, local)
        end = self.block_ends.pop(node, None)
        if end is not None:  # the block's values are those of its last node
            self.index[end] = self.index[node]

    def describe(self, node: fx.Node) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        if stack:
            path, kind = list(stack.values())[-1]
            path = str(path).removeprefix("model.").removeprefix("model")
            if path:
                return f"layer {path!r} ({str(getattr(kind, '__name__', kind)).split('.')[-1]})"
        name = aten_ops.op_name(node) or str(node.target)
        return f"operation {name} (node {node.name!r})"

    def _tail(self, cut_nodes: list[fx.Node]) -> _Tail:
        return _ExportTail(super()._tail(cut_nodes).module, self.out_spec)

    def _tail_macs(self) -> float:
        """Multiply-adds per example of the tail's dense layers, convolutions, matrix
        products and attention."""
        total = 0.0
        for node in self.traced.graph.nodes:
            if node in self.index or node in self.absorbed or node.op != "call_function":
                continue
            total += _macs(node)
        return total


def _macs(node: fx.Node) -> float:
    shape = shape_of(node)
    if not shape:
        return 0.0
    name = aten_ops.op_name(node)
    per_example = float(math.prod(shape[1:]))
    inputs = [shape_of(a) or () for a in node.all_input_nodes]
    if name == "linear":
        return per_example * inputs[1][1]
    if name in ("conv1d", "conv2d", "convolution"):
        return per_example * math.prod(inputs[1][1:])
    if name in ("matmul", "bmm", "mm") and inputs[0]:
        return per_example * inputs[0][-1]
    if name == "scaled_dot_product_attention" and inputs[0] and inputs[1]:
        return 2.0 * per_example * inputs[1][-2]
    if name == "einsum":
        equation = str(node.args[0]).replace(" ", "")
        terms, result = equation.split("->") if "->" in equation else (equation, "")
        sizes: dict[str, int] = {}
        for term, operand in zip(terms.split(","), inputs, strict=False):
            sizes.update(zip(term, operand, strict=False))
        contracted = set(sizes) - set(result)
        return per_example * math.prod(sizes[c] for c in contracted)
    return 0.0


class _ExportTail(_Tail):
    """The exported tail, returning the model's output structure (the graph returns its
    flat outputs)."""

    def __init__(self, module: fx.GraphModule, out_spec: Any) -> None:
        super().__init__(module)
        self.out_spec = out_spec

    def __call__(self, *values: torch.Tensor) -> Any:
        return pytree.tree_unflatten(list(super().__call__(*values)), self.out_spec)
