"""``seqattrib trak`` and ``seqattrib tracin``: the projected gradients of the training
sequences into a features store (``fit``, shardable), then the training sequences behind each
test prediction into a table (``top-k``).

Labels come from a TSV file with a header row: an ``id`` column, matched against the FASTA
record names (``--fasta``) or the regions (``--regions``: the windows' ``chrom:start-end``, the
regions file's own ``chrom:start-end`` or its name column), and one or more label columns.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from ..loader import load_model, model_framework
from ..shards import resolve_shard, shard_path
from .messages import reading
from .parser import BATCH_SIZE, POSITIVE, SHARD, TARGETS, Parser, _typed, add_out
from .sequences import load_sequences

#: The loss of TRAK and TracIn when --loss (and TRAK's --task) is not given.
DEFAULT_LOSS = "cross_entropy"
#: The keywords of TRAK and TracIn that the flags of fit set (when given: the methods' own
#: defaults are the flags' defaults).
SETTINGS = (
    "task",
    "loss",
    "target",
    "proj_dim",
    "projection",
    "lambda_reg",
    "learning_rates",
    "parameters",
    "random_state",
    "batch_size",
    "device",
)
#: The header of the table ``top-k`` writes.
TOP_K_COLUMNS = ("test_id", "rank", "train_index", "train_id", "score")
#: What the table says for a training sequence whose store holds no ids.
NO_ID = "."


# --------------------------------------------------------------------------- flag types
def _lambda(text: str) -> Any:
    if text == "auto":
        return "auto"
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError
    return value


def _parameters(text: str) -> Any:
    if text == "last":
        return "last"
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError
    return names


def _rates(text: str) -> list[float]:
    values = [float(v) for v in text.split(",")]
    if not all(0 < v < float("inf") for v in values):
        raise ValueError
    return values


def _columns(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError
    return names


LAMBDA = _typed("lambda_reg", "'auto' or a number >= 0", _lambda)
PARAMETERS = _typed("parameters", "'last' or a comma list of parameter names", _parameters)
RATES = _typed("rates", "a positive number, or a comma list of them (one per checkpoint)", _rates)
COLUMNS = _typed("columns", "a comma list of column names", _columns)


# --------------------------------------------------------------------------- parsers
def add_trak(sub: Any) -> Parser:
    """``seqattrib trak fit|top-k``."""
    return _add(
        sub,
        "trak",
        "TRAK data attribution: which training sequences each test prediction depends on",
    )


def add_tracin(sub: Any) -> Parser:
    """``seqattrib tracin fit|top-k``."""
    return _add(
        sub,
        "tracin",
        "TracIn data attribution: the training sequences whose gradients along training "
        "agree most with each test prediction's",
    )


def _add(sub: Any, method: str, help: str) -> Parser:
    p: Parser = sub.add_parser(
        method, help=help, description=help, formatter_class=argparse.HelpFormatter
    )
    actions = p.add_subparsers(
        dest="action",
        required=True,
        metavar="ACTION",
        help="fit (training features into a store), then top-k (a table per test sequence)",
    )
    fit: Parser = actions.add_parser(
        "fit",
        formatter_class=argparse.HelpFormatter,
        help="project the gradients of the training sequences into a features store",
        description="Project the gradients of the training sequences, checkpoint by "
        "checkpoint, into an HDF5 features store, written block by block: a rerun with the "
        "same settings resumes it, --shard i/n writes one shard of it (join them with "
        "seqattrib merge).",
    )
    _add_inputs(fit, labels_required=True)
    _add_settings(fit, method)
    top: Parser = actions.add_parser(
        "top-k",
        formatter_class=argparse.HelpFormatter,
        help="the training sequences with the highest scores for each test sequence",
        description="The k training sequences with the highest (--opponents: lowest) scores "
        "for each test sequence, from the features store of fit, into a TSV table with "
        "the columns " + ", ".join(TOP_K_COLUMNS) + " (rank 1 first).",
    )
    _add_inputs(top, labels_required=False)
    top.add_argument(
        "-k",
        type=POSITIVE,
        default=10,
        help="training sequences per test sequence (default: %(default)s)",
    )
    top.add_argument(
        "--opponents",
        action="store_true",
        help="the lowest (most negative) scores instead of the highest",
    )
    top.add_argument(
        "--max-cpu-sequences",
        type=POSITIVE,
        default=1024,
        help="test sequences scored together on the host (default: %(default)s)",
    )
    top.add_argument(
        "--device", help="cpu, cuda, cuda:1 or /GPU:0 (default: where the model is loaded)"
    )
    add_out(top, None, "the TSV table to write (written whole, or not at all)", required=True)
    top.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return p


def _add_inputs(p: argparse.ArgumentParser, *, labels_required: bool) -> None:
    """The model, its checkpoints, the store, the sequences and their labels."""
    which = "training" if labels_required else "test"
    p.add_argument(
        "--model",
        required=True,
        help="the architecture the checkpoints are loaded into: pkg.module:factory, a "
        "TorchScript file, a .keras file, or 'demo' / 'demo-keras'",
    )
    p.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        metavar="FILE",
        help="checkpoint files (torch state dicts or Keras weights files), visited one at a "
        "time; the same ones, in the same order, for fit and top-k",
    )
    p.add_argument(
        "--store",
        required=True,
        help="the features store (HDF5) of the training sequences"
        + ("" if labels_required else ", written by fit (merged, when fit was sharded)"),
    )
    p.add_argument("--fasta", help=f"a FASTA file of the {which} sequences, of one length")
    p.add_argument("--genome", help="a genome FASTA (plain or bgzip), read window by window")
    p.add_argument(
        "--regions",
        help=f"BED or narrowPeak regions of --genome, the {which} sequences: windows of "
        "--length centred on each summit (narrowPeak) or midpoint (BED)",
    )
    p.add_argument("--length", type=POSITIVE, help="window length in bases, with --regions")
    p.add_argument(
        "--layout",
        choices=["NLC", "NCL"],
        help="the layout the model takes, (N, L, 4) or (N, 4, L) (default: NCL for torch "
        "models, NLC for Keras and TensorFlow)",
    )
    p.add_argument(
        "--labels",
        required=labels_required,
        help=f"TSV file of the {which} labels: a header row, an 'id' column (the FASTA record "
        "names, or chrom:start-end of the windows or of the regions file, or its name column) "
        "and label columns; one row per sequence"
        + ("" if labels_required else " (default: none, for TRAK with --loss mse)"),
    )
    p.add_argument(
        "--label-columns",
        type=COLUMNS,
        metavar="NAMES",
        help="comma list of the label columns to use (default: every column but 'id')",
    )


def _add_settings(p: argparse.ArgumentParser, method: str) -> None:
    """The settings of ``fit`` (recorded in the store; top-k reads them from there)."""
    from ..data_attribution.outputs import LOSSES, TASK_LOSSES
    from ..data_attribution.projection import PROJECTION_KINDS

    p.add_argument(
        "--loss",
        choices=list(LOSSES),
        help="the training loss, with labels: cross_entropy (one column of class indices), bce "
        "(0/1 columns, one per output), mse (real values), poisson or multinomial (counts) "
        f"(default: {DEFAULT_LOSS})",
    )
    if method == "trak":
        p.add_argument(
            "--task",
            choices=list(TASK_LOSSES),
            help="earlier spelling of --loss: classification (cross_entropy), binary (bce), "
            "regression (mse) (default: none, see --loss)",
        )
    p.add_argument(
        "--target",
        type=TARGETS,
        help="the model outputs the loss sees: an index, a comma list such as 0,2, or 'all' "
        "(default: all)",
    )
    p.add_argument(
        "--proj-dim",
        type=POSITIVE,
        metavar="D",
        required=method == "tracin",
        help="dimension of the random projection of the gradients"
        + (" (default: 2048)" if method == "trak" else ""),
    )
    p.add_argument(
        "--projection",
        choices=PROJECTION_KINDS,
        help="the random projection matrix (default: auto)",
    )
    if method == "trak":
        p.add_argument(
            "--lambda-reg",
            type=LAMBDA,
            metavar="LAMBDA",
            help="ridge of the kernel: 'auto' (relative to its trace) or a number >= 0 "
            "(default: auto)",
        )
    else:
        p.add_argument(
            "--learning-rates",
            type=RATES,
            metavar="RATES",
            help="the learning rate at each checkpoint, one number or a comma list (default: 1)",
        )
    p.add_argument(
        "--parameters",
        type=PARAMETERS,
        metavar="NAMES",
        help="the parameters whose gradients count: 'last' (the last layer) or a comma list of "
        "names (default: every trainable parameter)",
    )
    p.add_argument(
        "--random-state",
        type=int,
        metavar="SEED",
        help="seed of the projection (default: 0)",
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE,
        help="sequences per device batch, or 'auto' (default: auto)",
    )
    p.add_argument(
        "--device", help="cpu, cuda, cuda:1 or /GPU:0 (default: where the model is loaded)"
    )
    p.add_argument(
        "--shard",
        type=SHARD,
        help="i/n: featurise the i-th of n contiguous blocks of the training sequences into "
        "STORE.shard-i-of-n.h5 (default: from SLURM_ARRAY_TASK_ID/COUNT or RANK/WORLD_SIZE)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace --store instead of resuming it"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


# --------------------------------------------------------------------------- running
def run(args: argparse.Namespace) -> Path:
    """``seqattrib trak|tracin fit|top-k``."""
    return fit(args) if args.action == "fit" else top_k(args)


def _command(args: argparse.Namespace) -> str:
    return f"seqattrib {args.command} {args.action}"


def _estimator_class(method: str) -> Any:
    from .. import TRAK, TracIn

    return TRAK if method == "trak" else TracIn


def _model_and_sequences(args: argparse.Namespace) -> tuple[Any, Any, list[KeyScheme]]:
    """The model, the sequences (lazy windows) and the ways their ids can be spelled."""
    model = load_model(args.model)
    layout: Literal["NLC", "NCL"] = args.layout or (
        "NCL" if model_framework(model) == "torch" else "NLC"
    )
    X, _ = load_sequences(args, layout)
    return model, X, key_schemes(args, X)


def store_path(args: argparse.Namespace) -> str:
    """The store ``fit`` writes: ``--store``, or its shard's file."""
    shard = args.shard if args.shard is not None else resolve_shard(None)
    return args.store if shard is None else shard_path(args.store, *shard)


def fit(args: argparse.Namespace) -> Path:
    """Project the training sequences' gradients into the store (or its shard)."""
    command = _command(args)
    model, X, schemes = _model_and_sequences(args)
    loss = _loss(args.loss, getattr(args, "task", None))
    y = read_labels(args.labels, schemes, loss, command, columns=args.label_columns)
    shard = args.shard if args.shard is not None else resolve_shard(None)
    store = store_path(args)
    if args.overwrite and os.path.isfile(store):
        os.unlink(store)
    given = {key: getattr(args, key, None) for key in SETTINGS}
    settings = {key: value for key, value in given.items() if value is not None}
    estimator = _estimator_class(args.command)(model, list(args.checkpoints), **settings)
    estimator.fit(X, y, store=store, shard=shard, ids=schemes[0].keys, verbose=not args.quiet)
    print(store)
    return Path(store)


def top_k(args: argparse.Namespace) -> Path:
    """The k best-scoring training sequences of each test sequence, into a TSV table."""
    command = _command(args)
    out = Path(args.out)
    _refuse_existing(out, args.overwrite, command)
    model, X, schemes = _model_and_sequences(args)
    settings = _store_settings(args.store)
    loss = _loss(settings.get("loss"), settings.get("task"))
    y = None
    if args.labels is not None:
        y = read_labels(args.labels, schemes, loss, command, columns=args.label_columns)
    elif args.command == "tracin" or loss not in ("mse", "poisson"):
        raise parameter_error(
            command,
            "--labels",
            f"given: the test sequences' labels, which the scores of {args.command} with "
            f"--loss {loss} depend on",
            "none",
            "Pass --labels with the test sequences' labels (or the model's predictions).",
            described=True,
        )
    # TracIn's learning rates are the store's (from_store checks those it is given)
    rates = {"learning_rates": settings["learning_rates"]} if args.command == "tracin" else {}
    with reading("--store", args.store, "path"):
        estimator = _estimator_class(args.command).from_store(
            args.store, model, list(args.checkpoints), device=args.device, **rates
        )
    indices, scores = estimator.top_k(
        X,
        y,
        args.k,
        proponents=not args.opponents,
        max_cpu_sequences=args.max_cpu_sequences,
    )
    write_top_k(
        out, schemes[0].keys, estimator.train_ids_, indices, scores, args.overwrite, command
    )
    print(out)
    return out


def _loss(loss: Any, task: Any) -> str:
    """The loss of ``loss`` and TRAK's earlier ``task`` spelling (a store's, or the flags')."""
    from ..data_attribution.outputs import TASK_LOSSES

    if isinstance(loss, str):
        return loss
    return TASK_LOSSES.get(str(task), DEFAULT_LOSS)


def _store_settings(store: str) -> dict[str, Any]:
    """The settings a features store was written with."""
    from ..io import read_store

    with reading("--store", store, "path"):
        return read_store(store).settings


def _refuse_existing(out: Path, overwrite: bool, command: str) -> None:
    if os.path.lexists(out) and not overwrite:
        raise parameter_error(
            command,
            "--out",
            "a file that does not exist yet",
            os.fspath(out),
            "Pass --overwrite to replace it, or choose another name.",
            error=FileExistsError,
        )


def write_top_k(
    out: Path,
    test_ids: Sequence[str],
    train_ids: Sequence[str] | None,
    indices: np.ndarray,
    scores: np.ndarray,
    overwrite: bool,
    command: str,
) -> None:
    """The table of ``top-k``, one row per (test sequence, rank), written beside ``out`` and
    renamed to it once complete. Scores keep nine significant digits: every float32 reads
    back exactly."""
    temp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        with open(temp, "w") as handle:
            handle.write("\t".join(TOP_K_COLUMNS) + "\n")
            for test_id, row, values in zip(test_ids, indices, scores, strict=True):
                handle.writelines(
                    f"{test_id}\t{rank}\t{index}\t"
                    f"{NO_ID if train_ids is None else train_ids[index]}\t{float(score):.9g}\n"
                    for rank, (index, score) in enumerate(
                        zip(row.tolist(), values, strict=True), start=1
                    )
                )
        _refuse_existing(out, overwrite, command)  # made while the scores were computed
        os.replace(temp, out)
    finally:
        if temp.exists():
            temp.unlink()


def interrupted(args: argparse.Namespace) -> str:
    """What a user interrupting ``seqattrib trak|tracin ...`` has, and how to go on."""
    if args.action == "fit":
        return (
            f"{store_path(args)} keeps the training features written so far; rerun the same "
            "command to resume it (--overwrite starts again)."
        )
    return f"no table was written to {args.out}; rerun the same command."


# --------------------------------------------------------------------------- ids and labels
@dataclass(frozen=True)
class KeyScheme:
    """One spelling of the sequences' ids: ``keys`` of the sequences, row for row, and
    ``dropped``, those of the regions left out (windows off a chromosome end)."""

    what: str
    keys: list[str]
    dropped: frozenset[str] = frozenset()


def key_schemes(args: argparse.Namespace, X: Any) -> list[KeyScheme]:
    """How the labels' ``id`` column may name the sequences, the ids kept in the store first:
    FASTA record names; or the windows' ``chrom:start-end``, the regions file's own
    ``chrom:start-end`` and its name column."""
    from ..io import read_regions

    kept = X.regions
    if args.fasta:
        return [KeyScheme("FASTA record names", [str(c) for c in kept.chrom])]
    with reading("--regions", args.regions, "path"):
        source = read_regions(args.regions)
        windows = read_regions(args.regions, length=args.length)
    dropped = np.setdiff1d(np.arange(len(source)), kept.index)

    def coordinates(regions: Any) -> list[str]:
        return [
            f"{c}:{s}-{e}"
            for c, s, e in zip(
                regions.chrom, regions.start.tolist(), regions.end.tolist(), strict=True
            )
        ]

    schemes = [
        KeyScheme(
            "window coordinates (chrom:start-end, 0-based as in BED)",
            coordinates(kept),
            frozenset(coordinates(windows.take(dropped))),
        ),
        KeyScheme(
            "region coordinates (chrom:start-end as in --regions)",
            coordinates(source.take(kept.index)),
            frozenset(coordinates(source.take(dropped))),
        ),
    ]
    if (source.name != ".").any():
        schemes.append(
            KeyScheme(
                "region names (column 4 of --regions)",
                [str(n) for n in kept.name],
                frozenset(str(n) for n in source.name[dropped]),
            )
        )
    return schemes


def read_labels(
    path: str,
    schemes: Sequence[KeyScheme],
    loss: str,
    command: str,
    *,
    columns: Sequence[str] | None = None,
) -> np.ndarray:
    """The labels of the sequences, row for row, from a TSV file with a header row: an ``id``
    column and label columns (``columns``: those to use).

    Rows are matched by id, with the scheme of ``schemes`` that matches the most ids. Returns
    int64 class indices of shape (n,) for ``loss="cross_entropy"``, else float32 of shape (n,)
    for one label column, (n, n_columns) for several.
    """
    header, ids, values, lines = _read_table(path, command, columns)
    chosen = max(schemes, key=lambda s: len(set(ids) & (set(s.keys) | s.dropped)))
    if not set(ids) & set(chosen.keys):
        raise parameter_error(
            command,
            "--labels",
            "a table whose 'id' column names the sequences ("
            + ", or ".join(s.what for s in schemes)
            + ")",
            f"ids such as {ids[0]!r}; the sequences are named like {chosen.keys[0]!r}",
            described=True,
        )
    row_of: dict[str, int] = {}
    for row, key in enumerate(ids):
        if key in row_of:
            raise parameter_error(
                command,
                "--labels",
                "a table with one row per id",
                f"{key!r} on lines {lines[row_of[key]]} and {lines[row]} of {path!r}",
                "Keep one row per sequence.",
                described=True,
            )
        row_of[key] = row
    missing = [key for key in chosen.keys if key not in row_of]
    if missing:
        raise parameter_error(
            command,
            "--labels",
            f"a table with a row for every sequence (ids: {chosen.what})",
            f"no row for {len(missing)} of {len(chosen.keys)} sequences ({_first(missing)})",
            "Add their labels, or leave those sequences out.",
            described=True,
        )
    known = set(chosen.keys) | chosen.dropped
    extra = [key for key in ids if key not in known]
    if extra:
        raise parameter_error(
            command,
            "--labels",
            f"a table of the given sequences only (ids: {chosen.what})",
            f"{len(extra)} ids that name no sequence ({_first(extra)})",
            "Remove those rows, or check that the ids are spelled as the sequences are.",
            described=True,
        )
    y = values[[row_of[key] for key in chosen.keys]]
    if loss != "cross_entropy":
        return (y[:, 0] if y.shape[1] == 1 else y).astype(np.float32)
    if y.shape[1] != 1:
        raise parameter_error(
            command,
            "--labels",
            "one label column of class indices (0, 1, ...) for --loss cross_entropy",
            f"the columns {', '.join(header)}",
            "Pass --label-columns NAME, or --loss bce for one 0/1 column per output.",
            described=True,
        )
    fractional = np.flatnonzero(y[:, 0] != np.round(y[:, 0]))
    if fractional.size:
        key = chosen.keys[int(fractional[0])]
        raise parameter_error(
            command,
            "--labels",
            "class indices (0, 1, ...) for --loss cross_entropy",
            f"{y[fractional[0], 0]:g} for {key!r} on line {lines[row_of[key]]}",
            "Pass --loss bce or mse for labels that are not classes.",
            described=True,
        )
    return y[:, 0].astype(np.int64)


def _first(keys: Sequence[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:3])
    return f"{shown}, ..." if len(keys) > 3 else shown


def _read_table(
    path: str, command: str, columns: Sequence[str] | None
) -> tuple[list[str], list[str], np.ndarray, list[int]]:
    """(label column names, ids, float64 values of shape (n_rows, n_columns), line numbers)
    of a labels table; tab-separated (comma-separated for a .csv name), a first line (with or
    without a leading '#') naming the columns, then '#' comment lines and blank lines skipped."""
    from ..io.fasta import open_text

    def refuse(expected: str, got: str, fix: str = "") -> Exception:
        return parameter_error(command, "--labels", expected, got, fix, described=True)

    separator = "," if path.lower().endswith((".csv", ".csv.gz")) else "\t"
    header: list[str] | None = None
    ids: list[str] = []
    rows: list[list[float]] = []
    lines: list[int] = []
    picked: list[int] = []
    key = 0
    with reading("--labels", path, "path"), open_text(path) as handle:
        text_lines = handle.read().splitlines()
    for lineno, text in enumerate(text_lines, start=1):
        if not text.strip() or (header is not None and text.startswith("#")):
            continue
        fields = [field.strip() for field in text.split(separator)]
        if header is None:
            fields[0] = fields[0].lstrip("#").strip()
            header = fields
            key, picked = _label_columns(header, columns, path, refuse)
            continue
        if len(fields) != len(header):
            raise refuse(
                f"a table with {len(header)} columns on every line, as its header",
                f"{len(fields)} on line {lineno} of {path!r}",
                "Separate the columns by tabs.",
            )
        ids.append(fields[key])
        rows.append([_number(fields, i, header, lineno, path, refuse) for i in picked])
        lines.append(lineno)
    if header is None or not ids:
        raise refuse("a table with a header row and one row per sequence", f"no rows in {path!r}")
    return [header[i] for i in picked], ids, np.array(rows, dtype=np.float64), lines


def _label_columns(
    header: list[str], columns: Sequence[str] | None, path: str, refuse: Any
) -> tuple[int, list[int]]:
    """Positions of the id column of ``header`` (named 'id' in any case) and of its label
    columns (``columns``, or every other one)."""
    keys = [i for i, name in enumerate(header) if name.lower() == "id"]
    if len(keys) != 1:
        raise refuse(
            "a tab-separated table whose header row names one 'id' column",
            f"the columns {header[:6]} in {path!r}",
            "Separate the columns by tabs, and name the column of sequence names or "
            "chrom:start-end ids 'id'.",
        )
    labels = [name for i, name in enumerate(header) if i != keys[0]]
    if columns is None:
        if not labels:
            raise refuse("a table with label columns besides 'id'", f"only 'id' in {path!r}")
        return keys[0], [i for i in range(len(header)) if i != keys[0]]
    unknown = [name for name in columns if name not in labels]
    if unknown:
        raise parameter_error(
            "seqattrib",
            "--label-columns",
            f"label columns of --labels ({', '.join(labels)})",
            unknown[0],
        )
    return keys[0], [header.index(name) for name in columns]


def _number(
    fields: list[str], i: int, header: list[str], lineno: int, path: str, refuse: Any
) -> float:
    text = fields[i]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise refuse(
            "a table of finite numbers in its label columns",
            f"{text!r} in column {header[i]!r} on line {lineno} of {path!r}",
            "Leave out the sequences without a label, or pass --label-columns.",
        )
    return value
