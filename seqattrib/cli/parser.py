"""The command line's options: every one with its help text and default, values checked as they
are parsed, errors on one line."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from .._errors import warn_renamed
from .messages import one_line_warnings

DESCRIPTION = (
    "Explain DNA sequence models: attribution tracks, exports and plots, and the training "
    "sequences behind predictions (data attribution)."
)
EPILOG = """examples:
  seqattrib explain --model demo --fasta seqs.fa --out tracks.h5
  seqattrib explain --model model.pt2 --genome hg38.fa --regions peaks.narrowPeak \\
      --length 2114 --method eig --target 0,2 --out tracks.h5
  seqattrib ism --model demo --fasta seqs.fa --out ism.h5
  seqattrib variants --model model.pt2 --genome hg38.fa --vcf calls.vcf.gz \\
      --length 2114 --out effects.tsv
  seqattrib export modisco tracks.h5 --out modisco/
  seqattrib export bigwig tracks.h5 --out tracks/ --chrom-sizes hg38.chrom.sizes
  seqattrib export chrombpnet tracks.h5 --out sample.counts_scores.h5 --target 0
  seqattrib plot tracks.h5 --row 0 --out logo.png
  seqattrib trak fit --model mylab.models:make_model --checkpoints seed0.pt seed1.pt \\
      --fasta train.fa --labels train_labels.tsv --store train_features.h5
  seqattrib trak top-k --model mylab.models:make_model --checkpoints seed0.pt seed1.pt \\
      --store train_features.h5 --fasta test.fa --labels test_labels.tsv -k 100 --out top.tsv
  seqattrib demo --out demo/"""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and that reads values
    such as ``-1/4`` as values."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        # a value like -1/4 or -5 is a (bad) value, for the type check to name
        self._negative_number_matcher = re.compile(r"^-\d+(/-?\d+)?$|^-\d*\.\d+$")

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {' '.join(message.split())}\n")
        sys.exit(2)


class RenamedFlag(argparse.Action):
    """A flag that still answers to its old names: its first long name is the one to use, the
    others are old spellings that warn once (one line on stderr naming the new one)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        long = [o for o in option_strings if o.startswith("--")]
        self.name, self.old = long[0], tuple(long[1:])

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        seen = f"_{self.dest}_given_as"
        before = getattr(namespace, seen, None)
        old = sorted(o for o in (before, option_string) if o in self.old)
        if before is not None and before != option_string and old:
            parser.error(
                f"{self.name} given twice, as {before} and {option_string} "
                f"({' and '.join(old)}: its old name); pass {self.name} once"
            )
        setattr(namespace, seen, option_string)
        if option_string in self.old:
            with one_line_warnings(parser.prog):
                warn_renamed(parser.prog, option_string, self.name)
        setattr(namespace, self.dest, values)


def _typed(name: str, expected: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    parse.__name__ = name
    return parse


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError
    return value


def _batch_size(text: str) -> Any:
    return "auto" if text == "auto" else _positive(text)


def _targets(text: str) -> Any:
    if text == "all":
        return None
    values = [int(v) for v in text.split(",")]
    if any(v < 0 for v in values):
        raise ValueError
    return values[0] if "," not in text else values


def _shard(text: str) -> tuple[int, int]:
    index, count = (int(v) for v in text.split("/"))
    if not 0 <= index < count:
        raise ValueError
    return index, count


def _window(text: str) -> tuple[int, int]:
    start, end = (int(v) for v in text.split(":"))
    return start, end


POSITIVE = _typed("positive", "a positive integer", _positive)
POSITIVE_FLOAT = _typed("positive_float", "a positive number", _positive_float)
BATCH_SIZE = _typed("batch_size", "'auto' or a positive integer (device rows)", _batch_size)
TARGETS = _typed("targets", "an output index, a comma list such as 0,2, or 'all'", _targets)
SHARD = _typed("shard", "i/n with 0 <= i < n, such as 0/4", _shard)
WINDOW = _typed("window", "start:end (0-based, end excluded), such as 900:1100", _window)


def HEAD(text: str) -> Any:
    """A named head (``seqattrib.heads.from_spec``); its errors in the words of ``--head``."""
    from ..heads import from_spec
    from .messages import cli_message

    try:
        return from_spec(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(cli_message(exc).removeprefix("--head ")) from None


# --------------------------------------------------------------------------- option groups
def add_model_and_sequences(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="the model: a torch.export .pt2 file, a TorchScript file, a .keras/.h5 file, a "
        "SavedModel folder, pkg.module:factory, or 'demo' / 'demo-keras' (the packaged demo)",
    )
    p.add_argument(
        "--weights",
        help="weights loaded into a pkg.module:factory model or the demo (replacing its trained "
        "weights): a torch state dict or a Keras weights file; a model file holds its own and "
        "refuses them",
    )
    p.add_argument("--fasta", help="a FASTA file of sequences of one length")
    p.add_argument("--genome", help="a genome FASTA (plain or bgzip), read window by window")
    p.add_argument(
        "--regions",
        help="BED or narrowPeak regions of --genome; windows of --length are centred on each "
        "summit (narrowPeak) or midpoint (BED)",
    )
    p.add_argument("--length", type=POSITIVE, help="window length in bases, with --regions")
    p.add_argument(
        "--layout",
        choices=["NLC", "NCL"],
        help="layout of the stored tracks, (N, L, 4) or (N, 4, L); the model is fed the layout "
        "it takes either way (default: NCL for torch models, NLC for Keras and TensorFlow)",
    )


def add_head(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--head",
        type=HEAD,
        help="what to explain of a model with several outputs: profile[:chrombpnet|bpnet-lite] "
        "or counts (BPNet/ChromBPNet), logsumexp-counts:A+B, or tracks:track=T[+T...],"
        "bins=START:STOP,reduce=sum|mean,transform=log1p|log,minus=T,output=KEY,"
        "strand_pair=P+P... (Enformer/Borzoi bins x tracks); --target picks among its columns "
        "(default: the model's outputs as they are)",
    )


def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        type=TARGETS,
        default=0,
        help="output index, a comma list (0,2: one file row holds both) or 'all' (default: 0)",
    )
    add_head(p)
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE,
        default="auto",
        help="device rows per batch, or 'auto' to probe the fastest (default: %(default)s)",
    )
    p.add_argument(
        "--max-cpu-sequences",
        type=POSITIVE,
        default=1024,
        help="finished sequences held on the host before they are written (default: %(default)s)",
    )
    p.add_argument(
        "--device", help="cpu, cuda, cuda:1 or /GPU:0 (default: where the model is loaded)"
    )
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="the HDF5 tracks file to write; a rerun with the same settings resumes it",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out instead of resuming it")
    p.add_argument(
        "--args",
        nargs="+",
        metavar="FILE",
        help="the model's other inputs, passed after the sequences: .npy files, or one .npz "
        "(members in order); an array with one entry per sequence goes with its sequence "
        "(default: none)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--shard",
        type=SHARD,
        help="i/n: run the i-th of n contiguous blocks of the sequences into "
        "OUT.shard-i-of-n.h5 (default: from SLURM_ARRAY_TASK_ID/COUNT or RANK/WORLD_SIZE)",
    )


def add_out(p: argparse.ArgumentParser, old: str | None, help: str, **options: Any) -> None:
    """``-o/--out``, what the command writes; ``old`` is its earlier spelling, still accepted
    with a warning (None: none)."""
    names = ("-o", "--out") if old is None else ("-o", "--out", old)
    p.add_argument(*names, action=RenamedFlag, help=help, **options)
