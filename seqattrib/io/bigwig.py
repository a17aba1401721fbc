"""bigWig tracks of per-base scores over genome windows (pyBigWig, imported when first used)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import deprecated_alias, parameter_error, refuse_existing
from .._optional import import_optional
from .fasta import PathLike
from .fasta import chrom_sizes as read_chrom_sizes
from .regions import Regions, check_regions


def resolve_overlaps(starts: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which part of each window of one chromosome a track keeps.

    Every base covered by a window goes to the covering window whose centre (base
    ``start + length // 2``) is nearest, so overlaps are cut at the midpoint between centres. A
    base exactly halfway between two centres goes to the upstream window (smaller start); of
    windows with the same start, the first one (in input order) keeps everything.

    Parameters
    ----------
    starts : array of int, shape (n_windows,)
        Window starts on one chromosome, in any order; every window has ``length`` bases.
    length : int

    Returns
    -------
    order : ndarray of int64, shape (n_kept,)
        The windows that keep at least one base, by increasing start.
    lo, hi : ndarray of int64, shape (n_kept,)
        Each kept window's bases ``lo .. hi - 1`` (genome coordinates): sorted, non-overlapping
        and covering exactly the union of the windows.
    """
    starts = np.asarray(starts, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    first = np.ones(order.size, dtype=bool)
    first[1:] = starts[order][1:] != starts[order][:-1]
    order = order[first]
    a = starts[order]
    lo, hi = a.copy(), a + length
    overlap = a[1:] < hi[:-1]
    # Base x goes upstream iff x - c_i <= c_j - x, i.e. x <= (a_i + a_j) // 2 + length // 2.
    cut = (a[:-1] + a[1:]) // 2 + length // 2 + 1
    hi[:-1] = np.where(overlap, cut, hi[:-1])
    lo[1:] = np.where(overlap, cut, lo[1:])
    return order, lo, hi


@deprecated_alias(path="out")
def write_bigwig(
    out: PathLike,
    scores: Any,
    regions: Regions,
    chrom_sizes: Mapping[str, int] | PathLike,
    *,
    overwrite: bool = False,
) -> Path:
    """Write per-base scores of genome windows as a bigWig track.

    Use this for a genome browser view of projected attributions (``seqattrib.project``) of
    one target; write one file per target class.

    Parameters
    ----------
    out : str or path
        The bigWig to write. It appears only when complete (written beside it, then renamed).
    scores : array of shape (n_windows, length)
        One score per base of each window, finite.
    regions : Regions
        The windows, row for row with ``scores`` (e.g. ``kept`` of ``extract_windows``); every
        window has ``length`` bases and lies inside its chromosome.
    chrom_sizes : dict of str to int, or path of a chrom sizes file
        The header, in this order (bigWig entries follow it).
    overwrite : bool
        Replace an existing file; without it an existing file is an error.

    Returns
    -------
    Path
        The file written.

    Notes
    -----
    Entries are sorted and never overlap: where windows overlap, each base keeps the score of the
    covering window whose centre (base ``start + length // 2``) is nearest; a base exactly halfway
    goes to the upstream window, and of identical windows the first one wins (see
    :func:`resolve_overlaps`). Bases outside every window have no value.
    """
    func = "write_bigwig"
    out = Path(out)
    refuse_existing(func, "out", out, overwrite)
    if not out.parent.is_dir():
        raise parameter_error(
            func,
            "out",
            "a path in an existing folder",
            os.fspath(out),
            f"Create {os.fspath(out.parent)} first.",
        )
    check_regions(regions, func)
    values = np.asarray(scores, dtype=np.float32)
    if values.ndim != 2 or values.shape[0] != len(regions) or values.shape[0] == 0:
        raise parameter_error(
            func,
            "scores",
            f"an array of shape (n_windows, length) with one row per region ({len(regions)})",
            f"shape {values.shape}",
            "Project attributions first (seqattrib.project) and pick one target: scores[:, k].",
            described=True,
        )
    if not np.isfinite(values).all():
        raise parameter_error(func, "scores", "finite", "NaN or infinite values", described=True)
    length = values.shape[1]
    if np.any(regions.end - regions.start != length):
        bad = int(np.flatnonzero(regions.end - regions.start != length)[0])
        raise parameter_error(
            func,
            "regions",
            f"windows of {length} bases, the length of the score rows",
            f"window {regions.labels([bad])[0]}",
            described=True,
        )
    sizes = dict(chrom_sizes if isinstance(chrom_sizes, Mapping) else read_chrom_sizes(chrom_sizes))
    chroms, inverse = np.unique(regions.chrom, return_inverse=True)
    by_chrom = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(chroms)))[:-1]
    groups = dict(zip(map(str, chroms), np.split(by_chrom, bounds), strict=True))
    for chrom, rows in groups.items():
        size = sizes.get(chrom)
        outside = (
            rows if size is None else rows[(regions.start[rows] < 0) | (regions.end[rows] > size)]
        )
        if outside.size:
            where = "on a chromosome missing from chrom_sizes" if size is None else "outside"
            raise parameter_error(
                func,
                "regions",
                "windows inside the chromosomes of chrom_sizes",
                f"window {regions.labels(outside[:1])[0]} {where}",
                "Use the kept regions of extract_windows, with the genome's chrom sizes.",
                described=True,
            )

    _check_room(out, 8 * values.size + 64 * len(values) + 100 * len(sizes) + 2**20, func)
    pyBigWig = import_optional("pyBigWig")
    numpy_ok = bool(getattr(pyBigWig, "numpy", 0))  # builds without numpy take lists
    tmp = os.fspath(out.with_name(f".{out.name}.{os.getpid()}.tmp"))
    try:
        _check_writable(tmp, out, func)  # libBigWig crashes on a path it cannot create
        bw = pyBigWig.open(tmp, "w")
        try:
            bw.addHeader([(chrom, int(size)) for chrom, size in sizes.items()])
            for chrom in sizes:
                if chrom in groups:
                    rows = groups[chrom]
                    _add_chrom(bw, chrom, regions.start[rows], values[rows], length, numpy_ok)
        finally:
            bw.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


def _check_writable(tmp: str, out: Path, func: str) -> None:
    """Create ``tmp`` (empty), or refuse ``out`` with the reason the folder gives."""
    try:
        with open(tmp, "wb"):
            pass
    except OSError as exc:
        raise parameter_error(
            func,
            "out",
            "a file in a folder that can be written",
            f"{os.fspath(out)!r} ({exc.strerror or exc})",
            "Choose a writable folder.",
            error=OSError,
            described=True,
        ) from exc


def _check_room(out: Path, needed: int, func: str) -> None:
    """Refuse before writing when the folder lacks room: libBigWig does not report a full disk
    (it keeps retrying), so a bigWig is only started with room for it. The bound is 8 bytes
    per base (about 5.2 are used with incompressible scores) plus the headers."""
    if not hasattr(os, "statvfs"):  # pragma: no cover - Windows
        return
    stats = os.statvfs(out.parent)
    free = stats.f_bavail * stats.f_frsize
    if free < needed:
        raise parameter_error(
            func,
            "out",
            f"a file on a disk with room for it (up to {needed / 2**20:.1f} MiB)",
            f"{os.fspath(out)!r} with {free / 2**20:.1f} MiB free",
            "Free space, or write to another disk.",
            error=OSError,
            described=True,
        )


def _add_chrom(
    bw: Any, chrom: str, starts: np.ndarray, values: np.ndarray, length: int, numpy_ok: bool
) -> None:
    """Add one chromosome's windows as fixed-step runs (adjacent pieces merged)."""
    order, lo, hi = resolve_overlaps(starts, length)
    offset = lo - starts[order]
    run_start = 0
    for k in range(order.size):
        if k + 1 < order.size and hi[k] == lo[k + 1]:
            continue  # the next piece continues this run
        pieces = [
            values[order[j], offset[j] : offset[j] + hi[j] - lo[j]] for j in range(run_start, k + 1)
        ]
        run = np.concatenate(pieces).astype(np.float64)
        entries = run if numpy_ok else run.tolist()
        bw.addEntries(chrom, int(lo[run_start]), values=entries, span=1, step=1)
        run_start = k + 1
