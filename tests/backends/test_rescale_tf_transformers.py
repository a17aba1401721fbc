"""DeepLIFT / DeepSHAP rules for transformers on the TensorFlow backend: softmax, products of
two activations, squared differences, divisions and normalisations, as Keras 3 emits them.

- Summation to delta is exact: a Keras toy transformer (``MultiHeadAttention``,
  ``LayerNormalization``, a GELU dense layer) and models built on each construct sum to their
  output difference at float32 rounding, without a warning, and the reader lists nothing left
  to its gradient.
- The same weights in torch (written with the operations the torch rules cover) give the same
  contributions.
- A product of an activation with a weight keeps its gradient; a product of two activations
  takes the product rule, against multipliers worked out by hand.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import torch.nn.functional as F
from deeplift_models import dinucleotide_references
from helpers import CLOSED_FORM, CROSS_FRAMEWORK, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.engine.outputs import Head, model_session

L, DIM, HEADS, KEY_DIM = 12, 8, 2, 4


def _report(model, X):
    be = sa.get_backend(model)
    with model_session(be, model, None):
        return be.rescale_layers(model, be.asarray(X[:1]), Head())


def _deep_shap(model, X, refs):
    """Contributions and gaps, failing on any warning (a gap the rules leave)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", sa.SeqAttribWarning)
        return sa.deep_lift_shap(model, X, baselines=refs, target=[0, 1], return_delta=True)


def _assert_sums(model, X, refs):
    _, delta = _deep_shap(model, X, refs)
    outputs = np.asarray(model(X))
    assert np.max(np.abs(delta)) <= 1e-5 * max(1.0, float(np.max(np.abs(outputs))))


# --------------------------------------------------------------------------- the toy model
def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)

    def w(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    return {
        "conv": w(3, 4, DIM),
        "conv_b": w(DIM, scale=0.1),
        **{f"{p}": w(DIM, HEADS, KEY_DIM) for p in "qkv"},
        **{f"{p}_b": w(HEADS, KEY_DIM, scale=0.1) for p in "qkv"},
        "o": w(HEADS, KEY_DIM, DIM),
        "o_b": w(DIM, scale=0.1),
        "gamma": 1.0 + w(DIM, scale=0.2),
        "beta": w(DIM, scale=0.1),
        "dense": w(DIM, DIM),
        "dense_b": w(DIM, scale=0.1),
        "readout": w(L * DIM, 2, scale=0.2),
        "readout_b": w(2, scale=0.1),
    }


def keras_transformer(W):
    """Conv1D stem (ReLU), self-attention with a residual, LayerNormalization, a GELU dense
    layer and a dense readout of the flattened tokens: (N, L, 4) -> (N, 2)."""
    inputs = keras.Input((L, 4))
    conv = keras.layers.Conv1D(DIM, 3, padding="same", activation="relu")
    attention = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    norm = keras.layers.LayerNormalization(epsilon=1e-3)
    dense = keras.layers.Dense(DIM, activation="gelu")
    readout = keras.layers.Dense(2)
    h = conv(inputs)
    h = norm(h + attention(h, h))
    model = keras.Model(inputs, readout(keras.layers.Flatten()(dense(h))))
    conv.set_weights([W["conv"], W["conv_b"]])
    attention.set_weights([W["q"], W["q_b"], W["k"], W["k_b"], W["v"], W["v_b"], W["o"], W["o_b"]])
    norm.set_weights([W["gamma"], W["beta"]])
    dense.set_weights([W["dense"], W["dense_b"]])
    readout.set_weights([W["readout"], W["readout_b"]])
    return model


class TorchTransformer(torch.nn.Module):
    """The same model in torch, with einsum, softmax and F.layer_norm."""

    def __init__(self, W):
        super().__init__()
        self.w = {k: torch.from_numpy(v) for k, v in W.items()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        kernel = w["conv"].permute(2, 1, 0)  # (out, in, width)
        h = F.relu(F.conv1d(x.transpose(1, 2), kernel, w["conv_b"], padding=1)).transpose(1, 2)
        q, k, v = (torch.einsum("btc,chd->bthd", h, w[p]) + w[f"{p}_b"] for p in "qkv")
        logits = torch.einsum("bshd,bthd->bhts", k, q * KEY_DIM**-0.5)
        attended = torch.einsum("bhts,bshd->bthd", torch.softmax(logits, -1), v)
        a = torch.einsum("bthd,hde->bte", attended, w["o"]) + w["o_b"]
        h = F.layer_norm(h + a, (DIM,), w["gamma"], w["beta"], eps=1e-3)
        h = F.gelu(h @ w["dense"] + w["dense_b"])
        return h.flatten(1) @ w["readout"] + w["readout_b"]


def test_a_keras_transformer_sums_to_delta_and_names_no_gradient():
    model = keras_transformer(_weights())
    X = random_one_hot(3, L, seed=1)
    refs = dinucleotide_references(X, 4, seed=2, layout="NLC")
    _assert_sums(model, X, refs)
    report = _report(model, X)
    assert report.by_gradient == ()
    kinds = " ".join(report.rescaled)
    for rule in ("softmax rule", "Einsum of two", "SquaredDifference", "Rsqrt", "Mul of two"):
        assert rule in kinds


def test_torch_and_tensorflow_give_the_same_contributions():
    W = _weights()
    keras_model, torch_model = keras_transformer(W), TorchTransformer(W)
    X = random_one_hot(3, L, seed=3)
    refs = dinucleotide_references(X, 4, seed=4, layout="NLC")
    assert_close(
        np.asarray(keras_model(X)), torch_model(torch.from_numpy(X)).detach().numpy(), 1e-5
    )
    from_tf, _ = _deep_shap(keras_model, X, refs)
    from_torch, _ = _deep_shap(torch_model, X, refs)
    assert np.abs(from_torch).max() > 1e-2
    assert_close(from_tf, from_torch, CROSS_FRAMEWORK)


def test_the_rules_pair_each_reference_with_its_own_sequence_in_any_batch():
    model = keras_transformer(_weights())
    X = random_one_hot(3, L, seed=15)
    refs = dinucleotide_references(X, 4, seed=16, layout="NLC")
    whole = sa.deep_lift_shap(model, X, baselines=refs, batch_size=64)
    for batch_size in (1, 7):  # one row; batches that split a sequence's references
        assert_close(
            sa.deep_lift_shap(model, X, baselines=refs, batch_size=batch_size), whole, 1e-5
        )


# --------------------------------------------------------------------------- each construct
def _stem(inputs):
    return keras.layers.Conv1D(DIM, 3, padding="same", activation="relu")(inputs)


def _lambda(fn):
    return lambda h: keras.layers.Lambda(fn)(h)


CONSTRUCTS = {
    "group_normalization": lambda h: keras.layers.GroupNormalization(2)(h),
    "unit_normalization": lambda h: keras.layers.UnitNormalization()(h),
    "rms_normalization": lambda h: keras.layers.RMSNormalization()(h),
    "softmax_over_length": _lambda(lambda t: keras.ops.softmax(t, axis=1)),
    "log_softmax": _lambda(lambda t: keras.ops.log_softmax(t, axis=-1)),
    "gelu_as_operations": _lambda(lambda t: keras.ops.gelu(t, approximate=True)),
    "division_by_an_activation": _lambda(lambda t: t / (1.0 + tf.nn.softplus(t[..., :1]))),
    "causal_attention": lambda h: keras.layers.MultiHeadAttention(HEADS, KEY_DIM)(
        h, h, use_causal_mask=True
    ),
    "gating": _lambda(lambda t: t * tf.sigmoid(1.702 * t) * tf.exp(-tf.square(t) / 4.0)),
}


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_each_construct_sums_to_delta(construct):
    keras.utils.set_random_seed(5)
    inputs = keras.Input((L, 4))
    h = keras.layers.Dense(DIM)(CONSTRUCTS[construct](_stem(inputs)))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    X = random_one_hot(2, L, seed=6)
    refs = dinucleotide_references(X, 3, seed=7, layout="NLC")
    _assert_sums(model, X, refs)
    assert _report(model, X).by_gradient == ()


def test_a_where_on_an_input_dependent_condition_is_named():
    inputs = keras.Input((L, 4))
    h = keras.layers.Lambda(lambda t: tf.where(t > 0.0, t, 0.1 * t))(_stem(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    (named,) = _report(model, random_one_hot(1, L)).by_gradient
    assert named.startswith("where on an input-dependent condition")


# --------------------------------------------------------------------------- by hand
class Gate(keras.layers.Layer):
    """f(x) = sum_j (a_j w_j) b_j with a = x u and b = x v per position: products with the
    weights u, v and w keep their gradient, the product of (a w) and b takes the rule."""

    def __init__(self, u, v, w):
        super().__init__()
        self.u = tf.constant(u)
        self.v, self.w = (self.add_weight(t.shape, keras.initializers.Constant(t)) for t in (v, w))

    def call(self, x):
        a = tf.reduce_sum(x * self.u, -1)
        b = tf.reduce_sum(x * self.v, -1)
        return tf.reduce_sum((a * self.w) * b, -1, keepdims=True)


def test_a_product_with_a_weight_keeps_its_gradient_and_two_activations_take_the_rule():
    rng = np.random.default_rng(8)
    u, v, w = (rng.standard_normal(s).astype(np.float32) for s in (4, 4, L))
    inputs = keras.Input((L, 4))
    model = keras.Model(inputs, Gate(u, v, w)(inputs))
    X = random_one_hot(2, L, seed=9)
    refs = random_one_hot(3, L, seed=10)
    index = [0, 1, 1]
    report = _report(model, X)
    assert report.by_gradient == ()
    assert len(report.rescaled) == 1 and "Mul of two" in report.rescaled[0]
    be = sa.get_backend(model)
    with model_session(be, model, None):
        out = be.rescale_gradients(
            model, be.asarray(X), be.asarray(refs), np.asarray(index), [0], Head(), False
        )
    m = be.to_numpy(out[2])
    for r, i in enumerate(index):
        a_bar = (X[i] @ u + refs[r] @ u) / 2
        b_bar = (X[i] @ v + refs[r] @ v) / 2
        expected = (w * b_bar)[:, None] * u + (w * a_bar)[:, None] * v
        assert_close(m[r, 0], expected, CLOSED_FORM)


# --------------------------------------------------------------------------- held constant
def test_chrombpnets_held_softmax_weights_leave_the_documented_gap():
    """heads.profile(): the weights softmax(l~) are held constant (each row's own), so the
    contributions miss f(x) - f(r) by sum_i (s_i(x) - s_i(r)) l~_i(x), named in the warning."""
    keras.utils.set_random_seed(12)
    inputs = keras.Input((L, 4))
    h = keras.layers.Conv1D(DIM, 5, padding="same", activation="relu")(inputs)
    profile = keras.layers.Conv1D(1, 1)(h)
    counts = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model(inputs, [profile, counts])
    X = random_one_hot(2, L, seed=13)
    refs = dinucleotide_references(X, 3, seed=14, layout="NLC")
    with pytest.warns(sa.SeqAttribWarning, match=r"held constant \(StopGradient"):
        _, delta = sa.deep_lift_shap(
            model, X, baselines=refs, output_fn=sa.heads.profile(), return_delta=True
        )

    def centred(rows):
        logits = np.asarray(model(rows)[0], np.float64).reshape(len(rows), -1)
        return logits - logits.mean(axis=1, keepdims=True)

    def softmax(t):
        e = np.exp(t - t.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    l_x = centred(X)
    gaps = [
        np.mean((softmax(l_x[i : i + 1]) - softmax(centred(refs[i]))) @ l_x[i]) for i in range(2)
    ]
    assert np.max(np.abs(gaps)) > 1e-2
    assert_close(np.ravel(delta), np.array(gaps), 1e-5)
