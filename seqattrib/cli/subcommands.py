"""The subcommands' own options (the shared ones are in ``parser``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .parser import (
    POSITIVE,
    POSITIVE_FLOAT,
    WINDOW,
    Parser,
    add_model_and_sequences,
    add_run,
)

RULES = ["riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle", "gausslegendre"]


def _sub(sub: Any, name: str, help: str) -> Parser:
    p: Parser = sub.add_parser(name, help=help, description=help)
    return p


def explain(sub: Any) -> Parser:
    p = _sub(
        sub, "explain", "saliency, IG, EIG or DeepLIFT/SHAP attribution tracks into an HDF5 file"
    )
    add_model_and_sequences(p)
    p.add_argument(
        "--method",
        choices=["saliency", "ig", "eig", "deeplift_shap"],
        default="eig",
        help="attribution method (default: %(default)s)",
    )
    p.add_argument(
        "--n-steps",
        type=POSITIVE,
        help="points (gausslegendre) or intervals of each path (default: 25 for ig, 3 for eig)",
    )
    p.add_argument(
        "--n-baselines",
        type=POSITIVE,
        help="eig, deeplift_shap: baselines per sequence (default: 64 for eig, 20 for "
        "deeplift_shap)",
    )
    p.add_argument(
        "--baselines",
        choices=["zeros", "uniform", "shuffle", "dinuc_shuffle", "random"],
        help="references (default: zeros for ig, dinuc_shuffle for eig and deeplift_shap)",
    )
    p.add_argument(
        "--integration",
        choices=RULES,
        help="quadrature rule (default: riemann_trapezoid for ig, gausslegendre for eig)",
    )
    p.add_argument(
        "--preset",
        choices=["crested"],
        help="eig: CREsted's 25 baselines x 25 trapezoid steps instead of the defaults",
    )
    p.add_argument(
        "--hypothetical",
        action="store_true",
        help="store hypothetical scores (what TF-MoDISco takes) instead of contributions",
    )
    p.add_argument(
        "--correct-gradient",
        action="store_true",
        help="saliency, ig, eig: subtract the mean over the four bases from every gradient",
    )
    p.add_argument(
        "--random-state",
        type=int,
        default=0,
        help="seed of random baselines (default: %(default)s)",
    )
    p.add_argument(
        "--stderr",
        action="store_true",
        help="eig: also store the standard error of each attribution (dataset 'stderr')",
    )
    p.add_argument(
        "--tolerance",
        type=POSITIVE_FLOAT,
        help="eig: add baselines per sequence until its relative standard error is at most "
        "this (default: a fixed number of baselines)",
    )
    p.add_argument(
        "--max-baselines",
        type=POSITIVE,
        default=400,
        help="eig with --tolerance: the most baselines per sequence (default: %(default)s)",
    )
    add_run(p)
    return p


def ism(sub: Any) -> Parser:
    p = _sub(sub, "ism", "saturation mutagenesis scores into an HDF5 file")
    add_model_and_sequences(p)
    p.add_argument(
        "--positions",
        type=WINDOW,
        help="start:end window to scan, 0-based, end excluded (default: every position)",
    )
    p.add_argument(
        "--score",
        choices=["delta", "log_ratio"],
        default="delta",
        help="f(mutant) - f(reference), or the log ratio for positive outputs "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--fast",
        choices=["auto", "yes", "no"],
        default="auto",
        help="recompute only the windows a mutation can change (default: %(default)s)",
    )
    add_run(p)
    return p


def export(sub: Any) -> Parser:
    p = _sub(sub, "export", "TF-MoDISco inputs or bigWig tracks from a tracks file")
    p.add_argument("format", choices=["modisco", "bigwig"], help="what to write")
    p.add_argument("tracks", help="a tracks file written by explain or ism")
    p.add_argument("-o", "--outdir", required=True, help="output folder (made if missing)")
    p.add_argument("--chrom-sizes", help="bigwig: the genome's chrom sizes file")
    p.add_argument(
        "--class-names",
        help="comma list, one file-name-safe name per target (default: target0, target1, ...)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    return p


def plot(sub: Any) -> Parser:
    p = _sub(sub, "plot", "attribution logo (or ISM heatmap) of one row of a tracks file")
    p.add_argument("tracks", help="a tracks file written by explain or ism")
    p.add_argument("--row", type=int, default=0, help="the row to draw (default: %(default)s)")
    p.add_argument(
        "--region",
        help="chrom:start-end on the genome (1-based, end included, as a browser shows it): "
        "the row whose window holds it, zoomed to it (files with regions)",
    )
    p.add_argument(
        "--target",
        type=int,
        default=0,
        help="output index, in files with several (default: %(default)s)",
    )
    p.add_argument("--class-names", help="comma list naming the targets, for the title")
    p.add_argument("--start", type=int, help="first position drawn, 0-based in the window")
    p.add_argument("--end", type=int, help="position after the last one drawn")
    p.add_argument("-o", "--output", required=True, help="the image: .png, .pdf or .svg")
    p.add_argument("--overwrite", action="store_true", help="replace an existing image")
    return p


def merge(sub: Any) -> Parser:
    p = _sub(sub, "merge", "join the shard files of a sharded run into one tracks file")
    p.add_argument("shards", nargs="+", help="every shard file of the job, in any order")
    p.add_argument("-o", "--output", required=True, help="the merged tracks file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return p


def launch(sub: Any) -> Parser:
    p = _sub(sub, "launch", "one worker per local device on its own shard, then merge")
    p.add_argument(
        "--devices", required=True, help="comma list of devices: 0,1,2,3 (GPUs) or cpu,cpu"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the merged output")
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="the workers' command: explain|ism ... --out tracks.h5",
    )
    return p


def demo(sub: Any) -> Parser:
    p = _sub(
        sub,
        "demo",
        "explain the packaged demo model end to end (replaces its own files when run again)",
    )
    p.add_argument(
        "-o", "--outdir", default="seqattrib-demo", help="output folder (default: %(default)s)"
    )
    p.add_argument(
        "--n-sequences",
        type=POSITIVE,
        default=100,
        help="held-out demo sequences to explain (default: %(default)s)",
    )
    p.add_argument(
        "--framework",
        choices=["torch", "keras"],
        default="torch",
        help="which copy of the demo model (default: %(default)s)",
    )
    p.add_argument(
        "--data", help="folder with the demo files (default: the ones installed with seqattrib)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


SUBCOMMANDS: dict[str, Callable[[Any], Parser]] = {
    "explain": explain,
    "ism": ism,
    "export": export,
    "plot": plot,
    "merge": merge,
    "launch": launch,
    "demo": demo,
}
