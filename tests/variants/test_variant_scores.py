"""Profile and bins x tracks scores against references written from the published definitions:
ChromBPNet's variant scorer (log2 fold change of the counts, the Jensen-Shannon distance in base
2 of the softmax of the flattened profile logits, forward and reverse-complement predictions
averaged before scoring) with scipy's ``jensenshannon``, and Borzoi's bin statistics (logSED,
D2, logD2) by hand; the derived-columns hook; one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CLOSED_FORM, assert_close
from variant_cases import one_hot

import seqattrib as sa
from seqattrib import heads

L = 121  # bpnet-lite with trimming 40: profile logits (batch, 2, 41)
PROFILE_SCORES = ("delta", "logfc", "jsd", "abs_logfc_x_jsd")


def _genome(seed: int = 3) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {"chr1": "".join(rng.choice(list("ACGT"), 1500))}


def _snvs(genome: dict[str, str]) -> dict[str, list]:
    """SNVs, two of them at one position (one shared reference window)."""
    g = genome["chr1"]
    rows = []
    for pos, k in ((200, 0), (350, 1), (350, 2), (401, 0), (640, 2), (900, 1), (1111, 0)):
        ref = g[pos - 1]
        rows.append((pos, ref, [b for b in "ACGT" if b != ref][k]))
    return {
        "chrom": ["chr1"] * len(rows),
        "pos": [r[0] for r in rows],
        "id": [f"v{i}" for i in range(len(rows))],
        "ref": [r[1] for r in rows],
        "alt": [r[2] for r in rows],
    }


def _windows(genome, variants, length):
    """Reference and alternative windows of SNVs by hand: REF at length // 2."""
    c = length // 2
    refs, alts = [], []
    for pos, alt in zip(variants["pos"], variants["alt"], strict=True):
        text = genome["chr1"][pos - 1 - c : pos - 1 - c + length]
        refs.append(text)
        alts.append(text[:c] + alt + text[c + 1 :])
    return refs, alts


@pytest.fixture(scope="module", name="bpnet")
def bpnet_fixture():
    return make_bpnet()


def make_bpnet():
    """bpnet-lite's BPNet (8 filters, 2 layers, two profile strands, one counts output),
    random weights scaled so that the profiles are far from uniform."""
    import torch
    from bpnetlite.bpnet import BPNet

    torch.manual_seed(0)
    model = BPNet(n_filters=8, n_layers=2, n_outputs=2, n_control_tracks=0, trimming=40,
                  verbose=False)  # fmt: skip
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4)
    return model.eval()


def predict(model, x):
    """The model's outputs on a one-hot batch in its own layout, as NumPy (a tuple for a
    two-output model)."""
    import torch

    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            out = model(torch.from_numpy(np.ascontiguousarray(x)))
    else:
        out = model(x)
    if isinstance(out, (tuple, list)):
        return tuple(np.asarray(o) for o in out)
    return np.asarray(out)


def _softmax(logits):
    z = logits - logits.mean(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _scorer(predictions, strands):
    """ChromBPNet's variant scorer on (profile logits, log counts) of the forward windows and,
    for both strands, of their reverse complements: counts exp'd and averaged, the profile
    flattened (strands after each other), the reverse strand's reversed, logits averaged, then
    logFC = log2(alt / ref) and JSD = jensenshannon(softmax(alt), softmax(ref), base=2)."""
    from scipy.spatial.distance import jensenshannon

    def allele(which):
        profile, counts = predictions[which]
        flat = profile.reshape(len(profile), -1).astype(np.float64)
        total = np.exp(counts.astype(np.float64))
        if strands == "both":
            profile_rc, counts_rc = predictions[which + "_rc"]
            flat_rc = profile_rc.reshape(len(profile_rc), -1).astype(np.float64)[:, ::-1]
            flat = (flat + flat_rc) / 2
            total = (total + np.exp(counts_rc.astype(np.float64))) / 2
        return flat, total

    ref_profile, ref_counts = allele("ref")
    alt_profile, alt_counts = allele("alt")
    logfc = np.log2(alt_counts / ref_counts)[:, 0]
    jsd = np.array(
        [
            jensenshannon(a, r, base=2.0)
            for a, r in zip(_softmax(alt_profile), _softmax(ref_profile), strict=True)
        ]
    )
    return {"logfc": logfc, "jsd": jsd, "abs_logfc_x_jsd": np.abs(logfc) * jsd}


def _predictions(model, refs, alts, layout, strands):
    out = {}
    for name, texts in (("ref", refs), ("alt", alts)):
        x = one_hot(texts, "NLC")
        for suffix, window in (("", x), ("_rc", x[:, ::-1, ::-1])):
            if suffix and strands == "forward":
                continue
            fed = window if layout == "NLC" else window.transpose(0, 2, 1)
            profile, counts = predict(model, np.ascontiguousarray(fed))
            out[name + suffix] = (np.asarray(profile), np.asarray(counts))
    return out


@pytest.mark.parametrize("strands", ["forward", "both"])
def test_profile_scores_equal_the_chrombpnet_scorer_torch(bpnet, strands):
    genome = _genome()
    variants = _snvs(genome)
    result = sa.variant_effects(
        bpnet,
        genome,
        variants,
        length=L,
        output_fn=heads.counts(1),
        score=PROFILE_SCORES,
        profile=heads.profile(0),
        strands=strands,
        batch_size=6,
    )
    refs, alts = _windows(genome, variants, L)
    expected = _scorer(_predictions(bpnet, refs, alts, "NCL", strands), strands)
    assert expected["jsd"].min() > 0.01  # profiles that differ: the test can tell
    for name in ("logfc", "jsd", "abs_logfc_x_jsd"):
        assert_close(result.scores[name], expected[name], CLOSED_FORM)


def test_profile_scores_equal_the_chrombpnet_scorer_keras():
    """A Keras two-output model (profile (batch, length, 2) as Keras BPNet models return it,
    log counts (batch, 1)): the same scores from the same code."""
    import keras

    keras.utils.set_random_seed(4)
    inputs = keras.Input((41, 4))
    hidden = keras.layers.Conv1D(6, 9, activation="relu")(inputs)
    profile = keras.layers.Conv1D(2, 5, kernel_initializer=keras.initializers.RandomNormal(0, 2))(
        hidden
    )
    counts = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(hidden))
    model = keras.Model(inputs, [profile, counts])
    genome = _genome(5)
    variants = _snvs(genome)
    result = sa.variant_effects(
        model,
        genome,
        variants,
        length=41,
        output_fn=heads.counts(1),
        score=PROFILE_SCORES,
        profile=0,
        strands="both",
        batch_size=8,
    )
    refs, alts = _windows(genome, variants, 41)
    predictions = _predictions(model, refs, alts, "NLC", "both")
    # Keras BPNet's (batch, length, strands) flattened strand after strand, as the scorer does
    # with order="F"
    predictions = {
        key: (profile.transpose(0, 2, 1), counts) for key, (profile, counts) in predictions.items()
    }
    expected = _scorer(predictions, "both")
    assert expected["jsd"].min() > 0.01
    for name in ("logfc", "jsd", "abs_logfc_x_jsd"):
        assert_close(result.scores[name], expected[name], CLOSED_FORM)


def _tracks_model():
    """(batch, 4, 60) -> (batch, 8 bins, 3 tracks) of positive coverage."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(2)
            self.conv = torch.nn.Conv1d(4, 3, 9, padding=4)

        def forward(self, x):
            y = torch.nn.functional.softplus(self.conv(x) * 3)
            return torch.nn.functional.avg_pool1d(y, 60 // 8 + 0, stride=7)[:, :, :8].transpose(
                1, 2
            )

    return Model().eval()


@pytest.mark.parametrize("strand_pair", [None, (1, 0, 2)])
def test_bin_scores_equal_borzoi_statistics_with_bins_turned_back(strand_pair):
    """logSED (log_sum), D2 (l2) and logD2 (log_l2) over chosen bins of chosen tracks, both
    strands: the reverse strand's bins are reversed before the bins are chosen (an asymmetric
    choice of bins tells), and with ``strand_pair`` its tracks 0 and 1 swapped (Borzoi's
    stranded tracks)."""
    model = _tracks_model()
    genome = _genome(6)
    variants = _snvs(genome)
    bins = [1, 2, 3]
    head = heads.tracks([0, 2], bins=bins, strand_pair=strand_pair)
    result = sa.variant_effects(
        model,
        genome,
        variants,
        length=60,
        output_fn=head,
        score=("delta", "log_sum", "l2", "log_l2"),
        profile=head,
        strands="both",
        batch_size=5,
    )
    refs, alts = _windows(genome, variants, 60)
    per_bin = {}
    for name, texts in (("ref", refs), ("alt", alts)):
        x = one_hot(texts, "NLC")
        forward = predict(model, np.ascontiguousarray(x.transpose(0, 2, 1)))
        reverse = predict(model, np.ascontiguousarray(x[:, ::-1, ::-1].transpose(0, 2, 1)))
        if strand_pair is not None:
            reverse = reverse[:, :, list(strand_pair)]
        mean = (forward.astype(np.float64) + reverse[:, ::-1].astype(np.float64)) / 2
        per_bin[name] = mean[:, bins][:, :, [0, 2]].sum(axis=2)  # (n, bins)
    ref_sum, alt_sum = per_bin["ref"].sum(1), per_bin["alt"].sum(1)
    expected = {
        "delta": alt_sum - ref_sum,
        "log_sum": np.log2(1 + alt_sum) - np.log2(1 + ref_sum),
        "l2": np.sqrt(((per_bin["alt"] - per_bin["ref"]) ** 2).sum(1)),
        "log_l2": np.sqrt(
            ((np.log2(1 + per_bin["alt"]) - np.log2(1 + per_bin["ref"])) ** 2).sum(1)
        ),
    }
    assert expected["l2"].min() > 1e-3
    for name, value in expected.items():
        assert_close(result.scores[name], value, CLOSED_FORM)


def test_derived_columns_follow_the_scores_in_memory_and_in_files(tmp_path, bpnet, monkeypatch):
    """The derive hook: its columns come after the scores, per target, computed from each
    finished block, in memory and in the written table (and in its settings)."""
    from seqattrib.variants import effects, read_effects

    def derived_columns(**kwargs):
        return (lambda block: {"twice_delta": 2 * block["delta"]}), ("twice_delta",), {}

    monkeypatch.setattr(effects, "derived_columns", derived_columns)
    genome = _genome()
    variants = _snvs(genome)
    run = dict(length=L, output_fn=heads.counts(1), score="delta", batch_size=4)
    result = sa.variant_effects(bpnet, genome, variants, **run)
    assert_close(result.derived["twice_delta"], 2 * result.scores["delta"], CLOSED_FORM)
    assert list(result.columns())[-2:] == ["delta_0", "twice_delta_0"]
    path = sa.variant_effects(bpnet, genome, variants, out=str(tmp_path / "t.tsv"), **run)
    written = read_effects(path)
    assert written.settings["scores"] == ["delta", "twice_delta"]
    assert_close(written.columns["twice_delta_0"], 2 * result.scores["delta"], 1e-6)


def test_a_profile_score_of_a_single_output_model_is_one_line_naming_score():
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv1d(4, 2, 5), torch.nn.Flatten(), torch.nn.LazyLinear(1)
    )
    model(torch.zeros(2, 4, 30))
    genome = _genome()
    with pytest.raises(ValueError, match="'score' parameter of variant_effects") as caught:
        sa.variant_effects(model, genome, _snvs(genome), length=30, score=("logfc", "jsd"))
    assert "\n" not in str(caught.value)
    assert "profile" in str(caught.value)


def test_bad_score_settings_are_one_line_errors(bpnet):
    genome = _genome()
    variants = _snvs(genome)
    cases = [
        (dict(score="sad"), "score"),
        (dict(score=("jsd", "l2"), profile=0), "score"),
        (dict(score="l2"), "profile"),
        (dict(score="delta", profile=0), "profile"),
        (dict(score="l2", profile=heads.profile(0)), "profile"),
        (dict(strands="reverse"), "strands"),
        (dict(shifts=()), "shifts"),
        (dict(shifts=(0, 0)), "shifts"),
        (dict(shifts=(0.5,)), "shifts"),
        (dict(shifts=(1000,)), "shifts"),
    ]
    for kwargs, param in cases:
        with pytest.raises((ValueError, TypeError), match=f"'{param}' parameter") as caught:
            sa.variant_effects(
                bpnet, genome, variants, length=L, output_fn=heads.counts(1), **kwargs
            )
        assert "\n" not in str(caught.value), kwargs


def test_a_strand_pair_that_does_not_fit_the_tracks_is_one_line_naming_it():
    model = _tracks_model()
    genome = _genome(6)
    head = heads.tracks(0, strand_pair=(1, 0))  # the model has 3 tracks
    with pytest.raises(
        ValueError, match="'strand_pair' parameter of seqattrib.heads.tracks"
    ) as caught:
        sa.variant_effects(
            model, genome, _snvs(genome), length=60, output_fn=head, score="delta", strands="both"
        )
    assert "\n" not in str(caught.value)


def test_an_ensemble_refuses_what_needs_each_models_positions(bpnet):
    genome = _genome()
    variants = _snvs(genome)
    with pytest.raises(ValueError, match="'score' parameter"):
        sa.variant_effects(
            [bpnet, bpnet], genome, variants, length=L, output_fn=heads.counts(1), score="jsd"
        )
    with pytest.raises(ValueError, match="'strands' parameter"):
        sa.variant_effects(
            [_tracks_model()] * 2,
            _genome(6),
            _snvs(_genome(6)),
            length=60,
            output_fn=heads.tracks(0, bins=[1, 2]),
            score="delta",
            strands="both",
        )
    both = sa.variant_effects(
        [bpnet, bpnet], genome, variants, length=L, output_fn=heads.counts(1), strands="both",
        score="logfc",
    )  # fmt: skip
    one = sa.variant_effects(
        bpnet, genome, variants, length=L, output_fn=heads.counts(1), strands="both",
        score="logfc",
    )  # fmt: skip
    assert_close(both.scores["logfc"], one.scores["logfc"], 1e-5)
