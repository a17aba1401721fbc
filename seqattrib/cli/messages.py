"""The command line speaks in flags: errors and warnings of the library, reworded into the
options a user typed, on one line each."""

from __future__ import annotations

import errno
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

#: Parameter names of the library and the flags that set them.
FLAGS = {
    "X": "the sequences (--fasta, or --genome with --regions)",
    "target": "--target",
    "out": "--out",
    "overwrite": "--overwrite",
    "batch_size": "--batch-size",
    "max_cpu_sequences": "--max-cpu-sequences",
    "device": "--device",
    "n_steps": "--n-steps",
    "n_baselines": "--n-baselines",
    "method": "--method",
    "quadrature": "--quadrature",
    "baselines": "--baselines",
    "random_state": "--random-state",
    "multiply_by_inputs": "--hypothetical",
    "return_stderr": "--stderr",
    "tolerance": "--tolerance",
    "max_baselines": "--max-baselines",
    "preset": "--preset",
    "positions": "--positions",
    "score": "--score",
    "fast": "--fast",
    "spec": "--model",
    "weights": "--weights",
    "model": "--model",
    "length": "--length",
    "regions": "--regions",
    "class_names": "--class-names",
    "chrom_sizes": "--chrom-sizes",
    "shard": "--shard",
    "shards": "the shard files",
    "variants": "--vcf/--table",
    "genome": "--genome",
    "attributions": "--attributions",
    "attribution_options": "--n-baselines/--n-steps",
    "layout": "--layout",
    "profile": "--profile",
    "strands": "--strands",
    "shifts": "--shifts",
    "null": "--null",
    "n_null": "--n-null",
    "peaks": "--peaks",
    "outdir": "--out",
    "tracks": "TRACKS",
    "n_sequences": "--n-sequences",
    "data": "--data",
    "checkpoints": "--checkpoints",
    "store": "--store",
    "X_train": "the training sequences (--fasta, or --genome with --regions)",
    "X_test": "the test sequences (--fasta, or --genome with --regions)",
    "y_train": "--labels",
    "y_test": "--labels",
    "ids": "the sequence names (--fasta) or windows (--regions)",
    "k": "-k",
    "proponents": "--opponents",
    "loss": "--loss",
    "task": "--task",
    "proj_dim": "--proj-dim",
    "projection": "--projection",
    "lambda_reg": "--lambda-reg",
    "parameters": "--parameters",
    "learning_rates": "--learning-rates",
    "backgrounds": "the sequences (--fasta, or --genome with --regions)",
    "motif": "--motif",
    "motifs": "--motifs",
    "position": "--position",
    "n_shuffles": "--n-shuffles",
    "distances": "--distances",
    "orientations": "--orientations",
    "threshold": "--threshold",
    "min_length": "--min-length",
    "max_length": "--max-length",
    "flank": "--flank",
    "sign": "--sign",
    "max_fdr": "--max-fdr",
    "n_bins": "--n-bins",
    "controls": "--controls",
    "coordinates": "--coordinates",
    "n_matches": "--n-matches",
    "matrix": "--matrix",
    "max_q_value": "--max-q-value",
    "block_size": "--block-size",
}
#: Keyword spellings of the library's advice, and how they are typed on the command line.
_IDIOMS = [
    (re.compile(r"\boverwrite=True\b"), "--overwrite"),
    (re.compile(r"\bn_baselines( ?)="), r"--n-baselines\1 "),
    (re.compile(r"\bn_steps="), "--n-steps "),
    (re.compile(r"\bbatch_size="), "--batch-size "),
    (re.compile(r"\bmax_baselines="), "--max-baselines "),
    (re.compile(r"\brandom_state="), "--random-state "),
    (re.compile(r"\bdevice='(\w+)'"), r"--device \1"),
    (re.compile(r"\bweights=FILE\b"), "--weights FILE"),
    (re.compile(r"\bquadrature='(\w+)'"), r"--quadrature \1"),
    (re.compile(r"\bproj_dim="), "--proj-dim "),
    (re.compile(r"\blambda_reg="), "--lambda-reg "),
    (re.compile(r"\blearning_rates="), "--learning-rates "),
    (re.compile(r"\bloss='(\w+)'"), r"--loss \1"),
    (re.compile(r"\btarget= ?"), "--target "),
    (re.compile(r"\b(score|null|strands)='(\w+)'"), r"--\1 \2"),
    (re.compile(r"\bn_null="), "--n-null "),
    (re.compile(r"\bprofile="), "--profile "),
    (re.compile(r"\bdelete this one to featurize again\b"), "pass --overwrite to featurize again"),
    (re.compile(r"\bRun fit\(\.\.\., store=\.\.\.\) first\b"), "Run fit with --store first"),
    (re.compile(r"\bRun (TRAK|TracIn)\.fit\(\.\.\., store=\) to the end\b"), "Run fit to the end"),
    (re.compile(r"\bmultiply_by_inputs=False\b"), "--hypothetical"),
    (re.compile(r"\bcoordinates='sequence'"), "--coordinates sequence"),
    (re.compile(r"\bcontrols= \("), "--controls ("),
    (re.compile(r"\bPass format='bed' to\b"), "Keep its first three columns (cut -f1-3) to"),
]
#: What to do about an operating system error, by its errno.
_OS_FIXES = {
    errno.ENOENT: "Check the path.",
    errno.ENOTDIR: "Check the path: a part of it is a file, not a folder.",
    errno.EISDIR: "Name a file, not a folder.",
    errno.EEXIST: "Choose another path.",
    errno.ENOSPC: "Free space (or choose another disk) and rerun the same command.",
    errno.EDQUOT: "Free space (or choose another disk) and rerun the same command.",
    errno.EROFS: "Choose a folder on a writable disk.",
    errno.EACCES: "Choose a path you may write (or read), or change its permissions.",
    errno.EPERM: "Choose a path you may write (or read), or change its permissions.",
}
_TEMPLATE = re.compile(r"^The '([\w-]+)' parameter of ([\w. -]+?) must be ")


class FlagError(Exception):
    """A library error raised while reading what one flag gave.

    ``flags`` maps the library's parameter names to that flag; ``flag`` and ``value`` name the
    input in a message that is not in the library's template.
    """

    def __init__(self, error: BaseException, flag: str, value: str, params: tuple[str, ...]):
        super().__init__(str(error))
        self.error = error
        self.flag = flag
        self.value = value
        self.flags = {param: flag for param in params}


@contextmanager
def reading(flag: str, value: Any, *params: str) -> Iterator[None]:
    """Errors raised while reading the input ``value`` of ``flag`` name ``flag`` (also for the
    library's parameters ``params``), including the file readers' own errors."""
    try:
        yield
    except (ValueError, TypeError, OSError, KeyError) as exc:
        raise FlagError(exc, flag, str(value), params) from exc
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "pyfaidx":
            raise
        raise FlagError(exc, flag, str(value), params) from exc


def cli_message(
    exc: BaseException,
    context: dict[str, str] | None = None,
    paths: Mapping[str, str] | None = None,
) -> str:
    """``exc``'s message on one line, in flag vocabulary. ``context`` maps parameter names to
    the flag that gave the value in this command (e.g. ``path`` -> ``--genome``); ``paths``
    maps the paths given on the command line to their flags, for the operating system's
    errors."""
    if isinstance(exc, FlagError):
        text = cli_message(exc.error, dict(context or {}, **exc.flags), paths)
        if _TEMPLATE.match(" ".join(str(exc.error).split())) or text.startswith(exc.flag):
            return text
        return f"{exc.flag} {exc.value!r} cannot be read: {_lower_first(text)}"
    if isinstance(exc, OSError) and exc.errno in _OS_FIXES and exc.strerror:
        return _os_message(exc, paths or {})
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        text = " ".join(exc.args[0].split())
    flags = dict(FLAGS, **(context or {}))
    match = _TEMPLATE.match(text)
    if match is not None:
        param = match.group(1)
        if param == "output_fn":
            return _tuple_outputs(text)
        if match.group(2).startswith("seqattrib.heads."):
            flag = "--head" if param == "spec" else f"--head {param}="
        else:
            flag = param if param.startswith("-") else flags.get(param, repr(param))
        text = f"{flag} must be " + text[match.end() :]
    for pattern, replacement in _IDIOMS:
        text = pattern.sub(replacement, text)
    return text


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _os_message(exc: OSError, paths: Mapping[str, str]) -> str:
    """An operating system error in words: the flag whose path it concerns, why, the fix."""
    name = os.fspath(exc.filename) if exc.filename is not None else None
    where = repr(name) if name is not None else "a file"
    if name is not None:
        target = os.path.abspath(name)
        given = {os.path.abspath(path): (path, flag) for path, flag in paths.items()}
        inside = [
            (flag, name)
            for full, (path, flag) in given.items()
            if target == full or target.startswith(full + os.sep)
        ]
        # a temporary file written beside the one asked for: named by the one asked for
        beside = [
            (flag, path)
            for full, (path, flag) in given.items()
            if os.path.dirname(target) == os.path.dirname(full)
        ]
        found = next(iter(inside + beside), None)
        if found is not None:
            where = f"{found[0]} {found[1]!r}"
    reason = _lower_first(str(exc.strerror))
    return f"{where}: {reason}. {_OS_FIXES.get(exc.errno or 0, '')}".rstrip()


def _tuple_outputs(text: str) -> str:
    got = re.search(r"Got (.*?) instead", text)
    what = got.group(1) if got else "something else"
    return (
        f"--model must return a (batch, outputs) tensor; it returns {what}. Choose what to "
        "explain with --head (e.g. --head counts, --head profile:chrombpnet or --head "
        "tracks:track=0), or pass a pkg.module:factory whose model selects it."
    )


@contextmanager
def one_line_warnings(prog: str) -> Iterator[None]:
    """Warnings printed as ``prog: warning: message`` on one line of stderr."""

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        print(f"{prog}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved
