"""The table of variant effects: written as the engine streams, resumable, sharded and merged.

A TSV file (the default) starts with one line ``#seqattrib.variant_effects/1 {settings}``, then
the header, then one line per variant, in the order of the input (multi-allelic records split).
Each block of finished variants is appended and flushed whole; a killed run leaves complete lines
(a cut last line is dropped on resume), and a rerun with the same settings continues after the
last one. A ``.parquet`` output streams into ``OUT.partial.tsv`` the same way and becomes the
Parquet file (settings in its schema metadata) when every variant is in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error, refuse_existing
from .._optional import import_optional
from ..shards import check_complete, check_coverage, check_same_settings
from .catalog import Skipped, VariantStream

FORMAT = "seqattrib.variant_effects/1"
IDENTITY = ("chrom", "pos", "id", "ref", "alt")
#: Settings that differ between the shards of one job.
_PER_SHARD = ("shard",)


def columns(targets: Sequence[int], scores: Sequence[str]) -> list[str]:
    """Column names: the identity, then predictions and scores per target."""
    quantities = ["ref", "alt", *scores]
    return [*IDENTITY] + [f"{q}_{t}" for q in quantities for t in targets]


def companion(path: str | os.PathLike[str], kind: str) -> str:
    """The file beside an effects table: ``kind`` in {"ref", "alt"} (attribution tracks,
    ``.h5``) or ``"skipped"`` (``.tsv``)."""
    p = Path(path)
    suffix = ".tsv" if kind == "skipped" else ".h5"
    return str(p.with_name(f"{p.stem}.{kind}{suffix}"))


def _is_parquet(path: str) -> bool:
    return path.lower().endswith(".parquet")


def _settings_line(settings: dict[str, Any]) -> str:
    return f"#{FORMAT} " + json.dumps(settings, sort_keys=True, default=str) + "\n"


def _read_settings(path: str) -> dict[str, Any] | None:
    """The settings of an effects table (None: not one)."""
    if _is_parquet(path) and not path.endswith(".partial.tsv"):
        pq = import_optional("pyarrow.parquet")
        try:
            meta = pq.read_schema(path).metadata or {}
        except (OSError, ValueError):
            return None
        text = meta.get(b"seqattrib")
        return None if text is None else dict(json.loads(text))
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8", "replace")
    if not first.startswith(f"#{FORMAT} ") or not first.endswith("\n"):
        return None
    return dict(json.loads(first[len(FORMAT) + 2 :]))


def _complete_lines(path: str) -> int:
    """Data lines of a TSV table, after dropping a cut last line (a killed writer's)."""
    with open(path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        end = size
        while end > 0:  # find the last newline
            step = min(end, 1 << 16)
            handle.seek(end - step)
            chunk = handle.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                end = end - step + cut + 1
                break
            end -= step
        if end < size:
            handle.truncate(end)
        handle.seek(0)
        count = 0
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
    return count - 2  # the settings line and the header


def _last_line(path: str) -> list[str]:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - (1 << 16)))
        tail = handle.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return tail.decode("utf-8").split("\t")


def _format_rows(identity: list[tuple[str, int, str, str, str]], values: np.ndarray) -> str:
    fmt = "\t".join(["%s"] * 5 + ["%.9g"] * values.shape[1]) + "\n"
    return "".join(
        fmt % (*ident, *row) for ident, row in zip(identity, values.tolist(), strict=True)
    )


class EffectsWriter:
    """The engine's sink: finished variants as table lines (a file, or memory with ``path``
    None)."""

    def __init__(
        self,
        path: str | None,
        *,
        stream: VariantStream,
        offset: int,
        n_variants: int,
        targets: list[int],
        scores: Sequence[str],
        squeeze: bool,
        settings: dict[str, Any],
        overwrite: bool,
        func: str,
    ) -> None:
        self.path, self.stream, self.offset = path, stream, offset
        self.targets, self.scores, self.squeeze = targets, tuple(scores), squeeze
        self.names = columns(targets, self.scores)
        self.n_variants, self.func = n_variants, func
        self.n_completed = 0
        self._handle: Any = None
        self._memory: dict[str, list[Any]] = {name: [] for name in ("identity", "values")}
        self.settings = settings
        if path is None:
            return
        self.text = path + ".partial.tsv" if _is_parquet(path) else path
        if overwrite:
            for p in (path, self.text):
                if os.path.exists(p):
                    os.remove(p)
        if os.path.exists(path) and _is_parquet(path):
            self._check_settings(path)
            self.n_completed = n_variants
            return
        if os.path.exists(self.text):
            self._check_settings(self.text)
            self.n_completed = _complete_lines(self.text)
            self._check_rows()
        else:
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                raise parameter_error(
                    func, "out", "a path in an existing folder", path, f"Create {directory} first."
                )
            partial = self.text + ".new"
            with open(partial, "w") as handle:
                handle.write(_settings_line(settings) + "\t".join(self.names) + "\n")
            os.replace(partial, self.text)
        self._handle = open(self.text, "a")  # noqa: SIM115 - closed in close()

    def _check_settings(self, path: str) -> None:
        fix = "Pass overwrite=True to replace it, or choose another path."
        stored = _read_settings(path)
        if stored is None:
            raise parameter_error(
                self.func,
                "out",
                "a new path or a variant effects table to resume",
                f"the existing file {path!r}",
                fix,
                described=True,
            )
        current = json.loads(json.dumps(self.settings, sort_keys=True, default=str))
        for key in sorted(set(stored) | set(current)):
            if key != "description" and stored.get(key) != current.get(key):
                raise parameter_error(
                    self.func,
                    "out",
                    "a new path, or a table written with the same settings to resume",
                    f"{path!r}, written with {key}={stored.get(key)!r} (now {current.get(key)!r})",
                    fix,
                    described=True,
                )

    def _check_rows(self) -> None:
        """The last written line names the variant of its row (same input, same order)."""
        if self.n_completed > self.n_variants or self.n_completed < 0:
            raise parameter_error(
                self.func,
                "out",
                f"a table of at most {self.n_variants} variants to resume",
                f"{self.text!r} with {self.n_completed} lines",
                "Pass overwrite=True to replace it.",
                described=True,
            )
        if self.n_completed == 0:
            return
        row = self.offset + self.n_completed - 1
        v = self.stream.variants(row, row + 1)[0]
        if _last_line(self.text)[:5] != [v.chrom, str(v.pos), v.id, v.ref, v.alt]:
            raise parameter_error(
                self.func,
                "out",
                "a table written for the same variants to resume",
                f"{self.text!r}, whose row {self.n_completed - 1} is not {v.label}",
                "Pass overwrite=True to replace it.",
                described=True,
            )

    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        if start != self.n_completed:
            raise RuntimeError(f"effects table expected rows from {self.n_completed}, got {start}")
        n = len(block["ref"])
        variants = self.stream.variants(self.offset + start, self.offset + start + n)
        identity = [(v.chrom, v.pos, v.id, v.ref, v.alt) for v in variants]
        values = np.concatenate([block[q] for q in ("ref", "alt", *self.scores)], axis=1)
        if self._handle is None:
            self._memory["identity"] += identity
            self._memory["values"].append(values)
        else:
            self._handle.write(_format_rows(identity, values))
            self._handle.flush()
        self.n_completed = start + n

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def result(self) -> Any:
        self.close()
        if self.path is None:
            width = len(self.names) - len(IDENTITY)
            values = (
                np.concatenate(self._memory["values"])
                if self._memory["values"]
                else np.zeros((0, width), np.float32)
            )
            return self._memory["identity"], values, self.targets
        if _is_parquet(self.path) and os.path.exists(self.text):
            to_parquet(self.text, self.path, self.settings)
            os.remove(self.text)
        return self.path


def to_parquet(text: str, path: str, settings: dict[str, Any]) -> None:
    """Convert a TSV table to Parquet in bounded memory (settings in the schema metadata)."""
    pa = import_optional("pyarrow")
    csv = import_optional("pyarrow.csv")
    pq = import_optional("pyarrow.parquet")
    with open(text) as handle:
        handle.readline()
        names = handle.readline().rstrip("\n").split("\t")
    types = {name: pa.float32() for name in names[5:]}
    types.update(
        chrom=pa.string(), pos=pa.int64(), id=pa.string(), ref=pa.string(), alt=pa.string()
    )
    reader = csv.open_csv(
        text,
        read_options=csv.ReadOptions(skip_rows=1, block_size=1 << 24),
        parse_options=csv.ParseOptions(delimiter="\t", quote_char=False),
        convert_options=csv.ConvertOptions(
            column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
        ),
    )
    schema = reader.schema.with_metadata(
        {"seqattrib": json.dumps(settings, sort_keys=True, default=str)}
    )
    partial = path + ".new"
    with pq.ParquetWriter(partial, schema) as writer:
        for batch in reader:
            writer.write_table(pa.Table.from_batches([batch], schema=schema))
    os.replace(partial, path)


def write_skipped(path: str, skipped: Skipped) -> None:
    """The skipped variants, one per line with the reason (``chrom pos id ref alt reason
    detail``)."""
    partial = path + ".new"
    with open(partial, "w") as handle:
        handle.write("\t".join(Skipped.COLUMNS) + "\n")
        handle.writelines("\t".join(str(v) for v in row) + "\n" for row in skipped.rows)
    os.replace(partial, path)


# --------------------------------------------------------------------------- reading
@dataclass
class EffectsTable:
    """An effects table read back: its columns and settings."""

    columns: dict[str, np.ndarray]
    settings: dict[str, Any] = field(default_factory=dict)

    def to_frame(self) -> Any:
        """The table as a pandas DataFrame."""
        pd = import_optional("pandas")
        return pd.DataFrame(self.columns)


def read_effects(path: str | os.PathLike[str]) -> EffectsTable:
    """Read a variant effects table (TSV or Parquet) written by ``variant_effects``.

    Parameters
    ----------
    path : str or path

    Returns
    -------
    EffectsTable
        ``columns``: ``chrom``, ``pos``, ``id``, ``ref``, ``alt`` (arrays of n_variants) and one
        float32 array per prediction and score column (``ref_0``, ``alt_0``, ``delta_0``, ...);
        ``settings``: what the run was asked for.
    """
    path = os.fspath(path)
    func = "read_effects"
    if not os.path.isfile(path):
        raise parameter_error(
            func, "path", "an existing effects table", path, error=FileNotFoundError
        )
    settings = _read_settings(path)
    if settings is None:
        raise parameter_error(func, "path", "a variant effects table", path)
    if _is_parquet(path):
        pq = import_optional("pyarrow.parquet")
        table = pq.read_table(path)
        cols = {name: table.column(name).to_numpy() for name in table.column_names}
        return EffectsTable({k: _typed(k, v) for k, v in cols.items()}, settings)
    with open(path) as handle:
        handle.readline()
        names = handle.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in handle]
    cols = {name: np.array([r[i] for r in rows], dtype=object) for i, name in enumerate(names)}
    return EffectsTable({k: _typed(k, v) for k, v in cols.items()}, settings)


def _typed(name: str, values: np.ndarray) -> np.ndarray:
    if name == "pos":
        return values.astype(np.int64)
    if name in IDENTITY:
        return values.astype(str)
    return values.astype(np.float32)


# --------------------------------------------------------------------------- merging
def merge_effects(
    shards: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> Path:
    """Join the shard tables of one job (``variant_effects(..., shard=(i, n))``) into one table,
    and their attribution tracks and skipped lists beside it.

    Refuses shards that are incomplete, written with other settings, or that do not cover every
    variant exactly once.

    Parameters
    ----------
    shards : sequence of paths
        Every shard table of the job, in any order (TSV or Parquet).
    out : path
        The merged table (TSV, or Parquet by its suffix), as if one process had written it.
    overwrite : bool
        Replace an existing ``out``.

    Returns
    -------
    Path
    """
    func = "merge_effects"
    out = os.fspath(out)
    refuse_existing(func, "out", out, overwrite)
    if not shards:
        raise parameter_error(func, "shards", "at least one shard table", [])
    infos = []
    for shard in shards:
        path = os.fspath(shard)
        if not os.path.isfile(path):
            raise parameter_error(
                func, "shards", "existing shard tables", path, error=FileNotFoundError
            )
        settings = _read_settings(path)
        if settings is None or "shard" not in settings:
            raise parameter_error(
                func, "shards", "tables written with --shard i/n", path, described=True
            )
        span = settings["shard"]
        check_complete(func, path, _rows(path), span, "variant")
        infos.append((span, settings, path))
    infos.sort(key=lambda info: info[0]["start"])
    common = {k: v for k, v in infos[0][1].items() if k not in _PER_SHARD}

    def compared(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in (*_PER_SHARD, "description")}

    for _, settings, path in infos[1:]:
        check_same_settings(func, (infos[0][2], compared(common)), (path, compared(settings)))
    check_coverage(func, [(path, span) for span, _, path in infos], infos[0][0]["total"], "variant")
    paths = [path for _, _, path in infos]
    text = out + ".partial.tsv" if _is_parquet(out) else out + ".partial"
    with open(text, "w") as target:
        target.write(_settings_line(common))
        for i, path in enumerate(paths):
            _copy_lines(path, target, header=i == 0)
    if _is_parquet(out):
        to_parquet(text, out, common)
        os.remove(text)
    else:
        os.replace(text, out)
    _merge_companions(paths, out, overwrite)
    return Path(out)


def _rows(path: str) -> int:
    if _is_parquet(path):
        pq = import_optional("pyarrow.parquet")
        return int(pq.ParquetFile(path).metadata.num_rows)
    return _complete_lines(path)


def _copy_lines(path: str, target: Any, header: bool) -> None:
    """The header (when asked) and data lines of a shard table, into an open text file."""
    if _is_parquet(path):
        pq = import_optional("pyarrow.parquet")
        reader = pq.ParquetFile(path)
        if header:
            target.write("\t".join(reader.schema_arrow.names) + "\n")
        for batch in reader.iter_batches(batch_size=65536):
            cols = [c.to_pylist() for c in batch.columns]
            for row in zip(*cols, strict=True):
                target.write(
                    "\t".join(f"{v:.9g}" if isinstance(v, float) else str(v) for v in row) + "\n"
                )
        return
    with open(path) as source:
        source.readline()
        names = source.readline()
        if header:
            target.write(names)
        for line in source:
            target.write(line)


def _merge_companions(paths: list[str], out: str, overwrite: bool) -> None:
    """Attribution tracks (merged as tracks) and the skipped list (the same in every shard)."""
    from ..io.merge import merge_tracks

    for kind in ("ref", "alt"):
        tracks = [companion(p, kind) for p in paths]
        if all(os.path.exists(t) for t in tracks):
            merge_tracks(tracks, companion(out, kind), overwrite=overwrite)
    skipped = companion(paths[0], "skipped")
    if os.path.exists(skipped):
        with open(skipped) as source, open(companion(out, "skipped"), "w") as target:
            target.write(source.read())
