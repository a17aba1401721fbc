"""The ``ParameterGradients`` capability of both backends, primitive by primitive, against NumPy
references: the same weights run through torch and Keras, and every loss and model output
function written once (``data_attribution.outputs``) gives the gradients NumPy's closed forms
give."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
from helpers import CLOSED_FORM, FLOAT32, assert_close

import seqattrib as sa
from seqattrib.backends import CheckpointMismatch, ParameterGradients, UnsupportedLayer
from seqattrib.data_attribution import outputs
from seqattrib.engine.outputs import Head

FRAMEWORKS = ["torch", "tensorflow"]
LENGTH, HIDDEN, K, ROWS = 6, 5, 3, 7


# --------------------------------------------------------------------------- the model
@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    """flatten, dense(4L -> H) relu, dense(H -> K): Keras layout (in, out)."""
    rng = np.random.default_rng(0)
    return {
        "w1": rng.standard_normal((4 * LENGTH, HIDDEN)).astype(np.float32) / 3,
        "b1": rng.standard_normal(HIDDEN).astype(np.float32) / 3,
        "w2": rng.standard_normal((HIDDEN, K)).astype(np.float32),
        "b2": rng.standard_normal(K).astype(np.float32),
    }


def build(framework: str, w: dict[str, np.ndarray]) -> object:
    if framework == "torch":
        model = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(4 * LENGTH, HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(HIDDEN, K),
        )
        with torch.no_grad():
            for layer, name in ((model[1], "1"), (model[3], "2")):
                layer.weight.copy_(torch.from_numpy(w[f"w{name}"].T.copy()))
                layer.bias.copy_(torch.from_numpy(w[f"b{name}"]))
        return model.eval()
    inputs = keras.Input((LENGTH, 4))
    hidden = keras.layers.Dense(HIDDEN, activation="relu")
    last = keras.layers.Dense(K)
    model = keras.Model(inputs, last(hidden(keras.layers.Flatten()(inputs))))
    hidden.set_weights([w["w1"], w["b1"]])
    last.set_weights([w["w2"], w["b2"]])
    return model


@pytest.fixture(scope="module")
def models(weights) -> dict[str, object]:
    return {framework: build(framework, weights) for framework in FRAMEWORKS}


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (ROWS, LENGTH))]
    return x, rng.integers(0, K, ROWS)


# --------------------------------------------------------------------------- NumPy references
def forward(w: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Inputs (flattened), hidden pre-activations, penultimate activations, logits; float64."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    h = flat @ w["w1"] + w["b1"]
    a = np.maximum(h, 0)
    return flat, h, a, a @ w["w2"] + w["b2"]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(1, keepdims=True)
    return top[:, 0] + np.log(np.exp(z - top).sum(1))


def output_gradient(name: str, z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """d fn / d z of each written-once definition, in closed form: (B, K)."""
    one = np.zeros_like(z)
    one[:, 0] = 1
    if name == "cross_entropy":
        return softmax(z) - t
    if name == "bce":
        return (sigmoid(z) - t) / z.shape[1]
    if name == "mse":
        return 2 * (z - t) / z.shape[1]
    if name == "poisson":
        return (np.exp(z) - t) / z.shape[1]
    if name == "multinomial":  # counts that need not sum to one
        return t.sum(1, keepdims=True) * softmax(z) - t
    if name == "classification":  # d/dz (z_y - logsumexp_{k != y} z_k)
        others = np.where(t > 0, -np.inf, z)
        return t - np.where(t > 0, 0, softmax(others))
    if name == "binary":
        return one * (2 * t - 1)
    return one  # regression


def parameter_gradients(w: dict[str, np.ndarray], x: np.ndarray, dz: np.ndarray) -> np.ndarray:
    """Per-example gradients, flattened in the Keras layout [w1, b1, w2, b2]: (B, P)."""
    flat, h, a, _ = forward(w, x)
    dh = (dz @ w["w2"].T) * (h > 0)
    parts = [
        np.einsum("bi,bj->bij", flat, dh).reshape(len(x), -1),
        dh,
        np.einsum("bi,bj->bij", a, dz).reshape(len(x), -1),
        dz,
    ]
    return np.concatenate(parts, axis=1)


DEFINITIONS = {**outputs.LOSSES, **outputs.TASKS}


def targets(name: str, y: np.ndarray, n_outputs: int) -> np.ndarray:
    """What each definition takes: one-hot class rows, 0/1 or real targets per output."""
    if name in ("cross_entropy", "classification"):
        return np.eye(n_outputs, dtype=np.float32)[y]
    values = np.random.default_rng(2).random((len(y), n_outputs)).astype(np.float32)
    return (values > 0.5).astype(np.float32) if name == "binary" else values


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_backends_declare_the_capability(models, framework):
    assert isinstance(sa.get_backend(models[framework]), ParameterGradients)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_trainable_parameters_in_gradient_order(models, weights, framework):
    shapes = [
        shape
        for _, shape in sa.get_backend(models[framework]).trainable_parameters(models[framework])
    ]
    expected = [w.shape for w in weights.values()]
    if framework == "torch":  # torch keeps its (out, in) layout; gradients come in Keras'
        expected = [s[::-1] for s in expected]
    assert shapes == expected


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_per_example_and_output_gradients_of_every_definition(
    models, weights, data, framework, name
):
    model = models[framework]
    backend = sa.get_backend(model)
    x, y = data
    n_outputs = 1 if name in ("binary", "regression") else K
    if n_outputs == 1:  # these output functions read the model's first output
        head = Head(lambda out: out[:, :1])
    else:
        head = Head()
    t = targets(name, y, n_outputs)
    z = forward(weights, x)[3][:, :n_outputs]
    dz = np.zeros((ROWS, K))
    dz[:, :n_outputs] = output_gradient(name, z, t.astype(np.float64))
    fn = outputs.bound(DEFINITIONS[name], backend)
    names = [n for n, _ in backend.trainable_parameters(model)]
    grads = backend.per_example_gradients(
        model, backend.asarray(x), backend.asarray(t), fn, names, head
    )
    assert_close(backend.to_numpy(grads), parameter_gradients(weights, x, dz), FLOAT32)
    at_outputs = backend.output_gradients(fn, backend.asarray(z), backend.asarray(t))
    assert_close(backend.to_numpy(at_outputs), dz[:, :n_outputs], FLOAT32)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_users_framework_native_loss(models, weights, data, framework):
    model = models[framework]
    backend = sa.get_backend(model)
    x, y = data
    if framework == "torch":

        def loss(z, labels):
            return torch.nn.functional.cross_entropy(z, labels, reduction="none")
    else:

        def loss(z, labels):
            return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=z)

    names = [n for n, _ in backend.trainable_parameters(model)]
    grads = backend.per_example_gradients(
        model, backend.asarray(x), backend.asarray(y, "int64"), loss, names, Head()
    )
    dz = output_gradient("cross_entropy", forward(weights, x)[3], np.eye(K)[y])
    assert_close(backend.to_numpy(grads), parameter_gradients(weights, x, dz), FLOAT32)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_last_layer(models, weights, data, framework):
    model = models[framework]
    backend = sa.get_backend(model)
    x, _ = data
    a, z, bias = backend.last_layer(model, backend.asarray(x))
    _, _, a_ref, z_ref = forward(weights, x)
    assert bias is True
    assert_close(backend.to_numpy(a), a_ref, FLOAT32)
    assert_close(backend.to_numpy(z), z_ref, FLOAT32)


def test_last_layer_names_why_a_model_does_not_qualify(weights, data):
    x, _ = data
    torch_model = torch.nn.Sequential(build("torch", weights), torch.nn.Softmax(dim=1))
    backend = sa.get_backend(torch_model)
    with pytest.raises(UnsupportedLayer, match="not the model's output"):
        backend.last_layer(torch_model, backend.asarray(x))
    inputs = keras.Input((LENGTH, 4))
    keras_model = keras.Model(
        inputs, keras.layers.Dense(K, activation="softmax")(keras.layers.Flatten()(inputs))
    )
    backend = sa.get_backend(keras_model)
    with pytest.raises(UnsupportedLayer, match="activation 'softmax'"):
        backend.last_layer(keras_model, backend.asarray(x))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_set_state_takes_arrays_and_tensors(weights, framework):
    model = build(framework, weights)
    backend = sa.get_backend(model)
    state = backend.state(model)
    doubled = {key: 2 * value for key, value in state.items()}
    backend.set_state(model, doubled)
    for key, value in backend.state(model).items():
        np.testing.assert_array_equal(value, doubled[key])
    native = {key: backend.asarray(value) for key, value in state.items()}
    backend.set_state(model, native)
    for key, value in backend.state(model).items():
        np.testing.assert_array_equal(value, state[key])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_read_checkpoint(tmp_path, weights, framework):
    model = build(framework, weights)
    backend = sa.get_backend(model)
    saved = backend.state(model)
    if framework == "torch":
        path = tmp_path / "model.pt"
        torch.save(model.state_dict(), path)
        read = backend.read_checkpoint(model, str(path))
        assert sorted(read) == sorted(saved)
        for key, value in read.items():
            np.testing.assert_array_equal(value.numpy(), saved[key])
    else:
        path = tmp_path / "model.weights.h5"
        model.save_weights(path)
        backend.set_state(model, {key: 0 * value for key, value in saved.items()})
        assert backend.read_checkpoint(model, str(path)) is None  # loaded into the model
        for key, value in backend.state(model).items():
            np.testing.assert_array_equal(value, saved[key])
    junk = tmp_path / ("junk.pt" if framework == "torch" else "junk.weights.h5")
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointMismatch):
        backend.read_checkpoint(model, str(junk))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_math_primitives(models, framework):
    backend = sa.get_backend(models[framework])
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((4, 5)) * 4).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    p = softmax(rng.standard_normal((4, 5))).astype(np.float32)
    hot = np.eye(5, dtype=np.float32)[[0, 3, 4, 1]]
    with_inf = np.where(hot > 0, -np.inf, a).astype(np.float32)

    a64 = a.astype(np.float64)
    cases = [
        ("sum", (a, (1,)), a64.sum(1)),
        ("where", (hot, a, 0.0), np.where(hot > 0, a, 0)),
        ("logsumexp", (a, 1), logsumexp(a64)),
        ("logsumexp", (with_inf, 1), logsumexp(with_inf.astype(np.float64))),
        ("exp", (a,), np.exp(a64)),
        ("softplus", (a,), np.log1p(np.exp(a64))),
        ("softmax_cross_entropy", (a, p), -(p * (a64 - logsumexp(a64)[:, None])).sum(1)),
        (
            "sigmoid_cross_entropy",
            (a, p),
            -(p * np.log(sigmoid(a64)) + (1 - p) * np.log(sigmoid(-a64))),
        ),
    ]
    for name, args, expected in cases:
        on_device = [backend.asarray(v) if isinstance(v, np.ndarray) else v for v in args]
        assert_close(backend.to_numpy(getattr(backend, name)(*on_device)), expected, FLOAT32)
        # the same primitive on the host, where TRAK evaluates its weights Q
        assert_close(getattr(outputs.NUMPY, name)(*args), expected, CLOSED_FORM)
    masked = backend.where(backend.asarray(hot), -np.inf, backend.asarray(a))
    np.testing.assert_array_equal(backend.to_numpy(masked), with_inf)
    np.testing.assert_array_equal(outputs.NUMPY.where(hot, -np.inf, a), with_inf)
    product = backend.matmul(backend.asarray(a), backend.asarray(b))
    assert_close(backend.to_numpy(product), a64 @ b, FLOAT32)
    product = backend.matmul(backend.asarray(a), backend.asarray(b.T.copy()), transpose_b=True)
    assert_close(backend.to_numpy(product), a64 @ b, FLOAT32)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_definitions_run_alike_on_the_device_and_on_the_host(models, data, framework, name):
    """Each loss and output function (and TRAK's Q) bound to a backend gives the values that
    the same definition gives on NumPy, where TRAK evaluates Q."""
    backend = sa.get_backend(models[framework])
    _, y = data
    n_outputs = 1 if name in ("binary", "regression") else K
    z = np.random.default_rng(4).standard_normal((ROWS, n_outputs)).astype(np.float32) * 3
    t = targets(name, y, n_outputs)
    device = outputs.bound(DEFINITIONS[name], backend)(backend.asarray(z), backend.asarray(t))
    host = DEFINITIONS[name](outputs.NUMPY, z.astype(np.float64), t)
    assert_close(backend.to_numpy(device), host, FLOAT32)
    if name in outputs.TASKS:
        q_device = outputs.out_to_loss(name, backend, backend.asarray(z), backend.asarray(t))
        q_host = outputs.out_to_loss(name, outputs.NUMPY, z.astype(np.float64), t)
        assert_close(backend.to_numpy(q_device), q_host, FLOAT32)
        p = softmax(z.astype(np.float64))  # class probabilities (classification)
        expected = {
            "classification": 1 - (p * t).sum(1),
            "binary": sigmoid(-(2 * t[:, 0] - 1) * z[:, 0]),
            "regression": t[:, 0] - z[:, 0],
        }[name]
        assert_close(q_host, expected, CLOSED_FORM)
