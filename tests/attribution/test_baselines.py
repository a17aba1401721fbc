"""Baselines: exact dinucleotide counts, content seeding, arrays and callables."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import CLOSED_FORM, FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.attribution.baselines import dinucleotide_shuffle, sequence_rng, shuffle
from seqattrib.attribution.baselines import random_one_hot as draw_random


def _dinucleotides(seq: str) -> Counter:
    return Counter(seq[i : i + 2] for i in range(len(seq) - 1))


@pytest.mark.parametrize("seed", range(8))
def test_dinucleotide_shuffle_keeps_every_dinucleotide_count(seed):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(3, 300))
    alphabet = list("ACGT") if seed % 2 else list("AACGTN")  # with N and a skewed composition
    seq = "".join(rng.choice(alphabet, length))
    x = sa.one_hot(seq)[0]
    shuffles = dinucleotide_shuffle(x, 20, np.random.default_rng(seed))
    assert shuffles.shape == (20, length, 4) and shuffles.dtype == np.float32
    decoded = sa.decode(shuffles)
    for s in decoded:
        assert _dinucleotides(s) == _dinucleotides(seq)
        assert s[0] == seq[0] and s[-1] == seq[-1]
    if length > 20:
        assert len(set(decoded)) > 1, "shuffles of a long sequence should differ"


def test_dinucleotide_shuffle_of_short_and_soft_sequences():
    x = sa.one_hot("AC")[0]
    np.testing.assert_array_equal(dinucleotide_shuffle(x, 3, np.random.default_rng(0)), [x] * 3)
    soft = np.full((10, 4), 0.25, np.float32)
    soft[::3] = np.eye(4, dtype=np.float32)[1]
    out = dinucleotide_shuffle(soft, 4, np.random.default_rng(0))
    assert sorted(map(tuple, out[0])) == sorted(map(tuple, soft))


def test_mononucleotide_and_random_baselines():
    x = sa.one_hot("ACGTTTGGCAN" * 5)[0]
    shuffled = shuffle(x, 6, np.random.default_rng(1))
    np.testing.assert_array_equal(shuffled.sum(axis=1), np.repeat(x.sum(0)[None], 6, axis=0))
    drawn = draw_random(x, 6, np.random.default_rng(1))
    np.testing.assert_array_equal(drawn.sum(axis=-1), np.ones((6, len(x))))


def test_sequence_rng_depends_on_content_and_seed_only():
    a, b = sa.one_hot(["ACGTACGTAA", "ACGTACGTAC"])
    draw = lambda seed, x: sequence_rng(seed, x).integers(0, 2**32, 4)  # noqa: E731
    np.testing.assert_array_equal(draw(0, a), draw(0, a.copy()))
    assert not np.array_equal(draw(0, a), draw(0, b))
    assert not np.array_equal(draw(0, a), draw(1, a))


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_duplicate_sequences_get_identical_attributions(framework, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=2)
    X = np.concatenate([X, X[:1]])
    eig = sa.expected_integrated_gradients(model, X, n_baselines=4, n_steps=3, batch_size=5)
    assert_close(eig[3], eig[0], 1e-6)


def test_callable_baselines_receive_the_sequence_and_a_seeded_rng(linear_weights):
    model = make_model("torch", "linear", linear_weights, "NCL")
    X = random_one_hot(3, LENGTH, seed=3, layout="NCL")
    seen = []

    def half(x, n, rng):
        seen.append((x.shape, n, isinstance(rng, np.random.Generator)))
        return np.repeat(x[None] * 0.5, n, axis=0)

    eig = sa.expected_integrated_gradients(model, X, baselines=half, n_baselines=2, n_steps=2)
    assert seen == [((4, LENGTH), 2, True)] * 3
    w = linear_weights["w"][:, :, 0].T
    assert_close(eig, 0.5 * X * w, CLOSED_FORM)


def test_constant_baselines_collapse_to_one(linear_weights):
    """EIG over identical baselines is IG: one path per sequence, same answer."""
    model = make_model("torch", "linear", linear_weights, "NLC")
    X = random_one_hot(2, LENGTH, seed=4)
    eig = sa.expected_integrated_gradients(
        model, X, baselines="uniform", n_baselines=50, n_steps=4, batch_size=1000
    )
    assert_close(
        eig, sa.integrated_gradients(model, X, baselines="uniform", n_steps=4), CLOSED_FORM
    )


# ------------------------------------------------------------- arrays carry their own count
def test_deep_lift_shap_takes_the_count_of_an_array_of_references(conv_weights):
    """(N, 8, L, 4) references without n_baselines: DeepSHAP is the mean over the 8 of
    DeepLIFT with each reference alone."""
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=21)
    refs = np.stack([random_one_hot(8, LENGTH, seed=30 + i) for i in range(3)])
    shap = sa.deep_lift_shap(model, X, baselines=refs, target=1)
    alone = [sa.deep_lift_shap(model, X, baselines=refs[:, j : j + 1], target=1) for j in range(8)]
    assert_close(shap, np.mean(alone, axis=0), FLOAT32)


def test_eig_takes_the_count_of_a_shared_array_of_baselines(conv_weights):
    """(5, L, 4) baselines without n_baselines: EIG is the mean of IG from each of them, with
    EIG's rule."""
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=22)
    refs = random_one_hot(5, LENGTH, seed=23)
    eig = sa.expected_integrated_gradients(model, X, baselines=refs)
    ig = [
        sa.integrated_gradients(model, X, baselines=b, n_steps=3, quadrature="gausslegendre")
        for b in refs
    ]
    assert_close(eig, np.mean(ig, axis=0), FLOAT32)


@pytest.mark.parametrize("func", [sa.deep_lift_shap, sa.expected_integrated_gradients])
def test_an_explicit_count_that_contradicts_the_array_is_refused(conv_weights, func):
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(2, LENGTH, seed=24)
    refs = np.stack([random_one_hot(8, LENGTH, seed=40 + i) for i in range(2)])
    with pytest.raises(ValueError, match=r"'n_baselines' parameter .* must be 8, .*Got 20 .*Drop"):
        func(model, X, baselines=refs, n_baselines=20)
    np.testing.assert_array_equal(
        func(model, X, baselines=refs, n_baselines=8), func(model, X, baselines=refs)
    )


# ------------------------------------------------------- callables in resumable out= files
class _Stopped(Exception):
    pass


def _eig_file(model, X, path, baselines, stop_after=None, monkeypatch=None):
    """EIG with callable baselines into ``path`` in blocks of 3 sequences; with
    ``stop_after``, the run stops after that many blocks (the file a killed run leaves)."""
    if stop_after is not None:
        from seqattrib.io import tracks

        written = []
        write = tracks.TrackWriter.write

        def stopping(self, start, block):
            if len(written) == stop_after:
                raise _Stopped
            written.append(start)
            write(self, start, block)

        monkeypatch.setattr(tracks.TrackWriter, "write", stopping)
        with pytest.raises(_Stopped):
            _eig_file(model, X, path, baselines)
        monkeypatch.setattr(tracks.TrackWriter, "write", write)
        return None
    return sa.expected_integrated_gradients(
        model, X, baselines=baselines, n_baselines=2, n_steps=2, max_cpu_sequences=3, out=path
    )


def _constant(value):
    settings = {"value": value}  # a closure value no code fingerprint reads: the output tells

    def background(x, n, rng):
        return np.full((n, *x.shape), settings["value"], np.float32)

    return background


@pytest.fixture
def eig_model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def test_another_lambda_does_not_reuse_a_finished_file(eig_model, tmp_path):
    X = random_one_hot(9, LENGTH, seed=50)
    path = _eig_file(
        eig_model, X, tmp_path / "t.h5", lambda x, n, rng: np.full((n, *x.shape), 0.25)
    )
    assert _eig_file(eig_model, X, path, lambda x, n, rng: np.full((n, *x.shape), 0.25)) == path
    with pytest.raises(ValueError, match=r"'out' parameter .*written with baselines="):
        _eig_file(eig_model, X, path, lambda x, n, rng: np.full((n, *x.shape), 0.1))


def test_a_closure_with_other_values_does_not_resume_a_partial_file(
    eig_model, tmp_path, monkeypatch
):
    X = random_one_hot(9, LENGTH, seed=51)
    path = tmp_path / "t.h5"
    _eig_file(eig_model, X, path, _constant(0.25), stop_after=1, monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match=r"written with baselines="):
        _eig_file(eig_model, X, path, _constant(0.1))
    # the same function with the same values resumes, and the file holds one run's rows
    _eig_file(eig_model, X, path, _constant(0.25))
    whole = sa.expected_integrated_gradients(
        eig_model, X, baselines=_constant(0.25), n_baselines=2, n_steps=2
    )
    np.testing.assert_array_equal(sa.io.read_tracks(path).attributions, whole)


def test_an_edited_baseline_function_does_not_reuse_a_file(eig_model, tmp_path):
    """The same module and name, another body (as after editing a script between runs)."""
    X = random_one_hot(9, LENGTH, seed=52)

    def before(x, n, rng):
        return np.full((n, *x.shape), 0.25, np.float32)

    def after(x, n, rng):
        return np.repeat(x[None] * 0.5, n, axis=0)

    after.__qualname__ = before.__qualname__ = "background"
    path = _eig_file(eig_model, X, tmp_path / "t.h5", before)
    with pytest.raises(ValueError, match=r"written with baselines="):
        _eig_file(eig_model, X, path, after)
