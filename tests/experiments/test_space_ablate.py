"""space and ablate against tangermeme 1.6, tile_shuffle against a brute-force loop with the
same shuffles, and the contract: batch size, subsets, shards, K targets, frameworks, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import CLOSED_FORM, CROSS_FRAMEWORK, assert_close
from tangermeme.ablate import ablate as tangermeme_ablate
from tangermeme.space import space as tangermeme_space

import seqattrib as sa
from seqattrib import demo
from seqattrib.experiments import edits

GATA, EBOX = "CTTATCT", "CACCTG"
REVERSE = {"CTTATCT": "AGATAAG", "CACCTG": "CAGGTG"}


@pytest.fixture(scope="module")
def model():
    return demo.torch_model()


@pytest.fixture(scope="module")
def X():
    data = demo.load_data()
    return sa.one_hot(data["sequences"][demo.N_TRAIN : demo.N_TRAIN + 9], layout="NCL")


def _predict(model, nlc):
    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(np.swapaxes(nlc, -1, -2), dtype=np.float32))
        return model(x).numpy()


@pytest.mark.parametrize("position", [None, 12])
def test_space_equals_tangermeme_for_each_orientation(model, X, position):
    distances = [0, 3, 10, 40]
    before, after = sa.space(
        model, X, [GATA, EBOX], distances=distances, target=None, position=position
    )
    assert before.shape == (9, 3) and after.shape == (9, 4, 4, 3)  # orientations, distances
    for o, strands in enumerate(["++", "+-", "-+", "--"]):
        motifs = [m if s == "+" else REVERSE[m] for m, s in zip([GATA, EBOX], strands, strict=True)]
        want_before, want_after = tangermeme_space(
            model, torch.from_numpy(X), motifs, [[d] for d in distances], start=position,
            device="cpu",
        )  # fmt: skip
        assert_close(before, want_before.numpy(), CLOSED_FORM)
        assert_close(after[:, o], want_after.numpy(), CLOSED_FORM)


def test_three_motifs_with_rows_of_gaps_and_chosen_orientations(model, X):
    motifs = [GATA, EBOX, "CCACCAGGGGGC"]
    gaps = [[0, 5], [7, 2]]
    before, after = sa.space(
        model, X, motifs, distances=gaps, orientations=["+-+"], target=[1], batch_size=5
    )
    want = tangermeme_space(
        model, torch.from_numpy(X), [GATA, REVERSE[EBOX], motifs[2]], gaps, device="cpu"
    )
    assert after.shape == (9, 1, 2, 1)
    assert_close(after[:, 0], want[1].numpy()[..., [1]], CLOSED_FORM)


def test_space_invariance_and_keras(model, X):
    want = sa.space(model, X, [GATA, EBOX], distances=[1, 6], target=None, batch_size=64)
    got = sa.space(model, X[[4, 0]], [GATA, EBOX], distances=[1, 6], target=2, batch_size=3)
    assert_close(got[1], want[1][[4, 0]][..., 2], 1e-5)
    nlc = np.ascontiguousarray(X.transpose(0, 2, 1))
    keras = sa.space(demo.keras_model(), nlc, [GATA, EBOX], distances=[1, 6], target=None)
    assert_close(keras[1], want[1], CROSS_FRAMEWORK)
    parts = [
        sa.space(model, X, [GATA, EBOX], distances=[1, 6], target=None, shard=(index, 2))
        for index in range(2)
    ]
    assert 0 < len(parts[0][1]) < 9
    assert_close(np.concatenate([p[1] for p in parts]), want[1], CLOSED_FORM)


def _our_shuffles(X, start, end, n, seed, how="dinuc_shuffle"):
    """The shuffles ablate draws: (N, n, L, 4)."""
    nlc = X.transpose(0, 2, 1)
    return np.stack([edits.shuffled_window(x, start, end, n, seed, how) for x in nlc])


@pytest.mark.parametrize("how", ["dinuc_shuffle", "shuffle"])
def test_ablate_equals_tangermeme_with_the_same_shuffles(model, X, how):
    def shuffle_fn(X_t, start, end, n, random_state):
        rows = _our_shuffles(X_t.numpy(), start, end, n, random_state, how)
        return torch.from_numpy(np.ascontiguousarray(rows.transpose(0, 1, 3, 2)))

    before, after = sa.ablate(
        model, X, start=80, end=120, n_shuffles=6, how=how, target=None, random_state=3
    )
    want = tangermeme_ablate(model, torch.from_numpy(X), 80, 120, n=6, shuffle_fn=shuffle_fn,
                             random_state=3, device="cpu")  # fmt: skip
    assert after.shape == (9, 6, 3)
    assert_close(before, want[0].numpy(), CLOSED_FORM)
    assert_close(after, want[1].numpy(), CLOSED_FORM)


def test_window_shuffles_keep_dinucleotides_outside_bases_and_depend_on_content(X):
    rows = _our_shuffles(X, 50, 90, 5, 0)
    codes = lambda a: a.argmax(-1) + 4 * (a.sum(-1) == 0)  # noqa: E731
    for x, shuffled in zip(X.transpose(0, 2, 1), rows, strict=True):
        assert (shuffled[:, :50] == x[:50]).all() and (shuffled[:, 90:] == x[90:]).all()
        window = codes(x[50:90])
        pairs = sorted(zip(window[:-1], window[1:], strict=True))
        for s in shuffled:
            w = codes(s[50:90])
            assert sorted(zip(w[:-1], w[1:], strict=True)) == pairs
        assert len({s.tobytes() for s in shuffled}) > 1
    again = _our_shuffles(X[[3]], 50, 90, 5, 0)
    assert (again[0] == rows[3]).all()


@pytest.mark.parametrize(("window", "stride", "how"), [(20, None, "dinuc_shuffle"), (15, 7, "N")])
def test_tile_shuffle_equals_a_brute_force_loop(model, X, window, stride, how):
    n = 3 if how != "N" else 1
    before, after = sa.tile_shuffle(
        model, X, window=window, stride=stride, n_shuffles=n, how=how, target=None,
        random_state=11, batch_size=17,
    )  # fmt: skip
    starts = list(range(0, 200 - window + 1, stride or window))
    assert after.shape == (9, len(starts), n, 3)
    nlc = X.transpose(0, 2, 1)
    assert_close(before, _predict(model, nlc), CLOSED_FORM)
    for w, start in enumerate(starts):
        for i, x in enumerate(nlc):
            rows = edits.shuffled_window(x, start, start + window, n, 11, how)
            if how == "N":
                assert not rows[:, start : start + window].any()
            assert_close(after[i, w], _predict(model, rows), CLOSED_FORM)


def test_tile_shuffle_invariance_and_k_targets(model, X):
    want = sa.tile_shuffle(model, X, window=50, n_shuffles=2, target=None, batch_size=1000)
    for batch_size, cpu in ((1, 1), (13, 4)):
        got = sa.tile_shuffle(
            model, X, window=50, n_shuffles=2, target=None, batch_size=batch_size,
            max_cpu_sequences=cpu,
        )  # fmt: skip
        assert_close(got[1], want[1], 1e-5)
    sub = sa.tile_shuffle(model, X[[8, 2]], window=50, n_shuffles=2, target=[2, 1])
    assert_close(sub[1], want[1][[8, 2]][..., [2, 1]], 1e-5)
    part = sa.tile_shuffle(model, X, window=50, n_shuffles=2, target=None, shard=(1, 3))
    assert_close(part[1], want[1][3:6], CLOSED_FORM)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, X: sa.space(m, X, [GATA, EBOX], distances=[188]), r"'distances' .* fit"),
        (lambda m, X: sa.space(m, X, [GATA, EBOX], distances=[-1]), r"'distances' .* non-neg"),
        (lambda m, X: sa.space(m, X, [GATA], distances=[1]), r"'motifs' parameter .* two"),
        (lambda m, X: sa.space(m, X, [GATA, EBOX], distances=[1], position=190), r"'position'"),
        (lambda m, X: sa.space(m, X[:0], [GATA, EBOX], distances=[1]), r"'backgrounds'"),
        (lambda m, X: sa.space(m, X, [GATA, EBOX], distances=[1], orientations="+"), "orient"),
        (lambda m, X: sa.ablate(m, X, start=150, end=201), r"'end' parameter"),
        (lambda m, X: sa.ablate(m, X, start=-2, end=20), r"'start' parameter"),
        (lambda m, X: sa.ablate(m, X, start=0, end=20, how="N", n_shuffles=3), "'n_shuffles'"),
        (lambda m, X: sa.tile_shuffle(m, X, window=201), r"'window' parameter"),
        (lambda m, X: sa.tile_shuffle(m, X, window=20, how="zeros"), r"'how' parameter"),
    ],
)
def test_bad_input_is_one_line_naming_the_parameter(model, X, call, message):
    with pytest.raises(ValueError, match=message) as error:
        call(model, X)
    assert "\n" not in str(error.value)
