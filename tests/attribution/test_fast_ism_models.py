"""Fast ISM on models written the way published packages write them (``published_models``) and
on small models built here around one construct each: the fast path is taken (no warning under
``fast=True``), reads the construct as local, and gives the exact path's scores."""

from __future__ import annotations

import warnings
from typing import Any

import models
import numpy as np
import published_models as published
import pytest
import torch
import torch.nn.functional as F
from fast_ism_checks import assert_fast_matches

import seqattrib as sa
from seqattrib._errors import SeqAttribWarning
from seqattrib.attribution.mutagenesis import choice
from seqattrib.attribution.mutagenesis.plan import FastPlan


@pytest.fixture(autouse=True)
def fresh_plans():
    choice.clear_plans()
    yield
    choice.clear_plans()


def fast_and_exact(model: Any, X: np.ndarray, **kwargs: Any) -> FastPlan:
    """Fast ISM with no fallback, equal to the exact path; returns the plan it used."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)
        fast = sa.ism(model, X, fast=True, batch_size=29, **kwargs)
    exact = sa.ism(model, X, fast=False, batch_size=29, **kwargs)
    assert_fast_matches(fast, exact, model, X, kwargs.get("output_fn"))
    (plan,) = choice._PLANS[model].values()
    assert isinstance(plan, FastPlan)
    return plan


def kinds(plan: FastPlan) -> list[str]:
    return [node.kind for node in plan.graph.nodes]


# --------------------------------------------------------------------------- torch
def test_bpnet_lite_count_wrapper_and_bare_model():
    """bpnet-lite: ``forward(X, X_ctl=None)``, the counts head behind a wrapper that indexes the
    tuple output (and takes **kwargs, which torch.fx cannot trace as such), ``if X_ctl is
    None``, ``X.shape[2] - trimming``, ``torch.add`` residuals, a mean over a cropped range."""
    wrapped = published.torch_bpnet(160, 40, n_filters=8, n_layers=3)
    X = models.random_one_hot(2, 160, seed=1, layout="NCL")
    plan = fast_and_exact(wrapped, X)
    assert kinds(plan).count("reduce") == 1 and plan.graph.nodes[plan.graph.cut[0]].kind == "reduce"
    assert plan.terms  # the mean of the crop of the last residual sum: sums of its two terms
    assert not any(node.kind == "window" and node.kernel == 75 for node in plan.graph.nodes)
    bare = published.torch_bpnet(160, 40, n_filters=8, n_layers=3, wrapped=False)
    plan = fast_and_exact(bare, X, output_fn=lambda out: out[1])
    # the output_fn never reads the profile head: it is not read at all
    assert not any(node.kind == "window" and node.kernel == 75 for node in plan.graph.nodes)
    plan = fast_and_exact(bare, X, output_fn=lambda out: out[0].sum(-1) + out[1])
    assert any(node.kind == "window" and node.kernel == 75 for node in plan.graph.nodes)


class FunctionalOps(torch.nn.Module):
    """Channels-last input, methods and functions (``x.relu()``, ``torch.add``, ``F.pad``), a
    crop written with shape arithmetic, a per-position ``Linear``, a mean over positions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.conv1 = torch.nn.Conv1d(4, 8, 7, padding=3)
        self.conv2 = torch.nn.Conv1d(8, 8, 3, dilation=2)
        self.per_position = torch.nn.Linear(8, 6)
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x.transpose(1, 2)).relu()
        h = torch.add(h, F.pad(self.conv2(h), (2, 2)))
        n = h.shape[2]
        h = h[:, :, 3 : n - 3]
        h = self.per_position(h.transpose(1, 2)).sigmoid()  # (N, L, C)
        return self.head(h.mean(dim=1))


def test_functional_ops_and_shape_arithmetic():
    model = FunctionalOps().eval()
    X = models.random_one_hot(2, 50, seed=2, layout="NLC")
    plan = fast_and_exact(model, X, target=[0, 1])
    assert "crop" in kinds(plan) and "reduce" in kinds(plan)
    pads = [n for n in plan.graph.nodes if n.kind == "window" and n.kernel == 1]
    assert [n.pad_left for n in pads] == [2]


def test_pooling_with_padding_concatenation_and_cropping():
    """Max pooling with padding (-inf there), an average that leaves its padding out of the
    count (NaN there) and one that counts it (zeros), ``torch.cat`` of two local branches, a
    crop by slicing, a maximum over positions."""
    model = published.torch_padded_pooling()
    X = models.random_one_hot(3, 61, seed=3, layout="NCL")
    plan = fast_and_exact(model, X, target=[0, 1])
    fills = sorted(str(n.fill) for n in plan.graph.nodes if n.kind == "window" and n.kernel > 1)
    assert fills == ["-inf", "0.0", "0.0", "0.0", "nan"]
    assert "merge" in kinds(plan) and plan.graph.nodes[plan.graph.cut[0]].how == "max"


@pytest.mark.parametrize(
    "build", [lambda: published.torch_basset(200, small=True), published.torch_small_convnet]
)
def test_basset_and_small_conv_net(build):
    model = build()
    length = 200 if isinstance(model, published._torch_classes()["BassetLike"]) else 60
    X = models.random_one_hot(2, length, seed=4, layout="NCL")
    fast_and_exact(model, X)


# --------------------------------------------------------------------------- keras
keras = pytest.importorskip("keras")


def test_chrombpnet_crops_and_counts_head():
    """chrombpnet: valid dilated convolutions, ``Cropping1D`` before each residual ``add``,
    a profile head cropped to the output window, counts = a global average of the trunk."""
    model = published.keras_chrombpnet(160, 30, filters=8, n_dilated=3)
    X = models.random_one_hot(2, 160, seed=5)
    plan = fast_and_exact(model, X, output_fn=lambda out: out[1])
    # the residual crops; the profile head (never read by this output_fn) is not read at all
    assert kinds(plan).count("crop") == 3 and kinds(plan)[-1] == "reduce"
    assert plan.terms  # the average of the last residual sum: the sums of its two terms
    plan = fast_and_exact(model, X, output_fn=lambda out: out[0][:, 10:15])  # the profile head
    assert kinds(plan).count("crop") == 4 and "reduce" not in kinds(plan)


def test_nested_models_are_read_through():
    model = published.keras_chrombpnet(160, 30, filters=8, n_dilated=3, nested=True)
    X = models.random_one_hot(2, 160, seed=6)
    plan = fast_and_exact(model, X, output_fn=lambda out: out[1])
    assert kinds(plan).count("reduce") == 2  # the counts heads of both nested models


def test_two_input_model_with_a_fixed_second_input():
    """A two-input profile model (sequence, control track) fed a control track that does not
    depend on the sequence: the track is a fixed node, its concatenation with the sequence
    branch is local, and the profile head convolves the joined windows."""
    model = published.keras_control_bpnet(60, 8, 2)
    X = models.random_one_hot(2, 60, seed=7)
    plan = fast_and_exact(model, X, output_fn=lambda out: out[1])
    assert "fixed" in kinds(plan)  # the average of the control track: a constant per sequence
    plan = fast_and_exact(model, X, output_fn=lambda out: keras.ops.sum(out[0], axis=1))
    (joined,) = [n for n in plan.graph.nodes if n.kind == "merge" and n.channels == 10]
    assert [plan.graph.nodes[i].kind for i in joined.inputs][1] == "fixed"
    assert plan.graph.nodes[plan.graph.cut[0]].kind == "window"  # the profile head convolution


def test_topic_cnn_same_max_pooling():
    model = published.keras_topic_cnn(120, 4, filters=16, blocks=((9, 1), (5, 2), (3, 2)), hidden=8)
    X = models.random_one_hot(2, 120, seed=8)
    plan = fast_and_exact(model, X, target=[0, 3])
    pools = [n for n in plan.graph.nodes if n.kind == "window" and n.stride == 4]
    assert len(pools) == 3 and all(n.fill == -np.inf for n in pools)


def channels_first_padding_model(length: int) -> Any:
    """Channels-first convolutions and pooling, "same" average pooling (its padding left out of
    the count), ``ZeroPadding1D``, a global maximum."""
    layers = keras.layers
    fmt = "channels_first"
    x = keras.Input((4, length))
    h = layers.Conv1D(8, 5, padding="same", activation="relu", data_format=fmt)(x)
    h = layers.AveragePooling1D(3, strides=2, padding="same", data_format=fmt)(h)
    h = layers.ZeroPadding1D(2, data_format=fmt)(h)
    h = layers.Conv1D(8, 3, activation="tanh", data_format=fmt)(h)
    h = layers.GlobalMaxPooling1D(data_format=fmt)(h)
    return published._randomise_keras(keras.Model(x, layers.Dense(2)(h)), seed=9)


def test_channels_first_same_average_pooling_and_zero_padding():
    model = channels_first_padding_model(41)
    X = models.random_one_hot(2, 41, seed=9, layout="NCL")
    plan = fast_and_exact(model, X, target=[0, 1])
    assert all(n.length_axis == 2 for n in plan.graph.nodes)
    fills = [str(n.fill) for n in plan.graph.nodes if n.kind == "window"]
    assert fills == ["0.0", "nan", "0.0", "0.0"]


@pytest.mark.parametrize(
    ("build", "length"),
    [
        (lambda: published.keras_basset(200, (12, 8, 8), 16, 3), 200),
        (lambda: published.keras_small_convnet(60, 8), 60),
        (lambda: published.keras_small_convnet(60, 8, channels_first=True), 60),
    ],
)
def test_keras_basset_and_small_conv_net(build, length):
    model = build()
    layout = "NCL" if tuple(model.inputs[0].shape[1:]) == (4, length) else "NLC"
    X = models.random_one_hot(2, length, seed=10, layout=layout)
    fast_and_exact(model, X)
