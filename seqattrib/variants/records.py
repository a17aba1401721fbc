"""Variant records from a VCF/BCF file (pysam) or a table (a TSV/CSV file, a DataFrame, a dict of
columns), read as a stream that can start again from the beginning.

pysam reads VCF and BCF, plain or bgzip-compressed, with or without an index, through htslib
(about 1.7 s per million records on one core, as fast as cyvcf2 and several times faster than
pure-Python parsers); it is one wheel with no other dependencies, and also writes bgzip files and
tabix indexes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from ..io.fasta import open_text

VCF_SUFFIXES = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")
TABLE_SUFFIXES = (".tsv", ".tsv.gz", ".txt", ".txt.gz", ".csv", ".csv.gz")
#: Accepted spellings of the table columns (case-insensitive).
_COLUMNS = {
    "chrom": ("chrom", "#chrom", "chr", "chromosome", "contig"),
    "pos": ("pos", "position"),
    "id": ("id", "name", "variant_id"),
    "ref": ("ref",),
    "alt": ("alt",),
}


@dataclass(frozen=True)
class Record:
    """One input record: a position with its REF and one or more ALT alleles (1-based POS)."""

    chrom: str
    pos: int
    id: str
    ref: str
    alts: tuple[str, ...]


Records = Callable[[], Iterator[Record]]


@dataclass(frozen=True)
class VcfRecords:
    """The records of a VCF or BCF file, each call from the first one (``path`` is the file:
    a VCF output keeps each record's own fields)."""

    path: str
    func: str

    def __call__(self) -> Iterator[Record]:
        return _vcf_records(self.path, self.func)


def describe(variants: Any) -> str:
    """A short name of the input for messages and file settings."""
    if isinstance(variants, (str, os.PathLike)):
        return os.path.basename(os.fspath(variants))
    return f"a table of {_n_rows(variants)} rows"


def open_records(variants: Any, func: str) -> Records:
    """A function that streams the records of ``variants`` from the first one, each call anew."""
    if isinstance(variants, (str, os.PathLike)):
        path = os.fspath(variants)
        if not os.path.isfile(path):
            raise parameter_error(
                func,
                "variants",
                "an existing VCF/BCF or table file",
                path,
                error=FileNotFoundError,
            )
        lower = path.lower()
        if lower.endswith(VCF_SUFFIXES):
            import_optional("pysam")
            _check_compression(path, func)
            return VcfRecords(path, func)
        if lower.endswith(TABLE_SUFFIXES):
            header = _table_header(path, func)
            return lambda: _file_records(path, header, func)
        raise parameter_error(
            func,
            "variants",
            "a file named " + ", ".join(VCF_SUFFIXES + TABLE_SUFFIXES),
            path,
            "Name a VCF calls.vcf.gz (or .bcf), or a table variants.tsv with columns chrom, pos, "
            "ref, alt (and optionally id).",
        )
    columns = _columns(variants, func)
    return lambda: _column_records(columns)


# --------------------------------------------------------------------------- VCF and BCF
def _check_compression(path: str, func: str) -> None:
    """Refuse a VCF compressed with plain gzip: htslib reads only bgzip's blocked gzip (BGZF),
    whose first member carries an extra field with the subfield ``BC``."""
    with open(path, "rb") as handle:
        head = handle.read(18)
    if head[:3] != b"\x1f\x8b\x08":
        return  # not gzip: plain text or BCF, read by htslib
    bgzf = head[3] & 4 and len(head) >= 14 and head[12:14] == b"BC"
    if bgzf:
        return
    name = os.path.basename(path)
    stem = name[:-3] if name.lower().endswith(".gz") else name
    raise parameter_error(
        func,
        "variants",
        "a VCF that is plain text or compressed with bgzip (blocked gzip, which htslib reads)",
        f"{path!r}, compressed with plain gzip",
        f"Recompress it with bgzip (zcat {name} | bgzip > {stem}.bgz), or pass it uncompressed "
        f"(bgzip -d {name}, or gunzip).",
        described=True,
    )


def _vcf_records(path: str, func: str) -> Iterator[Record]:
    pysam = import_optional("pysam")
    quiet = pysam.set_verbosity(0)  # no htslib notes about a missing index or header contigs
    try:
        handle = pysam.VariantFile(path, "r")
    except (OSError, ValueError, NotImplementedError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise parameter_error(
            func,
            "variants",
            "a readable VCF or BCF file",
            f"{path!r} ({reason})",
            "Check the file with bcftools view.",
            described=True,
        ) from exc
    finally:
        pysam.set_verbosity(quiet)
    last = "the header"
    with handle:
        records = iter(handle)
        while True:
            try:
                rec = next(records)
            except StopIteration:
                return
            except (OSError, ValueError, NotImplementedError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise parameter_error(
                    func,
                    "variants",
                    "a readable VCF or BCF file",
                    f"{path!r}, whose record after {last} cannot be read ({reason})",
                    "Check the file with bcftools view.",
                    described=True,
                ) from exc
            last = f"{rec.chrom}:{rec.pos}"
            yield Record(rec.chrom, int(rec.pos), rec.id or ".", rec.ref or "", rec.alts or ())


# --------------------------------------------------------------------------- tables
def _find(names: list[str], func: str, where: str) -> dict[str, int]:
    lowered = [n.strip().lower() for n in names]
    found: dict[str, int] = {}
    for key, spellings in _COLUMNS.items():
        for spelling in spellings:
            if spelling in lowered:
                found[key] = lowered.index(spelling)
                break
    missing = [key for key in ("chrom", "pos", "ref", "alt") if key not in found]
    if missing:
        raise parameter_error(
            func,
            "variants",
            "a table with columns chrom, pos, ref and alt (and optionally id)",
            f"{where} without {', '.join(missing)} (columns: {', '.join(names)})",
            "pos is 1-based, as in a VCF; several ALT alleles may be comma-separated.",
            described=True,
        )
    return found


def _delimiter(path: str) -> str:
    return "," if ".csv" in os.path.basename(path).lower() else "\t"


def _table_header(path: str, func: str) -> dict[str, int]:
    with open_text(path) as handle:
        for line in handle:
            if line.strip() and not line.startswith("##"):
                return _find(line.rstrip("\n").split(_delimiter(path)), func, repr(path))
    raise parameter_error(func, "variants", "a table with a header line", path)


def _position(text: Any, func: str, where: str) -> int:
    try:
        pos = int(text)
    except (TypeError, ValueError):
        pos = 0
    if pos < 1 or (isinstance(text, float) and text != pos):
        raise parameter_error(
            func,
            "variants",
            "1-based positions (integers of at least 1) in column pos",
            f"{text!r} at {where}",
            described=True,
        )
    return pos


def _file_records(path: str, header: dict[str, int], func: str) -> Iterator[Record]:
    delimiter = _delimiter(path)
    width = max(header.values()) + 1
    with open_text(path) as handle:
        seen_header = False
        for lineno, line in enumerate(handle, start=1):
            if not line.strip() or line.startswith("##"):
                continue
            if not seen_header:
                seen_header = True
                continue
            fields = line.rstrip("\n").split(delimiter)
            if len(fields) < width:
                raise parameter_error(
                    func,
                    "variants",
                    f"a table whose lines have at least {width} columns",
                    f"{line.strip()!r} on line {lineno} of {path!r}",
                    described=True,
                )
            where = f"line {lineno} of {path!r}"
            yield Record(
                fields[header["chrom"]].strip(),
                _position(fields[header["pos"]].strip(), func, where),
                fields[header["id"]].strip() if "id" in header else ".",
                fields[header["ref"]].strip(),
                tuple(a.strip() for a in fields[header["alt"]].split(",")),
            )


def _n_rows(table: Any) -> int:
    try:
        return len(next(iter(table.values())) if isinstance(table, Mapping) else table)
    except (TypeError, StopIteration):
        return 0


def _columns(table: Any, func: str) -> dict[str, np.ndarray]:
    """The columns of a DataFrame or a mapping of column name to values."""
    if isinstance(table, Mapping):
        names = [str(k) for k in table]
        get: Callable[[str], Any] = lambda name: table[name]  # noqa: E731
    elif hasattr(table, "columns") and hasattr(table, "__getitem__"):
        names = [str(c) for c in table.columns]
        get = lambda name: table[name].to_numpy()  # noqa: E731
    else:
        raise parameter_error(
            func,
            "variants",
            "a VCF/BCF path, a table path, a DataFrame or a dict of columns",
            type(table).__name__,
            error=TypeError,
            described=True,
        )
    found = _find(names, func, "a table")
    columns = {key: np.asarray(get(names[i]), dtype=object) for key, i in found.items()}
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1:
        raise parameter_error(
            func, "variants", "columns of one length", f"lengths {sorted(lengths)}", described=True
        )
    for i, value in enumerate(columns["pos"]):
        _position(value, func, f"row {i}")
    return columns


def _column_records(columns: dict[str, np.ndarray]) -> Iterator[Record]:
    ids = columns.get("id")
    for i in range(len(columns["pos"])):
        yield Record(
            str(columns["chrom"][i]),
            int(columns["pos"][i]),
            "." if ids is None else str(ids[i]),
            str(columns["ref"][i]),
            tuple(a.strip() for a in str(columns["alt"][i]).split(",")),
        )
