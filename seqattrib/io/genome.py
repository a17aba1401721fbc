"""Sequences from a genome: FASTA files, chrom sizes, BED/narrowPeak regions and one-hot windows.

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

import gzip
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._errors import SeqAttribWarning, parameter_error
from .._optional import import_optional
from .onehot import _LOOKUP

PathLike = str | os.PathLike[str]

#: Largest FASTA that ``Genome(backend="auto")`` reads into memory when pyfaidx is missing.
MEMORY_LIMIT_BYTES = 100 * 2**20

_EXAMPLES_SHOWN = 3
#: Windows encoded together (one vectorised comparison per block).
_BLOCK = 256


def _open_text(path: PathLike) -> IO[str]:
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt")
    return open(path)


def read_fasta(path: PathLike) -> dict[str, str]:
    """Read a whole (small) FASTA file into memory.

    Use this for a handful of sequences; use :class:`Genome` for a genome (indexed, lazy).

    Parameters
    ----------
    path : str or path
        FASTA file, optionally gzip-compressed (``.gz``). Sequences may span many lines; the name of
        a record is the first word of its ``>`` line (``>chr1 some description`` gives ``chr1``).

    Returns
    -------
    dict of str to str
        Name to sequence, in file order, letters as written (soft-masked lowercase is kept).
    """
    records: dict[str, str] = {}
    name: str | None = None
    parts: list[str] = []

    def _finish() -> None:
        if name is not None:
            records[name] = "".join(parts)

    with _open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith(";"):
                continue
            if line.startswith(">"):
                _finish()
                words = line[1:].split()
                if not words:
                    raise parameter_error(
                        "read_fasta",
                        "path",
                        "a FASTA file whose '>' lines name their sequence",
                        f"an empty name on line {lineno} of {os.fspath(path)!r}",
                        described=True,
                    )
                name, parts = words[0], []
                if name in records:
                    raise parameter_error(
                        "read_fasta",
                        "path",
                        "a FASTA file with unique sequence names",
                        f"{name!r} twice (again on line {lineno}) in {os.fspath(path)!r}",
                        described=True,
                    )
            elif name is None:
                raise parameter_error(
                    "read_fasta",
                    "path",
                    "a FASTA file starting with a '>' line",
                    f"sequence before any '>' line on line {lineno} of {os.fspath(path)!r}",
                    described=True,
                )
            else:
                parts.append(line)
    _finish()
    return records


def chrom_sizes(path: PathLike) -> dict[str, int]:
    """Read a chrom sizes file (``chrom<TAB>size`` per line, as UCSC's ``fetchChromSizes``).

    Parameters
    ----------
    path : str or path

    Returns
    -------
    dict of str to int
        Chromosome to length, in file order (the order of a bigWig header).
    """
    sizes: dict[str, int] = {}
    with _open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            size = _int(fields[1]) if len(fields) >= 2 else None
            if size is None or size <= 0 or fields[0] in sizes:
                problem = "a repeated name" if fields[0] in sizes else "a bad line"
                raise parameter_error(
                    "chrom_sizes",
                    "path",
                    "a file of unique 'chrom<TAB>size' lines with positive sizes",
                    f"{problem} {line!r} (line {lineno} of {os.fspath(path)!r})",
                    described=True,
                )
            sizes[fields[0]] = size
    return sizes


class Genome:
    """A FASTA genome read lazily, one window at a time.

    Nothing is read when the object is made: the file is opened (and indexed) on first use.

    Parameters
    ----------
    path : str or path
        FASTA file (plain, or bgzip-compressed with pyfaidx).
    backend : {"auto", "pyfaidx", "memory"}
        ``"pyfaidx"`` reads windows through a ``.fai`` index (``pip install 'seqattrib[genome]'``);
        ``"memory"`` reads the whole file with :func:`read_fasta`. ``"auto"`` (default) uses pyfaidx
        when it is installed, and otherwise reads files up to 100 MiB into memory (small genomes,
        test data); for larger files without pyfaidx it raises ImportError naming the extra.
    index_path : str or path, optional
        Where the pyfaidx index lives. By default ``<path>.fai``: used when present, built there
        when the folder is writable, and otherwise built in a temporary folder removed by
        :meth:`close`.

    Examples
    --------
    >>> genome = Genome("hg38.fa")                 # doctest: +SKIP
    >>> genome.fetch("chr1", 1_000_000, 1_000_010)  # doctest: +SKIP
    'ACGTacgtNN'
    """

    def __init__(
        self,
        path: PathLike,
        *,
        backend: Literal["auto", "pyfaidx", "memory"] = "auto",
        index_path: PathLike | None = None,
    ) -> None:
        if backend not in ("auto", "pyfaidx", "memory"):
            raise parameter_error("Genome", "backend", "'auto', 'pyfaidx' or 'memory'", backend)
        self.path = Path(path)
        if not self.path.is_file():
            raise parameter_error(
                "Genome", "path", "an existing FASTA file", os.fspath(path), error=FileNotFoundError
            )
        self.backend = backend
        self.index_path = None if index_path is None else Path(index_path)
        self._fasta: Any = None
        self._records: dict[str, str] | None = None
        self._sizes: dict[str, int] | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None

    def __repr__(self) -> str:
        return f"Genome({os.fspath(self.path)!r}, backend={self.backend!r})"

    def _open(self) -> None:
        if self._sizes is not None:
            return
        backend = self.backend
        if backend == "auto":
            try:
                import_optional("pyfaidx")
                backend = "pyfaidx"
            except ImportError:
                if self.path.stat().st_size > MEMORY_LIMIT_BYTES:
                    raise
                backend = "memory"
        if backend == "memory":
            self._records = read_fasta(self.path)
            self._sizes = {name: len(seq) for name, seq in self._records.items()}
            return
        pyfaidx = import_optional("pyfaidx")
        index = self.index_path
        default = Path(f"{self.path}.fai")
        if index is None and not default.exists() and not os.access(self.path.parent, os.W_OK):
            self._tmpdir = tempfile.TemporaryDirectory(prefix="seqattrib-fai-")
            index = Path(self._tmpdir.name) / default.name
        self._fasta = pyfaidx.Fasta(
            os.fspath(self.path),
            indexname=None if index is None else os.fspath(index),
            as_raw=True,
            sequence_always_upper=False,
            read_long_names=False,
        )
        self._sizes = {name: len(rec) for name, rec in self._fasta.records.items()}

    @property
    def chrom_sizes(self) -> dict[str, int]:
        """Sequence name to length, in file order."""
        self._open()
        assert self._sizes is not None
        return dict(self._sizes)

    def __contains__(self, chrom: object) -> bool:
        self._open()
        assert self._sizes is not None
        return chrom in self._sizes

    def __iter__(self) -> Iterator[str]:
        return iter(self.chrom_sizes)

    def __len__(self) -> int:
        return len(self.chrom_sizes)

    def fetch(self, chrom: str, start: int, end: int) -> str:
        """Bases ``start .. end - 1`` (0-based) of ``chrom``, letters as in the file.

        Raises
        ------
        KeyError
            When ``chrom`` is not in the genome.
        ValueError
            When the window is not inside the sequence.
        """
        self._open()
        assert self._sizes is not None
        if chrom not in self._sizes:
            raise parameter_error(
                "Genome.fetch",
                "chrom",
                f"a sequence name of {self.path.name}",
                chrom,
                error=KeyError,
            )
        size = self._sizes[chrom]
        if not 0 <= start <= end <= size:
            raise parameter_error(
                "Genome.fetch",
                "start",
                f"a window inside {chrom} (0 <= start <= end <= {size})",
                f"{chrom}:{start}-{end}",
                described=True,
            )
        if self._records is not None:
            return self._records[chrom][start:end]
        return str(self._fasta[chrom][start:end])

    def close(self) -> None:
        """Close the file (and remove a temporary index); the next use opens it again."""
        if self._fasta is not None:
            self._fasta.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
        self._fasta = self._records = self._sizes = self._tmpdir = None

    def __enter__(self) -> Genome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        length = _check_length(length, "Regions.windows")
        start = (self.start + self.end) // 2 - length // 2
        return Regions(self.chrom, start, start + length, self.name, self.index)

    def labels(self, indices: ArrayLike | None = None) -> list[str]:
        """``"chrom:start-end (row i)"`` strings, for messages."""
        idx = np.arange(len(self)) if indices is None else np.atleast_1d(np.asarray(indices))
        return [f"{self.chrom[i]}:{self.start[i]}-{self.end[i]} (row {self.index[i]})" for i in idx]


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _check_length(length: Any, func: str) -> int:
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
        length = _check_length(length, "read_regions")
    chroms: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    names: list[str] = []
    summits: list[str] = []
    n_columns: set[int] = set()
    header_seen = False
    with _open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.startswith(("#", "track", "browser")):
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            start = _int(fields[1]) if len(fields) >= 3 else None
            end = _int(fields[2]) if len(fields) >= 3 else None
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
            parsed = [_int(text) for text in summits]
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


def write_bed(path: PathLike, regions: Regions, *, overwrite: bool = False) -> Path:
    """Write regions as BED4 (chrom, start, end, name), tab-separated, in the given order.

    Parameters
    ----------
    path : str or path
    regions : Regions
    overwrite : bool
        Replace an existing file; without it an existing file is an error.

    Returns
    -------
    Path
        The file written.
    """
    if not isinstance(regions, Regions):
        raise parameter_error(
            "write_bed",
            "regions",
            "a seqattrib.io.Regions",
            type(regions).__name__,
            error=TypeError,
            described=True,
        )
    out = Path(path)
    if out.exists() and not overwrite:
        raise parameter_error(
            "write_bed",
            "path",
            "a file that does not exist yet",
            os.fspath(out),
            "Pass overwrite=True to replace it.",
            error=FileExistsError,
        )
    with open(out, "w") as handle:
        for chrom, start, end, name in zip(
            regions.chrom, regions.start, regions.end, regions.name, strict=True
        ):
            handle.write(f"{chrom}\t{start}\t{end}\t{name}\n")
    return out


def _as_genome(genome: Any) -> Genome | Mapping[str, str]:
    if isinstance(genome, (Genome, Mapping)):
        return genome
    if isinstance(genome, (str, os.PathLike)):
        return Genome(genome)
    raise parameter_error(
        "extract_windows",
        "genome",
        "a Genome, a FASTA path or a dict of name to sequence",
        type(genome).__name__,
        error=TypeError,
        described=True,
    )


def extract_windows(
    genome: Genome | Mapping[str, str] | PathLike,
    regions: Regions,
    *,
    length: int | None = None,
    layout: Literal["NLC", "NCL"] = "NLC",
    dtype: DTypeLike = np.float32,
) -> tuple[np.ndarray, Regions, Regions]:
    """One-hot windows of a genome, dropping (and reporting) those that do not fit.

    Use this after :func:`read_regions`; it fills one preallocated array, so millions of windows
    cost ``n_windows * length * 4`` bytes with ``dtype=np.int8`` and no strings are kept.

    Parameters
    ----------
    genome : Genome, str/path of a FASTA file, or dict of name to sequence
    regions : Regions
    length : int, optional
        Window length. Regions of another length are re-centred: window around
        ``(start + end) // 2`` (the rule of :func:`read_regions`, which leaves its own windows of
        that length unchanged). ``None`` requires every region to have the same length.
    layout : {"NLC", "NCL"}
        ``(n_windows, length, 4)`` or ``(n_windows, 4, length)``.
    dtype : numpy dtype
        float32 by default; int8 is four times smaller and cast on the device.

    Returns
    -------
    X : ndarray of shape (n_kept, length, 4) or (n_kept, 4, length)
        Soft-masked lowercase is encoded like uppercase; ``N`` is an all-zero column.
    kept : Regions
        The windows of X, row for row (their ``index`` points back to the source file).
    dropped : Regions
        Windows running off a chromosome end (start < 0 or end > size) or on a chromosome
        missing from the genome; a :class:`~seqattrib.SeqAttribWarning` names how many and the
        first few.

    Raises
    ------
    ValueError
        When a kept window holds a letter other than A, C, G, T, N (either case); the message names
        the window and the letter.
    """
    func = "extract_windows"
    if layout not in ("NLC", "NCL"):
        raise parameter_error(func, "layout", "'NLC' or 'NCL'", layout)
    if not isinstance(regions, Regions):
        raise parameter_error(
            func,
            "regions",
            "a seqattrib.io.Regions (see read_regions or Regions.from_arrays)",
            type(regions).__name__,
            error=TypeError,
            described=True,
        )
    if length is None:
        lengths = np.unique(regions.end - regions.start)
        if lengths.size != 1:
            got = "no regions" if lengths.size == 0 else f"lengths {lengths[:5].tolist()}"
            raise parameter_error(
                func,
                "length",
                "given unless all regions have one length",
                f"None for {got}",
                "Pass length=... to centre windows of one length on the regions.",
                described=True,
            )
        length = int(lengths[0])
    length = _check_length(length, func)
    if np.any(regions.end - regions.start != length):
        regions = regions.windows(length)
    source = _as_genome(genome)
    if isinstance(source, Genome):
        sizes = source.chrom_sizes
        fetch = source.fetch
    else:
        sizes = {str(c): len(source[c]) for c in np.unique(regions.chrom) if c in source}

        def fetch(chrom: str, start: int, end: int) -> str:
            return source[chrom][start:end]

    size_arr = np.array([sizes.get(c, -1) for c in regions.chrom], dtype=np.int64)
    missing = size_arr < 0
    off_end = ~missing & ((regions.start < 0) | (regions.end > size_arr))
    keep = ~(missing | off_end)
    kept, dropped = regions.take(keep), regions.take(~keep)
    if len(dropped):
        _warn_dropped(regions, missing, off_end)

    shape = (len(kept), length, 4) if layout == "NLC" else (len(kept), 4, length)
    X = np.empty(shape, dtype=dtype)  # every element is written below
    eye = np.vstack([np.eye(4), np.zeros((1, 4))]).astype(X.dtype)
    bases = np.arange(4, dtype=np.uint8)[None, :, None]
    codes = np.empty((min(_BLOCK, len(kept)), length), dtype=np.uint8)
    for first in range(0, len(kept), _BLOCK):
        block = range(first, min(first + _BLOCK, len(kept)))
        for row, i in enumerate(block):
            seq = fetch(str(kept.chrom[i]), int(kept.start[i]), int(kept.end[i]))
            codes[row] = _LOOKUP[np.frombuffer(seq.encode("latin-1", "replace"), dtype=np.uint8)]
        rows, out = codes[: len(block)], X[block.start : block.stop]
        if (rows == 255).any():
            _raise_bad_letter(
                kept, first + int(np.flatnonzero((rows == 255).any(axis=1))[0]), fetch
            )
        if layout == "NLC":  # row 4 of eye (N) is all zeros
            np.take(eye, rows, axis=0, out=out)
        else:
            np.equal(rows[:, None, :], bases, out=out, casting="unsafe")
    return X, kept, dropped


def _raise_bad_letter(kept: Regions, i: int, fetch: Callable[[str, int, int], str]) -> None:
    seq = fetch(str(kept.chrom[i]), int(kept.start[i]), int(kept.end[i]))
    pos = next(p for p, letter in enumerate(seq) if letter not in "ACGTNacgtn")
    raise parameter_error(
        "extract_windows",
        "genome",
        "DNA made of A, C, G, T or N (either case) in every window",
        f"the letter {seq[pos]!r} at position {pos} of window {kept.labels([i])[0]}",
        "Replace other IUPAC codes in the FASTA by N, or drop that region.",
        described=True,
    )


def _warn_dropped(regions: Regions, missing: np.ndarray, off_end: np.ndarray) -> None:
    parts = []
    if off_end.any():
        shown = ", ".join(regions.labels(np.flatnonzero(off_end)[:_EXAMPLES_SHOWN]))
        more = ", ..." if off_end.sum() > _EXAMPLES_SHOWN else ""
        parts.append(f"{int(off_end.sum())} running off a chromosome end ({shown}{more})")
    if missing.any():
        chroms = list(dict.fromkeys(regions.chrom[missing].tolist()))
        shown = ", ".join(repr(c) for c in chroms[:_EXAMPLES_SHOWN])
        more = ", ..." if len(chroms) > _EXAMPLES_SHOWN else ""
        parts.append(f"{int(missing.sum())} on chromosomes missing from the genome ({shown}{more})")
    n_dropped = int(off_end.sum() + missing.sum())
    warnings.warn(
        f"extract_windows dropped {n_dropped} of {len(regions)} windows: "
        + "; ".join(parts)
        + ". The kept windows are returned with their source rows (kept.index).",
        SeqAttribWarning,
        stacklevel=3,
    )
