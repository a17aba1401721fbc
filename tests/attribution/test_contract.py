"""The contract every gradient method keeps, for each method x backend x layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.engine import outputs

METHODS = {
    "saliency": lambda model, X, **kw: sa.saliency(model, X, **kw),
    "ig": lambda model, X, **kw: sa.integrated_gradients(model, X, n_steps=6, **kw),
    "eig": lambda model, X, **kw: sa.expected_integrated_gradients(
        model, X, n_baselines=3, n_steps=4, **kw
    ),
}
CASES = [
    (method, framework, layout)
    for method in METHODS
    for framework in ("torch", "tensorflow")
    for layout in ("NLC", "NCL")
]
N = 5


@pytest.fixture(params=CASES, ids=lambda c: "-".join(c))
def case(request, conv_weights):
    method, framework, layout = request.param
    model = make_model(framework, "convnet", conv_weights, layout)
    X = random_one_hot(N, LENGTH, seed=1, layout=layout)
    return METHODS[method], model, X, method


def test_shapes_dtype_and_layout(case):
    run, model, X, _ = case
    one = run(model, X, target=1, batch_size=16)
    assert one.shape == X.shape and one.dtype == np.float32
    two = run(model, X, target=[2, 0], batch_size=16)
    assert two.shape == (N, 2, *X.shape[1:]) and two.dtype == np.float32
    every = run(model, X, target=None, batch_size=16)
    assert every.shape == (N, 3, *X.shape[1:])
    assert np.abs(one).max() > 0


@pytest.mark.parametrize("batch_size", [1, 7, 10**6, "auto"])
def test_batch_size_does_not_change_results(case, batch_size):
    run, model, X, _ = case
    reference = run(model, X, target=[0, 2], batch_size=3)
    assert_close(run(model, X, target=[0, 2], batch_size=batch_size), reference, FLOAT32)


@pytest.mark.parametrize("max_cpu_sequences", [1, 2, 3])
def test_accumulation_limit_does_not_change_results(case, max_cpu_sequences):
    run, model, X, _ = case
    reference = run(model, X, target=1, batch_size=5)
    result = run(model, X, target=1, batch_size=5, max_cpu_sequences=max_cpu_sequences)
    assert_close(result, reference, FLOAT32)


def test_subset_and_permutation_give_the_same_rows(case):
    run, model, X, _ = case
    full = run(model, X, target=0, batch_size=4)
    order = np.array([3, 0, 4, 1, 2])
    assert_close(run(model, X[order], target=0, batch_size=4), full[order], FLOAT32)
    subset = np.array([4, 2])
    assert_close(run(model, X[subset], target=0, batch_size=4), full[subset], FLOAT32)


def test_k_targets_equal_k_single_calls(case):
    run, model, X, _ = case
    together = run(model, X, target=[2, 0, 1], batch_size=6)
    for k, t in enumerate([2, 0, 1]):
        assert_close(together[:, k], run(model, X, target=t, batch_size=6), FLOAT32)


def test_same_random_state_same_result(case):
    run, model, X, method = case
    first = (
        run(model, X, target=0, batch_size=8, random_state=3)
        if method != "saliency"
        else (run(model, X, target=0, batch_size=8))
    )
    again = (
        run(model, X, target=0, batch_size=8, random_state=3)
        if method != "saliency"
        else (run(model, X, target=0, batch_size=8))
    )
    np.testing.assert_array_equal(first, again)
    if method == "eig":
        other = run(model, X, target=0, batch_size=8, random_state=4)
        assert np.abs(other - first).max() > 1e-3


def test_int8_input_equals_float32(case):
    run, model, X, _ = case
    assert_close(run(model, X.astype(np.int8), target=0), run(model, X, target=0), FLOAT32)


@pytest.mark.parametrize("method", list(METHODS))
def test_torch_model_state_is_restored(method, conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NCL")
    model.train()
    model.conv2.eval()
    model.conv1.weight.requires_grad_(False)
    X = random_one_hot(3, LENGTH, layout="NCL")
    METHODS[method](model, X, target=0, batch_size=4)
    assert model.training and model.dense.training and not model.conv2.training
    assert not model.conv1.weight.requires_grad and model.conv2.weight.requires_grad
    assert all(p.grad is None for p in model.parameters())
    assert all(p.device == torch.device("cpu") for p in model.parameters())


def test_dropout_is_off_during_attribution(conv_weights):
    """A model left in train mode is evaluated in eval mode (dropout off), then restored."""
    base = make_model("torch", "convnet", conv_weights, "NCL")
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), base).train()
    X = random_one_hot(3, LENGTH, layout="NCL")
    assert_close(sa.saliency(model, X), sa.saliency(base, X), FLOAT32)
    assert model.training


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_vectorised_backward_equals_sequential_passes(framework, conv_weights, monkeypatch):
    """GPUs run the K backward passes as one vmapped / batch-Jacobian pass, CPUs one by one."""
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(4, LENGTH, seed=9)
    sequential = sa.integrated_gradients(model, X, target=[0, 1, 2], n_steps=4, batch_size=7)
    monkeypatch.setattr(outputs, "VECTORISE_ON_CPU", True)
    vectorised = sa.integrated_gradients(model, X, target=[0, 1, 2], n_steps=4, batch_size=7)
    assert_close(vectorised, sequential, FLOAT32)
