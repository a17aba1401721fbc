"""The command line speaks in flags: errors and warnings of the library, reworded into the
options a user typed, on one line each."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
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
    "method": "--integration",
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
    (re.compile(r"\bmethod='(\w+)'"), r"--integration \1"),
]
_TEMPLATE = re.compile(r"^The '([\w-]+)' parameter of ([\w. ]+?) must be ")


def cli_message(exc: BaseException, context: dict[str, str] | None = None) -> str:
    """``exc``'s message on one line, in flag vocabulary. ``context`` maps parameter names to
    the flag that gave the value in this command (e.g. ``path`` -> ``--genome``)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    flags = dict(FLAGS, **(context or {}))
    match = _TEMPLATE.match(text)
    if match is not None:
        param = match.group(1)
        if param == "output_fn":
            return _tuple_outputs(text)
        flag = param if param.startswith("-") else flags.get(param, repr(param))
        text = f"{flag} must be " + text[match.end() :]
    for pattern, replacement in _IDIOMS:
        text = pattern.sub(replacement, text)
    return text


def _tuple_outputs(text: str) -> str:
    got = re.search(r"Got (.*?) instead", text)
    what = got.group(1) if got else "something else"
    return (
        f"--model must return a (batch, outputs) tensor; it returns {what}. Pass a "
        "pkg.module:factory whose model selects the outputs to explain."
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
