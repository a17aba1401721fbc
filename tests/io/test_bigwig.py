"""bigWig export read back with pyBigWig: scores, header order, the overlap rule, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import seqattrib as sa
from seqattrib.io import Regions, read_regions
from seqattrib.io.bigwig import resolve_overlaps, write_bigwig

pyBigWig = pytest.importorskip("pyBigWig")

SIZES = {"chr2": 100, "chr1": 60}  # header order is the file's, not sorted


def brute_force_track(regions: Regions, scores: np.ndarray, chrom: str, size: int) -> np.ndarray:
    """Each base: the covering window with the nearest centre; ties upstream, then first row."""
    length = scores.shape[1]
    track = np.full(size, np.nan)
    for x in range(size):
        best: tuple[int, int, int] | None = None
        for i in np.flatnonzero(regions.chrom == chrom):
            start = int(regions.start[i])
            if start <= x < start + length:
                key = (abs(x - (start + length // 2)), start, int(i))
                best = key if best is None or key < best else best
        if best is not None:
            track[x] = scores[best[2], x - best[1]]
    return track


def read_track(path: Path, chrom: str, size: int) -> np.ndarray:
    with pyBigWig.open(os.fspath(path)) as bw:
        return np.asarray(bw.values(chrom, 0, size), dtype=np.float64)


def test_resolve_overlaps_cuts_at_the_midpoint_between_centres():
    # L = 10: centres 5 and 9; base 7 is halfway and goes upstream
    order, lo, hi = resolve_overlaps(np.array([4, 0]), 10)
    assert order.tolist() == [1, 0] and lo.tolist() == [0, 8] and hi.tolist() == [8, 14]
    # centres 35 and 40: base 37 is nearer the first, 38 the second
    _, lo, hi = resolve_overlaps(np.array([30, 35]), 10)
    assert lo.tolist() == [30, 38] and hi.tolist() == [38, 45]
    # three-way overlap, a duplicate (first row wins) and a separate window
    order, lo, hi = resolve_overlaps(np.array([44, 40, 42, 40, 80]), 10)
    assert order.tolist() == [1, 2, 0, 4]
    assert lo.tolist() == [40, 47, 49, 80] and hi.tolist() == [47, 49, 54, 90]


def test_write_bigwig_reads_back_with_overlaps_resolved(tmp_path: Path):
    rng = np.random.default_rng(0)
    regions = Regions.from_arrays(
        ["chr1", "chr1", "chr2", "chr1", "chr2", "chr2", "chr2", "chr1", "chr2", "chr1"],
        [4, 0, 25, 30, 20, 20, 40, 35, 42, 50],
        [14, 10, 35, 40, 30, 30, 50, 45, 52, 60],
    )
    scores = rng.normal(size=(len(regions), 10)).astype(np.float32)
    out = write_bigwig(tmp_path / "track.bw", scores, regions, SIZES)
    assert out == tmp_path / "track.bw"
    with pyBigWig.open(os.fspath(out)) as bw:
        assert bw.isBigWig() and bw.chroms() == SIZES
        for chrom in SIZES:
            starts = [iv[0] for iv in bw.intervals(chrom)]
            ends = [iv[1] for iv in bw.intervals(chrom)]
            assert starts == sorted(starts) and all(
                e <= s for e, s in zip(ends[:-1], starts[1:], strict=True)
            )
    for chrom, size in SIZES.items():
        expected = brute_force_track(regions, scores, chrom, size)
        np.testing.assert_array_equal(read_track(out, chrom, size), expected.astype(np.float32))
    # hand-checked bases: 7 halfway between centres 5 and 9 goes upstream (row 1), 8 downstream
    track = read_track(out, "chr1", 60)
    assert track[7] == scores[1, 7] and track[8] == scores[0, 4]
    # duplicates on chr2 at 20: the first row (4) wins
    assert read_track(out, "chr2", 100)[20] == scores[4, 0]


@pytest.mark.parametrize("length", [9, 10])
def test_write_bigwig_random_windows_equal_the_brute_force_rule(tmp_path: Path, length: int):
    rng = np.random.default_rng(length)
    n = 40
    chrom = rng.choice(["chr1", "chr2"], size=n)
    start = np.array([rng.integers(0, SIZES[c] - length + 1) for c in chrom])
    regions = Regions.from_arrays(chrom, start, start + length)
    scores = rng.normal(size=(n, length)).astype(np.float32)
    out = write_bigwig(tmp_path / "random.bw", scores, regions, SIZES)
    for c, size in SIZES.items():
        expected = brute_force_track(regions, scores, c, size).astype(np.float32)
        np.testing.assert_array_equal(read_track(out, c, size), expected)


def test_write_bigwig_refuses_an_existing_file(tmp_path: Path):
    regions = Regions.from_arrays(["chr1"], [0], [4])
    path = write_bigwig(tmp_path / "t.bw", np.ones((1, 4)), regions, SIZES)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_bigwig(path, np.zeros((1, 4)), regions, SIZES)
    assert read_track(path, "chr1", 4).tolist() == [1.0] * 4
    write_bigwig(path, np.full((1, 4), 2.0), regions, SIZES, overwrite=True)
    assert read_track(path, "chr1", 4).tolist() == [2.0] * 4
    assert [p.name for p in tmp_path.iterdir()] == ["t.bw"]  # no temporary file left


def test_write_bigwig_argument_errors(tmp_path: Path):
    regions = Regions.from_arrays(["chr1"], [0], [4])
    path = tmp_path / "e.bw"
    with pytest.raises(ValueError, match="one row per region"):
        write_bigwig(path, np.ones((2, 4)), regions, SIZES)
    with pytest.raises(ValueError, match="pick one target"):
        write_bigwig(path, np.ones((1, 2, 4)), regions, SIZES)
    with pytest.raises(ValueError, match="windows of 3 bases"):
        write_bigwig(path, np.ones((1, 3)), regions, SIZES)
    with pytest.raises(ValueError, match="finite"):
        write_bigwig(path, np.full((1, 4), np.nan), regions, SIZES)
    with pytest.raises(ValueError, match="chr1:58-62 \\(row 0\\) outside"):
        write_bigwig(path, np.ones((1, 4)), Regions.from_arrays(["chr1"], [58], [62]), SIZES)
    with pytest.raises(ValueError, match="missing from chrom_sizes"):
        write_bigwig(path, np.ones((1, 4)), Regions.from_arrays(["chrX"], [0], [4]), SIZES)
    with pytest.raises(TypeError, match="Regions"):
        write_bigwig(path, np.ones((1, 4)), [("chr1", 0, 4)], SIZES)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="existing folder"):
        write_bigwig(tmp_path / "no" / "e.bw", np.ones((1, 4)), regions, SIZES)
    assert not path.exists()


def test_write_bigwig_into_an_unwritable_folder_is_an_error_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # libBigWig crashes the interpreter on a path it cannot create: the folder is tried first
    import errno

    from seqattrib.io import bigwig

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def never(*args, **kwargs):
        raise AssertionError("pyBigWig.open was called on an unwritable path")

    monkeypatch.setattr(bigwig, "open", read_only, raising=False)
    monkeypatch.setattr(pyBigWig, "open", never)
    regions = Regions.from_arrays(["chr1"], [0], [4])
    with pytest.raises(OSError, match=r"'out' parameter.*e\.bw.*[Rr]ead-only"):
        write_bigwig(tmp_path / "e.bw", np.ones((1, 4)), regions, SIZES)
    assert list(tmp_path.iterdir()) == []


def _cases_dir() -> Path:
    root = os.environ.get("SEQATTRIB_CASES")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "../shared/data/cases"
    return base / "gata_region"


def test_real_gata_windows_on_hg19(tmp_path: Path):
    cases = _cases_dir()
    needed = ["gata4.fa", "hg19.chrom.sizes", "gata_window_hypothetical_NCL.npz"]
    if not all((cases / name).exists() for name in needed):
        pytest.skip(f"real validation data not found at {cases} (set SEQATTRIB_CASES)")
    header = (cases / "gata4.fa").open().readline().strip()[1:]
    chrom, span = header.split(":")
    first, last = (int(v) for v in span.split("-"))
    hypothetical = np.load(cases / "gata_window_hypothetical_NCL.npz")["arr_0"]
    onehot = np.load(cases / "gata_window_onehot_NCL.npz")["arr_0"]
    scores = sa.project(hypothetical, onehot, alphabet_axis=1)  # (6, 2114)
    # six 2114-bp windows around peak summits in the GATA4 region, real hg19 coordinates;
    # windows 0-1 and 3-4 overlap, 4 and 5 touch
    summits = first + np.array([20_000, 21_000, 40_000, 60_000, 61_500, 61_500 + 2114])
    bed = tmp_path / "peaks.bed"
    bed.write_text("".join(f"{chrom}\t{s}\t{s + 1}\tpeak{i}\n" for i, s in enumerate(summits)))
    regions = read_regions(bed, length=scores.shape[1])
    assert (regions.start >= first).all() and (regions.end <= last).all()
    out = write_bigwig(tmp_path / "gata.bw", scores, regions, cases / "hg19.chrom.sizes")
    with pyBigWig.open(os.fspath(out)) as bw:
        assert bw.chroms(chrom) == 146_364_022 and len(bw.chroms()) == 93
        track = np.asarray(bw.values(chrom, first, last), dtype=np.float64)
    shifted = Regions.from_arrays(regions.chrom, regions.start - first, regions.end - first)
    expected = brute_force_window_track(shifted, scores, last - first)
    np.testing.assert_array_equal(track, expected.astype(np.float32))
    assert np.isfinite(track).sum() == 6 * 2114 - (2114 - 1000) - (2114 - 1500)


def brute_force_window_track(regions: Regions, scores: np.ndarray, size: int) -> np.ndarray:
    """The brute-force rule, vectorised over bases (for long chromosomes)."""
    length = scores.shape[1]
    x = np.arange(size)[:, None]
    start = regions.start[None, :]
    covered = (x >= start) & (x < start + length)
    distance = np.where(covered, np.abs(x - (start + length // 2)), np.iinfo(np.int64).max)
    # ties: smaller start, then earlier row (argmin takes the first of equal keys)
    order = np.lexsort((np.arange(len(regions)), regions.start))
    best = order[np.argmin(distance[:, order], axis=1)]
    track = np.full(size, np.nan)
    hit = covered.any(axis=1)
    track[hit] = scores[best[hit], x[hit, 0] - regions.start[best[hit]]]
    return track
