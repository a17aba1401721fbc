"""Bad input gets an error that names the parameter, what was expected, what came and a fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from models import random_one_hot

import seqattrib as sa


@pytest.fixture
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


@pytest.fixture
def X():
    return random_one_hot(3, LENGTH)


def test_one_hot_refuses_other_characters_naming_them():
    with pytest.raises(ValueError, match=r"'R' at position 2 of sequence 1.*N"):
        sa.one_hot(["ACGT", "ACRT"])


def test_one_hot_refuses_unequal_lengths():
    with pytest.raises(ValueError, match=r"length 4 for sequence 0 but 3 for sequence 1"):
        sa.one_hot(["ACGT", "ACG"])


def test_ambiguous_alphabet_axis(model):
    X = random_one_hot(2, 4)
    with pytest.raises(ValueError, match=r"'alphabet_axis'.*both axis 1 and axis -1"):
        sa.saliency(model, X)


def test_wrong_alphabet_axis(model, X):
    with pytest.raises(ValueError, match=r"'alphabet_axis'.*axis of size 4"):
        sa.saliency(model, X, alphabet_axis=1)
    with pytest.raises(ValueError, match=r"'alphabet_axis'.*last two axes.*-1, -2, 2 or 1"):
        sa.saliency(model, X, alphabet_axis=0)


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (np.zeros((3, LENGTH)), r"3-D one-hot array"),
        (np.zeros((3, LENGTH, 5)), r"4 bases on axis 1 or axis -1"),
        (np.zeros((0, LENGTH, 4)), r"non-empty"),
        (np.full((2, LENGTH, 4), 2.0), r"values in \[0, 1\].*sequence 0"),
        (np.ones((2, LENGTH, 4)), r"summing to at most 1.*position 0 of sequence 0"),
    ],
)
def test_bad_arrays(model, bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        sa.saliency(model, bad)


def test_non_one_hot_value_names_the_sequence(model, X):
    X = X.copy()
    X[2, 5, 1] = np.nan
    with pytest.raises(ValueError, match=r"sequence 2"):
        sa.integrated_gradients(model, X, n_steps=2)


def test_strings_are_refused_with_the_fix(model):
    with pytest.raises(TypeError, match=r"seqattrib.one_hot"):
        sa.saliency(model, ["ACGT" * 6])


@pytest.mark.parametrize(
    "target, pattern",
    [
        (3, r"'target'.*\[0, 3\).*Got 3"),
        ([0, 7], r"'target'.*Got 7"),
        ("a", r"'target'.*int, a sequence of ints or None"),
        ([], r"non-empty"),
    ],
)
def test_target_out_of_range(model, X, target, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        sa.saliency(model, X, target=target)


@pytest.mark.parametrize(
    "baselines, pattern",
    [
        (np.zeros((LENGTH, 5)), r"'baselines'.*shape"),
        (np.zeros((2, 4, LENGTH)), r"'baselines'.*layout of X"),
        ("gaussian", r"'baselines'.*'dinuc_shuffle'"),
        (np.full((LENGTH, 4), np.nan), r"'baselines'.*finite"),
    ],
)
def test_bad_baselines(model, X, baselines, pattern):
    with pytest.raises(ValueError, match=pattern):
        sa.integrated_gradients(model, X, baselines=baselines, n_steps=2)


def test_callable_baseline_of_the_wrong_shape(model, X):
    with pytest.raises(ValueError, match=r"callable returning shape \(2, 24, 4\).*sequence 0"):
        sa.expected_integrated_gradients(model, X, baselines=lambda x, n, rng: x, n_baselines=2)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"batch_size": 0}, r"'batch_size'.*'auto' or a positive integer"),
        ({"batch_size": "big"}, r"'batch_size'"),
        ({"max_cpu_sequences": 0}, r"'max_cpu_sequences'"),
        ({"n_steps": 0}, r"'n_steps'"),
        ({"quadrature": "simpson"}, r"'quadrature'.*'gausslegendre'"),
        ({"return_delta": True, "multiply_by_inputs": False}, r"'return_delta'"),
        ({"random_state": "x"}, r"'random_state'"),
        ({"verbose": 1}, r"'verbose'"),
    ],
)
def test_bad_parameters(model, X, kwargs, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        sa.integrated_gradients(model, X, **kwargs)


def test_n_baselines_must_be_positive(model, X):
    with pytest.raises(ValueError, match=r"'n_baselines'"):
        sa.expected_integrated_gradients(model, X, n_baselines=0)


def test_non_finite_model_outputs(X):
    class Broken(torch.nn.Module):
        def forward(self, x):
            return torch.log(x.sum(dim=(1, 2)) - LENGTH)  # log(0)

    with pytest.raises(ValueError, match=r"finite outputs .and gradients.*sequence 0 \(target 0\)"):
        sa.saliency(Broken(), X)


def test_tuple_outputs_need_output_fn(X, conv_weights):
    base = make_model("torch", "convnet", conv_weights, "NLC")

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base = base

        def forward(self, x):
            out = self.base(x)
            return out, out.sum(dim=1)

    with pytest.raises(ValueError, match=r"'output_fn'.*tuple"):
        sa.saliency(TwoHeads(), X)
    both = sa.saliency(TwoHeads(), X, output_fn=lambda out: out[1])
    np.testing.assert_allclose(
        both, sa.saliency(base, X, target=[0, 1, 2]).sum(axis=1), rtol=1e-5, atol=1e-6
    )


def test_unknown_model_type(X):
    with pytest.raises(TypeError, match=r"'model'.*torch.nn.Module.*backend='torch'"):
        sa.saliency(object(), X)
    with pytest.raises(TypeError, match=r"'model'.*callable"):
        sa.saliency(object(), X, backend="torch")
    with pytest.raises(ValueError, match=r"'backend'"):
        sa.saliency(lambda x: x, X, backend="jax")
