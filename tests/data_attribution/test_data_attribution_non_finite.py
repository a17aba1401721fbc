"""A NaN or inf model output, loss or gradient is refused by TracIn and TRAK, as feature
attribution refuses it, naming the first such sequence of X_train (or X_test) and the
checkpoint, in torch and Keras (TensorFlow): never all-NaN scores, NaN self-influence, top-k
indices of NaN scores or a raw LinAlgError."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch
from helpers import keras_on_torch
from tracin_models import LENGTH, one_torch_thread

import seqattrib as sa

N_TRAIN, N_TEST, BAD = 12, 4, 5
FRAMEWORKS = ("torch", "tensorflow")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


def _data(n, bad=None, seed=0, n_outputs=3):
    """Sequences starting with A, except sequence ``bad`` (a G: its output is NaN)."""
    rng = np.random.default_rng(seed)
    X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (n, LENGTH))]
    X[:, 0] = np.eye(4, dtype=np.float32)[0]
    if bad is not None:
        X[bad, 0] = np.eye(4, dtype=np.float32)[2]
    y = rng.integers(0, n_outputs, n) if n_outputs > 1 else rng.standard_normal(n)
    return X, y.astype(np.int64 if n_outputs > 1 else np.float32)


class _TorchNet(torch.nn.Module):
    """flatten -> dense(5) -> relu (+ NaN for a sequence starting with G, before the last
    layer, or after it with ``after``) -> dense(K)."""

    def __init__(self, n_outputs=3, after=False):
        super().__init__()
        self.hidden = torch.nn.Linear(LENGTH * 4, 5)
        self.out = torch.nn.Linear(5, n_outputs)
        self.after = after

    def forward(self, x):
        flag = (x[:, 0, 2] == 1).float()[:, None]
        nan = torch.nan_to_num(flag / 0.0, nan=0.0, posinf=float("nan"))
        h = torch.relu(self.hidden(x.flatten(1)))
        return self.out(h) + nan if self.after else self.out(h + nan)


def _keras_net(n_outputs=3, after=False):
    import keras

    inputs = keras.Input((LENGTH, 4))
    flag = keras.ops.cast(keras.ops.equal(inputs[:, 0, 2], 1.0), "float32")[:, None]
    nan = keras.ops.where(flag > 0, keras.ops.full_like(flag, float("nan")), flag * 0.0)
    h = keras.layers.Dense(5, activation="relu")(keras.layers.Flatten()(inputs))
    dense = keras.layers.Dense(n_outputs)
    return keras.Model(inputs, dense(h) + nan if after else dense(h + nan))


def _model_and_checkpoints(framework, n_outputs=3, after=False, n=2):
    """A model and ``n`` checkpoints of it (other random weights)."""
    if framework == "torch":
        states = []
        for seed in range(n):
            torch.manual_seed(seed)
            states.append(copy.deepcopy(_TorchNet(n_outputs, after).state_dict()))
        torch.manual_seed(99)
        return _TorchNet(n_outputs, after), states
    import keras

    lists = []
    for seed in range(n):
        keras.utils.set_random_seed(seed)
        lists.append(_keras_net(n_outputs, after).get_weights())
    return _keras_net(n_outputs, after), lists


def _one_line(info):
    message = str(info.value)
    assert "\n" not in message.strip(), message
    assert message.startswith("The 'model' parameter of ")
    assert "Check the model with that checkpoint on that sequence" in message
    return message


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("mode", ["exact", "projected", "last"])
def test_tracin_names_the_first_bad_training_sequence(framework, mode):
    model, checkpoints = _model_and_checkpoints(framework)
    X, y = _data(N_TRAIN, bad=BAD)
    X_test, y_test = _data(N_TEST, seed=1)
    kwargs = {"exact": {}, "projected": {"proj_dim": 8}, "last": {"layer": "last"}}[mode]
    tracin = sa.TracIn(model, checkpoints, batch_size=4, **kwargs)
    pattern = rf"NaN or inf model outputs for sequence {BAD} of X_train at checkpoints\[0\]"
    if mode != "exact":
        with pytest.raises(ValueError, match=pattern) as info:
            tracin.fit(X, y)
        _one_line(info)
        return
    tracin.fit(X, y)  # the exact method computes nothing in fit
    for call in (
        lambda: tracin.scores(X_test, y_test),
        lambda: tracin.top_k(X_test, y_test, 3),
        tracin.self_influence,
    ):
        with pytest.raises(ValueError, match=pattern) as info:
            call()
        _one_line(info)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_trak_names_the_first_bad_training_sequence(framework, task):
    n_outputs = 3 if task == "classification" else 1
    # regression: a NaN added to the output leaves the gradient of the prediction finite
    model, checkpoints = _model_and_checkpoints(framework, n_outputs, after=task == "regression")
    X, y = _data(N_TRAIN, bad=BAD, n_outputs=n_outputs)
    trak = sa.TRAK(model, checkpoints, task=task, proj_dim=4, batch_size=4)
    pattern = rf"NaN or inf model outputs for sequence {BAD} of X_train at checkpoints\[0\]"
    with pytest.raises(ValueError, match=pattern) as info:
        trak.fit(X, y)
    _one_line(info)


def test_a_bad_test_sequence_is_named():
    model, checkpoints = _model_and_checkpoints("torch")
    X, y = _data(N_TRAIN)
    X_test, y_test = _data(N_TEST, bad=2, seed=1)
    pattern = r"NaN or inf model outputs for sequence 2 of X_test at checkpoints\[0\]"
    for method in (sa.TracIn(model, checkpoints), sa.TRAK(model, checkpoints, proj_dim=4)):
        method.fit(X, y)
        with pytest.raises(ValueError, match=pattern) as info:
            method.scores(X_test, y_test)
        _one_line(info)


def test_a_diverged_checkpoint_is_named():
    model, checkpoints = _model_and_checkpoints("torch", n=3)
    checkpoints[1]["hidden.weight"][0, 0] = float("inf")  # every output NaN at checkpoint 1
    X, y = _data(N_TRAIN)
    pattern = r"NaN or inf model outputs for sequence 0 of X_train at checkpoints\[1\]"
    for method in (
        sa.TracIn(model, checkpoints, proj_dim=8),
        sa.TracIn(model, checkpoints, layer="last"),
        sa.TRAK(model, checkpoints, proj_dim=4),
    ):
        with pytest.raises(ValueError, match=pattern) as info:
            method.fit(X, y)
        _one_line(info)


def test_a_loss_that_is_not_finite_is_named():
    """Finite outputs, but the loss is -log 0 (inf) for the sequences labelled 2."""

    def loss(z, y):
        p = torch.softmax(z, 1).gather(1, y[:, None])[:, 0]
        return -torch.log(p * (y != 2).float())

    model, checkpoints = _model_and_checkpoints("torch")
    X, _ = _data(N_TRAIN)
    y = np.zeros(N_TRAIN, np.int64)
    y[7] = 2
    tracin = sa.TracIn(model, checkpoints, loss=loss, proj_dim=8, batch_size=5)
    with pytest.raises(ValueError, match=r"NaN or inf loss for sequence 7 of X_train") as info:
        tracin.fit(X, y)
    _one_line(info)


def test_finite_models_still_score():
    model, checkpoints = _model_and_checkpoints("torch")
    X, y = _data(N_TRAIN)
    X_test, y_test = _data(N_TEST, seed=1)
    tracin = sa.TracIn(model, checkpoints).fit(X, y)
    assert np.isfinite(tracin.scores(X_test, y_test)).all()
    trak = sa.TRAK(model, checkpoints, proj_dim=4).fit(X, y)
    assert np.isfinite(trak.scores(X_test, y_test)).all()


KERAS_ON_TORCH = """
import json
import numpy as np
import keras
import torch
torch.set_num_threads(1)
import seqattrib as sa

def build(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(({length}, 4))
    flag = keras.ops.cast(keras.ops.equal(inputs[:, 0, 2], 1.0), "float32")[:, None]
    nan = keras.ops.where(flag > 0, keras.ops.full_like(flag, float("nan")), flag * 0.0)
    h = keras.layers.Dense(5, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(3)(h + nan))

model = build(0)
assert isinstance(model, torch.nn.Module)
checkpoints = [build(seed).get_weights() for seed in (1, 2)]
rng = np.random.default_rng(0)
X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, ({n}, {length}))]
X[:, 0] = np.eye(4, dtype=np.float32)[0]
X[{bad}, 0] = np.eye(4, dtype=np.float32)[2]
y = rng.integers(0, 3, {n})
messages = []
for method in (
    sa.TracIn(model, checkpoints, proj_dim=8, batch_size=4),
    sa.TRAK(model, checkpoints, proj_dim=4, batch_size=4),
):
    try:
        method.fit(X, y)
        messages.append("no error")
    except ValueError as exc:
        messages.append(str(exc))
print(json.dumps(messages))
"""


def test_keras_on_the_torch_backend(tmp_path):
    """TracIn (projected: it computes in fit) and TRAK, whose per-example gradients reach the
    Keras variables of a model on the torch backend."""
    code = KERAS_ON_TORCH.format(length=LENGTH, n=N_TRAIN, bad=BAD)
    messages = keras_on_torch(code, cwd=tmp_path, timeout=300)
    pattern = rf"NaN or inf model outputs for sequence {BAD} of X_train at checkpoints\[0\]"
    for message, func in zip(messages, ("TracIn.fit", "TRAK.fit"), strict=True):
        assert message.startswith(f"The 'model' parameter of {func}"), message
        assert "\n" not in message and re.search(pattern, message), message
