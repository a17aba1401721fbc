"""A NaN or inf model output is refused by every method, naming the sequence and the target,
even where the gradients stay finite (a NaN added to an output does not reach its gradient)."""

from __future__ import annotations

import models
import numpy as np
import pytest

import seqattrib as sa

LENGTH = 12
METHODS = {
    "saliency": lambda model, X: sa.saliency(model, X, target=[0, 1], batch_size=5),
    "ig": lambda model, X: sa.integrated_gradients(model, X, target=[0, 1], n_steps=4),
    "eig": lambda model, X: sa.expected_integrated_gradients(
        model, X, target=[0, 1], n_baselines=2, n_steps=3, batch_size=7
    ),
    "ism": lambda model, X: sa.ism(model, X, target=[0, 1], fast=False),
}


def _nan_for_sequence(framework: str, bad: int):
    """Linear outputs; output 1 of sequence ``bad`` (its first base is a G) plus NaN."""
    weights = models.linear_weights(LENGTH, n_outputs=2, seed=4)
    if framework == "torch":
        import torch

        linear = models.torch_model("linear", weights, "NLC")

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = linear

            def forward(self, x):
                out = self.linear(x)
                flag = (x[:, 0, 2] == 1).float()[:, None] * torch.tensor([[0.0, 1.0]])
                return out + torch.nan_to_num(flag / 0.0, nan=0.0, posinf=float("nan"))

        return Model()
    import keras

    linear = models.keras_model("linear", weights, LENGTH, "NLC")
    inputs = keras.Input((LENGTH, 4))
    flag = keras.ops.cast(keras.ops.equal(inputs[:, 0, 2], 1.0), "float32")[:, None]
    mask = flag * keras.ops.convert_to_tensor([[0.0, 1.0]])
    nan = keras.ops.where(
        mask > 0, keras.ops.full_like(mask, float("nan")), keras.ops.zeros_like(mask)
    )
    return keras.Model(inputs, linear(inputs) + nan)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_nan_output_names_the_sequence_and_target(framework, method):
    X = models.random_one_hot(6, LENGTH, seed=2)
    X[:, 0] = np.eye(4, dtype=np.float32)[0]
    X[4, 0] = np.eye(4, dtype=np.float32)[2]  # sequence 4 starts with G: its output 1 is NaN
    model = _nan_for_sequence(framework, 4)
    # ISM: every mutant with a G at position 0 has a NaN output, from sequence 0 on
    pattern = r"sequence 4 \(target 1\)" if method != "ism" else r"sequence 0 \(target 1\)"
    with pytest.raises(ValueError, match=pattern):
        METHODS[method](model, X)


def test_finite_outputs_pass(conv_weights):
    X = models.random_one_hot(4, 24, seed=3)
    model = models.torch_model("convnet", conv_weights, "NLC")
    assert np.isfinite(sa.saliency(model, X)).all()
