"""Benchmark of fast ISM (``seqattrib.ism(fast=...)``) on published model architectures; prints
one table of ratios measured in one run.

Run ``python benchmarks/bench_fast_ism.py [--quick] [--models NAME,...] [--no-tangermeme]``.

Models (random weights, ``tests/published_models.py`` and ``tests/models.py``): the BPNet-like
and Basset-like benchmark models (L=1000, 64 filters), bpnet-lite's BPNet in a CountWrapper
(2,114 bp in, 1,000 out, 8 dilated layers, 64 filters, the control input left at None),
Basset (500 bp), a small conv net (500 bp), enformer-pytorch's Enformer at a small size (dim 48,
one transformer layer, 2,048 bp in; read from its torch.export graph, torch.fx cannot trace it)
in torch; the BPNet-like model, chrombpnet's dilated
residual model (2,114 bp, 64 filters, counts head), CREsted's topic CNN with same-padded max
pooling (500 bp), Basset and the small conv net in Keras 3 on TensorFlow.

Per model, one full scan of one sequence (3 L mutants), target 0:

1. ``fast=True`` ÷ ``fast=False``, both at ``batch_size="auto"`` (the default), and the path
   ``fast="auto"`` takes with the ratio its cost model predicted;
2. (torch) tangermeme ``saturation_mutagenesis(fast=True)`` ÷ ours ``fast=True``, at
   tangermeme's default batch size (32) and at its best one (the fastest of 16-256 on a quarter
   of the sequence), ``hypothetical=True``. tangermeme skips its fast path for jobs it predicts
   under 30 s; that threshold is set to 0 here so ``fast=True`` runs its fast path (or its own
   fallback, which it warns about).

Every time is CPU seconds (``time.process_time``) of one call on one thread (torch and
TensorFlow set to one thread), after a warm-up call on half the sequence (tracing, the batch
size probe). ``--quick`` scans a window of positions instead (a smoke test, not the benchmark).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import _common
import numpy as np
import torch  # before TensorFlow

_common.one_thread(torch)

import models  # noqa: E402
import published_models as published  # noqa: E402
import tensorflow as tf  # noqa: E402
import transformer_models  # noqa: E402
from _common import (  # noqa: E402
    Row,
    log,
    machine_description,
    markdown_table,
    meets,
    relative_error,
    tangermeme_ism,
)

_common.one_thread(tf=tf)
tf.get_logger().setLevel("ERROR")

import seqattrib  # noqa: E402
from seqattrib.attribution.mutagenesis import choice  # noqa: E402
from seqattrib.attribution.mutagenesis.plan import FastPlan  # noqa: E402

TANGERMEME_DEFAULT_BATCH = 32
TANGERMEME_SIZES = (16, 32, 64, 128, 256)


#: Targets of fast ÷ exact, and the models tangermeme runs on (torch).
TARGETS = {"bpnet": "≤ 0.20", "bpnet-lite": "≤ 0.35", "chrombpnet": "≤ 0.40"}
TANGERMEME_MODELS = {"bpnet", "basset", "bpnet-lite", "basset-500", "small-500"}

#: Models of this benchmark only (``fast="auto"``'s test covers ``published.BENCHMARK``):
#: Enformer-class, (N, L, 4) in, 256 bins of 8 bp cropped to 16, the 4 central bins summed.
EXTRA = {
    "enformer": published.BenchmarkModel(
        "enformer-pytorch Enformer, dim 48, 1 layer (2048 bp → 16 bins)",
        "torch",
        2048,
        transformer_models.enformer_small,
        output_fn=transformer_models.central_bins(transformer_models.ENFORMER_BINS, 4, "human"),
    )
}
#: torch models that take (N, L, 4).
CHANNELS_LAST = {"enformer"}


# --------------------------------------------------------------------------- timing
def cpu_seconds(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


# --------------------------------------------------------------------------- ours
def ours(spec: Any, model: Any, X: np.ndarray, window: tuple[int, int] | None, fast: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return seqattrib.ism(
            model, X, target=0, output_fn=spec.output_fn, positions=window, fast=fast
        )


def auto_choice(model: Any) -> tuple[str, float | None, str]:
    """The path ``fast="auto"`` took on a CPU, the predicted fast ÷ exact, and why."""
    entries = list(choice._PLANS.get(model, {}).values())
    if not entries:
        return "exact", None, "no plan"
    plan = entries[0]
    if not isinstance(plan, FastPlan):
        return "exact", None, f"refused: {plan.reason}"
    path = "fast" if plan.cost_ratio <= choice.AUTO_MAX_COST_RATIO else "exact"
    return path, plan.cost_ratio, ""


# --------------------------------------------------------------------------- tangermeme
def tangermeme(
    module: Any, model: Any, X: np.ndarray, window: tuple[int, int], batch: int, notes: list[str]
) -> np.ndarray:
    return tangermeme_ism(
        module,
        model,
        torch.from_numpy(X),
        window,
        batch_size=batch,
        target=0,
        fast=True,
        notes=notes,
    )


# --------------------------------------------------------------------------- one model
def run_model(
    name: str, spec: Any, quick: bool, module: Any, rows: list[Row], notes: list[str]
) -> None:
    model = spec.build()
    layout = "NCL" if spec.framework == "torch" and name not in CHANNELS_LAST else "NLC"
    X = models.random_one_hot(1, spec.length, seed=1, layout=layout)
    L = spec.length
    window = (L // 2 - 50, L // 2 + 50) if quick else (0, L)
    warm = (window[0], window[0] + (window[1] - window[0]) // 2)
    scan = f"N=1, positions {window[0]}:{window[1]} ({3 * (window[1] - window[0])} mutants)"
    log(f"{name}: warm-up")
    ours(spec, model, X, warm, "auto")
    path, predicted, why = auto_choice(model)
    for fast in (True, False):
        ours(spec, model, X, warm, fast)
    log(f"{name}: fast=True, fast=False")
    t_fast, fast_scores = cpu_seconds(lambda: ours(spec, model, X, window, True))
    t_exact, exact_scores = cpu_seconds(lambda: ours(spec, model, X, window, False))
    ratio = t_fast / t_exact
    right = (path == "fast") == (ratio < 1.0)
    target = TARGETS.get(name, "")
    predicted_text = "refused" if predicted is None else f"{predicted:.2f}"
    rows.append(
        Row(
            spec.label,
            spec.framework,
            "fast ÷ exact",
            f"{scan}; batch_size auto; auto took **{path}** (predicted ratio {predicted_text}"
            f"{', ' + why if why else ''}; {'right' if right else '**wrong**'} by this timing)",
            f"{t_fast:.2f}",
            f"{t_exact:.2f}",
            ratio,
            target,
            meets(ratio, target),
        )
    )
    notes.append(
        f"check {spec.label} {spec.framework}: fast vs exact max|diff| / max|exact| = "
        f"{relative_error(fast_scores, exact_scores):.1e}"
    )
    if module is None or name not in TANGERMEME_MODELS:
        return
    log(f"{name}: tangermeme")
    start, end = window
    sweep = (start, start + (end - start) // 4)
    fallbacks: list[str] = []
    tangermeme(module, model, X, (start, start + 8), TANGERMEME_DEFAULT_BATCH, [])  # warm-up
    probe = {
        b: cpu_seconds(lambda b=b: tangermeme(module, model, X, sweep, b, []))[0]
        for b in TANGERMEME_SIZES
    }
    best = min(probe, key=lambda b: probe[b])
    sizes = (
        [TANGERMEME_DEFAULT_BATCH]
        if best == TANGERMEME_DEFAULT_BATCH
        else [TANGERMEME_DEFAULT_BATCH, best]
    )
    theirs_scores = None
    for batch in sizes:
        t_theirs, theirs_scores = cpu_seconds(
            lambda batch=batch: tangermeme(module, model, X, window, batch, fallbacks)
        )
        which = "default" if batch == TANGERMEME_DEFAULT_BATCH else "best"
        also = " (also its best)" if best == TANGERMEME_DEFAULT_BATCH else ""
        rows.append(
            Row(
                spec.label,
                spec.framework,
                "tangermeme fast=True ÷ ours fast=True",
                f"{scan}; tangermeme batch_size={batch}, its {which}{also} (sweep "
                + ", ".join(f"{b}: {s:.2f} s" for b, s in probe.items())
                + f" on positions {sweep[0]}:{sweep[1]}); ours batch_size auto",
                f"{t_fast:.2f}",
                f"{t_theirs:.2f}",
                t_theirs / t_fast,
                "≥ 1.5" if name == "bpnet" else "",
                meets(t_theirs / t_fast, "≥ 1.5") if name == "bpnet" else "—",
            )
        )
    hypothetical = seqattrib.ism_to_hypothetical(fast_scores, alphabet_axis=-2)
    notes.append(
        f"check {spec.label} torch: ours (hypothetical) vs tangermeme, max|diff| / "
        f"max|tangermeme| = {relative_error(hypothetical[..., start:end], theirs_scores):.1e}"
    )
    for reason in sorted(set(fallbacks)):
        notes.append(f"tangermeme warned ({spec.label}): {reason}")


# --------------------------------------------------------------------------- main
def header(version: str) -> list[str]:
    import keras

    lines = machine_description({"torch": torch, "tensorflow": tf, "keras": keras})
    lines = [line for line in lines if not line.startswith("torch threads")]
    lines[2] += f", tangermeme {version}"
    lines.append("threads: one (torch set_num_threads(1), TensorFlow intra/inter-op 1)")
    return lines


def main(argv: list[str] | None = None) -> None:
    specs = {**published.BENCHMARK, **EXTRA}
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a window of 100 positions")
    parser.add_argument("--models", default=",".join(specs), help="comma-separated names")
    parser.add_argument("--no-tangermeme", action="store_true")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = set(names) - set(specs)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {sorted(specs)}")
    module, version = None, "not used"
    if not args.no_tangermeme:
        try:
            import tangermeme
            import tangermeme.saturation_mutagenesis as module

            version = str(getattr(tangermeme, "__version__", "?"))
        except Exception as exc:  # noqa: BLE001 - a benchmark-only dependency
            module, version = None, f"not available ({type(exc).__name__}: {exc})"
    rows: list[Row] = []
    notes: list[str] = []
    for name in names:
        run_model(name, specs[name], args.quick, module, rows, notes)
    print("\n".join(header(version)))
    print()
    print(markdown_table(rows))
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
