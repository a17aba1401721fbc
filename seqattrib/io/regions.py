"""Genome regions: BED and narrowPeak files, fixed-length windows around their centres.

Coordinates are 0-based and half-open, as in BED: a window ``(chrom, start, end)`` holds the bases
``start, start + 1, ..., end - 1``.

Window rule (used by :func:`read_regions` and :func:`extract_windows`): a window of ``length``
around a centre base ``c`` is ``[c - length // 2, c - length // 2 + length)``, so ``c`` is base
``length // 2`` of the window (the middle base for odd lengths, the right one of the two middle
bases for even lengths; the convention of chrombpnet). The centre of a narrowPeak region is its
summit, ``start + column 10``; the centre of a BED region (or of a narrowPeak whose summit is -1)
is ``(start + end) // 2``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from .._errors import deprecated_alias, parameter_error, refuse_existing
from .fasta import PathLike, open_text, parse_int


@dataclass(frozen=True, eq=False)
class Regions:
    """Genome regions (0-based, half-open) with the row of the file each one came from.

    Parameters
    ----------
    chrom : array of str, shape (n_regions,)
    start, end : array of int64, shape (n_regions,)
    name : array of str, shape (n_regions,)
        ``"."`` where the file had no name column.
    index : array of int64, shape (n_regions,)
        0-based position of the region among the region lines of its source file (comment, header,
        track and browser lines are not counted), kept through :meth:`take` and
        :func:`extract_windows` so results can be joined back to the original rows.
    """

    chrom: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    index: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.chrom)
        fields = {
            "chrom": np.asarray(self.chrom, dtype=str),
            "start": np.asarray(self.start, dtype=np.int64),
            "end": np.asarray(self.end, dtype=np.int64),
            "name": np.asarray(self.name, dtype=str),
            "index": np.asarray(self.index, dtype=np.int64),
        }
        for key, value in fields.items():
            if value.shape != (n,):
                raise parameter_error(
                    "Regions",
                    key,
                    f"a 1-D array of {n} entries (one per region)",
                    f"shape {value.shape}",
                    described=True,
                )
            object.__setattr__(self, key, value)
        if np.any(fields["end"] < fields["start"]):
            bad = int(np.flatnonzero(fields["end"] < fields["start"])[0])
            raise parameter_error(
                "Regions",
                "end",
                "at least start for every region",
                f"start {fields['start'][bad]} and end {fields['end'][bad]} at region {bad}",
                described=True,
            )

    @classmethod
    def from_arrays(
        cls,
        chrom: ArrayLike,
        start: ArrayLike,
        end: ArrayLike,
        name: ArrayLike | None = None,
    ) -> Regions:
        """Regions from columns; names default to ``"."`` and rows are numbered 0, 1, ..."""
        chroms = np.atleast_1d(np.asarray(chrom, dtype=str))
        n = len(chroms)
        names = np.full(n, ".") if name is None else np.atleast_1d(np.asarray(name, dtype=str))
        return cls(
            chroms,
            np.atleast_1d(np.asarray(start, dtype=np.int64)),
            np.atleast_1d(np.asarray(end, dtype=np.int64)),
            names,
            np.arange(n, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.chrom)

    def take(self, indices: ArrayLike) -> Regions:
        """The regions at ``indices`` (integer positions or a boolean mask), rows kept."""
        idx = np.asarray(indices)
        return Regions(
            self.chrom[idx], self.start[idx], self.end[idx], self.name[idx], self.index[idx]
        )

    def windows(self, length: int) -> Regions:
        """Windows of ``length`` centred on each region's centre ``(start + end) // 2``."""
        length = check_length(length, "Regions.windows")
        start = (self.start + self.end) // 2 - length // 2
        return Regions(self.chrom, start, start + length, self.name, self.index)

    def labels(self, indices: ArrayLike | None = None) -> list[str]:
        """``"chrom:start-end (row i)"`` strings, for messages."""
        idx = np.arange(len(self)) if indices is None else np.atleast_1d(np.asarray(indices))
        return [f"{self.chrom[i]}:{self.start[i]}-{self.end[i]} (row {self.index[i]})" for i in idx]


def check_regions(regions: Any, func: str) -> None:
    """Refuse anything but a :class:`Regions` where one is expected."""
    if not isinstance(regions, Regions):
        raise parameter_error(
            func,
            "regions",
            "a seqattrib.io.Regions (see read_regions or Regions.from_arrays)",
            type(regions).__name__,
            error=TypeError,
            described=True,
        )


def check_length(length: Any, func: str) -> int:
    if isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)):
        raise parameter_error(func, "length", "a positive int", length, error=TypeError)
    if length <= 0:
        raise parameter_error(func, "length", "a positive int", length)
    return int(length)


def _is_narrowpeak(path: PathLike) -> bool:
    name = os.fspath(path).lower()
    name = name[:-3] if name.endswith(".gz") else name
    return name.endswith(".narrowpeak")


def read_regions(
    path: PathLike,
    *,
    length: int | None = None,
    format: Literal["auto", "bed", "narrowpeak"] = "auto",
) -> Regions:
    """Read BED or narrowPeak regions, optionally as fixed-length windows.

    Use this with :func:`extract_windows` to turn peaks into model inputs.

    Parameters
    ----------
    path : str or path
        BED (3 or more tab-separated columns: chrom, start, end, [name, ...]) or narrowPeak
        (10 columns; column 10 is the summit's offset from start, -1 for none), optionally
        gzip-compressed. Empty, ``#``, ``track`` and ``browser`` lines are skipped, and so is a
        header line before the first region (a line whose start or end is not a number).
    length : int, optional
        Return windows of this length: centred on the summit of narrowPeak regions, on the centre
        ``(start + end) // 2`` of BED regions (and of peaks with summit -1); a window around centre
        ``c`` is ``[c - length // 2, c - length // 2 + length)``. ``None`` keeps the regions as
        written. Windows may run off a chromosome end here; :func:`extract_windows` drops those.
    format : {"auto", "bed", "narrowpeak"}
        ``"auto"`` reads column 10 as a summit when the file name ends in ``.narrowPeak``
        (optionally ``.gz``) or the file has exactly 10 columns; BED12 files (whose column 10 is
        blockCount) are read as BED.

    Returns
    -------
    Regions
        ``index`` numbers the regions 0, 1, ... in file order.
    """
    if format not in ("auto", "bed", "narrowpeak"):
        raise parameter_error("read_regions", "format", "'auto', 'bed' or 'narrowpeak'", format)
    if length is not None:
        length = check_length(length, "read_regions")
    chroms: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    names: list[str] = []
    summits: list[str] = []
    n_columns: set[int] = set()
    header_seen = False
    with open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.startswith(("#", "track", "browser")):
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            start = parse_int(fields[1]) if len(fields) >= 3 else None
            end = parse_int(fields[2]) if len(fields) >= 3 else None
            if start is None or end is None:
                if not chroms and not header_seen and len(fields) >= 3:
                    header_seen = True  # a column-name line before the first region
                    continue
                raise _bad_line(path, lineno, line, "chrom, start and end columns")
            if start < 0 or end < start:
                raise _bad_line(path, lineno, line, "0 <= start <= end")
            chroms.append(fields[0])
            starts.append(start)
            ends.append(end)
            names.append(fields[3] if len(fields) >= 4 and fields[3] else ".")
            summits.append(fields[9] if len(fields) >= 10 else "-1")
            n_columns.add(len(fields))
    start_arr = np.asarray(starts, dtype=np.int64)
    end_arr = np.asarray(ends, dtype=np.int64)
    narrowpeak = format == "narrowpeak" or (
        format == "auto" and (_is_narrowpeak(path) or n_columns == {10})
    )
    if length is not None:
        centre = (start_arr + end_arr) // 2
        if narrowpeak:
            parsed = [parse_int(text) for text in summits]
            summit_arr = np.array([-2 if v is None else v for v in parsed], dtype=np.int64)
            bad = (summit_arr < -1) | (summit_arr >= np.maximum(end_arr - start_arr, 1))
            if np.any(bad):
                i = int(np.flatnonzero(bad)[0])
                raise parameter_error(
                    "read_regions",
                    "path",
                    "a narrowPeak file whose column 10 is -1 or an offset inside the peak",
                    f"summit {summits[i]!r} for {chroms[i]}:{starts[i]}-{ends[i]} "
                    f"(row {i}) in {os.fspath(path)!r}",
                    "Pass format='bed' to centre windows on the regions instead.",
                    described=True,
                )
            centre = np.where(summit_arr >= 0, start_arr + summit_arr, centre)
        start_arr = centre - length // 2
        end_arr = start_arr + length
    return Regions(
        np.asarray(chroms, dtype=str),
        start_arr,
        end_arr,
        np.asarray(names, dtype=str),
        np.arange(len(chroms), dtype=np.int64),
    )


def _bad_line(path: PathLike, lineno: int, line: str, expected: str) -> Exception:
    text = line if len(line) <= 60 else line[:57] + "..."
    return parameter_error(
        "read_regions",
        "path",
        f"a BED/narrowPeak file with {expected} on every region line",
        f"{text!r} on line {lineno} of {os.fspath(path)!r}",
        described=True,
    )


@deprecated_alias(path="out")
def write_bed(out: PathLike, regions: Regions, *, overwrite: bool = False) -> Path:
    """Write regions as BED4 (chrom, start, end, name), tab-separated, in the given order.

    Parameters
    ----------
    out : str or path
        The BED file to write.
    regions : Regions
    overwrite : bool
        Replace an existing file; without it an existing file is an error.

    Returns
    -------
    Path
        The file written.
    """
    check_regions(regions, "write_bed")
    out = Path(out)
    refuse_existing("write_bed", "out", out, overwrite)
    with open(out, "w") as handle:
        for chrom, start, end, name in zip(
            regions.chrom, regions.start, regions.end, regions.name, strict=True
        ):
            handle.write(f"{chrom}\t{start}\t{end}\t{name}\n")
    return out
