"""Fast ISM (``ism(fast=...)``) gives the scores of the exact path, or falls back with a warning.

The reference is the exact path of the same call (every mutant through the whole model), itself
tested against brute force in test_ism.py; ``fast_ism_checks`` says how closely they must agree.
"""

from __future__ import annotations

import dataclasses
import warnings

import models
import numpy as np
import pytest
import torch
from conftest import make_model
from fast_ism_checks import assert_fast_matches, fast_error, outputs_scale

import seqattrib as sa
from seqattrib._errors import SeqAttribWarning
from seqattrib.attribution.mutagenesis import choice
from seqattrib.attribution.mutagenesis.plan import FastPlan, plan_windows
from seqattrib.backends.local_graph import LocalGraph, LocalNode

LENGTHS = {"bpnet": 70, "basset": 60, "crested": 80, "convnet": 24}


@pytest.fixture(autouse=True)
def fresh_plans():
    choice.clear_plans()
    yield
    choice.clear_plans()


def weights_for(kind: str) -> dict[str, np.ndarray]:
    if kind == "bpnet":
        return models.bpnet_weights(n_outputs=3, filters=8, n_layers=4)
    if kind == "basset":
        return models.basset_weights(LENGTHS["basset"], filters=8)
    if kind == "crested":
        return models.crested_weights(n_outputs=3, filters=8)
    return models.convnet_weights(n_outputs=3)


_WEIGHTS = {kind: weights_for(kind) for kind in LENGTHS}
_KERAS: dict[tuple[str, str], object] = {}


def build(framework: str, kind: str, layout: str):
    if framework == "torch":
        return models.torch_model(kind, _WEIGHTS[kind], layout)
    if (kind, layout) not in _KERAS:
        _KERAS[kind, layout] = models.keras_model(kind, _WEIGHTS[kind], LENGTHS[kind], layout)
    return _KERAS[kind, layout]


def plan_of(model):
    """The cached plan (FastPlan) or refusal of ``model``."""
    (plan,) = choice._PLANS[model].values()
    return plan


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("layout", ["NLC", "NCL"])
@pytest.mark.parametrize("kind", ["bpnet", "basset", "crested"])
def test_fast_equals_exact(framework, layout, kind):
    model = build(framework, kind, layout)
    X = models.random_one_hot(3, LENGTHS[kind], seed=5, layout=layout)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)  # no fallback
        fast = sa.ism(model, X, target=[0, 2], fast=True, batch_size=41)
    assert isinstance(plan_of(model), FastPlan)
    exact = sa.ism(model, X, target=[0, 2], fast=False, batch_size=41)
    assert_fast_matches(fast, exact, model, X)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_fast_windows_soft_bases_and_batch_sizes(framework):
    model = build(framework, "bpnet", "NLC")
    X = models.random_one_hot(2, LENGTHS["bpnet"], seed=6)
    X[0, 3] = 0.25  # an N: all four bases are scored
    X[1, -1] = 0.0
    exact = sa.ism(model, X, fast=False, batch_size=64)
    for batch_size in (1, 7, 1000):
        fast = sa.ism(model, X, fast=True, batch_size=batch_size)
        assert_fast_matches(fast, exact, model, X)
    window = sa.ism(model, X, fast=True, positions=(0, 9))
    assert_fast_matches(window[:, :9], exact[:, :9], model, X)
    assert not window[:, 9:].any()


class CircularStart(torch.nn.Module):
    """A circular-padding convolution reads the other end of the sequence: not local."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wrap = torch.nn.Conv1d(4, 6, 5, padding=2, padding_mode="circular")
        self.conv = torch.nn.Conv1d(6, 6, 3)
        self.dense = torch.nn.Linear(6, 2)

    def forward(self, x):
        return self.dense(torch.relu(self.conv(torch.relu(self.wrap(x)))).mean(dim=-1))


def keras_lambda_start(length: int):
    import keras

    inputs = keras.Input((length, 4))
    h = keras.layers.Lambda(lambda t: keras.ops.cumsum(t, axis=1), name="running_sum")(inputs)
    h = keras.layers.Conv1D(6, 3, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_unsupported_layer_falls_back_with_one_warning(framework):
    if framework == "torch":
        model, layout, name = CircularStart().eval(), "NCL", "wrap"
    else:
        model, layout, name = keras_lambda_start(30), "NLC", "running_sum"
    X = models.random_one_hot(2, 30, seed=7, layout=layout)
    with pytest.warns(SeqAttribWarning, match=name) as record:
        fast = sa.ism(model, X, fast=True)
    assert len([w for w in record if issubclass(w.category, SeqAttribWarning)]) == 1
    assert not isinstance(plan_of(model), FastPlan)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)  # decided once: no second warning
        again = sa.ism(model, X, fast="auto")
    exact = sa.ism(model, X, fast=False)
    np.testing.assert_array_equal(fast, exact)
    np.testing.assert_array_equal(again, exact)


def test_a_graph_that_does_not_reproduce_the_model_is_refused(monkeypatch):
    """The check batch catches a wrong graph reading (here: a conv's padding off by one)."""
    model = build("torch", "bpnet", "NCL")
    backend = sa.get_backend(model)
    read = type(backend).local_graph

    def wrong(self, *args):
        graph = read(self, *args)
        nodes = [
            dataclasses.replace(n, pad_left=n.pad_left + 1) if n.kind == "window" else n
            for n in graph.nodes
        ]
        return LocalGraph(nodes, graph.cut, graph.tail)

    monkeypatch.setattr(type(backend), "local_graph", wrong)
    X = models.random_one_hot(2, LENGTHS["bpnet"], seed=8, layout="NCL")
    with pytest.warns(SeqAttribWarning, match="did not reproduce"):
        fast = sa.ism(model, X, fast=True, batch_size=64)
    # the fallback is the exact path: the same batches give the same bits (batch_size="auto"
    # could probe other sizes in the two calls, which round differently)
    np.testing.assert_array_equal(fast, sa.ism(model, X, fast=False, batch_size=64))


def test_auto_follows_the_predicted_costs(monkeypatch):
    """ "auto" takes the fast path where its cost model predicts it at most
    AUTO_MAX_COST_RATIO of the exact path's cost (a deep dilated model), the exact path where
    not (a two-layer net whose windows are most of its length), and never on an accelerator."""
    used = []
    monkeypatch.setattr(
        sa.ism.__globals__["IsmKernel"],
        "__init__",
        _recording(sa.ism.__globals__["IsmKernel"].__init__, used),
    )
    deep = models.torch_model("bpnet", models.bpnet_weights(n_outputs=3, filters=32), "NCL")
    X = models.random_one_hot(1, 1000, seed=9, layout="NCL")
    sa.ism(deep, X, fast="auto", positions=(0, 5))
    assert plan_of(deep).cost_ratio <= choice.AUTO_MAX_COST_RATIO
    wide = make_model("torch", "convnet", models.convnet_weights(n_outputs=3), "NCL")
    sa.ism(wide, models.random_one_hot(1, 12, seed=9, layout="NCL"), fast="auto")
    assert plan_of(wide).cost_ratio > choice.AUTO_MAX_COST_RATIO
    assert used == [True, False]
    # on an accelerator "auto" keeps the exact path (the windowed ops are launch-bound there)
    monkeypatch.setattr(type(sa.get_backend(deep)), "on_accelerator", lambda self: True)
    sa.ism(deep, X, fast="auto", positions=(0, 5))
    assert used == [True, False, False]


def _recording(init, used):
    def wrapped(self, *args, **kwargs):
        used.append(kwargs.get("fast") is not None)
        init(self, *args, **kwargs)

    return wrapped


def test_plan_windows_follow_the_receptive_field():
    """conv(21) -> dilated conv(3, d=2) + residual -> crop 2 -> maxpool(2): closed-form windows,
    which move with the mutation (past the ends of the sequence too) and keep their width."""
    L = 50
    nodes = [
        LocalNode("in", "input", (), L, 2),
        LocalNode("c0", "window", (0,), L, 2, kernel=21, pad_left=10),
        LocalNode("c1", "window", (1,), L, 2, kernel=3, dilation=2, pad_left=2),
        LocalNode("add", "merge", (1, 2), L, 2),
        LocalNode("crop", "crop", (3,), L - 4, 2, offset=2),
        LocalNode("pool", "window", (4,), (L - 4) // 2, 2, kernel=2, stride=2),
    ]
    plan = plan_windows(LocalGraph(nodes, [5], lambda h: h), L)
    assert plan.widths == [1, 21, 25, 25, 25, 13]
    p = 25  # interior: windows centred on p
    assert plan.starts[:, p].tolist() == [25, 15, 13, 13, 11, 5]
    # at the ends the windows reach past the sequence (virtual positions), at the same offsets
    assert plan.starts[1, 0] == -10 and plan.starts[1, L - 1] == L - 1 - 10
    assert plan.starts[5, 0] == -7 and plan.starts[5, L - 1] == 17  # ceil((p - 15) / 2)
    assert not any(plan.full)
    # a window 1.5 times as wide as its node or more: the node runs on full values
    short = [
        LocalNode("in", "input", (), 16, 2),
        LocalNode("c0", "window", (0,), 16, 2, kernel=21, pad_left=10),
        LocalNode("c1", "window", (1,), 16, 2, kernel=3, dilation=2, pad_left=2),
    ]
    plan = plan_windows(LocalGraph(short, [2], lambda h: h), 16)
    assert plan.full == [False, False, True] and plan.widths[2] == 16


class Twice(torch.nn.Module):
    """``h + h``, an in-place-free residual, a temperature attribute and a large output offset:
    the cases a review found the first version of fast ISM getting wrong."""

    def __init__(self, in_place: bool = False) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.c1 = torch.nn.Conv1d(4, 6, 3, padding=1)
        self.c2 = torch.nn.Conv1d(6, 6, 3, padding=1)
        self.head = torch.nn.Linear(6, 2)
        self.temperature = 1.0
        self.in_place = in_place

    def forward(self, x):
        h = self.c1(x) / self.temperature
        a = self.c2(h + h)
        b = torch.nn.functional.relu(h, inplace=self.in_place)
        return self.head((a + b).mean(-1)) + 100.0


def test_fast_follows_a_changed_model_and_output_fn():
    model = Twice().eval()
    X = models.random_one_hot(2, 20, seed=11, layout="NCL")

    def agrees(**kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SeqAttribWarning)
            fast = sa.ism(model, X, fast=True, **kwargs)
        exact = sa.ism(model, X, fast=False, **kwargs)
        scale = outputs_scale(model, X, kwargs.get("output_fn"))
        return fast_error(fast, exact, scale) <= 1.0

    assert agrees(target=0)  # h + h: an add whose two inputs are one node
    model.temperature = 0.25  # fx baked the old value into the traced graph: read again
    assert agrees(target=0)
    model.head = torch.nn.Linear(6, 3)  # a new head with another number of outputs
    assert agrees(target=2)
    assert agrees(target=None, output_fn=lambda out: out[:, 1:] * 3)


def test_in_place_layers_are_refused():
    model = Twice(in_place=True).eval()
    X = models.random_one_hot(2, 20, seed=12, layout="NCL")
    with pytest.warns(SeqAttribWarning, match="in place"):
        fast = sa.ism(model, X, fast=True)
    np.testing.assert_array_equal(fast, sa.ism(model, X, fast=False))


def test_check_scales_with_the_scores_not_the_outputs(monkeypatch):
    """With outputs near 100 and ISM scores near 1e-2, an off-by-one padding must still fail."""
    model = Twice().eval()
    backend = sa.get_backend(model)
    read = type(backend).local_graph

    def wrong(self, *args):
        graph = read(self, *args)
        nodes = [
            dataclasses.replace(n, pad_left=n.pad_left + 1) if n.kind == "window" else n
            for n in graph.nodes
        ]
        return LocalGraph(nodes, graph.cut, graph.tail)

    monkeypatch.setattr(type(backend), "local_graph", wrong)
    X = models.random_one_hot(2, 20, seed=13, layout="NCL")
    with pytest.warns(SeqAttribWarning, match="did not reproduce"):
        fast = sa.ism(model, X, fast=True, batch_size=64)
    # the fallback is the exact path: the same batches give the same bits (batch_size="auto"
    # could probe other sizes in the two calls, which round differently)
    np.testing.assert_array_equal(fast, sa.ism(model, X, fast=False, batch_size=64))


@pytest.mark.parametrize("length", [1, 3, 30])
def test_short_sequences_and_windows_spanning_everything(length):
    """At L=30 the deeper windows of the BPNet-like model are wider than the sequence (those
    layers run on full values); L=1 and L=3 are shorter than any kernel."""
    model = build("torch", "bpnet", "NCL")
    X = models.random_one_hot(2, length, seed=14, layout="NCL")
    exact = sa.ism(model, X, fast=False)
    fast = sa.ism(model, X, fast=True)
    assert_fast_matches(fast, exact, model, X)
    if length == 30:
        assert any(plan_of(model).full)


@pytest.mark.parametrize("kind", ["bpnet", "basset", "crested", "bpnet-lite"])
def test_wide_layers_run_in_chunks_of_a_batch(monkeypatch, kind):
    """Under a small per-tensor limit, each node runs on as many mutants as keep its tensors
    under it: the batch splits into chunks at wider layers (and again at wider ones), and the
    scores are those of the exact path."""
    from seqattrib.attribution.mutagenesis.fast import FastForward
    from seqattrib.backends.torch import windows as torch_windows

    if kind == "bpnet-lite":  # a crop, a mean over it as sums of residual terms
        import published_models as published

        model, length = published.torch_bpnet(160, 40, n_filters=8, n_layers=3), 160
    else:
        model, length = build("torch", kind, "NCL"), LENGTHS[kind]
    X = models.random_one_hot(3, length, seed=7, layout="NCL")
    X[1, :, 5] = 0.25  # an N: four mutants at one position
    target = 0 if kind == "bpnet-lite" else [0, 2]
    exact = sa.ism(model, X, target=target, fast=False)
    splits: list[tuple[int, int, int]] = []  # (rows, chunk size, depth)
    depth = [0]
    in_chunks = FastForward._in_chunks

    def spy(self, state, first, rows, size):
        depth[0] += 1
        splits.append((rows, size, depth[0]))
        try:
            return in_chunks(self, state, first, rows, size)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(FastForward, "_in_chunks", spy)
    for limit in (3000, 20000):
        monkeypatch.setattr(torch_windows, "CPU_PASS_BYTES", limit)
        choice.clear_plans()
        splits.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", SeqAttribWarning)
            fast = sa.ism(model, X, target=target, fast=True, batch_size=200)
        assert_fast_matches(fast, exact, model, X)
        assert splits and all(size < rows for rows, size, _ in splits)
        if limit == 3000:  # chunks of chunks
            assert max(d for _, _, d in splits) >= 2
