"""Models as users have them: X in the layout the model does not take, and models in float64 or
bfloat16. The package feeds each model its own layout and dtype, and returns attributions in the
layout of X."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close

import seqattrib as sa

METHODS = {
    "saliency": lambda m, X, **k: sa.saliency(m, X, target=[0, 2], **k),
    "eig": lambda m, X, **k: sa.expected_integrated_gradients(
        m, X, target=[0, 2], n_baselines=3, n_steps=3, **k
    ),
    "ism": lambda m, X, **k: sa.ism(m, X, target=[0, 2], fast=False, **k),
    "deeplift_shap": lambda m, X, **k: sa.deep_lift_shap(
        m, X, target=[0, 1], n_baselines=3, batch_size=5, **k
    ),
}


def _swap(X: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(X, -1, -2))


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("model_layout", ["NCL", "NLC"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_x_in_the_other_layout_gives_the_same_attributions_in_its_own(
    framework, model_layout, method, conv_weights
):
    model = make_model(framework, "convnet", conv_weights, model_layout)
    X = models.random_one_hot(4, LENGTH, seed=1, layout=model_layout)
    own = METHODS[method](model, X)
    other = METHODS[method](model, _swap(X))
    assert other.shape == (4, 2, *_swap(X).shape[1:])
    assert_close(_swap(other), own, FLOAT32)


def test_a_model_that_takes_neither_layout_is_named():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(400, 2))  # 100 bp only
    X = models.random_one_hot(2, LENGTH, seed=2)
    with pytest.raises(ValueError, match=r"failed on both.*alphabet_axis"):
        sa.saliency(model, X)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_torch_models_in_other_dtypes(dtype, conv_weights):
    reference = models.torch_model("convnet", conv_weights, "NCL")
    model = models.torch_model("convnet", conv_weights, "NCL").to(dtype)
    X = models.random_one_hot(3, LENGTH, seed=3, layout="NCL")
    expected = sa.integrated_gradients(reference, X, target=[0, 1], n_steps=8)
    got = sa.integrated_gradients(model, X, target=[0, 1], n_steps=8)
    assert got.dtype == np.float32
    # float64 is closer to exact than float32; bfloat16 keeps 8 bits of mantissa
    assert_close(got, expected, FLOAT32 if dtype == torch.float64 else 2e-2)
    assert next(model.parameters()).dtype == dtype  # the model is left as it was


def test_keras_models_in_float64(conv_weights):
    import keras

    reference = make_model("tensorflow", "convnet", conv_weights, "NLC")
    keras.config.set_floatx("float64")
    try:
        model = models.keras_model("convnet", conv_weights, LENGTH, "NLC")
    finally:
        keras.config.set_floatx("float32")
    X = models.random_one_hot(3, LENGTH, seed=4)
    expected = sa.integrated_gradients(reference, X, target=[0, 1], n_steps=8)
    got = sa.integrated_gradients(model, X, target=[0, 1], n_steps=8)
    assert_close(got, expected, FLOAT32)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_ensemble_gives_the_mean_attribution(framework, method):
    weights = [models.convnet_weights(n_outputs=3, seed=s) for s in (1, 2, 3)]
    layouts = ["NLC", "NCL", "NLC"]  # members may take different layouts
    members = [
        make_model(framework, "convnet", w, layout)
        for w, layout in zip(weights, layouts, strict=True)
    ]
    X = models.random_one_hot(3, LENGTH, seed=5)
    each = [METHODS[method](m, X) for m in members]
    assert_close(METHODS[method](members, X), np.mean(each, axis=0), FLOAT32)


def test_an_ensemble_of_mixed_outputs_is_refused():
    a = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NLC")
    b = models.torch_model("convnet", models.convnet_weights(n_outputs=2), "NLC")
    with pytest.raises(ValueError, match=r"same number of outputs"):
        sa.saliency([a, b], models.random_one_hot(2, LENGTH))


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_tensors_as_x(framework, dtype, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = models.random_one_hot(3, LENGTH, seed=6).astype(dtype)
    if framework == "torch":
        tensor = torch.from_numpy(X)
    else:
        import tensorflow as tf

        tensor = tf.constant(X)
    for method in ("saliency", "ism"):
        assert_close(METHODS[method](model, tensor), METHODS[method](model, X), FLOAT32)
