"""Benchmark of in-silico mutagenesis (``seqattrib.ism``) against what it replaces; prints one
table.

Run ``python benchmarks/bench_ism.py [--quick] [--backends torch,tensorflow]``. Models: a
BPNet-like net (L=1000, 64 filters, 9 dilated residual layers, 5 outputs) and a CREsted-like net
(L=500, 8 outputs), built from one weight dict in torch (input layout NCL) and Keras 3 on
TensorFlow (NLC). Every ratio is measured in this run: the variants of a comparison are warmed up
once and then timed in turn (interleaved), median over the repeats. One "mutant" is one
single-base substitution: 3 per position of a one-hot sequence, 3·L per full scan.

Rows, per model and backend:

1. our full ISM scan ÷ bare forward passes over the same 3·L·N mutants, prebuilt (untimed) as
   device batches of the same size and fed through the model's forward only, in inference mode
   (no mutant building, scoring, reduction or host copy);
2. (torch, BPNet-like) tangermeme ``saturation_mutagenesis`` ÷ ours, with ``fast=False`` and with
   ``fast=True`` (fastISM), the same batch size (tangermeme is imported lazily: 'not available'
   when it is missing or fails);
3. a per-sequence host-copy loop ÷ ours (CREsted's pattern: per sequence, all 3·L mutants built
   as host copies with numpy, predicted in batches, outputs copied to the host and scored there),
   and the peak memory of each in a fresh subprocess per variant: peak RSS (VmHWM, reset just
   before the call) and tracemalloc's peak of host (numpy) allocations;
4. device→host bytes per sequence, counted by the backend, vs K·L·4·4;
5. fast ISM (``fast=True``: only the windows a mutation can change are recomputed, up to the
   first global layer) ÷ the exact path (``fast=False``), on the BPNet-like model and a
   Basset-like one (L=1000: conv 7, BatchNorm, relu, max-pool 3, conv 5, BatchNorm, relu,
   max-pool 2, flatten, dense 32, dense 5; 64 filters), one full scan, in both frameworks; and
   (torch) tangermeme ``fast=True`` ÷ ours ``fast=True`` on the same model. Rows 1-4 run the
   exact path (``fast=False``). ``--fast-models`` picks the models of row 5 (``none`` skips it),
   ``--models none`` skips rows 1-4.

``--quick`` scans a window of positions instead of whole sequences (a smoke test of every path;
its ratios are not the benchmark). Timings are wall-clock on a shared machine: the load average
is printed before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
from _common import (
    Row,
    Variant,
    fmt_bytes,
    fmt_mib,
    interleaved,
    load_average,
    log,
    machine_description,
    markdown_table,
    peak_rss,
    probe_in_subprocess,
    relative_error,
    tangermeme_ism,
)

import seqattrib

Tensor = Any
BATCH = 128
TARGET = 0
K_MANY = (0, 1, 2)
LENGTHS = {"bpnet": 1000, "crested": 500, "basset": 1000}
LABELS = {
    "bpnet": "BPNet-like (L=1000)",
    "crested": "CREsted-like (L=500)",
    "basset": "Basset-like (L=1000)",
}
#: Positions scanned by the warm-up calls: 150 mutants, one full batch of 128 and a partial one
#: (so TensorFlow has traced both batch shapes before anything is timed).
WARM_WINDOW = (0, 50)


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Sizes:
    """Sequences per comparison, for one model.

    ``engine``: rows 1 and 4 (ours vs bare); ``reference``: rows 2 and 3 (tangermeme, host loop);
    when both sizes and repeats are equal, all variants are timed in one interleaved group.
    """

    engine: int
    reference: int
    memory: int
    engine_repeats: int
    reference_repeats: int
    window: int | None = None  # None: full scans; else positions (0, window) only (--quick)


@dataclass(frozen=True)
class Plan:
    sizes: dict[str, Sizes]


FULL = Plan(
    sizes={
        # 3000 mutants per sequence at ~5-10 ms per forward row on 2 shared cores: a BPNet-like
        # full scan is 15-30 s per sequence and variant, so rows 2 and 3 use one sequence and
        # one repeat there (tangermeme fast=True alone re-captures the model on every call).
        "bpnet": Sizes(engine=2, reference=1, memory=1, engine_repeats=2, reference_repeats=1),
        "crested": Sizes(engine=4, reference=4, memory=2, engine_repeats=2, reference_repeats=2),
    }
)
QUICK = Plan(
    sizes={
        "bpnet": Sizes(
            engine=2, reference=1, memory=1, engine_repeats=1, reference_repeats=1, window=64
        ),
        "crested": Sizes(
            engine=2, reference=2, memory=1, engine_repeats=1, reference_repeats=1, window=128
        ),
    }
)


def weights_for(kind: str) -> dict[str, np.ndarray]:
    if kind == "basset":
        return models.basset_weights(LENGTHS["basset"], n_outputs=5, filters=64)
    return models.bpnet_weights() if kind == "bpnet" else models.crested_weights()


def window_of(kind: str, sizes: Sizes) -> tuple[int, int]:
    length = LENGTHS[kind]
    return (0, length) if sizes.window is None else (0, min(sizes.window, length))


# --------------------------------------------------------------------------- frameworks
class TorchSide:
    """Framework code of the reference loops (never the package's backend)."""

    name = "torch"
    layout = "NCL"

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def build(self, kind: str) -> Any:
        model = models.torch_model(kind, weights_for(kind), layout=self.layout)
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()

    def tensor(self, array: np.ndarray) -> Tensor:
        return self.torch.from_numpy(np.ascontiguousarray(array))

    def forward(self, model: Any) -> Callable[[Tensor], Tensor]:
        """The model's forward pass in inference mode."""
        torch = self.torch

        def call(x: Tensor) -> Tensor:
            with torch.inference_mode():
                return model(x)

        return call

    def host(self, tensor: Tensor) -> np.ndarray:
        return tensor.numpy()


class TensorFlowSide:
    name = "tensorflow"
    layout = "NLC"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf

    def build(self, kind: str) -> Any:
        return models.keras_model(kind, weights_for(kind), LENGTHS[kind], layout=self.layout)

    def tensor(self, array: np.ndarray) -> Tensor:
        return self.tf.constant(np.ascontiguousarray(array))

    def forward(self, model: Any) -> Callable[[Tensor], Tensor]:
        """A compiled forward pass (as fast as TF offers; not ``model.predict``)."""
        return self.tf.function(lambda x: model(x, training=False), reduce_retracing=True)

    def host(self, tensor: Tensor) -> np.ndarray:
        return tensor.numpy()


Side = TorchSide | TensorFlowSide


def make_side(name: str) -> Side:
    return TorchSide() if name == "torch" else TensorFlowSide()


# --------------------------------------------------------------------------- the mutants
def mutants(
    x: np.ndarray, layout: str, window: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every single-base substitution of one one-hot sequence in ``window``, as host copies.

    Returns (rows, position, base): rows of shape (n, *x.shape), position-major, bases in ACGT
    order (the order of ours), the reference base left out.
    """
    nlc = x.T if layout == "NCL" else x
    start, end = window
    position, base = np.nonzero(nlc[start:end] == 0)
    position = position + start
    rows = np.repeat(x[None], len(position), axis=0)
    index = np.arange(len(position))
    if layout == "NCL":
        rows[index, :, position] = 0
        rows[index, base, position] = 1
    else:
        rows[index, position, :] = 0
        rows[index, position, base] = 1
    return rows, position, base


def bare_batches(side: Side, X: np.ndarray, window: tuple[int, int]) -> list[Tensor]:
    """The mutants of X, built beforehand (untimed) and cut into device batches like ours."""
    rows = np.concatenate([mutants(x, side.layout, window)[0] for x in X])
    return [side.tensor(rows[s : s + BATCH]) for s in range(0, len(rows), BATCH)]


def run_bare(forward: Callable[[Tensor], Tensor], batches: list[Tensor]) -> None:
    for batch in batches:
        forward(batch)


def host_loop(
    side: Side,
    forward: Callable[[Tensor], Tensor],
    X: np.ndarray,
    window: tuple[int, int],
    target: int = TARGET,
) -> np.ndarray:
    """CREsted's pattern: per sequence, build all its mutants as host copies, predict them in
    batches, copy every output to the host and score there. Returns f(mutant) - f(reference)
    in the layout of X, 0 at the reference base (what ``seqattrib.ism`` returns)."""
    out = np.zeros(X.shape, np.float32)
    for i, x in enumerate(X):
        rows, position, base = mutants(x, side.layout, window)
        reference = side.host(forward(side.tensor(x[None])))[0, target]
        predictions = np.empty(len(rows), np.float32)
        for s in range(0, len(rows), BATCH):
            predictions[s : s + BATCH] = side.host(forward(side.tensor(rows[s : s + BATCH])))[
                :, target
            ]
        if side.layout == "NCL":
            out[i, base, position] = predictions - reference
        else:
            out[i, position, base] = predictions - reference
    return out


def ours(
    model: Any, X: np.ndarray, window: tuple[int, int], length: int, **kwargs: Any
) -> np.ndarray:
    """``seqattrib.ism`` over ``window`` (``positions=None``, its default, for a full scan)."""
    positions = None if window == (0, length) else window
    kwargs.setdefault("target", TARGET)
    kwargs.setdefault("fast", False)
    return seqattrib.ism(model, X, positions=positions, **kwargs)


# --------------------------------------------------------------------------- tangermeme
def load_tangermeme() -> tuple[Any, str]:
    """tangermeme's saturation_mutagenesis module, or None and why not."""
    try:
        import tangermeme
        import tangermeme.saturation_mutagenesis as module
    except Exception as exc:  # noqa: BLE001 - a benchmark-only dependency: report and go on
        return None, f"{type(exc).__name__}: {exc}"
    return module, str(getattr(tangermeme, "__version__", "?"))


def tangermeme_call(
    module: Any, model: Any, X: Tensor, window: tuple[int, int], fast: bool, notes: list[str]
) -> np.ndarray:
    """tangermeme's hypothetical ISM scores (N, 4, W) at this script's batch size and target."""
    return tangermeme_ism(
        module, model, X, window, batch_size=BATCH, target=TARGET, fast=fast, notes=notes
    )


# --------------------------------------------------------------------------- helpers
@dataclass
class Context:
    side: Side
    kind: str
    model: Any
    sizes: Sizes
    rows: list[Row]
    notes: list[str]

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def length(self) -> int:
        return LENGTHS[self.kind]

    @property
    def window(self) -> tuple[int, int]:
        return window_of(self.kind, self.sizes)

    def scan(self, n: int) -> str:
        start, end = self.window
        what = "full scan" if (start, end) == (0, self.length) else f"positions {start}:{end}"
        return f"N={n}, {what} ({3 * (end - start)} mutants/seq), target {TARGET}"

    def add(self, *args: Any) -> None:
        self.rows.append(Row.ratio_row(self.label, self.side.name, *args))


# --------------------------------------------------------------------------- the variants
def ours_variant(
    ctx: Context, X: np.ndarray, results: dict[str, Any], transfers: dict[str, int] | None
) -> Variant:
    backend = seqattrib.get_backend(ctx.model)

    def run() -> None:
        backend.transfers.reset()
        results["ours"] = ours(ctx.model, X, ctx.window, ctx.length, batch_size=BATCH)
        if transfers is not None:
            transfers["to_host"] = backend.transfers.to_host
            transfers["to_device"] = backend.transfers.to_device

    def warm() -> None:
        ours(ctx.model, X[:1], WARM_WINDOW, ctx.length, batch_size=BATCH)

    return Variant("ours", run, warm)


def bare_variant(ctx: Context, X: np.ndarray) -> Variant:
    forward = ctx.side.forward(ctx.model)
    batches = bare_batches(ctx.side, X, ctx.window)
    warm = [*batches[:2], batches[-1]]  # a full batch shape and the last, partial one
    return Variant("bare", lambda: run_bare(forward, batches), lambda: run_bare(forward, warm))


def loop_variant(ctx: Context, X: np.ndarray, results: dict[str, Any]) -> Variant:
    forward = ctx.side.forward(ctx.model)

    def run() -> None:
        results["loop"] = host_loop(ctx.side, forward, X, ctx.window)

    return Variant("loop", run, lambda: host_loop(ctx.side, forward, X[:1], WARM_WINDOW))


def tangermeme_variants(
    ctx: Context, module: Any, X: np.ndarray, results: dict[str, Any], fallbacks: list[str]
) -> tuple[list[Variant], str | None]:
    """tangermeme fast=False and fast=True, warmed up here; ([], why) if a warm-up fails."""
    X_t = ctx.side.tensor(X)
    model = ctx.model
    try:
        log("  tangermeme trial calls, which are its warm-up (fast=True: torch.export's imports)")
        for fast in (False, True):
            tangermeme_call(module, model, X_t[:1], (0, 8) if fast else WARM_WINDOW, fast, [])
    except Exception as exc:  # noqa: BLE001 - a benchmark-only dependency: report and go on
        return [], f"it failed: {type(exc).__name__}: {exc}"
    variants = []
    for fast in (False, True):
        name = f"tangermeme fast={fast}"

        def run(fast: bool = fast, name: str = name) -> None:
            results[name] = tangermeme_call(module, model, X_t, ctx.window, fast, fallbacks)

        variants.append(Variant(name, run, lambda: None))  # warmed by the trial calls above
    return variants, None


# --------------------------------------------------------------------------- 5. fast ISM
def fast_rows(
    side: Side,
    kind: str,
    window: tuple[int, int],
    repeats: int,
    tangermeme: tuple[Any, str] | None,
    rows: list[Row],
    notes: list[str],
    device: str = "cpu",
) -> None:
    """fast ÷ exact ISM on one sequence, and tangermeme fast=True ÷ ours fast=True (torch)."""
    from seqattrib.attribution.mutagenesis import choice
    from seqattrib.attribution.mutagenesis.fast import FastPlan

    model = side.build(kind)
    length = LENGTHS[kind]
    X = models.random_one_hot(1, length, seed=1, layout=side.layout)
    results: dict[str, Any] = {}
    label = LABELS[kind]
    start, end = window

    def variant(fast: bool) -> Variant:
        name = f"ours fast={fast}"

        def run() -> None:
            results[name] = ours(
                model, X, window, length, batch_size=BATCH, fast=fast, device=device
            )

        def warm() -> None:
            ours(model, X, WARM_WINDOW, length, batch_size=BATCH, fast=fast, device=device)

        return Variant(name, run, warm)

    variants = [variant(False), variant(True)]
    fallbacks: list[str] = []
    module = None if tangermeme is None or device != "cpu" else tangermeme[0]
    if module is not None:
        X_t = side.tensor(X)
        try:
            tangermeme_call(module, model, X_t, (0, 8), True, [])  # its warm-up
        except Exception as exc:  # noqa: BLE001 - a benchmark-only dependency
            notes.append(f"tangermeme fast=True failed on {label}: {type(exc).__name__}: {exc}")
            module = None
        else:

            def run_tangermeme() -> None:
                results["tangermeme"] = tangermeme_call(module, model, X_t, window, True, fallbacks)

            variants.append(Variant("tangermeme fast=True", run_tangermeme, lambda: None))
    log(f"{label} {side.name}: fast ISM, {3 * (end - start)} mutants")
    t = interleaved(variants, repeats)
    plan = next(iter(choice._PLANS[model].values()))
    detail = (
        f"{plan.cost_ratio:.2f} of the local prefix's full cost, windows "
        f"{min(plan.widths[1:])}-{max(plan.widths)} positions"
        if isinstance(plan, FastPlan)
        else f"no fast path: {plan.reason}"
    )
    scan = f"N=1, positions {start}:{end} ({3 * (end - start)} mutants), batch_size={BATCH}" + (
        "" if device == "cpu" else f", {device}"
    )
    rows.append(
        Row.ratio_row(
            label,
            side.name,
            "fast ISM ÷ exact ISM",
            f"{scan}; plan: {detail}",
            t["ours fast=True"],
            t["ours fast=False"],
            t["ours fast=True"] / t["ours fast=False"],
            "< 1",
        )
    )
    notes.append(
        f"check {label} {side.name}: fast vs exact, max|diff| / max|exact| = "
        f"{relative_error(results['ours fast=True'], results['ours fast=False']):.1e}"
    )
    if "tangermeme" in results:
        version = tangermeme[1] if tangermeme else "?"
        rows.append(
            Row.ratio_row(
                label,
                side.name,
                "tangermeme fast=True ÷ ours fast=True",
                f"tangermeme {version}, {scan} both; its fastISM capture runs in every call",
                t["ours fast=True"],
                t["tangermeme fast=True"],
                t["tangermeme fast=True"] / t["ours fast=True"],
                "≥ 1.0",
            )
        )
        hypothetical = seqattrib.ism_to_hypothetical(results["ours fast=True"])
        notes.append(
            f"check {label} torch: ours fast (hypothetical) vs tangermeme fast=True, "
            f"max|diff| / max|tangermeme| = "
            f"{relative_error(hypothetical[..., start:end], results['tangermeme']):.1e}"
        )
    for reason in sorted(set(fallbacks)):
        notes.append(f"tangermeme warned ({label}): {reason}")


# --------------------------------------------------------------------------- one model x backend
def benchmark(ctx: Context, tangermeme: tuple[Any, str] | None) -> None:
    side, sizes = ctx.side, ctx.sizes
    X_engine = models.random_one_hot(sizes.engine, ctx.length, seed=1, layout=side.layout)
    X_ref = models.random_one_hot(sizes.reference, ctx.length, seed=1, layout=side.layout)
    merged = (sizes.engine, sizes.engine_repeats) == (sizes.reference, sizes.reference_repeats)
    engine_results: dict[str, Any] = {}
    ref_results: dict[str, Any] = engine_results if merged else {}
    transfers: dict[str, int] = {}
    fallbacks: list[str] = []

    engine = [ours_variant(ctx, X_engine, engine_results, transfers), bare_variant(ctx, X_engine)]
    reference = [loop_variant(ctx, X_ref, ref_results)]
    module = None if tangermeme is None else tangermeme[0]
    if module is not None:
        variants, failure = tangermeme_variants(ctx, module, X_ref, ref_results, fallbacks)
        reference += variants
        if failure is not None:
            log(f"tangermeme not available: {failure}")
            tangermeme = (None, failure)

    if merged:
        log(f"{ctx.label} {side.name}: {ctx.scan(sizes.engine)}; all variants in one group")
        t_engine = t_ref = interleaved(engine + reference, sizes.engine_repeats)
    else:
        log(f"{ctx.label} {side.name}: ours vs bare, {ctx.scan(sizes.engine)}")
        t_engine = interleaved(engine, sizes.engine_repeats)
        log(f"{ctx.label} {side.name}: references, {ctx.scan(sizes.reference)}")
        t_ref = interleaved(
            [ours_variant(ctx, X_ref, ref_results, None), *reference], sizes.reference_repeats
        )

    # 1. ours ÷ bare passes
    ctx.add(
        "ISM ÷ bare forward passes",
        f"{ctx.scan(sizes.engine)}; batch_size={BATCH} both; median of {sizes.engine_repeats}",
        t_engine["ours"],
        t_engine["bare"],
        t_engine["ours"] / t_engine["bare"],
        "≤ 1.05",
    )
    # 2. tangermeme
    if tangermeme is not None:
        tangermeme_rows(ctx, t_ref, ref_results, tangermeme, fallbacks)
    # 3. host-copy loop: time, then memory
    ctx.add(
        "host-copy per-seq loop ÷ ours",
        f"{ctx.scan(sizes.reference)}; loop: numpy mutant copies per sequence, batches of "
        f"{BATCH}, outputs scored on the host; ours batch_size={BATCH}; "
        f"median of {sizes.reference_repeats}",
        t_ref["ours"],
        t_ref["loop"],
        t_ref["loop"] / t_ref["ours"],
        "> 1.0",
    )
    memory_rows(ctx)
    # 4. device -> host bytes per sequence
    bytes_rows(ctx, X_engine, transfers)

    ctx.notes.append(
        f"check {ctx.label} {side.name}: ours vs the host-copy loop, max|diff| / max|loop| = "
        f"{relative_error(ref_results['ours'], ref_results['loop']):.1e}"
    )


def tangermeme_rows(
    ctx: Context,
    t: dict[str, float],
    results: dict[str, Any],
    tangermeme: tuple[Any, str],
    fallbacks: list[str],
) -> None:
    module, version = tangermeme
    n = ctx.sizes.reference
    settings = (
        f"{ctx.scan(n)}; batch_size={BATCH} both; hypothetical=True; "
        f"median of {ctx.sizes.reference_repeats}"
    )
    for fast in (False, True):
        comparison = f"tangermeme saturation_mutagenesis fast={fast} ÷ ours"
        target = "≥ 1.0" if not fast else "—"
        if module is None:
            ctx.rows.append(
                Row(
                    ctx.label,
                    ctx.side.name,
                    comparison,
                    f"not available ({version})",
                    "—",
                    "not available",
                    None,
                    target,
                    "—",
                )
            )
            continue
        name = f"tangermeme fast={fast}"
        extra = ""
        if fast:
            used = "fell back to fast=False (see notes)" if fallbacks else "fastISM path used"
            extra = (
                f"; its 30 s threshold set to 0 so fast=True always attempts fastISM "
                f"(capture + check on every call, timed); {used}"
            )
        row = Row.ratio_row(
            ctx.label,
            ctx.side.name,
            comparison,
            f"tangermeme {version}; {settings}{extra}",
            t["ours"],
            t[name],
            t[name] / t["ours"],
            target,
        )
        if fast:
            row.met = "—"
        ctx.rows.append(row)
        mine = seqattrib.ism_to_hypothetical(results["ours"], alphabet_axis=-2)
        start, end = ctx.window
        ctx.notes.append(
            f"check {ctx.label} torch: ours (hypothetical) vs tangermeme fast={fast}, "
            f"max|diff| / max|tangermeme| = "
            f"{relative_error(mine[..., start:end], results[name]):.1e}"
        )
    for reason in sorted(set(fallbacks)):
        ctx.notes.append(f"tangermeme warned ({ctx.label}): {reason}")


def bytes_rows(ctx: Context, X: np.ndarray, transfers: dict[str, int]) -> None:
    length = ctx.length
    backend = seqattrib.get_backend(ctx.model)
    n = len(X)
    counts = {1: (transfers["to_host"], transfers["to_device"], n, ctx.scan(n))}
    # K targets: one small untimed call (the table crosses whole, whatever the window).
    backend.transfers.reset()
    X_k = X[:2]
    ours(ctx.model, X_k, WARM_WINDOW, length, batch_size=BATCH, target=list(K_MANY))
    counts[len(K_MANY)] = (
        backend.transfers.to_host,
        backend.transfers.to_device,
        len(X_k),
        f"N={len(X_k)}, positions {WARM_WINDOW[0]}:{WARM_WINDOW[1]}, targets {list(K_MANY)}",
    )
    for k, (to_host, to_device, n_seq, what) in counts.items():
        expected = k * length * 4 * 4
        measured = to_host / n_seq
        ctx.rows.append(
            Row(
                ctx.label,
                ctx.side.name,
                f"device→host bytes/seq (K={k})",
                f"{what}; counted at the backend; expected K·L·4·4 = {expected:,} B; "
                f"host→device {to_device / n_seq:,.0f} B/seq",
                fmt_bytes(measured),
                fmt_bytes(expected),
                measured / expected,
                "= 1",
                "yes" if to_host == n_seq * expected else "**no**",
            )
        )


# --------------------------------------------------------------------------- memory
def memory_rows(ctx: Context) -> None:
    n = ctx.sizes.memory
    spec = {"kind": ctx.kind, "side": ctx.side.name, "n": n, "window": list(ctx.window)}
    measured = {name: peak_memory({**spec, "variant": name}) for name in ("ours", "loop")}
    for key, comparison, method in (
        ("rss", "peak RSS, host-copy loop vs ours", measured["ours"]["method"]),
        (
            "traced",
            "peak host allocations, host-copy loop vs ours",
            "tracemalloc peak during the call (numpy and Python allocations; framework "
            "tensors are not traced), same subprocesses",
        ),
    ):
        m_ours, m_loop = measured["ours"][key], measured["loop"][key]
        ctx.rows.append(
            Row(
                ctx.label,
                ctx.side.name,
                comparison,
                f"{ctx.scan(n)}; batch_size={BATCH}; {method}",
                fmt_mib(m_ours),
                fmt_mib(m_loop),
                m_loop / m_ours if m_ours > 0 else None,
                "—",
                "—",
            )
        )


def peak_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak memory of one call, measured in a fresh subprocess (``--memory-probe``)."""
    return probe_in_subprocess(__file__, spec)


def memory_probe(spec: dict[str, Any]) -> None:
    """Run one variant once in this (fresh) process and print its peak memory as JSON."""
    side = make_side(spec["side"])
    model = side.build(spec["kind"])
    X = models.random_one_hot(spec["n"], LENGTHS[spec["kind"]], seed=1, layout=side.layout)
    window = (int(spec["window"][0]), int(spec["window"][1]))
    length = LENGTHS[spec["kind"]]
    if spec["variant"] == "ours":

        def call(data: np.ndarray, w: tuple[int, int]) -> np.ndarray:
            return ours(model, data, w, length, batch_size=BATCH)
    else:
        forward = side.forward(model)

        def call(data: np.ndarray, w: tuple[int, int]) -> np.ndarray:
            return host_loop(side, forward, data, w)

    call(X[:1], WARM_WINDOW)  # one-time costs (kernel selection, tracing) stay out of the peak
    gc.collect()

    def traced_call() -> tuple[np.ndarray, int]:
        tracemalloc.start()
        try:
            return call(X, window), tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    traced: list[int] = []
    peak, method = peak_rss(lambda: traced.append(traced_call()[1]))
    method += (
        " (RSS after model build and a small warm-up call), fresh subprocess per variant; "
        "includes the model's activations (the same on both sides at the same batch size) and "
        "the allocator's reuse of freed memory, which moves it by tens of MiB between runs"
    )
    print(json.dumps({"rss": peak, "traced": traced[0], "method": method}))


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="windows of positions, one repeat (smoke test)"
    )
    parser.add_argument(
        "--backends", default="torch,tensorflow", help="comma-separated subset of torch,tensorflow"
    )
    parser.add_argument(
        "--models", default="bpnet,crested", help="comma-separated subset of bpnet,crested"
    )
    parser.add_argument(
        "--fast-models",
        default="bpnet,basset",
        help="models of the fast-ISM rows: a subset of bpnet,basset, or none",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed repeats of every comparison"
    )
    parser.add_argument(
        "--device", default="cpu", help="cpu, or cuda for the fast-ISM rows (use --models none)"
    )
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_probe:
        spec = json.loads(args.memory_probe)
        if spec["side"] == "tensorflow":
            import tensorflow as tf

            tf.get_logger().setLevel("ERROR")
        memory_probe(spec)
        return

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    kinds = [k.strip() for k in args.models.split(",") if k.strip() not in ("", "none")]
    fast_kinds = [k.strip() for k in args.fast_models.split(",") if k.strip() not in ("", "none")]
    if not backends or set(backends) - {"torch", "tensorflow"}:
        parser.error(f"--backends must name torch and/or tensorflow, got {args.backends!r}")
    if set(kinds) - {"bpnet", "crested"}:
        parser.error(f"--models must name bpnet and/or crested (or none), got {args.models!r}")
    if args.device != "cpu" and kinds:
        parser.error("--device applies to the fast-ISM rows only: add --models none")
    if set(fast_kinds) - {"bpnet", "basset"}:
        parser.error(f"--fast-models must name bpnet and/or basset, got {args.fast_models!r}")
    plan = QUICK if args.quick else FULL
    if args.repeats is not None:
        plan = Plan(
            {
                kind: dataclasses.replace(
                    s, engine_repeats=args.repeats, reference_repeats=args.repeats
                )
                for kind, s in plan.sizes.items()
            }
        )

    frameworks: dict[str, Any] = {}
    sides: list[Side] = []
    tangermeme: tuple[Any, str] | None = None
    if "torch" in backends:  # torch before TensorFlow, always
        import torch

        frameworks["torch"] = torch
        sides.append(TorchSide())
        if "bpnet" in kinds or fast_kinds:
            tangermeme = load_tangermeme()
            if tangermeme[0] is not None:
                frameworks["tangermeme"] = sys.modules["tangermeme"]
            else:
                log(f"tangermeme not available: {tangermeme[1]}")
    if "tensorflow" in backends:
        import keras
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        frameworks |= {"tensorflow": tf, "keras": keras}
        sides.append(TensorFlowSide())
    header = machine_description(frameworks)

    rows: list[Row] = []
    notes: list[str] = []
    for kind in kinds:
        for side in sides:
            model = side.build(kind)
            name = seqattrib.get_backend(model).name
            if name != side.name:
                raise RuntimeError(f"{side.name} model resolved to the {name} backend")
            ctx = Context(side, kind, model, plan.sizes[kind], rows, notes)
            benchmark(ctx, tangermeme if side.name == "torch" and kind == "bpnet" else None)
    for kind in fast_kinds:
        for side in sides:
            window = (0, LENGTHS[kind]) if not args.quick else (0, 100)
            fast_rows(
                side,
                kind,
                window,
                args.repeats or 1,
                tangermeme if side.name == "torch" else None,
                rows,
                notes,
                args.device,
            )

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        f"device: {args.device}; each variant warmed up once (a 50-position window of one "
        "sequence), then the variants of a comparison timed in turn; medians over the repeats "
        "named per row" + ("; --quick: windows of positions, not full scans" if args.quick else "")
    )
    print()
    print(markdown_table(rows))
    print()
    print(
        "Ratios: 'ISM ÷ bare' is ours ÷ theirs (≤ target); time rows against tangermeme and the "
        "host-copy loop are theirs ÷ ours (> 1: ours faster); memory rows are loop ÷ ours. "
        "Targets: ≤ 1.05 for the engine's overhead; > 1.0 for the loop and ≥ 1.0 for tangermeme "
        "fast=False because the engine must beat per-sequence loops; < 1 for our fast path "
        "over our exact path and ≥ 1.0 for it against tangermeme's fastISM (the fast-path "
        "targets of bench_fast_ism.py are stricter). Timings are wall-clock, so they move with "
        "the machine's load."
    )
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
