"""Benchmark of variant effects (``seqattrib.variant_effects``) against what users write instead;
prints one table.

Run ``python benchmarks/bench_variants.py [--n-variants 200] [--models bpnet,crested]
[--n-snvs 10000]``. Models:
a BPNet-like net (L=1000) and a CREsted-like net (L=500) in torch (the toy models of
``tests/models.py``), on a random 200 kb genome with sorted variants: 90 % SNVs, 10 % indels of
1-8 bases, at distinct positions. Every ratio is measured in this run: the sides of a comparison
are warmed up once and timed in turn, median over the repeats.

Rows, per model:

1. a per-variant loop ÷ ours: the usual user loop, per variant the reference and alternative
   windows built as strings from the genome, one-hot encoded and predicted as one 2-row batch;
2. ISM on the same positions ÷ ours (SNVs only): ``seqattrib.ism`` of each variant's reference
   window scanning its centre position (3 substitutions, of which the variant is one; the way to
   get SNV effects from the ISM path), same batch size as ours.

Ours is ``variant_effects`` in memory, ``score="delta"``, one target, ``batch_size="auto"`` (the
default: probed on the warm-up run and cached per model); ISM the same.

Then, on a ChromBPNet-shaped two-head model (bpnet-lite's BPNet with 8 filters and 4 dilated
layers, random weights: 2,114-bp input, 1,000-bp profile and log counts, as ChromBPNet's) and
``--n-snvs`` SNVs at distinct positions, with ChromBPNet's scores (``logfc``, ``jsd``,
``abs_logfc_x_jsd``; ``profile=0``, ``output_fn=heads.counts(1)``):

3. ``strands="both"`` ÷ one strand (ours, the same call with ``strands="forward"``);
4. the per-variant loop ÷ ours with both strands: the loop ChromBPNet's variant scorer runs, per
   variant the two windows and their reverse complements as one 4-row batch, counts averaged
   as counts, reversed profiles averaged as logits, scipy's ``jensenshannon`` (base 2).

These two are timed once each after a warm-up on 200 SNVs (the model's forward passes are the
cost; one pass over 10,000 SNVs takes minutes on one CPU core).
"""

from __future__ import annotations

import argparse
from typing import Any

import _common
import models
import numpy as np

LENGTHS = {"bpnet": 1000, "crested": 500}
PROFILE_LENGTH = 2114
SCORES = ("logfc", "jsd", "abs_logfc_x_jsd")
NAMES = {"bpnet": "BPNet-like (L=1000)", "crested": "CREsted-like (L=500)"}
BATCH = "auto"


def make_data(n: int, seed: int = 0) -> tuple[dict[str, str], dict[str, list[Any]]]:
    rng = np.random.default_rng(seed)
    genome = "".join(rng.choice(list("ACGT"), 200_000))
    positions = np.sort(rng.choice(np.arange(1_000, 199_000), n, replace=False)) + 1
    rows: dict[str, list[Any]] = {"chrom": [], "pos": [], "ref": [], "alt": []}
    for p in positions.tolist():
        base = genome[p - 1]
        kind = rng.random()
        if kind < 0.9:
            ref, alt = base, str(rng.choice([b for b in "ACGT" if b != base]))
        elif kind < 0.95:
            ref, alt = base, base + "".join(rng.choice(list("ACGT"), int(rng.integers(1, 9))))
        else:
            ref, alt = genome[p - 1 : p + int(rng.integers(1, 9))], base
        for key, value in zip(rows, ("chr1", p, ref, alt), strict=True):
            rows[key].append(value)
    return {"chr1": genome}, rows


def user_loop(model: Any, genome: dict[str, str], rows: dict[str, list[Any]], length: int) -> Any:
    """Per variant: both windows as strings, one-hot, one 2-row batch through the model."""
    import torch

    import seqattrib as sa

    seq, c, out = genome["chr1"], length // 2, []
    with torch.no_grad():
        for p, ref, alt in zip(rows["pos"], rows["ref"], rows["alt"], strict=True):
            s = p - 1
            ref_window = seq[s - c : s - c + length]
            alt_sequence = seq[s - c - 8 : s] + alt + seq[s + len(ref) : s + len(ref) + length]
            h = int((len(alt) - len(ref)) / 2)
            alt_window = alt_sequence[8 + h : 8 + h + length]
            x = torch.from_numpy(sa.one_hot([ref_window, alt_window], layout="NCL"))
            y = model(x)[:, 0]
            out.append(float(y[1] - y[0]))
    return np.array(out)


def make_snvs(n: int, seed: int = 1) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """SNVs at ``n`` distinct sorted positions of a random 200 kb genome, windows inside it."""
    rng = np.random.default_rng(seed)
    genome = "".join(rng.choice(list("ACGT"), 200_000))
    margin = PROFILE_LENGTH // 2 + 1
    positions = np.sort(rng.choice(np.arange(margin, 200_000 - margin), n, replace=False)) + 1
    refs = [genome[p - 1] for p in positions.tolist()]
    alts = [str(rng.choice([b for b in "ACGT" if b != r])) for r in refs]
    rows = {"chrom": ["chr1"] * n, "pos": positions.tolist(), "ref": refs, "alt": alts}
    return {"chr1": genome}, rows


def profile_model() -> Any:
    """bpnet-lite's BPNet shaped as ChromBPNet: 2,114-bp input, one 1,000-bp profile track and
    log counts; 8 filters and 4 dilated layers (random weights)."""
    import torch
    from bpnetlite.bpnet import BPNet

    torch.manual_seed(0)
    trimming = (PROFILE_LENGTH - 1000) // 2
    model = BPNet(n_filters=8, n_layers=4, n_outputs=1, n_control_tracks=0, trimming=trimming,
                  verbose=False)  # fmt: skip
    return model.eval()


def scorer_loop(model: Any, genome: dict[str, str], rows: dict[str, list[Any]]) -> Any:
    """ChromBPNet's variant scorer as a per-variant loop: both windows and their reverse
    complements in one 4-row batch; logFC of the counts averaged as counts, JSD (base 2) of the
    softmax of the averaged logits (the reverse strand's reversed)."""
    import torch
    from scipy.spatial.distance import jensenshannon

    import seqattrib as sa

    seq, c, out = genome["chr1"], PROFILE_LENGTH // 2, []
    with torch.no_grad():
        for p, alt in zip(rows["pos"], rows["alt"], strict=True):
            ref_window = seq[p - 1 - c : p - 1 - c + PROFILE_LENGTH]
            alt_window = ref_window[:c] + alt + ref_window[c + 1 :]
            x = torch.from_numpy(sa.one_hot([ref_window, alt_window], layout="NCL"))
            profile, counts = model(torch.cat([x, x.flip(1, 2)]))
            flat = profile.reshape(4, -1).double().numpy()
            total = counts[:, 0].double().exp().numpy()
            logits = (flat[:2] + flat[2:, ::-1]) / 2
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            logfc = np.log2((total[1] + total[3]) / (total[0] + total[2]))
            jsd = jensenshannon(probs[1], probs[0], base=2.0)
            out.append((logfc, jsd, abs(logfc) * jsd))
    return np.array(out)


def strand_rows(n: int, batch: Any) -> list[Any]:
    """Rows 3 and 4: both strands against one strand, and against the scorer's loop."""
    import seqattrib as sa
    from seqattrib import heads

    genome, rows = make_snvs(n)
    warm_rows = {k: v[:200] for k, v in rows.items()}
    model = profile_model()

    def ours(strands: str, variants: dict[str, list[Any]] = rows) -> Any:
        return sa.variant_effects(
            model,
            genome,
            variants,
            length=PROFILE_LENGTH,
            output_fn=heads.counts(1),
            profile=0,
            score=SCORES,
            strands=strands,
            batch_size=batch,
        )

    # ours and the scorer's loop agree before they are timed
    check = {k: v[:50] for k, v in rows.items()}
    ours_check = ours("both", check)
    expected = scorer_loop(model, genome, check)
    for i, name in enumerate(SCORES):
        np.testing.assert_allclose(ours_check.scores[name], expected[:, i], rtol=1e-4, atol=1e-5)
    _common.log(f"profile model: {n} SNVs")
    times = _common.interleaved(
        [
            _common.Variant("forward", lambda: ours("forward"), lambda: ours("forward", warm_rows)),
            _common.Variant("both", lambda: ours("both"), lambda: ours("both", warm_rows)),
            _common.Variant(
                "loop",
                lambda: scorer_loop(model, genome, rows),
                lambda: scorer_loop(model, genome, warm_rows),
            ),
        ],
        1,
    )
    name = "ChromBPNet-shaped (L=2114, 8 filters)"
    scores = ", ".join(SCORES)
    return [
        _common.Row.ratio_row(
            name,
            "torch",
            "strands='both' ÷ one strand",
            f"{n} SNVs; scores {scores}; batch_size={batch}; one strand {n / times['forward']:.1f} "
            f"variants/s, both {n / times['both']:.1f} variants/s",
            times["forward"],
            times["both"],
            times["both"] / times["forward"],
            "≤ 2.05",
        ),
        _common.Row.ratio_row(
            name,
            "torch",
            "scorer's per-variant loop ÷ ours (both strands)",
            f"{n} SNVs; loop: one 4-row batch per variant (both windows, both strands), scipy "
            f"jensenshannon; ours strands='both', batch_size={batch}; ours "
            f"{n / times['both']:.1f} variants/s, loop {n / times['loop']:.1f} variants/s",
            times["both"],
            times["loop"],
            times["loop"] / times["both"],
            "> 1",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-variants", type=int, default=200)
    parser.add_argument("--models", default="bpnet,crested")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--n-snvs", type=int, default=10_000, help="0: skip rows 3 and 4")
    args = parser.parse_args(argv)
    import torch

    import seqattrib as sa

    lines = _common.machine_description({"torch": torch})
    genome, rows = make_data(args.n_variants)
    snvs = [i for i, (r, a) in enumerate(zip(rows["ref"], rows["alt"], strict=True))
            if len(r) == len(a) == 1]  # fmt: skip
    snv_rows = {k: [v[i] for i in snvs] for k, v in rows.items()}
    table = []
    for kind in [m for m in args.models.split(",") if m]:
        length = LENGTHS[kind]
        weights = models.bpnet_weights() if kind == "bpnet" else models.crested_weights()
        model = models.torch_model(kind, weights, "NCL")

        def ours(
            variants: dict[str, list[Any]] = rows, model: Any = model, length: int = length
        ) -> Any:
            return sa.variant_effects(
                model, genome, variants, length=length, score="delta", batch_size=BATCH
            )

        c = length // 2
        ref_windows = sa.one_hot(
            [genome["chr1"][p - 1 - c : p - 1 - c + length] for p in snv_rows["pos"]],
            layout="NCL",
        )

        def ism(model: Any = model, X: np.ndarray = ref_windows, c: int = c) -> Any:
            return sa.ism(model, X, positions=(c, c + 1), batch_size=BATCH)

        def loop(model: Any = model, length: int = length) -> Any:
            return user_loop(model, genome, rows, length)

        # the three agree before they are timed
        effects = ours().scores["delta"]
        np.testing.assert_allclose(loop(), effects, rtol=1e-4, atol=1e-4)
        scan = ism()
        bases = ["ACGT".index(a) for a in snv_rows["alt"]]
        from_ism = scan[np.arange(len(snvs)), bases, c]
        np.testing.assert_allclose(from_ism, effects[snvs], rtol=1e-4, atol=1e-4)

        _common.log(f"{kind}: {len(rows['pos'])} variants, {len(snvs)} SNVs")
        times = _common.interleaved(
            [
                _common.Variant("ours", ours),
                _common.Variant("loop", loop),
                _common.Variant("ours SNVs", lambda m=model: ours(snv_rows, m)),
                _common.Variant("ism", ism),
            ],
            args.repeats,
        )
        n, n_snv = len(rows["pos"]), len(snvs)
        table.append(
            _common.Row.ratio_row(
                NAMES[kind],
                "torch",
                "per-variant loop ÷ ours",
                f"{n} variants ({n_snv} SNVs); loop: one 2-row batch per variant; ours "
                f"batch_size={BATCH}; ours {n / times['ours']:.1f} variants/s, loop "
                f"{n / times['loop']:.1f} variants/s",
                times["ours"],
                times["loop"],
                times["loop"] / times["ours"],
                "> 1",
            )
        )
        table.append(
            _common.Row.ratio_row(
                NAMES[kind],
                "torch",
                "ISM on the same positions ÷ ours",
                f"{n_snv} SNVs; ism(positions=(c, c+1)) of each reference window, "
                f"batch_size={BATCH} both; ours {n_snv / times['ours SNVs']:.1f} variants/s, "
                f"ISM {n_snv / times['ism']:.1f} variants/s",
                times["ours SNVs"],
                times["ism"],
                times["ism"] / times["ours SNVs"],
                "> 1",
            )
        )
    if args.n_snvs:
        table += strand_rows(args.n_snvs, BATCH)
    print("\n".join(lines))
    print(f"load average at end (1/5/15 min): {_common.load_average()}\n")
    print(_common.markdown_table(table))


if __name__ == "__main__":
    main()
