"""The ``seqattrib`` command line: parses, calls the library, reports (no algorithm here).

Errors are one line on stderr in the vocabulary of the options, with a non-zero exit; warnings
are one line each; progress bars go to stderr. An interrupted command (Ctrl-C) says on one line
what it kept and how to go on, and exits with 130.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .._version import __version__
from .commands import COMMANDS, interrupted
from .messages import FlagError, cli_message, one_line_warnings
from .parser import DESCRIPTION, EPILOG, Parser
from .subcommands import SUBCOMMANDS

__all__ = ["build_parser", "main"]

#: Errors a command reports on one line (anything else is a bug and keeps its traceback).
_ERRORS = (ValueError, TypeError, OSError, ImportError, KeyError, InterruptedError, FlagError)
#: The options that name files, and how a message names them.
_PATH_FLAGS = {
    "out": "--out",
    "fasta": "--fasta",
    "genome": "--genome",
    "regions": "--regions",
    "tracks": "TRACKS",
    "alt": "--alt",
    "data": "--data",
    "chrom_sizes": "--chrom-sizes",
    "vcf": "--vcf",
    "table": "--table",
    "weights": "--weights",
    "store": "--store",
    "labels": "--labels",
}


def build_parser() -> Parser:
    """The ``seqattrib`` parser, every subcommand wired to the function that runs it."""
    parser = Parser(prog="seqattrib", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"seqattrib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, add in SUBCOMMANDS.items():
        add(sub).set_defaults(run=COMMANDS[name])
    return parser


def _context(args: object) -> dict[str, str]:
    """Which flag gave a file that the library calls ``path`` (and, from --fasta, the DNA that
    the library calls ``genome``)."""
    fasta, genome = getattr(args, "fasta", None), getattr(args, "genome", None)
    if getattr(args, "command", None) == "demo":
        return {"path": "--data"}
    if fasta:
        return {"path": "--fasta", "genome": "--fasta"}
    return {"path": "--genome" if genome else "TRACKS"}


def _paths(args: object) -> dict[str, str]:
    """The paths given on the command line, each with its flag."""
    given = {key: getattr(args, key, None) for key in _PATH_FLAGS}
    return {str(value): _PATH_FLAGS[key] for key, value in given.items() if isinstance(value, str)}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqattrib`` console script and ``python -m seqattrib``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    prog = f"seqattrib {args.command}"
    with one_line_warnings(prog):
        try:
            args.run(args)
        except KeyboardInterrupt:
            print(f"\n{prog}: interrupted: {interrupted(args)}", file=sys.stderr)
            return 130
        except BrokenPipeError:  # stdout piped into a reader that stopped (| head)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except _ERRORS as exc:
            message = cli_message(exc, _context(args), _paths(args))
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 1
    return 0
