"""captum on the same torch model is an independent reference (1e-5 relative)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import IntegratedGradients, Saliency
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa

# captum's own riemann_trapezoid weights sum to (n-1)/n, so it is compared through these.
RULES = ["gausslegendre", "riemann_left", "riemann_right", "riemann_middle"]


@pytest.fixture(params=["NCL", "NLC"])
def setup(request, conv_weights):
    layout = request.param
    model = make_model("torch", "convnet", conv_weights, layout)
    X = random_one_hot(6, LENGTH, seed=11, layout=layout)
    return model, X


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("baseline", ["zeros", "array"])
def test_integrated_gradients_match_captum(setup, rule, baseline):
    model, X = setup
    if baseline == "zeros":
        ours_baselines, theirs = "zeros", torch.zeros_like(torch.from_numpy(X))
    else:
        per_sequence = np.random.default_rng(5).random(X.shape).astype(np.float32) * 0.25
        ours_baselines, theirs = per_sequence, torch.from_numpy(per_sequence)
    ours = sa.integrated_gradients(
        model, X, target=2, baselines=ours_baselines, n_steps=16, quadrature=rule, batch_size=37
    )
    reference = IntegratedGradients(model).attribute(
        torch.from_numpy(X), baselines=theirs, target=2, n_steps=16, method=rule
    )
    assert_close(ours, reference.detach().numpy(), FLOAT32)


def test_several_targets_match_captum_calls(setup):
    model, X = setup
    ours = sa.integrated_gradients(
        model, X, target=[0, 1, 2], n_steps=10, quadrature="gausslegendre"
    )
    ig = IntegratedGradients(model)
    for k in range(3):
        reference = ig.attribute(torch.from_numpy(X), target=k, n_steps=10, method="gausslegendre")
        assert_close(ours[:, k], reference.detach().numpy(), FLOAT32)


def test_saliency_matches_captum(setup):
    model, X = setup
    ours = sa.saliency(model, X, target=1)
    reference = Saliency(model).attribute(torch.from_numpy(X), target=1, abs=False)
    assert_close(ours, reference.detach().numpy(), FLOAT32)
