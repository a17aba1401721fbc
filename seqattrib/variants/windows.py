"""The windows of a variant: where the reference and the alternative window lie, and their bases.

Convention (``docs/guide/variants.md`` shows pictures):

- ``s = pos - 1`` is the 0-based genome position of the first REF base (VCF ``POS``), ``r`` and
  ``a`` the lengths of REF and ALT (as written, anchor bases included), ``c = length // 2``.
- The **reference window** is ``genome[s - c, s - c + length)``: the first REF base is base ``c``
  of the window (the rule of ``seqattrib.io.read_regions`` for a centre base). Every allele of one
  position shares it, so it is computed once for all of them.
- The **alternative sequence** is ``genome[:s] + ALT + genome[s + r:]``. Its window of
  ``length`` is the reference window shifted by ``h = trunc((a - r) / 2)`` bases on that
  sequence: an insertion of ``d`` bases is trimmed by ``d // 2`` bases on the left and the rest on
  the right, a deletion of ``d`` bases is filled from the genome with ``d // 2`` bases on the left
  and the rest on the right. The variant stays centred in both windows; an SNV or any
  substitution of equal length (``h = 0``) changes only its own bases, so an SNV's alternative
  window is the reference window with base ``c`` replaced (the ISM mutant at ``c``).
"""

from __future__ import annotations

import numpy as np

from .._errors import parameter_error
from ..io.onehot import LOOKUP


def centre(length: int) -> int:
    """Index of the first REF base in both windows of ``length`` (before the shift)."""
    return length // 2


def shift(ref_length: int, alt_length: int) -> int:
    """``h``: how far the alternative window moves on the alternative sequence (toward zero)."""
    d = alt_length - ref_length
    return d // 2 if d >= 0 else -((-d) // 2)


def ref_span(start: int, length: int) -> tuple[int, int]:
    """Genome span ``[lo, hi)`` of the reference window of a variant at 0-based ``start``."""
    lo = start - centre(length)
    return lo, lo + length


def alt_spans(
    start: int, ref_length: int, alt_length: int, length: int
) -> tuple[tuple[int, int], int, tuple[int, int]]:
    """The alternative window as pieces: the genome span on the left of ALT, how many leading
    ALT bases fall before the window, and the genome span on the right of REF.

    The window is ``genome[left] + ALT[skip:] + genome[right]``, cut to ``length`` bases.
    """
    lo = start - centre(length) + shift(ref_length, alt_length)
    left = (min(lo, start), start)
    skip = max(0, lo - start)
    used = (left[1] - left[0]) + max(0, alt_length - skip)
    after = start + ref_length
    right = (after, after + max(0, length - used))
    return left, skip, right


def genome_span(start: int, ref_length: int, alt_length: int, length: int) -> tuple[int, int]:
    """Genome bases both windows need: ``[lo, hi)`` (outside a chromosome: the variant is skipped
    as too close to its end)."""
    ref_lo, ref_hi = ref_span(start, length)
    left, _, right = alt_spans(start, ref_length, alt_length, length)
    return min(ref_lo, left[0]), max(ref_hi, right[1])


def alt_window_text(fetch: object, chrom: str, start: int, ref: str, alt: str, length: int) -> str:
    """The alternative window's bases; ``fetch(chrom, lo, hi)`` returns genome text."""
    left, skip, right = alt_spans(start, len(ref), len(alt), length)
    text = fetch(chrom, *left) + alt[skip:] + fetch(chrom, *right)  # type: ignore[operator]
    return text[:length]


_EYE = np.vstack([np.eye(4, dtype=np.int8), np.zeros((1, 4), np.int8)])


def encode(texts: list[str], length: int, labels: list[str], func: str) -> np.ndarray:
    """One-hot ``(n, length, 4)`` int8 of equal-length texts over ACGTN (either case); another
    letter is an error naming the variant (``labels``) and the letter."""
    joined = "".join(texts).encode("latin-1", "replace")
    codes = LOOKUP[np.frombuffer(joined, dtype=np.uint8)].reshape(len(texts), length)
    bad = codes == 255
    if bad.any():
        row, pos = (int(v) for v in np.argwhere(bad)[0])
        raise parameter_error(
            func,
            "genome",
            "DNA made of A, C, G, T or N (either case) around every variant",
            f"the letter {texts[row][pos]!r} at position {pos} of a window of {labels[row]}",
            "Replace other IUPAC codes in the FASTA by N.",
            described=True,
        )
    return _EYE[codes]
