"""Tracks files with known seqlets for the motif tests: a linear model whose saliency is its
weights, GATA planted on both strands, and a small motif database."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

import seqattrib as sa

GATA = "AGATAAGG"
LENGTH = 100
N = 14


def make_database(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for i in range(30):
        pwm = rng.dirichlet(np.full(4, 0.3), size=int(rng.integers(6, 13)))
        out[f"M{i:02d}"] = pwm
    gata = np.full((len(GATA), 4), 0.02)
    gata[np.arange(len(GATA)), ["ACGT".index(b) for b in GATA]] = 0.94
    out["GATA1"] = gata
    return out


def write_meme(path, motifs) -> str:
    text = "MEME version 4\n\nALPHABET= ACGT\n\n"
    for name, pwm in motifs.items():
        text += f"MOTIF {name}\nletter-probability matrix: alength= 4 w= {len(pwm)}\n"
        text += "".join(" ".join(f"{v:.6f}" for v in row) + "\n" for row in pwm) + "\n"
    path.write_text(text)
    return str(path)


class _Linear(torch.nn.Module):
    """f_k(x) = sum(W_k * x): its gradient, the saliency, is W_k for every sequence."""

    def __init__(self, weights: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("w", torch.tensor(weights, dtype=torch.float32))

    def forward(self, x):
        return torch.einsum("nlc,klc->nk", x, self.w)


def _one_hot(rng, sites):
    letters = rng.integers(0, 4, size=(N, LENGTH))
    for start, motif in sites:
        letters[:, start : start + len(motif)] = ["ACGT".index(b) for b in motif]
    return np.eye(4, dtype=np.float32)[letters]


def make_tracks(path, *, regions=True, scale=1.0, seed=0, planted=True):
    """GATA at 20 (plus strand) and its reverse complement at 60 in every sequence; the
    weights of target 0 reward those bases there (unless not ``planted``: controls), target 1
    has small noise only."""
    rng = np.random.default_rng(seed)
    rc = GATA[::-1].translate(str.maketrans("ACGT", "TGCA"))
    X = _one_hot(rng, [(20, GATA), (60, rc)])
    w = rng.normal(0, 0.02, size=(2, LENGTH, 4))
    for start, motif in ((20, GATA), (60, rc)) if planted else ():
        for i, base in enumerate(motif):
            w[0, start + i, "ACGT".index(base)] = 1.0
    w *= scale
    kwargs = {}
    if regions:
        # two chromosomes, not in sorted order, so the BED must sort them
        chrom = ["chr2" if i % 3 else "chr10" for i in range(N)]
        start = 10_000 + 1000 * np.arange(N)[::-1]
        kwargs["regions"] = SimpleNamespace(chrom=chrom, start=start, end=start + LENGTH)
    sa.saliency(_Linear(w), X, target=[0, 1], out=path, **kwargs)
    return str(path)
