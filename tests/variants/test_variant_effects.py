"""Effects against model(alt) - model(ref) computed by hand on hand-built windows, in both
frameworks and layouts; an SNV's delta against ISM; the contract's invariances."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_model
from helpers import FLOAT32, assert_close
from variant_cases import (  # noqa: F401 - the genome fixture
    L,
    expected_windows,
    genome_fixture,
    one_hot,
    other_base,
    predict,
    scored_cases,
    skipped_cases,
    split,
    table,
)

import seqattrib as sa
from seqattrib.io.fingerprint import sequences_fingerprint
from seqattrib.variants import merge_effects, read_effects

FRAMEWORKS = ("torch", "tensorflow")
LAYOUTS = ("NLC", "NCL")


def _model(framework, weights, layout):
    return make_model(framework, "convnet", weights, layout)


def _exp(framework):
    if framework == "torch":
        import torch

        return torch.exp
    import tensorflow as tf

    return tf.exp


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_effects_equal_model_alt_minus_ref(framework, layout, genome, conv_weights):
    model = _model(framework, conv_weights, layout)
    cases = scored_cases(genome)
    result = sa.variant_effects(model, genome, table(cases), length=L, target=[0, 2], batch_size=7)
    variants = split(cases)
    windows = [expected_windows(genome, *v) for v in variants]
    ref = predict(model, one_hot([w[0] for w in windows], layout))[:, [0, 2]]
    alt = predict(model, one_hot([w[1] for w in windows], layout))[:, [0, 2]]
    assert result.targets == [0, 2]
    assert result.variants["pos"].tolist() == [v[1] for v in variants]
    assert result.variants["alt"].tolist() == [v[3] for v in variants]
    assert_close(result.predictions["ref"], ref, FLOAT32)
    assert_close(result.predictions["alt"], alt, FLOAT32)
    assert_close(result.scores["delta"], alt - ref, FLOAT32)
    assert result.scores["delta"].dtype == np.float32


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_log_ratio_of_positive_outputs(framework, genome, conv_weights):
    model = _model(framework, conv_weights, "NLC")
    cases = scored_cases(genome)
    result = sa.variant_effects(
        model, genome, table(cases), length=L, target=1, output_fn=_exp(framework)
    )
    windows = [expected_windows(genome, *v) for v in split(cases)]
    ref = predict(model, one_hot([w[0] for w in windows], "NLC"))[:, 1]
    alt = predict(model, one_hot([w[1] for w in windows], "NLC"))[:, 1]
    assert result.scores["log_ratio"].shape == (len(windows),)
    assert_close(result.scores["log_ratio"], alt - ref, FLOAT32)
    assert_close(result.scores["delta"], np.exp(alt) - np.exp(ref), FLOAT32)


def test_log_ratio_of_other_outputs_is_nan_with_a_warning(genome, conv_weights):
    model = _model("torch", conv_weights, "NCL")
    with pytest.warns(sa.SeqAttribWarning, match="log_ratio is NaN"):
        result = sa.variant_effects(model, genome, table(scored_cases(genome)), length=L, target=0)
    ratio, ref, alt = result.scores["log_ratio"], *result.predictions.values()
    assert np.array_equal(np.isnan(ratio), (ref <= 0) | (alt <= 0))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_snv_delta_is_the_ism_entry(framework, genome, conv_weights):
    model = _model(framework, conv_weights, "NCL")
    snvs = [v for v in split(scored_cases(genome)) if len(v[2]) == len(v[3]) == 1]
    snvs = [v for v in snvs if v[3].upper() != "N"]
    result = sa.variant_effects(model, genome, table(snvs), length=L, target=[0, 1, 2])
    X = one_hot([expected_windows(genome, *v)[0] for v in snvs], "NCL")
    scan = sa.ism(model, X, target=[0, 1, 2])  # (n, 3, 4, L)
    entries = np.stack([scan[i, :, "ACGT".index(v[3]), L // 2] for i, v in enumerate(snvs)])
    assert_close(result.scores["delta"], entries, FLOAT32)


@pytest.fixture(scope="module")
def reference(genome, conv_weights):
    model = _model("torch", conv_weights, "NCL")
    return model, sa.variant_effects(
        model, genome, table(scored_cases(genome)), length=L, target=None, batch_size=64
    )


@pytest.mark.parametrize("batch_size", [1, 2, 3, 10**6, "auto"])
def test_batch_size_does_not_change_results(reference, genome, batch_size):
    model, expected = reference
    got = sa.variant_effects(
        model,
        genome,
        table(scored_cases(genome)),
        length=L,
        target=None,
        batch_size=batch_size,
        max_cpu_sequences=2,
    )
    for name in ("ref", "alt"):
        assert_close(got.predictions[name], expected.predictions[name], FLOAT32)
    assert_close(got.scores["delta"], expected.scores["delta"], FLOAT32)


def test_k_targets_equal_single_calls_and_subsets(reference, genome):
    model, expected = reference
    cases = scored_cases(genome)
    for t in (2, 0):
        single = sa.variant_effects(model, genome, table(cases), length=L, target=t, score="delta")
        assert_close(single.scores["delta"], expected.scores["delta"][:, t], FLOAT32)
        assert list(single.scores) == ["delta"]
    # a variant's row does not depend on its neighbours
    part = sa.variant_effects(model, genome, table(cases[2:5]), length=L, target=None)
    n_before = len(split(cases[:2]))
    n = len(split(cases[2:5]))
    assert_close(part.scores["delta"], expected.scores["delta"][n_before : n_before + n], FLOAT32)


def test_columns_and_frame(reference):
    _, expected = reference
    columns = expected.columns()
    assert list(columns)[:5] == ["chrom", "pos", "id", "ref", "alt"]
    assert "delta_2" in columns and "log_ratio_0" in columns and "alt_1" in columns
    assert_close(columns["delta_1"], expected.scores["delta"][:, 1], 0)
    assert expected.to_frame().shape == (len(columns["pos"]), len(columns))


def test_skipped_variants_are_reported_and_not_scored(genome, conv_weights):
    model = _model("torch", conv_weights, "NCL")
    cases = scored_cases(genome)[:2] + [c for c, _ in skipped_cases(genome)]
    with pytest.warns(sa.SeqAttribWarning, match="skipped 9 of 13 variants") as record:
        result = sa.variant_effects(model, genome, table(cases), length=L, score="delta")
    message = str(record[0].message)
    assert "1 REF differs from the genome" in message and "2 too close" in message
    assert len(result.variants["pos"]) == 4
    assert [row[5] for row in result.skipped] == [reason for _, reason in skipped_cases(genome)]


def test_nothing_to_score_is_an_error(genome, conv_weights):
    model = _model("torch", conv_weights, "NCL")
    cases = [c for c, reason in skipped_cases(genome) if reason == "ref_mismatch"]
    with pytest.warns(sa.SeqAttribWarning), pytest.raises(ValueError, match="same assembly"):
        sa.variant_effects(model, genome, table(cases), length=L)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"score": "ratio"}, "'score' parameter"),
        ({"attributions": "shap"}, "'attributions' parameter"),
        ({"attribution_options": {"target": 1}}, "'attribution_options' parameter"),
        ({"attribution_options": {"args": [1.0]}}, "'attribution_options' parameter"),
        ({"length": 0}, "'length' parameter"),
        ({"layout": "LNC"}, "'layout' parameter"),
    ],
)
def test_bad_arguments(genome, conv_weights, kwargs, match):
    model = _model("torch", conv_weights, "NCL")
    arguments = dict(length=L) | kwargs
    with pytest.raises(ValueError, match=match):
        sa.variant_effects(model, genome, table(scored_cases(genome)), **arguments)


def _same_shape(genome):
    """The genome with one base changed far from every variant: same names and lengths."""
    seq = genome["chr1"]
    return {**genome, "chr1": seq[:5] + other_base(seq[5]) + seq[6:]}


def _other_ids(columns):
    return {**columns, "id": [f"rs{i}" for i in range(len(columns["id"]))]}


@pytest.mark.parametrize("change", ["genome", "ids"])
def test_resume_and_merge_refuse_other_inputs(change, tmp_path, genome, conv_weights):
    """A dict genome of other bases (same names and lengths), or a table of other ids at the
    same positions, is another input: a rerun does not resume the table, shards do not merge."""
    model = _model("torch", conv_weights, "NCL")
    columns = table(scored_cases(genome))
    other_genome, other_columns = genome, columns
    if change == "genome":
        other_genome = _same_shape(genome)
    else:
        other_columns = _other_ids(columns)
    key = "genome_fingerprint" if change == "genome" else "variants_fingerprint"
    kwargs = dict(length=L, target=0, score="delta")
    out = tmp_path / "effects.tsv"
    sa.variant_effects(model, genome, columns, out=out, **kwargs)
    sa.variant_effects(model, genome, columns, out=out, **kwargs)  # the same inputs resume
    with pytest.raises(ValueError, match=f"same settings to resume.*{key}"):
        sa.variant_effects(model, other_genome, other_columns, out=out, **kwargs)
    shards = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    sa.variant_effects(model, genome, columns, out=shards[0], shard=(0, 2), **kwargs)
    sa.variant_effects(model, other_genome, other_columns, out=shards[1], shard=(1, 2), **kwargs)
    with pytest.raises(ValueError, match=f"shards of one job.*{key}"):
        merge_effects(shards, tmp_path / "merged.tsv")


def test_dict_genome_fingerprint_is_of_the_bases(genome):
    digest = sequences_fingerprint(genome)
    assert sequences_fingerprint(dict(reversed(list(genome.items())))) == digest  # order: no matter
    assert sequences_fingerprint(_same_shape(genome)) != digest
    assert sequences_fingerprint({**genome, "chr1": genome["chr1"].lower()}) != digest


def test_a_table_without_ids_resumes(tmp_path, genome, conv_weights):
    model = _model("torch", conv_weights, "NCL")
    columns = table(scored_cases(genome))
    del columns["id"]
    out = tmp_path / "effects.tsv"
    kwargs = dict(length=L, target=0, score="delta", out=out)
    sa.variant_effects(model, genome, columns, **kwargs)
    sa.variant_effects(model, genome, columns, **kwargs)
    assert set(read_effects(out).columns["id"].tolist()) == {"."}
    with pytest.raises(ValueError, match="variants_fingerprint"):
        sa.variant_effects(model, genome, _other_ids(table(scored_cases(genome))), **kwargs)
