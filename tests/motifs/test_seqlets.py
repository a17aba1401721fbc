"""Seqlets: the recursive-seqlet calls against tangermeme's own, negative seqlets, the same
seqlets from a tracks file at any block size, the control false-discovery rate on cases with a
known answer, and one-line errors for bad input."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from models import convnet_weights, random_one_hot, torch_model

import seqattrib as sa
from seqattrib.io import read_tracks
from seqattrib.motifs import Seqlets, iter_seqlets, seqlets


def _tracks(kind: str, n: int = 40, length: int = 200, seed: int = 0) -> np.ndarray:
    """(n, length) float32 projected tracks: heavy-tailed noise correlated along the sequence
    (as contributions are), or noise with planted bumps of both signs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=0.1, size=(n, length)).astype(np.float32)
    if kind == "random":
        noise = rng.standard_t(3, size=(n, length + 4))
        X = (0.05 * sum(noise[:, s : s + length] for s in range(5))).astype(np.float32)
    if kind == "planted":
        for i in range(n):
            for bump in range(4):
                width = int(rng.integers(5, 14))
                start = int(rng.integers(0, length - width))
                height = rng.uniform(0.3, 1.0) * (-1 if bump == 3 else 1)
                X[i, start : start + width] += np.float32(height)
    return X


def _keys(calls) -> dict[tuple[int, int, int], float]:
    """{(example, start, end): p-value} of our Seqlets or of tangermeme's frame."""
    if isinstance(calls, Seqlets):
        columns = [calls.example, calls.start, calls.end, calls.p_value]
    else:
        columns = [calls[name].to_numpy() for name in ("example_idx", "start", "end", "p-value")]
    return {(int(e), int(s), int(t)): float(p) for e, s, t, p in zip(*columns, strict=True)}


def _assert_agree(ours: dict, theirs: dict) -> None:
    """>= 0.95 of all calls in both, and the common calls' p-values within 1e-6 relative."""
    both = ours.keys() & theirs.keys()
    assert theirs, "the case must have seqlets"
    assert len(both) >= 0.95 * len(ours.keys() | theirs.keys())
    for key in both:
        assert abs(ours[key] - theirs[key]) <= 1e-6 * theirs[key]


SETTINGS = [
    dict(threshold=0.01, min_length=4, max_length=25, flank=0),
    dict(threshold=1e-3, min_length=6, max_length=20, flank=3),
    dict(threshold=1e-4, min_length=4, max_length=30, flank=5),
]


@pytest.fixture(scope="module")
def recursive_seqlets():
    """tangermeme's caller (compiled by numba on its first call)."""
    return pytest.importorskip("tangermeme.seqlet").recursive_seqlets


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "planted"])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"t{s['threshold']}")
def test_seqlets_equal_tangermeme(recursive_seqlets, kind, setting):
    X = _tracks(kind)
    ours = seqlets(X, sign="positive", **setting)
    theirs = recursive_seqlets(
        X,
        threshold=setting["threshold"],
        min_seqlet_len=setting["min_length"],
        max_seqlet_len=setting["max_length"],
        additional_flanks=setting["flank"],
    )
    _assert_agree(_keys(ours), _keys(theirs))
    assert (ours.sign == 1).all() and np.isnan(ours.fdr).all()
    # the attribution is the sum over the span, flanks included
    expected = [X[i, s:e].astype(np.float64).sum() for i, s, e in _keys(ours)]
    np.testing.assert_allclose(ours.attribution, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_negative_seqlets_are_the_method_on_negated_tracks(recursive_seqlets):
    X = _tracks("planted", seed=3)
    both = seqlets(X, threshold=1e-3, min_length=5, max_length=20)
    negative = both.take(both.sign == -1)
    assert len(negative) > 0 and len(both.take(both.sign == 1)) > 0
    theirs = recursive_seqlets(-X, threshold=1e-3, min_seqlet_len=5, max_seqlet_len=20)
    _assert_agree(_keys(negative), _keys(theirs))
    assert (negative.attribution < 0).all()
    only = seqlets(X, threshold=1e-3, min_length=5, max_length=20, sign="negative")
    np.testing.assert_array_equal(only.start, negative.start)
    np.testing.assert_array_equal(only.example, negative.example)


def test_projection_of_hypothetical_and_projected_tracks():
    rng = np.random.default_rng(5)
    X = _tracks("planted", n=12, seed=5)
    one_hot = random_one_hot(12, 200, seed=5)
    hypothetical = rng.normal(size=(12, 200, 4)).astype(np.float32)
    hypothetical[one_hot == 1] = X.ravel()
    expected = seqlets(X, threshold=1e-3)
    for calls in (
        seqlets(hypothetical, one_hot, threshold=1e-3),
        seqlets(hypothetical * one_hot, threshold=1e-3),
    ):
        for name in ("example", "start", "end", "sign", "p_value"):
            np.testing.assert_array_equal(getattr(calls, name), getattr(expected, name))


def _brute_fdr(calls: Seqlets, control_rows: int, n_rows: int) -> np.ndarray:
    """The control FDR when the controls are the first ``control_rows`` rows of the tracks
    (their seqlets are the tracks' seqlets in those rows), by direct counting."""
    fdr = np.empty(len(calls))
    for a in range(len(calls)):
        same = calls.sign == calls.sign[a]
        rates = []
        for b in np.nonzero(same & (calls.p_value >= calls.p_value[a]))[0]:
            p = calls.p_value[b]
            real = np.sum(same & (calls.p_value <= p))
            control = np.sum(same & (calls.p_value <= p) & (calls.example < control_rows))
            rates.append(control * (n_rows / control_rows) / real)
        fdr[a] = min(min(rates), 1.0)
    return fdr


def test_control_fdr_known_answers():
    X = _tracks("planted", n=30, seed=7)
    plain = seqlets(X, threshold=1e-3)
    same = seqlets(X, threshold=1e-3, controls=X)
    np.testing.assert_array_equal(same.start, plain.start)
    np.testing.assert_allclose(same.fdr, 1.0, rtol=1e-12)
    twice = seqlets(X, threshold=1e-3, controls=np.concatenate([X, X]))
    np.testing.assert_allclose(twice.fdr, 1.0, rtol=1e-12)
    zeros = seqlets(X, threshold=1e-3, controls=np.zeros((10, 150), np.float32))
    np.testing.assert_array_equal(zeros.fdr, 0.0)
    subset = seqlets(X, threshold=1e-3, controls=X[:10])
    np.testing.assert_allclose(subset.fdr, _brute_fdr(plain, 10, 30), rtol=1e-12)
    assert len(np.unique(subset.fdr)) > 3 and subset.fdr.max() <= 1
    kept = seqlets(X, threshold=1e-3, controls=X[:10], max_fdr=0.5)
    np.testing.assert_array_equal(kept.start, subset.start[subset.fdr <= 0.5])
    assert 0 < len(kept) < len(subset)


@pytest.fixture(scope="module")
def tracks_file(tmp_path_factory):
    """A tracks file of two targets (NCL, hypothetical gradients) of a toy convnet."""
    model = torch_model("convnet", convnet_weights(n_outputs=3), "NCL")
    X = random_one_hot(23, 120, seed=11, layout="NCL")
    path = tmp_path_factory.mktemp("seqlets") / "tracks.h5"
    sa.saliency(model, X, target=[0, 2], out=path)
    return path


def test_iter_seqlets_equals_seqlets_at_any_block_size(tracks_file):
    tracks = read_tracks(tracks_file)
    one_hot = tracks.sequences.transpose(0, 2, 1)
    settings = dict(threshold=0.01, min_length=4, max_length=20, flank=2)
    for k, target in enumerate([0, 2]):
        whole = seqlets(tracks.attributions[:, k].transpose(0, 2, 1), one_hot, **settings)
        assert len(whole) > 10
        for block_size in (1, 5, 23, 100):
            blocks = list(
                iter_seqlets(tracks_file, target=target, block_size=block_size, **settings)
            )
            assert len(blocks) == -(-23 // block_size)
            calls = Seqlets.concat(blocks)
            assert (calls.target == target).all()
            for name in ("example", "start", "end", "sign", "attribution", "p_value"):
                np.testing.assert_array_equal(getattr(calls, name), getattr(whole, name))
    both = Seqlets.concat(list(iter_seqlets(tracks_file, block_size=4, **settings)))
    assert set(both.target.tolist()) == {0, 2}
    # with the file itself as its controls, every seqlet is as likely as a control one
    with_controls = Seqlets.concat(
        list(iter_seqlets(tracks_file, block_size=4, controls=tracks_file, **settings))
    )
    assert len(with_controls) == len(both)
    np.testing.assert_allclose(with_controls.fdr, 1.0, rtol=1e-12)


def _one_line(excinfo, *words: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ((np.zeros((3, 50, 3)),), {}, ["'attributions'", "(N, L, 4)"]),
        ((np.zeros((0, 50)),), {}, ["'attributions'", "non-empty"]),
        ((np.full((3, 50), np.nan),), {}, ["'attributions'", "finite"]),
        ((np.ones((3, 50, 4)),), {}, ["'one_hot'", "hypothetical"]),
        ((np.ones((3, 50, 4)), np.ones((3, 40, 4))), {}, ["'one_hot'"]),
        ((np.ones((3, 50)),), {"min_length": 8, "max_length": 6}, ["'max_length'"]),
        ((np.ones((3, 50)),), {"max_length": 60}, ["max_length=60", "length 50"]),
        ((np.ones((3, 50)),), {"threshold": 0.0}, ["'threshold'"]),
        ((np.ones((3, 50)),), {"threshold": 1.5}, ["'threshold'"]),
        ((np.ones((3, 50)),), {"sign": "up"}, ["'sign'"]),
        ((np.ones((3, 50)),), {"flank": -1}, ["'flank'"]),
        ((np.ones((3, 50)),), {"max_fdr": 0.1}, ["'max_fdr'", "controls="]),
        ((np.ones((3, 50)),), {"controls": np.ones((3, 10))}, ["'controls'"]),
    ],
)
def test_bad_input_is_a_one_line_error(args, kwargs, words):
    with pytest.raises((ValueError, TypeError)) as excinfo:
        seqlets(*args, **kwargs)
    _one_line(excinfo, *words)


def test_bad_tracks_file_is_a_one_line_error(tracks_file, tmp_path):
    with pytest.raises(ValueError) as excinfo:
        list(iter_seqlets(tracks_file, target=1))
    _one_line(excinfo, "'target'", "[0, 2]")
    with pytest.raises(ValueError) as excinfo:
        list(iter_seqlets(tracks_file, target=1.5))
    _one_line(excinfo, "'target'")
    model = torch_model("convnet", convnet_weights(n_outputs=3), "NCL")
    controls = tmp_path / "controls.h5"
    sa.saliency(model, random_one_hot(5, 120, seed=2, layout="NCL"), target=[0], out=controls)
    with pytest.raises(ValueError) as excinfo:
        list(iter_seqlets(tracks_file, controls=controls))
    _one_line(excinfo, "'controls'", "[0, 2]")
    assert len(Seqlets.concat(list(iter_seqlets(tracks_file, target=0, controls=controls))))
    broken = tmp_path / "nan.h5"
    broken.write_bytes(tracks_file.read_bytes())
    with h5py.File(broken, "r+") as f:
        f["attributions"][4, 1, 2, 30] = np.nan
    with pytest.raises(ValueError) as excinfo:
        list(iter_seqlets(broken, block_size=3))
    _one_line(excinfo, "row 4", "finite")


def test_constant_tracks_have_no_seqlets():
    calls = seqlets(np.ones((4, 60), np.float32))
    assert len(calls) == 0 and calls.to_frame().shape == (0, 8)
