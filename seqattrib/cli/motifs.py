"""``seqattrib seqlets``: seqlets of a tracks file, named against a motif database, with genome
coordinates, as a BED file, a TSV table and a count summary (resumable)."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from .messages import reading
from .parser import POSITIVE, POSITIVE_FLOAT, TARGETS, Parser, _typed


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError
    return value


FRACTION = _typed("fraction", "a number from 0 to 1", _fraction)
#: Flags of the seqlet settings: (flag, keyword, type, help).
_SEQLET_FLAGS = (
    ("--threshold", "threshold", POSITIVE_FLOAT, "p-value every inner span of a seqlet is below"),
    ("--min-length", "min_length", POSITIVE, "shortest seqlet (bases, flanks excluded)"),
    ("--max-length", "max_length", POSITIVE, "longest seqlet (bases, flanks excluded)"),
    ("--flank", "flank", int, "bases added on each side of every seqlet"),
    ("--max-fdr", "max_fdr", FRACTION, "keep seqlets whose false-discovery rate is at most this "
     "(needs --controls)"),
    ("--n-bins", "n_bins", POSITIVE, "bins of the contributions for the seqlets' null"),
)  # fmt: skip


def add_seqlets(sub: Any) -> Parser:
    from ..motifs import iter_seqlets

    defaults = inspect.signature(iter_seqlets).parameters
    text = (
        "seqlets of a tracks file named against a motif database (TOMTOM), with genome "
        "coordinates: a BED file, a TSV of every field and a count summary per target"
    )
    p: Parser = sub.add_parser("seqlets", help=text, description=text)
    p.add_argument("tracks", help="a tracks file (seqattrib explain --out), from genome regions")
    p.add_argument(
        "--motifs",
        help="a MEME motif database (JASPAR, HOCOMOCO, TF-MoDISco patterns) to name seqlets "
        "after their best match (default: seqlets without names)",
    )
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="the BED file to write; OUT.tsv (every field) and OUT.summary.tsv go beside it, "
        "and a rerun with the same settings resumes them",
    )
    p.add_argument(
        "--target",
        type=TARGETS,
        default="all",
        help="targets of the tracks file: one, a comma list such as 0,2, or 'all' "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--controls",
        help="a tracks file of control attributions (shuffled sequences or background regions) "
        "for each seqlet's false-discovery rate (default: none, no rate)",
    )
    for flag, key, kind, help_text in _SEQLET_FLAGS:
        p.add_argument(flag, type=kind, help=f"{help_text} (default: {defaults[key].default})")
    p.add_argument(
        "--sign",
        choices=("both", "positive", "negative"),
        help=f"which seqlets (default: {defaults['sign'].default})",
    )
    p.add_argument(
        "--n-matches", type=POSITIVE, default=3, help="matches per seqlet (default: %(default)s)"
    )
    p.add_argument(
        "--matrix",
        choices=("contributions", "sequence"),
        default="contributions",
        help="what stands for a seqlet against the motifs: its bases weighted by their "
        "contributions, or its bases alone (default: %(default)s)",
    )
    p.add_argument(
        "--max-q-value",
        type=FRACTION,
        default=0.05,
        help="name a seqlet after its best match when the match's q-value is at most this "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--coordinates",
        choices=("genome", "sequence"),
        default="genome",
        help="genome coordinates from the file's regions, or positions within the sequences "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--block-size",
        type=POSITIVE,
        help="rows of the tracks file per block (default: 64 MiB of contributions)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=-1,
        help="threads of TOMTOM, -1 for all (default: %(default)s)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the tables instead of resuming"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace) -> Any:
    from ..motifs import motif_instances, read_motifs

    if args.motifs is not None:
        with reading("--motifs", args.motifs, "path"):
            read_motifs(args.motifs)
    options = {key: getattr(args, key) for _, key, _, _ in _SEQLET_FLAGS}
    options["sign"] = args.sign
    result = motif_instances(
        args.tracks,
        args.motifs,
        out=args.out,
        target=args.target,
        coordinates=args.coordinates,
        n_matches=args.n_matches,
        matrix=args.matrix,
        max_q_value=args.max_q_value,
        controls=args.controls,
        block_size=args.block_size,
        n_jobs=args.threads,
        overwrite=args.overwrite,
        verbose=not args.quiet,
        **{key: value for key, value in options.items() if value is not None},
    )
    print(f"{result.n_seqlets} seqlets in {result.n_rows} sequences")
    for path in (result.bed, result.tsv, result.summary):
        print(path)
    return result


def interrupted(args: argparse.Namespace) -> str:
    """What an interrupted ``seqattrib seqlets`` kept."""
    from ..motifs.instances import companions

    return (
        f"{companions(args.out)[1]} keeps the blocks written so far; rerun the same command to "
        "resume it (--overwrite starts again)."
    )
