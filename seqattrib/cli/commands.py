"""What each subcommand does: read its inputs, call the library, print what it wrote."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from .._errors import parameter_error
from .._optional import import_optional
from ..loader import load_model, model_framework
from ..shards import resolve_shard, shard_path
from . import data_attribution, experiments, motifs
from .sequences import load_sequences

#: The image formats ``seqattrib plot`` writes, by file name suffix.
IMAGE_SUFFIXES = (".png", ".pdf", ".svg")
#: The variant tables written as text first and converted when every variant is in.
CONVERTED = (".parquet", ".vcf", ".vcf.gz", ".bcf")


# --------------------------------------------------------------------------- inputs
def model_and_sequences(args: argparse.Namespace) -> tuple[Any, str, Any, Any]:
    model = load_model(args.model, weights=args.weights)
    framework = model_framework(model)
    layout: Literal["NLC", "NCL"] = args.layout or ("NCL" if framework == "torch" else "NLC")
    X, regions = load_sequences(args, layout)
    return model, framework, X, regions


def common_run(args: argparse.Namespace, framework: str, regions: Any) -> dict[str, Any]:
    """The keywords every method takes, from the shared flags; a shard writes its own file."""
    shard = args.shard if args.shard is not None else resolve_shard(None)
    return dict(
        backend=framework,
        target=args.target,
        output_fn=args.head,
        batch_size=args.batch_size,
        max_cpu_sequences=args.max_cpu_sequences,
        device=args.device,
        out=args.out if shard is None else shard_path(args.out, *shard),
        overwrite=args.overwrite,
        verbose=not args.quiet,
        regions=regions,
        shard=shard,
        args=_extra_inputs(args.args),
    )


def _extra_inputs(paths: list[str] | None) -> tuple[Any, ...] | None:
    """The arrays of ``--args``: .npy files in order, or the members of one .npz."""
    import numpy as np

    if not paths:
        return None
    arrays: list[Any] = []
    for path in paths:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise parameter_error(
                "seqattrib", "--args", ".npy or .npz files of arrays", path
            ) from exc
        if isinstance(loaded, np.ndarray):
            arrays.append(loaded)
            continue
        with loaded:
            arrays += [loaded[name] for name in loaded.files]
    return tuple(arrays)


# --------------------------------------------------------------------------- commands
def explain(args: argparse.Namespace) -> str:
    from ..attribution.methods import METHODS
    from ..attribution.methods import explain as explain_by_name

    model, framework, X, regions = model_and_sequences(args)
    kwargs = common_run(args, framework, regions)
    kwargs.update(method_keywords(args, METHODS[args.method], "seqattrib explain"))
    path = explain_by_name(model, X, method=args.method, **kwargs)
    print(path)
    return str(path)


def method_keywords(args: argparse.Namespace, method: Any, command: str | None) -> dict[str, Any]:
    """The keywords of ``method`` that its flags in ``args`` set (from the registry: a flag
    reaches the methods whose signature has its keyword).

    A flag given to a method without its keyword is refused, naming the methods that take it
    (``command`` names the command in the error); with ``command=None`` it is left out. A flag
    of a keyword the method keeps at its default is left out too (saliency's gradients are
    hypothetical scores with or without --hypothetical).
    """
    from .subcommands import either, explained_methods, method_flags, takes

    kwargs: dict[str, Any] = {}
    for flag in method_flags():
        if not hasattr(args, flag.dest):
            continue
        given = getattr(args, flag.dest)
        if takes(method, flag.keyword):
            if given is not None:
                kwargs[flag.keyword] = flag.value(given)
        elif flag.keyword in method.keep_default:
            continue
        elif command is not None and given != flag.parser_default:
            users = [m.name for m in explained_methods() if takes(m, flag.keyword)]
            raise parameter_error(
                command, flag.flag, f"used with --method {either(users)}", f"--method {method.name}"
            )
    return kwargs


def ism(args: argparse.Namespace) -> str:
    from ..attribution import ism as saturation_mutagenesis

    model, framework, X, regions = model_and_sequences(args)
    path = saturation_mutagenesis(
        model,
        X,
        positions=args.positions,
        score=args.score,
        fast="auto" if args.fast == "auto" else args.fast == "yes",
        **common_run(args, framework, regions),
    )
    print(path)
    return str(path)


def variants(args: argparse.Namespace) -> str:
    from ..variants import variant_effects
    from ..variants.vcf_output import is_vcf

    if bool(args.vcf) == bool(args.table):
        raise parameter_error(
            "seqattrib variants",
            "--vcf",
            "given, or --table instead (one of them)",
            "both" if args.vcf else "neither",
            "Pass --vcf calls.vcf.gz, or --table variants.tsv (chrom, pos, ref, alt).",
            described=True,
        )
    if args.vcf or is_vcf(args.out):
        import_optional("pysam")
    if args.out.lower().endswith(".parquet"):
        import_optional("pyarrow.parquet")
    model = load_model(args.model, weights=args.weights)
    framework = model_framework(model)
    shard = args.shard if args.shard is not None else resolve_shard(None)
    nulls = {} if args.n_null is None else {"n_null": args.n_null}
    path = variant_effects(
        model,
        args.genome,
        args.vcf or args.table,
        length=args.length,
        target=args.target,
        output_fn=args.head,
        score=args.score,
        profile=args.profile,
        strands=args.strands,
        shifts=[shift for given in args.shifts for shift in given],
        null=args.null,
        **nulls,
        peaks=args.peaks,
        random_state=args.random_state,
        attributions=args.attributions,
        attribution_options=_attribution_options(args) or None,
        layout=args.layout or ("NCL" if framework == "torch" else "NLC"),
        batch_size=args.batch_size,
        max_cpu_sequences=args.max_cpu_sequences,
        device=args.device,
        verbose=not args.quiet,
        backend=framework,
        out=args.out if shard is None else table_shard_path(args.out, *shard),
        overwrite=args.overwrite,
        shard=shard,
    )
    print(path)
    return str(path)


def table_shard_path(out: str, index: int, count: int) -> str:
    """The shard file of a variant effects table: ``.shard-i-of-n`` before ``.vcf.gz`` as
    before any other suffix."""
    if "{shard}" not in out and out.lower().endswith(".vcf.gz"):
        return shard_path(out[: -len(".gz")], index, count) + out[-len(".gz") :]
    return shard_path(out, index, count)


def _attribution_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``attribution_options`` of ``seqattrib variants``: the keywords of its method.

    ``--random-state`` goes to every method that draws random baselines; ``--n-steps`` and
    ``--n-baselines`` (when given) only to the methods that take them.
    """
    from ..attribution.methods import METHODS

    if args.attributions is None:
        return {}
    return method_keywords(args, METHODS[args.attributions], None)


def export(args: argparse.Namespace) -> list[Path]:
    from ..io import export_bigwig, export_chrombpnet, export_modisco

    names = args.class_names.split(",") if args.class_names else None
    if args.format != "chrombpnet" and args.target is not None:
        raise parameter_error(
            f"seqattrib export {args.format}",
            "--target",
            "left out (the export writes every target of the file)",
            args.target,
            "Leave out --target, or name the files of the targets with --class-names.",
        )
    if args.format == "chrombpnet":
        if names is not None:
            raise parameter_error(
                "seqattrib export chrombpnet",
                "--class-names",
                "left out (the file holds one target, chosen with --target)",
                args.class_names,
                "Leave out --class-names and name the file with --out.",
            )
        paths = export_chrombpnet(
            args.tracks,
            args.out,
            target=args.target,
            overwrite=args.overwrite,
            verbose=not args.quiet,
        )
    elif args.format == "modisco":
        paths = export_modisco(args.tracks, args.out, class_names=names, overwrite=args.overwrite)
    else:
        if not args.chrom_sizes:
            raise parameter_error(
                "seqattrib export bigwig",
                "--chrom-sizes",
                "given",
                None,
                "Pass --chrom-sizes hg38.chrom.sizes (chromosome names and lengths).",
            )
        paths = export_bigwig(
            args.tracks, args.out, args.chrom_sizes, class_names=names, overwrite=args.overwrite
        )
    for p in paths:
        print(p)
    return paths


def plot(args: argparse.Namespace) -> Path:
    from ..io import read_tracks
    from ..plot import plot_ism, plot_logo

    _check_image(args)
    import_optional("matplotlib")
    row, start, end = _plot_window(args)
    if args.alt:
        return _plot_variant(args, row, start, end)
    tracks = read_tracks(args.tracks, rows=slice(row, row + 1))
    scores = tracks.attributions[0]
    settings = tracks.settings
    targets = settings["targets"]
    if args.target not in targets:
        raise parameter_error("seqattrib plot", "--target", f"one of {targets}", args.target)
    if scores.ndim == 3:
        scores = scores[targets.index(args.target)]
    names = args.class_names.split(",") if args.class_names else None
    name = names[targets.index(args.target)] if names else f"target {args.target}"
    coordinates = None
    if tracks.regions is not None:
        coordinates = (tracks.regions.chrom[0], int(tracks.regions.start[0]))
    where = f"{coordinates[0]}:{coordinates[1] + 1:,}" if coordinates else f"row {row}"
    title = f"{name}, {settings['method']} ({where})"
    axis = -1 if int(tracks.attrs["alphabet_axis"]) == -1 else 0  # of one row
    if settings["method"] != "ism" and not settings.get("multiply_by_inputs", False):
        scores = scores * tracks.sequences[0]  # hypothetical -> contributions
    draw = plot_ism if settings["method"] == "ism" else plot_logo
    with _saved_image(args) as path:
        draw(
            scores,
            start=start,
            end=end,
            alphabet_axis=axis,
            title=title,
            out=path,
            coordinates=coordinates,
        )
    print(args.out)
    return Path(args.out)


def _check_image(args: argparse.Namespace) -> None:
    """Refuse an image name without a known format, or an existing one without --overwrite."""
    if Path(args.out).suffix.lower() not in IMAGE_SUFFIXES:
        raise parameter_error(
            "seqattrib plot",
            "--out",
            "an image file name ending in " + ", ".join(IMAGE_SUFFIXES),
            args.out,
            f"Add the format, e.g. -o {Path(args.out).stem or 'logo'}.png.",
        )
    if os.path.lexists(args.out) and not args.overwrite:
        raise parameter_error(
            "seqattrib plot",
            "--out",
            "a file that does not exist yet",
            args.out,
            "Pass --overwrite to replace it, or choose another name.",
            error=FileExistsError,
        )


@contextmanager
def _saved_image(args: argparse.Namespace) -> Iterator[Path]:
    """A temporary name beside --out to save the image to, renamed to --out once
    saved: the image appears complete, or not at all."""
    out = Path(args.out)
    temp = out.with_name(f".{out.stem}.{os.getpid()}.partial{out.suffix}")
    try:
        yield temp
        if os.path.lexists(out) and not args.overwrite:  # made while this image was drawn
            _check_image(args)
        os.replace(temp, out)
    finally:
        if temp.exists():
            temp.unlink()


def _plot_variant(args: argparse.Namespace, row: int, start: int | None, end: int | None) -> Path:
    """The row of TRACKS (reference windows) above the row of --alt, around the variant."""
    from ..io import read_tracks
    from ..plot import plot_variant

    ref, alt = (read_tracks(p, rows=slice(row, row + 1)) for p in (args.tracks, args.alt))
    if ref.regions is None or alt.regions is None:
        raise parameter_error(
            "seqattrib plot",
            "--alt",
            "the tracks of seqattrib variants --attributions, with TRACKS its .ref.h5",
            args.alt,
        )
    settings = ref.settings
    targets = settings["targets"]
    if args.target not in targets:
        raise parameter_error("seqattrib plot", "--target", f"one of {targets}", args.target)
    scores = [t.attributions[0] for t in (ref, alt)]
    if scores[0].ndim == 3:
        scores = [s[targets.index(args.target)] for s in scores]
    method = settings["method"]
    if method != "ism" and not settings.get("multiply_by_inputs", False):
        scores = [s * t.sequences[0] for s, t in zip(scores, (ref, alt), strict=True)]
    axis = -1 if int(ref.attrs["alphabet_axis"]) == -1 else 0
    names = args.class_names.split(",") if args.class_names else None
    name = names[targets.index(args.target)] if names else f"target {args.target}"
    chrom, first = ref.regions.chrom[0], int(ref.regions.start[0])
    with _saved_image(args) as path:
        plot_variant(
            scores[0],
            scores[1],
            offset=int(alt.regions.start[0]) - first,
            start=start,
            end=end,
            kind="ism" if method == "ism" else "logo",
            alphabet_axis=axis,
            title=f"{name}, {method} (row {row})",
            out=path,
            coordinates=(chrom, first),
        )
    print(args.out)
    return Path(args.out)


def _plot_window(args: argparse.Namespace) -> tuple[int, int | None, int | None]:
    """(row, start, end) from --row/--start/--end, or from --region on the genome."""
    from ..io import read_tracks

    n_rows = int(read_tracks(args.tracks, rows=slice(0, 0)).attrs["n_completed"])
    if args.region is None:
        if not 0 <= args.row < n_rows:
            raise parameter_error(
                "seqattrib plot",
                "--row",
                f"a completed row of the file (0 to {n_rows - 1})",
                args.row,
            )
        return args.row, args.start, args.end
    match = re.fullmatch(r"([^:]+):([\d,]+)-([\d,]+)", args.region)
    if match is None:
        raise parameter_error("seqattrib plot", "--region", "chrom:start-end", args.region)
    chrom = match.group(1)
    first, last = (int(match.group(i).replace(",", "")) for i in (2, 3))
    regions = read_tracks(args.tracks).regions
    if regions is None:
        raise parameter_error(
            "seqattrib plot",
            "--region",
            "used with a file that has genome regions (explain --genome --regions)",
            args.region,
        )
    for row in range(len(regions.chrom)):
        lo, hi = int(regions.start[row]), int(regions.end[row])
        if regions.chrom[row] == chrom and lo < first <= last <= hi:
            return row, first - 1 - lo, last - lo
    raise parameter_error(
        "seqattrib plot",
        "--region",
        "inside one window of the file",
        args.region,
        "Choose a region within one of the file's windows, or pass --row.",
    )


def merge(args: argparse.Namespace) -> Path:
    from ..io import merge as merge_files
    from ..variants import merge_effects
    from ..variants.vcf_output import is_vcf

    tables = args.shards[0].lower().endswith((".tsv", ".txt", ".parquet")) or is_vcf(args.shards[0])
    join = merge_effects if tables else merge_files
    path = join(args.shards, args.out, overwrite=args.overwrite)
    print(path)
    return path


#: The commands ``seqattrib launch`` runs, and the flags that name the file they write.
LAUNCHED = {
    ("explain",): ("--out", "-o"),
    ("ism",): ("--out", "-o"),
    ("trak", "fit"): ("--store",),
    ("tracin", "fit"): ("--store",),
}


def _launched_file(command: Sequence[str]) -> str | None:
    """The file a launched ``command`` writes (the last value of its file flag), or None."""
    flags = next((f for head, f in LAUNCHED.items() if tuple(command[: len(head)]) == head), ())
    found = None
    for i, word in enumerate(command):
        name, equals, value = word.partition("=")
        if equals and name in flags:
            found = value
        elif word in flags and i + 1 < len(command):
            found = command[i + 1]
    return found


def launch(command: Sequence[str], devices: Sequence[str], *, overwrite: bool = False) -> Path:
    """Run the CLI ``command`` (``explain|ism ... --out F`` or ``trak|tracin fit ... --store
    F``) once per device, each worker on its own shard with ``CUDA_VISIBLE_DEVICES`` set to its
    device, then merge their files into F."""
    from ..io import merge

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    out = _launched_file(command)
    if out is None:
        raise parameter_error(
            "seqattrib launch",
            "command",
            "explain or ism with --out, or trak fit or tracin fit with --store",
            " ".join(command) or "nothing",
        )
    if any(word.partition("=")[0] == "--shard" for word in command):
        raise parameter_error("seqattrib launch", "--shard", "left to launch", "given")
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
    return merge(shards, out, overwrite=overwrite)


def launch_workers(args: argparse.Namespace) -> Path:
    """One worker per device (CUDA_VISIBLE_DEVICES each), then merge their shards."""
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    path = launch(args.command, devices, overwrite=args.overwrite)
    print(path)
    return path


def demo(args: argparse.Namespace) -> dict[str, Any]:
    from ..demo import TASKS, run_demo

    result = run_demo(
        args.out,
        n_sequences=args.n_sequences,
        framework=args.framework,
        data=args.data,
        verbose=not args.quiet,
        overwrite=args.overwrite,
    )
    print(
        f"EIG (64 dinucleotide-shuffled baselines x 3 Gauss-Legendre points, 3 targets) on "
        f"{result['n_sequences']} held-out demo sequences in {result['seconds']:.1f} s"
    )
    for task in TASKS:
        fraction, n = result["hits"][task]
        if n == 0:
            print(f"  {task:5s}: no sequence with the planted motif among them")
            continue
        print(
            f"  {task:5s}: top-scoring base inside the planted motif in {fraction:.0%} "
            f"of {n} positive sequences"
        )
    print("wrote:")
    for p in result["files"]:
        print(f"  {p}")
    return result


def interrupted(args: argparse.Namespace) -> str:
    """What a user interrupting ``args``'s command has, and how to go on."""
    if args.command in ("explain", "ism", "variants"):
        shard = args.shard if args.shard is not None else resolve_shard(None)
        out = args.out if shard is None else table_shard_path(args.out, *shard)
        if args.command == "variants" and out.lower().endswith(CONVERTED):
            out += ".partial.tsv"  # the rows, until every variant is in
        return (
            f"{out} keeps the rows written so far; rerun the same command to resume it "
            "(--overwrite starts again)."
        )
    if args.command == "demo":
        tracks = Path(args.out) / "tracks.h5"
        return f"{tracks} keeps the rows written so far; rerun the same command to resume it."
    if args.command in ("trak", "tracin"):
        return data_attribution.interrupted(args)
    if args.command == "seqlets":
        return motifs.interrupted(args)
    if args.command == "launch":
        return "the workers' shard files keep their rows; rerun the same command to resume them."
    return "no partial output was kept; rerun the same command."


COMMANDS = {
    "explain": explain,
    "ism": ism,
    "variants": variants,
    "marginalize": experiments.marginalize,
    "space": experiments.space,
    "seqlets": motifs.run,
    "export": export,
    "plot": plot,
    "merge": merge,
    "launch": launch_workers,
    "demo": demo,
    "trak": data_attribution.run,
    "tracin": data_attribution.run,
}
