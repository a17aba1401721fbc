"""The backend capabilities beyond the core primitives, against NumPy in both frameworks: ISM's
windowed forward (``WindowedForward``: every mutant's output from windows of a model's local
layers) and DeepLIFT's rescale rules (``RescaleGradients``: multipliers of networks worked out
by hand, whose contributions (x - r) * multipliers sum to f(x) - f(r))."""

from __future__ import annotations

import keras
import models
import numpy as np
import pytest
import torch
from helpers import CLOSED_FORM, FLOAT32, assert_close

import seqattrib as sa
from seqattrib.attribution.mutagenesis.fast import FastForward
from seqattrib.attribution.mutagenesis.plan import plan_windows
from seqattrib.backends import RescaleGradients, WindowedBackend
from seqattrib.engine.outputs import Head, model_session

FRAMEWORKS = ["torch", "tensorflow"]


# --------------------------------------------------------------------------- NumPy forwards
def np_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, dilation: int = 1, same: bool = False):
    """x (L, C_in), w (k, C_in, C_out) -> (L', C_out): a convolution, valid or zero-padded
    to the same length (the extra padding of an odd total after the positions)."""
    k = w.shape[0]
    reach = (k - 1) * dilation
    if same:
        x = np.pad(x, ((reach // 2, reach - reach // 2), (0, 0)))
    n = x.shape[0] - reach
    return sum(x[j * dilation : j * dilation + n] @ w[j] for j in range(k)) + b


def np_max_pool(x: np.ndarray, size: int) -> np.ndarray:
    n = x.shape[0] // size
    return x[: n * size].reshape(n, size, -1).max(axis=1)


def np_forward(kind: str, w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The ``tests/models.py`` architecture ``kind`` on one sequence x (L, 4), in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    relu = lambda a: np.maximum(a, 0.0)  # noqa: E731
    if kind == "bpnet":
        h = relu(np_conv(x, w["conv0"], w["conv0_b"], same=True))
        i = 0
        while f"dil{i}" in w:
            h = h + relu(np_conv(h, w[f"dil{i}"], w[f"dil{i}_b"], 2**i, same=True))
            i += 1
        return h.mean(axis=0) @ w["dense"] + w["dense_b"]
    h = np_max_pool(relu(np_conv(x, w["c1"], w["c1_b"])), 3)
    h = np_max_pool(relu(np_conv(h, w["c2"], w["c2_b"])), 3)
    h = relu(np_conv(h, w["c3"], w["c3_b"])).max(axis=0)
    return relu(h @ w["d1"] + w["d1_b"]) @ w["d2"] + w["d2_b"]


# --------------------------------------------------------------------------- windowed forward
WINDOWED = {
    "bpnet": (30, lambda: models.bpnet_weights(n_outputs=2, filters=4, n_layers=2, seed=3)),
    "crested": (80, lambda: models.crested_weights(n_outputs=2, filters=4, seed=4)),
}


def _windowed_model(framework: str, kind: str, layout: str):
    length, weights = WINDOWED[kind]
    w = weights()
    if framework == "torch":
        return models.torch_model(kind, w, layout), w, length
    return models.keras_model(kind, w, length, layout), w, length


#: (layout, the largest tensor of a pass in bytes: None for the backend's own, or small enough
#: that the wide nodes run on chunks of the batch)
PASSES = [("NLC", None), ("NCL", None), ("NLC", 2**17)]


@pytest.mark.parametrize(("layout", "pass_bytes"), PASSES)
@pytest.mark.parametrize("kind", sorted(WINDOWED))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_windowed_forward_gives_every_mutants_full_forward(
    framework, kind, layout, pass_bytes, monkeypatch
):
    model, w, length = _windowed_model(framework, kind, layout)
    be = sa.get_backend(model)
    assert isinstance(be, WindowedBackend)
    X = models.random_one_hot(2, length, seed=5)  # (2, L, 4)
    seq = np.repeat(np.arange(2), length * 4)
    position = np.tile(np.repeat(np.arange(length), 4), 2)
    base = np.tile(np.arange(4), 2 * length)
    expected = []
    for s, p, b in zip(seq, position, base, strict=True):
        mutant = X[s].astype(np.float64)
        mutant[p] = np.eye(4)[b]
        expected.append(np_forward(kind, w, mutant))
    x = X if layout == "NLC" else X.transpose(0, 2, 1)
    row, axis = x.shape[1:], 1 if layout == "NLC" else 2
    if pass_bytes is not None:
        monkeypatch.setattr(be, "pass_bytes", lambda: pass_bytes)
    with model_session(be, model, None):
        forward = FastForward(be, plan_windows(be.local_graph(model, row, axis), length))
        *kept, raw = forward.reference(be.asarray(np.ascontiguousarray(x)))
        reference = np.stack([np_forward(kind, w, X[s].astype(np.float64)) for s in (0, 1)])
        assert_close(be.to_numpy(be.outputs(raw, Head())), reference, FLOAT32)
        got = forward.mutant_outputs(
            kept,
            be.asarray(seq, "int64"),
            be.asarray(position, "int64"),
            be.asarray(base, "int64"),
            lambda out: be.outputs(out, Head()),
        )
        assert_close(be.to_numpy(got), np.stack(expected), FLOAT32)
        forward.release()


@pytest.fixture(params=FRAMEWORKS)
def windowed(request, linear_weights):
    from conftest import make_model

    model = make_model(request.param, "linear", linear_weights, "NLC")
    backend = sa.get_backend(model)
    with model_session(backend, model, None):
        yield backend


@pytest.mark.parametrize("axis", [1, 2])
def test_gather_windows_reads_each_rows_window(windowed, axis):
    be = windowed
    rng = np.random.default_rng(6)
    source = rng.standard_normal((3, 10, 2)).astype(np.float32)  # (N, positions, channels)
    rows, starts, width = np.array([2, 0, 0, 1]), np.array([0, 3, 6, 4]), 4
    expected = np.stack([source[r, s : s + width] for r, s in zip(rows, starts, strict=True)])
    src = source if axis == 1 else source.transpose(0, 2, 1)
    got = be.gather_windows(
        be.asarray(np.ascontiguousarray(src)),
        be.asarray(rows, "int64"),
        be.asarray(starts, "int64"),
        width,
        axis,
    )
    got = be.to_numpy(got)
    np.testing.assert_array_equal(got if axis == 1 else got.transpose(0, 2, 1), expected)


def test_add_windows_writes_in_place_as_declared(windowed):
    be = windowed
    rng = np.random.default_rng(7)
    source = rng.standard_normal((2, 8, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    rows, starts = np.array([1, 0]), np.array([2, 4])
    x_t = be.asarray(x.copy())
    got = be.add_windows(
        x_t, be.asarray(source), be.asarray(rows, "int64"), be.asarray(starts, "int64"), 1, 2.0, x_t
    )
    expected = x + 2.0 * np.stack([source[1, 2:6], source[0, 4:8]])
    assert_close(be.to_numpy(got), expected, CLOSED_FORM)
    assert (got is x_t) == be.writes_in_place
    assert_close(be.to_numpy(x_t), expected if be.writes_in_place else x, CLOSED_FORM)


def test_compile_keeps_what_a_function_computes(windowed):
    be = windowed
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    def fn(a, b):
        return [a * b + 1.0, be.reshape(a - b, (4, 3))]

    got = be.compile(fn)(be.asarray(x), be.asarray(2 * x))
    assert_close(be.to_numpy(got[0]), x * 2 * x + 1, CLOSED_FORM)
    assert_close(be.to_numpy(got[1]), (x - 2 * x).reshape(4, 3), CLOSED_FORM)


# --------------------------------------------------------------------------- rescale rules
L, C1, C2, K = 10, 3, 2, 2


def rescale_weights(seed: int = 8) -> dict[str, np.ndarray]:
    """conv(4->C1, 3) sigmoid, conv(C1->C2, 2) relu, max pool 2, flatten, dense(->K)."""
    rng = np.random.default_rng(seed)
    pooled = (L - 3) // 2
    return {
        "c1": rng.standard_normal((3, 4, C1)).astype(np.float32),
        "c1_b": rng.standard_normal(C1).astype(np.float32),
        "c2": rng.standard_normal((2, C1, C2)).astype(np.float32),
        "c2_b": (0.5 * rng.standard_normal(C2)).astype(np.float32),
        "d": rng.standard_normal((pooled * C2, K)).astype(np.float32),
    }


def rescale_model(framework: str, w: dict[str, np.ndarray]):
    """The network of ``rescale_weights`` on (batch, L, 4), flattened as (positions, channels)."""
    if framework == "torch":
        F = torch.nn.functional
        c1, c2, d = (torch.from_numpy(w[k].copy()) for k in ("c1", "c2", "d"))
        b1, b2 = torch.from_numpy(w["c1_b"]), torch.from_numpy(w["c2_b"])

        class Net(torch.nn.Module):
            def forward(self, x):
                h = torch.sigmoid(F.conv1d(x.transpose(1, 2), c1.permute(2, 1, 0), b1))
                h = F.max_pool1d(torch.relu(F.conv1d(h, c2.permute(2, 1, 0), b2)), 2)
                return h.transpose(1, 2).flatten(1) @ d

        return Net()
    layers = keras.layers
    inputs = keras.Input((L, 4))
    conv1 = layers.Conv1D(C1, 3, activation="sigmoid")
    conv2 = layers.Conv1D(C2, 2, activation="relu")
    dense = layers.Dense(K, use_bias=False)
    out = dense(layers.Flatten()(layers.MaxPooling1D(2)(conv2(conv1(inputs)))))
    model = keras.Model(inputs, out)
    conv1.set_weights([w["c1"], w["c1_b"]])
    conv2.set_weights([w["c2"], w["c2_b"]])
    dense.set_weights([w["d"]])
    return model


def _secant(f, df, zx: np.ndarray, zr: np.ndarray) -> np.ndarray:
    """The rescale multiplier of f: (f(zx) - f(zr)) / (zx - zr), f'(zx) where they meet."""
    dz = zx - zr
    near = np.abs(dz) < 1e-6
    return np.where(near, df(zx), (f(zx) - f(zr)) / np.where(near, 1.0, dz))


def _conv_back(m_out: np.ndarray, w: np.ndarray, n_in: int) -> np.ndarray:
    """Multipliers of a valid convolution's input from those of its output (its transpose)."""
    m_in = np.zeros((n_in, w.shape[1]))
    for j in range(w.shape[0]):
        m_in[j : j + len(m_out)] += m_out @ w[j].T
    return m_in


def rescale_multipliers(w: dict[str, np.ndarray], x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(K, L, 4): the rescale rule (sigmoid, ReLU) and DeepLIFT's max rule by hand."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    relu = lambda z: np.maximum(z, 0.0)  # noqa: E731
    z1x, z1r = np_conv(x, w["c1"], w["c1_b"]), np_conv(r, w["c1"], w["c1_b"])
    a1x, a1r = sigmoid(z1x), sigmoid(z1r)
    z2x, z2r = np_conv(a1x, w["c2"], w["c2_b"]), np_conv(a1r, w["c2"], w["c2_b"])
    a2x, a2r = relu(z2x), relu(z2r)
    s1 = _secant(sigmoid, lambda z: sigmoid(z) * (1 - sigmoid(z)), z1x, z1r)
    s2 = _secant(relu, lambda z: (z > 0).astype(np.float64), z2x, z2r)
    pooled = len(a2x) // 2
    out = []
    for k in range(K):
        g = w["d"][:, k].reshape(pooled, C2)  # multipliers of the pooled values
        routed, plain = np.zeros_like(a2x), np.zeros_like(a2x)
        for p in range(pooled):
            for c in range(C2):
                ix = 2 * p + int(np.argmax(a2x[2 * p : 2 * p + 2, c]))
                ir = 2 * p + int(np.argmax(a2r[2 * p : 2 * p + 2, c]))
                gap = a2x[ix, c] - a2r[ir, c]
                routed[ix, c] += g[p, c] * max(gap, 0.0)
                routed[ir, c] += g[p, c] * min(gap, 0.0)
                plain[ix, c] += g[p, c]
        da = a2x - a2r
        same = np.abs(da) < 1e-6
        m_a2 = np.where(same, plain, routed / np.where(same, 1.0, da))
        m_a1 = _conv_back(m_a2 * s2, w["c2"], len(a1x))
        out.append(_conv_back(m_a1 * s1, w["c1"], L))
    return np.stack(out)


@pytest.mark.parametrize("vectorised", [False, True])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_rescale_rules_of_a_sigmoid_relu_max_pool_network_by_hand(framework, vectorised):
    w = rescale_weights()
    model = rescale_model(framework, w)
    be = sa.get_backend(model)
    assert isinstance(be, RescaleGradients)
    X = models.random_one_hot(2, L, seed=9)
    refs = np.concatenate(
        [models.random_one_hot(3, L, seed=10), X[1:2], np.full((1, L, 4), 0.25, np.float32)]
    )
    index = np.array([1, 0, 0, 1, 0])  # the fourth reference is its input: gradients throughout
    with model_session(be, model, None):
        out_x, out_r, m = (
            be.to_numpy(t)
            for t in be.rescale_gradients(
                model, be.asarray(X), be.asarray(refs), index, [1, 0], Head(), vectorised
            )
        )
    f = np.stack([np_forward_rescale(w, x) for x in X])
    f_refs = np.stack([np_forward_rescale(w, r) for r in refs])
    assert_close(out_x, f[:, [1, 0]], FLOAT32)
    assert_close(out_r, f_refs[:, [1, 0]], FLOAT32)
    for j, i in enumerate(index):
        expected = rescale_multipliers(w, X[i].astype(np.float64), refs[j].astype(np.float64))
        assert_close(m[j], expected[[1, 0]], FLOAT32)
        # contributions (x - r) * multipliers sum to the difference of the outputs
        contributions = ((X[i] - refs[j])[None] * m[j]).sum(axis=(1, 2))
        assert_close(contributions, f[i, [1, 0]] - f_refs[j, [1, 0]], FLOAT32)


def np_forward_rescale(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The network of ``rescale_weights`` on one sequence x (L, 4), in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    h = 1 / (1 + np.exp(-np_conv(x.astype(np.float64), w["c1"], w["c1_b"])))
    h = np_max_pool(np.maximum(np_conv(h, w["c2"], w["c2_b"]), 0.0), 2)
    return h.reshape(-1) @ w["d"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_rescale_layers_names_the_rule_of_each_nonlinearity(framework):
    model = rescale_model(framework, rescale_weights())
    be = sa.get_backend(model)
    X = models.random_one_hot(1, L, seed=11)
    with model_session(be, model, None):
        report = be.rescale_layers(model, be.asarray(X), Head())
    assert len(report.rescaled) == 2  # the sigmoid and the ReLU
    assert len(report.max_rule) == 1  # the max pooling
    assert report.by_gradient == ()
