"""An output_fn that returns the wrong thing, or raises, is reported as an output_fn error that
says what it returned (or raised) and what is expected, on both frameworks and every method."""

from __future__ import annotations

import models
import numpy as np
import pytest

import seqattrib as sa

LENGTH = 12
METHODS = {
    "saliency": lambda m, X, fn: sa.saliency(m, X, output_fn=fn, batch_size=4),
    "ig": lambda m, X, fn: sa.integrated_gradients(m, X, output_fn=fn, n_steps=2),
    "ism": lambda m, X, fn: sa.ism(m, X, output_fn=fn, fast=False),
}


def _model(framework: str):
    weights = models.convnet_weights(n_outputs=3)
    if framework == "torch":
        return models.torch_model("convnet", weights, "NLC")
    return models.keras_model("convnet", weights, LENGTH, "NLC")


def _to_numpy(out):
    return out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_an_output_fn_that_reduces_the_batch_is_named(framework, method):
    X = models.random_one_hot(6, LENGTH, seed=1)
    with pytest.raises(
        ValueError,
        match=r"^The 'output_fn' parameter of .*one row for each of the"
        r" \d+ inputs .*Got a result of shape \(1, 3\)",
    ) as info:
        METHODS[method](_model(framework), X, lambda out: out[:1])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_an_output_fn_returning_numpy_is_named(framework):
    X = models.random_one_hot(3, LENGTH, seed=1)
    with pytest.raises(
        ValueError,
        match=r"^The 'output_fn' parameter of saliency .*"
        r"(framework\. Got a NumPy array of shape \(2, 3\)|numpy)",
    ):
        sa.saliency(_model(framework), X, output_fn=_to_numpy)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_an_output_fn_that_raises_is_named_and_chained(framework, method):
    X = models.random_one_hot(3, LENGTH, seed=1)

    def pick_profile(out):
        return out["profile"]

    with pytest.raises(
        ValueError,
        match=r"^The 'output_fn' parameter of \w+ must be a function "
        r"that takes the model's raw output\. Got a function that raised "
        r"\w+: .* \(given a tensor of shape \(2, 3\)\)",
    ) as info:
        METHODS[method](_model(framework), X, pick_profile)
    assert "\n" not in str(info.value)
    if framework == "torch":  # TensorFlow's tracing re-raises errors without their cause
        assert isinstance(info.value.__cause__, IndexError)
    assert "model that takes X" not in str(info.value)  # not blamed on the model's layout


def test_an_output_fn_picking_the_batch_tensor_of_a_tuple_passes():
    """A raw output whose first tensor is not batch-major (attention weights per head): the
    result's rows match the tensor that is, and the attributions are those of that tensor."""
    import torch

    inner = _model("torch")

    class WithHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return torch.zeros(7, 2), self.inner(x)

    X = models.random_one_hot(4, LENGTH, seed=2)
    got = sa.saliency(WithHeads(), X, output_fn=lambda out: out[1], batch_size=3)
    np.testing.assert_array_equal(got, sa.saliency(inner, X, batch_size=3))
