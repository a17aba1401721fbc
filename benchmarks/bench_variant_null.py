"""Benchmark of the empirical p-values of ``variant_effects``: what the null costs in a job, and
how the p-values' resolution and calibration depend on ``n_null``; prints two tables.

Run ``python benchmarks/bench_variant_null.py [--n-variants 10000] [--n-null 10000]``.

Table 1 (cost), in one run: a BPNet-like net (L=1000, torch, the toy model of
``tests/models.py``) on a random 20 Mb genome, ``n_variants`` sorted variants (90 % SNVs, 10 %
indels of 1-8 bases) scored in memory with ``score="delta"``, one target, ``batch_size="auto"``:

1. the job with ``null="shuffle"`` ÷ the job without a null, and the null's share of the job with
   it, ``(t_null - t_plain) / t_null``; the time to draw the null (the dinucleotide shuffles, no
   model) is timed apart;
2. the same with ``null="matched"``.

Each side is warmed up once on 200 variants (the batch-size probe is cached per model), then run
once; times are this process's CPU seconds (``time.process_time``: one thread, so other work on
a shared machine does not count).

Table 2 (the choice of ``n_null``), on the demo genome of ``tests/variants/test_calibration.py``
with the demo model (GATA output): 150 SNVs of planted GATA core bases and 300 SNVs at least 50 bp
from every planted site, ``null="shuffle"``, for several ``n_null``: the smallest p-value
possible, the fraction of GATA core SNVs with p < 0.01, the KS test of the far SNVs' p-values
(ties split at random, as the test does) against uniform, and the relative standard error of an
empirical p-value at p = 0.01, ``sqrt((1 - p) / (p n))``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from typing import Any

import _common
import models
import numpy as np

LENGTH = 1000
GENOME = 20_000_000


def make_data(n: int, seed: int = 0) -> tuple[dict[str, str], dict[str, list[Any]]]:
    rng = np.random.default_rng(seed)
    genome = "".join(rng.choice(np.array(list("ACGT")), GENOME))
    positions = np.sort(rng.choice(np.arange(2_000, GENOME - 2_000), n, replace=False)) + 1
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


def cost_rows(n_variants: int, n_null: int) -> list[_common.Row]:
    import seqattrib as sa
    from seqattrib.io.fingerprint import sequences_fingerprint
    from seqattrib.variants.catalog import GenomeText, catalog
    from seqattrib.variants.effects import _content_fingerprint
    from seqattrib.variants.null import draw_null
    from seqattrib.variants.records import open_records

    genome, rows = make_data(n_variants)
    small = {k: v[:200] for k, v in rows.items()}
    model = models.torch_model("bpnet", models.bpnet_weights(), "NCL")

    def job(variants: dict[str, list[Any]], **null: Any) -> Any:
        return sa.variant_effects(
            model, genome, variants, length=LENGTH, score="delta", batch_size="auto", **null
        )

    variants = [_common.Variant("plain", lambda: job(rows), lambda: job(small))]
    for kind in ("shuffle", "matched"):
        variants.append(
            _common.Variant(
                kind,
                lambda kind=kind: job(rows, null=kind, n_null=n_null),
                lambda kind=kind: job(small, null=kind, n_null=200),
            )
        )
    _common.log(f"{n_variants} variants, n_null={n_null}")
    times = _common.interleaved(variants, 1, clock=time.process_time)
    records = open_records(rows, "bench")
    found = catalog(records, GenomeText(genome, "bench"), LENGTH, "bench")
    prints = (_content_fingerprint(rows, records), sequences_fingerprint(genome))
    table = []
    for kind in ("shuffle", "matched"):
        start = time.process_time()
        draw_null(kind, n_null, found, genome, {"chr1": GENOME}, LENGTH, 0, 0, prints, "bench")
        draw = time.process_time() - start
        share = (times[kind] - times["plain"]) / times[kind]
        table.append(
            _common.Row.ratio_row(
                "BPNet-like (L=1000)",
                "torch",
                f"job with null={kind!r} ÷ job without",
                f"{n_variants} variants ({found.n} kept), n_null={n_null}, batch_size=auto; "
                f"the null's share of the job: {share:.0%}; drawing the null (no model): "
                f"{draw:.1f} s; plain job {found.n / times['plain']:.0f} variants/s",
                times["plain"],
                times[kind],
                times[kind] / times["plain"],
                "—",
            )
        )
    return table


def calibration_table(n_nulls: list[int]) -> str:
    sys.path.insert(0, str(_common.REPO / "tests" / "variants"))
    spec = importlib.util.spec_from_file_location(
        "test_calibration", _common.REPO / "tests" / "variants" / "test_calibration.py"
    )
    assert spec is not None and spec.loader is not None
    calibration: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibration)
    import scipy.stats

    import seqattrib as sa
    from seqattrib.demo import load_data, torch_model
    from seqattrib.io.fingerprint import sequences_fingerprint
    from seqattrib.variants.catalog import GenomeText, catalog
    from seqattrib.variants.effects import _content_fingerprint
    from seqattrib.variants.null import draw_null
    from seqattrib.variants.records import open_records

    data = load_data()
    genome = calibration._demo_genome(data)
    model = torch_model()
    rng = np.random.default_rng(0)
    core = calibration._core_snvs(data, genome)
    core = [core[i] for i in rng.choice(len(core), 150, replace=False)]
    far = calibration._far_snvs(data, genome, 300, rng)
    snvs = sorted(set(core + far))
    table = {
        "chrom": ["demo"] * len(snvs),
        "pos": [s[0] for s in snvs],
        "ref": [s[1] for s in snvs],
        "alt": [s[2] for s in snvs],
    }
    is_core = np.array([s in set(core) for s in snvs])
    common = dict(length=200, target=0, score="delta", batch_size=256)
    records = open_records(table, "bench")
    found = catalog(records, GenomeText(genome, "bench"), 200, "bench")
    prints = (_content_fingerprint(table, records), sequences_fingerprint(genome))
    lines = [
        "| n_null | smallest p | GATA core SNVs at p < 0.01 | KS p, far SNVs (ties split) "
        "| relative SE at p = 0.01 | null drawn and scored (s) |",
        "|---|---|---|---|---|---|",
    ]
    for n_null in n_nulls:
        _common.log(f"calibration, n_null={n_null}")
        start = time.perf_counter()
        drawn = draw_null(
            "shuffle", n_null, found, genome, {"demo": 500_000}, 200, 0, 0, prints, ""
        )
        null = np.abs(
            sa.variant_effects(model, drawn.contigs, drawn.table, **common).scores["delta"]
        )
        seconds = time.perf_counter() - start
        result = sa.variant_effects(
            model, genome, table, null="shuffle", n_null=n_null, random_state=0, **common
        )
        p = result.derived["pvalue_delta"]
        score = np.abs(result.scores["delta"][~is_core])
        above = (null[None] > score[:, None]).sum(axis=1)
        tied = (null[None] == score[:, None]).sum(axis=1)
        u = np.random.default_rng(1).random(len(score))
        ks = scipy.stats.kstest((above + u * (tied + 1)) / (n_null + 1), "uniform").pvalue
        se = np.sqrt(0.99 / (0.01 * n_null))
        lines.append(
            f"| {n_null:,} | {1 / (n_null + 1):.2g} | {np.mean(p[is_core] < 0.01):.0%} | "
            f"{ks:.3g} | {se:.0%} | {seconds:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-variants", type=int, default=10_000)
    parser.add_argument("--n-null", type=int, default=10_000)
    parser.add_argument("--calibration", default="100,500,2000,10000")
    args = parser.parse_args(argv)
    import torch

    lines = _common.machine_description({"torch": torch})
    rows = cost_rows(args.n_variants, args.n_null)
    calibration = calibration_table([int(n) for n in args.calibration.split(",")])
    print("\n".join(lines))
    print(f"load average at end (1/5/15 min): {_common.load_average()}\n")
    print(_common.markdown_table(rows))
    print()
    print(calibration)


if __name__ == "__main__":
    _common.run_main(main)
