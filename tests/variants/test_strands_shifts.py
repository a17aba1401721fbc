"""Both strands and window shifts: ``strands="both"`` against the forward run and a run on the
reverse-complemented genome; ``shifts`` against windows cut by hand and against single-shift
runs; both invariant to the batch size; in torch and Keras."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CLOSED_FORM, FLOAT32, assert_close

import seqattrib as sa

L = 25  # odd: the reverse complement of a window is the reverse genome's window of the variant
COMPLEMENT = str.maketrans("ACGT", "TGCA")
FRAMEWORKS = ("torch", "tensorflow")


def _genome(seed: int = 11) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {
        "chr1": "".join(rng.choice(list("ACGT"), 600)),
        "chr2": "".join(rng.choice(list("ACGT"), 90)),
    }


def _model(framework: str):
    """A small conv net of any input length: (batch, L, 4) -> (batch, 2) positive outputs."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(0, 0.8, (7, 4, 6)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (6, 2)).astype(np.float32)
    if framework == "torch":
        import torch

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = torch.nn.Conv1d(4, 6, 7, bias=False)
                self.dense = torch.nn.Linear(6, 2, bias=False)
                with torch.no_grad():
                    self.conv.weight.copy_(torch.from_numpy(w1.transpose(2, 1, 0).copy()))
                    self.dense.weight.copy_(torch.from_numpy(w2.T.copy()))

            def forward(self, x):
                h = torch.relu(self.conv(x.transpose(1, 2)))
                return torch.nn.functional.softplus(self.dense(h.max(dim=2).values))

        return Model().eval()
    import keras

    inputs = keras.Input((None, 4))
    h = keras.layers.Conv1D(6, 7, use_bias=False, activation="relu")(inputs)
    h = keras.layers.GlobalMaxPooling1D()(h)
    out = keras.layers.Dense(2, use_bias=False, activation="softplus")(h)
    model = keras.Model(inputs, out)
    model.layers[1].set_weights([w1])
    model.layers[3].set_weights([w2])
    return model


def _predict(model, texts: list[str]) -> np.ndarray:
    x = sa.one_hot(texts, layout="NLC")
    try:
        import torch

        if isinstance(model, torch.nn.Module):
            with torch.no_grad():
                return model(torch.from_numpy(x)).numpy().astype(np.float64)
    except ImportError:
        pass
    return np.asarray(model(x)).astype(np.float64)


def _snvs(genome):
    """SNVs on both chromosomes, three alleles at one position (one shared reference)."""
    g = genome["chr1"]
    rows = [("chr1", p, k) for p, k in ((40, 0), (41, 1), (300, 0), (300, 1), (300, 2), (555, 2))]
    rows.append(("chr2", 45, 1))
    out = {"chrom": [], "pos": [], "id": [], "ref": [], "alt": []}
    for i, (chrom, pos, k) in enumerate(rows):
        ref = genome[chrom][pos - 1]
        out["chrom"].append(chrom)
        out["pos"].append(pos)
        out["id"].append(f"v{i}")
        out["ref"].append(ref)
        out["alt"].append([b for b in "ACGT" if b != ref][k])
    assert g  # the genome has the positions
    return out


def _reverse(genome, variants):
    """The genome reverse-complemented, and the same SNVs on it (same order)."""
    rc = {c: s.translate(COMPLEMENT)[::-1] for c, s in genome.items()}
    moved = dict(variants)
    moved["pos"] = [
        len(genome[c]) - p + 1 for c, p in zip(variants["chrom"], variants["pos"], strict=True)
    ]
    moved["ref"] = [b.translate(COMPLEMENT) for b in variants["ref"]]
    moved["alt"] = [b.translate(COMPLEMENT) for b in variants["alt"]]
    return rc, moved


@pytest.mark.parametrize(("framework", "length"), [("torch", L), ("tensorflow", L), ("torch", 24)])
def test_both_strands_are_the_mean_of_the_forward_and_the_reverse_genome_runs(framework, length):
    """With an odd length the reverse view of a window is the reverse genome's window of the
    variant; with an even one (the reverse complement of the window, as ChromBPNet's scorer
    makes it) the variant sits one base before the centre: the reverse genome's window shifted
    by -1."""
    model = _model(framework)
    genome = _genome()
    variants = _snvs(genome)
    kw = dict(length=length, target=[0, 1], score=("delta", "logfc"), batch_size=7)
    both = sa.variant_effects(model, genome, variants, strands="both", **kw)
    forward = sa.variant_effects(model, genome, variants, **kw)
    shift = length - 2 * (length // 2) - 1
    reverse = sa.variant_effects(model, *_reverse(genome, variants), shifts=(shift,), **kw)
    for q in ("ref", "alt"):
        mean = (forward.predictions[q].astype(np.float64) + reverse.predictions[q]) / 2
        assert_close(both.predictions[q], mean, CLOSED_FORM)
    assert_close(both.scores["delta"], both.predictions["alt"] - both.predictions["ref"], 1e-6)
    # counts averaged as counts: log2 of the mean exp over the two strands
    counts = {
        q: np.log(
            (np.exp(forward.predictions[q].astype(np.float64)) + np.exp(reverse.predictions[q])) / 2
        )
        for q in ("ref", "alt")
    }
    assert_close(both.scores["logfc"], (counts["alt"] - counts["ref"]) / np.log(2), CLOSED_FORM)
    # the strands differ: the test can tell a wrong reverse complement
    assert np.abs(forward.scores["delta"] - reverse.scores["delta"]).max() > 1e-2


def _cut(sequence: str, start: int, shift: int) -> str:
    """The window of L at ``start`` moved ``shift`` bases to the left."""
    return sequence[start - shift : start - shift + L]


def test_shifts_are_windows_moved_along_the_genome_and_the_mean_of_single_shifts():
    """SNVs, an insertion and a deletion: each shift's windows cut by hand from the reference
    and the alternative sequence, the mean over shifts equal to the run with all of them and
    to the mean of the single-shift runs."""
    model = _model("torch")
    genome = _genome()
    g = genome["chr1"]
    variants = _snvs(genome)
    for key, value in zip(
        ("chrom", "pos", "id", "ref", "alt"),
        (
            ("chr1", "chr1"),
            (120, 200),
            ("ins", "del"),
            (g[119], g[199:203]),
            (g[119] + "TGA", g[199]),
        ),
        strict=True,
    ):
        variants[key] = list(variants[key]) + list(value)
    shifts = (-2, 0, 3)
    kw = dict(length=L, target=[0, 1], score="delta", batch_size=11)
    together = sa.variant_effects(model, genome, variants, shifts=shifts, **kw)
    singles = [sa.variant_effects(model, genome, variants, shifts=(s,), **kw) for s in shifts]
    c = L // 2
    by_hand = {"ref": [], "alt": []}
    for shift in shifts:
        refs, alts = [], []
        for chrom, pos, ref, alt in zip(
            variants["chrom"], variants["pos"], variants["ref"], variants["alt"], strict=True
        ):
            seq, s = genome[chrom], pos - 1
            refs.append(_cut(seq, s - c, shift))
            alt_seq = seq[:s] + alt + seq[s + len(ref) :]
            h = int((len(alt) - len(ref)) / 2)
            alts.append(_cut(alt_seq, s - c + h, shift))
        by_hand["ref"].append(_predict(model, refs))
        by_hand["alt"].append(_predict(model, alts))
    for q in ("ref", "alt"):
        expected = np.mean(by_hand[q], axis=0)
        assert_close(together.predictions[q], expected, CLOSED_FORM)
        mean = np.mean([r.predictions[q].astype(np.float64) for r in singles], axis=0)
        assert_close(together.predictions[q], mean, CLOSED_FORM)
        assert_close(singles[2].predictions[q], by_hand[q][2], CLOSED_FORM)
    assert np.abs(by_hand["alt"][0] - by_hand["alt"][2]).max() > 1e-2  # shifts matter


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_views_do_not_depend_on_the_batch_size(framework):
    model = _model(framework)
    genome = _genome()
    variants = _snvs(genome)
    kw = dict(length=L, target=[0, 1], score=("delta", "logfc"), strands="both", shifts=(-1, 0, 1))
    runs = [sa.variant_effects(model, genome, variants, batch_size=b, **kw) for b in (1, 7, 500)]
    for run in runs[1:]:
        for q in ("ref", "alt"):
            assert_close(run.predictions[q], runs[0].predictions[q], FLOAT32)
        assert_close(run.scores["logfc"], runs[0].scores["logfc"], FLOAT32)


def test_shifts_need_genome_bases_beyond_the_window():
    """A variant whose window fits but whose shifted windows do not is skipped as too close to
    the chromosome end."""
    model = _model("torch")
    genome = _genome()
    c = L // 2
    g = genome["chr2"]
    pos = c + 1  # the window starts at the chromosome's first base
    variants = {"chrom": ["chr2", "chr2"], "pos": [pos, 45], "ref": [g[pos - 1], g[44]],
                "alt": ["N", "N"]}  # fmt: skip
    plain = sa.variant_effects(model, genome, variants, length=L, score="delta")
    assert len(plain.variants["pos"]) == 2
    with pytest.warns(sa.SeqAttribWarning, match="too close to a chromosome end"):
        shifted = sa.variant_effects(
            model, genome, variants, length=L, score="delta", shifts=(-1, 1)
        )
    assert list(shifted.variants["pos"]) == [45]


def test_shards_of_a_job_with_views_and_profile_scores_join_to_the_full_run(tmp_path):
    """A shard that starts inside a run of variants sharing a reference window (the second of
    three starts at the second allele of a position) recomputes that window: the joined shards
    equal the whole job, in memory and merged from files."""
    from test_variant_scores import _snvs as profile_snvs
    from test_variant_scores import make_bpnet

    from seqattrib import heads
    from seqattrib.variants import merge_effects, read_effects

    model = make_bpnet()
    rng = np.random.default_rng(8)
    genome = {"chr1": "".join(rng.choice(list("ACGT"), 1500))}
    variants = profile_snvs(genome)
    kw = dict(
        length=121,
        output_fn=heads.counts(1),
        score=("logfc", "jsd", "abs_logfc_x_jsd"),
        strands="both",
        shifts=(0, 1),
        batch_size=4,
    )
    whole = sa.variant_effects(model, genome, variants, **kw)
    parts = [sa.variant_effects(model, genome, variants, shard=(i, 3), **kw) for i in range(3)]
    for name in ("logfc", "jsd", "abs_logfc_x_jsd"):
        joined = np.concatenate([p.scores[name] for p in parts])
        assert_close(joined, whole.scores[name], FLOAT32)
    paths = [
        sa.variant_effects(
            model, genome, variants, shard=(i, 3), out=str(tmp_path / f"s{i}.tsv"), **kw
        )
        for i in range(3)
    ]
    merged = read_effects(merge_effects(paths, str(tmp_path / "all.tsv")))
    assert_close(merged.columns["jsd_0"], whole.scores["jsd"], FLOAT32)
