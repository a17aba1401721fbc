"""A Keras model on the torch backend (a ``torch.nn.Module``) reads its weights from its Keras
variables, not from the parameters ``torch.func.functional_call`` swaps: the per-example gradients
TracIn and TRAK take must still be those of its weights. The truth is plain autograd, one example
at a time, reading each Keras variable's ``value.grad`` (the model runs in a subprocess with
``KERAS_BACKEND=torch``: this process has TensorFlow as Keras' backend)."""

from __future__ import annotations

from helpers import keras_on_torch

CODE = """
import json
import numpy as np
import keras
import torch
torch.set_num_threads(1)
import seqattrib as sa
from seqattrib.backends import get_backend
from seqattrib.data_attribution.outputs import TASKS, bound
from seqattrib.engine.outputs import Head

def build(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((12, 4))
    h = keras.layers.Conv1D(3, 5, activation="relu")(inputs)
    h = keras.layers.GlobalMaxPooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))

def margin(z, t):
    others = torch.cat([z[:t], z[t + 1:]])
    return z[t] - torch.logsumexp(others, 0)

def cross_entropy(z, t):
    return torch.nn.functional.cross_entropy(z[None], torch.tensor([t]))

def truth(model, X, y, f):
    # d f(example) / d weights, one example at a time, in the order of the backend's names
    own = dict(model.named_parameters())
    variables = {id(v.value): v for v in model.trainable_variables}
    order = [variables[id(own[n])] for n, _ in get_backend(model).trainable_parameters(model)]
    rows = []
    for x, t in zip(X, y):
        for v in order:
            v.value.grad = None
        f(model(torch.from_numpy(x[None]))[0], int(t)).backward()
        rows.append(np.concatenate([v.value.grad.numpy().ravel() for v in order]))
    return np.stack(rows).astype(np.float64)

model = build(0)
assert isinstance(model, torch.nn.Module)
checkpoints = [build(seed).get_weights() for seed in (1, 2)]
rates = [0.5, 0.25]
rng = np.random.default_rng(0)
X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (7, 12))]
y = rng.integers(0, 3, 7)
X_test = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (3, 12))]
y_test = rng.integers(0, 3, 3)

scores = sa.TracIn(model, checkpoints, learning_rates=rates, batch_size=4).fit(X, y)
scores = scores.scores(X_test, y_test)
trak = sa.TRAK(model, checkpoints, proj_dim=None, lambda_reg=1.0, batch_size=4).fit(X, y)
trak = trak.scores(X_test, y_test)

be = get_backend(model)
names = [n for n, _ in be.trainable_parameters(model)]
expected, closed_form, margins = 0.0, 0.0, []
for checkpoint, rate in zip(checkpoints, rates):
    model.set_weights(checkpoint)
    g_train = truth(model, X, y, cross_entropy)
    g_test = truth(model, X_test, y_test, cross_entropy)
    expected = expected + rate * g_test @ g_train.T
    # TRAK without projection: phi(test) (G^T G + lambda I)^-1 G^T diag(1 - p_y), mean over them
    G, phi = truth(model, X, y, margin), truth(model, X_test, y_test, margin)
    with torch.no_grad():
        p = torch.softmax(model(torch.from_numpy(X)).double(), 1).numpy()
    kernel = G.T @ G + 1.0 * np.eye(G.shape[1])
    closed_form = closed_form + phi @ np.linalg.solve(kernel, G.T) * (1 - p[np.arange(7), y])
    fn = bound(TASKS["classification"], be)
    targets = torch.from_numpy(np.eye(3, dtype=np.float32)[y])
    got = be.per_example_gradients(model, torch.from_numpy(X), targets, fn, names, Head())
    margins.append([got.numpy().tolist(), truth(model, X, y, margin).tolist()])
result = {
    "tracin": [scores.tolist(), expected.tolist()],
    "trak": [trak.tolist(), (closed_form / len(checkpoints)).tolist()],
    "margins": margins,
}
print(json.dumps(result))
"""


def _close(got, expected, tol=1e-5):
    import numpy as np

    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    assert np.abs(expected).max() > 1e-3  # the truth is not itself all zero
    scale = max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(got - expected).max()) <= tol * scale, np.abs(got - expected).max()


def test_tracin_and_trak_of_a_keras_model_on_torch_trace_its_weights(tmp_path):
    result = keras_on_torch(CODE, cwd=tmp_path, timeout=300)
    _close(*result["tracin"])  # lr * <g_test, g_train>, summed over the checkpoints
    _close(*result["trak"])
    for got, expected in result["margins"]:  # TRAK's output function, per checkpoint
        _close(got, expected)
