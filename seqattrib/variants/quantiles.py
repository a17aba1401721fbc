"""Allele quantiles: each allele's prediction as a quantile of the model's predictions on peaks.

The peak predictions are made once per job, by the table's own scoring (same model, head,
targets, strands, shifts and window length) on a window of ``length`` centred on each peak
(the summit of a narrowPeak, else the centre ``(start + end) // 2``; the window rule of
``seqattrib.io.read_regions``). The quantile of a prediction x among the n peak predictions of
its target is ``#{peak < x} / n`` (the allele percentile of ChromBPNet's variant scorer, as a
fraction): 0 below every peak, near 1 above almost all of them. ``active_quantile`` is the larger
of the two alleles' quantiles, the quantile of the "active" allele.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning, parameter_error, user_stacklevel
from ..io.regions import Regions, read_regions
from .null import genome_fetcher
from .windows import centre

#: The quantities the quantiles add to the table (one column per target each).
NAMES = ("ref_quantile", "alt_quantile", "active_quantile")
_BASES = "ACGTN"


def peak_windows(peaks: Any, sizes: Mapping[str, int], length: int, pad: int, func: str) -> Regions:
    """The distinct windows of ``length`` centred on ``peaks`` that lie, widened by ``pad``
    bases on each side (the window shifts), inside their chromosomes.

    A peak set on chromosomes the genome lacks, or with peaks past a chromosome's end, is
    refused (it comes from another assembly); windows of peaks near a chromosome end that do
    not fit are left out, with a warning.
    """
    if isinstance(peaks, (str, os.PathLike)):
        if not os.path.isfile(peaks):
            raise parameter_error(
                func, "peaks", "a BED or narrowPeak file", peaks, error=FileNotFoundError
            )
        regions, windows = read_regions(peaks), read_regions(peaks, length=length)
    elif isinstance(peaks, Regions):
        regions, windows = peaks, peaks.windows(length)
    else:
        raise parameter_error(
            func,
            "peaks",
            "None, a BED/narrowPeak path or a seqattrib.io.Regions",
            type(peaks).__name__,
            error=TypeError,
            described=True,
        )
    if not len(regions):
        raise parameter_error(
            func, "peaks", "at least one peak", "an empty peak set", described=True
        )
    missing = sorted({str(c) for c in regions.chrom if c not in sizes})
    if missing:
        raise parameter_error(
            func,
            "peaks",
            "peaks on the genome's chromosomes",
            f"peaks on {len(missing)} chromosome(s) the genome lacks (first: {missing[0]!r})",
            "Use a peak set of the genome's assembly and chromosome names.",
            described=True,
        )
    size = np.array([sizes[c] for c in regions.chrom], dtype=np.int64)
    past = np.flatnonzero(regions.end > size)
    if len(past):
        i = int(past[0])
        raise parameter_error(
            func,
            "peaks",
            "peaks inside their chromosomes",
            f"{len(past)} peak(s) past a chromosome's end (first: {regions.labels([i])[0]}, "
            f"{regions.chrom[i]} has {size[i]} bases)",
            "Use a peak set of the genome's assembly.",
            described=True,
        )
    fits = (windows.start - pad >= 0) & (windows.end + pad <= size)
    if not fits.all():
        warnings.warn(
            f"{func}: {int((~fits).sum())} of {len(fits)} peaks left out of the peak quantiles: "
            f"their windows of {length} bases (and shifts) run past a chromosome end.",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )
    if not fits.any():
        raise parameter_error(
            func,
            "peaks",
            f"peaks whose windows of {length} bases fit inside their chromosomes",
            f"none of {len(fits)}",
            described=True,
        )
    windows = windows.take(np.flatnonzero(fits))
    first: dict[tuple[str, int], int] = {}  # identical windows (duplicated peaks) count once
    for i, key in enumerate(zip(windows.chrom.tolist(), windows.start.tolist(), strict=True)):
        first.setdefault(key, i)
    return windows.take(sorted(first.values()))


def peaks_fingerprint(windows: Regions) -> str:
    """A digest of the peak windows (recorded with the table's settings)."""
    digest = hashlib.blake2b(digest_size=16)
    for chrom, start, end in zip(windows.chrom, windows.start, windows.end, strict=True):
        digest.update(f"{chrom}\t{start}\t{end}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def peak_table(windows: Regions, genome: Any, length: int) -> dict[str, list[Any]]:
    """One single-base pseudo-variant per window at its centre (REF: the genome's base there),
    whose reference window is the peak window: its ``ref`` prediction is the peak's."""
    fetch = genome_fetcher(genome)
    chroms, positions, refs, alts = [], [], [], []
    for chrom, start in zip(windows.chrom, windows.start, strict=True):
        at = int(start) + centre(length)
        ref = fetch(str(chrom), at, at + 1).upper()
        if ref not in _BASES:
            continue  # another IUPAC letter: not a scorable window (the genome's error names it)
        chroms.append(str(chrom))
        positions.append(at + 1)
        refs.append(ref)
        alts.append("C" if ref == "A" else "A")
    return {
        "chrom": chroms,
        "pos": positions,
        "id": [f"peak{i}" for i in range(len(chroms))],
        "ref": refs,
        "alt": alts,
    }


def ranked_peaks(peaks: np.ndarray) -> np.ndarray:
    """The finite peak predictions of one target, sorted (float64)."""
    return np.sort(peaks[np.isfinite(peaks)].astype(np.float64))


def quantiles(values: np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """``#{peak < x} / n`` of each x among the n peak predictions of one target.

    Parameters
    ----------
    values : array of shape (n_variants,)
    ranked : array of shape (n,)
        The finite peak predictions, sorted (``ranked_peaks``).

    Returns
    -------
    array of float32, shape (n_variants,)
        NaN where ``values`` is NaN.
    """
    value = values.astype(np.float64)
    q = np.searchsorted(ranked, value, side="left") / max(len(ranked), 1)
    return np.where(np.isnan(value), np.nan, q).astype(np.float32)


class PeakQuantiles:
    """The peak predictions and the ``ref_quantile``, ``alt_quantile`` and ``active_quantile``
    columns of a block of the table.

    Parameters
    ----------
    predictions : array of shape (n_peaks, K)
    """

    names = NAMES

    def __init__(self, predictions: np.ndarray) -> None:
        self.ranked = [ranked_peaks(predictions[:, k]) for k in range(predictions.shape[1])]

    def __call__(self, out: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = {
            f"{allele}_quantile": np.stack(
                [quantiles(out[allele][:, k], r) for k, r in enumerate(self.ranked)], axis=1
            )
            for allele in ("ref", "alt")
        }
        result["active_quantile"] = np.maximum(result["ref_quantile"], result["alt_quantile"])
        return result
