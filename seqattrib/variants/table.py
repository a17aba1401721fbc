"""The table of variant effects: written as the engine streams, resumable, sharded and merged.

A TSV file (the default) starts with one line ``#seqattrib.variant_effects/1 {settings}``, then
the header, then one line per variant, in the order of the input (multi-allelic records split).
Each block of finished variants is appended and flushed whole; a killed run leaves complete lines
(a cut last line is dropped on resume), and a rerun with the same settings continues after the
last one. A ``.parquet`` output streams into ``OUT.partial.tsv`` the same way and becomes the
Parquet file (settings in its schema metadata) when every variant is in; a ``.vcf``,
``.vcf.gz`` or ``.bcf`` output likewise becomes a VCF (``vcf_output``). One run writes a table
at a time (the lock of ``seqattrib.io.lock``); merging shards only reads them.

A table is resumed, reused or merged only when it was written for the same job: the same
settings, the same model (the fingerprint of its parameters and buffers) and output function
(their identities are kept in the settings' ``description``), and, row by row, the same
variants; a damaged table (a cut header, a line with other fields, bytes that are not text) is
refused with a one-line error naming it and its line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._validation import first_difference
from ..io import lock as _lock
from ..io.tracks import disk_error, write_error
from . import vcf_output
from .catalog import Skipped, VariantStream

FORMAT = "seqattrib.variant_effects/1"
IDENTITY = ("chrom", "pos", "id", "ref", "alt")
#: Of a table's ``description``, what decides its rows (compared on resume, reuse and merge);
#: the backend's name and the model's description are not compared.
COMPARED_DESCRIPTION = ("model_fingerprint", "output_fn")
#: Characters of a chromosome name or an id written percent-encoded in a TSV table (as VCF 4.3
#: encodes them), so that every row stays one line of tab-separated fields.
_ESCAPES = {"%": "%25", "\t": "%09", "\n": "%0A", "\r": "%0D"}
_UNESCAPES = {code: char for char, code in _ESCAPES.items()}
_ESCAPED = re.compile("%(?:25|09|0A|0D)")
_WELL_ESCAPED = re.compile("(?:[^%]|%(?:25|09|0A|0D))*")


def escape(text: str) -> str:
    """A chromosome name or id as a TSV field: ``%``, tab, newline and carriage return
    percent-encoded (``%25``, ``%09``, ``%0A``, ``%0D``); other text as it is."""
    if not any(char in text for char in _ESCAPES):
        return text
    return "".join(_ESCAPES.get(char, char) for char in text)


def unescape(field: str) -> str | None:
    """The text of a field written by :func:`escape` (None: not written so, a ``%`` without one
    of the four codes after it)."""
    if "%" not in field:
        return field
    if _WELL_ESCAPED.fullmatch(field) is None:
        return None
    return _ESCAPED.sub(lambda match: _UNESCAPES[match.group()], field)


def compared_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """What must be equal for two tables to hold rows of one job: the settings without their
    description, with the model's fingerprint and the output function's identity from it."""
    described = settings.get("description")
    out = {key: value for key, value in settings.items() if key != "description"}
    for key in COMPARED_DESCRIPTION:
        out[key] = described.get(key) if isinstance(described, dict) else None
    return out


def columns(targets: Sequence[int], scores: Sequence[str]) -> list[str]:
    """Column names: the identity, then predictions, scores and derived columns (``scores``
    holds both) per target."""
    quantities = ["ref", "alt", *scores]
    return [*IDENTITY] + [f"{q}_{t}" for q in quantities for t in targets]


def companion(path: str | os.PathLike[str], kind: str) -> str:
    """The file beside an effects table: ``kind`` in {"ref", "alt"} (attribution tracks,
    ``.h5``) or ``"skipped"`` (``.tsv``)."""
    p = Path(path)
    suffix = ".tsv" if kind == "skipped" else ".h5"
    stem = p.name[: -len(".vcf.gz")] if p.name.lower().endswith(".vcf.gz") else p.stem
    return str(p.with_name(f"{stem}.{kind}{suffix}"))


def _is_parquet(path: str) -> bool:
    return path.lower().endswith(".parquet")


def _converted(path: str) -> bool:
    """Whether a table is written as text first and converted when finished (Parquet, VCF)."""
    return _is_parquet(path) or vcf_output.is_vcf(path)


def _settings_line(settings: dict[str, Any]) -> str:
    return f"#{FORMAT} " + json.dumps(settings, sort_keys=True, default=str) + "\n"


def _read_settings(path: str) -> dict[str, Any] | None:
    """The settings of an effects table (None: not one)."""
    if vcf_output.is_vcf(path):
        return vcf_output.read_settings(path)
    if _is_parquet(path):
        pa = import_optional("pyarrow")
        pq = import_optional("pyarrow.parquet")
        try:
            meta = pq.read_schema(path).metadata or {}
        except (OSError, ValueError, pa.ArrowException):
            return None
        text = meta.get(b"seqattrib")
    else:
        with open(path, "rb") as handle:
            first = handle.readline(1 << 20)
        prefix = f"#{FORMAT} ".encode()
        text = (
            first[len(prefix) : -1] if first.startswith(prefix) and first.endswith(b"\n") else None
        )
    if text is None:
        return None
    try:
        settings = json.loads(text)
    except ValueError:  # a damaged settings line (bytes that are not UTF-8 or not JSON)
        return None
    return settings if isinstance(settings, dict) else None


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


@dataclass(frozen=True)
class Reading:
    """Who reads a table, for the errors about it: the function, the parameter that named the
    table and the way out."""

    func: str
    param: str
    fix: str

    def damaged(self, path: str, what: str) -> ValueError:
        return cast(
            ValueError,
            parameter_error(
                self.func,
                self.param,
                "a variant effects table as variant_effects writes it",
                f"{path!r}, {what}",
                self.fix,
                described=True,
            ),
        )


def expected_columns(settings: dict[str, Any]) -> list[str] | None:
    """The columns a table's settings name (None: settings that name none); its ``scores``
    are every column after ref and alt (scores, then derived columns: p-values, quantiles)."""
    targets, scores = settings.get("targets"), settings.get("scores")
    if not (isinstance(targets, list) and targets and isinstance(scores, list)):
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in targets):
        return None
    if not all(isinstance(q, str) for q in scores):
        return None
    return columns(targets, scores)


def _fields(raw: bytes, width: int) -> tuple[list[str], list[float]] | None:
    """The fields and numbers of one data line (without its newline), None if it is not a row:
    UTF-8 text of ``width`` tab-separated fields, a 1-based position, chromosome and id as
    :func:`escape` writes them, and numbers after the identity."""
    try:
        fields = raw.decode("utf-8").split("\t")
    except UnicodeDecodeError:
        return None
    if len(fields) != width:
        return None
    pos = fields[1]
    if not (pos.isascii() and pos.isdigit() and int(pos) >= 1):
        return None
    if unescape(fields[0]) is None or unescape(fields[2]) is None:
        return None
    try:
        return fields, [float(v) for v in fields[len(IDENTITY) :]]
    except ValueError:
        return None


def text_rows(
    path: str, names: list[str], reading: Reading
) -> Iterator[tuple[int, list[str], list[float]]]:
    """``(line number, fields, numbers)`` of every complete data line of a TSV table, after
    checking that its header is ``names``; a line that is not a row is an error naming it. A
    cut last line (a killed writer's) is left out."""
    header = ("\t".join(names) + "\n").encode("utf-8")
    width = len(names)
    with open(path, "rb") as handle:
        handle.readline(1 << 20)  # the settings line, read by _read_settings
        if handle.readline(len(header) + 1) != header:
            raise reading.damaged(path, "whose header (line 2) is not the columns it should have")
        for number, raw in enumerate(handle, start=3):
            if not raw.endswith(b"\n"):
                return
            parsed = _fields(raw[:-1], width)
            if parsed is None:
                raise reading.damaged(
                    path,
                    f"whose line {number} is not a row of {width} tab-separated fields (chrom, "
                    "pos, id, ref, alt, then numbers)",
                )
            yield number, *parsed


def _schema(names: list[str]) -> Any:
    """The Arrow schema of a table's columns (without the settings)."""
    pa = import_optional("pyarrow")
    text = ("chrom", "id", "ref", "alt")
    types = [
        pa.int64() if n == "pos" else pa.string() if n in text else pa.float32() for n in names
    ]
    return pa.schema(list(zip(names, types, strict=True)))


def parquet_batches(path: str, names: list[str], reading: Reading) -> Iterator[Any]:
    """The record batches of a Parquet table, after checking its columns and types; pages are
    checked against their checksums, and a file that cannot be read is an error naming it."""
    pa = import_optional("pyarrow")
    pq = import_optional("pyarrow.parquet")
    failures = (OSError, ValueError, pa.ArrowException)

    def unreadable(exc: BaseException) -> ValueError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return reading.damaged(path, f"which cannot be read as Parquet ({first})")

    try:
        handle = pq.ParquetFile(path, page_checksum_verification=True)
        schema = handle.schema_arrow.remove_metadata()
        batches = handle.iter_batches(batch_size=65536)
    except failures as exc:
        raise unreadable(exc) from exc
    if not schema.equals(_schema(names)):
        raise reading.damaged(path, "whose columns are not those it should have")
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except failures as exc:
            raise unreadable(exc) from exc
        if any(column.null_count for column in batch.columns[: len(IDENTITY)]):
            raise reading.damaged(path, "with empty (null) chrom, pos, id, ref or alt entries")
        yield batch


def _append(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the end of the file open as ``fd`` (a short write continues)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _format_rows(identity: list[tuple[str, int, str, str, str]], values: np.ndarray) -> str:
    fmt = "\t".join(["%s"] * 5 + ["%.9g"] * values.shape[1]) + "\n"
    return "".join(
        fmt % (escape(chrom), pos, escape(id_), ref, alt, *row)
        for (chrom, pos, id_, ref, alt), row in zip(identity, values.tolist(), strict=True)
    )


_FIX = "Pass overwrite=True to replace it, or choose another path."
#: Rows of a table compared with the variants at a time when it is resumed.
_CHECK_BLOCK = 8192


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
        self.text = path + ".partial.tsv" if _converted(path) else path
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise parameter_error(
                func, "out", "a path in an existing folder", path, f"Create {directory} first."
            )
        if vcf_output.is_vcf(path):
            import_optional("pysam")
        held = _lock.acquire(path, func)
        if held is None:
            self._reuse_read_only(overwrite)
            return
        self._lock = held
        try:
            self._open(overwrite)
            # the variants the catalog left out, beside the table, written under its lock
            write_skipped(companion(path, "skipped"), stream.catalog.skipped, func)
        except BaseException:
            self._give_up()
            raise

    def _open(self, overwrite: bool) -> None:
        """Under the lock: start the table, or take up the one there to resume it."""
        path = cast(str, self.path)
        if overwrite:
            for p in (path, self.text, *vcf_output.indexes(path)):
                if os.path.exists(p):
                    os.remove(p)
        if os.path.exists(path) and _converted(path):
            self._check_settings(path)
            self._check_finished(path)
            self.n_completed = self.n_variants  # finished: the leftover text goes in close
            return
        if os.path.exists(self.text):
            self._check_settings(self.text)
            self.n_completed = self._check_text()
            _drop_cut_line(self.text)
        else:
            self._create()
        self._size = os.path.getsize(self.text)
        try:
            self._fd = os.open(self.text, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise write_error(
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
            raise write_error(self.func, self.text, "creating the file", exc, 0) from exc

    def _reuse_read_only(self, overwrite: bool) -> None:
        """In a folder this process cannot write: a finished table of the same job is reused."""
        path = cast(str, self.path)
        folder = os.path.dirname(os.path.abspath(path))
        if not overwrite:
            if os.path.exists(path) and _converted(path):
                self._check_settings(path)
                self._check_finished(path)
                self.n_completed = self.n_variants
                return
            if os.path.exists(self.text) and not _converted(path):
                self._check_settings(self.text)
                self.n_completed = self._check_text()
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
        stored = _read_settings(path)
        if stored is None:
            raise parameter_error(
                self.func,
                "out",
                "a new path or a variant effects table to resume",
                f"the existing file {path!r}",
                _FIX,
                described=True,
            )
        was = compared_settings(stored)
        now = compared_settings(json.loads(json.dumps(self.settings, default=str)))
        key = first_difference(was, now)
        if key is None:
            return
        if key == "model_fingerprint":
            got = (
                f"{path!r}, written with another model (parameters fingerprint "
                f"{str(was[key])[:12]}, now {str(now[key])[:12]})"
            )
        else:
            got = f"{path!r}, written with {key}={was.get(key)!r} (now {now.get(key)!r})"
        raise parameter_error(
            self.func,
            "out",
            "a new path, or a table written with the same settings to resume",
            got,
            _FIX,
            described=True,
        )

    def _reading(self) -> Reading:
        return Reading(self.func, "out", _FIX)

    def _check_text(self) -> int:
        """The complete rows of the TSV table to resume, each checked: a row of this job's
        variant at its place, with numbers where they belong."""
        done, block = 0, []
        for _, fields, _ in text_rows(self.text, self.names, self._reading()):
            if done == self.n_variants:
                raise parameter_error(
                    self.func,
                    "out",
                    f"a table of at most {self.n_variants} variants to resume",
                    f"{self.text!r} with more rows",
                    _FIX,
                    described=True,
                )
            block.append(fields[: len(IDENTITY)])
            done += 1
            if len(block) == _CHECK_BLOCK:
                self._check_identity(self.text, done - len(block), block)
                block = []
        self._check_identity(self.text, done - len(block), block)
        return done

    def _finished_identity(self, path: str) -> Iterator[list[list[str]]]:
        """Blocks of the identity fields of a finished Parquet or VCF table, as a TSV table of
        this job writes them."""
        if _is_parquet(path):
            for batch in parquet_batches(path, self.names, self._reading()):
                yield [
                    [escape(r["chrom"]), str(r["pos"]), escape(r["id"]), r["ref"], r["alt"]]
                    for r in batch.select(list(IDENTITY)).to_pylist()
                ]
            return
        from .records import VcfRecords

        # a VCF input's records are written as they are; a table input's chromosome names and
        # ids percent-encoded as VCF fields
        raw = isinstance(self.stream.records, VcfRecords)
        block: list[list[str]] = []
        for fields, _ in vcf_output.vcf_rows(path, self.names, self._reading()):
            chrom, pos, id_, ref, alt = fields if raw else map(vcf_output.unescape, fields)
            block.append([escape(chrom), pos, escape(id_), ref, alt])
            if len(block) == _CHECK_BLOCK:
                yield block
                block = []
        yield block

    def _check_finished(self, path: str) -> None:
        """A finished Parquet or VCF table to reuse: each row names this job's variant at its
        place."""
        done, more = 0, False
        for identity in self._finished_identity(path):
            if done + len(identity) > self.n_variants:
                more = True
                break
            self._check_identity(path, done, identity)
            done += len(identity)
        if not more and done == self.n_variants:
            return
        raise parameter_error(
            self.func,
            "out",
            f"a finished table of {self.n_variants} variants to reuse",
            f"{path!r} with {'more' if more else f'only {done}'} rows",
            _FIX,
            described=True,
        )

    def _check_identity(self, path: str, first: int, rows: list[list[str]]) -> None:
        """Rows ``first ..`` of a table (identity fields as written) name this job's variants."""
        if not rows:
            return
        start = self.offset + first
        variants = self.stream.variants(start, start + len(rows))
        for i, (v, fields) in enumerate(zip(variants, rows, strict=True)):
            if fields != [escape(v.chrom), str(v.pos), escape(v.id), v.ref, v.alt]:
                chrom, pos, id_, ref, alt = fields
                raise parameter_error(
                    self.func,
                    "out",
                    "a table written for the same variants to resume",
                    f"{path!r}, whose row {first + i} is {chrom}:{pos} {ref}>{alt} ({id_}) where "
                    f"the variants have {escape(v.chrom)}:{v.pos} {v.ref}>{v.alt} "
                    f"({escape(v.id)})",
                    _FIX,
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
            raise write_error(self.func, self.text, action, exc, start) from exc
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
        """Close the file and release its lock; a Parquet or VCF output is made once every row
        is in."""
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as exc:
                    raise write_error(
                        self.func, self.text, "closing the file", exc, self.n_completed
                    ) from exc
            if self._lock is not None and self.n_completed == self.n_variants:
                self._finish()
        finally:
            self._release()

    def _finish(self) -> None:
        """Under the lock, all rows in: the text table becomes the Parquet or VCF file."""
        path = self.path
        if path is None or not _converted(path) or not os.path.exists(self.text):
            return
        vcf = vcf_output.is_vcf(path)
        try:
            if vcf and os.path.exists(path):  # a run killed before removing the text made it
                if not any(os.path.exists(p) for p in vcf_output.indexes(path)):
                    vcf_output.make_index(path, self.func)
            elif vcf:
                rows = text_rows(self.text, self.names, self._reading())
                vcf_output.to_vcf(
                    (fields[len(IDENTITY) :] for _, fields, _ in rows),
                    path,
                    self.settings,
                    self.stream,
                    self.offset,
                    self.n_variants,
                    self.names[len(IDENTITY) :],
                    self.func,
                )
            elif not os.path.exists(path):
                to_parquet(self.text, path, self.settings)
        except OSError as exc:
            if os.path.exists(path + ".new"):
                os.remove(path + ".new")
            kind = "a VCF" if vcf else "Parquet"
            raise write_error(
                self.func, self.text, f"converting it to {kind}", exc, self.n_completed
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
    """Convert a TSV table to Parquet in bounded memory (settings in the schema metadata, a
    checksum on every page); chromosome names and ids are stored as they are (not escaped)."""
    pa = import_optional("pyarrow")
    pc = import_optional("pyarrow.compute")
    csv = import_optional("pyarrow.csv")
    pq = import_optional("pyarrow.parquet")
    names = cast(list[str], expected_columns(settings))
    types = _schema(names)
    reader = csv.open_csv(
        text,
        read_options=csv.ReadOptions(skip_rows=2, column_names=names, block_size=1 << 24),
        parse_options=csv.ParseOptions(delimiter="\t", quote_char=False),
        convert_options=csv.ConvertOptions(
            column_types=dict(zip(types.names, types.types, strict=True)),
            null_values=[],  # "nan" is a number (a log ratio of outputs that are not positive)
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    schema = types.with_metadata({"seqattrib": json.dumps(settings, sort_keys=True, default=str)})
    partial = path + ".new"
    with pq.ParquetWriter(partial, schema, write_page_checksum=True) as writer:
        for batch in reader:
            arrays = batch.columns
            for i in (names.index("chrom"), names.index("id")):
                # every "%" is one of the four codes (``escape``): decode "%25" last
                for code in ("%09", "%0A", "%0D", "%25"):
                    arrays[i] = pc.replace_substring(arrays[i], code, _UNESCAPES[code])
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
    os.replace(partial, path)


def write_skipped(path: str, skipped: Skipped, func: str) -> None:
    """The skipped variants, one per line with the reason (``chrom pos id ref alt reason
    detail``; text fields written as :func:`escape` writes them)."""
    partial = path + ".new"
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write("\t".join(Skipped.COLUMNS) + "\n")
            handle.writelines(
                "\t".join(escape(v) if isinstance(v, str) else str(v) for v in row) + "\n"
                for row in skipped.rows
            )
        os.replace(partial, path)
    except OSError as exc:
        if os.path.exists(partial):
            os.remove(partial)
        fix = "Free space (or fix the disk) and rerun the same command: it resumes the table."
        raise disk_error(func, path, "writing the list of skipped variants", exc, fix) from exc


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
    """Read a variant effects table (TSV, Parquet or VCF) written by ``variant_effects``.

    In a TSV table, a chromosome name or id that holds ``%``, a tab, a newline or a carriage
    return is written percent-encoded (``%25``, ``%09``, ``%0A``, ``%0D``, as VCF 4.3 encodes
    them), so that every row is one line of tab-separated fields for pandas or awk; this
    function decodes them, and a Parquet table stores them as they are. A table still being
    written gives its complete rows. A damaged table (a header or a line that is not what
    ``variant_effects`` writes, a Parquet file that fails its checksums) is an error naming
    the file and the line.

    A VCF table (``.vcf``, ``.vcf.gz``, ``.bcf``) gives one row per ALT allele with values (the
    INFO keys ``SA_<column>``), in the file's order; percent codes of its chromosome names and
    ids (``%3B``, ``%20``, ...) are decoded.

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
        raise parameter_error(
            func,
            "path",
            "a variant effects table (its first line names the format and settings)",
            path,
            "Pass a table that variant_effects or merge_effects wrote; rewrite a damaged one "
            "(rerun its command with overwrite=True).",
        )
    reading = Reading(
        func, "path", "Write it again: rerun the command that wrote it with overwrite=True."
    )
    names = expected_columns(settings)
    if names is None:
        raise reading.damaged(path, "whose settings name no targets and scores")
    identity: list[list[Any]] = [[] for _ in IDENTITY]
    if vcf_output.is_vcf(path):
        rows: list[list[float]] = []
        for fields, parsed in vcf_output.vcf_rows(path, names, reading):
            for i, value in enumerate(fields):
                identity[i].append(value)
            rows.append(parsed)
        for i in (IDENTITY.index("chrom"), IDENTITY.index("id")):
            identity[i] = [vcf_output.unescape(v) for v in identity[i]]
        values = np.array(rows, dtype=np.float64).reshape(len(rows), len(names) - len(IDENTITY))
    elif _is_parquet(path):
        numbers: list[np.ndarray] = []
        for batch in parquet_batches(path, names, reading):
            for i, column in enumerate(batch.columns[: len(IDENTITY)]):
                identity[i] += column.to_pylist()
            floats = batch.columns[len(IDENTITY) :]  # nulls (NaN of older versions) read as NaN
            numbers.append(np.stack([c.to_numpy(zero_copy_only=False) for c in floats], axis=1))
        values = np.concatenate(numbers) if numbers else np.zeros((0, len(names) - 5))
    else:
        rows = []
        for _, fields, parsed in text_rows(path, names, reading):
            for i, value in enumerate(fields[: len(IDENTITY)]):
                identity[i].append(value)
            rows.append(parsed)
        for i in (IDENTITY.index("chrom"), IDENTITY.index("id")):
            identity[i] = [unescape(v) for v in identity[i]]
        values = np.array(rows, dtype=np.float64).reshape(len(rows), len(names) - len(IDENTITY))
    cols = {
        name: np.array(identity[i], dtype=np.int64 if name == "pos" else str)
        for i, name in enumerate(IDENTITY)
    }
    for j, name in enumerate(names[len(IDENTITY) :]):
        cols[name] = values[:, j].astype(np.float32)
    return EffectsTable(cols, settings)


# --------------------------------------------------------------------------- merging
