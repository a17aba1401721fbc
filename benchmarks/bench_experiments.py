"""Benchmark of the in-silico experiments (``dependency_map``, ``marginalize``, ``space``)
against what they replace; prints one table.

Run ``python benchmarks/bench_experiments.py [--quick] [--models crested,bpnet]``. Models: a
CREsted-like net (L=500, 8 outputs) and a BPNet-like net (L=1000, 5 outputs), torch, input
layout NCL. Every ratio is measured in this run: the variants of a comparison are warmed up once
and then timed in turn (interleaved), median over the repeats. Each comparison first checks that
both sides give the same numbers.

Rows, per model:

1. dependency map: a brute-force loop ÷ ours, on the same double mutants of a window of
   ``--window`` positions of ``--n-dependency`` sequences. The loop is what a user writes: per
   sequence, per single mutant (i, a), its double mutants at every other position built with
   numpy, predicted in batches of ``--batch-size``, and the effect changes differenced on the
   host (the definition as written: every ordered pair of substitutions); ours runs each
   unordered pair once (the change is symmetric) on the engine with the same batch size, with
   its default ``fast="auto"`` (fast ISM's windows for the double mutants where the model
   allows them);
2. marginalize: tangermeme 1.6 ``marginalize`` ÷ ours, the same ``--n-backgrounds``
   backgrounds, one motif at the same position, every output, the same batch size;
3. space: tangermeme ``space`` ÷ ours, two motifs at ``--n-distances`` gaps, one orientation
   (tangermeme's ``space`` places the motifs as given), the same backgrounds and batch size.

Each comparison has a second row with ours at ``batch_size="auto"`` (the default; its probe runs
during the warm-up), against the other side at ``--batch-size``.

tangermeme's calls are given the backgrounds as a torch tensor on the CPU and ``device="cpu"``;
ours runs on the same device. ``--quick`` uses few backgrounds and a small window (a smoke test
of every path; its ratios are not the benchmark). Timings are wall-clock on a shared machine:
the load average is printed before and after.
"""

from __future__ import annotations

import argparse
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
from _common import Row, Variant, interleaved, load_average, log, relative_error

LENGTHS = {"crested": 500, "bpnet": 1000}
LABELS = {"crested": "CREsted-like (L=500)", "bpnet": "BPNet-like (L=1000)"}
MOTIFS = ("GATAAG", "CACGTG")  # GATA and E-box


def brute_dependency(model: Any, X: np.ndarray, window: tuple[int, int], batch: int) -> Any:
    """(n, K, P, 4, P, 4) double-mutant effect changes by a per-sequence loop (NCL input)."""
    import torch

    start, end = window
    p = end - start
    eye = np.eye(4, dtype=np.float32)

    def predict(batch_x: np.ndarray) -> np.ndarray:
        outs = []
        with torch.no_grad():
            for lo in range(0, len(batch_x), batch):
                outs.append(model(torch.from_numpy(batch_x[lo : lo + batch])).numpy())
        return np.concatenate(outs)

    def mutants_of(seq: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Every single mutant of the window of seq (L, 4): (M, 4, L) NCL and their (i, a)."""
        where = [(i, a) for i in range(start, end) for a in range(4) if seq[i, a] != 1]
        out = np.repeat(seq.T[None], len(where), axis=0)
        for r, (i, a) in enumerate(where):
            out[r, :, i] = eye[a]
        return out, where

    n = len(X)
    result = None
    for s in range(n):
        seq = X[s].T  # (L, 4)
        reference = predict(X[s : s + 1])[0]
        singles, where = mutants_of(seq)
        single_out = predict(singles) - reference
        if result is None:
            result = np.zeros((n, len(reference), p, 4, p, 4), np.float32)
        index = {mutation: r for r, mutation in enumerate(where)}
        for r, (i, a) in enumerate(where):
            doubles, others = mutants_of(singles[r].T)
            keep = [k for k, (j, _) in enumerate(others) if j != i]
            changed = predict(doubles[keep]) - (reference + single_out[r])
            js = np.array([others[k][0] - start for k in keep])
            bs = np.array([others[k][1] for k in keep])
            rbs = np.array([index[others[k]] for k in keep])
            result[s, :, i - start, a, js, bs] = changed - single_out[rbs]
    return result


def compared(
    label: str,
    comparison: str,
    settings: str,
    ours: Any,
    theirs: Variant,
    repeats: int,
    target: str,
) -> list[Row]:
    """Time ours at the batch size of theirs and at ``batch_size="auto"`` (its probe runs in
    the warm-up) against theirs, interleaved; one row each."""
    variants = [Variant("ours", ours), Variant("ours auto", lambda: ours(size="auto")), theirs]
    times = interleaved(variants, repeats)
    return [
        Row.ratio_row(
            label,
            "torch",
            comparison,
            f"{settings}; ours {'the same batch' if name == 'ours' else 'batch_size=auto'}",
            times[name],
            times[theirs.name],
            times[theirs.name] / times[name],
            target,
        )
        for name in ("ours", "ours auto")
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="crested")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--n-dependency", type=int, default=2)
    parser.add_argument("--n-backgrounds", type=int, default=256)
    parser.add_argument("--n-distances", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.window, args.n_dependency, args.n_backgrounds = 4, 1, 8
        args.n_distances, args.repeats = 2, 1
    frameworks = _common.start_frameworks(["torch"])
    torch = frameworks["torch"]
    _common.one_thread(torch)
    import tangermeme.marginalize
    import tangermeme.space

    import seqattrib as sa

    lines = _common.machine_description(frameworks)
    notes: list[str] = []
    table: list[Row] = []
    batch = args.batch_size
    for kind in args.models.split(","):
        length = LENGTHS[kind]
        weights = models.crested_weights() if kind == "crested" else models.bpnet_weights()
        model = models.torch_model(kind, weights, "NCL")
        label = LABELS[kind]

        # 1. dependency map against the brute-force loop
        X = models.random_one_hot(args.n_dependency, length, seed=1, layout="NCL")
        c = length // 2
        window = (c - args.window // 2, c - args.window // 2 + args.window)

        def ours_dep(
            size: Any = batch, model: Any = model, X: np.ndarray = X, window: Any = window
        ) -> Any:
            return sa.dependency_map(
                model, X, target=None, positions=window, return_effects=True, batch_size=size
            )[1]

        def loop_dep(model: Any = model, X: np.ndarray = X, window: Any = window) -> Any:
            return brute_dependency(model, X, window, batch)

        error = relative_error(ours_dep(), loop_dep())
        notes.append(f"{label}: dependency map, max relative difference to the loop {error:.1e}")
        m = 3 * args.window
        rows = args.n_dependency * m * (m + 1) // 2  # each unordered pair once, and singles
        loop_rows = args.n_dependency * (1 + m + m * (m - 3))  # each ordered pair
        log(f"{kind}: dependency map, {rows} mutants")
        table += compared(
            label,
            "dependency map: loop ÷ ours",
            f"N={args.n_dependency}, P={args.window}, mutants: ours {rows} (fast='auto'), "
            f"loop {loop_rows} (whole forward passes); loop batch {batch}",
            ours_dep,
            Variant("loop", loop_dep),
            args.repeats,
            "≥ 1.0",
        )

        # 2. marginalize and 3. space against tangermeme, the same backgrounds
        B = models.random_one_hot(args.n_backgrounds, length, seed=2, layout="NCL")
        B_torch = torch.from_numpy(B)
        position = length // 2 - 3

        def ours_marg(
            size: Any = batch, model: Any = model, B: np.ndarray = B, p: int = position
        ) -> Any:
            return sa.marginalize(model, B, MOTIFS[0], position=p, target=None, batch_size=size)

        def theirs_marg(model: Any = model, B: Any = B_torch, p: int = position) -> Any:
            return tangermeme.marginalize.marginalize(
                model, B, MOTIFS[0], start=p, batch_size=batch, device="cpu"
            )

        ours_out, theirs_out = ours_marg(), theirs_marg()
        error = max(
            relative_error(ours_out[k], theirs_out[k].numpy()) for k in range(2)
        )  # fmt: skip
        notes.append(f"{label}: marginalize, max relative difference to tangermeme {error:.1e}")
        log(f"{kind}: marginalize, {args.n_backgrounds} backgrounds")
        table += compared(
            label,
            "marginalize: tangermeme ÷ ours",
            f"{args.n_backgrounds} backgrounds, {2 * args.n_backgrounds} rows; tangermeme batch "
            f"{batch}",
            ours_marg,
            Variant("tangermeme", theirs_marg),
            args.repeats,
            "≥ 2.0",
        )
        gaps = list(range(0, 2 * args.n_distances, 2))
        start = length // 2 - 10

        def ours_space(
            size: Any = batch,
            model: Any = model,
            B: np.ndarray = B,
            s: int = start,
            gaps: list[int] = gaps,
        ) -> Any:
            return sa.space(
                model, B, list(MOTIFS), distances=gaps, orientations="++", position=s,
                target=None, batch_size=size,
            )  # fmt: skip

        def theirs_space(
            model: Any = model, B: Any = B_torch, s: int = start, gaps: list[int] = gaps
        ) -> Any:
            spacing = torch.tensor(gaps)[:, None]
            return tangermeme.space.space(
                model, B, list(MOTIFS), spacing, start=s, batch_size=batch, device="cpu"
            )

        (before, after), (t_before, t_after) = ours_space(), theirs_space()
        error = max(
            relative_error(before, t_before.numpy()),
            relative_error(after[:, 0], t_after.numpy()),
        )
        notes.append(f"{label}: space, max relative difference to tangermeme {error:.1e}")
        log(f"{kind}: space, {args.n_backgrounds} backgrounds x {len(gaps)} gaps")
        n_rows = args.n_backgrounds * (len(gaps) + 1)
        table += compared(
            label,
            "space: tangermeme ÷ ours",
            f"{args.n_backgrounds} backgrounds x {len(gaps)} gaps, {n_rows} rows; tangermeme "
            f"batch {batch}",
            ours_space,
            Variant("tangermeme", theirs_space),
            args.repeats,
            "≥ 2.0",
        )
    lines.append(f"load average after: {load_average()}")
    _common.print_report(
        table,
        "Ratios above 1: ours is faster. Each pair computed the same numbers (notes).",
        [*lines, *notes],
    )


if __name__ == "__main__":
    _common.run_main(main)
