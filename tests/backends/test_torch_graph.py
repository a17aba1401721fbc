"""The torch.fx reader of a model's local prefix (fast ISM): the nodes, evaluated on full values
from their descriptions, reproduce every model through the tail; models are traced with their
optional arguments at their defaults, shape arithmetic is folded, unused heads are dropped, and
what cannot be windowed is refused with the operation named."""

from __future__ import annotations

from typing import Any

import numpy as np
import published_models as published
import pytest
import torch
import torch.nn.functional as F

from seqattrib.backends.local_graph import GraphUnsupported, LocalGraph, NothingLocal
from seqattrib.backends.torch.graph import torch_local_graph


def node_values(graph: LocalGraph, x: torch.Tensor) -> list[Any]:
    """Every node's full value, straight from the node descriptions."""
    values: list[Any] = []
    for node in graph.nodes:
        if node.kind == "input":
            values.append(x)
            continue
        first = node.inputs[0]
        src, axis = values[first], graph.nodes[first].length_axis
        if node.kind == "window":
            width = (node.length - 1) * node.stride + (node.kernel - 1) * node.dilation + 1
            right = width - node.pad_left - src.shape[axis]
            pad = (node.pad_left, right) if axis == 2 else (0, 0, node.pad_left, right)
            value = node.apply(F.pad(src, pad, value=node.fill))
        elif node.kind == "pointwise":
            value = node.apply(src)
        elif node.kind == "merge":
            value = node.apply(*[values[i] for i in node.inputs])
        elif node.kind == "crop":
            value = src.narrow(axis, node.offset, node.length)
        elif node.kind == "reduce":
            total = src.sum(axis) if node.how == "sum" else src.amax(axis)
            values.append(node.apply(total))
            continue
        else:  # pragma: no cover
            raise AssertionError(node.kind)
        assert value.shape[node.length_axis] == node.length, node.name
        values.append(value)
    return values


def assert_reproduces(model: Any, row_shape: tuple[int, int], axis: int = 2) -> LocalGraph:
    graph = torch_local_graph(model, row_shape, axis)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((3, *row_shape)).astype("f4"))
    for i, node in enumerate(graph.nodes):
        assert all(j < i for j in node.inputs)
    with torch.no_grad():
        values = node_values(graph, x)
        got = graph.tail(*[values[c] for c in graph.cut])
        want = model(x)
    leaves = torch.utils._pytree.tree_leaves
    for g, w in zip(leaves(got), leaves(want), strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    return graph


def kinds(graph: LocalGraph) -> list[str]:
    return [n.kind for n in graph.nodes]


def test_bpnet_lite_optional_input_wrapper_and_shape_arithmetic() -> None:
    """``forward(X, X_ctl=None, **kwargs)`` traces with X alone (the None branch taken in
    Python); ``X.shape[2] - trimming`` is folded into the crops; the wrapper's ``[1]`` drops the
    profile head, which is then not read at all."""
    model = published.torch_bpnet(160, 40, n_filters=8, n_layers=3)
    with pytest.raises(Exception, match="Proxy object cannot be iterated"):
        torch.fx.symbolic_trace(model)  # why it needs reading with its defaults bound
    graph = assert_reproduces(model, (4, 160))
    assert kinds(graph) == ["input", "window", "pointwise"] + [
        "window",
        "pointwise",
        "merge",
    ] * 3 + [
        "crop",
        "reduce",
    ]
    crop = graph.nodes[-2]
    assert (crop.offset, crop.length) == (60 - 37, 40 + 2 * 37)  # start - 37 : end + 37
    assert graph.nodes[-1].how == "sum" and graph.nodes[graph.cut[0]].kind == "reduce"
    merges = [n for n in graph.nodes if n.kind == "merge"]
    assert all(n.how == "sum" and n.commutes for n in merges)  # torch.add(X, X_conv)
    bare = published.torch_bpnet(160, 40, n_filters=8, n_layers=3, wrapped=False)
    graph = assert_reproduces(bare, (4, 160))  # both heads: the profile head is local
    assert any(n.kind == "window" and n.kernel == 75 for n in graph.nodes)


def test_pooling_padding_fill_values_and_concatenation() -> None:
    graph = assert_reproduces(published.torch_padded_pooling(), (4, 61))
    pools = {n.name: n for n in graph.nodes if n.kind == "window" and n.kernel > 1}
    assert pools["layer 'max' (MaxPool1d)"].fill == -np.inf
    assert np.isnan(pools["layer 'avg' (AvgPool1d)"].fill)  # count_include_pad=False
    assert pools["layer 'avg' (AvgPool1d)"].pad_left == 2
    (cat,) = [n for n in graph.nodes if n.kind == "merge"]
    assert cat.channels == 16 and not cat.commutes


class Channels(torch.nn.Module):
    """(N, L, 4) input, a per-position Linear, an adaptive average to one position."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 6)
        self.conv = torch.nn.Conv1d(6, 6, 5, padding="same")
        self.pool = torch.nn.AdaptiveAvgPool1d(1)
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.linear(x)).transpose(1, 2)
        h = self.conv(h) * 2.0 + 1.0
        return self.head(self.pool(h).flatten(1))


def test_channels_last_input_linear_and_adaptive_pooling() -> None:
    graph = assert_reproduces(Channels().eval(), (30, 4), axis=1)
    assert [n.length_axis for n in graph.nodes[:3]] == [1, 1, 1]
    assert graph.nodes[-1].kind == "reduce" and graph.nodes[-1].length_axis == 2


class Refused(torch.nn.Module):
    def __init__(self, padding_mode: str = "zeros", pad: str = "constant") -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, padding=1, padding_mode=padding_mode)
        self.pad = pad
        self.dense = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.pad(self.conv(x), (2, 2), mode=self.pad)
        return self.dense(h.mean(-1))


def test_refusals_name_the_operation_and_the_fix() -> None:
    with pytest.raises(GraphUnsupported, match=r"'conv' \(Conv1d\).*padding_mode='circular'"):
        torch_local_graph(Refused("circular").eval(), (4, 20), 2)
    with pytest.raises(GraphUnsupported, match=r"'reflect' padding.*needs constant padding"):
        torch_local_graph(Refused(pad="reflect").eval(), (4, 20), 2)

    class Loop(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sum(row.sum() for row in x)[None]

    with pytest.raises(GraphUnsupported, match="torch.fx could not trace Loop"):
        torch_local_graph(Loop(), (4, 20), 2)

    class Direct(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1).sum(1, keepdim=True)

    with pytest.raises(NothingLocal, match="reads the input directly"):
        torch_local_graph(Direct(), (4, 20), 2)
