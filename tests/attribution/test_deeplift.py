"""deep_lift_shap: closed forms, summation to delta, the hypothetical form TF-MoDISco takes,
torch = Keras, and the contract every method keeps (shapes, layouts, targets, invariance to
batch size, subset, permutation and shard, content-seeded references, files)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from helpers import CLOSED_FORM, FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.engine.outputs import Head, model_session

FRAMEWORKS = ["torch", "tensorflow"]
CASES = [(f, layout) for f in FRAMEWORKS for layout in ("NLC", "NCL")]
N = 5


def deeplift(model, X, **kw):
    kw.setdefault("n_baselines", 3)
    return sa.deep_lift_shap(model, X, **kw)


@pytest.fixture(params=CASES, ids=lambda c: "-".join(c))
def case(request, conv_weights):
    framework, layout = request.param
    model = make_model(framework, "convnet", conv_weights, layout)
    return model, random_one_hot(N, LENGTH, seed=1, layout=layout), layout


# --------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_linear_model_gives_x_minus_reference_times_weights(framework, linear_weights):
    model = make_model(framework, "linear", linear_weights, "NLC")
    X = random_one_hot(4, LENGTH, seed=2)
    refs = np.stack([random_one_hot(3, LENGTH, seed=10 + i) for i in range(4)])
    w = linear_weights["w"][:, :, [0, 2]]  # (L, 4, K)
    attributions, delta = deeplift(
        model, X, target=[0, 2], baselines=refs, return_delta=True, batch_size=5
    )
    # per position, (x - r) . w averaged over the references, on the base x holds
    per_position = np.einsum("nblc,lck->nkl", X[:, None] - refs, w) / 3
    assert_close(attributions, per_position[..., None] * X[:, None], CLOSED_FORM)
    assert_close(delta, np.zeros_like(delta), FLOAT32)  # float32 sums of L * 4 terms
    hypothetical = deeplift(model, X, target=0, baselines=refs, multiply_by_inputs=False)
    expected = w[None, :, :, 0] - np.einsum("nblc,lc->nl", refs, w[:, :, 0])[..., None] / 3
    assert_close(hypothetical, expected, CLOSED_FORM)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_one_relu_network_by_hand(framework):
    from deeplift_models import one_relu, one_relu_multipliers, one_relu_weights

    L = 12
    w = one_relu_weights(L, seed=3)
    X = random_one_hot(3, L, seed=4)
    refs = np.stack([random_one_hot(2, L, seed=20 + i) for i in range(3)])
    hypothetical = deeplift(
        one_relu(framework, w), X, target=1, baselines=refs, n_baselines=2, multiply_by_inputs=False
    )
    for i in range(3):
        expected = np.zeros((L, 4))
        for r in refs[i]:
            m = one_relu_multipliers(w, X[i], r)[:, 1].reshape(L, 4)
            expected += (m - (r * m).sum(axis=1, keepdims=True)) / 2
        assert_close(hypothetical[i], expected, CLOSED_FORM)


def _combine_mult_and_diffref(mult, orig_inp, bg_data):
    """TF-MoDISco's form of hypothetical scores (the DeepSHAP code of TF-MoDISco, BPNet and
    ChromBPNet), on (B, L, 4) multipliers and references and an (L, 4) input."""
    projected = np.zeros_like(bg_data, dtype=np.float64)
    for i in range(orig_inp.shape[-1]):
        hypothetical_input = np.zeros_like(orig_inp, dtype=np.float64)
        hypothetical_input[:, i] = 1.0
        difference = hypothetical_input[None, :, :] - bg_data
        projected[:, :, i] = np.sum(difference * mult, axis=-1)
    return np.mean(projected, axis=0)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_hypothetical_scores_are_combine_mult_and_diffref(framework, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=5)
    refs = np.stack([random_one_hot(4, LENGTH, seed=30 + i) for i in range(3)])
    ours = deeplift(
        model, X, target=[1, 2], baselines=refs, n_baselines=4, multiply_by_inputs=False
    )
    be = sa.get_backend(model)
    with model_session(be, model, None):
        _, _, mult = be.rescale_gradients(
            model,
            be.asarray(X),
            be.asarray(refs.reshape(-1, LENGTH, 4)),
            np.repeat(np.arange(3), 4),
            [1, 2],
            Head(),
            False,
        )
        mult = be.to_numpy(mult).reshape(3, 4, 2, LENGTH, 4)
    for i in range(3):
        for k in range(2):
            expected = _combine_mult_and_diffref(mult[i, :, k], X[i], refs[i])
            assert_close(ours[i, k], expected, FLOAT32)


# --------------------------------------------------------------------------- summation to delta
_MODELS = {
    "convnet": (lambda: __import__("models").convnet_weights(), LENGTH),
    "bpnet": (lambda: __import__("models").bpnet_weights(filters=16, n_layers=4), 64),
    "basset": (lambda: __import__("models").basset_weights(40), 40),
    "crested": (lambda: __import__("models").crested_weights(filters=16), 120),
}
_BUILT: dict = {}


def toy(framework, kind, layout):
    import models

    key = (framework, kind, layout)
    if key not in _BUILT:
        weights, length = _MODELS[kind]
        w = weights()
        _BUILT[key] = (
            models.torch_model(kind, w, layout)
            if framework == "torch"
            else models.keras_model(kind, w, length, layout),
            length,
        )
    return _BUILT[key]


@pytest.mark.parametrize("kind", list(_MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_contributions_sum_to_the_output_difference(kind, framework):
    model, length = toy(framework, kind, "NLC")
    X = random_one_hot(4, length, seed=6)
    refs = np.stack([random_one_hot(5, length, seed=40 + i) for i in range(4)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", sa.SeqAttribWarning)
        attributions, delta = deeplift(
            model, X, target=None, baselines=refs, n_baselines=5, return_delta=True, batch_size=7
        )
    be = sa.get_backend(model)
    with model_session(be, model, None):
        f_x = be.to_numpy(be.forward(model, be.asarray(X), Head()))
        f_r = be.to_numpy(be.forward(model, be.asarray(refs.reshape(20, length, 4)), Head()))
    difference = f_x - f_r.reshape(4, 5, -1).mean(axis=1)
    assert np.abs(difference).max() > 1e-2
    assert_close(attributions.sum(axis=(2, 3)) + delta, difference, FLOAT32)
    assert_close(delta, np.zeros_like(delta), FLOAT32)


@pytest.mark.parametrize("kind", list(_MODELS))
@pytest.mark.parametrize("layout", ["NLC", "NCL"])
def test_torch_equals_keras(kind, layout):
    torch_model, length = toy("torch", kind, layout)
    keras_model, _ = toy("tensorflow", kind, layout)
    X = random_one_hot(3, length, seed=8, layout=layout)
    a = deeplift(torch_model, X, target=[0, 1], n_baselines=4, batch_size=5)
    b = deeplift(keras_model, X, target=[0, 1], n_baselines=4, batch_size=6)
    assert_close(b, a, FLOAT32)
    h = deeplift(torch_model, X, target=0, n_baselines=4, multiply_by_inputs=False)
    g = deeplift(keras_model, X, target=0, n_baselines=4, multiply_by_inputs=False)
    assert_close(g, h, FLOAT32)


def test_a_gap_warns_naming_the_sequence_and_what_is_not_covered():
    class Normalised(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 6, 5)
            self.dense = torch.nn.Linear(6, 2)

        def forward(self, x):
            return self.dense(torch.logsumexp(torch.relu(self.conv(x)), -1))

    torch.manual_seed(0)
    X = random_one_hot(3, LENGTH, seed=9, layout="NCL")
    with pytest.warns(sa.SeqAttribWarning, match=r"sequence 0 \(target 1\).*logsumexp"):
        _, delta = deeplift(Normalised(), X, target=1, return_delta=True)
    assert np.abs(delta).max() > 1e-3


# --------------------------------------------------------------------------- the contract
def test_shapes_dtype_and_layout(case):
    model, X, _ = case
    one = deeplift(model, X, target=1, batch_size=16)
    assert one.shape == X.shape and one.dtype == np.float32
    assert np.abs(one).max() > 0
    two = deeplift(model, X, target=[2, 0], batch_size=16)
    assert two.shape == (N, 2, *X.shape[1:]) and two.dtype == np.float32
    assert deeplift(model, X, target=None, batch_size=16).shape == (N, 3, *X.shape[1:])
    # contributions sit on the bases of the input
    assert np.all(one[X == 0] == 0)


@pytest.mark.parametrize("batch_size", [1, 7, 10**6, "auto"])
def test_batch_size_does_not_change_results(case, batch_size):
    model, X, _ = case
    reference = deeplift(model, X, target=[0, 2], batch_size=3)
    assert_close(deeplift(model, X, target=[0, 2], batch_size=batch_size), reference, FLOAT32)


@pytest.mark.parametrize("max_cpu_sequences", [1, 2, 3])
def test_accumulation_limit_does_not_change_results(case, max_cpu_sequences):
    model, X, _ = case
    reference = deeplift(model, X, target=1, batch_size=5)
    result = deeplift(model, X, target=1, batch_size=5, max_cpu_sequences=max_cpu_sequences)
    assert_close(result, reference, FLOAT32)


def test_subset_permutation_and_shard_give_the_same_rows(case):
    model, X, _ = case
    full = deeplift(model, X, target=0, batch_size=4)
    order = np.array([3, 0, 4, 1, 2])
    assert_close(deeplift(model, X[order], target=0, batch_size=4), full[order], FLOAT32)
    subset = np.array([4, 2])
    assert_close(deeplift(model, X[subset], target=0, batch_size=4), full[subset], FLOAT32)
    shards = [deeplift(model, X, target=0, batch_size=4, shard=(i, 2)) for i in range(2)]
    assert_close(np.concatenate(shards), full, FLOAT32)


def test_k_targets_equal_k_single_calls(case):
    model, X, _ = case
    together, delta = deeplift(model, X, target=[2, 0, 1], batch_size=6, return_delta=True)
    for k, t in enumerate([2, 0, 1]):
        one, one_delta = deeplift(model, X, target=t, batch_size=6, return_delta=True)
        assert_close(together[:, k], one, FLOAT32)
        assert_close(delta[:, k], one_delta, FLOAT32)


def test_random_state_and_content_seed_the_references(case):
    model, X, _ = case
    first = deeplift(model, X, target=0, batch_size=8, random_state=3)
    np.testing.assert_array_equal(first, deeplift(model, X, target=0, batch_size=8, random_state=3))
    assert np.abs(deeplift(model, X, target=0, random_state=4) - first).max() > 1e-3


def test_int8_input_equals_float32(case):
    model, X, _ = case
    assert_close(
        deeplift(model, X.astype(np.int8), target=0), deeplift(model, X, target=0), FLOAT32
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_baselines_names_arrays_and_callables(framework, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=11)
    shared = random_one_hot(4, LENGTH, seed=12)
    per_sequence = np.stack([shared] * 3)
    a = deeplift(model, X, baselines=shared, n_baselines=4)
    assert_close(deeplift(model, X, baselines=per_sequence, n_baselines=4), a, FLOAT32)
    assert_close(deeplift(model, X, baselines=lambda x, n, rng: shared, n_baselines=4), a, FLOAT32)
    zeros, delta = deeplift(model, X, baselines="zeros", n_baselines=7, return_delta=True)
    assert_close(delta, np.zeros_like(delta), FLOAT32)
    for name in ("shuffle", "random", "uniform"):
        assert deeplift(model, X, baselines=name).shape == X.shape


def test_torch_model_state_is_restored(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NCL")
    model.train()
    model.conv2.eval()
    model.conv1.weight.requires_grad_(False)
    deeplift(model, random_one_hot(3, LENGTH, layout="NCL"), batch_size=4)
    assert model.training and model.dense.training and not model.conv2.training
    assert not model.conv1.weight.requires_grad and model.conv2.weight.requires_grad
    assert all(p.grad is None for p in model.parameters())


def test_errors_name_the_parameter(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(2, LENGTH)
    with pytest.raises(ValueError, match="'n_baselines' parameter of deep_lift_shap"):
        deeplift(model, X, n_baselines=0)
    with pytest.raises(ValueError, match="'multiply_by_inputs' parameter"):
        deeplift(model, X, multiply_by_inputs="yes")
    with pytest.raises(ValueError, match="'baselines' parameter"):
        deeplift(model, X, baselines="mean")
    with pytest.raises(ValueError, match="'target' parameter"):
        deeplift(model, X, target=7)


# --------------------------------------------------------------------------- files and names
def test_out_file_streams_resumes_and_exports_to_modisco(conv_weights, tmp_path):
    import h5py

    from seqattrib.io import export_modisco, read_tracks

    model = make_model("torch", "convnet", conv_weights, "NCL")
    X = random_one_hot(6, LENGTH, seed=13, layout="NCL")
    expected, delta = deeplift(model, X, target=[0, 2], multiply_by_inputs=False, return_delta=True)
    path = deeplift(
        model,
        X,
        target=[0, 2],
        multiply_by_inputs=False,
        return_delta=True,
        out=tmp_path / "t.h5",
        max_cpu_sequences=2,
    )
    tracks = read_tracks(path)
    assert_close(tracks.attributions, expected, FLOAT32)
    assert tracks.settings["method"] == "deep_lift_shap"
    with h5py.File(path) as f:
        assert_close(f["delta"][:], delta, FLOAT32)
    export_modisco(path, tmp_path, class_names=["a", "c"])
    with np.load(tmp_path / "c_attr.npz") as attr:
        assert_close(attr["arr_0"], expected[:, 1], FLOAT32)  # (N, 4, L): the layout of X
    assert (
        deeplift(
            model,
            X,
            target=[0, 2],
            multiply_by_inputs=False,
            return_delta=True,
            out=tmp_path / "t.h5",
        )
        == path
    )  # resumed: nothing left to do


def test_explain_and_the_command_line(conv_weights, tmp_path, capsys):
    from seqattrib import demo
    from seqattrib.cli import main
    from seqattrib.io import read_tracks

    X = random_one_hot(3, LENGTH, seed=14)
    model = make_model("torch", "convnet", conv_weights, "NLC")
    assert_close(
        sa.explain(model, X, method="deeplift_shap", n_baselines=3),
        deeplift(model, X),
        FLOAT32,
    )
    data = demo.load_data()
    fasta = tmp_path / "s.fa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:3])))
    out = tmp_path / "cli.h5"
    argv = ["explain", "--model", "seqattrib.demo:torch_model", "--fasta", str(fasta)]
    argv += ["--method", "deeplift_shap", "--n-baselines", "4", "--target", "0,1"]
    code = main([*argv, "--hypothetical", "--out", str(out), "--quiet"])
    assert code == 0 and capsys.readouterr().out.strip() == str(out)
    expected = sa.deep_lift_shap(
        demo.torch_model(),
        sa.one_hot(data["sequences"][:3], layout="NCL"),
        target=[0, 1],
        n_baselines=4,
        multiply_by_inputs=False,
    )
    assert_close(read_tracks(out).attributions, expected, FLOAT32)
    assert main([*argv, "--correct-gradient", "--out", str(tmp_path / "x.h5")]) == 1
    assert "--correct-gradient" in capsys.readouterr().err


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_nan_output_names_the_sequence_and_target(framework):
    from test_non_finite import LENGTH as length
    from test_non_finite import _nan_for_sequence

    X = random_one_hot(6, length, seed=2)
    X[:, 0] = np.eye(4, dtype=np.float32)[0]
    X[4, 0] = np.eye(4, dtype=np.float32)[2]  # sequence 4 starts with G: its output 1 is NaN
    with pytest.raises(ValueError, match=r"sequence 4 \(target 1\)"):
        deeplift(_nan_for_sequence(framework, 4), X, target=[0, 1], baselines="zeros")


def test_profile_heads_through_output_fn():
    """BPNet's profile contribution function: sum over positions of the mean-centred logits
    weighted by their (detached) softmax. The softmax carries no gradient, so it is allowed;
    torch equals Keras."""
    import keras
    import tensorflow as tf

    weights = __import__("models").convnet_weights(n_outputs=3)
    X = random_one_hot(3, LENGTH, seed=15)
    profile_w = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    body = __import__("models").torch_model("convnet", weights, "NLC")

    class Profile(torch.nn.Module):
        def forward(self, x):
            h = torch.relu(body.conv2(torch.relu(body.conv1(x.transpose(1, 2)))))
            logits = torch.einsum("ncl,ck->nkl", h, torch.from_numpy(profile_w))
            return logits, body.dense(h.mean(-1))

    def torch_weighted(out):
        logits = out[0]
        centred = logits - logits.mean(-1, keepdim=True)
        return (centred * torch.softmax(logits, -1).detach()).sum(-1)

    inputs = keras.Input((LENGTH, 4))
    conv1 = keras.layers.Conv1D(8, 5, activation="relu")
    conv2 = keras.layers.Conv1D(8, 3, dilation_rate=2, activation="relu")
    h = conv2(conv1(inputs))
    head = keras.layers.Conv1D(2, 1, use_bias=False)
    keras_model = keras.Model(inputs, [head(h), h])
    conv1.set_weights([weights["conv1"], weights["conv1_b"]])
    conv2.set_weights([weights["conv2"], weights["conv2_b"]])
    head.set_weights([profile_w[None]])

    def keras_weighted(out):
        logits = tf.transpose(out[0], (0, 2, 1))
        centred = logits - tf.reduce_mean(logits, -1, keepdims=True)
        return tf.reduce_sum(centred * tf.stop_gradient(tf.nn.softmax(logits, -1)), -1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sa.SeqAttribWarning)  # detached weights: no summation
        ours_torch = deeplift(Profile(), X, target=[0, 1], output_fn=torch_weighted)
        ours_keras = deeplift(keras_model, X, target=[0, 1], output_fn=keras_weighted)
    assert ours_torch.shape == (3, 2, LENGTH, 4)
    assert_close(ours_keras, ours_torch, FLOAT32)


@pytest.mark.parametrize("kind", ["bpnet", "crested"])
@pytest.mark.parametrize("framework", ["torch"])  # TensorFlow ignores the flag (one graph)
def test_vectorised_backward_equals_sequential_passes(kind, framework, monkeypatch):
    """Accelerators run the K backward passes as one vectorised pass, CPUs one by one."""
    from seqattrib.engine import outputs

    model, length = toy(framework, kind, "NLC")
    X = random_one_hot(3, length, seed=16)
    sequential = deeplift(model, X, target=[0, 1, 2], batch_size=5)
    monkeypatch.setattr(outputs, "VECTORISE_ON_CPU", True)
    assert_close(deeplift(model, X, target=[0, 1, 2], batch_size=5), sequential, FLOAT32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["bpnet", "crested"])
def test_cuda_equals_cpu(kind):
    """cuDNN's float32 convolutions differ from the CPU's by about 1e-3 of the largest value
    on these models (see tests/test_gpu.py): results across devices are held to 5e-3."""
    model, length = toy("torch", kind, "NCL")
    X = random_one_hot(7, length, seed=3, layout="NCL")
    on_cpu = deeplift(model, X, target=[0, 1], n_baselines=8)
    on_cuda = deeplift(model, X, target=[0, 1], n_baselines=8, device="cuda")
    assert next(model.parameters()).device.type == "cpu"
    assert float(np.abs(on_cuda - on_cpu).max() / np.abs(on_cpu).max()) <= 5e-3
