"""Analytic truths: a linear model's saliency is its weights and its IG is exact."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import CLOSED_FORM, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.attribution.paths import QUADRATURES as RULES

FRAMEWORKS = ("torch", "tensorflow")
LAYOUTS = ("NLC", "NCL")


def _w(weights, layout, target):
    """The (L, 4, K) linear weights of one target, in ``layout``."""
    w = weights["w"][:, :, target]
    return w if layout == "NLC" else w.T


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_linear_saliency_is_the_weights(framework, layout, linear_weights):
    model = make_model(framework, "linear", linear_weights, layout)
    X = random_one_hot(4, LENGTH, layout=layout)
    result = sa.saliency(model, X, target=[1, 2])
    for k, t in enumerate([1, 2]):
        assert_close(
            result[:, k], np.broadcast_to(_w(linear_weights, layout, t), X.shape), CLOSED_FORM
        )
    corrected = sa.saliency(model, X, target=1, correct_gradient=True)
    w = _w(linear_weights, layout, 1)
    axis = -1 if layout == "NLC" else 0
    assert_close(
        corrected, np.broadcast_to(w - w.mean(axis=axis, keepdims=True), X.shape), CLOSED_FORM
    )
    assert_close(sa.saliency(model, X, target=1, multiply_by_inputs=True), X * w, CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rule", RULES)
def test_linear_ig_is_exact_for_every_rule(framework, layout, rule, linear_weights):
    model = make_model(framework, "linear", linear_weights, layout)
    X = random_one_hot(4, LENGTH, seed=2, layout=layout)
    w = _w(linear_weights, layout, 0)
    for baselines, b in [("zeros", 0.0), ("uniform", 0.25)]:
        ig, delta = sa.integrated_gradients(
            model, X, target=0, baselines=baselines, n_steps=3, method=rule, return_delta=True
        )
        assert_close(ig, (X - b) * w, CLOSED_FORM)
        assert_close(delta, np.zeros(len(X)), 1e-5)
    hypothetical = sa.integrated_gradients(
        model, X, target=0, n_steps=3, method=rule, multiply_by_inputs=False
    )
    assert_close(hypothetical, np.broadcast_to(w, X.shape), CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_linear_eig_with_explicit_baselines(framework, layout, linear_weights):
    model = make_model(framework, "linear", linear_weights, layout)
    X = random_one_hot(3, LENGTH, seed=3, layout=layout)
    per_sequence = np.random.default_rng(0).random((3, 4, *X.shape[1:])).astype(np.float32) / 4
    w = _w(linear_weights, layout, 2)
    eig = sa.expected_integrated_gradients(
        model, X, target=2, baselines=per_sequence, n_baselines=4, n_steps=2
    )
    assert_close(eig, ((X[:, None] - per_sequence) * w).mean(axis=1), CLOSED_FORM)
    shared = per_sequence[0]
    eig = sa.expected_integrated_gradients(
        model, X, target=2, baselines=shared, n_baselines=4, n_steps=2
    )
    assert_close(eig, ((X[:, None] - shared[None]) * w).mean(axis=1), CLOSED_FORM)
    ig = sa.integrated_gradients(model, X, target=2, baselines=per_sequence[:, 0], n_steps=2)
    assert_close(ig, (X - per_sequence[:, 0]) * w, CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_linear_eig_completeness_with_shuffled_baselines(framework, linear_weights):
    model = make_model(framework, "linear", linear_weights, "NLC")
    X = random_one_hot(4, LENGTH, seed=4)
    for baselines in ("dinuc_shuffle", "shuffle", "random"):
        eig, delta = sa.expected_integrated_gradients(
            model,
            X,
            target=[0, 1],
            baselines=baselines,
            n_baselines=5,
            n_steps=2,
            return_delta=True,
        )
        assert delta.shape == (4, 2)
        assert_close(delta, np.zeros((4, 2)), 1e-5)
        assert np.abs(eig).max() > 0.1


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("rule", ["riemann_trapezoid", "riemann_left", "gausslegendre"])
def test_completeness_gap_shrinks_with_steps(framework, rule, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(6, LENGTH, seed=5)
    gaps = []
    for n_steps in (1, 4, 64):
        _, delta = sa.integrated_gradients(
            model, X, target=[0, 1], n_steps=n_steps, method=rule, return_delta=True
        )
        gaps.append(np.abs(delta).max())
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 0.02 * gaps[0]


def test_delta_is_the_completeness_gap(conv_weights):
    """delta = f(x) - f(b) - sum(attributions), checked against direct forward passes."""
    import torch

    model = make_model("torch", "convnet", conv_weights, "NCL")
    X = random_one_hot(4, LENGTH, seed=6, layout="NCL")
    ig, delta = sa.integrated_gradients(
        model,
        X,
        target=2,
        baselines="uniform",
        n_steps=5,
        quadrature="riemann_middle",
        return_delta=True,
    )
    with torch.no_grad():
        fx = model(torch.from_numpy(X))[:, 2].numpy()
        fb = model(torch.full_like(torch.from_numpy(X), 0.25))[:, 2].numpy()
    assert_close(delta, fx - fb - ig.sum(axis=(1, 2)), 1e-5)
    assert np.abs(delta).max() > 1e-4  # five middle points are not exact on a ReLU net
