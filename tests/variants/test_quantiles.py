"""Allele quantiles among peak predictions: the model run by hand on the peak windows (summit-
or centre-centred), the fraction below each allele's prediction counted by brute force; resume
and the one-line errors for a peak set of another genome."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_model
from helpers import assert_close
from variant_cases import L, one_hot, other_base, predict

import seqattrib as sa
from seqattrib.variants.quantiles import quantiles, ranked_peaks


@pytest.fixture(scope="module", name="big_genome")
def big_genome_fixture():
    rng = np.random.default_rng(5)
    return {
        "chr1": "".join(rng.choice(list("ACGT"), 3000)),
        "chr2": "".join(rng.choice(list("ACGT"), 1500)),
    }


@pytest.fixture(scope="module", name="model")
def model_fixture(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def _snvs(genome, n=25, seed=2):
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(np.arange(100, 2900), n, replace=False))
    return {
        "chrom": ["chr1"] * n,
        "pos": [int(p) for p in pos],
        "ref": [genome["chr1"][p - 1] for p in pos],
        "alt": [other_base(genome["chr1"][p - 1], i % 3) for i, p in enumerate(pos)],
    }


def _peaks(path, n=40, seed=4):
    """A narrowPeak file: (chrom, start, end, summit offset) rows, and the windows' centres."""
    rng = np.random.default_rng(seed)
    rows, centres = [], []
    for i in range(n):
        chrom, size = ("chr1", 3000) if i % 2 else ("chr2", 1500)
        start = int(rng.integers(20, size - 80))
        end = start + int(rng.integers(10, 60))
        summit = int(rng.integers(0, end - start)) if i % 3 else -1
        rows.append(f"{chrom}\t{start}\t{end}\tp{i}\t0\t.\t1\t1\t1\t{summit}\n")
        centres.append((chrom, start + summit if summit >= 0 else (start + end) // 2))
    path.write_text("".join(rows))
    return centres


def test_quantiles_count_the_peaks_below():
    rng = np.random.default_rng(1)
    peaks = np.round(rng.normal(size=300), 1)
    peaks[5] = np.nan
    values = np.concatenate([np.round(rng.normal(size=100), 1), [np.nan, -9.0, 9.0]])
    q = quantiles(values, ranked_peaks(peaks))
    finite = peaks[np.isfinite(peaks)]
    expected = np.array([np.nan if np.isnan(v) else np.mean(finite < v) for v in values])
    assert np.array_equal(np.isnan(q), np.isnan(expected))
    assert_close(np.nan_to_num(q), np.nan_to_num(expected), 1e-6)
    assert q[-2] == 0.0 and q[-1] == 1.0


def test_allele_quantiles_among_predictions_on_the_peak_windows(big_genome, model, tmp_path):
    path = tmp_path / "peaks.narrowPeak"
    centres = _peaks(path)
    variants = _snvs(big_genome)
    result = sa.variant_effects(model, big_genome, variants, length=L, target=[0, 2], peaks=path)
    c = L // 2
    windows = [big_genome[chrom][at - c : at - c + L] for chrom, at in centres]
    peak = predict(model, one_hot(windows, "NLC"))[:, [0, 2]]
    for k in range(2):
        for allele in ("ref", "alt"):
            values = result.predictions[allele][:, k]
            expected = [np.mean(peak[:, k] < v) for v in values]
            assert_close(result.derived[f"{allele}_quantile"][:, k], expected, 1e-6)
    active = np.maximum(result.derived["ref_quantile"], result.derived["alt_quantile"])
    assert np.array_equal(result.derived["active_quantile"], active)
    assert {"ref_quantile_0", "alt_quantile_2", "active_quantile_2"} <= set(result.columns())
    # a peak listed twice counts once
    path.write_text(path.read_text() * 2)
    again = sa.variant_effects(model, big_genome, variants, length=L, target=[0, 2], peaks=path)
    assert np.array_equal(again.derived["alt_quantile"], result.derived["alt_quantile"])


def _reverse_complement(text):
    return text[::-1].translate(str.maketrans("ACGT", "TGCA"))


def test_peak_predictions_use_the_tables_strands_and_shifts(big_genome, model, tmp_path):
    path = tmp_path / "peaks.narrowPeak"
    centres = _peaks(path)
    variants = _snvs(big_genome)
    views = dict(length=L, target=2, strands="both", shifts=(-1, 0, 2))
    result = sa.variant_effects(model, big_genome, variants, peaks=path, **views)
    c = L // 2
    # shift s moves the window s bases to the left
    windows = [
        big_genome[chrom][at - c - s : at - c - s + L] for chrom, at in centres for s in (-1, 0, 2)
    ]
    forward = predict(model, one_hot(windows, "NLC"))[:, 2]
    reverse = predict(model, one_hot([_reverse_complement(w) for w in windows], "NLC"))[:, 2]
    peak = ((forward + reverse) / 2).reshape(len(centres), 3).mean(axis=1)
    expected = [np.mean(peak < v) for v in result.predictions["alt"]]
    assert_close(result.derived["alt_quantile"], expected, 1e-6)


def test_peaks_as_regions_and_windows_off_the_chromosome(big_genome, model):
    variants = _snvs(big_genome)
    regions = sa.io.Regions.from_arrays(["chr1", "chr1", "chr2"], [0, 500, 1490], [4, 520, 1500])
    with pytest.warns(sa.SeqAttribWarning, match="2 of 3 peaks left out"):
        result = sa.variant_effects(model, big_genome, variants, length=L, peaks=regions)
    window = big_genome["chr1"][510 - L // 2 : 510 - L // 2 + L]
    peak = predict(model, one_hot([window], "NLC"))[0, 0]
    expected = (result.predictions["ref"] > peak).astype(np.float32)
    assert np.array_equal(result.derived["ref_quantile"], expected)


def test_a_table_of_another_peak_set_is_refused_on_resume(big_genome, model, tmp_path):
    path = tmp_path / "peaks.narrowPeak"
    _peaks(path)
    variants = _snvs(big_genome)
    out = tmp_path / "effects.tsv"
    sa.variant_effects(model, big_genome, variants, length=L, peaks=path, out=out)
    assert sa.variant_effects(model, big_genome, variants, length=L, peaks=path, out=out) == str(
        out
    )
    _peaks(path, seed=9)
    with pytest.raises(ValueError, match="peaks"):
        sa.variant_effects(model, big_genome, variants, length=L, peaks=path, out=out)


@pytest.mark.parametrize(
    ("bed", "match"),
    [
        ("chr1\t10\t50\nchrX\t10\t50\n", "'peaks' parameter.*chromosome.*genome lacks.*'chrX'"),
        ("chr1\t10\t50\nchr2\t1400\t1600\n", "'peaks' parameter.*past a chromosome's end"),
        ("track name=x\n", "'peaks' parameter.*at least one peak"),
        ("chr1\t0\t5\n", "'peaks' parameter.*fit inside their chromosomes"),
    ],
)
def test_a_peak_set_of_another_genome_is_a_one_line_error(big_genome, model, tmp_path, bed, match):
    path = tmp_path / "peaks.bed"
    path.write_text(bed)
    with pytest.raises(ValueError, match=match) as info:
        sa.variant_effects(model, big_genome, _snvs(big_genome), length=L, peaks=path)
    assert "\n" not in str(info.value)
