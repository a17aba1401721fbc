"""Standard errors of EIG (``return_stderr``) and EIG to a tolerance (``tolerance``).

The standard error is checked against its definition: the spread of EIG over random seeds.
"""

from __future__ import annotations

import h5py
import models
import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close

import seqattrib as sa

POINTS = 3  # n_steps=3 Gauss-Legendre points per path (the default rule)


@pytest.fixture(scope="module")
def conv(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def eig(model, X, **kwargs):
    settings = dict(target=[0, 2], n_baselines=6, n_steps=3, batch_size=6 * POINTS)
    return sa.expected_integrated_gradients(model, X, **(settings | kwargs))


def test_stderr_matches_the_spread_over_seeds(conv):
    """Over 60 seeds, the standard deviation of the estimates is what the standard error
    predicts (root mean square over every attribution, within 10 %)."""
    X = models.random_one_hot(3, LENGTH, seed=4)
    runs = [eig(conv, X, random_state=seed, return_stderr=True) for seed in range(60)]
    estimates = np.stack([attributions for attributions, _ in runs])
    predicted = np.stack([stderr for _, stderr in runs])
    spread = estimates.std(axis=0, ddof=1)
    ratio = np.sqrt((spread**2).mean() / (predicted**2).mean())
    assert 0.9 < ratio < 1.1, ratio


def test_stderr_leaves_the_attributions_unchanged(conv):
    X = models.random_one_hot(4, LENGTH, seed=5)
    plain = eig(conv, X)
    attributions, stderr = eig(conv, X, return_stderr=True)
    np.testing.assert_array_equal(attributions, plain)  # batches hold whole paths either way
    assert stderr.shape == plain.shape and (stderr > 0).mean() > 0.5


def test_stderr_is_zero_for_a_fixed_baseline(conv):
    X = models.random_one_hot(3, LENGTH, seed=6)
    _, stderr = sa.integrated_gradients(conv, X, n_steps=4, return_stderr=True)
    np.testing.assert_array_equal(stderr, 0.0)
    _, stderr = sa.expected_integrated_gradients(
        conv, X, baselines="uniform", n_steps=4, return_stderr=True
    )
    np.testing.assert_array_equal(stderr, 0.0)


def test_stderr_with_one_random_baseline_is_refused(conv):
    X = models.random_one_hot(2, LENGTH, seed=6)
    with pytest.raises(ValueError, match="at least two baselines"):
        sa.integrated_gradients(conv, X, baselines="shuffle", return_stderr=True)


def test_stderr_is_stored_with_the_tracks(conv, tmp_path):
    X = models.random_one_hot(5, LENGTH, seed=7)
    attributions, delta, stderr = eig(conv, X, return_delta=True, return_stderr=True)
    path = eig(conv, X, return_delta=True, return_stderr=True, out=tmp_path / "t.h5")
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["stderr"][:], stderr)
        np.testing.assert_array_equal(f["attributions"][:], attributions)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_stderr_agrees_across_frameworks(framework, conv_weights):
    X = models.random_one_hot(3, LENGTH, seed=8)
    torch_model = make_model("torch", "convnet", conv_weights, "NLC")
    other = make_model(framework, "convnet", conv_weights, "NLC")
    _, reference = eig(torch_model, X, return_stderr=True)
    _, stderr = eig(other, X, return_stderr=True)
    assert_close(stderr, reference, 1e-4)


# --------------------------------------------------------------------------- tolerance
def test_every_sequence_meets_its_tolerance_or_uses_every_baseline(conv):
    X = models.random_one_hot(8, LENGTH, seed=9)
    attributions, stderr, used = eig(conv, X, return_stderr=True, tolerance=0.3, max_baselines=48)
    rse = sa.relative_standard_error(attributions, stderr)
    assert set(used.tolist()) <= {6, 12, 24, 48}
    met = (rse <= 0.3).all(axis=1)
    assert (met | (used == 48)).all()
    assert len(set(used.tolist())) > 1  # easy sequences stopped earlier than hard ones
    # a sequence that stopped at c baselines was above the tolerance at c / 2
    for i in np.flatnonzero(used > 6):
        a, s = eig(
            conv, X[i : i + 1], return_stderr=True, tolerance=0.3, max_baselines=used[i] // 2
        )[:2]
        assert (sa.relative_standard_error(a, s) > 0.3).any()


def test_a_tolerance_met_at_once_is_a_plain_run(conv):
    X = models.random_one_hot(4, LENGTH, seed=10)
    plain, plain_stderr = eig(conv, X, return_stderr=True)
    attributions, stderr, used = eig(conv, X, return_stderr=True, tolerance=10.0)
    np.testing.assert_array_equal(used, 6)
    np.testing.assert_array_equal(attributions, plain)
    assert_close(stderr, plain_stderr, FLOAT32)


@pytest.mark.parametrize("batch_size", [6 * POINTS, 3 * POINTS])
def test_tolerance_results_do_not_depend_on_the_other_sequences(conv, batch_size):
    X = models.random_one_hot(6, LENGTH, seed=11)
    kwargs = dict(tolerance=0.45, max_baselines=24, batch_size=batch_size, return_stderr=True)
    full = eig(conv, X, **kwargs)
    order = np.array([4, 1, 5])
    part = eig(conv, X[order], **kwargs)
    shard = eig(conv, X, shard=(1, 2), **kwargs)
    for whole, subset in zip(full, part, strict=True):
        np.testing.assert_array_equal(subset, whole[order])
    for whole, piece in zip(full, shard, strict=True):
        np.testing.assert_array_equal(piece, whole[3:])


def test_tolerance_needs_random_baselines(conv):
    X = models.random_one_hot(2, LENGTH, seed=12)
    with pytest.raises(ValueError, match="'tolerance'"):
        eig(conv, X, baselines="zeros", tolerance=0.1)
    with pytest.raises(ValueError, match="'max_baselines'"):
        eig(conv, X, tolerance=0.1, max_baselines=3)


def test_one_baseline_is_never_enough_to_stop(conv):
    """With n_baselines=1 the first round has no spread: every sequence goes on to at least 2
    baselines, and each stops only once its own standard error meets the tolerance."""
    X = models.random_one_hot(5, LENGTH, seed=13)
    attributions, stderr, used = eig(
        conv, X, n_baselines=1, batch_size=POINTS, return_stderr=True, tolerance=0.4
    )
    assert (used >= 2).all()
    met = (sa.relative_standard_error(attributions, stderr) <= 0.4).all(axis=1)
    assert (met | (used == 400)).all()


def test_a_tolerance_not_reached_warns_how_many_sequences(conv):
    X = models.random_one_hot(5, LENGTH, seed=14)
    with pytest.warns(sa.SeqAttribWarning, match=r"5 of 5 sequences .*max_baselines=4"):
        _, used = eig(conv, X, n_baselines=1, tolerance=1e-6, max_baselines=4)
    np.testing.assert_array_equal(used, 4)


def test_a_tolerance_needs_room_for_two_baselines(conv):
    X = models.random_one_hot(2, LENGTH, seed=12)
    with pytest.raises(ValueError, match=r"'max_baselines'.*at least 2"):
        eig(conv, X, n_baselines=1, tolerance=0.1, max_baselines=1)
