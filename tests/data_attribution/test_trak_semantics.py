"""What TRAK scores mean, on small models trained here (about a second on a CPU).

An exact duplicate of a test example in the training set is its top proponent, and the
duplicate with the flipped label its strongest opponent: on a task the model can only memorise
(labels carry no signal) and on one it learns (class 1 carries a motif). Unlike TracIn, whose
dot products favour high-loss examples of the same class on a learnable task, TRAK's kernel
``(Phi^T Phi + lambda I)^-1`` discounts directions that many training examples share.
"""

from __future__ import annotations

import numpy as np
import pytest
from tracin_models import motif_data, one_torch_thread, train

import seqattrib as sa


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


N_TRAIN, N_TEST, LENGTH = 200, 10, 30
TASKS = {"memorised": (0.5, 0.5), "learnable": (0.0, 1.0)}


@pytest.fixture(scope="module", params=sorted(TASKS))
def trained(request):
    X, y = motif_data(N_TRAIN + N_TEST, LENGTH, seed=2, p_motif=TASKS[request.param])
    model, states = train(X[:N_TRAIN], y[:N_TRAIN], epochs=4)
    return model, states, (X[:N_TRAIN], y[:N_TRAIN]), (X[N_TRAIN:], y[N_TRAIN:])


def test_exact_duplicate_is_the_top_proponent(trained):
    model, states, (X, y), (Xt, yt) = trained
    trak = sa.TRAK(model, states, proj_dim=64)
    trak.fit(np.concatenate([X, Xt]), np.concatenate([y, yt]))
    indices, scores = trak.top_k(Xt, yt, 1)
    np.testing.assert_array_equal(indices[:, 0], N_TRAIN + np.arange(N_TEST))
    assert (scores > 0).all()


def test_flipped_duplicate_is_the_strongest_opponent(trained):
    model, states, (X, y), (Xt, yt) = trained
    trak = sa.TRAK(model, states, proj_dim=64)
    trak.fit(np.concatenate([X, Xt]), np.concatenate([y, 1 - yt]))
    indices, scores = trak.top_k(Xt, yt, 1, proponents=False)
    np.testing.assert_array_equal(indices[:, 0], N_TRAIN + np.arange(N_TEST))
    assert (scores < 0).all()
