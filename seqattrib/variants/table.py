"""The table of variant effects: written as the engine streams, resumable, sharded and merged.

A TSV file (the default) starts with one line ``#seqattrib.variant_effects/1 {settings}``, then
the header, then one line per variant, in the order of the input (multi-allelic records split).
Each block of finished variants is appended and flushed whole; a killed run leaves complete lines
(a cut last line is dropped on resume), and a rerun with the same settings continues after the
last one. A ``.parquet`` output streams into ``OUT.partial.tsv`` the same way and becomes the
Parquet file (settings in its schema metadata) when every variant is in. One run writes a table
at a time (the lock of ``seqattrib.io.lock``); merging shards only reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._validation import first_difference
from ..io import lock as _lock
from ..io.tracks import _write_error
from .catalog import Skipped, VariantStream

FORMAT = "seqattrib.variant_effects/1"
IDENTITY = ("chrom", "pos", "id", "ref", "alt")


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
    """Data lines of a TSV table that end in a newline (a cut last line is not counted).

    Reads only: merging counts the rows of shards it must not change.
    """
    count = 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
    return count - 2  # the settings line and the header


def _drop_cut_line(path: str) -> None:
    """Truncate a cut last line (a killed writer's), so that appended rows start a new line.

    Only the writer that resumes ``path``, holding its lock, calls this.
    """
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        end = size
        while end > 0:  # find the last newline
            step = min(end, 1 << 16)
            handle.seek(end - step)
            cut = handle.read(step).rfind(b"\n")
            if cut >= 0:
                end = end - step + cut + 1
                break
            end -= step
        if end < size:
            handle.truncate(end)


def _last_line(path: str) -> list[str]:
    """The fields of the last complete line (a cut line after it is ignored)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - (1 << 16)))
        tail = handle.read()
    tail = tail[: tail.rfind(b"\n")]
    return tail.rsplit(b"\n", 1)[-1].decode("utf-8").split("\t")


def _append(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the end of the file open as ``fd`` (a short write continues)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _format_rows(identity: list[tuple[str, int, str, str, str]], values: np.ndarray) -> str:
    fmt = "\t".join(["%s"] * 5 + ["%.9g"] * values.shape[1]) + "\n"
    return "".join(
        fmt % (*ident, *row) for ident, row in zip(identity, values.tolist(), strict=True)
    )


class EffectsWriter:
    """The engine's sink: finished variants as table lines (a file, or memory with ``path``
    None).

    A file is locked for writing (``seqattrib.io.lock``) from the moment the writer is made,
    before anything is removed or written, until :meth:`close`: a second run writing the same
    table is refused, naming the first. A write that fails (a full disk) leaves the table with
    its complete rows, releases the lock and raises a one-line ``OSError``; a rerun resumes it.
    """

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
        self._fd: int | None = None
        self._size = 0  # bytes of the table up to its last complete row
        self._lock: _lock.WriteLock | None = None
        self._memory: dict[str, list[Any]] = {name: [] for name in ("identity", "values")}
        self.settings = settings
        if path is None:
            return
        self.text = path + ".partial.tsv" if _is_parquet(path) else path
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise parameter_error(
                func, "out", "a path in an existing folder", path, f"Create {directory} first."
            )
        held = _lock.acquire(path, func)
        if held is None:
            self._reuse_read_only(overwrite)
            return
        self._lock = held
        try:
            self._open(overwrite)
            # the variants the catalog left out, beside the table, written under its lock
            write_skipped(companion(path, "skipped"), stream.catalog.skipped)
        except BaseException:
            self._give_up()
            raise

    def _open(self, overwrite: bool) -> None:
        """Under the lock: start the table, or take up the one there to resume it."""
        path = cast(str, self.path)
        if overwrite:
            for p in (path, self.text):
                if os.path.exists(p):
                    os.remove(p)
        if os.path.exists(path) and _is_parquet(path):
            self._check_settings(path)
            self.n_completed = self.n_variants  # finished: the leftover text goes in close
            return
        if os.path.exists(self.text):
            self._check_settings(self.text)
            self.n_completed = _complete_lines(self.text)
            self._check_rows()
            _drop_cut_line(self.text)
        else:
            self._create()
        self._size = os.path.getsize(self.text)
        try:
            self._fd = os.open(self.text, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _write_error(
                self.func, self.text, "reopening the file", exc, self.n_completed
            ) from exc

    def _create(self) -> None:
        """The settings line and the header, written under a temporary name then renamed."""
        partial = self.text + ".new"
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                handle.write(_settings_line(self.settings) + "\t".join(self.names) + "\n")
            os.replace(partial, self.text)
        except OSError as exc:
            if os.path.exists(partial):
                os.remove(partial)
            raise _write_error(self.func, self.text, "creating the file", exc, 0) from exc

    def _reuse_read_only(self, overwrite: bool) -> None:
        """In a folder this process cannot write: a finished table of the same job is reused."""
        path = cast(str, self.path)
        folder = os.path.dirname(os.path.abspath(path))
        if not overwrite:
            if os.path.exists(path) and _is_parquet(path):
                self._check_settings(path)
                self.n_completed = self.n_variants
                return
            if os.path.exists(self.text) and not _is_parquet(path):
                self._check_settings(self.text)
                self.n_completed = _complete_lines(self.text)
                self._check_rows()
                if self.n_completed == self.n_variants:
                    return
        raise parameter_error(
            self.func,
            "out",
            "a finished table, or a path in a folder this process can write to",
            f"{path!r} in the read-only folder {folder!r}",
            "Choose a writable folder.",
            error=PermissionError,
            described=True,
        )

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
        key = first_difference(stored, current, ignore=("description",))
        if key is not None:
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
        if self.path is None:
            self._memory["identity"] += identity
            self._memory["values"].append(values)
            self.n_completed = start + n
            return
        if self._fd is None:
            raise RuntimeError(f"effects table {self.text!r} is closed")
        data = _format_rows(identity, values).encode("utf-8")
        try:
            _append(self._fd, data)
        except OSError as exc:
            self._give_up()
            action = f"writing rows {start}..{start + n - 1}"
            raise _write_error(self.func, self.text, action, exc, start) from exc
        self._size += len(data)
        self.n_completed = start + n

    def _give_up(self) -> None:
        """After a failure: cut what a failed write left after the complete rows (a rerun would
        drop it too), close the file without writing more, release the lock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            try:
                os.close(fd)
            except OSError:
                pass
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(self) -> None:
        """Close the file and release its lock; a Parquet output is made once every row is in."""
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as exc:
                    raise _write_error(
                        self.func, self.text, "closing the file", exc, self.n_completed
                    ) from exc
            if self._lock is not None and self.n_completed == self.n_variants:
                self._finish_parquet()
        finally:
            self._release()

    def _finish_parquet(self) -> None:
        """Under the lock, all rows in: the text table becomes the Parquet file."""
        path = self.path
        if path is None or not _is_parquet(path) or not os.path.exists(self.text):
            return
        if not os.path.exists(path):  # else a run killed before removing the text made it
            try:
                to_parquet(self.text, path, self.settings)
            except OSError as exc:
                if os.path.exists(path + ".new"):
                    os.remove(path + ".new")
                raise _write_error(
                    self.func, self.text, "converting it to Parquet", exc, self.n_completed
                ) from exc
        os.remove(self.text)

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
