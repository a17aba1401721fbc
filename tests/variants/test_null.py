"""Empirical p-values against a null: the formula by brute-force counting, the null's draws
checked against what they must be (dinucleotide counts, matched bases, distances), content
seeding, shards, resume, and the one-line errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import make_model
from helpers import FLOAT32, assert_close
from variant_cases import L, other_base

import seqattrib as sa
from seqattrib.io.fingerprint import sequences_fingerprint
from seqattrib.variants import merge_effects, read_effects
from seqattrib.variants.catalog import GenomeText, catalog
from seqattrib.variants.effects import _content_fingerprint
from seqattrib.variants.null import draw_null, empirical_pvalues, ranked_null
from seqattrib.variants.records import open_records


@pytest.fixture(scope="module", name="big_genome")
def big_genome_fixture():
    rng = np.random.default_rng(11)
    return {
        "chr1": "".join(rng.choice(list("ACGT"), 3000)),
        "chr2": "".join(rng.choice(list("ACGT"), 2000)),
    }


@pytest.fixture(scope="module", name="model")
def model_fixture(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def _snvs(genome, n=30, seed=3):
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(np.arange(100, 2900), n, replace=False))
    return {
        "chrom": ["chr1"] * n,
        "pos": [int(p) for p in pos],
        "id": [f"v{i}" for i in range(n)],
        "ref": [genome["chr1"][p - 1] for p in pos],
        "alt": [other_base(genome["chr1"][p - 1], i % 3) for i, p in enumerate(pos)],
    }


def _brute_pvalues(observed, null):
    null = np.abs(null[np.isfinite(null)])
    return np.array(
        [
            np.nan if np.isnan(o) else (1 + np.sum(null >= abs(o))) / (len(null) + 1)
            for o in observed
        ]
    )


def test_empirical_pvalues_count_the_null_at_least_as_extreme():
    rng = np.random.default_rng(0)
    null = np.round(rng.normal(size=500), 1)  # many ties
    null[[3, 7]] = np.nan
    observed = np.concatenate([np.round(rng.normal(size=200) * 2, 1), [np.nan, 0.0, 100.0]])
    p = empirical_pvalues(observed, ranked_null(null))
    expected = _brute_pvalues(observed, null)
    assert np.array_equal(np.isnan(p), np.isnan(expected)) and np.isnan(p[-3])
    assert_close(np.nan_to_num(p), np.nan_to_num(expected), 1e-6)
    assert p[-2] == 1.0 and np.isclose(p[-1], 1 / 499)  # 498 finite draws
    assert np.isnan(empirical_pvalues(observed, ranked_null(np.full(5, np.nan)))).all()


def _catalog(genome, variants):
    records = open_records(variants, "t")
    return catalog(records, GenomeText(genome, "t"), L, "t"), records


def _draw(kind, genome, variants, n_null=150, seed=0, pad=0):
    found, records = _catalog(genome, variants)
    prints = (_content_fingerprint(variants, records), sequences_fingerprint(genome))
    sizes = {c: len(s) for c, s in genome.items()}
    return draw_null(kind, n_null, found, genome, sizes, L, pad, seed, prints, "t")


def _dinucleotides(text):
    return Counter(text[i : i + 2] for i in range(len(text) - 1))


def test_shuffle_null_keeps_the_dinucleotides_of_a_scored_window(big_genome):
    variants = _snvs(big_genome)
    drawn = _draw("shuffle", big_genome, variants, pad=2)
    c = 2 + L // 2
    windows = [big_genome["chr1"][p - 1 - c : p - 1 - c + L + 4] for p in variants["pos"]]
    pairs = set(zip(variants["ref"], variants["alt"], strict=True))
    counts = [_dinucleotides(w) for w in windows]
    for j in range(drawn.n):
        text = drawn.contigs[drawn.table["chrom"][j]]
        assert len(text) == L + 4 and drawn.table["pos"][j] == c + 1
        ref, alt = drawn.table["ref"][j], drawn.table["alt"][j]
        assert text[c] == ref and (ref, alt) in pairs
        mine = _dinucleotides(text)
        # the centre base was set to REF: at most the two dinucleotides through it differ
        assert min(sum(((mine - w) + (w - mine)).values()) for w in counts) <= 4
    assert len({drawn.contigs[name] for name in drawn.table["chrom"]}) > drawn.n // 2


def test_matched_null_draws_genome_snvs_with_the_scored_bases_far_from_them(big_genome):
    variants = _snvs(big_genome)
    drawn = _draw("matched", big_genome, variants)
    pairs = set(zip(variants["ref"], variants["alt"], strict=True))
    scored = np.array(variants["pos"]) - 1
    c = L // 2
    for j in range(drawn.n):
        text = drawn.contigs[drawn.table["chrom"][j]]
        hits = [
            (chrom, i)
            for chrom, seq in big_genome.items()
            for i in range(len(seq) - L + 1)
            if seq[i : i + L] == text
        ]
        assert hits, "a matched null window is a window of the genome"
        chrom, start = hits[0]
        at = start + c
        assert big_genome[chrom][at] == drawn.table["ref"][j]
        assert (drawn.table["ref"][j], drawn.table["alt"][j]) in pairs
        if chrom == "chr1":
            assert np.abs(scored - at).min() >= L // 2


def test_the_null_is_content_seeded_and_extends_as_a_prefix(big_genome):
    variants = _snvs(big_genome)
    for kind in ("shuffle", "matched"):
        a = _draw(kind, big_genome, variants, n_null=120)
        b = _draw(kind, big_genome, variants, n_null=200)
        other_seed = _draw(kind, big_genome, variants, n_null=120, seed=1)
        texts = [a.contigs[n] for n in a.table["chrom"]]
        assert texts == [b.contigs[n] for n in b.table["chrom"]][:120]
        assert a.table["alt"] == b.table["alt"][:120]
        assert texts != [other_seed.contigs[n] for n in other_seed.table["chrom"]]
        # the same variants in another order: another input, another null
        permuted = {k: v[::-1] for k, v in variants.items()}
        c = _draw(kind, big_genome, permuted, n_null=120)
        assert texts != [c.contigs[n] for n in c.table["chrom"]]


@pytest.mark.parametrize("kind", ["shuffle", "matched"])
def test_table_pvalues_equal_a_count_over_the_null_scored_by_hand(big_genome, model, kind):
    import torch

    variants = _snvs(big_genome)
    common = dict(length=L, target=[0, 2], output_fn=torch.exp)  # positive: log_ratio too
    result = sa.variant_effects(model, big_genome, variants, null=kind, n_null=150, **common)
    drawn = _draw(kind, big_genome, variants)
    null = sa.variant_effects(model, drawn.contigs, drawn.table, **common)
    assert result.derived["pvalue_delta"].shape == (30, 2)
    for name in ("delta", "log_ratio"):
        for k in range(2):
            assert_close(
                result.derived[f"pvalue_{name}"][:, k],
                _brute_pvalues(result.scores[name][:, k], null.scores[name][:, k]),
                1e-6,
            )
    assert result.derived["pvalue_delta"].min() >= 1 / 151 - 1e-7
    columns = result.columns()
    assert "pvalue_delta_2" in columns and "pvalue_log_ratio_0" in columns


def test_the_null_is_scored_with_the_tables_strands_and_shifts(big_genome, model):
    variants = _snvs(big_genome)
    views = dict(length=L, target=1, score="delta", strands="both", shifts=(-2, 0, 1))
    result = sa.variant_effects(model, big_genome, variants, null="shuffle", n_null=120, **views)
    drawn = _draw("shuffle", big_genome, variants, n_null=120, pad=2)
    null = sa.variant_effects(model, drawn.contigs, drawn.table, **views).scores["delta"]
    expected = _brute_pvalues(result.scores["delta"], null)
    assert_close(result.derived["pvalue_delta"], expected, 1e-6)
    forward = sa.variant_effects(model, drawn.contigs, drawn.table, length=L, target=1)
    assert not np.allclose(forward.scores["delta"], null)  # the views matter


def test_shards_and_batches_share_one_null(big_genome, model):
    variants = _snvs(big_genome)
    common = dict(length=L, target=0, score="delta", null="shuffle", n_null=120)
    full = sa.variant_effects(model, big_genome, variants, batch_size=5, **common)
    for i in range(3):
        part = sa.variant_effects(
            model, big_genome, variants, shard=(i, 3), batch_size=64, **common
        )
        rows = slice(i * 10, (i + 1) * 10)
        assert_close(part.derived["pvalue_delta"], full.derived["pvalue_delta"][rows], FLOAT32)


def test_shard_tables_with_a_null_merge_into_the_full_table(big_genome, model, tmp_path):
    variants = _snvs(big_genome)
    common = dict(length=L, target=[0, 1], score="delta", null="matched", n_null=100)
    full = sa.variant_effects(model, big_genome, variants, **common).columns()
    parts = [
        sa.variant_effects(
            model, big_genome, variants, shard=(i, 2), out=tmp_path / f"s{i}.tsv", **common
        )
        for i in range(2)
    ]
    merged = read_effects(merge_effects(parts, tmp_path / "all.tsv")).columns
    for name in ("pvalue_delta_0", "pvalue_delta_1", "delta_1"):
        assert_close(merged[name], full[name], FLOAT32)


def test_a_table_of_another_null_is_refused_on_resume(big_genome, model, tmp_path):
    variants = _snvs(big_genome)
    out = tmp_path / "effects.tsv"
    common = dict(length=L, target=0, score="delta", out=out)
    sa.variant_effects(model, big_genome, variants, null="shuffle", n_null=120, **common)
    again = sa.variant_effects(model, big_genome, variants, null="shuffle", n_null=120, **common)
    assert again == str(out)
    for other in (
        dict(null="shuffle", n_null=130),
        dict(null="matched", n_null=120),
        dict(null="shuffle", n_null=120, random_state=5),
        dict(),
    ):
        with pytest.raises(ValueError, match="null"):
            sa.variant_effects(model, big_genome, variants, **other, **common)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(null="shuffle", n_null=99), "'n_null' parameter.*at least 100"),
        (dict(null="shuffle", n_null=0), "'n_null' parameter"),
        (dict(null="random"), "'null' parameter.*'shuffle' or 'matched'"),
    ],
)
def test_bad_null_arguments_are_one_line_errors(big_genome, model, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        sa.variant_effects(model, big_genome, _snvs(big_genome), length=L, **kwargs)
    assert "\n" not in str(info.value)


def test_a_null_that_cannot_be_drawn_is_a_one_line_error(big_genome, model):
    g = big_genome["chr1"]
    indels = {"chrom": ["chr1"], "pos": [500], "ref": [g[499]], "alt": [g[499] + "AC"]}
    with pytest.raises(ValueError, match="'null' parameter.*Pass null='shuffle'") as info:
        sa.variant_effects(model, big_genome, indels, length=L, null="matched", n_null=100)
    assert "\n" not in str(info.value)
    # every position of a short genome lies near a scored variant
    small = {"chr1": g[:60]}
    crowded = {
        "chrom": ["chr1"] * 4,
        "pos": [16, 28, 40, 45],
        "ref": [small["chr1"][p - 1] for p in (16, 28, 40, 45)],
        "alt": [other_base(small["chr1"][p - 1]) for p in (16, 28, 40, 45)],
    }
    with pytest.raises(ValueError, match="'null' parameter.*no such position") as info:
        sa.variant_effects(model, small, crowded, length=L, null="matched", n_null=100)
    assert "\n" not in str(info.value)
