"""The sequences a command reads: a FASTA file, or a genome with regions and a length."""

from __future__ import annotations

import argparse
from typing import Any, Literal

from .._errors import parameter_error
from .messages import reading


def load_sequences(args: argparse.Namespace, layout: Literal["NLC", "NCL"]) -> tuple[Any, Any]:
    """(X, regions) from --fasta, or --genome with --regions and --length, in ``layout``."""
    from ..io import fasta_windows, genome_windows, read_regions

    if args.fasta and (args.genome or args.regions):
        raise parameter_error(
            "seqattrib", "--fasta", "used without --genome and --regions", args.fasta
        )
    if args.fasta:
        with reading("--fasta", args.fasta, "path", "genome"):
            return fasta_windows(args.fasta, layout), None
    missing = [
        flag
        for flag, value in (("--genome", args.genome), ("--regions", args.regions))
        if not value
    ]
    if args.length is None:
        missing.append("--length")
    if missing:
        given = [f for f in ("--genome", "--regions", "--length") if f not in missing]
        raise parameter_error(
            "seqattrib",
            "--fasta",
            "given, or --genome, --regions and --length together",
            ", ".join(given) + " without " + ", ".join(missing) if given else "none of them",
            "Pass --fasta seqs.fa, or --genome hg38.fa --regions peaks.bed --length 2114.",
            described=True,
        )
    with reading("--regions", args.regions, "path"):
        regions = read_regions(args.regions, length=args.length)
    with reading("--genome", args.genome, "path"):
        windows = genome_windows(args.genome, regions, args.length, layout)
    return windows, windows.regions
