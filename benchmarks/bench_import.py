"""Start-up cost: ``import seqattrib``, and the first call on a torch and on a Keras model, of
this checkout against another one (an earlier commit checked out elsewhere).

Each measurement is a fresh interpreter (``python -P`` with ``PYTHONPATH`` set to the checkout),
timed from inside: the import alone, and the import plus the first ``saliency`` call on a small
model, framework import included. The checkouts run in turn, ``--repeats`` times; medians.

    git worktree add /tmp/before <commit>
    python benchmarks/bench_import.py --baseline /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import _common
from _common import REPO, Row, log, print_report, run_main

#: What each fresh interpreter runs; it prints the seconds it measured as JSON.
SCRIPTS = {
    "import seqattrib": """
import time; t = time.perf_counter()
import seqattrib
print(time.perf_counter() - t)
""",
    "first torch call": """
import time; t = time.perf_counter()
import numpy as np, torch, seqattrib as sa
model = torch.nn.Sequential(torch.nn.Conv1d(4, 8, 5), torch.nn.ReLU(),
    torch.nn.AdaptiveMaxPool1d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))
sa.saliency(model, sa.one_hot(["ACGTGATAAGCTTACG" * 4] * 2, layout="NCL"), batch_size=8)
print(time.perf_counter() - t)
""",
    "first TensorFlow call": """
import time; t = time.perf_counter()
import numpy as np, keras, seqattrib as sa
model = keras.Sequential([keras.Input((64, 4)), keras.layers.Conv1D(8, 5, activation="relu"),
    keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(3)])
sa.saliency(model, sa.one_hot(["ACGTGATAAGCTTACG" * 4] * 2), batch_size=8)
print(time.perf_counter() - t)
""",
}


def _seconds(source: Path, script: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(source), KERAS_BACKEND="tensorflow")
    out = subprocess.run(
        [sys.executable, "-P", "-c", script],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    sources = {"current": REPO, "baseline": args.baseline.resolve()}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.repeats):
        for what, script in SCRIPTS.items():
            for name, source in sources.items():
                seconds = _seconds(source, script)
                times.setdefault((what, name), []).append(seconds)
                log(f"  repeat {r + 1}/{args.repeats} {what} {name}: {seconds:.3f} s")
    rows = []
    for what in SCRIPTS:
        ours = statistics.median(times[(what, "current")])
        theirs = statistics.median(times[(what, "baseline")])
        spread = max(times[(what, "baseline")]) / min(times[(what, "baseline")])
        rows.append(
            Row(
                "—",
                "torch" if "torch" in what else "tensorflow" if "Tensor" in what else "none",
                f"{what}: current ÷ baseline",
                f"fresh interpreter, median of {args.repeats}; baseline's own max ÷ min "
                f"{spread:.2f}",
                f"{ours:.3f}",
                f"{theirs:.3f}",
                ours / theirs,
                "≤ 1.10",
                _common.meets(ours / theirs, "≤ 1.10"),
            )
        )
    print_report(
        rows,
        f"Baseline: {sources['baseline']}. A ratio near 1 (within the baseline's own spread) "
        "means start-up did not change.",
        [],
    )


if __name__ == "__main__":
    run_main(main)
