"""Variant effects as a VCF: the input's records with one INFO key per value column.

A ``.vcf``, ``.vcf.gz`` or ``.bcf`` output streams into ``OUT.partial.tsv`` as a Parquet output
does (resumable, locked, checked row by row) and becomes the VCF when every variant is in: each
record that holds a kept variant, in input order, with its own fields kept (a text VCF's lines
byte for byte; a BCF input's records as htslib prints them) and one INFO key ``SA_<column>``
per value column (``SA_ref_0``, ``SA_delta_0``, ...), declared ``Number=A, Type=Float``: one
value per ALT allele, ``.`` for an ALT allele that was skipped, so that ``bcftools norm -m-``
splits them with the record's own per-allele fields. A table input gives minimal records
(CHROM, POS, ID, REF, ALT). The values are the TSV table's text, 9 significant digits (float32
exactly). The settings are the header line ``##seqattrib_settings=<JSON>``. A ``.vcf.gz`` is
bgzip-compressed with a tabix index (``.tbi``), a ``.bcf`` gets a CSI index (``.csi``), when
the records are sorted by position.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import SeqAttribWarning
from .._optional import import_optional

if TYPE_CHECKING:
    from .catalog import VariantStream
    from .table import Reading

SUFFIXES = (".vcf", ".vcf.gz", ".bcf")
SETTINGS_KEY = "seqattrib_settings"
PREFIX = "SA_"
#: What each quantity of a column means, for the INFO lines' descriptions.
_MEANINGS = {
    "ref": "prediction on the reference window",
    "alt": "prediction on the alternative window",
    "delta": "alt - ref",
    "log_ratio": "log(alt) - log(ref)",
    "logfc": "log2 fold change of the counts (alt over ref)",
    "jsd": "Jensen-Shannon distance (base 2) of the reference and alternative profiles",
    "abs_logfc_x_jsd": "|logfc| x jsd",
    "log_sum": "log2(1 + alt) - log2(1 + ref) of the summed bins and tracks (logSED)",
    "l2": "L2 norm of the per-bin differences alt - ref (D2)",
    "log_l2": "L2 norm of the per-bin differences of log2(1 + x) (logD2)",
    "ref_quantile": "quantile of the reference prediction among the predictions on the peaks",
    "alt_quantile": "quantile of the alternative prediction among the predictions on the peaks",
    "active_quantile": "the larger of ref_quantile and alt_quantile (the active allele's)",
}
#: Characters of a table input's chromosome name or id that a VCF field cannot hold, written
#: percent-encoded as VCF 4.3 encodes them.
_ESCAPES = {"%": "%25", ";": "%3B", " ": "%20", "\t": "%09", "\n": "%0A", "\r": "%0D"}
_UNESCAPES = {code: char for char, code in _ESCAPES.items()}
_ESCAPED = re.compile("|".join(_UNESCAPES))


def is_vcf(path: str) -> bool:
    """Whether an effects table is written as a VCF (by its name)."""
    return path.lower().endswith(SUFFIXES)


def escape(text: str) -> str:
    """A table input's chromosome name or id as a VCF field."""
    if not any(char in text for char in _ESCAPES):
        return text
    return "".join(_ESCAPES.get(char, char) for char in text)


def unescape(field: str) -> str:
    """The text of a VCF field, its percent codes (``%3B``, ``%20``, ...) decoded."""
    return _ESCAPED.sub(lambda match: _UNESCAPES[match.group()], field) if "%" in field else field


def info_key(column: str) -> str:
    return PREFIX + column


def describe(column: str) -> str:
    """The description of a value column's INFO key (``delta_0``: alt - ref, target 0)."""
    quantity, _, target = column.rpartition("_")
    if quantity.startswith("pvalue_"):
        meaning = f"empirical p-value of {quantity[len('pvalue_') :]} against the null"
    else:
        meaning = _MEANINGS.get(quantity, quantity)
    return f"seqattrib variant_effects: {meaning}, target {target}"


def _info_lines(columns: Sequence[str]) -> list[str]:
    return [
        f'##INFO=<ID={info_key(c)},Number=A,Type=Float,Description="{describe(c)}">\n'
        for c in columns
    ]


def _settings_line(settings: dict[str, Any]) -> str:
    return f"##{SETTINGS_KEY}=" + json.dumps(settings, sort_keys=True, default=str) + "\n"


def _quiet() -> Any:
    """pysam, with htslib's notes (a missing index, undeclared keys) silenced; returns the old
    verbosity to restore."""
    pysam = import_optional("pysam")
    return pysam, pysam.set_verbosity(0)


def read_settings(path: str) -> dict[str, Any] | None:
    """The settings of a VCF effects table (None: not one)."""
    pysam, quiet = _quiet()
    try:
        with pysam.VariantFile(path, "r") as handle:
            values = [r.value for r in handle.header.records if r.key == SETTINGS_KEY]
    except (OSError, ValueError, NotImplementedError):
        return None
    finally:
        pysam.set_verbosity(quiet)
    if len(values) != 1:
        return None
    try:
        settings = json.loads(values[0])
    except ValueError:
        return None
    return settings if isinstance(settings, dict) else None


def indexes(path: str) -> list[str]:
    """The index files an output of this name may have beside it."""
    return [path + ".tbi", path + ".csi"]


# --------------------------------------------------------------------------- writing
class _Lines:
    """Record lines into a text VCF beside ``path``, then the output in its format: order
    checked as they pass (an index needs records sorted by position within contiguous
    chromosomes)."""

    def __init__(self, path: str, header: str) -> None:
        self.path = path
        self.text = path + ".new.vcf"
        self._handle = open(self.text, "w", encoding="utf-8")
        self._handle.write(header)
        self._last: tuple[str, int] = ("", 0)
        self._done: set[str] = set()
        self.sorted = True

    def write(self, line: str) -> None:
        chrom, pos = line.split("\t", 2)[:2]
        place = (chrom, int(pos))
        if chrom != self._last[0]:
            if chrom in self._done:
                self.sorted = False
            self._done.add(self._last[0])
        elif place[1] < self._last[1]:
            self.sorted = False
        self._last = place
        self._handle.write(line)

    def finish(self, func: str) -> None:
        """The text VCF becomes ``path`` (compressed or BCF by its name), then its index."""
        self._handle.close()
        lower, partial, full = self.path.lower(), self.path + ".new", self.path + ".new.full.vcf"
        pysam, quiet = _quiet()
        try:
            if lower.endswith(".vcf"):
                os.replace(self.text, self.path)
                return
            if lower.endswith(".vcf.gz"):
                pysam.tabix_compress(self.text, partial, force=True)
            else:
                text = self.text if _declares_all(self.text, full) else full
                with pysam.VariantFile(text, "r") as source:
                    with pysam.VariantFile(partial, "wb", header=source.header) as target:
                        for rec in source:
                            target.write(rec)
            os.replace(partial, self.path)
        finally:
            pysam.set_verbosity(quiet)
            for leftover in (self.text, partial, full):
                if os.path.exists(leftover):
                    os.remove(leftover)
        if self.sorted:
            make_index(self.path, func)
        else:
            warnings.warn(
                f"{func}: {self.path} is not indexed: its records are in the input's order, which "
                "is not sorted by position; sort and index it with bcftools sort -W.",
                SeqAttribWarning,
                stacklevel=4,
            )

    def abandon(self) -> None:
        self._handle.close()
        for leftover in (self.text, self.path + ".new"):
            if os.path.exists(leftover):
                os.remove(leftover)


def _declares_all(text: str, full: str) -> bool:
    """Whether the header of the text VCF ``text`` declares every INFO, FORMAT, FILTER and
    contig its records use (a BCF needs them: htslib cannot write a record with another);
    if not, ``full`` is written: the same VCF with htslib's declarations of the others."""
    pysam = import_optional("pysam")
    with pysam.VariantFile(text, "r") as handle:
        before = str(handle.header)
        for _ in handle:
            pass
        after = str(handle.header)
    if after == before:
        return True
    with open(full, "w", encoding="utf-8") as target, open(text, encoding="utf-8") as source:
        target.write(after)
        target.writelines(line for line in source if not line.startswith("#"))
    return False


def make_index(path: str, func: str) -> None:
    """A tabix index of a ``.vcf.gz``, a CSI index of a ``.bcf`` (nothing for a ``.vcf``)."""
    lower = path.lower()
    if lower.endswith(".vcf"):
        return
    pysam, quiet = _quiet()
    try:
        if lower.endswith(".vcf.gz"):
            pysam.tabix_index(path, preset="vcf", force=True)
        else:
            from pysam import bcftools

            bcftools.index("--force", path)
    except (ImportError, OSError, pysam.utils.SamtoolsError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        warnings.warn(
            f"{func}: {path} is not indexed ({reason}); index it with bcftools index.",
            SeqAttribWarning,
            stacklevel=3,
        )
    finally:
        pysam.set_verbosity(quiet)


def _with_values(line: str, ours: dict[str, str]) -> str:
    """A record line with its INFO entries of our keys replaced by ``ours``."""
    fields = line.rstrip("\n").split("\t")
    entries = [e for e in fields[7].split(";") if e and e != "." and e.split("=")[0] not in ours]
    entries += [f"{key}={value}" for key, value in ours.items()]
    fields[7] = ";".join(entries)
    return "\t".join(fields) + "\n"


def _our_values(line: str, keys: Sequence[str]) -> dict[str, list[str]]:
    """The values of our keys in a record line, per ALT allele (missing ones ``.``)."""
    fields = line.split("\t", 8)
    n_alts = 0 if fields[4] == "." else fields[4].count(",") + 1
    found = dict(e.split("=", 1) for e in fields[7].split(";") if "=" in e)
    return {k: found[k].split(",") if k in found else ["."] * n_alts for k in keys}


class _Source:
    """The records of the variants' input as VCF lines: a text VCF's own lines, a BCF's records
    as htslib prints them, or minimal records of a table."""

    def __init__(self, stream: VariantStream, keys: Sequence[str]) -> None:
        from .records import VcfRecords

        self.stream, self.keys = stream, list(keys)
        records = stream.records
        self.vcf = records.path if isinstance(records, VcfRecords) else None

    def header(self, settings: dict[str, Any], columns: Sequence[str]) -> str:
        sizes = self.stream.genome.sizes
        if self.vcf is None:
            head = ["##fileformat=VCFv4.2\n"]
            declared: set[str] = set()
        else:
            head, declared = _vcf_header(self.vcf)
        head = [line for line in head if not _is_ours(line, self.keys)]
        contigs = [f"##contig=<ID={c},length={n}>\n" for c, n in sizes.items() if c not in declared]
        title = "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        if self.vcf is not None:
            title = head.pop()
        return "".join(head + contigs + _info_lines(columns) + [_settings_line(settings), title])

    def records(self) -> Iterator[tuple[int, str]]:
        """``(number of ALT alleles, line)`` of every input record."""
        if self.vcf is None:
            for rec in self.stream.records():
                alts = ",".join(rec.alts) or "."
                fields = [escape(rec.chrom), str(rec.pos), escape(rec.id), rec.ref, alts]
                yield len(rec.alts), "\t".join([*fields, ".", ".", "."]) + "\n"
            return
        for line in vcf_lines(self.vcf, self.keys):
            alts = line.split("\t", 5)[4]
            yield (0 if alts == "." else alts.count(",") + 1), line


def _is_ours(line: str, keys: Sequence[str]) -> bool:
    """A header line this output writes anew (the settings, the INFO lines of its keys)."""
    if line.startswith(f"##{SETTINGS_KEY}="):
        return True
    return any(line.startswith(f"##INFO=<ID={key},") for key in keys)


def _is_text(path: str) -> bool:
    return not path.lower().endswith(".bcf")


def _open_text(path: str) -> Any:
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    if gzipped:
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _vcf_header(path: str) -> tuple[list[str], set[str]]:
    """The header lines of a VCF or BCF (the ``#CHROM`` line last) and its declared contigs."""
    pysam, quiet = _quiet()
    try:
        with pysam.VariantFile(path, "r") as handle:
            contigs = set(handle.header.contigs)
            text = str(handle.header)
    finally:
        pysam.set_verbosity(quiet)
    if _is_text(path):  # the file's own lines, as written
        lines = []
        with _open_text(path) as handle:
            for line in handle:
                if not line.startswith("#"):
                    break
                lines.append(line if line.endswith("\n") else line + "\n")
        return lines, contigs
    return text.splitlines(keepends=True), contigs


def vcf_lines(path: str, keys: Sequence[str]) -> Iterator[str]:
    """The record lines of a VCF or BCF: a text file's own lines; a BCF's records as htslib
    prints them, with the values of ``keys`` written with 9 significant digits."""
    if _is_text(path):
        with _open_text(path) as handle:
            for line in handle:
                if line.strip() and not line.startswith("#"):
                    yield line if line.endswith("\n") else line + "\n"
        return
    pysam, quiet = _quiet()
    try:
        with pysam.VariantFile(path, "r") as handle:
            declared = [k for k in keys if k in handle.header.info]
            for rec in handle:
                ours = {k: _bcf_values(rec, k) for k in declared if k in rec.info}
                yield _with_values(str(rec), ours) if ours else str(rec)
    finally:
        pysam.set_verbosity(quiet)


def _bcf_values(rec: Any, key: str) -> str:
    values = rec.info[key]
    values = values if isinstance(values, tuple) else (values,)
    return ",".join("." if v is None else f"{v:.9g}" for v in values)


def to_vcf(
    rows: Iterator[list[str]],
    path: str,
    settings: dict[str, Any],
    stream: VariantStream,
    offset: int,
    n_variants: int,
    columns: Sequence[str],
    func: str,
) -> None:
    """Write the VCF of a finished job: ``rows`` (the value fields of the kept variants
    ``offset .. offset + n_variants - 1``, as text, in order) into the input's records."""
    keys = [info_key(c) for c in columns]
    source = _Source(stream, keys)
    lines = _Lines(path, source.header(settings, columns))
    try:
        kept, allele, index, stop = stream.catalog.kept, 0, 0, offset + n_variants
        for n_alts, line in source.records():
            if index >= stop:
                break
            slots: list[list[str] | None] = []
            for _ in range(n_alts):
                row = None
                if kept[allele]:
                    row = next(rows) if offset <= index < stop else None
                    index += 1
                slots.append(row)
                allele += 1
            if all(row is None for row in slots):
                continue
            ours = {
                key: ",".join("." if row is None else row[j] for row in slots)
                for j, key in enumerate(keys)
            }
            lines.write(_with_values(line, ours))
    except BaseException:
        lines.abandon()
        raise
    lines.finish(func)


# --------------------------------------------------------------------------- reading
def vcf_rows(
    path: str, names: list[str], reading: Reading
) -> Iterator[tuple[list[str], list[float]]]:
    """``(identity fields as written, numbers)`` of every kept variant of a VCF effects table
    (an ALT allele with values), after checking that its header declares every value column."""
    pysam, quiet = _quiet()
    keys = [info_key(c) for c in names[5:]]

    def unreadable(exc: BaseException) -> ValueError:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return reading.damaged(path, f"which cannot be read as a VCF ({reason})")

    try:
        try:
            handle = pysam.VariantFile(path, "r")
        except (OSError, ValueError, NotImplementedError) as exc:
            raise unreadable(exc) from exc
        with handle:
            info = handle.header.info
            if any(k not in info or info[k].number != "A" for k in keys):
                raise reading.damaged(path, "whose header does not declare its value columns")
            records = iter(handle)
            while True:
                try:
                    rec = next(records)
                except StopIteration:
                    return
                except (OSError, ValueError) as exc:
                    raise unreadable(exc) from exc
                yield from _record_rows(rec, keys, path, reading)
    finally:
        pysam.set_verbosity(quiet)


def _record_rows(
    rec: Any, keys: list[str], path: str, reading: Reading
) -> Iterator[tuple[list[str], list[float]]]:
    alts = rec.alts or ()
    columns = [rec.info.get(k) for k in keys]
    if columns[0] is None:
        return
    if any(c is None or len(c) != len(alts) for c in columns):
        raise reading.damaged(
            path, f"whose record {rec.chrom}:{rec.pos} lacks values of its value columns"
        )
    identity = [rec.chrom, str(rec.pos), rec.id or ".", rec.ref or ""]
    for a, alt in enumerate(alts):
        if columns[0][a] is None:
            continue
        values = [c[a] for c in columns]
        if any(v is None for v in values):
            raise reading.damaged(
                path, f"whose record {rec.chrom}:{rec.pos} lacks values of its value columns"
            )
        yield [*identity, alt], [float(v) for v in values]


def merge_vcf(
    paths: Sequence[str], out: str, settings: dict[str, Any], columns: Sequence[str], func: str
) -> None:
    """Join VCF shard tables in order into ``out`` (a record whose ALT alleles two shards share
    gets the values of both)."""
    keys = [info_key(c) for c in columns]
    head, _ = _vcf_header(paths[0])
    head = [line for line in head if not line.startswith(f"##{SETTINGS_KEY}=")]
    title = head.pop()
    lines = _Lines(out, "".join([*head, _settings_line(settings), title]))
    try:
        pending: str | None = None
        for path in paths:
            first = True
            for line in vcf_lines(path, keys):
                if first and pending is not None and _split(pending, line, keys[0]):
                    line = _joined(pending, line, keys)
                elif pending is not None:
                    lines.write(pending)
                pending, first = line, False
        if pending is not None:
            lines.write(pending)
    except BaseException:
        lines.abandon()
        raise
    lines.finish(func)


def _split(a: str, b: str, key: str) -> bool:
    """Whether two lines are one record whose ALT alleles two shards share: the same record,
    each ALT allele with values in at most one of them."""
    if a.split("\t", 5)[:5] != b.split("\t", 5)[:5]:
        return False
    first, second = _our_values(a, [key])[key], _our_values(b, [key])[key]
    return all("." in (x, y) for x, y in zip(first, second, strict=True))


def _joined(a: str, b: str, keys: Sequence[str]) -> str:
    """One record of two shards, each with values for some of its ALT alleles."""
    first, second = _our_values(a, keys), _our_values(b, keys)
    ours = {
        k: ",".join(x if x != "." else y for x, y in zip(first[k], second[k], strict=True))
        for k in keys
    }
    return _with_values(b, ours)
