"""The rescale-gradients capability of both backends, against multipliers worked out by hand.

Each backend runs a model so that its nonlinearities use DeepLIFT's rules on a batch of inputs
and references, finds those nonlinearities (as layers, function calls, tensor methods or Keras
activations), refuses what the rules cannot reach, and leaves the model as it was.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import torch.nn.functional as F
from conftest import LENGTH, make_model
from deeplift_models import one_relu, one_relu_multipliers, one_relu_weights
from helpers import CLOSED_FORM, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.backends import RescaleGradients, RescaleUnsupported
from seqattrib.engine.outputs import Head, model_session

FRAMEWORKS = ["torch", "tensorflow"]
L = 12


def _rescale(model, X, refs, index, targets=(0,), head=None):
    be = sa.get_backend(model)
    with model_session(be, model, None):
        outs = be.rescale_gradients(
            model,
            be.asarray(X),
            be.asarray(refs),
            np.asarray(index, np.int64),
            list(targets),
            head or Head(),
            False,
        )
        return tuple(be.to_numpy(t) for t in outs)


def _report(model, X, head=None):
    be = sa.get_backend(model)
    with model_session(be, model, None):
        return be.rescale_layers(model, be.asarray(X[:1]), head or Head())


# --------------------------------------------------------------------------- toy models
def max_pool_model(framework, u, a):
    """f(x) = sum_w a_w max over window w (width 2) of x @ u, on (batch, L, 4)."""
    if framework == "torch":
        tu, ta = torch.from_numpy(u), torch.from_numpy(a)

        class MaxPool(torch.nn.Module):
            def forward(self, x):
                z = (x @ tu)[:, None, :]  # (batch, 1, L)
                return (F.max_pool1d(z, 2)[:, 0] @ ta)[:, None]

        return MaxPool()
    inputs = keras.Input((L, 4))
    conv = keras.layers.Conv1D(1, 1, use_bias=False)
    dense = keras.layers.Dense(1, use_bias=False)
    pooled = keras.layers.MaxPooling1D(2)(conv(inputs))
    model = keras.Model(inputs, dense(keras.layers.Flatten()(pooled)))
    conv.set_weights([u.reshape(1, 4, 1)])
    dense.set_weights([a.reshape(-1, 1)])
    return model


def max_rule_multipliers(u, a, x, r):
    """DeepLIFT's max rule by hand, for one (input, reference) pair."""
    zx, zr = x @ u, r @ u
    routed = np.zeros(L)
    plain = np.zeros(L)
    for w in range(L // 2):
        window = slice(2 * w, 2 * w + 2)
        ix, ir = 2 * w + int(np.argmax(zx[window])), 2 * w + int(np.argmax(zr[window]))
        gap = zx[ix] - zr[ir]
        routed[ix] += a[w] * max(gap, 0.0)
        routed[ir] += a[w] * min(gap, 0.0)
        plain[ix] += a[w]
    dz = zx - zr
    per_position = np.where(dz == 0, plain, routed / np.where(dz == 0, 1.0, dz))
    return per_position[:, None] * u[None, :]  # (L, 4)


# --------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_backend_declares_the_capability(framework, linear_weights):
    model = make_model(framework, "linear", linear_weights, "NLC")
    assert isinstance(sa.get_backend(model), RescaleGradients)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_linear_model_multipliers_are_its_weights(framework, linear_weights):
    model = make_model(framework, "linear", linear_weights, "NLC")
    X = random_one_hot(2, LENGTH, seed=1)
    refs = random_one_hot(5, LENGTH, seed=2)
    index = [0, 0, 1, 1, 1]
    out_x, out_r, m = _rescale(model, X, refs, index, targets=(2, 0))
    w, b = linear_weights["w"], linear_weights["b"]
    assert_close(out_x, np.einsum("nlc,lck->nk", X, w)[:, [2, 0]] + b[[2, 0]], CLOSED_FORM)
    assert_close(out_r, np.einsum("nlc,lck->nk", refs, w)[:, [2, 0]] + b[[2, 0]], CLOSED_FORM)
    expected = np.broadcast_to(np.moveaxis(w[:, :, [2, 0]], -1, 0), (5, 2, LENGTH, 4))
    assert_close(m, expected, CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_one_relu_network_by_hand(framework):
    w = one_relu_weights(L)
    X = random_one_hot(2, L, seed=3)
    refs = np.concatenate([random_one_hot(3, L, seed=4), X[1:2]])  # the last: the input itself
    index = [0, 0, 1, 1]
    _, _, m = _rescale(one_relu(framework, w), X, refs, index, targets=(0, 1))
    for r, i in enumerate(index):
        expected = one_relu_multipliers(w, X[i], refs[r]).T.reshape(2, L, 4)
        assert_close(m[r], expected, CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_max_pooling_takes_the_max_rule(framework):
    rng = np.random.default_rng(7)
    u = rng.standard_normal(4).astype(np.float32)
    a = rng.standard_normal(L // 2).astype(np.float32)
    X = random_one_hot(2, L, seed=5)
    refs = np.concatenate([random_one_hot(3, L, seed=6), X[:1]])
    index = [0, 1, 1, 0]
    out_x, out_r, m = _rescale(max_pool_model(framework, u, a), X, refs, index)
    for r, i in enumerate(index):
        expected = max_rule_multipliers(u.astype(np.float64), a, X[i], refs[r])
        assert_close(m[r, 0], expected, CLOSED_FORM)
        # summation to delta
        diff = out_x[i, 0] - out_r[r, 0]
        assert abs(float(((X[i] - refs[r]) * m[r, 0]).sum()) - diff) <= 1e-5 * max(1, abs(diff))


def test_torch_max_calls_return_what_they_return_without_the_rules():
    """Each call form of a max pooling or reduction returns its values, or (values, indices),
    as it does without the rules (the passes build that result from one pooling)."""

    class Forms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 3, 3, padding=1)
            self.pool = torch.nn.MaxPool1d(2, return_indices=True)

        def forward(self, x):
            h = self.conv(x.transpose(1, 2))  # (batch, 3, L)
            a = F.max_pool1d(torch.relu(h), 2) + torch.max_pool1d(torch.tanh(h), 2)
            b, at_b = self.pool(torch.sigmoid(h))
            c, at_c = F.max_pool1d(F.softplus(h), 2, return_indices=True)
            d, at_d = torch.adaptive_max_pool1d(F.elu(h), L // 2)
            e = F.adaptive_max_pool1d(F.gelu(h), L // 2)
            f = F.max_pool2d(torch.relu(h)[:, :, None], (1, 2))[:, :, 0]
            k, at_k = F.adaptive_max_pool1d(torch.tanh(h), L // 2, return_indices=True)
            at = (at_b + at_c + at_d + at_k).float()  # indices: read, not differentiated
            g = a + b + c + d + e + f + k + 0.0 * at
            top = torch.max(g, dim=-1)
            return top.values + g.amax(-1) + 0.0 * top.indices.float()

    torch.manual_seed(0)
    model = Forms().eval()
    X = random_one_hot(2, L, seed=8)
    refs = np.concatenate([random_one_hot(3, L, seed=9), X[1:2]])
    index = [0, 0, 1, 1]
    out_x, out_r, m = _rescale(model, X, refs, index, targets=(0, 2))
    with torch.no_grad():
        assert_close(out_x, model(torch.from_numpy(X)).numpy()[:, [0, 2]], CLOSED_FORM)
        assert_close(out_r, model(torch.from_numpy(refs)).numpy()[:, [0, 2]], CLOSED_FORM)
    for r, i in enumerate(index):  # summation to delta
        diff = out_x[i] - out_r[r]
        summed = ((X[i] - refs[r])[None] * m[r]).sum(axis=(1, 2))
        assert np.all(np.abs(summed - diff) <= 1e-5 * np.maximum(1, np.abs(diff)))


# --------------------------------------------------------------------------- finding them
def test_torch_finds_nonlinearities_wherever_they_are():
    class Everywhere(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 6, 3, padding=1)
            self.act = torch.nn.ReLU()
            self.pool = torch.nn.MaxPool1d(2)
            self.soft = torch.nn.Softplus()

        def forward(self, x):
            h = self.act(self.conv(x))
            h = F.relu(h) + torch.relu(h) + h.relu() + torch.tanh(h) + self.soft(h)
            h = self.pool(F.gelu(h)) + F.max_pool1d(torch.sigmoid(h), 2)
            return h.amax(dim=-1) + h.max(dim=-1).values

    report = _report(Everywhere(), random_one_hot(2, L, layout="NCL"))
    names = [label.split(" ")[0] for label in report.rescaled]
    assert names == ["relu", "relu", "relu", "relu", "tanh", "softplus", "gelu", "sigmoid"]
    assert [label.split(" ")[0] for label in report.max_rule] == [
        "max_pool1d",
        "max_pool1d",
        "amax",
        "max",
    ]
    assert "layer 'act', ReLU" in report.rescaled[0]
    assert report.by_gradient == ()


def test_keras_finds_activations_layers_and_operations():
    inputs = keras.Input((L, 4))
    h = keras.layers.Conv1D(6, 3, padding="same", activation="gelu")(inputs)
    h = keras.layers.Activation("silu")(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.Lambda(lambda t: tf.nn.elu(t))(h)
    h = keras.layers.MaxPooling1D(2)(h)
    h = keras.layers.LayerNormalization()(h)
    out = keras.layers.Dense(2)(keras.layers.GlobalMaxPooling1D()(h))
    report = _report(keras.Model(inputs, out), random_one_hot(2, L))
    rescaled = [r.split(" ")[0] for r in report.rescaled]
    assert rescaled[:4] == ["gelu", "silu", "Relu", "Elu"]
    assert [r.split(" ")[0] for r in report.max_rule] == ["MaxPool", "Max"]
    # layer normalisation: the operations it emits, each under its rule
    assert rescaled[4:] == ["SquaredDifference", "Rsqrt", "Mul", "Mul"]
    assert all("layer_normalization" in r for r in report.rescaled[4:])
    assert report.by_gradient == ()


def test_a_softmax_before_the_outputs_takes_the_softmax_rule_in_torch():
    class Probabilities(torch.nn.Module):
        def __init__(self, random):
            super().__init__()
            self.dense = torch.nn.Linear(L * 4, 3)
            self.random = random

        def forward(self, x):
            logits = self.dense(x.flatten(1))
            if self.random:
                return torch.nn.functional.gumbel_softmax(logits, dim=-1)
            return torch.softmax(logits, dim=-1)

    X = random_one_hot(2, L)
    report = _report(Probabilities(random=False), X)
    assert report.rescaled == ("softmax (in Probabilities.forward), under the softmax rule",)
    assert not report.by_gradient
    with pytest.raises(RescaleUnsupported, match=r"(?i)gumbel_softmax.*logits"):
        _report(Probabilities(random=True), X)


def test_a_softmax_before_the_outputs_takes_the_softmax_rule_in_tensorflow():
    X = random_one_hot(2, L, seed=11)
    refs = random_one_hot(3, L, seed=12)
    inputs = keras.Input((L, 4))
    dense = keras.layers.Dense(3, activation="softmax")
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    report = _report(model, X)
    assert [r.split(" ")[0] for r in report.rescaled] == ["Softmax"]
    assert "under the softmax rule" in report.rescaled[0]
    assert not report.by_gradient
    index = [0, 1, 1]
    out_x, out_r, m = _rescale(model, X, refs, index, targets=(0, 1, 2))
    for r, i in enumerate(index):  # summation to delta, every output
        summed = np.einsum("klc,lc->k", m[r], X[i] - refs[r])
        assert_close(summed, out_x[i] - out_r[r], 1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_softmax_the_outputs_do_not_read_is_not_refused(framework):
    X = random_one_hot(2, L)
    if framework == "torch":

        class TwoHeads(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dense = torch.nn.Linear(L * 4, 3)

            def forward(self, x):
                logits = torch.relu(self.dense(x.flatten(1)))
                return logits, torch.softmax(logits, dim=-1)

        model = TwoHeads()
    else:
        inputs = keras.Input((L, 4))
        logits = keras.layers.Dense(3, activation="relu")(keras.layers.Flatten()(inputs))
        model = keras.Model(inputs, [logits, keras.layers.Softmax()(logits)])
    report = _report(model, X, Head(lambda out: out[0]))
    assert len(report.rescaled) == 1


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torch_refuses_what_the_rules_cannot_reach():
    class Hidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.relu(x)

        @staticmethod
        def backward(ctx, grad):
            return grad

    class Model(torch.nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.mode = mode
            self.conv = torch.nn.Conv1d(4, 3, 3)
            self.relu = torch.nn.ReLU(inplace=True)

        def forward(self, x):
            h = self.conv(x)
            if self.mode == "custom":
                h = Hidden.apply(h)
            elif self.mode == "in_place":
                h = self.relu(h)
            elif self.mode == "batch_axis":
                h = torch.sigmoid(h.reshape(1, -1)).reshape(h.shape)
            return h.mean(dim=(1, 2))[:, None]

    X = random_one_hot(2, L, layout="NCL")
    with pytest.raises(RescaleUnsupported, match="custom torch.autograd.Function"):
        _report(Model("custom"), X)
    with pytest.raises(RescaleUnsupported, match=r"in place.*inplace=False"):
        _report(Model("in_place"), X)
    with pytest.raises(RescaleUnsupported, match="TorchScript"):
        _report(torch.jit.script(Model("none")), X)
    with pytest.raises(RescaleUnsupported, match="batch"):
        _rescale(Model("batch_axis"), X, X, [0, 1])


def test_torch_refuses_calls_that_differ_between_inputs_and_references():
    class ByBatchSize(torch.nn.Module):
        def forward(self, x):
            h = x.sum(dim=1)
            return (torch.relu(h) if x.shape[0] == 1 else torch.tanh(h)).sum(-1, keepdim=True)

    X = random_one_hot(1, L, layout="NCL")
    with pytest.raises(RescaleUnsupported, match="different calls"):
        _rescale(ByBatchSize(), X, random_one_hot(3, L, layout="NCL"), [0, 0, 0])


def test_keras_refuses_what_the_rules_cannot_reach():
    X = random_one_hot(2, L)

    @tf.function
    def compiled(t):
        return tf.nn.relu(t)

    for layer, match in (
        (keras.layers.Lambda(lambda t: tf.nn.silu(t)), "custom gradient"),
        (keras.layers.Lambda(lambda t: compiled(t)), "compiled function"),
    ):
        inputs = keras.Input((L, 4))
        h = layer(keras.layers.Conv1D(3, 3)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(h)))
        with pytest.raises(RescaleUnsupported, match=match):
            _report(model, X)


# --------------------------------------------------------------------------- the model after
def test_keras_activations_are_put_back_even_after_an_error(conv_weights):
    model = make_model("tensorflow", "convnet", conv_weights, "NLC")
    before = [layer.__dict__.get("activation") for layer in model.layers]
    X = random_one_hot(3, LENGTH)
    _rescale(model, X[:1], X, [0, 0, 0])

    def failing(out):
        raise RuntimeError("in the middle of a call")

    with pytest.raises(ValueError, match="output_fn.*in the middle of a call"):
        _rescale(model, X[:1], X, [0, 0, 0], head=Head(failing))
    after = [layer.__dict__.get("activation") for layer in model.layers]
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert not any(type(a).__name__ == "_RescaledActivation" for a in after)


def test_torch_model_keeps_no_hooks_or_attributes(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NCL")
    names = {m: set(vars(m)) for m in model.modules()}
    X = random_one_hot(3, LENGTH, layout="NCL")
    _report(model, X)
    _rescale(model, X[:1], X, [0, 0, 0])
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
        assert set(vars(module)) == names[module]
