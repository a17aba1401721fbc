"""Calibration of the empirical p-values on the demo genome.

The demo genome: the 2,000 demo sequences (200 bp) placed on the made-up chromosome ``demo``
(500,000 bp) at their coordinates in ``demo_regions.bed`` (one every 250 bp); the 50-bp gaps
between them, and the ends, are filled with uniformly random bases drawn with
``numpy.random.default_rng(0)`` (one draw for the whole chromosome, the sequences written over
it). A 200-bp window centred anywhere but the first and last 100 bases fits.

- Variants that change a core base of a planted GATA site (the four bases that read ``GATA`` on
  either strand in the consensus of the planted instances that ``demo_motifs.tsv`` lists) must
  be found: >= 90 % of them have p < 0.01 for the GATA output.
- SNVs at least 50 bp from every planted site (of any of the three motifs) are null variants:
  their p-values must be uniform. The demo model max-pools its convolution over the window, so
  an SNV outside every filter's best match leaves the output exactly unchanged: a score of 0, tied
  with the null's zeros, whose p-value is 1 (the count includes ties, as ChromBPNet's does). A
  p-value with ties is uniform only once ties are split at random (the randomized p-value of a
  discrete statistic), so the KS test is run on ``(#{|null| > |s|} + U (#{|null| = |s|} + 1)) /
  (n + 1)`` with U uniform, after checking that the table's p-value is that value at U = 1; the
  table's own p-values are checked to be valid (no more small p-values than their level).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import seqattrib as sa
from seqattrib.demo import load_data, torch_model
from seqattrib.io.fingerprint import sequences_fingerprint
from seqattrib.variants.catalog import GenomeText, catalog
from seqattrib.variants.effects import _content_fingerprint
from seqattrib.variants.null import draw_null
from seqattrib.variants.records import open_records

scipy_stats = pytest.importorskip("scipy.stats")

LENGTH, N_NULL, N_CORE, N_FAR = 200, 2000, 150, 300


def _demo_genome(data):
    rng = np.random.default_rng(0)
    bases = rng.choice(np.array(list("ACGT")), 500_000)
    for sequence, start in zip(data["sequences"], data["regions"].start, strict=True):
        bases[start : start + len(sequence)] = list(sequence)
    return {"demo": "".join(bases)}


def _core_snvs(data, genome):
    """Every SNV of a core base of every planted GATA site (1-based pos, ref, alt): the four
    bases that read GATA (or TATC, its reverse complement) in the consensus of the planted
    instances, at sites whose instance has the consensus there (798 of the 801 sites)."""
    starts, ends = data["motif_starts"][:, 0], data["motif_ends"][:, 0]
    planted = np.flatnonzero(starts >= 0)
    sites = [data["sequences"][i][starts[i] : ends[i]] for i in planted]
    consensus = "".join(Counter(column).most_common(1)[0][0] for column in zip(*sites, strict=True))
    k = max(consensus.find("GATA"), consensus.find("TATC"))
    assert k >= 0, consensus
    out = []
    for i, site in zip(planted, sites, strict=True):
        if site[k : k + 4] != consensus[k : k + 4]:
            continue
        for j in range(4):
            at = int(data["regions"].start[i] + starts[i] + k + j)
            ref = genome["demo"][at]
            out += [(at + 1, ref, alt) for alt in "ACGT" if alt != ref]
    return out


def _far_snvs(data, genome, n, rng):
    """SNVs at least 50 bp from every planted site of every motif."""
    offsets = data["regions"].start[:, None]
    planted = data["motif_starts"] >= 0
    lo = (offsets + data["motif_starts"])[planted]
    hi = (offsets + data["motif_ends"])[planted]  # end-exclusive
    out = []
    while len(out) < n:
        at = int(rng.integers(LENGTH, 500_000 - LENGTH))
        if np.maximum(lo - at, at - (hi - 1)).min() >= 50:
            ref = genome["demo"][at]
            out.append((at + 1, ref, "ACGT".replace(ref, "")[int(rng.integers(3))]))
    return out


def test_pvalues_find_gata_cores_and_are_uniform_far_from_planted_sites():
    data = load_data()
    genome = _demo_genome(data)
    model = torch_model()
    rng = np.random.default_rng(0)
    core = _core_snvs(data, genome)
    core = [core[i] for i in rng.choice(len(core), N_CORE, replace=False)]
    far = _far_snvs(data, genome, N_FAR, rng)
    snvs = sorted(set(core + far))
    assert len(snvs) == N_CORE + N_FAR
    table = {
        "chrom": ["demo"] * len(snvs),
        "pos": [s[0] for s in snvs],
        "ref": [s[1] for s in snvs],
        "alt": [s[2] for s in snvs],
    }
    is_core = np.array([s in set(core) for s in snvs])
    common = dict(length=LENGTH, target=0, score="delta", batch_size=256)
    result = sa.variant_effects(
        model, genome, table, null="shuffle", n_null=N_NULL, random_state=0, **common
    )
    p = result.derived["pvalue_delta"]
    assert np.mean(p[is_core] < 0.01) >= 0.9

    # the null's scores, drawn and scored again as the table's were
    records = open_records(table, "test")
    found = catalog(records, GenomeText(genome, "test"), LENGTH, "test")
    prints = (_content_fingerprint(table, records), sequences_fingerprint(genome))
    sizes = {"demo": 500_000}
    drawn = draw_null("shuffle", N_NULL, found, genome, sizes, LENGTH, 0, 0, prints, "test")
    null = np.abs(sa.variant_effects(model, drawn.contigs, drawn.table, **common).scores["delta"])
    score = np.abs(result.scores["delta"][~is_core])
    above = (null[None] > score[:, None]).sum(axis=1)
    tied = (null[None] == score[:, None]).sum(axis=1)
    far = p[~is_core]
    assert np.allclose(far, (1 + above + tied) / (N_NULL + 1), rtol=1e-6)
    u = np.random.default_rng(1).random(len(far))
    randomized = (above + u * (tied + 1)) / (N_NULL + 1)
    assert scipy_stats.kstest(randomized, "uniform").pvalue > 0.01
    for level in (0.01, 0.05, 0.1, 0.25, 0.5):  # valid: at most the level, up to 3 SE
        assert np.mean(far <= level) <= level + 3 * np.sqrt(level * (1 - level) / N_FAR)
