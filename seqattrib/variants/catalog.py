"""Which variants are scored, and their windows, read as a stream in bounded memory.

A first pass over the records (``catalog``) splits multi-allelic records, checks REF against the
genome and decides which alleles are kept; it keeps 15 bytes per kept variant (chromosome,
position, whether it opens a new reference window, its SNV base) and the list of skipped ones.
Later passes (``VariantStream``) read the kept variants again in order, a bounded stretch at a
time, for their windows and their names in the table.
"""

from __future__ import annotations

import array
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..io.fasta import Genome
from . import windows
from .records import Records

#: Why a variant is skipped (the ``reason`` column of the skipped table).
REASONS = {
    "missing_chromosome": "on a chromosome the genome lacks",
    "symbolic": "symbolic, missing or not made of A, C, G, T, N",
    "no_change": "ALT equal to REF",
    "too_long": "an allele longer than the window",
    "chromosome_end": "too close to a chromosome end for the window",
    "ref_mismatch": "REF differs from the genome",
}
_BASES = "ACGTN"
_GENOME_BLOCK = 2**20


class GenomeText:
    """Genome bases by span, through a one-block cache (variants come sorted by position)."""

    def __init__(self, genome: Any, func: str) -> None:
        if isinstance(genome, (str, os.PathLike)):
            genome = Genome(genome)
        self._fetch: Callable[[str, int, int], str]
        if isinstance(genome, Genome):
            self.sizes = genome.chrom_sizes
            self._fetch = genome.fetch
            self.name = genome.path.name
            self.path: str | None = os.fspath(genome.path)
        elif isinstance(genome, Mapping):
            self.sizes = {str(c): len(s) for c, s in genome.items()}
            self._fetch = lambda chrom, lo, hi: genome[chrom][lo:hi]
            self.name = "a dict of sequences"
            self.path = None
        else:
            raise parameter_error(
                func,
                "genome",
                "a Genome, a FASTA path or a dict of name to sequence",
                type(genome).__name__,
                error=TypeError,
                described=True,
            )
        self._block: tuple[str, int, int, str] = ("", 0, 0, "")

    def fetch(self, chrom: str, lo: int, hi: int) -> str:
        name, b0, b1, text = self._block
        if not (name == chrom and b0 <= lo and hi <= b1):
            b0, b1 = lo, min(self.sizes[chrom], max(hi, lo + _GENOME_BLOCK))
            text = self._fetch(chrom, b0, b1)
            self._block = (chrom, b0, b1, text)
        return text[lo - b0 : hi - b0]


@dataclass(frozen=True)
class Variant:
    """One kept variant (one ALT allele of a record): its row in the table and its identity."""

    index: int
    chrom: str
    pos: int
    id: str
    ref: str
    alt: str

    @property
    def label(self) -> str:
        return f"{self.chrom}:{self.pos} {self.ref}>{self.alt}"


@dataclass
class Skipped:
    """Variants not scored, each with its reason (a key of ``REASONS``) and details."""

    rows: list[tuple[str, int, str, str, str, str, str]] = field(default_factory=list)

    COLUMNS = ("chrom", "pos", "id", "ref", "alt", "reason", "detail")

    def add(
        self, chrom: str, pos: int, id_: str, ref: str, alt: str, reason: str, detail: str
    ) -> None:
        self.rows.append((chrom, pos, id_, ref, alt, reason, detail))

    def __len__(self) -> int:
        return len(self.rows)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row[5]] = out.get(row[5], 0) + 1
        return out

    def summary(self, n_total: int) -> str:
        parts = []
        for reason, count in self.counts().items():
            first = next(r for r in self.rows if r[5] == reason)
            example = f"{first[0]}:{first[1]} {first[3]}>{first[4]}"
            detail = f", {first[6]}" if first[6] else ""
            parts.append(f"{count} {REASONS[reason]} (first: {example}{detail})")
        return f"skipped {len(self)} of {n_total} variants: " + "; ".join(parts)


@dataclass
class Catalog:
    """The kept variants of an input, in input order (multi-allelic records split)."""

    n_alleles: int
    kept: np.ndarray  # (n_alleles,) bool: which alleles, in input order, are scored
    chrom: np.ndarray  # (n,) int32 index into ``chroms``
    pos: np.ndarray  # (n,) int64, 1-based
    opens: np.ndarray  # (n,) bool: its reference window differs from the previous variant's
    snv_base: np.ndarray  # (n,) int8: the ALT base (0-3) of an SNV, else -1
    chroms: list[str]
    skipped: Skipped

    @property
    def n(self) -> int:
        return len(self.pos)


def _letters_ok(allele: str) -> bool:
    return bool(allele) and all(ch in _BASES for ch in allele)


def catalog(
    records: Records, genome: GenomeText, length: int, func: str, margin: int = 0
) -> Catalog:
    """Read every record once: split, check and keep (or skip, with the reason).

    ``margin``: genome bases needed on each side of both windows (shifted views of them).
    """
    kept = array.array("B")
    chrom_index, positions = array.array("i"), array.array("q")
    opens, snv = array.array("B"), array.array("b")
    chroms: dict[str, int] = {}
    skipped = Skipped()
    previous = (-1, -1)
    for rec in records():
        ref = rec.ref.upper()
        start = rec.pos - 1
        size = genome.sizes.get(rec.chrom)
        for raw_alt in rec.alts:
            alt = raw_alt.upper()
            reason, detail = "", ""
            if size is None:
                reason = "missing_chromosome"
            elif not (_letters_ok(ref) and _letters_ok(alt)):
                reason = "symbolic"
            elif alt == ref:
                reason = "no_change"
            elif max(len(ref), len(alt)) > length:
                reason = "too_long"
            else:
                lo, hi = windows.genome_span(start, len(ref), len(alt), length)
                if lo - margin < 0 or hi + margin > size:
                    reason = "chromosome_end"
                else:
                    found = genome.fetch(rec.chrom, start, start + len(ref)).upper()
                    if found != ref:
                        reason, detail = "ref_mismatch", f"the genome has {found}"
            kept.append(not reason)
            if reason:
                skipped.add(rec.chrom, rec.pos, rec.id, rec.ref, raw_alt, reason, detail)
                continue
            index = chroms.setdefault(rec.chrom, len(chroms))
            chrom_index.append(index)
            positions.append(rec.pos)
            opens.append((index, rec.pos) != previous)
            previous = (index, rec.pos)
            snv.append(_BASES.index(alt) if len(ref) == len(alt) == 1 and alt != "N" else -1)
    return Catalog(
        len(kept),
        np.frombuffer(kept, dtype=np.uint8).astype(bool),
        np.frombuffer(chrom_index, dtype=np.int32).copy(),
        np.frombuffer(positions, dtype=np.int64).copy(),
        np.frombuffer(opens, dtype=np.uint8).astype(bool),
        np.frombuffer(snv, dtype=np.int8).copy(),
        list(chroms),
        skipped,
    )


class VariantStream:
    """The kept variants read again in order, ``keep`` of them remembered behind the newest.

    Reads move forward; a read behind what is remembered starts the records again (correct,
    slower). Every consumer of one job (the engine's input, the kernel, the table) shares one
    stream, so the records are read once per job.
    """

    def __init__(
        self,
        records: Records,
        found: Catalog,
        genome: GenomeText,
        length: int,
        func: str,
        keep: int = 8192,
    ) -> None:
        self.records, self.catalog, self.genome = records, found, genome
        self.length, self.func, self.keep = length, func, keep
        self._buffer: list[Variant] = []
        self._first = 0
        self._iterator: Iterator[Variant] = self._kept(0)
        self._next = 0

    def _kept(self, start: int) -> Iterator[Variant]:
        kept, allele, index = self.catalog.kept, 0, 0
        for rec in self.records():
            for alt in rec.alts:
                if kept[allele]:
                    if index >= start:
                        yield Variant(index, rec.chrom, rec.pos, rec.id, rec.ref, alt)
                    index += 1
                allele += 1

    def variants(self, start: int, stop: int) -> list[Variant]:
        """Kept variants ``start .. stop - 1``."""
        if start < self._first:
            self._iterator = self._kept(start)
            self._buffer, self._first, self._next = [], start, start
        elif start > self._next:  # a gap ahead: read past it without remembering it
            for _ in range(start - self._next):
                next(self._iterator)
            self._buffer, self._first, self._next = [], start, start
        while self._next < stop:
            self._buffer.append(next(self._iterator))
            self._next += 1
        drop = min(start - self._first, len(self._buffer) - self.keep)
        if drop > self.keep:  # drop in large steps: amortised O(1) per variant
            del self._buffer[:drop]
            self._first += drop
        return self._buffer[start - self._first : stop - self._first]

    def ref_windows(self, variants: list[Variant]) -> np.ndarray:
        """(n, length, 4) int8 reference windows (one fetch per position)."""
        texts: list[str] = []
        last: tuple[str, int] | None = None
        for v in variants:
            if (v.chrom, v.pos) != last:
                text = self.genome.fetch(v.chrom, *windows.ref_span(v.pos - 1, self.length))
                last = (v.chrom, v.pos)
            texts.append(text)
        return windows.encode(texts, self.length, [v.label for v in variants], self.func)

    def alt_windows(self, variants: list[Variant], length: int | None = None) -> np.ndarray:
        """(n, length, 4) int8 alternative windows (of ``length``, default the stream's: a
        longer one is the window with genome bases added on both sides)."""
        size = self.length if length is None else length
        texts = [
            windows.alt_window_text(
                self.genome.fetch, v.chrom, v.pos - 1, v.ref, v.alt.upper(), size
            )
            for v in variants
        ]
        return windows.encode(texts, size, [v.label for v in variants], self.func)

    def flanks(self, variants: list[Variant], margin: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``margin`` genome bases on the left and on the right of each variant's reference
        window: two (n, margin, 4) int8 arrays."""
        texts: list[str] = []
        for v in variants:
            lo, hi = windows.ref_span(v.pos - 1, self.length)
            texts.append(self.genome.fetch(v.chrom, lo - margin, lo))
            texts.append(self.genome.fetch(v.chrom, hi, hi + margin))
        labels = [v.label for v in variants for _ in (0, 1)]
        both = windows.encode(texts, margin, labels, self.func)
        return both[0::2], both[1::2]

    def window_starts(self, allele: str) -> np.ndarray:
        """0-based genome start of every kept variant's ``allele`` window (``"ref"``/``"alt"``),
        the alternative one on the alternative sequence (its left flank's coordinates)."""
        n, step = self.catalog.n, 4096
        out = np.empty(n, np.int64)
        for a in range(0, n, step):
            for v in self.variants(a, min(n, a + step)):
                h = windows.shift(len(v.ref), len(v.alt)) if allele == "alt" else 0
                out[v.index] = windows.ref_span(v.pos - 1, self.length)[0] + h
        return out


class WindowArray:
    """The reference or alternative windows of the kept variants as a lazy array (the input of
    the engine and of the attribution methods): ``(n, length, 4)`` or ``(n, 4, length)`` int8."""

    def __init__(self, stream: VariantStream, allele: str, layout: str = "NLC") -> None:
        self.stream, self.allele, self.layout = stream, allele, layout
        n, length = stream.catalog.n, stream.length
        self.shape = (n, length, 4) if layout == "NLC" else (n, 4, length)
        self.dtype = np.dtype(np.int8)
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: slice) -> np.ndarray:
        if not isinstance(index, slice):
            raise TypeError("WindowArray reads slices of rows")
        start, stop, _ = index.indices(self.shape[0])
        variants = self.stream.variants(start, max(start, stop))
        if not variants:
            return np.zeros((0, *self.shape[1:]), np.int8)
        read = self.stream.ref_windows if self.allele == "ref" else self.stream.alt_windows
        x = read(variants)
        return x if self.layout == "NLC" else np.ascontiguousarray(x.transpose(0, 2, 1))
