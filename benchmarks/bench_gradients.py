"""Benchmark of the gradient engine (IG, EIG) against what it replaces; prints one table.

Run ``python benchmarks/bench_gradients.py [--quick] [--backends torch,tensorflow]
[--device cpu|cuda]``. Models: a BPNet-like net (L=1000, 64 filters, 9 dilated residual layers,
5 outputs) and a CREsted-like net (L=500), built from one weight dict in torch (input layout
NCL) and Keras 3 on TensorFlow (NLC). Every ratio is measured in this run: the variants of a
comparison are warmed up once and then timed in turn (interleaved), median over the repeats.

Rows, per model and backend:

1. our IG / EIG time ÷ bare forward + input-gradient passes over the same rows, prebuilt on the
   device, at the same batch size (no interpolation, weighting, reduction or host copy);
2. (torch) captum ``IntegratedGradients`` ÷ ours, one target and three targets (captum: one call
   per target; ours: one call), gausslegendre on both sides; peak memory of each, measured in a
   fresh subprocess per variant;
3. a per-sequence loop that reduces on the host (CREsted's pattern: all rows of one sequence
   built on the host, run as one batch, every gradient copied to the host as float64 and reduced
   there) ÷ ours; and the same loop at its own best batch size ÷ ours at ``batch_size="auto"``;
4. EIG with K=5 targets ÷ one target;
5. device-to-host bytes per sequence, counted by the backend, vs K·L·4·4;
6. ``batch_size="auto"`` (probe included, and cached) ÷ our best fixed batch size.

``--device cuda`` uses a larger plan (``GPU``: 256-1024 IG and 16-32 EIG sequences, 3 repeats).
``--quick`` (tiny N, 2 baselines per EIG sequence, one repeat) is a smoke test, not a
measurement. Timings are wall-clock on a shared machine: the load average is printed before and
after.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
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
    time_once,
)

import seqattrib
from seqattrib.engine import batching

Tensor = Any
N_STEPS = 25
N_BASELINES = 25
BATCH = 128
K_MANY = 5
CAPTUM_TARGETS = (0, 1, 2)


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Sizes:
    """Sequences per comparison, for one model (fewer on the slow BPNet-like EIG rows)."""

    ig: int
    eig: int
    captum: int


@dataclass(frozen=True)
class Plan:
    sizes: dict[str, Sizes]
    repeats: int
    n_baselines: int
    fixed_sizes: tuple[int, ...]  # our fixed batch sizes tried for row 6 (IG)
    ig_loop_chunks: tuple[int, ...]  # loop batch sizes tried besides one batch per sequence
    eig_loop_chunks: tuple[int, ...]
    warm_ig: int = 11  # sequences in IG warm-ups: 286 rows, so two batch shapes are traced
    warm_eig: int = 1
    warm_captum: int = 8


FULL = Plan(
    sizes={"bpnet": Sizes(ig=40, eig=4, captum=64), "crested": Sizes(ig=128, eig=8, captum=64)},
    repeats=2,
    n_baselines=N_BASELINES,
    fixed_sizes=(32, 64, 128, 256),
    ig_loop_chunks=(13,),
    eig_loop_chunks=(26, 64, 128),
)
QUICK = Plan(
    sizes={"bpnet": Sizes(ig=3, eig=1, captum=4), "crested": Sizes(ig=6, eig=1, captum=4)},
    repeats=1,
    n_baselines=2,
    fixed_sizes=(64, 128),
    ig_loop_chunks=(13,),
    eig_loop_chunks=(26,),
    warm_ig=6,
    warm_captum=4,
)
#: --device cuda: more sequences (a GPU runs the CPU plan's work in milliseconds), more repeats,
#: larger fixed batch sizes and loop chunks to try.
GPU = Plan(
    sizes={
        "bpnet": Sizes(ig=256, eig=16, captum=256),
        "crested": Sizes(ig=1024, eig=32, captum=256),
    },
    repeats=3,
    n_baselines=N_BASELINES,
    fixed_sizes=(32, 128, 512, 2048, 8192),
    ig_loop_chunks=(13,),
    eig_loop_chunks=(26, 64, 128, 256),
)
LENGTHS = {"bpnet": 1000, "crested": 500}
LABELS = {"bpnet": "BPNet-like (L=1000)", "crested": "CREsted-like (L=500)"}


def weights_for(kind: str) -> dict[str, np.ndarray]:
    return models.bpnet_weights() if kind == "bpnet" else models.crested_weights()


# --------------------------------------------------------------------------- frameworks
class TorchSide:
    """Framework code of the reference loops (never the package's backend)."""

    name = "torch"
    layout = "NCL"

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)

    def build(self, kind: str) -> Any:
        model = models.torch_model(kind, weights_for(kind), layout=self.layout).to(self.device)
        for p in model.parameters():
            p.requires_grad_(False)
        return model

    def tensor(self, array: np.ndarray) -> Tensor:
        return self.torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def gradient(self, model: Any, target: int) -> Callable[[Tensor], Tensor]:
        """Forward + input gradient of one output, summed over the batch's rows."""
        torch = self.torch

        def grad(x: Tensor) -> Tensor:
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                (g,) = torch.autograd.grad(model(x)[:, target].sum(), x)
            return g

        return grad

    def host64(self, tensor: Tensor) -> np.ndarray:
        return tensor.detach().cpu().numpy().astype(np.float64)

    def finish(self, tensor: Tensor | None) -> None:
        """Wait for queued device work."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


class TensorFlowSide:
    name = "tensorflow"
    layout = "NLC"

    def __init__(self, device: str) -> None:
        import tensorflow as tf

        self.tf = tf
        self.scope = "/GPU:0" if device.startswith("cuda") else "/CPU:0"

    def build(self, kind: str) -> Any:
        with self.tf.device(self.scope):
            return models.keras_model(kind, weights_for(kind), LENGTHS[kind], layout=self.layout)

    def tensor(self, array: np.ndarray) -> Tensor:
        with self.tf.device(self.scope):
            return self.tf.constant(np.ascontiguousarray(array))

    def gradient(self, model: Any, target: int) -> Callable[[Tensor], Tensor]:
        """A compiled forward + input gradient, as fast as TF offers (not CREsted's eager tape)."""
        tf = self.tf

        @tf.function(reduce_retracing=True)
        def grad(x: Tensor) -> Tensor:
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = tf.reduce_sum(model(x, training=False)[:, target])
            return tape.gradient(total, x)

        def call(x: Tensor) -> Tensor:
            with tf.device(self.scope):
                return grad(x)

        return call

    def host64(self, tensor: Tensor) -> np.ndarray:
        return np.asarray(tensor.numpy(), dtype=np.float64)

    def finish(self, tensor: Tensor | None) -> None:
        """Eager TF returns when a CPU op is done; on a GPU, read one value of the last output."""
        if tensor is not None and self.scope.startswith("/GPU"):
            self.tf.reshape(tensor, [-1])[0].numpy()


Side = TorchSide | TensorFlowSide


# --------------------------------------------------------------------------- the two methods
@dataclass(frozen=True)
class Method:
    """IG (one zeros baseline) or EIG (dinucleotide-shuffled baselines), trapezoid rule."""

    name: str
    n_baselines: int

    @property
    def rows_per_sequence(self) -> int:
        return self.n_baselines * (N_STEPS + 1)

    def describe(self) -> str:
        if self.name == "IG":
            return f"n_steps={N_STEPS} trapezoid ({self.rows_per_sequence} rows/seq), zeros"
        return (
            f"{self.n_baselines} dinuc-shuffled baselines × {N_STEPS + 1} steps "
            f"({self.rows_per_sequence} rows/seq)"
        )

    def baselines(self, x: np.ndarray, seed: int, layout: str) -> np.ndarray:
        """(B, *x.shape) in the layout of x; dinucleotide shuffles are drawn here (timed)."""
        if self.name == "IG":
            return np.zeros((1, *x.shape), np.float32)
        nlc = x.T if layout == "NCL" else x
        b = seqattrib.dinucleotide_shuffle(nlc, self.n_baselines, np.random.default_rng(seed))
        return np.ascontiguousarray(b.transpose(0, 2, 1)) if layout == "NCL" else b

    def ours(self, model: Any, X: np.ndarray, **kwargs: Any) -> Any:
        if self.name == "IG":
            return seqattrib.integrated_gradients(
                model, X, n_steps=N_STEPS, method="riemann_trapezoid", **kwargs
            )
        return seqattrib.expected_integrated_gradients(
            model,
            X,
            n_steps=N_STEPS,
            n_baselines=self.n_baselines,
            method="riemann_trapezoid",
            random_state=0,
            **kwargs,
        )


def path_rows(x: np.ndarray, baselines: np.ndarray) -> np.ndarray:
    """The rows b_j + a_k (x - b_j), baseline-major, as (B * (n_steps + 1), *x.shape)."""
    alphas, _ = seqattrib.quadrature("riemann_trapezoid", N_STEPS)
    a = alphas.astype(np.float32).reshape(1, -1, *([1] * x.ndim))
    rows = baselines[:, None] + a * (x[None] - baselines)[:, None]
    return rows.reshape(-1, *x.shape)


def bare_batches(side: Side, method: Method, X: np.ndarray, batch_size: int) -> list[Tensor]:
    """The rows of X, built beforehand (untimed) and cut into device batches like ours."""
    rows = np.concatenate(
        [path_rows(x, method.baselines(x, i, side.layout)) for i, x in enumerate(X)]
    )
    return [side.tensor(rows[s : s + batch_size]) for s in range(0, len(rows), batch_size)]


def run_bare(grad: Callable[[Tensor], Tensor], batches: list[Tensor]) -> Tensor | None:
    last = None
    for batch in batches:
        last = grad(batch)
    return last


def per_sequence_loop(
    side: Side,
    grad: Callable[[Tensor], Tensor],
    method: Method,
    X: np.ndarray,
    chunk: int | None,
) -> np.ndarray:
    """CREsted's pattern: per sequence, build its rows on the host, copy every gradient to the
    host as float64 and reduce there (trapezoid, then the mean over baselines).

    ``chunk`` splits a sequence's rows into batches of that many rows (None: one batch).
    """
    out = np.empty(X.shape, np.float64)
    for i, x in enumerate(X):
        b = method.baselines(x, i, side.layout)
        rows = path_rows(x, b)
        size = chunk or len(rows)
        grads = np.empty(rows.shape, np.float64)
        for s in range(0, len(rows), size):
            grads[s : s + size] = side.host64(grad(side.tensor(rows[s : s + size])))
        g = grads.reshape(len(b), N_STEPS + 1, *x.shape)
        average = (g[:, :-1] + g[:, 1:]).sum(axis=1) / (2 * N_STEPS)
        out[i] = ((x[None] - b) * average).mean(axis=0)
    return out


# --------------------------------------------------------------------------- helpers
def cached_size(model: Any, k: int) -> int | None:
    """The batch size the auto probe cached for this model and K (peeks at a private cache)."""
    try:
        store = batching._store(model)
    except Exception:  # noqa: BLE001 - the benchmark only reports it
        return None
    # keys: (method, backend, device, row shape, number of targets, kernel variant)
    sizes = [
        size
        for key, size in store.items()
        if isinstance(key, tuple) and len(key) == 6 and key[4] == k
    ]
    return sizes[0] if sizes else None


@dataclass
class Context:
    side: Side
    kind: str
    model: Any
    device: str
    plan: Plan
    rows: list[Row]
    notes: list[str]

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def add(self, *args: Any) -> None:
        self.rows.append(Row.ratio_row(self.label, self.side.name, *args))

    def ours_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        return {"device": self.device, **kwargs}


# --------------------------------------------------------------------------- rows 1, 3-6
def engine_rows(ctx: Context, method: Method, n: int) -> None:
    side, model, plan = ctx.side, ctx.model, ctx.plan
    length = LENGTHS[ctx.kind]
    X = models.random_one_hot(n, length, seed=1, layout=side.layout)
    n_warm = min(n, plan.warm_ig if method.name == "IG" else plan.warm_eig)
    X_warm = X[:n_warm]
    backend = seqattrib.get_backend(model)
    transfers: dict[str, tuple[int, int]] = {}
    auto_sizes: list[int | None] = []  # the cached size after each timed "auto" call
    log(f"{ctx.label} {side.name} {method.name}: N={n}, {method.rows_per_sequence} rows/seq")

    def ours(batch_size: int | str, target: Any = 0, record: str | None = None) -> Variant:
        kwargs = ctx.ours_kwargs(batch_size=batch_size, target=target)

        def run() -> None:
            backend.transfers.reset()
            method.ours(model, X, **kwargs)
            if record is not None:
                transfers[record] = (backend.transfers.to_host, backend.transfers.to_device)
            if batch_size == "auto":
                auto_sizes.append(cached_size(model, 1))

        def warm() -> None:
            method.ours(model, X_warm, **kwargs)

        return Variant(f"ours bs={batch_size} target={target}", run, warm)

    def auto_with_probe() -> Variant:
        kwargs = ctx.ours_kwargs(batch_size="auto", target=0)

        def run() -> None:
            batching.clear_cache()
            method.ours(model, X, **kwargs)

        def warm() -> None:
            batching.clear_cache()
            method.ours(model, X_warm, **kwargs)

        return Variant("ours auto (probe included)", run, warm)

    grad = side.gradient(model, 0)
    batches = bare_batches(side, method, X, BATCH)
    bare = Variant(
        f"bare bs={BATCH}",
        lambda: side.finish(run_bare(grad, batches)),
        lambda: side.finish(run_bare(grad, batches[:3])),
    )

    # The loop's best batch size, from a timed pass over the warm-up sequences per candidate.
    natural = method.rows_per_sequence
    chunks = [
        natural,
        *(
            c
            for c in (plan.ig_loop_chunks if method.name == "IG" else plan.eig_loop_chunks)
            if c < natural
        ),
    ]
    trial: dict[int, float] = {}
    for c in chunks:
        per_sequence_loop(side, grad, method, X_warm, c)
        trial[c] = time_once(functools.partial(per_sequence_loop, side, grad, method, X_warm, c))
        log(f"  loop trial, batches of {c} rows: {trial[c]:.2f} s on {n_warm} seq")
    best_chunk = min(trial, key=trial.__getitem__)

    def loop(chunk: int) -> Variant:
        return Variant(
            f"loop batches of {chunk}",
            lambda: per_sequence_loop(side, grad, method, X, chunk),
            lambda: None,  # warmed by the trial above
        )

    variants = [ours(BATCH, record="k1"), bare, loop(natural)]
    if best_chunk != natural:
        variants.append(loop(best_chunk))
    fixed = [s for s in plan.fixed_sizes if s != BATCH] if method.name == "IG" else []
    variants += [ours(s) for s in fixed]
    if method.name == "IG":
        variants.append(auto_with_probe())  # leaves the probed size cached for the next one
    variants.append(ours("auto"))
    if method.name == "EIG":
        variants.append(ours(BATCH, target=list(range(K_MANY)), record=f"k{K_MANY}"))
    t = interleaved(variants, plan.repeats)
    t_ours = t[f"ours bs={BATCH} target=0"]
    t_auto = t["ours bs=auto target=0"]
    seen = sorted({str(size) for size in auto_sizes if size is not None})
    auto_text = (
        f"auto (cached size {'/'.join(seen)}"
        + (", not cached in some calls" if None in auto_sizes else "")
        + ")"
        if seen
        else "auto (nothing cached: probe did not finish)"
    )

    # 1. ours ÷ bare passes
    ctx.add(
        f"{method.name} ÷ bare fwd+bwd",
        f"N={n}, {method.describe()}, target 0, batch_size={BATCH} both",
        t_ours,
        t[f"bare bs={BATCH}"],
        t_ours / t[f"bare bs={BATCH}"],
        "≤ 1.10",
    )
    # 3. per-sequence loop ÷ ours
    target3 = "≥ 3" if method.name == "IG" else "≥ 1.2"
    t_loop = t[f"loop batches of {natural}"]
    ctx.add(
        f"per-seq host-reduce loop ÷ ours ({method.name})",
        f"N={n}; loop: one {natural}-row batch per sequence, float64 host reduction; "
        f"ours batch_size={BATCH}",
        t_ours,
        t_loop,
        t_loop / t_ours,
        target3,
    )
    t_best = t[f"loop batches of {best_chunk}"]
    tried = ", ".join(f"{c}: {trial[c]:.2f} s" for c in chunks)
    ctx.add(
        f"loop at its best batch ÷ ours ({method.name})",
        f"N={n}; loop batches of {best_chunk} rows (trial on {n_warm} seq: {tried}); "
        f"ours batch_size={auto_text}",
        t_auto,
        t_best,
        t_best / t_auto,
        "> 1.0",
    )
    expected = length * 4 * 4
    if method.name == "EIG":
        # 4. K targets ÷ one target
        t_k = t[f"ours bs={BATCH} target={list(range(K_MANY))}"]
        ctx.add(
            f"EIG K={K_MANY} ÷ K=1",
            f"N={n}, targets 0..{K_MANY - 1} in one call vs target 0, batch_size={BATCH}",
            t_k,
            t_ours,
            t_k / t_ours,
            "≤ 2.5",
        )
        bytes_rows = [(f"k{K_MANY}", K_MANY)]
    else:
        bytes_rows = [("k1", 1)]
    # 5. device -> host bytes per sequence
    for key, k in bytes_rows:
        to_host, to_device = transfers[key]
        measured = to_host / n
        ctx.rows.append(
            Row(
                ctx.label,
                side.name,
                f"device→host bytes/seq ({method.name}, K={k})",
                f"N={n}, counted at the backend; expected K·L·4·4 = {k * expected:,} B; "
                f"host→device {to_device / n:,.0f} B/seq",
                fmt_bytes(measured),
                fmt_bytes(k * expected),
                measured / (k * expected),
                "= 1",
                "yes" if to_host == n * k * expected else "**no**",
            )
        )
    if method.name == "IG":
        # 6. auto ÷ best fixed size
        by_size = {s: t[f"ours bs={s} target=0"] for s in sorted({*fixed, BATCH})}
        best_size = min(by_size, key=by_size.__getitem__)
        scan = ", ".join(f"{s}: {v:.2f} s" for s, v in by_size.items())
        ctx.add(
            "auto ÷ best fixed batch (IG)",
            f"N={n}; batch_size={auto_text} vs best fixed {best_size} ({scan})",
            t_auto,
            by_size[best_size],
            t_auto / by_size[best_size],
            "≤ 1.10",
        )
        t_probe = t["ours auto (probe included)"]
        ctx.rows.append(
            Row(
                ctx.label,
                side.name,
                "auto with its probe ÷ best fixed batch (IG)",
                f"N={n}; clear_cache() before each call, so the probe runs inside it",
                f"{t_probe:.2f}",
                f"{by_size[best_size]:.2f}",
                t_probe / by_size[best_size],
                "—",
                "—",
            )
        )
    check_against_loop(ctx, method, grad, X[:1])


def check_against_loop(
    ctx: Context, method: Method, grad: Callable[[Tensor], Tensor], X: np.ndarray
) -> None:
    """Same work on both sides: our result equals the loop's on one sequence (untimed)."""
    side = ctx.side
    reference = per_sequence_loop(side, grad, method, X, None)
    kwargs = ctx.ours_kwargs(batch_size=BATCH, target=0)
    if method.name == "EIG":  # the loop's own baselines, given to us as an array
        kwargs["baselines"] = method.baselines(X[0], 0, side.layout)[None]
    ours = method.ours(ctx.model, X, **kwargs)
    ctx.notes.append(
        f"check {ctx.label} {side.name} {method.name}: ours vs the per-sequence loop, "
        f"max|diff| / max|loop| = {relative_error(ours, reference):.1e}"
    )


# --------------------------------------------------------------------------- row 2 (captum)
def captum_rows(ctx: Context, n: int, script_args: argparse.Namespace) -> None:
    from captum.attr import IntegratedGradients

    side, model, plan = ctx.side, ctx.model, ctx.plan
    assert isinstance(side, TorchSide)
    torch = side.torch
    X = models.random_one_hot(n, LENGTHS[ctx.kind], seed=2, layout=side.layout)
    X_warm = X[: min(n, plan.warm_captum)]
    ig = IntegratedGradients(model)
    log(f"{ctx.label} torch captum: N={n}")

    def captum(data: np.ndarray, targets: tuple[int, ...]) -> list[np.ndarray]:
        inputs = torch.from_numpy(data).to(side.device)
        return [
            ig.attribute(
                inputs,
                target=t,
                n_steps=N_STEPS,
                method="gausslegendre",
                internal_batch_size=BATCH,
            )
            .detach()
            .cpu()
            .numpy()
            for t in targets
        ]

    def ours(data: np.ndarray, targets: tuple[int, ...]) -> Any:
        target: Any = targets[0] if len(targets) == 1 else list(targets)
        return seqattrib.integrated_gradients(
            model,
            data,
            **ctx.ours_kwargs(
                target=target, n_steps=N_STEPS, method="gausslegendre", batch_size=BATCH
            ),
        )

    sync = None if side.device.type != "cuda" else (lambda: side.finish(None))
    variants = []
    for targets in ((0,), CAPTUM_TARGETS):
        sides: tuple[tuple[str, Callable[..., Any]], ...] = (("ours", ours), ("captum", captum))
        for name, fn in sides:
            variants.append(
                Variant(
                    f"{name} targets={targets}",
                    functools.partial(fn, X, targets),
                    functools.partial(fn, X_warm, targets),
                    sync,
                )
            )
    t = interleaved(variants, plan.repeats)
    memory = {
        (name, targets): peak_memory(ctx.kind, name, targets, n, script_args.device)
        for targets in ((0,), CAPTUM_TARGETS)
        for name in ("ours", "captum")
    }
    method_text = memory[("ours", (0,))][1]
    for targets, goal in (((0,), "≥ 1.0"), (CAPTUM_TARGETS, "≥ 1.3")):
        k = len(targets)
        t_ours, t_captum = t[f"ours targets={targets}"], t[f"captum targets={targets}"]
        how = (
            "one call each" if k == 1 else f"captum {k} calls, ours one call target={list(targets)}"
        )
        ctx.add(
            f"captum IG ÷ ours ({k} target{'s' if k > 1 else ''})",
            f"N={n}, n_steps={N_STEPS} gausslegendre, internal_batch_size={BATCH} / "
            f"batch_size={BATCH}, zeros baseline; {how}",
            t_ours,
            t_captum,
            t_captum / t_ours,
            goal,
        )
        m_ours, m_captum = memory[("ours", targets)][0], memory[("captum", targets)][0]
        ctx.rows.append(
            Row(
                ctx.label,
                side.name,
                f"peak memory, captum vs ours ({k} target{'s' * (k > 1)})",
                f"same settings; {method_text}",
                fmt_mib(m_ours),
                fmt_mib(m_captum),
                m_captum / m_ours if m_ours > 0 else None,
                "—",
                "—",
            )
        )
    ours_result = ours(X[:2], (0,))
    captum_result = captum(X[:2], (0,))[0]
    ctx.notes.append(
        f"check {ctx.label} torch: ours vs captum IG (gausslegendre), max|diff| / max|captum| = "
        f"{relative_error(ours_result, captum_result):.1e}"
    )


def peak_memory(
    kind: str, name: str, targets: tuple[int, ...], n: int, device: str
) -> tuple[float, str]:
    """Peak memory of one call, measured in a fresh subprocess (``--memory-probe``)."""
    spec = {"kind": kind, "side": name, "targets": list(targets), "n": n, "device": device}
    result = probe_in_subprocess(__file__, spec)
    return float(result["bytes"]), str(result["method"])


def memory_probe(spec: dict[str, Any]) -> None:
    """Run one variant once in this (fresh) process and print its peak memory as JSON."""
    import torch

    device = torch.device(spec["device"])
    model = TorchSide(spec["device"]).build(spec["kind"])
    X = models.random_one_hot(spec["n"], LENGTHS[spec["kind"]], seed=2, layout="NCL")
    targets = spec["targets"]
    if spec["side"] == "captum":
        from captum.attr import IntegratedGradients

        ig = IntegratedGradients(model)

        def call() -> Any:
            inputs = torch.from_numpy(X).to(device)
            return [
                ig.attribute(
                    inputs,
                    target=t,
                    n_steps=N_STEPS,
                    method="gausslegendre",
                    internal_batch_size=BATCH,
                )
                .detach()
                .cpu()
                .numpy()
                for t in targets
            ]
    else:

        def call() -> Any:
            target = targets[0] if len(targets) == 1 else targets
            return seqattrib.integrated_gradients(
                model,
                X,
                target=target,
                n_steps=N_STEPS,
                method="gausslegendre",
                batch_size=BATCH,
                device=spec["device"],
            )

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = call()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated(device)
        method = "CUDA peak allocated − allocated before the call, fresh subprocess per variant"
        del result
    else:
        peak, method = peak_rss(call)
        before, method = 0, method + ", fresh subprocess per variant"
    print(json.dumps({"bytes": peak - before, "method": method}))


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny N, one repeat (smoke test)")
    parser.add_argument(
        "--backends", default="torch,tensorflow", help="comma-separated subset of torch,tensorflow"
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--models", default="bpnet,crested", help="comma-separated subset of bpnet,crested"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed repeats per variant (default: 2, or 1 with --quick)",
    )
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_probe:
        memory_probe(json.loads(args.memory_probe))
        return

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    kinds = [k.strip() for k in args.models.split(",") if k.strip()]
    if not backends or set(backends) - {"torch", "tensorflow"}:
        parser.error(f"--backends must name torch and/or tensorflow, got {args.backends!r}")
    if not kinds or set(kinds) - set(LENGTHS):
        parser.error(f"--models must name bpnet and/or crested, got {args.models!r}")
    plan = QUICK if args.quick else GPU if args.device == "cuda" else FULL
    if args.repeats is not None:
        plan = dataclasses.replace(plan, repeats=args.repeats)

    frameworks: dict[str, Any] = {}
    sides: list[Side] = []
    if "torch" in backends:  # torch before TensorFlow, always
        import captum
        import torch

        frameworks |= {"torch": torch, "captum": captum}
        sides.append(TorchSide(args.device))
        # seqattrib computes in full float32 (TF32 off inside its calls); so does everything else
        # here, so both sides of a comparison do the same arithmetic.
        for setting in (
            torch.backends.cudnn.conv,
            torch.backends.cudnn.rnn,
            torch.backends.cuda.matmul,
        ):
            setting.fp32_precision = "ieee"
    if "tensorflow" in backends:
        import keras
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        frameworks |= {"tensorflow": tf, "keras": keras}
        sides.append(TensorFlowSide(args.device))
    header = machine_description(frameworks)

    rows: list[Row] = []
    notes: list[str] = []
    for kind in kinds:
        sizes = plan.sizes[kind]
        for side in sides:
            model = side.build(kind)
            name = seqattrib.get_backend(model).name
            if name != side.name:
                raise RuntimeError(f"{side.name} model resolved to the {name} backend")
            ctx = Context(side, kind, model, args.device, plan, rows, notes)
            engine_rows(ctx, Method("IG", 1), sizes.ig)
            engine_rows(ctx, Method("EIG", plan.n_baselines), sizes.eig)
            if side.name == "torch":
                captum_rows(ctx, sizes.captum, args)
            batching.clear_cache()

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        f"device: {args.device}; repeats per variant: {plan.repeats} (median), each variant "
        "warmed up once; variants of a comparison timed in turn"
    )
    print()
    print(markdown_table(rows))
    print()
    print(
        "Ratios: time rows are theirs ÷ ours where the target is ≥ or >, ours ÷ theirs where "
        "it is ≤ (rows 'ours ÷ bare', 'K=5 ÷ K=1', 'auto ÷ best fixed'). Memory rows: "
        "captum ÷ ours. Timings are wall-clock, so they move with the machine's load."
    )
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
