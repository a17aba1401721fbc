"""Fast ISM on torch models that torch.fx cannot trace, read from their ``torch.export`` graph:
enformer-pytorch's Enformer (attention pooling, einops, Python on shapes) and a small model
written with einops and a branch on a tensor's length. The fast path is taken (no warning
under ``fast=True``), gives the exact path's scores, and its cost model counts the
multiply-adds the model makes; a model that neither reader can trace falls back with a message
that names the line that stops them."""

from __future__ import annotations

import warnings
from typing import Any

import models
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformer_models as tm
from fast_ism_checks import assert_fast_matches
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import seqattrib as sa
from seqattrib._errors import SeqAttribWarning
from seqattrib.attribution.mutagenesis import choice
from seqattrib.attribution.mutagenesis.plan import FastPlan, path_work

einops = pytest.importorskip("einops")


@pytest.fixture(autouse=True)
def fresh_plans():
    choice.clear_plans()
    yield
    choice.clear_plans()


def fast_and_exact(model: Any, X: np.ndarray, **kwargs: Any) -> FastPlan:
    """Fast ISM with no fallback, equal to the exact path; returns the plan it used."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)
        fast = sa.ism(model, X, fast=True, batch_size=64, **kwargs)
    exact = sa.ism(model, X, fast=False, batch_size=64, **kwargs)
    assert_fast_matches(fast, exact, model, X, kwargs.get("output_fn"))
    (plan,) = choice._PLANS[model].values()
    assert isinstance(plan, FastPlan)
    return plan


def model_macs(model: nn.Module, x: torch.Tensor) -> float:
    """Multiply-adds of one forward pass of one sequence, as torch's flop counter counts
    them (convolutions, dense layers, matrix products: two flops each)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() / 2


def test_enformer_reads_through_attention_pooling_up_to_attention():
    """Enformer: the stem, the conv tower and its attention pooling (a reshape of the length
    into pairs, a 1x1 conv2d, a softmax and a weighted sum over each pair) are windowed; the
    windows end at the transformer, where every bin sees every other."""
    model = tm.enformer_small()
    with pytest.raises(Exception, match="control flow"):
        torch.fx.symbolic_trace(model)
    X = models.random_one_hot(1, tm.ENFORMER_LENGTH, seed=11)
    output_fn = tm.central_bins(tm.ENFORMER_BINS, 4, head="human")
    plan = fast_and_exact(model, X, output_fn=output_fn, target=[0, 3])
    nodes = plan.graph.nodes
    pools = [n for n in nodes if n.kind == "window" and n.stride == 2]
    assert [(n.kernel, n.length) for n in pools] == [(2, 128), (2, 64), (2, 32)]
    assert all("AttentionPool" in n.name for n in pools)
    assert [n.kernel for n in nodes if n.kind == "window" and n.stride == 1] == [15, 1, 5, 1, 5, 1]
    # the values the transformer reads: its residual input and the attention's q, k, v
    cut = [nodes[c] for c in plan.graph.cut]
    assert all(n.length == tm.ENFORMER_LENGTH // 8 for n in cut)
    assert sorted(n.name.split("'")[1].rsplit(".", 1)[-1] for n in cut)[1:] == [
        "to_k",
        "to_q",
        "to_v",
    ]
    # the cost model sees the whole model's multiply-adds (prefix and tail), and the fast
    # path's saving: the prefix over windows instead of over all positions
    fast, exact = path_work(plan)
    counted = model_macs(model, torch.as_tensor(X[:1]))
    assert abs(exact.macs - counted) <= 0.1 * counted
    prefix = exact.macs - plan.graph.tail_macs
    assert prefix > 0.4 * exact.macs
    assert fast.macs - plan.graph.tail_macs < 0.5 * prefix
    assert plan.costs[0] < plan.costs[1]


class ShapeBranchEinops(nn.Module):
    """(N, 4, L): a convolution, ``if h.shape[-1] % 2`` (odd lengths padded), a gate that
    broadcasts one channel over all, einops max pooling of pairs, a dilated convolution, an
    einops transpose, a mean over positions, a dense head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.conv1 = nn.Conv1d(4, 8, 9, padding=4)
        self.gate = nn.Conv1d(8, 1, 1)
        self.conv2 = nn.Conv1d(8, 8, 5, padding=4, dilation=2)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.conv1(x))
        if h.shape[-1] % 2:
            h = F.pad(h, (0, 1))
        h = h * torch.sigmoid(self.gate(h))
        h = einops.reduce(h, "b c (n p) -> b c n", "max", p=2)
        h = einops.rearrange(F.relu(self.conv2(h)), "b c n -> b n c")
        return self.head(h.mean(dim=1))


@pytest.mark.parametrize("length", [60, 61])
def test_shape_branches_and_einops(length):
    model = ShapeBranchEinops().eval()
    with pytest.raises(Exception, match="control flow"):
        torch.fx.symbolic_trace(model)
    X = models.random_one_hot(2, length, seed=12, layout="NCL")
    plan = fast_and_exact(model, X, target=[0, 1])
    nodes = plan.graph.nodes
    (pool,) = [n for n in nodes if n.kind == "window" and n.stride == 2]
    assert (pool.kernel, pool.length) == (2, (length + 1) // 2)
    gate = [
        n for n in nodes if n.kind == "merge" and len({nodes[i].channels for i in n.inputs}) == 2
    ]
    assert len(gate) == 1  # the gate's one channel broadcast over eight
    assert nodes[plan.graph.cut[0]].kind == "reduce"
    # the gate's convolution, and the padding of odd lengths
    assert len([n for n in nodes if n.kind == "window" and n.kernel == 1]) == 1 + length % 2


class ValueBranch(nn.Module):
    """A branch on the values of a tensor: neither torch.fx nor torch.export can trace it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.conv = nn.Conv1d(4, 4, 5, padding=2)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if h.sum() > 0:
            h = h * 2
        return self.head(h.mean(dim=2))


def test_a_model_neither_reader_can_trace_names_the_line():
    model = ValueBranch().eval()
    X = models.random_one_hot(2, 30, seed=13, layout="NCL")
    with pytest.warns(SeqAttribWarning) as caught:
        fast = sa.ism(model, X, fast=True, target=[0, 1])
    (message,) = [str(w.message) for w in caught]
    assert "neither torch.fx nor torch.export could read ValueBranch" in message
    assert message.count("in `if h.sum() > 0:` (test_fast_ism_export.py:") == 2
    exact = sa.ism(model, X, fast=False, target=[0, 1])
    np.testing.assert_array_equal(fast, exact)


class InPlaceAfterBranch(nn.Module):
    """A branch on the length (torch.fx cannot trace it) and an in-place activation."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.conv = nn.Conv1d(4, 4, 5, padding=2)
        self.act = nn.ReLU(inplace=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if h.shape[-1] > 10:
            h = self.act(h)
        return self.head(h.mean(dim=2))


def test_in_place_layers_read_from_export_are_refused_by_name():
    model = InPlaceAfterBranch().eval()
    X = models.random_one_hot(2, 30, seed=14, layout="NCL")
    with pytest.warns(SeqAttribWarning, match=r"layer 'act' \(ReLU\) works in place"):
        fast = sa.ism(model, X, fast=True, target=[0, 1])
    np.testing.assert_array_equal(fast, sa.ism(model, X, fast=False, target=[0, 1]))
