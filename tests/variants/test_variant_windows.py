"""The window convention: reference and alternative windows against windows built by hand."""

from __future__ import annotations

import pytest
from variant_cases import (  # noqa: F401 - the genome fixture
    L,
    expected_windows,
    genome_fixture,
    scored_cases,
    skipped_cases,
    split,
    table,
)

import seqattrib as sa
from seqattrib.variants.catalog import GenomeText, VariantStream, WindowArray, catalog
from seqattrib.variants.records import open_records

#: A genome whose windows can be read by eye.
CHROM = "AAAAACCCCCGGGGGTTTTTACGTACGTAC"  # 30 bases


def _windows(genome, variants, length):
    text = GenomeText(genome, "test")
    records = open_records(variants, "test")
    found = catalog(records, text, length, "test")
    stream = VariantStream(records, found, text, length, "test")
    return found, [sa.decode(WindowArray(stream, allele)[0 : found.n]) for allele in ("ref", "alt")]


@pytest.mark.parametrize(
    ("pos", "ref", "alt", "ref_window", "alt_window"),
    [
        # SNV at base 11 (1-based): G at index 3 of the window of 6
        (11, "G", "T", "CCCGGG", "CCCTGG"),
        # insertion of 2 after the anchor G: 1 trimmed on the left, 1 on the right
        (11, "G", "GAA", "CCCGGG", "CCGAAG"),
        # insertion of 1: trimmed on the right
        (11, "G", "GA", "CCCGGG", "CCCGAG"),
        # deletion of 2 after the anchor: 1 filled on the left, 1 on the right
        (11, "GGG", "G", "CCCGGG", "CCCCGG"),
        # deletion of 4: 2 filled on each side, from the genome
        (9, "CCGGG", "C", "CCCCCG", "AACCCC"),
        # deletion of 1: filled on the right
        (11, "GG", "G", "CCCGGG", "CCCGGG"),
        # substitution of 3 bases: in place
        (11, "GGG", "ACT", "CCCGGG", "CCCACT"),
    ],
)
def test_windows_built_by_hand(pos, ref, alt, ref_window, alt_window):
    genome = {"c": CHROM}
    variants = {"chrom": ["c"], "pos": [pos], "ref": [ref], "alt": [alt]}
    found, (refs, alts) = _windows(genome, variants, 6)
    assert found.n == 1
    assert refs == [ref_window]
    assert alts == [alt_window]
    assert expected_windows(genome, "c", pos, ref, alt, 6) == (ref_window, alt_window)


def test_every_case_matches_the_convention(genome):
    cases = scored_cases(genome)
    found, (refs, alts) = _windows(genome, table(cases), L)
    expected = [expected_windows(genome, *v) for v in split(cases)]
    assert found.n == len(expected)
    assert refs == [e[0].upper() for e in expected]
    assert alts == [e[1].upper() for e in expected]


def test_alleles_of_one_position_share_the_reference_window(genome):
    found, _ = _windows(genome, table(scored_cases(genome)), L)
    # chr1:150 has 3 ALT alleles, chr1:320 has 3: only their first opens a window
    opens = found.opens.tolist()
    assert opens == [
        True,
        True,
        False,
        False,
        True,
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        True,
    ]


def test_skipped_variants_and_their_reasons(genome):
    cases = skipped_cases(genome)
    found = catalog(
        open_records(table([c for c, _ in cases]), "test"), GenomeText(genome, "test"), L, "test"
    )
    assert found.n == 0
    assert [row[5] for row in found.skipped.rows] == [reason for _, reason in cases]
    mismatch = found.skipped.rows[0]
    assert mismatch[6] == f"the genome has {genome['chr1'][119]}"


def test_edges_are_exact(genome):
    """The first and last positions whose windows fit are kept; one further is skipped."""
    g = genome["chr1"]
    c = L // 2
    first, last = c + 1, len(g) - (L - c) + 1  # 1-based
    variants = [
        ("chr1", p, g[p - 1], "A" if g[p - 1] != "A" else "C")
        for p in (first - 1, first, last, last + 1)
    ]
    found = catalog(open_records(table(variants), "test"), GenomeText(genome, "test"), L, "test")
    assert found.n == 2
    assert found.pos.tolist() == [first, last]
    # a deletion needs genome beyond the reference window: skipped where an SNV still fits
    deletion = [("chr1", last, g[last - 1 : last + 2], g[last - 1])]
    found = catalog(open_records(table(deletion), "test"), GenomeText(genome, "test"), L, "test")
    assert [r[5] for r in found.skipped.rows] == ["chromosome_end"]
