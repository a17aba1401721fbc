"""Benchmark of motif instances (``seqattrib.motifs.motif_instances``): seqlets and their names
for a tracks file of 100,000 x 1,000-bp sequences on one CPU thread; prints one table.

Run ``taskset -c 0 python benchmarks/bench_motifs.py [--n-sequences 100000] [--subset 5000]``.
The tracks are synthetic: projected contributions (Gaussian noise, sd 0.1, on the observed
base) into which GATA (``AGATAAGG``), E-box (``CAGCTG``) and CTCF (``CCGCGNGGNGGCAG``) sites are
planted at random places and strands, one to three per sequence, each base of a site
contributing 0.5 to 1.5; written once with seqattrib's tracks writer (with made-up genome
regions) and reused. The motif database is the JASPAR 2024 consensus file of the validation
cases (``../shared/data/cases/motifs``).

Rows:

1. ours: ``motif_instances`` (seqlets from the file block by block, names against the database,
   the TSV, BED and summary written), in a fresh process pinned to one thread (OMP, numba):
   wall time and peak resident memory of that process;
2. theirs: tangermeme's ``recursive_seqlets`` on the projected tracks (held in memory, as it
   needs them) and ``annotate_seqlets`` (memelite's TOMTOM, one thread) on the same first
   ``--subset`` sequences, timed in this process and scaled to the whole file by the ratio of
   sequences (their seqlet calls hold the whole array, and a run on all sequences would
   hold 100,000 x 1,000 float32 plus their working copies); ours is also timed on that subset,
   so the ratio is measured on equal work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common

_common.blas_threads(1, force=True)
os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

LENGTH = 1000
SITES = {"GATA": "AGATAAGG", "Ebox": "CAGCTG", "CTCF": "CCGCGAGGCGGCAG"}
JASPAR = _common.REPO.parent / "shared/data/cases/motifs/jaspar_2024_consensus.meme"


def write_tracks(path: Path, n: int, seed: int = 0) -> None:
    """The synthetic tracks file (projected contributions, one target, regions)."""
    from types import SimpleNamespace

    from seqattrib.engine.source import as_source
    from seqattrib.io.tracks import open_track_writer
    from seqattrib.io.tracks_resume import FileIdentity

    rng = np.random.default_rng(seed)
    letters = rng.integers(0, 4, size=(n, LENGTH), dtype=np.int8)
    scores = np.zeros((n, LENGTH), np.float32)
    for i in range(n):
        for _ in range(int(rng.integers(1, 4))):
            site = list(SITES.values())[int(rng.integers(0, 3))]
            if rng.random() < 0.5:
                site = site[::-1].translate(str.maketrans("ACGT", "TGCA"))
            start = int(rng.integers(0, LENGTH - len(site)))
            letters[i, start : start + len(site)] = ["ACGT".index(b) for b in site]
            scores[i, start : start + len(site)] = rng.uniform(0.5, 1.5, len(site))
    scores += rng.normal(0, 0.1, size=scores.shape).astype(np.float32)
    X = np.eye(4, dtype=np.int8)[letters]
    del letters
    source = as_source(X, -1, "bench_motifs")
    starts = 1_000_000 + 2_000 * np.arange(n, dtype=np.int64)
    regions = SimpleNamespace(chrom=["chr1"] * n, start=starts, end=starts + LENGTH)
    settings = dict(
        method="synthetic", targets=[0], n_sequences=n, row_shape=[LENGTH, 4], alphabet_axis=-1
    )
    identity = FileIdentity.of(
        settings=settings, model_fingerprint="synthetic", output_fn=None, provenance=None,
        regions=regions, streams={"attributions": (LENGTH, 4)}, source=source,
        func="bench_motifs",
    )  # fmt: skip
    writer, _ = open_track_writer(
        path, func="bench_motifs", source=source, identity=identity, seed=0, adopt_seed=False,
        description={"backend": "none", "model": "synthetic"}, overwrite=True,
        block_sequences=1024,
    )  # fmt: skip
    for first in range(0, n, 1024):
        stop = min(n, first + 1024)
        writer.write(first, {"attributions": X[first:stop] * scores[first:stop, :, None]})
    writer.close()


def ours(spec: dict[str, Any]) -> dict[str, Any]:
    """``motif_instances`` in this (fresh) process: seconds, peak RSS, seqlets."""
    from seqattrib.motifs import motif_instances

    start = time.perf_counter()
    result = motif_instances(
        spec["tracks"], spec["motifs"], out=spec["out"], overwrite=True, n_jobs=1,
        **spec["options"],
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return dict(seconds=seconds, peak=_common._status("VmHWM"), n_seqlets=result.n_seqlets)


#: tangermeme's recursive_seqlets defaults, for ours on equal work.
THEIR_SETTINGS = dict(threshold=0.01, min_length=4, max_length=25, flank=0, sign="positive")


def run_ours(tracks: Path, out: Path, motifs: Path, **options: Any) -> dict[str, Any]:
    spec = dict(tracks=str(tracks), motifs=str(motifs), out=str(out), options=options)
    return _common.probe_in_subprocess(__file__, spec)


def theirs(tracks: Path, motifs: Path, n: int) -> dict[str, Any]:
    """tangermeme's recursive_seqlets + annotate_seqlets on the first ``n`` sequences (warmed
    up on 20 of them first: numba compiles)."""
    import torch
    from tangermeme.annotate import annotate_seqlets
    from tangermeme.seqlet import recursive_seqlets

    from seqattrib.io import read_tracks

    torch.set_num_threads(1)
    t = read_tracks(tracks, rows=slice(0, n))
    X = torch.from_numpy(t.sequences.transpose(0, 2, 1).copy())
    projected = torch.from_numpy((t.attributions * t.sequences).sum(-1))
    annotate_seqlets(X[:20], recursive_seqlets(projected[:20]), str(motifs), n_jobs=1)
    start = time.perf_counter()
    calls = recursive_seqlets(projected)
    middle = time.perf_counter()
    annotate_seqlets(X, calls, str(motifs), n_jobs=1)
    end = time.perf_counter()
    return dict(seqlets=middle - start, names=end - middle, n_seqlets=len(calls))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-sequences", type=int, default=100_000)
    parser.add_argument("--subset", type=int, default=5_000)
    parser.add_argument("--folder", default="/tmp/seqattrib_bench_motifs")
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        print(json.dumps(ours(json.loads(args.memory_probe))))
        return
    if not JASPAR.exists():
        sys.exit(f"the JASPAR file of the validation cases is not at {JASPAR}")
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    full = folder / f"tracks_{args.n_sequences}.h5"
    subset = folder / f"tracks_{args.subset}.h5"
    for path, n in ((full, args.n_sequences), (subset, args.subset)):
        if not path.exists():
            _common.log(f"writing {n} synthetic tracks to {path}")
            write_tracks(path, n)
    _common.log("warm-up (numba compiles of TOMTOM)")
    run_ours(subset, folder / "warm.bed", JASPAR)
    _common.log(f"ours on {args.subset}, at tangermeme's settings")
    small = run_ours(subset, folder / "subset.bed", JASPAR, **THEIR_SETTINGS)
    _common.log(f"theirs on {args.subset}")
    other = theirs(subset, JASPAR, args.subset)
    _common.log(f"ours on {args.n_sequences}")
    big = run_ours(full, folder / "full.bed", JASPAR)
    scale = args.n_sequences / args.subset
    their_total = (other["seqlets"] + other["names"]) * scale
    print()
    print("| run | sequences | seqlets | seqlets + names (s) | peak RSS | note |")
    print("|---|---|---|---|---|---|")
    print(
        f"| ours (`motif_instances`, defaults) | {args.n_sequences:,} | {big['n_seqlets']:,} | "
        f"{big['seconds']:.0f} | {_common.fmt_mib(big['peak'])} | target ≤ 300 s: "
        f"{_common.meets(big['seconds'], '≤ 300')} |"
    )
    print(
        f"| ours (`motif_instances`) | {args.subset:,} | {small['n_seqlets']:,} | "
        f"{small['seconds']:.1f} | {_common.fmt_mib(small['peak'])} | at tangermeme's "
        "settings (positive seqlets, threshold 0.01, lengths 4-25) |"
    )
    print(
        f"| tangermeme `recursive_seqlets` + `annotate_seqlets` | {args.subset:,} | "
        f"{other['n_seqlets']:,} | {other['seqlets'] + other['names']:.1f} "
        f"({other['seqlets']:.1f} + {other['names']:.1f}) | — | |"
    )
    print(
        f"| tangermeme, scaled to {args.n_sequences:,} | — | — | {their_total:.0f} | — | "
        f"x{scale:g} of the subset |"
    )
    print()
    ratio = (other["seqlets"] + other["names"]) / small["seconds"]
    print(f"tangermeme ÷ ours on the same {args.subset:,} sequences: {ratio:.2f}")
    print("(ours writes the TSV, BED and summary; theirs returns data frames in memory)")
    for line in _common.machine_description({}):
        print(f"- {line}")


if __name__ == "__main__":
    _common.run_main(main)
