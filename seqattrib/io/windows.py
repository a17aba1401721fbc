"""One-hot windows of a genome: all at once (``extract_windows``) or lazily, block by block,
as the input of a long job (``GenomeWindows``)."""

from __future__ import annotations

import gzip
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike

from .._errors import SeqAttribWarning, parameter_error
from .fasta import Genome, PathLike
from .onehot import LOOKUP
from .regions import Regions, check_length, check_regions

_EXAMPLES_SHOWN = 3
#: Windows encoded together (one vectorised comparison per block).
_BLOCK = 256


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
    check_regions(regions, func)
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
    length = check_length(length, func)
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
        _warn_dropped(regions, missing, off_end, func, sizes)

    shape = (len(kept), length, 4) if layout == "NLC" else (len(kept), 4, length)
    X = np.empty(shape, dtype=dtype)  # every element is written below
    eye = np.vstack([np.eye(4), np.zeros((1, 4))]).astype(X.dtype)
    bases = np.arange(4, dtype=np.uint8)[None, :, None]
    codes = np.empty((min(_BLOCK, len(kept)), length), dtype=np.uint8)
    for first in range(0, len(kept), _BLOCK):
        block = range(first, min(first + _BLOCK, len(kept)))
        for row, i in enumerate(block):
            seq = fetch(str(kept.chrom[i]), int(kept.start[i]), int(kept.end[i]))
            codes[row] = LOOKUP[np.frombuffer(seq.encode("latin-1", "replace"), dtype=np.uint8)]
        rows, out = codes[: len(block)], X[block.start : block.stop]
        if (rows == 255).any():
            bad = first + int(np.flatnonzero((rows == 255).any(axis=1))[0])
            _raise_bad_letter(kept, bad, fetch, source)
        if layout == "NLC":  # row 4 of eye (N) is all zeros
            np.take(eye, rows, axis=0, out=out)
        else:
            np.equal(rows[:, None, :], bases, out=out, casting="unsafe")
    return X, kept, dropped


def _raise_bad_letter(
    kept: Regions,
    i: int,
    fetch: Callable[[str, int, int], str],
    source: Genome | Mapping[str, str],
) -> None:
    chrom, start = str(kept.chrom[i]), int(kept.start[i])
    seq = fetch(chrom, start, int(kept.end[i]))
    pos = next(p for p, letter in enumerate(seq) if letter not in "ACGTNacgtn")
    where = f" of {os.fspath(source.path)!r}" if isinstance(source, Genome) else ""
    raise parameter_error(
        "extract_windows",
        "genome",
        "DNA made of A, C, G, T or N (either case) in every window",
        f"the letter {seq[pos]!r} at position {start + pos} of record {chrom!r}{where} (window "
        f"{kept.labels([i])[0]})",
        "Replace other IUPAC codes in the FASTA by N, or drop that region.",
        described=True,
    )


def _warn_dropped(
    regions: Regions,
    missing: np.ndarray,
    off_end: np.ndarray,
    func: str,
    sizes: dict[str, int],
) -> None:
    parts = []
    if off_end.any():
        shown = ", ".join(regions.labels(np.flatnonzero(off_end)[:_EXAMPLES_SHOWN]))
        more = ", ..." if off_end.sum() > _EXAMPLES_SHOWN else ""
        parts.append(f"{int(off_end.sum())} running off a chromosome end ({shown}{more})")
    if missing.any():
        chroms = list(dict.fromkeys(regions.chrom[missing].tolist()))
        shown = ", ".join(repr(c) for c in chroms[:_EXAMPLES_SHOWN])
        more = ", ..." if len(chroms) > _EXAMPLES_SHOWN else ""
        names = list(sizes)
        known = ", ".join(names[: _EXAMPLES_SHOWN * 2]) + (", ..." if len(names) > 6 else "")
        parts.append(
            f"{int(missing.sum())} on chromosomes missing from the genome ({shown}{more}; the "
            f"genome has {known})"
        )
    n_dropped = int(off_end.sum() + missing.sum())
    warnings.warn(
        f"{func} dropped {n_dropped} of {len(regions)} windows: "
        + "; ".join(parts)
        + ". The kept windows keep their source rows (their index).",
        SeqAttribWarning,
        stacklevel=3,
    )


class GenomeWindows:
    """One-hot windows of a genome as a lazy array: nothing is read until rows are asked for,
    then one block of windows at a time (bounded memory for any number of regions).

    Pass it as X to any method. Windows must lie inside the genome (see ``genome_windows``).

    Parameters
    ----------
    genome : Genome
    regions : Regions
        Windows of ``length`` (``read_regions(path, length=...)``).
    length : int
    layout : {"NLC", "NCL"}
        ``(n, length, 4)`` or ``(n, 4, length)``.
    """

    def __init__(
        self,
        genome: Genome,
        regions: Regions,
        length: int,
        layout: Literal["NLC", "NCL"],
        from_fasta: bool = False,
    ) -> None:
        self.genome, self.regions, self.length, self.layout = genome, regions, length, layout
        self.from_fasta = from_fasta
        n = len(regions)
        self.shape = (n, length, 4) if layout == "NLC" else (n, 4, length)
        self.dtype = np.dtype(np.int8)
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def provenance(self) -> dict[str, str]:
        """Digests of the genome file and of the windows (stored with ``out`` files and
        compared on resume and merge)."""
        from .fingerprint import file_fingerprint, regions_fingerprint

        key = "fasta" if self.from_fasta else "genome"
        return {
            key: file_fingerprint(self.genome.path),
            "regions": regions_fingerprint(
                self.regions.chrom, self.regions.start, self.regions.end
            ),
        }

    def __getitem__(self, index: Any) -> np.ndarray:
        part = self.regions.take(np.arange(self.shape[0])[index])
        X, _, _ = extract_windows(
            self.genome, part, length=self.length, layout=self.layout, dtype=np.int8
        )
        return X


def genome_windows(
    genome: Genome | PathLike,
    regions: Regions,
    length: int,
    layout: Literal["NLC", "NCL"] = "NLC",
) -> GenomeWindows:
    """Lazy windows of ``length`` around ``regions``, dropping (with a warning that names them)
    those that run off a chromosome end or lie on a chromosome the genome lacks.

    Returns
    -------
    GenomeWindows
        Its ``regions`` are the kept windows, row for row.
    """
    genome = genome if isinstance(genome, Genome) else Genome(genome)
    length = check_length(length, "genome_windows")
    windows = regions.windows(length) if np.any(regions.end - regions.start != length) else regions
    sizes = genome.chrom_sizes
    size = np.array([sizes.get(c, -1) for c in windows.chrom], dtype=np.int64)
    fits = (size >= 0) & (windows.start >= 0) & (windows.end <= size)
    if not fits.all():
        _warn_dropped(windows, size < 0, (size >= 0) & ~fits, "genome_windows", sizes)
    kept = windows.take(fits)
    if len(kept) == 0:
        chroms = ", ".join(list(sizes)[:_EXAMPLES_SHOWN]) + (", ..." if len(sizes) > 3 else "")
        raise parameter_error(
            "genome_windows",
            "regions",
            "at least one window inside the genome",
            f"{len(regions)} regions, none inside {genome.path.name} (chromosomes {chroms})",
            "Check that the regions and the genome use the same assembly and chromosome names.",
            described=True,
        )
    return GenomeWindows(genome, kept, length, layout)


def _check_letters(path: PathLike) -> None:
    """Refuse, before any work, a letter other than A, C, G, T or N in a FASTA file."""
    bad = re.compile(r"[^ACGTNacgtn]")
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
    record, position = "", 0
    with gzip.open(path, "rt") if compressed else open(path) as handle:
        for lineno, text in enumerate(handle, start=1):
            line = text.strip()
            if not line or line.startswith(";"):
                continue
            if line.startswith(">"):
                record, position = line[1:].split()[0], 0
                continue
            found = bad.search(line)
            if found:
                raise parameter_error(
                    "fasta_windows",
                    "path",
                    "a FASTA file of A, C, G, T and N (either case)",
                    f"the letter {found.group()!r} at position {position + found.start()} of "
                    f"record {record!r} (line {lineno}) of {os.fspath(path)!r}",
                    "Replace other IUPAC codes by N, or remove that record.",
                    described=True,
                )
            position += len(line)


def fasta_windows(path: PathLike, layout: Literal["NLC", "NCL"] = "NLC") -> GenomeWindows:
    """Every sequence of a FASTA file of equal-length sequences, as lazy one-hot windows."""
    genome = Genome(path)
    sizes = genome.chrom_sizes
    lengths = set(sizes.values())
    if len(lengths) != 1:
        raise parameter_error(
            "fasta_windows",
            "path",
            "a FASTA file of sequences of one length",
            f"lengths {sorted(lengths)[:5]}",
            "Cut or pad the sequences, or use a genome with regions and a window length.",
            described=True,
        )
    _check_letters(path)
    length = lengths.pop()
    names = list(sizes)
    regions = Regions.from_arrays(names, np.zeros(len(names)), np.full(len(names), length))
    return GenomeWindows(genome, regions, length, layout, from_fasta=True)
