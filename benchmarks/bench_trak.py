"""Benchmark of TRAK (``seqattrib.TRAK``) against traker 0.3.2 on a CPU; prints one markdown
table.

Run ``taskset -c 1 python benchmarks/bench_trak.py --threads 1 [--quick] [--repeats N]``.

traker is a benchmark-only dependency (not in any extra). Install it next to the CPU torch
without letting it replace torch: ``pip install -c .ci/constraints.txt traker==0.3.2`` (its
requirements are torch, numpy and tqdm; add ``--no-deps`` if pip wants to change torch).

Setting (the model and data of ``bench_data_attribution.py``): 2,000 training and 100 test
sequences of 200 bp, a small CNN (6,658 parameters), 3 checkpoints (a state-dict file after
each of 3 training epochs), classification margins, ``proj_dim`` 512 and 2048. traker runs on
the CPU as it does there by default: ``BasicProjector`` (Gaussian, blocks of 100 columns
regenerated per batch), ``FunctionalGradientComputer`` (vmap), ``MmapSaver`` in a fresh
temporary folder per run. Its default ``use_half_precision=True`` is timed, and float32 at its
best batch size (a probe on 200 sequences picks among 32, 128 and 512). Ours uses its defaults
(``batch_size="auto"``: 128 rows here, Rademacher projection, ``lambda_reg="auto"``).

Phases, each timed within one call sequence, median over the repeats after a warm-up on 200
sequences:

- featurize: per-example gradients of the margin, projection and out-to-loss weights at every
  checkpoint (ours: ``fit`` minus its kernel step; traker: ``load_checkpoint`` + ``featurize``
  over the batches);
- kernel: ours float64 ``Phi^T Phi + lambda I`` and its inverse; traker
  ``finalize_features`` (float32 inverse, ``Phi (Phi^T Phi)^-1``);
- score: 100 targets (ours ``scores``; traker ``start_scoring_checkpoint`` + ``score`` +
  ``finalize_scores``).

Note: proj_dim 2048 >= 2,000 training examples, the regime where traker returns meaningless
scores (its kernel is singular) and ours warns; it is timed to show that regime.
Timings are wall-clock on a shared machine: the load average is printed before and after.
"""

from __future__ import annotations

import sys

import _common

if "--threads" in sys.argv:  # BLAS threads are fixed when numpy loads
    _common.blas_threads(sys.argv[sys.argv.index("--threads") + 1], force=True)

import argparse  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import Row, load_average, log, machine_description, print_report, run_main  # noqa: E402
from bench_data_attribution import (  # noqa: E402
    MODEL_LABEL,
    make_data,
    torch_model,
    train_checkpoints,
)

import seqattrib  # noqa: E402
from seqattrib.data_attribution import trak as trak_module  # noqa: E402

PROJ_DIMS = (512, 2048)
TRAKER_BATCHES = (32, 128, 512)
N_PROBE = 200

Phases = dict[str, float]


# --------------------------------------------------------------------------- ours
class _KernelTimer:
    """Adds up the time ``TRAK.fit`` spends in its kernel step (to split featurize off)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.original = trak_module.TRAK._kernel

    def __enter__(self) -> _KernelTimer:
        timer = self

        def timed(trak: Any, *args: Any) -> Any:
            start = time.perf_counter()
            try:
                return timer.original(trak, *args)
            finally:
                timer.seconds += time.perf_counter() - start

        trak_module.TRAK._kernel = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        trak_module.TRAK._kernel = self.original  # type: ignore[method-assign]


def ours(model: Any, paths: list[str], data: Any, proj_dim: int) -> tuple[Phases, np.ndarray]:
    (X, y), (Xt, yt) = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", seqattrib.SeqAttribWarning)  # proj_dim >= n_train
        with _KernelTimer() as kernel:
            start = time.perf_counter()
            trak = seqattrib.TRAK(model, paths, proj_dim=proj_dim).fit(X, y)
            fit = time.perf_counter() - start
    start = time.perf_counter()
    scores = trak.scores(Xt, yt)
    score = time.perf_counter() - start
    phases = {"featurize": fit - kernel.seconds, "kernel": kernel.seconds, "score": score}
    return phases, scores


# --------------------------------------------------------------------------- traker
def our_projection_for_traker(model: Any, proj_dim: int, random_state: int = 0) -> Any:
    """A traker projector that applies seqattrib's projection: the Rademacher matrix of
    checkpoint ``model_id`` (seed sequence (random_state, model_id)), to gradients put in the
    Keras layout (every axis of this model's torch weights reversed)."""
    import torch
    from trak.projectors import AbstractProjector

    shapes = [(name, p.shape) for name, p in model.named_parameters()]
    n_params = sum(p.numel() for p in model.parameters())

    class OurProjection(AbstractProjector):
        def __init__(self) -> None:
            super().__init__(n_params, proj_dim, random_state, "rademacher", "cpu")
            self.matrices: dict[int, Any] = {}

        def project(self, grads: Any, model_id: int) -> Any:
            if model_id not in self.matrices:
                seed = np.random.SeedSequence([random_state, model_id]).generate_state(
                    1, np.uint64
                )[0]
                matrix = trak_module.RandomProjection(n_params, proj_dim, int(seed), "rademacher")
                self.matrices[model_id] = torch.from_numpy(matrix.matrix())
            flat = [
                grads[name]
                .permute(0, *reversed(range(1, len(shape) + 1)))
                .reshape(grads[name].shape[0], -1)
                for name, shape in shapes
            ]
            return torch.cat(flat, dim=1) @ self.matrices[model_id]

    return OurProjection()


def traker(
    model: Any,
    paths: list[str],
    data: Any,
    proj_dim: int,
    batch: int,
    half: bool,
    projector: Any = None,
    lambda_reg: float = 0.0,
) -> tuple[Phases, np.ndarray]:
    import torch
    from trak import TRAKer

    (X, y), (Xt, yt) = data
    states = [torch.load(p, weights_only=True) for p in paths]
    folder = tempfile.mkdtemp(prefix="traker-")
    try:
        start = time.perf_counter()
        tr = TRAKer(
            model=model,
            task="image_classification",
            train_set_size=len(X),
            save_dir=folder,
            device="cpu",
            proj_dim=proj_dim,
            use_half_precision=half,
            logging_level=logging.ERROR,
            projector=projector,
            lambda_reg=lambda_reg,
        )
        xs, ys = torch.from_numpy(X), torch.from_numpy(y)
        for model_id, state in enumerate(states):
            tr.load_checkpoint(state, model_id=model_id)
            for s in range(0, len(X), batch):
                tr.featurize(
                    batch=[xs[s : s + batch], ys[s : s + batch]], num_samples=len(xs[s : s + batch])
                )
        featurize = time.perf_counter() - start
        start = time.perf_counter()
        tr.finalize_features()
        kernel = time.perf_counter() - start
        start = time.perf_counter()
        xt, ytt = torch.from_numpy(Xt), torch.from_numpy(yt)
        for model_id, state in enumerate(states):
            tr.start_scoring_checkpoint("targets", state, model_id=model_id, num_targets=len(Xt))
            for s in range(0, len(Xt), batch):
                tr.score(
                    batch=[xt[s : s + batch], ytt[s : s + batch]],
                    num_samples=len(xt[s : s + batch]),
                )
        scores = np.array(tr.finalize_scores("targets"), dtype=np.float64).T
        score = time.perf_counter() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"featurize": featurize, "kernel": kernel, "score": score}, scores


# --------------------------------------------------------------------------- timing
def timed(
    variants: dict[str, Callable[[Any], tuple[Phases, np.ndarray]]],
    data: Any,
    probe: Any,
    repeats: int,
) -> tuple[dict[str, Phases], dict[str, np.ndarray]]:
    """Warm each variant up on the probe data, then run them in turn; medians per phase."""
    for name, run in variants.items():
        log(f"  warm-up {name}")
        run(probe)
    runs: dict[str, list[Phases]] = {name: [] for name in variants}
    last: dict[str, np.ndarray] = {}
    for r in range(repeats):
        for name, run in variants.items():
            phases, last[name] = run(data)
            runs[name].append(phases)
            log(
                f"  repeat {r + 1}/{repeats} {name}: "
                + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items())
            )
    medians = {
        name: {phase: statistics.median(p[phase] for p in ps) for phase in ps[0]}
        for name, ps in runs.items()
    }
    return medians, last


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a.ravel())).astype(np.float64)
    rb = np.argsort(np.argsort(b.ravel())).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def top1_agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((a.argmax(axis=1) == b.argmax(axis=1)).mean())


def matched_check(model: Any, paths: list[str], data: Any, proj_dim: int) -> str:
    """traker given our projection and our ridge, on one checkpoint (where its averaging of Q
    is ours), equals our scores up to its global rescaling of the kernel inverse."""
    (X, y), (Xt, yt) = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", seqattrib.SeqAttribWarning)
        trak = seqattrib.TRAK(model, paths[-1:], proj_dim=proj_dim).fit(X, y)
    mine = trak.scores(Xt, yt).astype(np.float64)
    n_params = sum(p.numel() for p in model.parameters())
    # traker divides gradients by sqrt(n_params): the same ridge is lambda / n_params there
    _, theirs = traker(
        model,
        paths[-1:],
        data,
        proj_dim,
        128,
        False,
        projector=our_projection_for_traker(model, proj_dim),
        lambda_reg=float(trak.lambdas_[0]) / n_params,
    )
    scale = float((mine * theirs).sum() / (mine * mine).sum())
    error = float(np.abs(theirs - scale * mine).max() / np.abs(theirs).max())
    return (
        f"check (proj_dim={proj_dim}, last checkpoint): traker given our projection matrix and "
        f"ridge equals ours times {scale:.3g} (its rescaling of the kernel inverse) up to "
        f"max|diff| / max|traker| = {error:.1e} (its float32 inverse at condition "
        f"{trak.conditions_[0]:.1e}); Spearman {spearman(mine, theirs):.4f}"
    )


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 training sequences (smoke test)")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats per variant")
    parser.add_argument("--threads", type=int, default=0, help="torch and BLAS threads, both sides")
    args = parser.parse_args(argv)

    import torch
    import trak

    n_train, n_test = (300, 20) if args.quick else (2000, 100)
    header = machine_description({"torch": torch, "traker": trak})
    if args.threads:
        torch.set_num_threads(args.threads)
        header.append(
            f"threads for this run (--threads): {args.threads}, torch and BLAS (numpy), both sides"
        )
    train, test = make_data(n_train, seed=1), make_data(n_test, seed=2)
    data = (train, test)
    probe = ((train[0][:N_PROBE], train[1][:N_PROBE]), test)
    rows: list[Row] = []
    notes: list[str] = []
    settings = f"n_train={n_train}, n_test={n_test}, 3 checkpoints"
    with tempfile.TemporaryDirectory() as folder:
        log("training the checkpoints")
        paths = train_checkpoints(Path(folder), *train)
        model = torch_model()

        log("traker's batch size (float32, proj_dim=512)")
        probe_times = {}
        for batch in TRAKER_BATCHES:
            traker(model, paths, probe, 512, batch, False)
            probe_times[batch] = traker(model, paths, probe, 512, batch, False)[0]["featurize"]
        best = min(probe_times, key=probe_times.__getitem__)
        notes.append(
            f"traker float32 featurize probe on {N_PROBE} sequences (proj_dim=512): "
            + ", ".join(f"batch {b}: {t:.2f} s" for b, t in probe_times.items())
        )
        for proj_dim in PROJ_DIMS:
            log(f"proj_dim={proj_dim}")
            variants = {
                "ours": lambda d, p=proj_dim: ours(model, paths, d, p),
                "traker float32": lambda d, p=proj_dim: traker(model, paths, d, p, best, False),
                "traker default": lambda d, p=proj_dim: traker(model, paths, d, p, best, True),
            }
            t, scores = timed(variants, data, probe, args.repeats)
            mine = t["ours"]
            tag = f"proj_dim={proj_dim}"
            for name, label in (
                ("traker float32", f"traker float32 (batch {best})"),
                ("traker default", f"traker default float16 (batch {best})"),
            ):
                theirs = t[name]
                rows.append(
                    Row.ratio_row(
                        MODEL_LABEL,
                        "torch",
                        f"{tag}, featurize: {label} ÷ ours",
                        settings,
                        mine["featurize"],
                        theirs["featurize"],
                        theirs["featurize"] / mine["featurize"],
                        "≥ 3",
                    )
                )
            theirs = t["traker float32"]
            for phase, what, ours_what in (
                ("kernel", "finalize_features", "float64 kernel and inverse"),
                ("score", "score 100 targets", "scores()"),
            ):
                rows.append(
                    Row.ratio_row(
                        MODEL_LABEL,
                        "torch",
                        f"{tag}, {what}: traker float32 ÷ ours ({ours_what})",
                        settings,
                        mine[phase],
                        theirs[phase],
                        theirs[phase] / mine[phase],
                        "—",
                    )
                )
            total_mine = mine["featurize"] + mine["kernel"] + mine["score"]
            total_theirs = sum(theirs.values())
            rows.append(
                Row.ratio_row(
                    MODEL_LABEL,
                    "torch",
                    f"{tag}, whole job (featurize + kernel + score): traker float32 ÷ ours",
                    settings,
                    total_mine,
                    total_theirs,
                    total_theirs / total_mine,
                    "—",
                )
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", seqattrib.SeqAttribWarning)
                reseeded = seqattrib.TRAK(model, paths, proj_dim=proj_dim, random_state=1)
                again = reseeded.fit(*train).scores(*test)
            notes.append(
                f"{tag}: ours vs ours with another random_state (the projection's own noise): "
                f"Spearman of all scores {spearman(scores['ours'], again):.3f}, same top "
                f"proponent for {100 * top1_agreement(scores['ours'], again):.0f} % of targets"
            )
            for name in ("traker float32", "traker default"):
                other = scores[name]
                finite = bool(np.isfinite(other).all())
                notes.append(
                    f"{tag}: ours vs {name}: Spearman of all scores "
                    + (f"{spearman(scores['ours'], other):.3f}" if finite else "n/a")
                    + ", same top proponent for "
                    + (f"{100 * top1_agreement(scores['ours'], other):.0f} %" if finite else "n/a")
                    + f" of targets; traker scores all finite: {finite}"
                )

        log("check: traker with our projection and ridge, one checkpoint")
        notes.append(matched_check(model, paths, data, 512))

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        f"repeats per variant: {args.repeats} (median), each variant warmed up once on "
        f"{N_PROBE} training sequences; variants timed in turn"
    )
    print_report(
        rows,
        "Ratios are theirs ÷ ours (a speed-up). The projections differ (traker: Gaussian, its "
        "seeds; ours: Rademacher, ours) and traker multiplies averaged scores by averaged Q "
        "(ours averages per-checkpoint Q-weighted scores), so scores agree only roughly.",
        notes,
    )


if __name__ == "__main__":
    run_main(main)
