"""Benchmark of the random projections of TRAK and TracIn on a BPNet-sized model; prints one
markdown table of ratios and the sweep of the sparse projection's nonzeros per parameter.

Run ``taskset -c 1 python benchmarks/bench_projection.py [--quick] [--repeats N]``.

Setting: a BPNet-style torch model (conv 4->64 width 21, 9 residual dilated convs 64->64 width
3, global mean, a dense counts head; 116,673 parameters), 1,000 bp random sequences, one CPU
thread. Featurisation is what TRAK and TracIn do per checkpoint: per-example gradients of the
model's output (the torch backend's ``per_example_gradients``, in batches of
``auto_batch_size`` rows), projected to 2,048 dimensions. Variants, timed back to back over the
same sequences (median over the repeats, each warmed up once). Times are this process's CPU
time (``time.process_time``, one thread): on a shared machine the wall-clock time of the same
passes varied by 1.8x between repeats.

- bare: the per-example gradient passes alone;
- dense Rademacher: the same plus ``Projector`` with the dense matrix, which at this size
  (0.9 GiB) exceeds ``PROJECTION_BYTES`` and is regenerated chunk by chunk for every batch;
- sparse: the same plus ``Projector`` with ``make_projection(..., "auto")`` (the sparse
  projection at this size), built once per run as it is once per checkpoint;
- TRAK.fit: ``seqattrib.TRAK(model, [checkpoint], loss="mse", proj_dim=2048).fit`` on the same
  sequences with its kernel step left out: the checks of the sequences and labels, the
  checkpoint's fingerprint, the gradients, the projection and the out-to-loss weights (one more
  forward pass per batch).

The sweep: for each number of nonzeros per parameter ``s``, the projection's own time on one
batch of real gradients (÷ the bare passes of that batch), and the error of the inner products
of 64 real per-example gradients, centred on their mean (2,080 pairs with the squared norms),
and of 64 heavy-tailed vectors (Student t, 1.5 degrees of freedom: a few coordinates
dominate), over 12 seeds, beside dense Gaussian and Rademacher matrices at the same ``d``: the
root mean square error in units of ``|a| |b| / sqrt(d)`` from the closed form (exact) and
measured over the seeds, the largest error in units of its pair's closed-form standard
deviation (the tail), and the measured variance ÷ its closed form (the sparse one:
``sum_r p_r / s^2 (|a|^2 |b|^2 + <a,b>^2 - 2 sum_i a_i^2 b_i^2)``; Gaussian
``(|a|^2 |b|^2 + <a,b>^2) / d``; Rademacher as Gaussian less ``2 sum_i a_i^2 b_i^2 / d``).
``--quick`` runs 64 sequences and 2 seeds (a smoke test; its numbers are not the benchmark).
"""

from __future__ import annotations

import _common

_common.blas_threads(1, force=True)  # before NumPy loads

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import models  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    Row,
    Variant,
    interleaved,
    load_average,
    log,
    machine_description,
    one_thread,
    print_report,
    run_main,
    start_frameworks,
)

LENGTH = 1000
PROJ_DIM = 2048
SWEEP = (1, 2, 4, 8, 16)
GRAM_ROWS = 64
TITLES = {
    "dense Rademacher": "gradients + dense Rademacher projection",
    "sparse": "gradients + sparse projection",
    "TRAK.fit": "TRAK.fit without its kernel step",
}
MODEL_LABEL = "BPNet-style (64 filters, 9 dilated convs, counts head; {:,} parameters), L=1000"


def featurise(
    backend: Any, model: Any, batches: list[tuple[Any, Any]], names: list[str], project: Any
) -> None:
    """Per-example gradients of every batch, projected by ``project()`` (a fresh projector, or
    None for the bare passes)."""
    from seqattrib.data_attribution import outputs
    from seqattrib.engine.outputs import Head

    fn = outputs.bound(outputs.prediction, backend)
    projector = project()
    for x, y in batches:
        grads = backend.per_example_gradients(model, x, y, fn, names, Head())
        if projector is not None:
            projector(grads)


def trak_featurise(model: Any, state: dict[str, Any], X: np.ndarray, y: np.ndarray) -> None:
    """``TRAK.fit`` in memory with its kernel step left out: what featurisation costs through
    the public path (checks, per-example gradients, projection, the out-to-loss weights)."""
    import seqattrib
    from seqattrib.data_attribution import trak, trak_kernel

    def no_kernel(features: Any, weights: Any, *args: Any) -> Any:
        return trak_kernel.KernelFit(features, np.eye(1), weights, 0.0, 1.0, 1.0)

    original = trak.fit_kernel
    trak.fit_kernel = no_kernel
    try:
        seqattrib.TRAK(model, [state], loss="mse", proj_dim=PROJ_DIM).fit(X, y)
    finally:
        trak.fit_kernel = original


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median CPU seconds of ``fn`` over ``repeats`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def dense_features(grads: np.ndarray, projection: Any) -> np.ndarray:
    """``grads @ P`` of a dense projection, block by block of its rows."""
    features = np.zeros((grads.shape[0], projection.proj_dim), np.float32)
    for start, stop, rows in projection.blocks():
        features += grads[:, start:stop] @ rows
    return features


def sketched_grams(features: Callable[[int], np.ndarray], seeds: int) -> np.ndarray:
    """(seeds, rows, rows): the Gram matrices of ``features(seed)`` (rows, d) per seed."""
    return np.array([f @ f.T for f in (features(seed).astype(np.float64) for seed in range(seeds))])


def error_stats(grams: np.ndarray, grads: np.ndarray, variance: np.ndarray) -> tuple[float, ...]:
    """Over the pairs i <= j: the closed-form and the measured RMS error in units of
    |a||b|/sqrt(d), the largest error in units of its pair's closed-form standard deviation,
    and the measured ÷ closed-form variance."""
    exact = grads @ grads.T
    norms = np.sqrt(np.diag(exact))
    upper = np.triu_indices(len(exact))
    errors = (grams - exact)[:, upper[0], upper[1]]
    unit2 = (np.outer(norms, norms) ** 2 / PROJ_DIM)[upper]
    var = variance[upper]
    keep = var > 0
    closed = float(np.sqrt(np.mean(var / unit2)))
    measured = float(np.sqrt(np.mean(errors**2 / unit2)))
    largest = float(np.abs(errors[:, keep] / np.sqrt(var[keep])).max())
    ratio = float(np.mean(errors[:, keep] ** 2) / np.mean(var[keep]))
    return closed, measured, largest, ratio


def closed_forms(grads: np.ndarray) -> dict[str, Callable[[Any], np.ndarray]]:
    """The variance of every pair's sketched inner product, per kind (given the projection)."""
    exact = grads @ grads.T
    norms2 = np.diag(exact)
    squares = grads**2
    fourth = squares @ squares.T  # sum_i a_i^2 b_i^2
    base = np.outer(norms2, norms2) + exact**2

    def sparse(projection: Any) -> np.ndarray:
        n, s = projection.n_features, projection.nonzeros
        rate = 0.0
        for width in projection.widths:
            loads = np.bincount(np.arange(n) % width, minlength=width).astype(np.float64)
            rate += (loads * (loads - 1)).sum() / (n * (n - 1)) / s**2
        return rate * (base - 2 * fourth)

    return {
        "gaussian": lambda _: base / PROJ_DIM,
        "rademacher": lambda _: (base - 2 * fourth) / PROJ_DIM,
        "sparse": sparse,
    }


def sweep_table(entries: list[tuple[Any, ...]]) -> str:
    header = (
        "projection",
        "projection ms / sequence",
        "projection ÷ bare passes",
        "device memory",
        "gradients: RMS error, closed form",
        "RMS error, measured",
        "largest error ÷ its σ",
        "variance ÷ closed form",
        "heavy-tailed: largest error ÷ its σ",
        "variance ÷ closed form",
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, ms, cost, memory, *numbers in entries:
        cells = [f"{v:.3f}" if i < 2 else f"{v:.2f}" for i, v in enumerate(numbers)]
        lines.append("| " + " | ".join((name, ms, cost, memory, *cells)) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 sequences, 2 seeds (smoke test)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per variant")
    args = parser.parse_args()
    n_sequences, seeds = (64, 2) if args.quick else (256, 12)

    frameworks = start_frameworks({"torch"})
    torch = frameworks["torch"]
    one_thread(torch)
    header = machine_description(frameworks)
    header.append("threads: 1 (torch intra-op and BLAS)")

    from seqattrib.backends.torch.core import TorchBackend
    from seqattrib.data_attribution import outputs
    from seqattrib.data_attribution.gradients import auto_batch_size
    from seqattrib.data_attribution.projection import (
        PROJECTION_BYTES,
        Projector,
        RandomProjection,
        SparseProjection,
        make_projection,
    )
    from seqattrib.engine.outputs import Head

    weights = models.bpnet_weights(n_outputs=1)
    model = models.torch_model("bpnet", weights)
    separate = models.torch_model("bpnet", weights)  # TRAK opens its own session on it
    backend = TorchBackend()
    params = backend.trainable_parameters(model)
    names = [name for name, _ in params]
    n_params = sum(int(np.prod(shape)) for _, shape in params)
    rows = auto_batch_size(n_params)
    label = MODEL_LABEL.format(n_params)
    X = models.random_one_hot(n_sequences, LENGTH, seed=0, layout="NCL")
    rows_table: list[Row] = []
    notes: list[str] = []
    with backend.session(model, "cpu"):
        batches = [
            (backend.asarray(X[i : i + rows]), backend.asarray(np.zeros((len(X[i : i + rows]), 1))))
            for i in range(0, n_sequences, rows)
        ]
        auto = make_projection(n_params, PROJ_DIM, 0, "auto")
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        labels = np.zeros(n_sequences, np.float32)
        dense = RandomProjection(n_params, PROJ_DIM, 0, "rademacher")
        variants = [
            Variant("bare", lambda: featurise(backend, model, batches, names, lambda: None)),
            Variant(
                "dense Rademacher",
                lambda: featurise(
                    backend, model, batches, names, lambda: Projector(backend, dense)
                ),
            ),
            Variant(
                "sparse",
                lambda: featurise(backend, model, batches, names, lambda: Projector(backend, auto)),
            ),
            Variant("TRAK.fit", lambda: trak_featurise(separate, state, X, labels)),
        ]
        log(f"featurisation of {n_sequences} sequences, batches of {rows}")
        times = interleaved(variants, args.repeats, clock=time.process_time)
        settings = f"{n_sequences} sequences, batches of {rows}, d={PROJ_DIM}"
        for name, what in (
            ("dense Rademacher", f"{dense.nbytes / 2**30:.2f} GiB matrix regenerated per batch"),
            ("sparse", f"make_projection auto: {auto.describe()}"),
            ("TRAK.fit", "the whole public featurisation (loss='mse'; the kernel step left out)"),
        ):
            rows_table.append(
                Row.ratio_row(
                    label,
                    "torch",
                    f"featurisation: {TITLES[name]} ÷ gradients alone",
                    f"{settings}; {what}",
                    times[name],
                    times["bare"],
                    times[name] / times["bare"],
                    "≤ 1.5",
                )
            )

        log("sweep: one batch of real per-example gradients")
        fn = outputs.bound(outputs.prediction, backend)
        x, y = batches[0]
        grads = backend.per_example_gradients(model, x, y, fn, names, Head())
        bare = median_seconds(
            lambda: backend.per_example_gradients(model, x, y, fn, names, Head()), args.repeats
        )
        # centred: the gradients of one model at nearby inputs are close to parallel, which
        # would make every pair's error the same few random numbers
        host = backend.to_numpy(grads)[:GRAM_ROWS]
        host = host - host.mean(axis=0)
        heavy = np.random.default_rng(0).standard_t(1.5, host.shape).astype(np.float32)
        sets = {"gradients": host.astype(np.float64), "heavy": heavy.astype(np.float64)}
        vectors = np.concatenate([host, heavy])
        on_device = backend.asarray(vectors)
        forms = {name: closed_forms(v) for name, v in sets.items()}

        def stats(grams: np.ndarray, kind: str, projection: Any) -> tuple[float, ...]:
            parts = (grams[:, :GRAM_ROWS, :GRAM_ROWS], grams[:, GRAM_ROWS:, GRAM_ROWS:])
            found = [
                error_stats(part, sets[name], forms[name][kind](projection))
                for part, name in zip(parts, sets, strict=True)
            ]
            return (*found[0], *found[1][2:])

        entries = []
        for kind in ("gaussian", "rademacher"):
            log(f"  {kind}: {seeds} seeds")
            grams = sketched_grams(
                lambda seed, k=kind: dense_features(
                    vectors, RandomProjection(n_params, PROJ_DIM, seed, k)
                ),
                seeds,
            )
            memory = f"{PROJECTION_BYTES / 2**20:.0f} MiB chunks, regenerated"
            entries.append((f"dense {kind}", "—", "—", memory, *stats(grams, kind, None)))
        for s in SWEEP:
            log(f"  sparse s={s}")
            projector = Projector(backend, SparseProjection(n_params, PROJ_DIM, 0, s))
            seconds = median_seconds(lambda p=projector: p(grads), args.repeats)
            grams = sketched_grams(
                lambda seed, s=s: Projector(backend, SparseProjection(n_params, PROJ_DIM, seed, s))(
                    on_device
                ),
                seeds,
            )
            memory = f"{(projector.signs.numel() * 8) / 2**20:.1f} MiB"
            ms = f"{seconds / len(x) * 1e3:.2f}"
            found = stats(grams, "sparse", projector.projection)
            entries.append((f"sparse s={s}", ms, f"{seconds / bare:.3f}", memory, *found))
    notes.append(f"bare per-example gradients: {bare / len(x) * 1e3:.1f} ms / sequence")
    notes.append(f"load average at the end (1/5/15 min): {load_average()}")
    for line in header:
        print(line)
    print_report(
        rows_table,
        "Ratios: the CPU time to featurise the same sequences with the projection ÷ without it "
        "(gradients alone), median over the repeats.",
        notes,
    )
    print()
    print(
        f"Sweep of the sparse projection (s nonzeros per parameter), d={PROJ_DIM}, {seeds} "
        f"seeds: errors of <Pa, Pb> over all pairs and squared norms of {GRAM_ROWS} real "
        f"gradients (centred) and of {GRAM_ROWS} heavy-tailed vectors (Student t, 1.5 degrees "
        "of freedom), RMS in units of |a||b|/sqrt(d):"
    )
    print()
    print(sweep_table(entries))


if __name__ == "__main__":
    run_main(main)
