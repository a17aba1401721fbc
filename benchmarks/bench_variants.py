"""Benchmark of variant effects (``seqattrib.variant_effects``) against what users write instead;
prints one table.

Run ``python benchmarks/bench_variants.py [--n-variants 200] [--models bpnet,crested]``. Models:
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
"""

from __future__ import annotations

import argparse
from typing import Any

import _common
import models
import numpy as np

LENGTHS = {"bpnet": 1000, "crested": 500}
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-variants", type=int, default=200)
    parser.add_argument("--models", default="bpnet,crested")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    import seqattrib as sa

    lines = _common.machine_description({"torch": torch})
    genome, rows = make_data(args.n_variants)
    snvs = [i for i, (r, a) in enumerate(zip(rows["ref"], rows["alt"], strict=True))
            if len(r) == len(a) == 1]  # fmt: skip
    snv_rows = {k: [v[i] for i in snvs] for k, v in rows.items()}
    table = []
    for kind in args.models.split(","):
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
    print("\n".join(lines))
    print(f"load average at end (1/5/15 min): {_common.load_average()}\n")
    print(_common.markdown_table(table))


if __name__ == "__main__":
    main()
