"""Planted motifs of the demo data: destroying a motif base scores far above a background base."""

from __future__ import annotations

import numpy as np
import pytest

import seqattrib as sa
from seqattrib import demo

N_SEQUENCES = 12


@pytest.fixture(scope="module")
def planted():
    """The demo sequences placed on one chromosome at their regions (random bases between)."""
    data = demo.load_data()
    rng = np.random.default_rng(0)
    size = int(data["regions"].end.max()) + 250
    genome = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, size)].copy()
    for seq, start in zip(data["sequences"], data["regions"].start, strict=True):
        genome[start : start + len(seq)] = np.frombuffer(seq.encode(), np.uint8)
    return data, {"demo": genome.tobytes().decode()}


def _substitutions(genome, positions):
    """Every substitution at each 1-based position."""
    rows = [
        ("demo", p, genome["demo"][p - 1], b)
        for p in positions
        for b in "ACGT"
        if b != genome["demo"][p - 1]
    ]
    return {k: [r[i] for r in rows] for i, k in enumerate(("chrom", "pos", "ref", "alt"))}


@pytest.mark.parametrize("task", [0, 2])  # GATA and CTCF
def test_destroying_a_planted_motif_scores_far_above_background(planted, task):
    data, genome = planted
    labels, starts = data["labels"][:, task], data["motif_starts"][:, task]
    ends, regions = data["motif_ends"][:, task], data["regions"]
    with_motif = np.flatnonzero(labels > 0)[:N_SEQUENCES]
    without = np.flatnonzero(data["labels"].sum(axis=1) == 0)[:N_SEQUENCES]
    model = demo.torch_model()
    motif_positions = [
        int(regions.start[i]) + p + 1 for i in with_motif for p in range(starts[i], ends[i])
    ]
    background_positions = [int(regions.start[i]) + 101 for i in without]
    scores = {}
    for name, positions in (("motif", motif_positions), ("background", background_positions)):
        result = sa.variant_effects(
            model, genome, _substitutions(genome, positions), length=demo.LENGTH, target=task,
            score="delta",
        )  # fmt: skip
        scores[name] = result.scores["delta"]
    # the strongest loss in each planted motif, against every background substitution
    per_motif = scores["motif"].reshape(len(with_motif), -1).min(axis=1)
    assert np.median(-per_motif) > 10 * np.median(np.abs(scores["background"]))
    assert (per_motif < 0).all()
