"""The harness every benchmark script shares: the path and thread preamble, timing, peak
memory, the results table and the machine description.

Benchmarks are scripts, not tests: they print one markdown table of ratios measured in one run.
Every ratio compares variants timed back to back in the same process, each warmed up once
before timing, reported as the median over repeats.

A script imports this module first (it sits beside the scripts, so ``import _common`` finds it):
that puts this checkout's ``seqattrib`` and the test models (``tests/models.py``,
``tests/published_models.py``) on ``sys.path`` and quiets TensorFlow's start-up logging, before
any framework is imported. It imports no framework itself, so a script can still fix the BLAS
threads (``blas_threads``) before NumPy loads.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO / "tests", REPO):  # the test models, and the seqattrib of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def blas_threads(threads: int | str, *, force: bool = False) -> None:
    """Fix NumPy's and the frameworks' BLAS/OpenMP threads; only before NumPy is imported.
    ``force``: also over values set in the environment."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if force:
            os.environ[name] = str(threads)
        else:
            os.environ.setdefault(name, str(threads))


def one_thread(torch: Any = None, tf: Any = None) -> None:
    """One intra-op (and inter-op) thread in torch and TensorFlow, for the ones given."""
    if torch is not None:
        torch.set_num_threads(1)
    if tf is not None:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)


def run_main(main: Callable[[], Any]) -> None:
    """Run a script's ``main`` and log how long the whole run took."""
    start = time.perf_counter()
    main()
    log(f"done in {time.perf_counter() - start:.0f} s")


def log(message: str) -> None:
    """Progress on stderr, so stdout holds only the report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- timing
@dataclass
class Variant:
    """One side of a comparison: ``run`` is timed, ``warm`` (default: ``run``) warms it up."""

    name: str
    run: Callable[[], Any]
    warm: Callable[[], Any] | None = None
    sync: Callable[[], None] | None = None


def time_once(
    fn: Callable[[], Any],
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds of one call (after waiting for queued device work, when given)."""
    start = clock()
    fn()
    if sync is not None:
        sync()
    return clock() - start


# --------------------------------------------------------------------------- peak memory
def fmt_bytes(n: float) -> str:
    return f"{n:,.0f} B" if float(n).is_integer() else f"{n:,.1f} B"


def fmt_mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def probe_in_subprocess(script: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``script --memory-probe SPEC`` in a fresh process; the JSON it prints last."""
    log(f"  memory probe {spec}")
    done = subprocess.run(
        [sys.executable, script, "--memory-probe", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory probe {spec} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _status(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss(call: Callable[[], Any]) -> tuple[int, str]:
    """Bytes of resident memory ``call`` added at its peak, and how that was measured.

    Not getrusage's ru_maxrss: it survives fork + exec, so a child started by a large parent
    reports the parent's RSS. VmHWM is this process's own high-water mark, reset just before
    the call where the kernel allows it.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = "reset via /proc/self/clear_refs just before the call"
    except OSError:
        reset = "not resettable here: includes the imports' peak"
    before = _status("VmRSS")
    result = call()
    peak = _status("VmHWM")
    del result
    return peak - before, f"peak RSS (VmHWM of /proc/self/status, {reset}) − RSS before the call"


def interleaved(
    variants: list[Variant], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Warm every variant once, then time them in turn ``repeats`` times; medians by name.
    ``clock``: wall-clock seconds by default (``time.process_time``: this process's CPU)."""
    for v in variants:
        log(f"  warm-up {v.name}")
        time_once(v.warm or v.run, v.sync, clock)
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(repeats):
        for v in variants:
            seconds = time_once(v.run, v.sync, clock)
            times[v.name].append(seconds)
            log(f"  repeat {r + 1}/{repeats} {v.name}: {seconds:.2f} s")
    return {name: statistics.median(ts) for name, ts in times.items()}


# --------------------------------------------------------------------------- the table
@dataclass
class Row:
    model: str
    backend: str
    comparison: str
    settings: str
    ours: str
    theirs: str
    ratio: float | None
    target: str
    met: str

    @classmethod
    def ratio_row(
        cls,
        model: str,
        backend: str,
        comparison: str,
        settings: str,
        ours: float,
        theirs: float,
        ratio: float,
        target: str,
    ) -> Row:
        """A row of two times whose ratio is checked against ``target`` (e.g. "≤ 1.10")."""
        return cls(
            model,
            backend,
            comparison,
            settings,
            f"{ours:.2f}",
            f"{theirs:.2f}",
            ratio,
            target,
            meets(ratio, target),
        )


def meets(value: float, target: str) -> str:
    """'yes' / 'no' for targets written "≤ x", "≥ x", "< x", "> x" or "= x"; '—' otherwise."""
    text = target.replace("×", "").strip()
    for op, test in (
        ("≤", lambda a, b: a <= b),
        ("≥", lambda a, b: a >= b),
        ("<", lambda a, b: a < b),
        (">", lambda a, b: a > b),
        ("=", lambda a, b: a == b),
    ):
        if text.startswith(op):
            return "yes" if test(value, float(text[len(op) :])) else "**no**"
    return "—"


def print_report(rows: list[Row], explanation: str, notes: list[str]) -> None:
    """The results table, what its ratios mean, and the notes of the run, on stdout."""
    print()
    print(markdown_table(rows))
    print()
    print(explanation)
    for note in notes:
        print(f"- {note}")


def markdown_table(rows: list[Row]) -> str:
    header = (
        "model",
        "backend",
        "comparison",
        "settings",
        "ours (s)",
        "theirs (s)",
        "ratio",
        "target",
        "met?",
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}"
        cells = (
            r.model,
            r.backend,
            r.comparison,
            r.settings,
            r.ours,
            r.theirs,
            ratio,
            r.target,
            r.met,
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git_state(repo: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def machine_description(frameworks: dict[str, Any]) -> list[str]:
    """Lines naming the command, the machine and the library versions."""
    import numpy as np

    import seqattrib

    package = Path(seqattrib.__file__).resolve().parent
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    versions = [f"numpy {np.__version__}", f"seqattrib {seqattrib.__version__}"]
    versions += [f"{name} {getattr(mod, '__version__', '?')}" for name, mod in frameworks.items()]
    lines = [
        "command: " + shlex.join([Path(sys.executable).name, *sys.argv]),
        f"machine: {_cpu_model()}, {os.cpu_count()} CPUs"
        + (f" ({affinity} usable)" if affinity is not None else "")
        + f", Python {platform.python_version()}, {platform.system()} {platform.release()}",
        "versions: " + ", ".join(versions),
        f"package: {package} (git {_git_state(package.parent)})",
        f"load average at start (1/5/15 min): {load_average()}",
    ]
    torch = frameworks.get("torch")
    if torch is not None:
        lines.append(f"torch threads: {torch.get_num_threads()} (default, unchanged)")
    return lines


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (noise from other processes shows up here)."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------- comparisons
def relative_error(ours: Any, reference: Any) -> float:
    """max|ours - reference| / max|reference| of two arrays."""
    import numpy as np

    ours, reference = np.asarray(ours), np.asarray(reference)
    return float(np.abs(ours - reference).max() / max(np.abs(reference).max(), 1e-30))


def tangermeme_ism(
    module: Any,
    model: Any,
    X: Any,
    window: tuple[int, int],
    *,
    batch_size: int,
    target: int,
    fast: bool,
    notes: list[str],
) -> Any:
    """tangermeme's ``saturation_mutagenesis`` (its module ``module``) of X (a torch tensor) over
    positions ``window``, hypothetical scores (N, 4, W) as numpy; the reason of a fast=True
    fallback, if any, is added to ``notes``.

    tangermeme attempts fastISM only for jobs it predicts to take over 30 s with fast=False
    (``_FAST_MIN_SECONDS``); below that, fast=True silently runs fast=False. The attempt is
    forced here, so that a fast=True call measures fastISM (or its own fallback, which it then
    warns about).
    """
    import warnings

    previous = module._FAST_MIN_SECONDS
    if fast:
        module._FAST_MIN_SECONDS = 0.0
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scores = module.saturation_mutagenesis(
                model,
                X,
                start=window[0],
                end=window[1],
                batch_size=batch_size,
                target=target,
                hypothetical=True,
                device="cpu",
                fast=fast,
            )
    finally:
        module._FAST_MIN_SECONDS = previous
    notes.extend(str(w.message) for w in caught if "fast=False" in str(w.message))
    return scores.numpy()
