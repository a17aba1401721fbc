"""What TracIn scores mean, on small models trained here (a few seconds on a CPU).

- A model that can only memorise (labels carry no signal) relies on each training example
  itself, so a test example's exact duplicate in the training set is its top proponent, and
  the duplicate with the flipped label its strongest opponent. (On a task the model generalises,
  same-class examples share nearly the same gradient direction and TracIn favours the ones with
  the largest loss, so a duplicate need not rank first there: a known property of TracIn.)
- Deliberately mislabelled training examples get high self-influence (AUC reported).
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


@pytest.fixture(scope="module")
def memorised():
    X, y = motif_data(N_TRAIN + N_TEST, LENGTH, seed=2, p_motif=(0.5, 0.5))
    model, states = train(X[:N_TRAIN], y[:N_TRAIN], epochs=4)
    return model, states, (X[:N_TRAIN], y[:N_TRAIN]), (X[N_TRAIN:], y[N_TRAIN:])


def test_exact_duplicate_is_the_top_proponent(memorised):
    """(Memorisation happens in the convolution, so the last layer alone does not show it.)"""
    model, states, (X, y), (Xt, yt) = memorised
    tracin = sa.TracIn(model, states, learning_rates=0.1)
    tracin.fit(np.concatenate([X, Xt]), np.concatenate([y, yt]))
    indices, scores = tracin.top_k(Xt, yt, 1)
    np.testing.assert_array_equal(indices[:, 0], N_TRAIN + np.arange(N_TEST))
    assert (scores > 0).all()


def test_flipped_duplicate_is_the_strongest_opponent(memorised):
    model, states, (X, y), (Xt, yt) = memorised
    tracin = sa.TracIn(model, states, learning_rates=0.1)
    tracin.fit(np.concatenate([X, Xt]), np.concatenate([y, 1 - yt]))
    indices, scores = tracin.top_k(Xt, yt, 1, proponents=False)
    np.testing.assert_array_equal(indices[:, 0], N_TRAIN + np.arange(N_TEST))
    assert (scores < 0).all()


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Probability that a positive outranks a negative (ties count half)."""
    pos, neg = scores[positive][:, None], scores[~positive][None, :]
    return float((pos > neg).mean() + 0.5 * (pos == neg).mean())


@pytest.mark.parametrize("layer", [None, "last"])
def test_self_influence_flags_mislabelled_examples(layer, record_property):
    X, y = motif_data(N_TRAIN, LENGTH, seed=2)  # class 1 carries the motif: learnable
    rng = np.random.default_rng(2)
    flipped = np.zeros(N_TRAIN, bool)
    flipped[rng.choice(N_TRAIN, N_TRAIN // 10, replace=False)] = True
    noisy = np.where(flipped, 1 - y, y)
    model, states = train(X, noisy, epochs=6)
    tracin = sa.TracIn(model, states[1::2], learning_rates=0.1, layer=layer).fit(X, noisy)
    auc = _auc(tracin.self_influence(), flipped)
    record_property("self_influence_auc", auc)
    print(f"self-influence AUC for mislabelled examples (layer={layer}): {auc:.3f}")
    assert auc >= 0.8
