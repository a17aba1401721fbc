"""What the safeguards of results files cost: fingerprints, the write lock and resume checks.

    python benchmarks/bench_files.py [--n-regions 1000] [--repeats 3] [--quick]

Two measurements, each printed as ratios of times taken in this one run:

1. Fingerprint cost on a BPNet-sized model (tests/models.py ``bpnet``: 64 filters, 9 dilated
   layers, 5 outputs; torch, one thread) and 10,000 x 2,114-bp inputs: the model fingerprint
   plus the per-row hashes of X, computed once when the rows are written and once more when a
   file is resumed or reused, against the job they protect: EIG (25 dinucleotide-shuffled
   baselines x 25 Gauss-Legendre points) and saliency, timed on a few sequences and scaled to
   10,000. Also the digest of a genome FASTA that the command line takes once per run
   (``--genome``), timed on 256 MiB and scaled to 3.1 GB.
2. Overhead on a 1,000-region EIG run of the demo CNN (200 bp, 3 targets, tracks with regions
   written to HDF5): the run with every safeguard (lock, model and output_fn fingerprints, row
   hashes) against the same run with them stubbed out, timed in turn; plus the time to reuse
   the finished file (lock, every check, the rows of X hashed again). EIG is cut to 5
   baselines x 5 points so that the run is short and the fixed costs weigh the most. On a
   shared machine wall-clock times of minutes-long runs vary by tens of percent: the ratio is
   also given in process CPU time, and as the run's time over the run less the time measured
   inside the safeguards themselves.

Torch runs on one thread (as the hashes do).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
from _common import (
    Row,
    Variant,
    interleaved,
    load_average,
    log,
    machine_description,
    markdown_table,
    time_once,
)

N_INPUTS, LENGTH = 10_000, 2_114
GENOME_BYTES = 3.1e9


def _bpnet() -> Any:
    return models.torch_model("bpnet", models.bpnet_weights(n_outputs=5, filters=64, n_layers=9))


def fingerprint_rows(quick: bool) -> list[Row]:
    import seqattrib as sa
    from seqattrib.io.fingerprint import file_fingerprint, model_fingerprint, row_hashes

    model = _bpnet()
    be = sa.get_backend(model)
    n_inputs = 1_000 if quick else N_INPUTS
    X = models.random_one_hot(1_024, LENGTH, seed=0, layout="NCL").astype(np.int8)
    log(f"hashing {n_inputs} x {LENGTH} bp rows (blocks of 1,024, int8 input)")
    tick = time.perf_counter()
    model_fingerprint(model, be.state)
    model_seconds = time.perf_counter() - tick
    tick = time.perf_counter()
    for start in range(0, n_inputs, len(X)):
        row_hashes(X[: min(len(X), n_inputs - start)].astype(np.float32))
    rows_seconds = (time.perf_counter() - tick) * N_INPUTS / n_inputs
    # written once, checked once on resume or reuse
    safeguards = 2 * (model_seconds + rows_seconds)
    log(f"  model {model_seconds:.3f} s, rows {rows_seconds:.2f} s (per 10,000)")
    with tempfile.NamedTemporaryFile() as genome:  # --genome: the file's bytes, once a run
        size = 2**26 if quick else 2**28
        genome.write(np.random.default_rng(0).integers(0, 256, size, np.uint8).tobytes())
        genome.flush()
        tick = time.perf_counter()
        file_fingerprint(genome.name)
        genome_seconds = (time.perf_counter() - tick) * GENOME_BYTES / size
    log(f"  genome digest {genome_seconds:.1f} s for a 3.1 GB genome")

    jobs = {
        "EIG 25 x 25": (2 if not quick else 1, dict(n_baselines=25, n_steps=25)),
        "saliency": (64 if not quick else 8, {}),
    }
    rows = []
    for name, (n, kwargs) in jobs.items():
        Xj = X[:n]
        method = sa.expected_integrated_gradients if kwargs else sa.saliency
        method(model, Xj[:1], batch_size=128, **kwargs)  # warm-up
        seconds = time_once(lambda m=method, x=Xj, k=kwargs: m(model, x, batch_size=128, **k))
        job = seconds * N_INPUTS / n
        log(f"  {name}: {seconds:.1f} s for {n} sequences, {job:.0f} s for 10,000")
        rows.append(
            Row.ratio_row(
                "BPNet (64 filters, 9 layers)",
                "torch",
                f"fingerprints ÷ {name} job",
                f"10,000 x 2,114 bp; model + row hashes, written and checked once; job "
                f"scaled from {n} sequences",
                safeguards,
                job,
                safeguards / job,
                "≤ 0.01",
            )
        )
        rows.append(
            Row.ratio_row(
                "BPNet (64 filters, 9 layers)",
                "torch",
                f"genome digest ÷ {name} job",
                "3.1 GB genome FASTA (hg38-sized, scaled from 256 MiB read from a file), once "
                "per run",
                genome_seconds,
                job,
                genome_seconds / job,
                "≤ 0.01",
            )
        )
    return rows


@contextlib.contextmanager
def without_safeguards() -> Iterator[None]:
    """The same run with the lock, the fingerprints, the row hashes and the checks stubbed
    (where their callers look them up: the job module imports the fingerprints by name)."""
    from seqattrib.attribution import job
    from seqattrib.io import lock, tracks, tracks_resume

    stubs = [
        (lock, "acquire", lambda path, func, param="out": lock.WriteLock(path, None)),
        (job, "model_fingerprint", lambda model, get_state: "0" * 32),
        (job, "function_identity", lambda fn: None),
        (tracks, "row_hashes", lambda rows: np.zeros((len(rows), 16), np.uint8)),
        (tracks_resume, "_check_rows", lambda *args: None),
        (tracks_resume, "_check_regions", lambda *args: None),
    ]
    saved = [getattr(owner, name) for owner, name, _ in stubs]
    for owner, name, stub in stubs:
        setattr(owner, name, stub)
    try:
        yield
    finally:
        for (owner, name, _), fn in zip(stubs, saved, strict=True):
            setattr(owner, name, fn)


@contextlib.contextmanager
def timed_safeguards(spent: list[float]) -> Iterator[None]:
    """Add the time spent in the lock, the fingerprints, the row hashes and the checks."""
    from seqattrib.attribution import job
    from seqattrib.io import lock, tracks, tracks_resume

    targets = [
        (lock, "acquire"),
        (lock.WriteLock, "release"),
        (job, "model_fingerprint"),
        (job, "function_identity"),
        (tracks, "row_hashes"),
        (tracks_resume, "_check_rows"),
        (tracks_resume, "_check_regions"),
    ]
    saved = [getattr(owner, name) for owner, name in targets]

    def timer(fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            tick = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - tick)

        return timed

    for (owner, name), fn in zip(targets, saved, strict=True):
        setattr(owner, name, timer(fn))
    try:
        yield
    finally:
        for (owner, name), fn in zip(targets, saved, strict=True):
            setattr(owner, name, fn)


def overhead_rows(n_regions: int, repeats: int, folder: Path) -> list[Row]:
    import seqattrib as sa
    from seqattrib import demo

    data = demo.load_data()
    model = demo.torch_model()
    X = sa.one_hot(data["sequences"][:n_regions], layout="NCL", dtype=np.int8)
    regions = data["regions"].take(np.arange(n_regions))
    kwargs = dict(target=[0, 1, 2], n_baselines=5, n_steps=5, batch_size=300, regions=regions)
    path = folder / "t.h5"

    def guarded() -> None:
        sa.expected_integrated_gradients(model, X, out=path, overwrite=True, **kwargs)

    def bare() -> None:
        with without_safeguards():
            sa.expected_integrated_gradients(model, X, out=path, overwrite=True, **kwargs)

    log(f"EIG 5 x 5 on {n_regions} demo regions, to HDF5, with and without the safeguards")
    cpu: dict[str, list[float]] = {"guarded": [], "bare": []}

    def on_cpu(name: str, run: Any) -> Any:
        def timed() -> None:
            tick = time.process_time()
            run()
            cpu[name].append(time.process_time() - tick)

        return timed

    times = interleaved(
        [Variant("guarded", on_cpu("guarded", guarded)), Variant("bare", on_cpu("bare", bare))],
        repeats,
    )
    cpu_times = {name: statistics.median(values[1:]) for name, values in cpu.items()}
    spent: list[float] = []
    with timed_safeguards(spent):
        whole = time_once(guarded)
    inside = sum(spent)
    guarded()
    reuse = min(
        time_once(lambda: sa.expected_integrated_gradients(model, X, out=path, **kwargs))
        for _ in range(repeats)
    )
    settings = f"{n_regions} regions x 200 bp, 3 targets, EIG 5 x 5 points, tracks + regions"
    return [
        Row.ratio_row(
            "demo CNN",
            "torch",
            "with safeguards ÷ without",
            settings,
            times["guarded"],
            times["bare"],
            times["guarded"] / times["bare"],
            "≤ 1.02",
        ),
        Row.ratio_row(
            "demo CNN",
            "torch",
            "with safeguards ÷ without (process CPU time)",
            settings,
            cpu_times["guarded"],
            cpu_times["bare"],
            cpu_times["guarded"] / cpu_times["bare"],
            "≤ 1.02",
        ),
        Row.ratio_row(
            "demo CNN",
            "torch",
            "run ÷ run less the time spent in the safeguards",
            f"{settings}; lock, fingerprints, row hashes and checks timed inside one run",
            whole,
            whole - inside,
            whole / (whole - inside),
            "≤ 1.02",
        ),
        Row.ratio_row(
            "demo CNN",
            "torch",
            "reuse of the finished file ÷ run",
            f"{settings}; lock, fingerprints and every row of X checked",
            reuse,
            times["guarded"],
            reuse / times["guarded"],
            "—",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-regions", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per variant")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the hashes run on one core: the job too; steadier when shared
    header = [
        "torch threads: 1 (set by this script)" if line.startswith("torch threads") else line
        for line in machine_description({"torch": torch})
    ]
    n_regions, repeats = (100, 1) if args.quick else (args.n_regions, args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        rows = fingerprint_rows(args.quick) + overhead_rows(n_regions, repeats, Path(folder))
    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(f"repeats per variant: {repeats} (median), variants timed in turn after a warm-up")
    print()
    print(markdown_table(rows))
    print()
    print("Ratios are ours ÷ theirs: the safeguards' time over the time of what they protect.")
    for row in rows:
        if row.ratio is not None and row.ratio < 0.01:
            print(f"- {row.comparison}: {row.ratio:.2e}")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
