"""The ``seqattrib`` command line: a thin front end over the library (no algorithm here).

    seqattrib explain --model M --fasta F --method eig --target 0,2 --out tracks.h5
    seqattrib explain --model M --genome hg38.fa --regions peaks.narrowPeak --length 2114 ...
    seqattrib ism --model M --fasta F --out ism.h5
    seqattrib export modisco tracks.h5 -o modisco/
    seqattrib export bigwig tracks.h5 -o tracks/ --chrom-sizes hg38.chrom.sizes
    seqattrib plot tracks.h5 --row 0 -o logo.png
    seqattrib demo -o demo/

Errors are one line on stderr with a non-zero exit; progress bars go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ._errors import parameter_error
from ._version import __version__
from .loader import load_model, model_framework
from .shards import launch, resolve_shard, shard_path

_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, ImportError, OSError)


# --------------------------------------------------------------------------- inputs
def load_sequences(args: argparse.Namespace, layout: Literal["NLC", "NCL"]) -> tuple[Any, Any]:
    """(X, regions) from --fasta, or --genome with --regions and --length."""
    from .io import fasta_windows, genome_windows, read_regions

    if args.fasta and (args.genome or args.regions):
        raise parameter_error("seqattrib", "--fasta", "used without --genome/--regions", args.fasta)
    if args.fasta:
        return fasta_windows(args.fasta, layout), None
    if not (args.genome and args.regions and args.length):
        raise parameter_error(
            "seqattrib",
            "--fasta",
            "given, or --genome, --regions and --length together",
            "none of them",
            "Pass --fasta seqs.fa, or --genome hg38.fa --regions peaks.bed --length 2114.",
            described=True,
        )
    windows = genome_windows(
        args.genome, read_regions(args.regions, length=args.length), args.length, layout
    )
    return windows, windows.regions


def _targets(text: str | None) -> Any:
    if text is None:
        return 0
    if text == "all":
        return None
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as exc:
        raise parameter_error(
            "seqattrib", "--target", "an int, a comma list like 0,2, or 'all'", text
        ) from exc
    return values[0] if len(values) == 1 and "," not in text else values


def _layout(args: argparse.Namespace, framework: str) -> Literal["NLC", "NCL"]:
    if args.layout:
        return "NLC" if args.layout == "NLC" else "NCL"
    return "NCL" if framework == "torch" else "NLC"


def _model_and_sequences(args: argparse.Namespace) -> tuple[Any, str, Any, Any]:
    try:
        model = load_model(args.model, weights=args.weights)
    except (ValueError, FileNotFoundError) as exc:
        message = str(exc).replace("'spec' parameter of load_model", "'--model' parameter")
        message = message.replace("'weights' parameter of load_model", "'--weights' parameter")
        raise type(exc)(message) from exc
    framework = model_framework(model)
    X, regions = load_sequences(args, _layout(args, framework))
    return model, framework, X, regions


# --------------------------------------------------------------------------- commands
def _common_run(args: argparse.Namespace, framework: str, regions: Any) -> dict[str, Any]:
    """The keywords every method takes, from the shared flags; a shard writes its own file."""
    shard = resolve_shard(args.shard)
    return dict(
        backend=framework,
        target=_targets(args.target),
        batch_size="auto" if args.batch_size == "auto" else int(args.batch_size),
        max_cpu_sequences=args.max_cpu_sequences,
        device=args.device,
        out=args.out if shard is None else shard_path(args.out, *shard),
        overwrite=args.overwrite,
        verbose=not args.quiet,
        regions=regions,
        shard=shard,
    )


def cmd_explain(args: argparse.Namespace) -> str:
    from .attribution import explain

    model, framework, X, regions = _model_and_sequences(args)
    kwargs = _common_run(args, framework, regions)
    if args.method in ("ig", "eig"):
        kwargs.update(
            n_steps=args.n_steps,
            quadrature=args.integration,
            random_state=args.random_state,
            baselines=args.baselines or ("dinuc_shuffle" if args.method == "eig" else "zeros"),
        )
    if args.method == "eig":
        kwargs["n_baselines"] = 25 if args.n_baselines is None else args.n_baselines
    if args.method == "deeplift_shap":
        if args.correct_gradient:
            raise parameter_error(
                "seqattrib explain",
                "--correct-gradient",
                "used with --method saliency, ig or eig",
                "--method deeplift_shap",
            )
        kwargs.update(
            random_state=args.random_state,
            baselines=args.baselines or "dinuc_shuffle",
            n_baselines=20 if args.n_baselines is None else args.n_baselines,
        )
    else:
        kwargs["correct_gradient"] = args.correct_gradient
    kwargs["multiply_by_inputs"] = not args.hypothetical if args.method != "saliency" else False
    path = explain(model, X, method=args.method, **kwargs)
    print(path)
    return str(path)


def cmd_ism(args: argparse.Namespace) -> str:
    from .attribution import ism

    model, framework, X, regions = _model_and_sequences(args)
    positions = None
    if args.positions:
        try:
            start, end = (int(v) for v in args.positions.split(":"))
        except ValueError as exc:
            raise parameter_error(
                "seqattrib ism", "--positions", "start:end", args.positions
            ) from exc
        positions = (start, end)
    path = ism(
        model,
        X,
        positions=positions,
        score=args.score,
        fast="auto" if args.fast == "auto" else args.fast == "yes",
        **_common_run(args, framework, regions),
    )
    print(path)
    return str(path)


def cmd_export(args: argparse.Namespace) -> list[Path]:
    from .io import export_bigwig, export_modisco

    names = args.class_names.split(",") if args.class_names else None
    if args.format == "modisco":
        paths = export_modisco(
            args.tracks, args.outdir, class_names=names, overwrite=args.overwrite
        )
    else:
        if not args.chrom_sizes:
            raise parameter_error(
                "seqattrib export bigwig",
                "--chrom-sizes",
                "given",
                None,
                "Pass --chrom-sizes hg38.chrom.sizes.",
            )
        paths = export_bigwig(
            args.tracks, args.outdir, args.chrom_sizes, class_names=names, overwrite=args.overwrite
        )
    for p in paths:
        print(p)
    return paths


def cmd_plot(args: argparse.Namespace) -> Path:
    from .io import read_tracks
    from .plot import plot_ism, plot_logo

    if Path(args.output).exists() and not args.overwrite:
        raise parameter_error(
            "seqattrib plot",
            "--overwrite",
            "given to replace a file",
            args.output,
            error=FileExistsError,
        )
    tracks = read_tracks(args.tracks, rows=slice(args.row, args.row + 1))
    if len(tracks.attributions) == 0:
        raise parameter_error("seqattrib plot", "--row", "a completed row of the file", args.row)
    scores = tracks.attributions[0]
    settings = tracks.settings
    if scores.ndim == 3:
        targets = settings["targets"]
        if args.target not in targets:
            raise parameter_error("seqattrib plot", "--target", f"one of {targets}", args.target)
        scores = scores[targets.index(args.target)]
    axis = -1 if int(tracks.attrs["alphabet_axis"]) == -1 else 0  # of one row
    start, end = args.start, args.end
    title = f"row {args.row}, {settings['method']}"
    if settings["method"] == "ism":
        plot_ism(scores, start=start, end=end, alphabet_axis=axis, title=title, path=args.output)
    else:
        if not settings.get("multiply_by_inputs", False):
            scores = scores * tracks.sequences[0]  # hypothetical -> contributions
        plot_logo(scores, start=start, end=end, alphabet_axis=axis, title=title, path=args.output)
    print(args.output)
    return Path(args.output)


def cmd_merge(args: argparse.Namespace) -> Path:
    from .io.merge import merge_tracks

    path = merge_tracks(args.shards, args.output, overwrite=args.overwrite)
    print(path)
    return path


def cmd_launch(args: argparse.Namespace) -> Path:
    """One worker per device (CUDA_VISIBLE_DEVICES each), then merge their shards."""
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    path = launch(args.command, devices, overwrite=args.overwrite)
    print(path)
    return path


def cmd_demo(args: argparse.Namespace) -> dict[str, Any]:
    from .demo import TASKS, run_demo

    result = run_demo(
        args.outdir,
        n_sequences=args.n_sequences,
        framework=args.framework,
        data=args.data,
        overwrite=args.overwrite,
        verbose=not args.quiet,
    )
    print(
        f"EIG (25 dinucleotide-shuffled baselines x 26 steps, 3 targets) on "
        f"{result['n_sequences']} demo sequences in {result['seconds']:.1f} s"
    )
    for task in TASKS:
        fraction, n = result["hits"][task]
        print(
            f"  {task:5s}: top-scoring base inside the planted motif in {fraction:.0%} "
            f"of {n} positive sequences"
        )
    print("wrote:")
    for p in result["files"]:
        print(f"  {p}")
    return result


# --------------------------------------------------------------------------- parser
def _add_model_and_sequences(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="TorchScript file, .keras file, SavedModel folder or pkg.module:factory",
    )
    p.add_argument("--weights", help="state_dict (torch) or weights file for a factory model")
    p.add_argument("--fasta", help="FASTA of equal-length sequences")
    p.add_argument("--genome", help="genome FASTA (indexed with pyfaidx)")
    p.add_argument("--regions", help="BED or narrowPeak regions (summit-centred windows)")
    p.add_argument("--length", type=int, help="window length for --regions")
    p.add_argument(
        "--layout",
        choices=["NLC", "NCL"],
        help="input layout of the model (default: NCL for torch, NLC for Keras/TF)",
    )


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", help="output index, comma list (0,2) or 'all' (default 0)")
    p.add_argument("--batch-size", default="auto", help="device rows per batch or 'auto'")
    p.add_argument("--max-cpu-sequences", type=int, default=1024)
    p.add_argument("--device", help="cpu, cuda, cuda:1, /GPU:0 (default: the model's)")
    p.add_argument("--out", required=True, help="HDF5 tracks file to write (resumable)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--shard",
        help="i/n: run the i-th of n contiguous blocks of the sequences "
        "(default: from SLURM_ARRAY_TASK_ID/COUNT or RANK/WORLD_SIZE)",
    )


def _explain_command(sub: Any) -> None:
    p = sub.add_parser("explain", help="saliency, IG or EIG tracks into an HDF5 file")
    _add_model_and_sequences(p)
    p.add_argument("--method", choices=["saliency", "ig", "eig", "deeplift_shap"], default="eig")
    p.add_argument("--n-steps", type=int, default=25)
    p.add_argument("--n-baselines", type=int, help="default: 25 for eig, 20 for deeplift_shap")
    p.add_argument(
        "--baselines", choices=["zeros", "uniform", "shuffle", "dinuc_shuffle", "random"]
    )
    p.add_argument(
        "--integration",
        default="riemann_trapezoid",
        choices=[
            "riemann_trapezoid",
            "riemann_left",
            "riemann_right",
            "riemann_middle",
            "gausslegendre",
        ],
        help="quadrature rule",
    )
    p.add_argument(
        "--hypothetical",
        action="store_true",
        help="hypothetical scores (multiply_by_inputs=False), for TF-MoDISco",
    )
    p.add_argument("--correct-gradient", action="store_true")
    p.add_argument("--random-state", type=int, default=0)
    _add_run(p)
    p.set_defaults(run=cmd_explain)


def _ism_command(sub: Any) -> None:
    p = sub.add_parser("ism", help="saturation mutagenesis into an HDF5 file")
    _add_model_and_sequences(p)
    p.add_argument("--positions", help="start:end window to scan (default: all)")
    p.add_argument("--score", choices=["delta", "log_ratio"], default="delta")
    p.add_argument(
        "--fast",
        choices=["auto", "yes", "no"],
        default="auto",
        help="fast ISM: recompute only the windows a mutation can change (default: auto)",
    )
    _add_run(p)
    p.set_defaults(run=cmd_ism)


def _export_command(sub: Any) -> None:
    p = sub.add_parser("export", help="TF-MoDISco inputs or bigWig tracks from a tracks file")
    p.add_argument("format", choices=["modisco", "bigwig"])
    p.add_argument("tracks")
    p.add_argument("-o", "--outdir", required=True)
    p.add_argument("--chrom-sizes", help="chrom sizes file (bigwig)")
    p.add_argument("--class-names", help="comma list, one name per target")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_export)


def _plot_command(sub: Any) -> None:
    p = sub.add_parser("plot", help="attribution logo (or ISM heatmap) of one row")
    p.add_argument("tracks")
    p.add_argument("--row", type=int, default=0)
    p.add_argument("--target", type=int, default=0, help="output index (files with several)")
    p.add_argument("--start", type=int)
    p.add_argument("--end", type=int)
    p.add_argument("-o", "--output", required=True, help="PNG or PDF")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_plot)


def _merge_command(sub: Any) -> None:
    p = sub.add_parser("merge", help="merge the shard files of a sharded run")
    p.add_argument("shards", nargs="+")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_merge)


def _launch_command(sub: Any) -> None:
    p = sub.add_parser("launch", help="one worker per local device, then merge")
    p.add_argument("--devices", required=True, help="comma list: 0,1,2,3 (GPUs) or cpu,cpu")
    p.add_argument("--overwrite", action="store_true", help="replace the merged output")
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="explain|ism ... --out tracks.h5 (the workers' command)",
    )
    p.set_defaults(run=cmd_launch)


def _demo_command(sub: Any) -> None:
    p = sub.add_parser("demo", help="explain the embedded demo model end to end")
    p.add_argument("-o", "--outdir", default="seqattrib-demo")
    p.add_argument("--n-sequences", type=int, default=100)
    p.add_argument("--framework", choices=["torch", "keras"], default="torch")
    p.add_argument("--data", help="folder with the demo files (default: data/ of the checkout)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(run=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqattrib", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"seqattrib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _explain_command(sub)
    _ism_command(sub)
    _export_command(sub)
    _plot_command(sub)
    _merge_command(sub)
    _launch_command(sub)
    _demo_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqattrib`` console script and ``python -m seqattrib``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except _ERRORS as exc:
        message = " ".join(str(exc).split())
        print(f"seqattrib {args.command}: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
