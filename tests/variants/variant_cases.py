"""Shared fixtures of the variant tests: a small random genome, variants of every kind on it, and
the window convention written independently (from the whole alternative sequence)."""

from __future__ import annotations

import numpy as np
import pytest

import seqattrib as sa

#: Window length of the variant tests (the length the cached Keras toy models take).
L = 24


def make_genome(seed: int = 7) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {
        "chr1": "".join(rng.choice(list("ACGT"), 400)),
        "chr2": "".join(rng.choice(list("ACGT"), 120)),
    }


def other_base(base: str, k: int = 0) -> str:
    return [b for b in "ACGT" if b != base.upper()][k]


def expected_windows(genome, chrom, pos, ref, alt, length=L):
    """(ref window, alt window) as text, by the documented convention: the reference window
    puts REF's first base at length // 2; the alternative window is the same window on
    genome[:s] + ALT + genome[s + len(REF):], moved by trunc((len(ALT) - len(REF)) / 2)."""
    seq = genome[chrom]
    s, c = pos - 1, length // 2
    ref_window = seq[s - c : s - c + length]
    alt_sequence = seq[:s] + alt + seq[s + len(ref) :]
    h = int((len(alt) - len(ref)) / 2)
    alt_window = alt_sequence[s - c + h : s - c + h + length]
    assert len(ref_window) == len(alt_window) == length
    return ref_window, alt_window


def scored_cases(genome):
    """Variants that are scored: (chrom, pos, ref, alt-field) with several kinds."""
    g = genome["chr1"]
    return [
        ("chr1", 100, g[99], other_base(g[99])),  # SNV
        ("chr1", 150, g[149], ",".join(b for b in "ACGT" if b != g[149])),  # multi-allelic SNV
        ("chr1", 200, g[199], g[199] + "GA"),  # insertion of 2
        ("chr1", 210, g[209], g[209] + "TTTACGG"),  # insertion of 7 (odd)
        ("chr1", 250, g[249:253], g[249]),  # deletion of 3
        ("chr1", 260, g[259:262], g[259]),  # deletion of 2
        ("chr1", 300, g[299:301], other_base(g[299]) + other_base(g[300])),  # MNV
        ("chr1", 320, g[319:321], f"{g[319]},{g[319:321]}C,{other_base(g[319])}{g[320]}"),
        ("chr2", 60, genome["chr2"][59].lower(), "n"),  # ALT N, either case
    ]


def skipped_cases(genome):
    """Variants that are skipped, with their reason."""
    g = genome["chr1"]
    return [
        (("chr1", 120, other_base(g[119]), g[119]), "ref_mismatch"),
        (("chr1", 130, g[129], "<DEL>"), "symbolic"),
        (("chr1", 131, g[130], "*"), "symbolic"),
        (("chr1", 132, g[131], "R"), "symbolic"),
        (("chr1", 5, g[4], other_base(g[4])), "chromosome_end"),
        (("chr1", 395, g[394], other_base(g[394])), "chromosome_end"),
        (("chr1", 390, g[389], g[389] + "A" * 30), "too_long"),
        (("chr9", 50, "A", "C"), "missing_chromosome"),
        (("chr1", 140, g[139], g[139]), "no_change"),
    ]


def table(cases):
    return {
        "chrom": [c[0] for c in cases],
        "pos": [c[1] for c in cases],
        "id": [f"v{i}" for i in range(len(cases))],
        "ref": [c[2] for c in cases],
        "alt": [c[3] for c in cases],
    }


def split(cases):
    """One (chrom, pos, ref, alt) per ALT allele, in input order."""
    return [(c, p, r, a) for c, p, r, alts in cases for a in alts.split(",")]


def predict(model, X):
    """The model on a one-hot batch in its own layout (the hand computation)."""
    import torch

    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model(torch.from_numpy(np.ascontiguousarray(X))).numpy()
    return np.asarray(model(X))


def one_hot(texts, layout):
    return sa.one_hot([t.upper() for t in texts], layout=layout)


@pytest.fixture(scope="module", name="genome")
def genome_fixture():
    return make_genome()


@pytest.fixture(scope="module", name="fasta")
def fasta_fixture(tmp_path_factory, genome):
    path = tmp_path_factory.mktemp("genome") / "genome.fa"
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in genome.items()))
    return path
