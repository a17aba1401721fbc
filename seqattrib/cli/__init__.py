"""The ``seqattrib`` command line: parses, calls the library, reports (no algorithm here).

Errors are one line on stderr in the vocabulary of the options, with a non-zero exit; warnings
are one line each; progress bars go to stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .._version import __version__
from .commands import COMMANDS
from .messages import cli_message, one_line_warnings
from .parser import DESCRIPTION, EPILOG, Parser
from .subcommands import SUBCOMMANDS

__all__ = ["build_parser", "main"]

#: Errors a command reports on one line (anything else is a bug and keeps its traceback).
_ERRORS = (ValueError, TypeError, OSError, ImportError, KeyError, InterruptedError)


def build_parser() -> Parser:
    """The ``seqattrib`` parser, every subcommand wired to the function that runs it."""
    parser = Parser(prog="seqattrib", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"seqattrib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, add in SUBCOMMANDS.items():
        add(sub).set_defaults(run=COMMANDS[name])
    return parser


def _context(args: object) -> dict[str, str]:
    """Which flag gave a file that the library calls ``path``."""
    fasta, genome = getattr(args, "fasta", None), getattr(args, "genome", None)
    return {"path": "--fasta" if fasta else "--genome" if genome else "TRACKS"}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqattrib`` console script and ``python -m seqattrib``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    prog = f"seqattrib {args.command}"
    with one_line_warnings(prog):
        try:
            args.run(args)
        except _ERRORS as exc:
            print(f"{prog}: error: {cli_message(exc, _context(args))}", file=sys.stderr)
            return 1
    return 0
