"""Bad input to TracIn gets the package's error template: parameter, expectation, what came,
and a fix. A failure half-way leaves the model as it was."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from tracin_models import LENGTH, convnet_checkpoints, data, one_torch_thread, torch_state

import seqattrib as sa


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def weights():
    return convnet_checkpoints(2)


@pytest.fixture
def model(weights):
    return models.torch_model("convnet", weights[0], "NLC")


@pytest.fixture(scope="module")
def states(weights):
    return [torch_state("convnet", w) for w in weights]


@pytest.fixture(scope="module")
def train_set():
    return data(9, seed=1)


def test_empty_and_non_list_checkpoints(model, states):
    with pytest.raises(ValueError, match=r"'checkpoints' parameter of TracIn.*non-empty"):
        sa.TracIn(model, [])
    with pytest.raises(TypeError, match=r"'checkpoints'.*a list.*Wrap a single checkpoint"):
        sa.TracIn(model, "epoch1.pt")
    with pytest.raises(TypeError, match=r"'checkpoints'.*a list"):
        sa.TracIn(model, states[0])


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"loss": "hinge"}, ValueError, r"'loss'.*'mse', 'poisson', 'multinomial' or a callable"),
        ({"layer": "first"}, ValueError, r"'layer'.*None or 'last'"),
        ({"proj_dim": 0}, ValueError, r"'proj_dim'.*positive integer"),
        ({"layer": "last", "proj_dim": 8}, ValueError, r"'proj_dim'.*None when layer='last'"),
        ({"learning_rates": [1.0]}, ValueError, r"'learning_rates'.*2 positive numbers"),
        ({"learning_rates": -1.0}, ValueError, r"'learning_rates'.*positive"),
        ({"load_checkpoint": "torch.load"}, TypeError, r"'load_checkpoint'.*callable"),
        ({"batch_size": 0}, ValueError, r"'batch_size'.*'auto' or a positive integer"),
        ({"batch_size": "big"}, ValueError, r"'batch_size'.*'auto' or a positive integer"),
        ({"random_state": "seed"}, TypeError, r"'random_state'"),
    ],
)
def test_bad_parameters(model, states, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        sa.TracIn(model, states, **kwargs)


def test_mismatched_lengths(model, states, train_set):
    X, y = train_set
    with pytest.raises(ValueError, match=r"'y_train' parameter of TracIn.fit.*9 of them.*8 labels"):
        sa.TracIn(model, states).fit(X, y[:-1])
    tracin = sa.TracIn(model, states).fit(X, y)
    with pytest.raises(ValueError, match=r"'y_test' parameter of TracIn.scores.*3 of them"):
        tracin.scores(X[:3], y[:4])
    with pytest.raises(ValueError, match=r"'y_test' parameter of TracIn.top_k"):
        tracin.top_k(X[:3], y[:2], 1)


def test_labels_out_of_range(model, states, train_set):
    X, y = train_set
    bad = y.copy()
    bad[4] = 3
    with pytest.raises(ValueError, match=r"class labels in \[0, 3\).*label 3 for sequence 4"):
        sa.TracIn(model, states).fit(X, bad)
    bad[4] = -1
    with pytest.raises(ValueError, match=r"label -1 for sequence 4"):
        sa.TracIn(model, states).fit(X, bad)
    with pytest.raises(ValueError, match=r"integer class labels.*y.argmax"):
        sa.TracIn(model, states).fit(X, np.eye(3)[y])
    labels = np.zeros((9, 3))
    labels[2, 1] = 2.0
    with pytest.raises(ValueError, match=r"labels in \[0, 1\] for loss='bce'.*sequence 2"):
        sa.TracIn(model, states, loss="bce").fit(X, labels)
    with pytest.raises(ValueError, match=r"labels of shape \(9, 3\) for loss='mse'"):
        sa.TracIn(model, states, loss="mse").fit(X, np.zeros(9))
    with pytest.raises(ValueError, match=r"'X_train'.*summing to at most 1"):
        sa.TracIn(model, states).fit(np.ones_like(X), y)


def test_checkpoint_that_does_not_fit_names_the_first_key(model, states, train_set, tmp_path):
    other = torch_state("convnet", models.convnet_weights(n_outputs=2, seed=3))
    with pytest.raises(
        ValueError,
        match=r"'checkpoints'.*fit the model.*checkpoint 1.*'dense.weight' has shape \(2, 8\) "
        r"in it but \(3, 8\) in the model",
    ):
        sa.TracIn(model, [states[0], other]).fit(*train_set)
    missing = {k: v for k, v in states[1].items() if k != "conv2.bias"}
    with pytest.raises(ValueError, match=r"checkpoint 1.*'conv2.bias' of the model is missing"):
        sa.TracIn(model, [states[0], missing]).fit(*train_set)
    wrapped = {"model_state_dict": states[1], **states[1]}
    torch.save(wrapped, tmp_path / "wrapped.pt")
    with pytest.raises(ValueError, match=r"wrapped.pt.*key 'model_state_dict'.*load_checkpoint"):
        sa.TracIn(model, [states[0], str(tmp_path / "wrapped.pt")]).fit(*train_set)


def test_failure_half_way_restores_the_model(model, states, train_set):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    broken = dict(states[1])
    broken["conv1.weight"] = broken["conv1.weight"][:, :, :2]
    with pytest.raises(ValueError, match=r"'conv1.weight' has shape"):
        sa.TracIn(model, [states[0], broken]).fit(*train_set)
    assert model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_keras_checkpoint_that_does_not_fit(tmp_path, weights, train_set):
    keras_model = models.keras_model("convnet", weights[0], LENGTH, "NLC")
    small = models.keras_model("convnet", models.convnet_weights(filters=4), LENGTH, "NLC")
    small.save_weights(tmp_path / "small.weights.h5")
    good = keras_model.get_weights()
    with pytest.raises(ValueError, match=r"checkpoint 1 \('.*small.weights.h5'\).*has shape"):
        sa.TracIn(keras_model, [good, str(tmp_path / "small.weights.h5")]).fit(*train_set)
    with pytest.raises(ValueError, match=r"checkpoint 1 \(a list\).*'conv1d.*/kernel' has shape"):
        sa.TracIn(keras_model, [good, small.get_weights()]).fit(*train_set)
    with pytest.raises(ValueError, match=r"holds 3 arrays but the model has 6 weights"):
        sa.TracIn(keras_model, [good, good[:3]]).fit(*train_set)
    for now, then in zip(keras_model.get_weights(), good, strict=True):
        np.testing.assert_array_equal(now, then)


def test_identical_checkpoints(model, states, train_set, tmp_path):
    with pytest.raises(ValueError, match=r"checkpoints 0 and 2, which load identical weights"):
        sa.TracIn(model, [states[0], states[1], states[0]]).fit(*train_set)
    torch.save(states[0], tmp_path / "a.pt")
    torch.save(states[0], tmp_path / "b.pt")
    with pytest.raises(ValueError, match=r"checkpoints 0 and 1, which load identical"):
        sa.TracIn(model, [str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]).fit(*train_set)
    with pytest.raises(ValueError, match=r"identical weights"):  # a loader that ignores its input
        sa.TracIn(model, states, load_checkpoint=lambda m, c: None).fit(*train_set)


def test_checkpoint_changed_after_fit(model, states, train_set):
    live = {k: v.clone() for k, v in states[1].items()}
    tracin = sa.TracIn(model, [states[0], live]).fit(*train_set)
    live["dense.bias"] += 1.0  # e.g. a live state dict that training keeps updating
    with pytest.raises(ValueError, match=r"checkpoint 1.*now loads other weights.*fit\(\) again"):
        tracin.scores(*train_set)


def test_loader_returning_something_else(model, states, train_set):
    with pytest.raises(ValueError, match=r"'load_checkpoint'.*None or the checkpoint's learning"):
        sa.TracIn(model, states, load_checkpoint=lambda m, s: m.load_state_dict(s)).fit(*train_set)
    with pytest.raises(ValueError, match=r"'learning_rates'.*consistent.*returned 0.5"):
        sa.TracIn(
            model,
            states,
            learning_rates=[1.0, 1.0],
            load_checkpoint=lambda m, s: m.load_state_dict(s) and 0.5,
        ).fit(*train_set)


def test_last_layer_needs_a_final_dense_layer(states, train_set, weights):
    class Softmaxed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = models.torch_model("convnet", weights[0], "NLC")

        def forward(self, x):
            return torch.softmax(self.inner(x), dim=-1)

    prefixed = [{f"inner.{k}": v for k, v in s.items()} for s in states]
    with pytest.raises(ValueError, match=r"'layer'.*not the model's output.*layer=None"):
        sa.TracIn(Softmaxed(), prefixed, layer="last").fit(*train_set)


def test_keras_last_layer_with_activation(train_set):
    import keras

    inputs = keras.Input((LENGTH, 4))
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, out)
    with pytest.raises(ValueError, match=r"'layer'.*activation 'softmax'"):
        sa.TracIn(model, [model.get_weights()], layer="last").fit(*train_set)


def test_use_before_fit_and_bad_k(model, states, train_set):
    tracin = sa.TracIn(model, states)
    with pytest.raises(RuntimeError, match=r"TracIn.scores needs the training set first"):
        tracin.scores(*train_set)
    with pytest.raises(RuntimeError, match=r"TracIn.self_influence needs"):
        tracin.self_influence()
    tracin.fit(*train_set)
    with pytest.raises(ValueError, match=r"'k' parameter of TracIn.top_k.*\[1, 9\]"):
        tracin.top_k(*train_set, 10)


def test_cross_entropy_needs_several_outputs(train_set):
    w = models.convnet_weights(n_outputs=1)
    model = models.torch_model("convnet", w, "NLC")
    state = torch_state("convnet", w)
    with pytest.raises(ValueError, match=r"'loss'.*'bce', 'mse' or 'poisson' for one output"):
        sa.TracIn(model, [state]).fit(*train_set)
