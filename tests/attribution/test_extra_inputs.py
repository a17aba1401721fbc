"""The model's other inputs (``args=``): per-sequence arrays go with their sequence, fixed ones
to every row. Checked against the same model with the extra input bound by hand, one sequence
at a time."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from helpers import FLOAT32, assert_close

import seqattrib as sa

LENGTH = 30
WEIGHTS = models.convnet_weights(n_outputs=3, seed=4)
CONTROL = np.random.default_rng(0).random((5, 2, LENGTH)).astype(np.float32)  # (N, 2, L)
X = models.random_one_hot(5, LENGTH, seed=8)  # (N, L, 4)


class WithControl(torch.nn.Module):
    """bpnet-lite's habit: ``forward(X, X_ctl=None)``; the control track shifts the outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.body = models.torch_model("convnet", WEIGHTS, "NLC")
        self.mix = torch.nn.Linear(2, 3)
        torch.manual_seed(0)
        torch.nn.init.normal_(self.mix.weight)

    def forward(self, x, x_ctl=None):
        out = self.body(x)
        if x_ctl is None:
            return out
        return out * torch.sigmoid(self.mix(x_ctl.mean(dim=-1)))


class Bound(torch.nn.Module):
    def __init__(self, model, control):
        super().__init__()
        self.model, self.control = model, torch.from_numpy(control)

    def forward(self, x):
        return self.model(x, self.control.expand(len(x), *self.control.shape))


def keras_with_control():
    import keras

    body = models.keras_model("convnet", WEIGHTS, LENGTH, "NLC")
    x, ctl = keras.Input((LENGTH, 4)), keras.Input((2, LENGTH))
    mix = keras.layers.Dense(3, activation="sigmoid")
    out = body(x) * mix(keras.ops.mean(ctl, axis=-1))
    model = keras.Model([x, ctl], out)
    torch_mix = WithControl().mix
    mix.set_weights([torch_mix.weight.detach().numpy().T, torch_mix.bias.detach().numpy()])
    return model


METHODS = {
    "saliency": lambda m, X, **k: sa.saliency(m, X, target=[0, 2], **k),
    "ig": lambda m, X, **k: sa.integrated_gradients(m, X, target=1, n_steps=6, **k),
    "eig": lambda m, X, **k: sa.expected_integrated_gradients(
        m, X, target=[0, 1], n_baselines=3, n_steps=2, batch_size=7, **k
    ),
    "ism": lambda m, X, **k: sa.ism(m, X, target=[0, 2], fast=False, **k),
    "deeplift_shap": lambda m, X, **k: sa.deep_lift_shap(
        m, X, target=[0, 1], n_baselines=3, batch_size=5, **k
    ),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_per_sequence_inputs_go_with_their_sequence(method):
    model = WithControl().eval()
    got = METHODS[method](model, X, args=CONTROL)
    for i in range(len(X)):
        bound = Bound(model, CONTROL[i]).eval()
        assert_close(got[i : i + 1], METHODS[method](bound, X[i : i + 1]), FLOAT32)


def test_a_fixed_input_goes_to_every_row():
    model = WithControl().eval()
    got = sa.saliency(model, X, target=0, args=(CONTROL[2],))
    assert_close(got, sa.saliency(Bound(model, CONTROL[2]).eval(), X, target=0), FLOAT32)


@pytest.mark.parametrize("method", ["saliency", "ism", "deeplift_shap"])
def test_keras_models_with_several_inputs_agree_with_torch(method):
    torch_model = WithControl().eval()
    keras_model = keras_with_control()
    expected = METHODS[method](torch_model, X, args=CONTROL)
    assert_close(METHODS[method](keras_model, X, args=CONTROL), expected, 1e-4)


def test_results_do_not_depend_on_the_shard_or_batch():
    model = WithControl().eval()
    full = METHODS["eig"](model, X, args=CONTROL)
    shard = METHODS["eig"](model, X, args=CONTROL, shard=(1, 2))
    assert_close(shard, full[2:], FLOAT32)
    subset = METHODS["eig"](model, X[[4, 1]], args=CONTROL[[4, 1]])
    assert_close(subset, full[[4, 1]], FLOAT32)


def test_eig_to_a_tolerance_with_inputs():
    model = WithControl().eval()
    got, _, used = sa.expected_integrated_gradients(
        model,
        X,
        args=CONTROL,
        n_baselines=3,
        n_steps=2,
        tolerance=0.3,
        max_baselines=12,
        return_stderr=True,
    )
    for i in range(len(X)):
        bound = Bound(model, CONTROL[i]).eval()
        alone = sa.expected_integrated_gradients(
            bound, X[i : i + 1], n_baselines=3, n_steps=2, tolerance=0.3, max_baselines=12
        )[0]
        assert_close(got[i : i + 1], alone, FLOAT32)


def test_inputs_are_part_of_a_file_s_identity(tmp_path):
    model = WithControl().eval()
    out = tmp_path / "t.h5"
    sa.saliency(model, X, args=CONTROL, out=out)
    with pytest.raises(ValueError, match="args"):
        sa.saliency(model, X, args=CONTROL + 1, out=out)
