"""The same weights in torch and TensorFlow give the same attributions (1e-4)."""

from __future__ import annotations

import pytest
from conftest import LENGTH, make_model
from helpers import CROSS_FRAMEWORK, assert_close
from models import random_one_hot

import seqattrib as sa

CALLS = {
    "saliency": lambda m, X: sa.saliency(m, X, target=[0, 2]),
    "saliency_corrected": lambda m, X: sa.saliency(m, X, target=1, correct_gradient=True),
    "ig": lambda m, X: sa.integrated_gradients(m, X, target=[0, 2], n_steps=8),
    "ig_uniform_hypothetical": lambda m, X: sa.integrated_gradients(
        m, X, target=1, baselines="uniform", multiply_by_inputs=False, n_steps=8
    ),
    "eig": lambda m, X: sa.expected_integrated_gradients(
        m, X, target=[0, 1], n_baselines=4, n_steps=5, random_state=7, return_delta=True
    ),
    "eig_random_corrected": lambda m, X: sa.expected_integrated_gradients(
        m, X, target=None, baselines="random", n_baselines=3, n_steps=3, correct_gradient=True
    ),
}


@pytest.mark.parametrize("layout", ["NLC", "NCL"])
@pytest.mark.parametrize("name", list(CALLS))
def test_torch_and_tensorflow_agree(name, layout, conv_weights):
    X = random_one_hot(5, LENGTH, seed=12, layout=layout)
    torch_result = CALLS[name](make_model("torch", "convnet", conv_weights, layout), X)
    tf_result = CALLS[name](make_model("tensorflow", "convnet", conv_weights, layout), X)
    if isinstance(torch_result, tuple):
        for a, b in zip(tf_result, torch_result, strict=True):
            assert_close(a, b, CROSS_FRAMEWORK)
    else:
        assert_close(tf_result, torch_result, CROSS_FRAMEWORK)
