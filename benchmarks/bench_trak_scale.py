"""Benchmark of TRAK at training-set scale (``seqattrib.TRAK`` with a features store) on one CPU
thread per process; prints one markdown table.

Run ``python benchmarks/bench_trak_scale.py [--n-train 100000,1000000] [--quick]
[--workdir DIR] [--cpus 0,1] [--no-traker]``.

Setting: training sequences of 1,000 bp, one-hot ``uint8`` in an ``np.memmap`` file of shape
(n, 4, 1000) (4 bytes per base, 4 GB for 10^6 sequences) and int64 labels in another; random
bases, class 1 carries the motif GATAAGGC once. 1,000 test sequences of the same kind. The small
CNN of ``bench_data_attribution.py`` (conv 4->32 width 11, relu, max-pool 4, conv 32->32 width 5
dilation 2, relu, global mean, dense 32->2) on 1,000 bp inputs: 6,658 parameters, the same as at
200 bp (its global mean makes it length-agnostic). One checkpoint: a state-dict file after two
epochs of SGD on the first 2,000 training sequences. ``TRAK(model, [checkpoint],
proj_dim=2048)`` with its defaults otherwise (classification margins, ``projection="auto"``,
``batch_size="auto"``, ``lambda_reg="auto"``); top-100 proponents.

Every phase runs in a fresh subprocess pinned to one CPU (``os.sched_setaffinity``) with one
thread (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` = 1 and
``torch.set_num_threads(1)``), which measures its own wall time and peak memory:

1. fit: ``TRAK(...).fit(X_train, y_train, store=...)`` (featurise into the HDF5 store, then the
   kernel; the time of its kernel step is taken apart by wrapping the module's
   ``fit_kernel``);
2. top_k: ``TRAK.from_store(...).top_k(X_test, y_test, 100)``, streamed over the store;
3. self-influence: ``TRAK.from_store(...).self_influence()``, streamed;
4. shards: ``fit(..., shard=(i, 2))`` for i = 0, 1 in two processes at once, on two CPUs, then
   ``seqattrib.io.merge`` of the two stores, which ends with the kernel step, in one more
   process; compared with phase 1 at the same size;
5. traker 0.3.2 at ``--traker-n`` (default 10^5) training sequences: the same model, checkpoint
   and ``proj_dim``, float32 (its float16 default is many times slower on a CPU), on the CPU
   with its ``BasicProjector``, ``FunctionalGradientComputer`` and ``MmapSaver`` (in the
   work folder), at its best batch size (a probe on 512 sequences, in its own process, picks
   among 32, 128 and 512); the whole job is featurize, ``finalize_features``, scoring the 1,000
   test sequences and a top-100 per test sequence from its ``(n_train, n_test)`` scores
   (``np.argpartition``); compared with ours fit + top_k, and its featurize with our fit
   minus its kernel step.

Memory is the **peak anonymous resident memory** of the phase's process (``RssAnon`` of
``/proc/self/status``, read every 2 ms by a thread during the phase and once at its end; a
spike shorter than that can be missed): heap, torch and numpy buffers, not the page cache of the
memory-mapped training set or of the HDF5 files, which the kernel can drop at any time. The
whole process counts, imports included (about 0.3 GB of torch); the table's notes also give
``RssAnon`` before the phase and ``VmHWM`` (the high-water mark of all resident memory, which
includes the memory-mapped pages the phase touched). Times are the phase's own wall time (the
imports, the model and the test set loaded before it are not counted; the first-call costs of
the phase, such as the batch-size probe of ``batch_size="auto"``, are).

Sizes: ``--n-train 100000,1000000`` (default); ``--quick`` is ``--n-train 10000,100000`` with
traker at 10^4. Scale rows compare the largest size with the smallest; the shard rows run at
the smallest size (``--shard-n``). Files go to ``--workdir`` (default
``/tmp/seqattrib-bench-trak-scale``): the training set for the largest size (generated once,
in chunks of 10,000 sequences, and reused or extended by later runs; about 4 GB per 10^6
sequences), the test set and the checkpoint, kept for the next run (remove the folder when
done); the stores (``n_train x 2048 x 4`` bytes: 8.2 GB at 10^6) and traker's folder are
deleted once measured. Timings are wall-clock on a shared machine: the load average is printed
before and after.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import numpy as np
from _common import Row, load_average, log, machine_description, print_report, run_main

LENGTH = 1000
N_TEST = 1000
K = 100
PROJ_DIM = 2048
FILTERS = 32
MOTIF = "GATAAGGC"
CHUNK = 10_000  # training sequences generated per chunk (each chunk its own seed)
N_CHECKPOINT_TRAIN = 2000
TRAKER_BATCHES = (32, 128, 512)
N_TRAKER_PROBE = 512
SAMPLE_SECONDS = 0.002
DEFAULT_WORKDIR = Path("/tmp/seqattrib-bench-trak-scale")
DEFAULT_SIZES = (100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
GB = 1e9


# --------------------------------------------------------------------------- data on disk
def _codes(n: int, seed: Any) -> tuple[np.ndarray, np.ndarray]:
    """Base codes (n, L) uint8 and 0/1 labels; class 1 carries MOTIF once."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, LENGTH), dtype=np.uint8)
    y = rng.integers(0, 2, n)
    rows = np.flatnonzero(y == 1)
    starts = rng.integers(0, LENGTH - len(MOTIF), size=len(rows))
    motif = np.array(["ACGT".index(c) for c in MOTIF], np.uint8)
    codes[rows[:, None], starts[:, None] + np.arange(len(MOTIF))] = motif
    return codes, y.astype(np.int64)


def _one_hot_into(out: np.ndarray, codes: np.ndarray) -> None:
    """Write (n, 4, L) uint8 one-hot of ``codes`` into ``out``."""
    for base in range(4):
        out[:, base, :] = codes == base


def train_paths(workdir: Path) -> tuple[Path, Path, Path]:
    return workdir / "train_X.u8", workdir / "train_y.i64", workdir / "train.json"


def ensure_training_set(workdir: Path, n: int) -> None:
    """The first ``n`` training sequences on disk; earlier files are reused and extended chunk by
    chunk (chunk c is drawn from seed (1, c), so a file's rows never depend on its size)."""
    x_path, y_path, meta_path = train_paths(workdir)
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("length") != LENGTH or meta.get("chunk") != CHUNK or meta.get("motif") != MOTIF:
        meta = {"length": LENGTH, "chunk": CHUNK, "motif": MOTIF, "rows": 0}
        for path in (x_path, y_path):
            path.unlink(missing_ok=True)
    done = int(meta["rows"])
    total = -(-n // CHUNK) * CHUNK
    if done >= total:
        return
    log(f"generating training sequences {done:,} to {total:,} in {workdir}")
    for path, row_bytes in ((x_path, 4 * LENGTH), (y_path, 8)):
        with open(path, "ab") as f:
            f.truncate(total * row_bytes)
    X = np.memmap(x_path, np.uint8, "r+", shape=(total, 4, LENGTH))
    y = np.memmap(y_path, np.int64, "r+", shape=(total,))
    for start in range(done, total, CHUNK):
        codes, labels = _codes(CHUNK, [1, start // CHUNK])
        _one_hot_into(X[start : start + CHUNK], codes)
        y[start : start + CHUNK] = labels
        X.flush()
        y.flush()
        meta["rows"] = start + CHUNK
        meta_path.write_text(json.dumps(meta))
    del X, y


def open_training_set(workdir: Path, n: int) -> tuple[np.memmap, np.memmap]:
    x_path, y_path, _ = train_paths(workdir)
    X = np.memmap(x_path, np.uint8, "r", shape=(n, 4, LENGTH))
    y = np.memmap(y_path, np.int64, "r", shape=(n,))
    return X, y


def ensure_test_set(workdir: Path) -> None:
    path = workdir / "test.npz"
    if not path.exists():
        codes, y = _codes(N_TEST, [2, 0])
        X = np.empty((N_TEST, 4, LENGTH), np.uint8)
        _one_hot_into(X, codes)
        np.savez(path, X=X, y=y)


def open_test_set(workdir: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(workdir / "test.npz") as f:
        return f["X"], f["y"]


def torch_model() -> Any:
    import models

    return models.small_cnn(FILTERS)


def ensure_checkpoint(workdir: Path) -> Path:
    """Two epochs of SGD on the first training sequences; a state-dict file."""
    import torch

    path = workdir / "checkpoint.pt"
    if path.exists():
        return path
    log("training the checkpoint")
    X, y = open_training_set(workdir, N_CHECKPOINT_TRAIN)
    xt = torch.from_numpy(np.asarray(X, np.float32))
    yt = torch.from_numpy(np.array(y))
    model = torch_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), 64):
            idx = order[start : start + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    torch.save(model.state_dict(), path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    return path


# --------------------------------------------------------------------------- memory
class AnonPeak:
    """The peak of this process's ``RssAnon``, read every ``SAMPLE_SECONDS`` by a thread."""

    def __init__(self) -> None:
        self._fd = os.open("/proc/self/status", os.O_RDONLY)
        self._stop = threading.Event()
        self.peak = self.read()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def field(self, name: str) -> int:
        """A field of /proc/self/status, in bytes."""
        text = os.pread(self._fd, 16384, 0)
        start = text.index(name.encode() + b":") + len(name) + 1
        return int(text[start : text.index(b"kB", start)]) * 1024

    def read(self) -> int:
        return self.field("RssAnon")

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, self.read())

    def __enter__(self) -> AnonPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


# --------------------------------------------------------------------------- the phases
class KernelTimer:
    """Adds up the time TRAK spends in its kernel step (``fit_kernel``, as ``TRAK.fit`` and the
    kernel step of a merged store call it), to split featurisation off."""

    def __init__(self) -> None:
        from seqattrib.data_attribution import trak as trak_module

        self.module = trak_module
        self.original = trak_module.fit_kernel
        self.seconds = 0.0

    def __enter__(self) -> KernelTimer:
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return timer.original(*args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - start

        self.module.fit_kernel = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.module.fit_kernel = self.original


def _ours(spec: dict[str, Any]) -> Callable[[], Any]:
    """The call of one of our phases, with everything it needs loaded first."""
    import seqattrib

    workdir = Path(spec["workdir"])
    checkpoint = str(workdir / "checkpoint.pt")
    model = torch_model()
    phase = spec["phase"]
    if phase in ("fit", "shard"):
        X, y = open_training_set(workdir, spec["n"])
        shard = tuple(spec["shard"]) if phase == "shard" else None
        projection = spec.get("projection", "auto")
        trak = seqattrib.TRAK(model, [checkpoint], proj_dim=PROJ_DIM, projection=projection)
        return lambda: trak.fit(X, y, store=spec["store"], shard=shard)
    if phase == "merge":
        return lambda: seqattrib.io.merge(spec["shards"], spec["store"])
    if phase == "top_k":
        Xt, yt = open_test_set(workdir)
        return lambda: seqattrib.TRAK.from_store(spec["store"], model, [checkpoint]).top_k(
            Xt, yt, K
        )
    if phase == "self_influence":
        return lambda: seqattrib.TRAK.from_store(
            spec["store"], model, [checkpoint]
        ).self_influence()
    raise ValueError(f"unknown phase {phase!r}")


@contextmanager
def _traker(spec: dict[str, Any], n: int) -> Iterator[Any]:
    """A traker TRAKer on the checkpoint, saving into a fresh folder that is removed after."""
    import logging

    import torch
    from trak import TRAKer

    folder = Path(spec["workdir"]) / f"traker-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    try:
        tr = TRAKer(
            model=torch_model(),
            task="image_classification",
            train_set_size=n,
            save_dir=str(folder),
            device="cpu",
            proj_dim=PROJ_DIM,
            use_half_precision=False,
            logging_level=logging.ERROR,
        )
        tr.load_checkpoint(torch.load(spec["checkpoint"], weights_only=True), model_id=0)
        yield tr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _batches(X: Any, y: Any, batch: int) -> Iterator[tuple[Any, Any, int]]:
    """torch batches of a memmap (cast to float32, as a data loader would)."""
    import torch

    for start in range(0, len(X), batch):
        xb = torch.from_numpy(np.asarray(X[start : start + batch], np.float32))
        yield xb, torch.from_numpy(np.array(y[start : start + batch])), len(xb)


def traker_probe(spec: dict[str, Any]) -> dict[str, float]:
    """Seconds of traker's featurize of N_TRAKER_PROBE sequences at each batch size (after one
    warm-up pass at that size)."""
    X, y = open_training_set(Path(spec["workdir"]), N_TRAKER_PROBE)
    times = {}
    for batch in TRAKER_BATCHES:
        seconds = []
        for _ in range(2):
            with _traker(spec, N_TRAKER_PROBE) as tr:
                start = time.perf_counter()
                for xb, yb, m in _batches(X, y, batch):
                    tr.featurize(batch=[xb, yb], num_samples=m)
                seconds.append(time.perf_counter() - start)
        times[str(batch)] = seconds[-1]
    return times


def traker_job(spec: dict[str, Any], peak: AnonPeak) -> dict[str, Any]:
    """traker's whole job at spec["n"], each step timed; top-K from its scores."""
    workdir = Path(spec["workdir"])
    n, batch = spec["n"], spec["batch"]
    X, y = open_training_set(workdir, n)
    Xt, yt = open_test_set(workdir)
    state_path = spec["checkpoint"]
    import torch

    with _traker(spec, n) as tr:
        with peak:
            t0 = time.time()
            for xb, yb, m in _batches(X, y, batch):
                tr.featurize(batch=[xb, yb], num_samples=m)
            t1 = time.time()
            tr.finalize_features()
            t2 = time.time()
            state = torch.load(state_path, weights_only=True)
            tr.start_scoring_checkpoint("targets", state, model_id=0, num_targets=N_TEST)
            for xb, yb, m in _batches(Xt, yt, batch):
                tr.score(batch=[xb, yb], num_samples=m)
            scores = np.asarray(tr.finalize_scores("targets"), np.float32).T  # (n_test, n)
            top = np.argpartition(-scores, K - 1, axis=1)[:, :K]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            np.take_along_axis(top, order, axis=1)
            t3 = time.time()
    return {
        "start": t0,
        "end": t3,
        "featurize": t1 - t0,
        "finalize_features": t2 - t1,
        "score_top_k": t3 - t2,
    }


def phase_main(spec: dict[str, Any]) -> None:
    """One phase in this fresh process: wait for the parent's go, measure, print JSON."""
    os.sched_setaffinity(0, {spec["cpu"]})
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    _common.start_frameworks(("torch",))
    peak = AnonPeak()
    if spec["phase"] == "traker_probe":
        result: dict[str, Any] = {"times": traker_probe(spec)}
    else:
        call = None if spec["phase"] == "traker" else _ours(spec)
        before = peak.read()
        print("ready", flush=True)
        sys.stdin.readline()
        if call is None:
            result = traker_job(spec, peak)
        else:
            with peak, KernelTimer() as kernel:
                start = time.time()
                call()
                end = time.time()
            result = {"start": start, "end": end, "kernel": kernel.seconds}
        result |= {"peak_anon": peak.peak, "anon_before": before, "vmhwm": peak.field("VmHWM")}
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- the parent
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = "1"
    return env


def run_phases(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run phases in fresh processes at once: each sets up, then all start on one signal.
    Their stderr goes to files (a full pipe would stall a child that the parent is not
    reading yet)."""
    for spec in specs:
        log(f"  {spec['phase']} n={spec.get('n', 0):,} on CPU {spec['cpu']}")
    with tempfile.TemporaryDirectory() as folder:
        logs = [Path(folder) / f"stderr-{i}.txt" for i in range(len(specs))]
        children = []
        for spec, path in zip(specs, logs, strict=True):
            with open(path, "w") as stderr:
                children.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "--phase", json.dumps(spec)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                        env=_child_env(),
                    )
                )

        def failed(i: int) -> RuntimeError:
            return RuntimeError(f"phase {specs[i]} failed:\n{logs[i].read_text()[-3000:]}")

        try:
            if specs[0]["phase"] != "traker_probe":
                for i, child in enumerate(children):
                    if child.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                        child.wait()
                        raise failed(i)
                for child in children:
                    child.stdin.write("go\n")  # type: ignore[union-attr]
                    child.stdin.flush()  # type: ignore[union-attr]
            results = []
            for i, child in enumerate(children):
                out, _ = child.communicate()
                if child.returncode != 0:
                    raise failed(i)
                results.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    for result in results:
        if "end" in result:
            log(
                f"  {result['end'] - result['start']:.1f} s, "
                f"peak RssAnon {result['peak_anon'] / GB:.2f} GB"
            )
    return results


def run_phase(spec: dict[str, Any]) -> dict[str, Any]:
    return run_phases([spec])[0]


def seconds(result: dict[str, Any]) -> float:
    return float(result["end"] - result["start"])


def fmt_gb(n_bytes: float) -> str:
    return f"{n_bytes / GB:.2f} GB"


def remove_store(path: Path) -> None:
    path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--n-train",
        default=None,
        help="training-set sizes, comma-separated (default 100000,1000000)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="sizes 10000,100000 and traker at 10000"
    )
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="data and stores")
    parser.add_argument(
        "--cpus", default=None, help="two CPU ids for the phases (default: the first two usable)"
    )
    parser.add_argument("--shard-n", type=int, default=None, help="size of the shard rows")
    parser.add_argument("--traker-n", type=int, default=None, help="size of the traker rows")
    parser.add_argument("--no-traker", action="store_true", help="skip the traker rows")
    parser.add_argument(
        "--projection",
        default="auto",
        help="TRAK's projection= (default auto: a dense Rademacher matrix for this model)",
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        phase_main(json.loads(args.phase))
        return

    if args.n_train:
        sizes = sorted({int(float(s)) for s in args.n_train.split(",") if s.strip()})
    else:
        sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    shard_n = args.shard_n or sizes[0]
    traker_n = args.traker_n or (QUICK_SIZES[0] if args.quick else DEFAULT_SIZES[0])
    usable = sorted(os.sched_getaffinity(0))
    cpus = [int(c) for c in args.cpus.split(",")] if args.cpus else usable[:2]
    if len(cpus) != 2:
        parser.error(f"--cpus needs two CPU ids, got {args.cpus!r} (usable: {usable})")
    notes: list[str] = []
    has_traker = not args.no_traker and importlib.util.find_spec("trak") is not None
    if not args.no_traker and not has_traker:
        notes.append(
            "traker rows skipped: traker is not installed "
            "(pip install -c .ci/constraints.txt traker==0.3.2)"
        )

    import torch

    frameworks: dict[str, Any] = {"torch": torch}
    if has_traker:
        import trak

        frameworks["traker"] = trak
    header = machine_description(frameworks)
    header.append(
        f"every phase: a fresh process pinned to one CPU (CPUs {cpus[0]} and {cpus[1]}), BLAS "
        "and OpenMP threads 1, torch.set_num_threads(1)"
    )
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    ensure_training_set(workdir, max(sizes + [shard_n, traker_n, N_CHECKPOINT_TRAIN]))
    ensure_test_set(workdir)
    checkpoint = ensure_checkpoint(workdir)
    n_params = sum(p.numel() for p in torch_model().parameters())
    label = f"small CNN ({n_params:,} parameters), L={LENGTH}"
    header.append(f"work folder: {workdir}")
    base = {
        "workdir": str(workdir),
        "checkpoint": str(checkpoint),
        "cpu": cpus[0],
        "projection": args.projection,
    }
    header.append(f"TRAK projection={args.projection!r}")

    measured: dict[int, dict[str, dict[str, Any]]] = {}
    for n in sorted(set(sizes + [shard_n] + ([traker_n] if has_traker else []))):
        log(f"n_train = {n:,}")
        store = workdir / f"store-{n}.h5"
        remove_store(store)
        phases = {"fit": run_phase(base | {"phase": "fit", "n": n, "store": str(store)})}
        for phase in ("top_k", "self_influence"):
            phases[phase] = run_phase(base | {"phase": phase, "n": n, "store": str(store)})
        remove_store(store)
        measured[n] = phases

    rows: list[Row] = []

    def setting(n: int) -> str:
        return f"n_train={n:,}, proj_dim={PROJ_DIM}, 1 checkpoint, {N_TEST:,} tests, top-{K}"

    for n in sizes:
        for phase, result in measured[n].items():
            rows.append(
                Row(
                    label,
                    "torch",
                    f"{phase}: wall time, peak RssAnon",
                    setting(n),
                    f"{seconds(result):.1f}",
                    "—",
                    None,
                    "—",
                    "—",
                )
            )
            notes.append(
                f"n_train={n:,}, {phase}: peak RssAnon {fmt_gb(result['peak_anon'])} "
                f"(before the phase {fmt_gb(result['anon_before'])}), VmHWM "
                f"{fmt_gb(result['vmhwm'])}"
                + (f"; kernel step {result['kernel']:.1f} s" if phase == "fit" else "")
            )
        peak = max(r["peak_anon"] for r in measured[n].values())
        rows.append(
            Row(
                label,
                "torch",
                "peak RssAnon of the phases (GB)",
                setting(n),
                fmt_gb(peak),
                "—",
                peak / GB,
                "≤ 2.5",
                "—" if n < 1_000_000 else _common.meets(peak / GB, "≤ 2.5"),
            )
        )

    small, large = sizes[0], sizes[-1]
    if large > small:
        scale = f"n_train {large:,} vs {small:,}"
        for phase in ("fit", "top_k", "self_influence"):
            a, b = measured[large][phase], measured[small][phase]
            rows.append(
                Row(
                    label,
                    "torch",
                    f"{phase}: peak RssAnon, {large:,} ÷ {small:,}",
                    scale,
                    fmt_gb(a["peak_anon"]),
                    fmt_gb(b["peak_anon"]),
                    a["peak_anon"] / b["peak_anon"],
                    "≤ 1.3",
                    _common.meets(a["peak_anon"] / b["peak_anon"], "≤ 1.3"),
                )
            )
        total = {n: sum(seconds(r) for r in measured[n].values()) for n in (small, large)}
        for phase in ("fit", "top_k", "self_influence", "all three"):
            if phase == "all three":
                a, b = total[large], total[small]
            else:
                a, b = seconds(measured[large][phase]), seconds(measured[small][phase])
            ratio = (a / large) / (b / small)
            rows.append(
                Row(
                    label,
                    "torch",
                    f"{phase}: time per training sequence, {large:,} ÷ {small:,}",
                    scale,
                    f"{a:.1f}",
                    f"{b:.1f}",
                    ratio,
                    "≤ 1.25",
                    _common.meets(ratio, "≤ 1.25"),
                )
            )
        minutes = total[large] / 60
        rows.append(
            Row(
                label,
                "torch",
                "fit + top_k + self-influence, one thread (minutes)",
                setting(large),
                f"{total[large]:.1f}",
                "—",
                minutes,
                "≤ 30",
                "—" if large < 1_000_000 else _common.meets(minutes, "≤ 30"),
            )
        )
    else:
        notes.append("one size only: no scale rows")

    log(f"shards: two processes at n_train = {shard_n:,}")
    shards = [workdir / f"store-{shard_n}.shard-{i}-of-2.h5" for i in range(2)]
    merged = workdir / f"store-{shard_n}.merged.h5"
    for path in (*shards, merged):
        remove_store(path)
    pair = run_phases(
        [
            base
            | {"phase": "shard", "n": shard_n, "store": str(shards[i]), "shard": [i, 2], "cpu": c}
            for i, c in enumerate(cpus)
        ]
    )
    merge = run_phase(
        base | {"phase": "merge", "shards": [str(s) for s in shards], "store": str(merged)}
    )
    for path in (*shards, merged):
        remove_store(path)
    both = max(r["end"] for r in pair) - min(r["start"] for r in pair) + seconds(merge)
    one = seconds(measured[shard_n]["fit"])
    rows.append(
        Row.ratio_row(
            label,
            "torch",
            "fit: 2 shards on 2 CPUs + merge and kernel ÷ 1 process on 1 CPU",
            setting(shard_n),
            both,
            one,
            both / one,
            "≤ 0.6",
        )
    )
    notes.append(
        f"shards at n_train={shard_n:,}: "
        + ", ".join(f"shard {i} {seconds(r):.1f} s" for i, r in enumerate(pair))
        + f" (concurrent wall {both - seconds(merge):.1f} s), merge and kernel "
        f"{seconds(merge):.1f} s (kernel step {merge['kernel']:.1f} s); "
        f"peak RssAnon per shard "
        + ", ".join(fmt_gb(r["peak_anon"]) for r in pair)
        + f", merge {fmt_gb(merge['peak_anon'])}"
    )

    if has_traker:
        traker_rows(label, setting(traker_n), base, traker_n, measured[traker_n], rows, notes)

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        "one run per phase (no repeats: the jobs are long); the shard processes start on one "
        "signal after their imports"
    )
    print_report(
        rows,
        "Time rows: seconds (ours, theirs); ratio rows as named. Memory: peak anonymous resident "
        f"memory (RssAnon, sampled every {SAMPLE_SECONDS * 1000:.0f} ms) of the phase's whole "
        "process, imports included; the page cache of the memory-mapped training set and of "
        "the HDF5 files does not count. Rows that state an absolute value (GB, minutes) carry "
        "it in the ratio column; their target is checked at 1,000,000 training sequences "
        "only. Timings are wall-clock, so they move with the machine's load.",
        notes,
    )


def traker_rows(
    label: str,
    settings: str,
    base: dict[str, Any],
    n: int,
    ours: dict[str, dict[str, Any]],
    rows: list[Row],
    notes: list[str],
) -> None:
    """traker at ``n`` against our fit + top_k at ``n``."""
    log(f"traker at n_train = {n:,}")
    probe = run_phase(base | {"phase": "traker_probe"})["times"]
    batch = int(min(probe, key=probe.__getitem__))
    notes.append(
        f"traker float32 featurize probe on {N_TRAKER_PROBE} sequences: "
        + ", ".join(f"batch {b}: {t:.2f} s" for b, t in probe.items())
    )
    theirs = run_phase(base | {"phase": "traker", "n": n, "batch": batch})
    fit = seconds(ours["fit"])
    featurize = fit - ours["fit"]["kernel"]
    rows.append(
        Row.ratio_row(
            label,
            "torch",
            f"featurize: traker float32 (batch {batch}) ÷ ours (fit minus its kernel step)",
            settings,
            featurize,
            theirs["featurize"],
            theirs["featurize"] / featurize,
            "≥ 1.2",
        )
    )
    ours_job = fit + seconds(ours["top_k"])
    rows.append(
        Row.ratio_row(
            label,
            "torch",
            "whole job: traker (featurize, finalize, score, top-k) ÷ ours (fit, top_k)",
            settings,
            ours_job,
            seconds(theirs),
            seconds(theirs) / ours_job,
            "≥ 1.1",
        )
    )
    mine = max(ours["fit"]["peak_anon"], ours["top_k"]["peak_anon"])
    rows.append(
        Row(
            label,
            "torch",
            "peak RssAnon of the whole job: ours ÷ traker",
            settings,
            fmt_gb(mine),
            fmt_gb(theirs["peak_anon"]),
            mine / theirs["peak_anon"],
            "≤ 0.5",
            _common.meets(mine / theirs["peak_anon"], "≤ 0.5"),
        )
    )
    notes.append(
        f"traker at n_train={n:,}: featurize {theirs['featurize']:.1f} s, finalize_features "
        f"{theirs['finalize_features']:.1f} s, score + top-{K} {theirs['score_top_k']:.1f} s; "
        f"peak RssAnon {fmt_gb(theirs['peak_anon'])} (before {fmt_gb(theirs['anon_before'])}), "
        f"VmHWM {fmt_gb(theirs['vmhwm'])} (its features and scores are memory-mapped files in "
        "the work folder: their pages are not anonymous)"
    )


if __name__ == "__main__":
    run_main(main)
