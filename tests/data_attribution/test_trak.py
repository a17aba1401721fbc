"""TRAK: scores equal a float64 closed form from explicit per-example gradients (exact and
projected, three tasks), torch equals Keras, and results are fresh, split-invariant and never
stale."""

from __future__ import annotations

import warnings

import models
import numpy as np
import pytest
import torch
from helpers import CLOSED_FORM, CROSS_FRAMEWORK, FLOAT32, assert_close
from tracin_models import LENGTH, data, one_torch_thread, torch_state
from trak_reference import closed_form_trak

import seqattrib as sa
from seqattrib.data_attribution import projection
from seqattrib.data_attribution import trak as trak_module

#: A tiny convnet: conv(4->4, 3), conv(4->4, 3, dilation 2), mean, dense(4->K): 119 parameters
#: for K = 3, fewer than the training examples (else TRAK warns, rightly).
SMALL = {"filters": 4, "width": 3}
N_TRAIN, N_TEST = 150, 7


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


def small_weights(n: int, n_outputs: int = 3, first_seed: int = 10) -> list[dict[str, np.ndarray]]:
    return [
        models.convnet_weights(n_outputs=n_outputs, seed=first_seed + i, **SMALL) for i in range(n)
    ]


@pytest.fixture(scope="module")
def weights():
    return small_weights(2)


@pytest.fixture(scope="module")
def states(weights):
    return [torch_state("convnet", w) for w in weights]


@pytest.fixture(scope="module")
def train_set():
    return data(N_TRAIN, seed=1)


@pytest.fixture(scope="module")
def test_set():
    return data(N_TEST, seed=2)


def make(weights):
    return models.torch_model("convnet", weights[0], "NLC")


def quiet(trak, *fit_args, **fit_kwargs):
    """fit without letting an expected warning (e.g. lambda_reg=0) escape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sa.SeqAttribWarning)
        return trak.fit(*fit_args, **fit_kwargs)


def test_exact_equals_the_closed_form(weights, states, train_set, test_set):
    """proj_dim=None, lambda_reg='auto' (1e-6 trace(G^T G)). The reference differentiates a
    float64 copy of the model; ours uses float32 gradients. With the relative ridge the kernel's
    condition number stays below 1e6, so they meet to the closed-form tolerance (measured
    4e-7; with a ridge of 1e-6 trace / d, condition ~1e9, float32 rounding alone moved the
    closed form by 2e-6)."""
    trak = sa.TRAK(make(weights), states, proj_dim=None).fit(*train_set)
    ours = trak.scores(*test_set)
    reference, lambdas, conditions = closed_form_trak(
        lambda: make(weights), states, train_set, test_set
    )
    assert ours.dtype == np.float32 and ours.shape == (N_TEST, N_TRAIN)
    assert_close(ours, reference, CLOSED_FORM)
    np.testing.assert_allclose(trak.lambdas_, lambdas, rtol=CLOSED_FORM)
    np.testing.assert_allclose(trak.conditions_, conditions, rtol=1e-2)
    assert (trak.conditions_ <= 1 + 1e6).all()
    assert np.abs(ours).max() > 0.01  # not vacuous


def test_absolute_ridge_equals_the_closed_form(weights, states, train_set, test_set):
    """A float lambda_reg is an absolute ridge; large enough here for a well-conditioned kernel,
    where float32 gradients meet the float64 closed form to 1e-6."""
    trak = sa.TRAK(make(weights), states, proj_dim=None, lambda_reg=0.05).fit(*train_set)
    reference, _, _ = closed_form_trak(
        lambda: make(weights), states, train_set, test_set, lambda_reg=0.05
    )
    np.testing.assert_array_equal(trak.lambdas_, [0.05, 0.05])
    assert (trak.conditions_ < 1e6).all()
    assert_close(trak.scores(*test_set), reference, CLOSED_FORM)


def test_projected_equals_the_closed_form_with_the_documented_projection(
    weights, states, train_set, test_set
):
    """Rademacher matrix per checkpoint from the seed sequence (random_state, c), gradients in
    the Keras layout: the reference builds all of it from the documented recipe."""
    trak = sa.TRAK(make(weights), states, proj_dim=32, random_state=5).fit(*train_set)
    reference, lambdas, _ = closed_form_trak(
        lambda: make(weights), states, train_set, test_set, proj_dim=32, random_state=5
    )
    assert_close(trak.scores(*test_set), reference, CLOSED_FORM)
    np.testing.assert_allclose(trak.lambdas_, lambdas, rtol=1e-6)


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_binary_and_regression_equal_the_closed_form(task, test_set):
    ws = small_weights(2, n_outputs=1, first_seed=20)
    states = [torch_state("convnet", w) for w in ws]
    rng = np.random.default_rng(3)
    X, _ = data(N_TRAIN, seed=3)
    if task == "binary":
        y, y_test = rng.integers(0, 2, N_TRAIN), rng.integers(0, 2, N_TEST)
    else:
        y, y_test = rng.standard_normal(N_TRAIN), rng.standard_normal(N_TEST)
    model = models.torch_model("convnet", ws[0], "NLC")
    trak = sa.TRAK(model, states, task=task, proj_dim=None, lambda_reg=0.05).fit(X, y)
    ours = trak.scores(test_set[0], y_test)
    reference, _, _ = closed_form_trak(
        lambda: models.torch_model("convnet", ws[0], "NLC"),
        states,
        (X, y),
        (test_set[0], y_test),
        task=task,
        lambda_reg=0.05,
    )
    assert_close(ours, reference, CLOSED_FORM)
    assert np.abs(ours).max() > 0.01
    if task == "regression":  # the scores predict the change of the prediction: no y_test
        np.testing.assert_array_equal(trak.scores(test_set[0], None), ours)


def test_projection_is_seeded(weights, states, train_set, test_set):
    def run(seed):
        trak = sa.TRAK(make(weights), states, proj_dim=32, random_state=seed)
        return trak.fit(*train_set).scores(*test_set)

    first = run(3)
    np.testing.assert_array_equal(run(3), first)
    assert np.abs(run(4) - first).max() > 0.05 * np.abs(first).max()


def test_chunked_projection_equals_the_whole_matrix(weights, states, train_set, test_set):
    """A projection larger than PROJECTION_BYTES is applied chunk by chunk of parameters."""
    wide = [models.convnet_weights(n_outputs=3, filters=40, seed=s) for s in (1, 2)]
    model = models.torch_model("convnet", wide[0], "NLC")
    big = [torch_state("convnet", w) for w in wide]
    whole = sa.TRAK(model, big, proj_dim=24).fit(*train_set).scores(*test_set)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params > projection.BLOCK_ROWS  # several chunks of BLOCK_ROWS rows
    original = projection.PROJECTION_BYTES
    projection.PROJECTION_BYTES = 1  # one BLOCK_ROWS chunk at a time
    try:
        chunked = sa.TRAK(model, big, proj_dim=24, projection="rademacher")
        chunked = chunked.fit(*train_set).scores(*test_set)
    finally:
        projection.PROJECTION_BYTES = original
    assert_close(chunked, whole, FLOAT32)


@pytest.mark.parametrize("batch_size", [1, 13, 1000])
def test_batch_size_does_not_matter(weights, states, train_set, test_set, batch_size):
    base = sa.TRAK(make(weights), states, proj_dim=32).fit(*train_set).scores(*test_set)
    other = sa.TRAK(make(weights), states, proj_dim=32, batch_size=batch_size)
    assert_close(other.fit(*train_set).scores(*test_set), base, FLOAT32)


def test_split_targets_and_no_aliasing(weights, states, train_set, test_set):
    """Score A, then B, then A: the first result is untouched (also by a caller writing into it)
    and equal to the third; A in one call equals A split over calls, bit for bit."""
    trak = sa.TRAK(make(weights), states, proj_dim=32, batch_size=4).fit(*train_set)
    X, y = test_set
    A, B = (X[:5], y[:5]), data(9, seed=9)
    first = trak.scores(*A)
    kept = first.copy()
    other = trak.scores(*B)
    third = trak.scores(*A)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(third, first)
    assert not np.shares_memory(first, third) and not np.shares_memory(first, other)
    first[:] = np.nan  # a caller mutating a result changes nothing inside
    np.testing.assert_array_equal(trak.scores(*A), kept)
    parts = [trak.scores(A[0][i : i + 2], A[1][i : i + 2]) for i in range(0, 5, 2)]
    np.testing.assert_array_equal(np.concatenate(parts), kept)
    np.testing.assert_array_equal(trak.scores(X[[3, 1]], y[[3, 1]]), kept[[3, 1]])


def test_a_second_model_never_sees_the_first_ones_state(weights, states, train_set, test_set):
    """Same settings, another model: its own scores (its closed form), not the first model's."""
    first = sa.TRAK(make(weights), states, proj_dim=None).fit(*train_set)
    from_first = first.scores(*test_set)
    other_weights = small_weights(2, first_seed=40)
    other_states = [torch_state("convnet", w) for w in other_weights]
    second = sa.TRAK(make(other_weights), other_states, proj_dim=None).fit(*train_set)
    from_second = second.scores(*test_set)
    reference, _, _ = closed_form_trak(
        lambda: make(other_weights), other_states, train_set, test_set
    )
    assert_close(from_second, reference, FLOAT32)
    assert np.abs(from_second - from_first).max() > 0.1 * np.abs(from_first).max()
    np.testing.assert_array_equal(first.scores(*test_set), from_first)


def test_cache_file_round_trip(tmp_path, monkeypatch, weights, states, train_set, test_set):
    path = tmp_path / "features.npz"
    trak = sa.TRAK(make(weights), states, proj_dim=32).fit(*train_set, cache=path)
    assert path.exists() and not list(tmp_path.glob(".*partial"))
    expected = trak.scores(*test_set)
    computed = sa.TRAK(make(weights), states, proj_dim=32).fit(*train_set).scores(*test_set)
    np.testing.assert_array_equal(computed, expected)
    # a second object reads the file: no training gradient is computed
    backend = sa.get_backend(make(weights))
    calls = []
    original = backend.per_example_gradients
    monkeypatch.setattr(
        backend, "per_example_gradients", lambda *a: calls.append(len(a[1])) or original(*a)
    )
    again = sa.TRAK(make(weights), states, proj_dim=32).fit(*train_set, cache=str(path))
    assert calls == []
    np.testing.assert_array_equal(again.scores(*test_set), expected)
    np.testing.assert_array_equal(again.lambdas_, trak.lambdas_)
    np.testing.assert_array_equal(again.conditions_, trak.conditions_)


@pytest.mark.parametrize("change", ["checkpoints", "data", "labels", "settings"])
def test_cache_of_something_else_is_refused(tmp_path, weights, states, train_set, change):
    """A file keyed to other checkpoints, data or settings is an error, never stale features."""
    path = tmp_path / "features.npz"
    sa.TRAK(make(weights), states, proj_dim=32).fit(*train_set, cache=path)
    before = path.read_bytes()
    X, y = train_set
    model, ckpts, kwargs = make(weights), states, {"proj_dim": 32}
    if change == "checkpoints":
        other = small_weights(2, first_seed=40)
        model, ckpts = make(other), [torch_state("convnet", w) for w in other]
        what = "other checkpoints"
    elif change == "data":
        X = X.copy()
        X[7] = np.roll(X[7], 1, axis=0)
        what = "other training data"
    elif change == "labels":
        y = (y + 1) % 3
        what = "other training data"
    else:
        kwargs["random_state"] = 1
        what = "other settings"
    with pytest.raises(
        ValueError, match=rf"'cache' parameter of TRAK.fit.*holds features of {what}"
    ):
        sa.TRAK(model, ckpts, **kwargs).fit(X, y, cache=path)
    assert path.read_bytes() == before


def test_model_state_is_restored(weights, states, train_set, test_set):
    model = make(weights)
    model.train()
    model.conv1.weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {n: p for n, p in model.named_parameters()}
    for kwargs in ({"proj_dim": None}, {"proj_dim": 16}):
        sa.TRAK(model, states, **kwargs).fit(*train_set).scores(*test_set)
    assert model.training and all(m.training for m in model.modules())
    assert not model.conv1.weight.requires_grad and model.dense.weight.requires_grad
    assert all(p is params[n] for n, p in model.named_parameters())
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_frozen_parameters_are_left_out(weights, states, train_set, test_set):
    model = make(weights)
    for p in (model.conv1.weight, model.conv1.bias):
        p.requires_grad_(False)
    trak = sa.TRAK(model, states, proj_dim=None, lambda_reg=0.05).fit(*train_set)

    def unfrozen():
        m = make(weights)
        for p in (m.conv1.weight, m.conv1.bias):
            p.requires_grad_(False)
        return _OnlyTrainable(m)

    reference, _, _ = closed_form_trak(unfrozen, states, train_set, test_set, lambda_reg=0.05)
    assert_close(trak.scores(*test_set), reference, CLOSED_FORM)


class _OnlyTrainable(torch.nn.Module):
    """Wraps a model so that ``parameters()`` lists only its trainable ones (for the reference)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def load_state_dict(self, state, strict=True, assign=False):
        return self.inner.load_state_dict(state)

    def parameters(self, recurse=True):
        return (p for p in self.inner.parameters() if p.requires_grad)

    def forward(self, x):
        return self.inner(x)


def test_warnings_for_projection_at_least_n_train_and_ill_conditioning(
    weights, states, train_set, test_set
):
    X, y = train_set
    with pytest.warns(sa.SeqAttribWarning, match=r"proj_dim=64 >= 60 training examples.*rank"):
        sa.TRAK(make(weights), states, proj_dim=64).fit(X[:60], y[:60])
    with pytest.warns(sa.SeqAttribWarning, match=r"119 parameters >= 100 training examples"):
        sa.TRAK(make(weights), states, proj_dim=None).fit(X[:100], y[:100])
    # A tiny absolute ridge on one-hot DNA: the base-sum gauge of the convolutions leaves
    # (near-)null directions in the exact kernel, so its condition number is huge.
    with pytest.warns(sa.SeqAttribWarning, match=r"condition number \d.*e\+\d\d.*lambda = 1e-12"):
        trak = sa.TRAK(make(weights), states, proj_dim=None, lambda_reg=1e-12).fit(*train_set)
    assert (trak.conditions_ > trak_module.CONDITION_WARNING).all()
    _, _, conditions = closed_form_trak(
        lambda: make(weights), states, train_set, (X[:1], y[:1]), lambda_reg=1e-12
    )
    assert (np.array(conditions) > trak_module.CONDITION_WARNING).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        auto = sa.TRAK(make(weights), states, proj_dim=None).fit(*train_set)
    assert (auto.conditions_ <= trak_module.CONDITION_WARNING).all()


class _WithUnusedParameter(torch.nn.Module):
    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.inner = models.torch_model("convnet", weights, "NLC")
        self.unused = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        return self.inner(x)


def test_singular_kernel_without_ridge_is_an_error(weights, train_set, test_set):
    """A parameter the output does not depend on makes Phi^T Phi exactly singular."""
    states = [_WithUnusedParameter(w).state_dict() for w in weights]
    model = _WithUnusedParameter(weights[0])
    with pytest.raises(ValueError, match=r"'lambda_reg'.*invertible.*Got 0.0.*checkpoint 0"):
        sa.TRAK(model, states, proj_dim=None, lambda_reg=0).fit(*train_set)
    scores = sa.TRAK(model, states, proj_dim=None).fit(*train_set).scores(*test_set)
    assert np.isfinite(scores).all()


# --------------------------------------------------------------------------- Keras
@pytest.fixture(scope="module")
def keras_pair(weights):
    model = models.keras_model("convnet", weights[0], LENGTH, "NLC")
    lists = [models.keras_model("convnet", w, LENGTH, "NLC").get_weights() for w in weights]
    return model, lists


@pytest.mark.parametrize("proj_dim", [None, 32])
def test_torch_and_keras_agree(weights, states, keras_pair, train_set, test_set, proj_dim):
    """The same weights in both frameworks: the same gradients, the same NumPy projection
    (gradients in one layout), the same scores."""
    kwargs = {"proj_dim": proj_dim, "lambda_reg": 0.05 if proj_dim is None else "auto"}
    theirs = sa.TRAK(make(weights), states, **kwargs).fit(*train_set).scores(*test_set)
    keras_model, lists = keras_pair
    ours = sa.TRAK(keras_model, lists, **kwargs).fit(*train_set).scores(*test_set)
    assert_close(ours, theirs, CROSS_FRAMEWORK)
    assert np.abs(ours).max() > 0.01


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_torch_and_keras_agree_on_one_output(task, train_set, test_set):
    ws = small_weights(2, n_outputs=1, first_seed=20)
    rng = np.random.default_rng(5)
    if task == "binary":
        y, y_test = rng.integers(0, 2, N_TRAIN), rng.integers(0, 2, N_TEST)
    else:
        y, y_test = rng.standard_normal(N_TRAIN), rng.standard_normal(N_TEST)
    X, Xt = train_set[0], test_set[0]
    states = [torch_state("convnet", w) for w in ws]
    torch_model = models.torch_model("convnet", ws[0], "NLC")
    theirs = sa.TRAK(torch_model, states, task=task, proj_dim=32).fit(X, y).scores(Xt, y_test)
    keras_model = models.keras_model("convnet", ws[0], LENGTH, "NLC")
    lists = [models.keras_model("convnet", w, LENGTH, "NLC").get_weights() for w in ws]
    ours = sa.TRAK(keras_model, lists, task=task, proj_dim=32).fit(X, y).scores(Xt, y_test)
    assert_close(ours, theirs, CROSS_FRAMEWORK)
    assert np.abs(ours).max() > 0.01
