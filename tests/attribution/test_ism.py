"""ISM against brute force (every mutant built explicitly), closed forms and the contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from helpers import CLOSED_FORM, FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa

FRAMEWORKS = ("torch", "tensorflow")
LAYOUTS = ("NLC", "NCL")


def _predict(model, X):
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model(torch.from_numpy(np.ascontiguousarray(X))).numpy()
    return np.asarray(model(X))


def brute_force(model, X, layout, targets):
    """All 4 L single-base variants of each sequence, predicted in one batch each."""
    nlc = X if layout == "NLC" else X.transpose(0, 2, 1)
    n, length, _ = nlc.shape
    out = np.zeros((n, len(targets), length, 4), np.float32)
    for i in range(n):
        mutants = np.repeat(nlc[i][None], 4 * length, axis=0).reshape(length, 4, length, 4)
        for p in range(length):
            mutants[p, :, p, :] = np.eye(4)
        mutants = mutants.reshape(4 * length, length, 4)
        batch = mutants if layout == "NLC" else mutants.transpose(0, 2, 1)
        reference = _predict(model, X[i : i + 1])[0, targets]
        delta = _predict(model, batch)[:, targets] - reference
        one_hot_ref = (nlc[i].sum(-1) == 1)[:, None] & (nlc[i] == 1)
        out[i] = np.where(one_hot_ref, 0.0, delta.reshape(length, 4, -1).transpose(2, 0, 1))
    return out if layout == "NLC" else out.transpose(0, 1, 3, 2)


def _with_n(X, layout):
    X = X.copy()
    if layout == "NLC":
        X[1, 5] = 0
    else:
        X[1, :, 5] = 0
    return X


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ism_equals_brute_force(framework, layout, conv_weights):
    model = make_model(framework, "convnet", conv_weights, layout)
    X = _with_n(random_one_hot(3, LENGTH, seed=21, layout=layout), layout)
    scores = sa.ism(model, X, target=[0, 2], batch_size=17)
    assert scores.shape == (3, 2, *X.shape[1:]) and scores.dtype == np.float32
    assert_close(scores, brute_force(model, X, layout, [0, 2]), CLOSED_FORM)
    n_row = scores[1, :, 5] if layout == "NLC" else scores[1, :, :, 5]
    assert np.abs(n_row).min() > 0, "all four bases are scored at an N position"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_linear_ism_is_a_weight_difference(framework, layout, linear_weights):
    model = make_model(framework, "linear", linear_weights, layout)
    X = random_one_hot(4, LENGTH, seed=22, layout=layout)
    nlc = X if layout == "NLC" else X.transpose(0, 2, 1)
    w = linear_weights["w"][:, :, 1]  # (L, 4)
    expected = w[None] - (nlc * w[None]).sum(-1, keepdims=True)
    expected = expected if layout == "NLC" else expected.transpose(0, 2, 1)
    assert_close(sa.ism(model, X, target=1), expected, CLOSED_FORM)


@pytest.fixture(params=FRAMEWORKS)
def conv(request, conv_weights):
    return make_model(request.param, "convnet", conv_weights, "NCL")


@pytest.mark.parametrize("batch_size", [1, 7, 10**6, "auto"])
def test_batch_size_does_not_change_results(conv, batch_size):
    X = random_one_hot(3, LENGTH, seed=23, layout="NCL")
    reference = sa.ism(conv, X, target=None, batch_size=64)
    assert_close(sa.ism(conv, X, target=None, batch_size=batch_size), reference, FLOAT32)


def test_accumulation_limit_subsets_and_targets(conv):
    X = random_one_hot(5, LENGTH, seed=24, layout="NCL")
    full = sa.ism(conv, X, target=[2, 0], batch_size=50)
    assert_close(sa.ism(conv, X, target=[2, 0], batch_size=50, max_cpu_sequences=2), full, FLOAT32)
    order = np.array([4, 1, 3])
    assert_close(sa.ism(conv, X[order], target=[2, 0], batch_size=50), full[order], FLOAT32)
    for k, t in enumerate([2, 0]):
        assert_close(sa.ism(conv, X, target=t, batch_size=50), full[:, k], FLOAT32)


def test_window_is_a_slice_of_the_full_scan(conv):
    X = random_one_hot(3, LENGTH, seed=25, layout="NCL")
    full = sa.ism(conv, X, target=1)
    window = sa.ism(conv, X, target=1, positions=(6, 15))
    assert_close(window[:, :, 6:15], full[:, :, 6:15], FLOAT32)
    assert not window[:, :, :6].any() and not window[:, :, 15:].any()


def test_only_final_tables_cross_to_the_host(conv):
    X = random_one_hot(4, LENGTH, seed=26, layout="NCL")
    backend = sa.get_backend(conv)
    backend.transfers.reset()
    sa.ism(conv, X, target=[0, 1], batch_size=40)
    assert backend.transfers.to_host == 4 * 2 * LENGTH * 4 * 4


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_log_ratio(framework, conv_weights):
    base = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(2, LENGTH, seed=27)
    if framework == "torch":

        def positive(out):
            return torch.nn.functional.softplus(out)

        def negative(out):
            return -torch.nn.functional.softplus(out)
    else:
        import tensorflow as tf

        def positive(out):
            return tf.nn.softplus(out)

        def negative(out):
            return -tf.nn.softplus(out)

    ratio = sa.ism(base, X, target=0, output_fn=positive, score="log_ratio")
    with np.errstate(divide="ignore"):
        soft = np.log1p(np.exp(_predict(base, X)[:, 0]))
    delta = sa.ism(base, X, target=0, output_fn=positive)
    nonzero = delta != 0
    expected = np.log(delta + soft[:, None, None]) - np.log(soft[:, None, None])
    assert_close(ratio[nonzero], expected[nonzero], 1e-5)
    assert not ratio[~nonzero].any()
    with pytest.raises(ValueError, match=r"'score'.*non-positive outputs for sequence 0"):
        sa.ism(base, X, target=0, output_fn=negative, score="log_ratio")


def test_bad_ism_arguments(conv):
    X = random_one_hot(2, LENGTH, layout="NCL")
    for positions in [(5, 5), (-1, 3), (0, LENGTH + 1), (2,), "all"]:
        with pytest.raises(ValueError, match=r"'positions'.*0 <= start < end <= 24"):
            sa.ism(conv, X, positions=positions)
    with pytest.raises(ValueError, match=r"'score'"):
        sa.ism(conv, X, score="ratio")


def test_ism_to_hypothetical_and_explain(conv):
    X = random_one_hot(2, LENGTH, layout="NCL")
    scores = sa.explain(conv, X, method="ism", target=[0, 1])
    assert_close(scores, sa.ism(conv, X, target=[0, 1]), FLOAT32)
    centred = sa.ism_to_hypothetical(scores)
    assert centred.shape == scores.shape
    assert_close(centred.mean(axis=2), np.zeros((2, 2, LENGTH)), CLOSED_FORM)
    assert_close(
        centred - scores,
        np.broadcast_to(-scores.mean(axis=2, keepdims=True), scores.shape),
        CLOSED_FORM,
    )
    with pytest.raises(ValueError, match=r"'alphabet_axis'"):
        sa.ism_to_hypothetical(np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match=r"'method'.*'ism'"):
        sa.explain(conv, X, method="deeplift")
