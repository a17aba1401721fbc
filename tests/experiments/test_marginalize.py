"""marginalize against tangermeme 1.6 and the demo model's planted motifs, and the contract:
batch size, subsets, shards, K targets, layouts and frameworks, out= files, func=, bad input."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from helpers import CLOSED_FORM, CROSS_FRAMEWORK, assert_close
from tangermeme.ersatz import substitute
from tangermeme.marginalize import marginalize as tangermeme_marginalize

import seqattrib as sa
from seqattrib import demo
from seqattrib.attribution.baselines import dinucleotide_shuffle, sequence_rng
from seqattrib.experiments import edits, read_meme
from seqattrib.io import read_tracks

GATA, EBOX, CTCF = "CTTATCT", "CACCTG", "CCACCAGGGGGC"  # JASPAR consensus of the demo motifs


@pytest.fixture(scope="module")
def model():
    return demo.torch_model()


@pytest.fixture(scope="module")
def X():
    """Held-out demo sequences, (12, 4, 200)."""
    data = demo.load_data()
    return sa.one_hot(data["sequences"][demo.N_TRAIN : demo.N_TRAIN + 12], layout="NCL")


def _tangermeme(model, X, motif, start):
    before, after = tangermeme_marginalize(model, torch.from_numpy(X), motif, start=start,
                                           device="cpu", batch_size=5)  # fmt: skip
    return before.numpy(), after.numpy()


@pytest.mark.parametrize("position", [None, 0, 37, 193])
def test_marginalize_equals_tangermeme(model, X, position):
    before, after = sa.marginalize(model, X, GATA, position=position, target=None)
    want_before, want_after = _tangermeme(model, X, GATA, position)
    assert_close(before, want_before, CLOSED_FORM)
    assert_close(after, want_after, CLOSED_FORM)
    assert np.abs(after - before).max() > 0.1  # the insertion changed the outputs


def test_n_in_a_motif_keeps_the_background_and_a_one_hot_motif_is_the_same(model, X):
    motif = "CTNATCT"
    want = _tangermeme(model, X, motif, 60)
    one_hot = edits.as_motif(motif, "test").T  # (4, 7) with an all-zero column
    for given in (motif, one_hot, one_hot[None]):
        before, after = sa.marginalize(model, X, given, position=60, target=None)
        assert_close(before, want[0], CLOSED_FORM)
        assert_close(after, want[1], CLOSED_FORM)


def test_a_pwm_and_its_meme_file_insert_their_consensus(model, X, tmp_path):
    rng = np.random.default_rng(0)
    consensus = edits.as_motif(GATA, "test")
    pwm = 0.1 * rng.random((7, 4)) + consensus  # the highest entry is the consensus base
    pwm /= pwm.sum(axis=1, keepdims=True)
    path = tmp_path / "motifs.meme"
    rows = "\n".join(" ".join(f"{v:.6f}" for v in row) for row in pwm)
    path.write_text(
        "MEME version 4\n\nALPHABET= ACGT\n\nstrands: + -\n\n"
        f"MOTIF ebox_like E\nletter-probability matrix: alength= 4 w= 2 nsites= 1 E= 0\n"
        " 0.1 0.7 0.1 0.1\n 0.7 0.1 0.1 0.1\nURL x\n\n"
        f"MOTIF gata_like GATA\nletter-probability matrix: alength= 4 w= 7 nsites= 1 E= 0\n"
        f"{rows}\nURL x\n"
    )
    motifs = read_meme(path)
    assert list(motifs) == ["ebox_like", "gata_like"] and motifs["ebox_like"].shape == (2, 4)
    assert_close(motifs["gata_like"], pwm, CLOSED_FORM)
    want = _tangermeme(model, X, GATA, 20)
    for given in (pwm, pwm.T, np.log(pwm / 0.25), motifs["gata_like"]):
        before, after = sa.marginalize(model, X, given, position=20, target=None)
        assert_close(after, want[1], CLOSED_FORM)


def test_gata_insertion_raises_gata_output_beyond_shuffled_motif_controls(model, X):
    """200 dinucleotide-shuffled backgrounds (10 sequences x 20 shuffles): the GATA consensus
    raises the GATA output by more than 3 standard deviations of the effects of shuffled GATA
    letters inserted at the same place; an E-box moves the GATA output by less than 1."""
    kwargs = dict(n_shuffles=20, target=0, batch_size=512)
    backgrounds = X[:10]

    def effect(motif):
        before, after = sa.marginalize(model, backgrounds, motif, **kwargs)
        assert before.shape == after.shape == (10, 20)
        return float((after - before).mean())

    rng = np.random.default_rng(1)
    controls = []
    while len(controls) < 20:
        letters = "".join(rng.permutation(list(GATA)))
        if letters not in (GATA, "AGATAAG"):
            controls.append(effect(letters))
    gata = effect(GATA)
    assert gata - np.mean(controls) > 3 * np.std(controls), (gata, controls)
    assert abs(effect(EBOX)) < 1.0


def test_background_shuffles_are_content_seeded_dinucleotide_shuffles(model, X):
    before, after = sa.marginalize(model, X[:3], EBOX, n_shuffles=4, target=None, random_state=5)
    nlc = X[:3].transpose(0, 2, 1)
    shuffles = np.stack([dinucleotide_shuffle(x, 4, sequence_rng(5, x)) for x in nlc])
    flat = np.ascontiguousarray(shuffles.reshape(12, 200, 4).transpose(0, 2, 1))
    want = _tangermeme(model, flat, EBOX, None)
    assert_close(before, want[0].reshape(3, 4, 3), CLOSED_FORM)
    assert_close(after, want[1].reshape(3, 4, 3), CLOSED_FORM)
    # a subset in another order gets the same shuffles
    sub_before, sub_after = sa.marginalize(
        model, X[[2, 0]], EBOX, n_shuffles=4, target=None, random_state=5
    )
    assert_close(sub_after, after[[2, 0]], CLOSED_FORM)
    other = sa.marginalize(model, X[:3], EBOX, n_shuffles=4, target=None, random_state=6)
    assert not np.allclose(other[0], before)


@pytest.mark.parametrize("batch_size", [1, 7, 10_000])
def test_batch_size_max_cpu_sequences_subset_and_k_targets(model, X, batch_size):
    want = sa.marginalize(model, X, CTCF, target=None, batch_size=64)
    got = sa.marginalize(model, X, CTCF, target=None, batch_size=batch_size, max_cpu_sequences=3)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, 1e-5)
    sub = sa.marginalize(model, X[[5, 1, 9]], CTCF, target=[2, 0], batch_size=batch_size)
    for g, w in zip(sub, want, strict=True):
        assert_close(g, w[[5, 1, 9]][:, [2, 0]], 1e-5)
    for k in range(3):
        one = sa.marginalize(model, X, CTCF, target=k, batch_size=batch_size)
        assert one[0].shape == (12,)
        assert_close(one[1], want[1][:, k], 1e-5)


def test_layouts_and_frameworks_agree(model, X):
    want = sa.marginalize(model, X, GATA, target=None)
    nlc = np.ascontiguousarray(X.transpose(0, 2, 1))
    keras_model = demo.keras_model()
    for got in (
        sa.marginalize(model, nlc, GATA, target=None),  # the model is fed its own layout
        sa.marginalize(keras_model, nlc, GATA, target=None),
    ):
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, CROSS_FRAMEWORK)


def test_out_file_streams_resumes_and_shards(model, X, tmp_path):
    want = sa.marginalize(model, X, GATA, target=None, n_shuffles=2)
    path = tmp_path / "m.h5"
    got = sa.marginalize(model, X, GATA, target=None, n_shuffles=2, out=path, max_cpu_sequences=5)
    assert got == str(path)
    with h5py.File(path) as f:
        stored = f["predictions"][:]  # (N, K, n_shuffles * 2): before, after per shuffle
        assert int(f.attrs["n_completed"]) == 12
    rows = stored.reshape(12, 3, 2, 2)
    assert_close(np.moveaxis(rows[..., 0], 1, -1), want[0], CLOSED_FORM)
    assert_close(np.moveaxis(rows[..., 1], 1, -1), want[1], CLOSED_FORM)
    again = sa.marginalize(model, X, GATA, target=None, n_shuffles=2, out=path)  # reused
    assert again == str(path)
    with pytest.raises(ValueError, match="'out' parameter of marginalize"):
        sa.marginalize(model, X, EBOX, target=None, n_shuffles=2, out=path)
    for index in range(3):
        part = sa.marginalize(model, X, GATA, target=None, n_shuffles=2, shard=(index, 3))
        assert_close(part[1], want[1][index * 4 : index * 4 + 4], CLOSED_FORM)


def test_func_runs_an_attribution_method_on_the_edited_backgrounds(model, X):
    before, after = sa.marginalize(
        model, X[:4], GATA, position=90, func=sa.integrated_gradients, target=0,
        func_kwargs={"n_steps": 4},
    )  # fmt: skip
    edited = substitute(torch.from_numpy(X[:4]), GATA, start=90).numpy().astype(np.float32)
    assert_close(before, sa.integrated_gradients(model, X[:4], n_steps=4), CLOSED_FORM)
    assert_close(after, sa.integrated_gradients(model, edited, n_steps=4), CLOSED_FORM)


def test_func_writes_two_files_with_out(model, X, tmp_path):
    paths = sa.marginalize(model, X[:4], GATA, position=90, func=sa.saliency, target=[0, 2],
                           out=tmp_path / "gata.h5")  # fmt: skip
    assert paths == (str(tmp_path / "gata.before.h5"), str(tmp_path / "gata.after.h5"))
    edited = substitute(torch.from_numpy(X[:4]), GATA, start=90).numpy().astype(np.float32)
    for path, rows in zip(paths, (X[:4], edited), strict=True):
        want = sa.saliency(model, rows, target=[0, 2])
        assert_close(read_tracks(path).attributions, want, CLOSED_FORM)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, X: sa.marginalize(m, X, "A" * 201), r"'motif' parameter .* at most as long"),
        (lambda m, X: sa.marginalize(m, X, GATA, position=194), r"'position' parameter .* 193"),
        (lambda m, X: sa.marginalize(m, X, GATA, position=-1), r"'position' parameter"),
        (lambda m, X: sa.marginalize(m, X[:0], GATA), r"'backgrounds' parameter .* at least one"),
        (lambda m, X: sa.marginalize(m, X[0], GATA), r"'backgrounds' parameter .* 3-D"),
        (lambda m, X: sa.marginalize(m, X, "GATAXA"), r"'motif' parameter .* 'X'"),
        (lambda m, X: sa.marginalize(m, X, np.ones((3, 5))), r"'motif' parameter .* 4\)"),
        (lambda m, X: sa.marginalize(m, X, GATA, n_shuffles=0), r"'n_shuffles' parameter"),
    ],
)
def test_bad_input_is_one_line_naming_the_parameter(model, X, call, message):
    with pytest.raises(ValueError, match=message) as error:
        call(model, X)
    assert "\n" not in str(error.value)
