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
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._errors import parameter_error
from ._version import __version__

_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, ImportError, OSError)


# --------------------------------------------------------------------------- models
def load_model(spec: str, weights: str | None = None) -> tuple[Any, str]:
    """A model and its framework from a TorchScript file, a ``.keras`` file, a SavedModel
    folder or ``pkg.module:factory`` (with optional ``weights``: a torch state_dict loaded with
    ``weights_only=True``, or Keras weights)."""
    path = Path(spec)
    if ":" in spec and not path.exists():
        module_name, _, factory_name = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), factory_name)
        except (ImportError, AttributeError) as exc:
            raise parameter_error(
                "seqattrib",
                "--model",
                "pkg.module:factory naming an importable callable",
                spec,
                described=False,
                error=ValueError,
            ) from exc
        model = factory()
        framework = _framework(model)
        if weights:
            if framework == "torch":
                import torch

                model.load_state_dict(torch.load(weights, weights_only=True))
            else:
                model.load_weights(weights)
        return model, framework
    if weights:
        raise parameter_error(
            "seqattrib",
            "--weights",
            "used with --model pkg.module:factory",
            weights,
            "A model file already holds its weights.",
        )
    if not path.exists():
        raise parameter_error(
            "seqattrib",
            "--model",
            "an existing file or folder, or pkg.module:factory",
            spec,
            error=FileNotFoundError,
        )
    if path.is_dir():
        if not (path / "saved_model.pb").exists():
            raise parameter_error("seqattrib", "--model", "a SavedModel folder", spec)
        import tensorflow as tf

        loaded = tf.saved_model.load(str(path))
        serve = getattr(loaded, "serve", None)  # keras Model.export()
        if serve is None and not callable(loaded):
            raise parameter_error(
                "seqattrib",
                "--model",
                "a SavedModel with a serve endpoint or __call__",
                spec,
                "Export Keras models with model.export(path).",
            )
        return _Loaded(loaded, serve if serve is not None else loaded), "tensorflow"
    if path.suffix in (".keras", ".h5"):
        import keras

        model = keras.models.load_model(path)
        return model, _framework(model)
    import torch

    try:
        return torch.jit.load(str(path), map_location="cpu").eval(), "torch"
    except RuntimeError as exc:
        raise parameter_error(
            "seqattrib",
            "--model",
            "a TorchScript file, a .keras file, a SavedModel folder or pkg.module:factory",
            spec,
            "For a state_dict, pass --model pkg.module:factory --weights FILE.",
        ) from exc


class _Loaded:
    """A SavedModel's endpoint that keeps the loaded object (and its variables) alive."""

    def __init__(self, loaded: Any, endpoint: Any) -> None:
        self.loaded, self.endpoint = loaded, endpoint

    def __call__(self, x: Any) -> Any:
        return self.endpoint(x)


def _framework(model: Any) -> str:
    from .backends import get_backend

    if "tensorflow" not in sys.modules and "torch" not in sys.modules:  # pragma: no cover
        return "torch"
    return get_backend(model).name


# --------------------------------------------------------------------------- sequences
class _Windows:
    """One-hot windows of a genome, read lazily block by block (bounded memory for any N)."""

    def __init__(self, genome: Any, regions: Any, length: int, layout: Literal["NLC", "NCL"]):
        self.genome, self.regions, self.length, self.layout = genome, regions, length, layout
        n = len(regions)
        self.shape = (n, length, 4) if layout == "NLC" else (n, 4, length)
        self.dtype = np.dtype(np.int8)
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: slice) -> np.ndarray:
        from .io import extract_windows

        part = self.regions.take(np.arange(self.shape[0])[index])
        X, _, _ = extract_windows(
            self.genome, part, length=self.length, layout=self.layout, dtype=np.int8
        )
        return X


def load_sequences(args: argparse.Namespace, layout: Literal["NLC", "NCL"]) -> tuple[Any, Any]:
    """(X, regions) from --fasta, or --genome with --regions and --length."""
    import warnings

    from .io import Genome, Regions, extract_windows, read_regions

    if args.fasta and (args.genome or args.regions):
        raise parameter_error("seqattrib", "--fasta", "used without --genome/--regions", args.fasta)
    if args.fasta:
        genome = Genome(args.fasta)
        sizes = genome.chrom_sizes
        lengths = set(sizes.values())
        if len(lengths) != 1:
            raise parameter_error(
                "seqattrib",
                "--fasta",
                "sequences of one length",
                f"lengths {sorted(lengths)[:5]}",
                "Cut or pad the sequences, or use --genome with --regions and --length.",
                described=True,
            )
        names = list(sizes)
        length = lengths.pop()
        regions = Regions.from_arrays(names, np.zeros(len(names)), np.full(len(names), length))
        return _Windows(genome, regions, length, layout), None
    if not (args.genome and args.regions and args.length):
        raise parameter_error(
            "seqattrib",
            "--fasta",
            "given, or --genome, --regions and --length together",
            "none of them",
            "Pass --fasta seqs.fa, or --genome hg38.fa --regions peaks.bed --length 2114.",
            described=True,
        )
    genome = Genome(args.genome)
    regions = read_regions(args.regions, length=args.length)
    sizes = genome.chrom_sizes
    size = np.array([sizes.get(c, -1) for c in regions.chrom])
    fits = (regions.start >= 0) & (regions.end <= size) & (size >= 0)
    if not fits.all():
        with warnings.catch_warnings():  # extract_windows names the dropped windows
            warnings.simplefilter("always")
            extract_windows(genome, regions.take(~fits), length=args.length)
    kept = regions.take(fits)
    if len(kept) == 0:
        raise parameter_error(
            "seqattrib", "--regions", "at least one window inside the genome", args.regions
        )
    return _Windows(genome, kept, args.length, layout), kept


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


# --------------------------------------------------------------------------- shards
def resolve_shard(
    text: str | None, environ: dict[str, str] | None = None
) -> tuple[int, int] | None:
    """(index, count) from ``--shard i/n``, a SLURM job array or torchrun; None: no sharding."""
    env = dict(os.environ if environ is None else environ)
    if text:
        try:
            index, count = (int(v) for v in text.split("/"))
        except ValueError as exc:
            raise parameter_error("seqattrib", "--shard", "i/n with 0 <= i < n", text) from exc
    elif "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        index = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
    elif int(env.get("WORLD_SIZE", "1")) > 1 and "RANK" in env:
        index, count = int(env["RANK"]), int(env["WORLD_SIZE"])
    else:
        return None
    if not 0 <= index < count:
        raise parameter_error("seqattrib", "--shard", "i/n with 0 <= i < n", f"{index}/{count}")
    return index, count


def shard_path(out: str, index: int, count: int) -> str:
    """``out`` with ``{shard}`` replaced, else ``.shard-i-of-n`` before the extension."""
    if "{shard}" in out:
        return out.replace("{shard}", str(index))
    path = Path(out)
    return str(path.with_name(f"{path.stem}.shard-{index}-of-{count}{path.suffix}"))


@contextmanager
def _sharded(args: argparse.Namespace, X: Any, regions: Any) -> Iterator[tuple[Any, Any]]:
    """Narrow X and regions to this process's shard and record it in the output file."""
    from ._pipeline import shard_context

    shard = resolve_shard(args.shard)
    if shard is None:
        yield X, regions
        return
    index, count = shard
    total = len(X.regions)
    start, stop = index * total // count, (index + 1) * total // count
    if stop == start:
        raise parameter_error(
            "seqattrib",
            "--shard",
            f"at most {total} shards for {total} sequences",
            f"{index}/{count}",
        )
    part = X.regions.take(np.arange(start, stop))
    X = _Windows(X.genome, part, X.length, X.layout)
    args.out = shard_path(args.out, index, count)
    with shard_context(index, count, start, stop, total):
        yield X, (regions.take(np.arange(start, stop)) if regions is not None else None)


@contextmanager
def _provenance(args: argparse.Namespace, regions: Any) -> Iterator[None]:
    """Record in the output file which FASTA or genome (a digest of its bytes) and which
    regions (of the whole job, before sharding) it was made from."""
    from ._pipeline import provenance_context
    from .io.fingerprint import file_fingerprint, regions_fingerprint

    identity = {"fasta": file_fingerprint(args.fasta)} if args.fasta else {}
    if args.genome:
        identity["genome"] = file_fingerprint(args.genome)
    if regions is not None:
        identity["regions"] = regions_fingerprint(regions.chrom, regions.start, regions.end)
    with provenance_context(**identity):
        yield


# --------------------------------------------------------------------------- commands
def _common_run(args: argparse.Namespace, framework: str) -> dict[str, Any]:
    return dict(
        backend=framework,
        target=_targets(args.target),
        batch_size="auto" if args.batch_size == "auto" else int(args.batch_size),
        max_cpu_sequences=args.max_cpu_sequences,
        device=args.device,
        out=args.out,
        overwrite=args.overwrite,
        verbose=not args.quiet,
    )


def cmd_explain(args: argparse.Namespace) -> str:
    model, framework = load_model(args.model, args.weights)
    X, regions = load_sequences(args, _layout(args, framework))
    with _provenance(args, regions), _sharded(args, X, regions) as (X, regions):
        return _explain(args, model, framework, X, regions)


def _explain(args: argparse.Namespace, model: Any, framework: str, X: Any, regions: Any) -> str:
    from .explain import explain

    kwargs = _common_run(args, framework)
    if args.method in ("ig", "eig"):
        kwargs.update(
            n_steps=args.n_steps,
            quadrature=args.integration,
            random_state=args.random_state,
            baselines=args.baselines or ("dinuc_shuffle" if args.method == "eig" else "zeros"),
        )
    if args.method == "eig":
        kwargs["n_baselines"] = args.n_baselines
    kwargs["multiply_by_inputs"] = not args.hypothetical if args.method != "saliency" else False
    kwargs["correct_gradient"] = args.correct_gradient
    path = explain(model, X, method=args.method, regions=regions, **kwargs)
    print(path)
    return str(path)


def cmd_ism(args: argparse.Namespace) -> str:
    from .ism import ism

    model, framework = load_model(args.model, args.weights)
    X, regions = load_sequences(args, _layout(args, framework))
    positions = None
    if args.positions:
        try:
            start, end = (int(v) for v in args.positions.split(":"))
        except ValueError as exc:
            raise parameter_error(
                "seqattrib ism", "--positions", "start:end", args.positions
            ) from exc
        positions = (start, end)
    with _provenance(args, regions), _sharded(args, X, regions) as (X, regions):
        path = ism(
            model,
            X,
            positions=positions,
            score=args.score,
            fast="auto" if args.fast == "auto" else args.fast == "yes",
            regions=regions,
            **_common_run(args, framework),
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
    import subprocess

    from .io.merge import merge_tracks

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command or command[0] not in ("explain", "ism") or "--out" not in command:
        raise parameter_error(
            "seqattrib launch",
            "command",
            "explain or ism with --out",
            " ".join(command) or "nothing",
        )
    if "--shard" in command:
        raise parameter_error("seqattrib launch", "--shard", "left to launch", "given")
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    out = command[command.index("--out") + 1]
    workers = []
    for index, device in enumerate(devices):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="" if device == "cpu" else device)
        for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
            env.pop(key, None)
        argv = [sys.executable, "-m", "seqattrib", *command, "--shard", f"{index}/{len(devices)}"]
        workers.append(subprocess.Popen(argv, env=env))
    failed = [i for i, worker in enumerate(workers) if worker.wait() != 0]
    if failed:
        raise parameter_error(
            "seqattrib launch",
            "command",
            "a command every worker completes",
            f"failures in shard(s) {failed}",
            "Rerun the same launch: finished shards are kept and unfinished ones resume.",
            described=True,
        )
    shards = [shard_path(out, i, len(devices)) for i in range(len(devices))]
    path = merge_tracks(shards, out, overwrite=args.overwrite)
    print(path)
    return path


def cmd_demo(args: argparse.Namespace) -> dict[str, Any]:
    if args.framework == "torch":
        import torch  # noqa: F401  (torch before TensorFlow)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqattrib", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"seqattrib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("explain", help="saliency, IG or EIG tracks into an HDF5 file")
    _add_model_and_sequences(p)
    p.add_argument("--method", choices=["saliency", "ig", "eig"], default="eig")
    p.add_argument("--n-steps", type=int, default=25)
    p.add_argument("--n-baselines", type=int, default=25)
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

    p = sub.add_parser("export", help="TF-MoDISco inputs or bigWig tracks from a tracks file")
    p.add_argument("format", choices=["modisco", "bigwig"])
    p.add_argument("tracks")
    p.add_argument("-o", "--outdir", required=True)
    p.add_argument("--chrom-sizes", help="chrom sizes file (bigwig)")
    p.add_argument("--class-names", help="comma list, one name per target")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_export)

    p = sub.add_parser("plot", help="attribution logo (or ISM heatmap) of one row")
    p.add_argument("tracks")
    p.add_argument("--row", type=int, default=0)
    p.add_argument("--target", type=int, default=0, help="output index (files with several)")
    p.add_argument("--start", type=int)
    p.add_argument("--end", type=int)
    p.add_argument("-o", "--output", required=True, help="PNG or PDF")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_plot)

    p = sub.add_parser("merge", help="merge the shard files of a sharded run")
    p.add_argument("shards", nargs="+")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=cmd_merge)

    p = sub.add_parser("launch", help="one worker per local device, then merge")
    p.add_argument("--devices", required=True, help="comma list: 0,1,2,3 (GPUs) or cpu,cpu")
    p.add_argument("--overwrite", action="store_true", help="replace the merged output")
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="explain|ism ... --out tracks.h5 (the workers' command)",
    )
    p.set_defaults(run=cmd_launch)

    p = sub.add_parser("demo", help="explain the embedded demo model end to end")
    p.add_argument("-o", "--outdir", default="seqattrib-demo")
    p.add_argument("--n-sequences", type=int, default=100)
    p.add_argument("--framework", choices=["torch", "keras"], default="torch")
    p.add_argument("--data", help="folder with the demo files (default: data/ of the checkout)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(run=cmd_demo)
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
