"""``seqattrib marginalize`` and ``seqattrib space``: motifs inserted into background sequences,
the predictions streamed into an HDF5 file (resumable, shardable) and the mean effect per target
printed as a table."""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from ..loader import load_model, model_framework
from ..shards import resolve_shard, shard_path
from .messages import reading
from .parser import (
    BATCH_SIZE,
    HEAD,
    POSITIVE,
    SHARD,
    TARGETS,
    Parser,
    _typed,
    add_model_and_sequences,
)
from .sequences import load_sequences


def _ints(text: str) -> list[int]:
    """``0,5,10`` or ``START:STOP[:STEP]`` (STOP excluded)."""
    if ":" in text:
        parts = [int(p) for p in text.split(":")]
        if len(parts) not in (2, 3):
            raise ValueError(text)
        return list(range(*parts))
    return [int(p) for p in text.split(",")]


DISTANCES = _typed("distances", "a comma list such as 0,5,10 or a range START:STOP[:STEP]", _ints)


def _common(p: argparse.ArgumentParser) -> None:
    add_model_and_sequences(p)
    p.add_argument(
        "--meme",
        help="a MEME motif file (JASPAR, HOCOMOCO); a motif given by name is read from it, and "
        "its consensus inserted (default: motifs are sequences)",
    )
    p.add_argument(
        "--position",
        type=int,
        help="0-based start of the (first) motif (default: centred on the sequences)",
    )
    p.add_argument(
        "--n-shuffles",
        type=POSITIVE,
        help="use this many dinucleotide shuffles of each sequence as backgrounds (default: the "
        "sequences themselves)",
    )
    p.add_argument(
        "--random-state",
        type=int,
        default=0,
        help="seed of the shuffles; a sequence's shuffles depend only on it and the sequence "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--target",
        type=TARGETS,
        default="all",
        help="output index, a comma list such as 0,2, or 'all' (default: %(default)s)",
    )
    p.add_argument(
        "--head",
        type=HEAD,
        help="what to predict of a model with several outputs, as seqattrib explain takes it "
        "(default: the model's outputs as they are)",
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE,
        default="auto",
        help="device rows per batch (rows of many backgrounds and edits share one), or 'auto' "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-cpu-sequences",
        type=POSITIVE,
        default=1024,
        help="finished backgrounds held on the host before they are written (default: %(default)s)",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 or /GPU:0 (default: where the model is)")
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="the HDF5 file of predictions to write; a rerun with the same settings resumes it",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out instead of resuming it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--shard",
        type=SHARD,
        help="i/n: run the i-th of n contiguous blocks of the sequences into "
        "OUT.shard-i-of-n.h5 (default: from SLURM_ARRAY_TASK_ID/COUNT or RANK/WORLD_SIZE)",
    )


def add_marginalize(sub: Any) -> Parser:
    text = "predictions before and after inserting a motif into background sequences"
    p: Parser = sub.add_parser("marginalize", help=text, description=text)
    p.add_argument(
        "--motif",
        required=True,
        help="the motif: a sequence such as CTTATCT (N keeps the background's base), or the "
        "name of a motif of --meme",
    )
    _common(p)
    return p


def add_space(sub: Any) -> Parser:
    text = "predictions with two or more motifs at each distance and orientation"
    p: Parser = sub.add_parser("space", help=text, description=text)
    p.add_argument(
        "--motifs",
        required=True,
        help="comma list of two or more motifs, left to right: sequences, or names of motifs "
        "of --meme",
    )
    p.add_argument(
        "--distances",
        type=DISTANCES,
        required=True,
        help="bases between one motif's end and the next one's start: 0,5,10 or 0:50:5",
    )
    p.add_argument(
        "--orientations",
        default="all",
        help="'all', or a comma list with one + or - per motif, such as ++,+- "
        "(-: reverse complement) (default: %(default)s)",
    )
    _common(p)
    return p


def _motif(name: str, motifs: dict[str, np.ndarray] | None) -> Any:
    """A motif by name from --meme, or the sequence as given."""
    if motifs is not None and name in motifs:
        return motifs[name]
    if motifs is not None and set(name.upper()) - set("ACGTN"):
        raise parameter_error(
            "seqattrib", "--motif", f"a sequence or one of the {len(motifs)} motifs of --meme",
            name, "Check the name (MEME files name each motif on its MOTIF line).",
        )  # fmt: skip
    return name


def _run(args: argparse.Namespace) -> dict[str, Any]:
    model = load_model(args.model, weights=args.weights)
    framework = model_framework(model)
    layout: Literal["NLC", "NCL"] = args.layout or ("NCL" if framework == "torch" else "NLC")
    X, _ = load_sequences(args, layout)
    shard = args.shard if args.shard is not None else resolve_shard(None)
    motifs = None
    if args.meme:
        from ..experiments import read_meme

        with reading("--meme", args.meme, "path"):
            motifs = read_meme(args.meme)
    return dict(
        model=model,
        backgrounds=X,
        motifs=motifs,
        options=dict(
            backend=framework,
            position=args.position,
            n_shuffles=args.n_shuffles,
            random_state=args.random_state,
            target=args.target,
            output_fn=args.head,
            batch_size=args.batch_size,
            max_cpu_sequences=args.max_cpu_sequences,
            device=args.device,
            out=args.out if shard is None else shard_path(args.out, *shard),
            overwrite=args.overwrite,
            verbose=not args.quiet,
            shard=shard,
        ),
    )


def marginalize(args: argparse.Namespace) -> str:
    from ..experiments import marginalize as run

    given = _run(args)
    path = run(
        given["model"],
        given["backgrounds"],
        _motif(args.motif, given["motifs"]),
        **given["options"],
    )
    assert isinstance(path, str)
    _report(path, [args.motif])
    return path


def space(args: argparse.Namespace) -> str:
    from ..experiments import space as run

    given = _run(args)
    names = [m for m in args.motifs.split(",") if m]
    orientations = args.orientations if args.orientations == "all" else args.orientations.split(",")
    path = run(
        given["model"],
        given["backgrounds"],
        [_motif(name, given["motifs"]) for name in names],
        distances=args.distances,
        orientations=orientations,
        **given["options"],
    )
    assert isinstance(path, str)
    strands = (
        ["".join(o) for o in itertools.product("+-", repeat=len(names))]
        if orientations == "all"
        else orientations
    )
    _report(path, [f"{s} gap {d}" for s in strands for d in args.distances])
    return path


def _report(path: str, edits: list[str]) -> None:
    """The file's path, then a TSV of each edit's mean effect (after - before) per target over
    the backgrounds written so far, on stdout."""
    import h5py

    with h5py.File(path, "r") as f:
        done = int(f.attrs["n_completed"])
        rows = f["predictions"][:done]
        targets = json.loads(f.attrs["targets"])
    print(path)
    if rows.ndim == 2:
        rows = rows[:, None]
    n_edits = 1 + len(edits)
    rows = rows.reshape(done, rows.shape[1], -1, n_edits)  # (N, K, shuffles, edits)
    effect = rows[..., 1:] - rows[..., :1]
    print("edit\ttarget\tmean_before\tmean_after\tmean_effect\tsd_effect")
    for e, label in enumerate(edits):
        for k in range(rows.shape[1]):
            values = effect[:, k, :, e].ravel()
            print(
                f"{label}\t{targets[k]}\t{rows[:, k, :, 0].mean():.6g}\t"
                f"{rows[:, k, :, e + 1].mean():.6g}\t{values.mean():.6g}\t{values.std():.6g}"
            )
