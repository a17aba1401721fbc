"""Peak resident memory of `seqattrib explain` writing EIG tracks for 1,000 vs 20,000 regions.

    python benchmarks/bench_memory.py [--sizes 1000,20000]

Each run is a fresh `seqattrib explain` process (the demo CNN, 200-bp sequences from a FASTA,
EIG with 2 dinucleotide-shuffled baselines x 3 points, tracks streamed to HDF5); its peak RSS
is read with getrusage(RUSAGE_CHILDREN) in a wrapper process of its own. Host memory is
bounded when the ratio stays near 1 (target <= 1.3): X is read lazily, finished sequences go
to the file in blocks of at most --max-cpu-sequences.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WRAPPER = """
import resource, subprocess, sys, json, time
tick = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
print(json.dumps({"rc": code, "seconds": time.perf_counter() - tick,
                  "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def write_fasta(path: Path, n: int, length: int = 200, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"ACGT", dtype=np.uint8)
    with open(path, "w") as f:
        for i in range(n):
            seq = letters[rng.integers(0, 4, length)].tobytes().decode()
            f.write(f">r{i}\n{seq}\n")


def measure(n: int, folder: Path) -> dict[str, float]:
    fasta = folder / f"r{n}.fa"
    write_fasta(fasta, n)
    out = folder / f"r{n}.h5"
    command = [
        sys.executable,
        "-m",
        "seqattrib",
        "explain",
        "--model",
        "seqattrib.demo:torch_model",
        "--fasta",
        str(fasta),
        "--method",
        "eig",
        "--n-baselines",
        "2",
        "--n-steps",
        "2",
        "--batch-size",
        "256",
        "--out",
        str(out),
        "--quiet",
    ]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, *command],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=path),  # the seqattrib of this checkout
    )
    row = json.loads(result.stdout.strip().splitlines()[-1])
    if row["rc"]:
        raise SystemExit(f"seqattrib explain failed for {n} regions")
    row["file_mib"] = out.stat().st_size / 2**20
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,20000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"command: python {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {n: measure(n, Path(tmp)) for n in sizes}
    print("\n| regions | peak RSS (MiB) | time (s) | tracks file (MiB) |")
    print("|---:|---:|---:|---:|")
    for n, row in rows.items():
        print(f"| {n:,} | {row['peak_mib']:.0f} | {row['seconds']:.1f} | {row['file_mib']:.1f} |")
    ratio = rows[sizes[-1]]["peak_mib"] / rows[sizes[0]]["peak_mib"]
    print(
        f"\npeak RSS ratio {sizes[-1]:,} / {sizes[0]:,} regions: {ratio:.2f} "
        f"(target <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
