"""Bad input to TRAK gets the package's error template: parameter, expectation, what came, and
a fix. A failure half-way leaves the model as it was."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from tracin_models import data, one_torch_thread, torch_state

import seqattrib as sa


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


SMALL = {"filters": 4, "width": 3}


@pytest.fixture(scope="module")
def weights():
    return [models.convnet_weights(n_outputs=3, seed=10 + i, **SMALL) for i in range(2)]


@pytest.fixture
def model(weights):
    return models.torch_model("convnet", weights[0], "NLC")


@pytest.fixture(scope="module")
def states(weights):
    return [torch_state("convnet", w) for w in weights]


@pytest.fixture(scope="module")
def train_set():
    return data(40, seed=1)


@pytest.fixture(scope="module")
def one_output():
    ws = [models.convnet_weights(n_outputs=1, seed=20 + i, **SMALL) for i in range(2)]
    return models.torch_model("convnet", ws[0], "NLC"), [torch_state("convnet", w) for w in ws]


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"task": "multiclass"}, ValueError, r"'task'.*'classification', 'binary' or 'regression'"),
        ({"proj_dim": 0}, ValueError, r"'proj_dim'.*positive integer"),
        ({"proj_dim": 8.0}, ValueError, r"'proj_dim'.*positive integer"),
        ({"lambda_reg": -1.0}, ValueError, r"'lambda_reg'.*'auto' or a finite number >= 0"),
        ({"lambda_reg": float("nan")}, ValueError, r"'lambda_reg'.*finite number"),
        ({"lambda_reg": "big"}, ValueError, r"'lambda_reg'.*Got 'big'.*relative"),
        ({"lambda_reg": True}, ValueError, r"'lambda_reg'"),
        ({"load_checkpoint": "torch.load"}, TypeError, r"'load_checkpoint'.*callable"),
        ({"batch_size": 0}, ValueError, r"'batch_size'.*'auto' or a positive integer"),
        ({"random_state": "seed"}, TypeError, r"'random_state'"),
    ],
)
def test_bad_parameters(model, states, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        sa.TRAK(model, states, **kwargs)


def test_bad_checkpoint_lists(model, states):
    with pytest.raises(ValueError, match=r"'checkpoints' parameter of TRAK.*non-empty"):
        sa.TRAK(model, [])
    with pytest.raises(TypeError, match=r"'checkpoints'.*Wrap a single checkpoint"):
        sa.TRAK(model, "epoch1.pt")


def test_mismatched_lengths(model, states, train_set):
    X, y = train_set
    with pytest.raises(ValueError, match=r"'y_train' parameter of TRAK.fit.*40 of them.*39 labels"):
        sa.TRAK(model, states, proj_dim=8).fit(X, y[:-1])
    trak = sa.TRAK(model, states, proj_dim=8).fit(X, y)
    with pytest.raises(ValueError, match=r"'y_test' parameter of TRAK.scores.*3 of them"):
        trak.scores(X[:3], y[:4])
    with pytest.raises(ValueError, match=r"'y_test' parameter of TRAK.top_k"):
        trak.top_k(X[:3], y[:2], 1)
    with pytest.raises(ValueError, match=r"'X_test'.*summing to at most 1"):
        trak.scores(np.ones_like(X[:3]), y[:3])
    with pytest.raises(ValueError, match=r"'X_train'.*3-D one-hot"):
        sa.TRAK(model, states, proj_dim=8).fit(X[0], y)


def test_labels_for_the_task(model, states, one_output, train_set):
    X, y = train_set
    bad = y.copy()
    bad[4] = 3
    with pytest.raises(ValueError, match=r"class labels in \[0, 3\).*label 3 for sequence 4"):
        sa.TRAK(model, states, proj_dim=8).fit(X, bad)
    with pytest.raises(ValueError, match=r"integer class labels.*loss='cross_entropy'"):
        sa.TRAK(model, states, proj_dim=8).fit(X, y.astype(np.float32))
    with pytest.raises(ValueError, match=r"'y_train'.*finite.*sequence 2"):
        sa.TRAK(one_output[0], one_output[1], task="regression", proj_dim=8).fit(
            X, np.where(np.arange(40) == 2, np.nan, 1.0)
        )
    with pytest.raises(ValueError, match=r"'loss'.*'bce', 'mse' or 'poisson' for one output"):
        sa.TRAK(one_output[0], one_output[1], proj_dim=8).fit(X, y % 2)
    with pytest.raises(ValueError, match=r"'target'.*one output for loss='bce'.*3 outputs"):
        sa.TRAK(model, states, task="binary", proj_dim=8).fit(X, y % 2)
    with pytest.raises(ValueError, match=r"labels 0 or 1 for loss='bce'.*0.5 for sequence 1"):
        sa.TRAK(one_output[0], one_output[1], task="binary", proj_dim=8).fit(
            X, np.where(np.arange(40) == 1, 0.5, 1.0)
        )
    with pytest.raises(ValueError, match=r"labels of shape \(40,\) or \(40, 1\).*loss='mse'"):
        sa.TRAK(one_output[0], one_output[1], task="regression", proj_dim=8).fit(
            X, np.zeros((40, 2))
        )
    trak = sa.TRAK(model, states, proj_dim=8).fit(X, y)
    with pytest.raises(ValueError, match=r"'y_test'.*one label per sequence"):
        trak.scores(X[:3], None)


def test_identical_and_changed_checkpoints(model, states, train_set):
    with pytest.raises(ValueError, match=r"checkpoints 0 and 1, which load identical weights"):
        sa.TRAK(model, [states[0], states[0]], proj_dim=8).fit(*train_set)
    live = {k: v.clone() for k, v in states[1].items()}
    trak = sa.TRAK(model, [states[0], live], proj_dim=8).fit(*train_set)
    live["dense.bias"] += 1.0
    with pytest.raises(ValueError, match=r"checkpoint 1.*now loads other weights.*fit\(\) again"):
        trak.scores(*train_set)


def test_failure_half_way_restores_the_model(model, states, train_set):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    broken = dict(states[1])
    broken["conv1.weight"] = broken["conv1.weight"][:, :, :2]
    with pytest.raises(ValueError, match=r"'conv1.weight' has shape"):
        sa.TRAK(model, [states[0], broken], proj_dim=8).fit(*train_set)
    assert model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_use_before_fit_and_bad_k(model, states, train_set):
    trak = sa.TRAK(model, states, proj_dim=8)
    with pytest.raises(RuntimeError, match=r"TRAK.scores needs the training set first"):
        trak.scores(*train_set)
    trak.fit(*train_set)
    with pytest.raises(ValueError, match=r"'k' parameter of TRAK.top_k.*\[1, 40\]"):
        trak.top_k(*train_set, 41)
    with pytest.raises(TypeError, match=r"'proponents'"):
        trak.top_k(*train_set, 1, proponents="yes")


def test_exact_needs_a_small_model(train_set):
    big = models.convnet_weights(n_outputs=3, filters=80)
    model = models.torch_model("convnet", big, "NLC")
    with pytest.raises(ValueError, match=r"'proj_dim'.*more than 16384.*Got None.*proj_dim=2048"):
        sa.TRAK(model, [torch_state("convnet", big)], proj_dim=None).fit(*train_set)


def test_bad_cache_paths(tmp_path, model, states, train_set):
    with pytest.raises(TypeError, match=r"'cache' parameter of TRAK.fit.*None or a file path"):
        sa.TRAK(model, states, proj_dim=8).fit(*train_set, cache=3)
    with pytest.raises(ValueError, match=r"'cache'.*a file path.*a directory"):
        sa.TRAK(model, states, proj_dim=8).fit(*train_set, cache=tmp_path)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a numpy file")
    with pytest.raises(ValueError, match=r"'cache'.*junk.npz', which is not such a file"):
        sa.TRAK(model, states, proj_dim=8).fit(*train_set, cache=junk)
    other = tmp_path / "other.npz"
    np.savez(other, something=np.zeros(3))
    with pytest.raises(ValueError, match=r"'cache'.*other.npz', which is not such a file.*Delete"):
        sa.TRAK(model, states, proj_dim=8).fit(*train_set, cache=other)
