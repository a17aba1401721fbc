"""FASTA, chrom sizes, BED/narrowPeak windows against hand-computed coordinates."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import seqattrib as sa
from seqattrib.io import (
    Genome,
    Regions,
    chrom_sizes,
    extract_windows,
    read_fasta,
    read_regions,
    write_bed,
)

#       0123456789 0123456789
CHR1 = "ACGGTCAANNgtacCATGCA"  # 20 bases: N at 8-9, soft-masked 10-13
CHR2 = "NNNNACGTNN"  # 10 bases
FASTA = f""">chr1 first chromosome, with a description
{CHR1[:8]}
{CHR1[8:16]}
{CHR1[16:]}

>chr2
{CHR2}
"""
BED = """track name=peaks
browser position chr1:1-20
# a comment
chr1\t4\t12\tr0
chr1\t0\t3\tr1
chr2\t2\t8\tr2
chrUn\t0\t10\tr3
chr1\t15\t20\tr4
"""
#                                            column 10: summit offset from start
NARROWPEAK = """chr1\t2\t18\tp0\t0\t.\t0\t0\t0\t5
chr1\t2\t18\tp1\t0\t.\t0\t0\t0\t-1
chr1\t0\t20\tp2\t0\t.\t0\t0\t0\t1
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def fasta(tmp_path: Path) -> Path:
    return _write(tmp_path / "genome.fa", FASTA)


@pytest.fixture
def bed(tmp_path: Path) -> Path:
    return _write(tmp_path / "regions.bed", BED)


def _backends() -> list[str]:
    try:
        import pyfaidx  # noqa: F401
    except ImportError:
        return ["memory"]
    return ["memory", "pyfaidx"]


def test_read_fasta_multiline_description_lowercase(fasta: Path, tmp_path: Path):
    assert read_fasta(fasta) == {"chr1": CHR1, "chr2": CHR2}
    gz = tmp_path / "genome.fa.gz"
    gz.write_bytes(gzip.compress(FASTA.encode()))
    assert read_fasta(gz) == {"chr1": CHR1, "chr2": CHR2}


def test_read_fasta_errors(tmp_path: Path):
    with pytest.raises(ValueError, match="unique sequence names.*'chr1' twice"):
        read_fasta(_write(tmp_path / "dup.fa", ">chr1\nACGT\n>chr1 again\nAC\n"))
    with pytest.raises(ValueError, match="starting with a '>' line"):
        read_fasta(_write(tmp_path / "bare.fa", "ACGT\n"))


@pytest.mark.parametrize("backend", _backends())
def test_genome_backends_fetch_like_slicing(fasta: Path, backend: str):
    with Genome(fasta, backend=backend) as genome:
        assert genome.chrom_sizes == {"chr1": 20, "chr2": 10}
        assert "chr2" in genome and "chrUn" not in genome and list(genome) == ["chr1", "chr2"]
        assert genome.fetch("chr1", 6, 14) == CHR1[6:14] == "AANNgtac"
        assert genome.fetch("chr2", 0, 10) == CHR2
        with pytest.raises(ValueError, match="inside chr1"):
            genome.fetch("chr1", 15, 21)


def test_genome_index_goes_to_the_cache_and_never_beside_the_fasta(
    fasta: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    pytest.importorskip("pyfaidx")
    monkeypatch.setenv("SEQATTRIB_CACHE", str(tmp_path / "cache"))
    with Genome(fasta, backend="pyfaidx") as genome:
        assert genome.fetch("chr1", 0, 4) == "ACGG"
    assert not Path(f"{fasta}.fai").exists()
    (index,) = (tmp_path / "cache" / "fai").iterdir()
    assert index.name.startswith("genome.fa.")
    with Genome(fasta, backend="pyfaidx") as genome:  # reused, not rebuilt
        assert genome.fetch("chr2", 4, 8) == "ACGT"
    assert list((tmp_path / "cache" / "fai").iterdir()) == [index]


def test_an_index_beside_the_fasta_is_used(fasta: Path, tmp_path: Path, monkeypatch):
    pyfaidx = pytest.importorskip("pyfaidx")
    pyfaidx.Fasta(str(fasta)).close()  # samtools-style genome.fa.fai
    monkeypatch.setenv("SEQATTRIB_CACHE", str(tmp_path / "cache"))
    with Genome(fasta, backend="pyfaidx") as genome:
        assert genome.fetch("chr1", 0, 4) == "ACGG"
    assert not (tmp_path / "cache").exists()


def test_plain_gzip_genomes_say_bgzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("pyfaidx")
    monkeypatch.setenv("SEQATTRIB_CACHE", str(tmp_path / "cache"))
    gz = tmp_path / "genome.fa.gz"
    gz.write_bytes(gzip.compress(FASTA.encode()))
    with Genome(gz) as genome:  # small: read into memory
        assert genome.fetch("chr1", 0, 4) == "ACGG"
    with pytest.raises(ValueError, match="plain gzip.*bgzip"):
        Genome(gz, backend="pyfaidx").fetch("chr1", 0, 4)
    monkeypatch.setattr("seqattrib.io.fasta.MEMORY_LIMIT_BYTES", 10)
    with pytest.raises(ValueError, match="bgzip"):
        Genome(gz).fetch("chr1", 0, 4)


def test_genome_auto_without_pyfaidx_reads_small_files_only(
    fasta: Path, monkeypatch: pytest.MonkeyPatch
):
    def no_pyfaidx(name: str):
        raise ImportError("seqattrib needs 'pyfaidx' for this: pip install 'seqattrib[genome]'")

    monkeypatch.setattr("seqattrib.io.fasta.import_optional", no_pyfaidx)
    genome = Genome(fasta)
    assert genome.fetch("chr1", 0, 4) == "ACGG" and genome._records is not None
    monkeypatch.setattr("seqattrib.io.fasta.MEMORY_LIMIT_BYTES", 10)
    with pytest.raises(ImportError, match="seqattrib\\[genome\\]"):
        Genome(fasta).fetch("chr1", 0, 4)


def test_genome_errors(fasta: Path, tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="existing FASTA"):
        Genome(tmp_path / "absent.fa")
    with pytest.raises(ValueError, match="backend"):
        Genome(fasta, backend="twobit")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="chrUn"):
        Genome(fasta, backend="memory").fetch("chrUn", 0, 1)


def test_chrom_sizes_keeps_file_order(tmp_path: Path):
    path = _write(tmp_path / "g.chrom.sizes", "chr2\t10\n# note\nchr10 5\nchr1\t20\n")
    sizes = chrom_sizes(path)
    assert sizes == {"chr2": 10, "chr10": 5, "chr1": 20}
    assert list(sizes) == ["chr2", "chr10", "chr1"]
    with pytest.raises(ValueError, match="line 2"):
        chrom_sizes(_write(tmp_path / "bad.sizes", "chr1\t20\nchr2\tten\n"))
    with pytest.raises(ValueError, match="repeated name"):
        chrom_sizes(_write(tmp_path / "dup.sizes", "chr1\t20\nchr1\t20\n"))


def test_bed_as_written_and_as_centred_windows(bed: Path):
    regions = read_regions(bed)
    assert regions.chrom.tolist() == ["chr1", "chr1", "chr2", "chrUn", "chr1"]
    assert regions.start.tolist() == [4, 0, 2, 0, 15]
    assert regions.end.tolist() == [12, 3, 8, 10, 20]
    assert regions.name.tolist() == ["r0", "r1", "r2", "r3", "r4"]
    assert regions.index.tolist() == [0, 1, 2, 3, 4]
    assert regions.start.dtype == np.int64
    # Even length 6: centre (start + end) // 2 is base 3 of the window.
    even = read_regions(bed, length=6)
    assert even.start.tolist() == [5, -2, 2, 2, 14]
    assert even.end.tolist() == [11, 4, 8, 8, 20]
    # Odd length 5: the centre is the middle base.
    odd = read_regions(bed, length=5)
    assert odd.start.tolist() == [6, -1, 3, 3, 15]
    assert (odd.end - odd.start == 5).all()


def test_narrowpeak_windows_centre_on_the_summit(tmp_path: Path):
    path = _write(tmp_path / "peaks.narrowPeak", NARROWPEAK)
    peaks = read_regions(path, length=6)
    # summit 2 + 5 = 7 -> [4, 10); summit -1 -> centre 10 -> [7, 13); summit 0 + 1 -> [-2, 4)
    assert peaks.start.tolist() == [4, 7, -2]
    assert peaks.end.tolist() == [10, 13, 4]
    assert read_regions(path).start.tolist() == [2, 2, 0]  # no length: as written
    # the same file read as BED centres on the regions; 10 columns alone also means narrowPeak
    assert read_regions(path, length=6, format="bed").start.tolist() == [7, 7, 7]
    other = _write(tmp_path / "peaks.txt", NARROWPEAK)
    assert read_regions(other, length=6).start.tolist() == [4, 7, -2]


def test_bed12_column_10_is_not_a_summit(tmp_path: Path):
    row = "chr1\t2\t18\tb\t0\t+\t2\t18\t0\t1\t16,\t0,\n"
    path = _write(tmp_path / "genes.bed", row)
    assert read_regions(path, length=4).start.tolist() == [8]


def test_regions_files_errors(tmp_path: Path):
    header = _write(tmp_path / "header.bed", "chrom\tstart\tend\nchr1\t1\t5\n")
    assert read_regions(header).start.tolist() == [1]
    with pytest.raises(ValueError, match="line 3 of"):
        read_regions(_write(tmp_path / "bad.bed", "chr1\t1\t5\nchr1\t2\t9\nchr1\tx\t9\n"))
    with pytest.raises(ValueError, match="0 <= start <= end"):
        read_regions(_write(tmp_path / "neg.bed", "chr1\t9\t5\n"))
    with pytest.raises(ValueError, match="summit '30' for chr1:0-20 \\(row 0\\)"):
        read_regions(
            _write(tmp_path / "p.narrowPeak", "chr1\t0\t20\tp\t0\t.\t0\t0\t0\t30\n"), length=4
        )
    with pytest.raises(ValueError, match="positive int"):
        read_regions(header, length=0)


@pytest.mark.parametrize("backend", _backends())
def test_extract_windows_drops_and_reports_edges_and_missing_chroms(
    fasta: Path, bed: Path, backend: str
):
    regions = read_regions(bed, length=6)
    with pytest.warns(sa.SeqAttribWarning, match="dropped 2 of 5 windows") as record:
        X, kept, dropped = extract_windows(Genome(fasta, backend=backend), regions, length=6)
    message = str(record[0].message)
    assert "1 running off a chromosome end (chr1:-2-4 (row 1))" in message
    missing = "1 on chromosomes missing from the genome ('chrUn'; the genome has chr1, chr2)"
    assert missing in message
    assert kept.index.tolist() == [0, 2, 4] and dropped.index.tolist() == [1, 3]
    assert kept.start.tolist() == [5, 2, 14] and kept.name.tolist() == ["r0", "r2", "r4"]
    assert X.shape == (3, 6, 4) and X.dtype == np.float32
    assert sa.decode(X) == ["CAANNG", "NNACGT", "CATGCA"]
    # the window ending exactly at the chromosome end (20) is kept
    assert kept.end.tolist()[-1] == 20


def test_extract_windows_lowercase_n_layouts_and_int8(fasta: Path):
    genome = read_fasta(fasta)
    regions = Regions.from_arrays(["chr1"], [8], [14])  # "NNgtac"
    X, kept, _ = extract_windows(genome, regions, length=6)
    expected = np.array(
        [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]]
    )
    np.testing.assert_array_equal(X[0], expected)
    ncl, _, _ = extract_windows(fasta, regions, length=6, layout="NCL", dtype=np.int8)
    assert ncl.shape == (1, 4, 6) and ncl.dtype == np.int8
    np.testing.assert_array_equal(ncl[0], expected.T)
    np.testing.assert_array_equal(X, sa.one_hot(["NNGTAC"]))


def test_extract_windows_recentres_other_lengths_and_needs_one_length(fasta: Path):
    regions = Regions.from_arrays(["chr1", "chr1"], [4, 10], [12, 14], name=["a", "b"])
    X, kept, _ = extract_windows(fasta, regions, length=4)
    assert kept.start.tolist() == [6, 10] and kept.end.tolist() == [10, 14]
    assert sa.decode(X, alphabet_axis=-1) == ["AANN", "GTAC"]
    with pytest.raises(ValueError, match="lengths \\[4, 8\\]"):
        extract_windows(fasta, regions)


def test_extract_windows_bad_letter_names_region_and_letter(tmp_path: Path):
    fasta = _write(tmp_path / "iupac.fa", ">chrA\nACGTACGTRYAC\n")
    regions = Regions.from_arrays(["chrA", "chrA"], [0, 4], [8, 12])
    pattern = r"letter 'R' at position 8 of record 'chrA' \(window chrA:4-12 \(row 1\)\)"
    with pytest.raises(ValueError, match=pattern):
        extract_windows(read_fasta(fasta), regions, length=8)
    with pytest.raises(ValueError, match=r"record 'chrA' of '.*iupac.fa' \(window chrA:4-12"):
        extract_windows(fasta, regions, length=8)


def test_extract_windows_argument_errors(fasta: Path):
    regions = Regions.from_arrays(["chr1"], [0], [4])
    with pytest.raises(TypeError, match="Regions"):
        extract_windows(fasta, [("chr1", 0, 4)], length=4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="layout"):
        extract_windows(fasta, regions, length=4, layout="LC")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a Genome, a FASTA path"):
        extract_windows(42, regions, length=4)  # type: ignore[arg-type]


def test_write_bed_round_trip_and_refused_overwrite(bed: Path, tmp_path: Path):
    regions = read_regions(bed, length=6).take([0, 2, 4])
    out = write_bed(tmp_path / "kept.bed", regions)
    assert out.read_text().splitlines()[0] == "chr1\t5\t11\tr0"
    back = read_regions(out)
    for field in ("chrom", "start", "end", "name"):
        np.testing.assert_array_equal(getattr(back, field), getattr(regions, field))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_bed(out, regions)
    write_bed(out, regions.take([0]), overwrite=True)
    assert len(read_regions(out)) == 1


def test_regions_validate_their_columns():
    with pytest.raises(ValueError, match="'start' parameter of Regions"):
        Regions(np.array(["chr1"]), np.array([0, 1]), np.array([1]), np.array(["."]), [0])
    with pytest.raises(ValueError, match="at least start"):
        Regions.from_arrays(["chr1"], [5], [4])


def _cases_dir() -> Path:
    root = os.environ.get("SEQATTRIB_CASES")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "../shared/data/cases"
    return base / "gata_region"


def test_real_hg19_region_windows(tmp_path: Path):
    pytest.importorskip("pyfaidx")
    cases = _cases_dir()
    if not (cases / "gata4.fa").exists():
        pytest.skip(f"real validation data not found at {cases} (set SEQATTRIB_CASES)")
    fasta = cases / "gata4.fa"
    # the index goes to tmp_path: the shared data folder is never written
    genome = Genome(fasta, backend="pyfaidx", index_path=tmp_path / "gata4.fa.fai")
    ((name, size),) = genome.chrom_sizes.items()
    chrom, span = name.split(":")
    first, last = (int(v) for v in span.split("-"))
    assert (chrom, size) == ("chr8", last - first) == ("chr8", 131_072)
    regions = Regions.from_arrays(
        [name] * 4, [0, 65_000, 131_000, 129_000], [10, 65_010, 131_010, 129_010]
    )
    with pytest.warns(sa.SeqAttribWarning, match="dropped 2 of 4"):
        X, kept, _ = extract_windows(genome, regions, length=2114, dtype=np.int8)
    sequence = read_fasta(fasta)[name]
    starts = [65_005 - 1057, 129_005 - 1057]
    assert kept.start.tolist() == starts and kept.index.tolist() == [1, 3]
    assert sa.decode(X) == [sequence[s : s + 2114].upper() for s in starts]
    assert not any(p.name.endswith(".fai") for p in cases.iterdir())


def test_modules_import_no_optional_dependency():
    code = (
        "import sys, seqattrib.io.fasta, seqattrib.io.regions, seqattrib.io.windows\n"
        "import seqattrib.io.bigwig, seqattrib.plot\n"
        "print(','.join(m for m in ('matplotlib', 'pyBigWig', 'pyfaidx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


FAULTY_FASTA = {
    "empty": (b"", r"at least one '>' record\. Got '.*empty\.fa', empty"),
    "blank": (b"\n\n", r"at least one '>' record\. Got '.*blank\.fa', empty"),
    "no-header": (b"ACGT\nACGT\n", r"starting with a '>' line\. Got text before any '>' line"),
    "binary": (bytes(range(256)) * 8, r"a FASTA text file\. Got '.*binary\.fa', binary data"),
    "duplicate": (b">a\nACGT\n>b\nACGT\n>a\nACGT\n", r"unique sequence names\. Got .*'a' twice"),
}


@pytest.mark.parametrize("backend", ["pyfaidx", "memory"])
@pytest.mark.parametrize("name", list(FAULTY_FASTA))
def test_a_faulty_fasta_is_one_line_naming_path(tmp_path: Path, name: str, backend: str):
    content, pattern = FAULTY_FASTA[name]
    path = tmp_path / f"{name}.fa"
    path.write_bytes(content)
    for read in (
        lambda: Genome(path, backend=backend).chrom_sizes,
        lambda: sa.io.fasta_windows(path)[:],
        lambda: read_fasta(path),
    ):
        with pytest.raises(ValueError, match=r"The 'path' parameter of \w+ must be .*" + pattern):
            read()


def test_an_iupac_letter_in_a_fasta_names_letter_record_and_file(tmp_path: Path):
    path = _write(tmp_path / "seqs.fa", ">one\nACGTACGT\n>two desc\nACGT\nGTRC\n")
    pattern = r"'path' .*letter 'R' at position 6 of record 'two' \(line 5\) of '.*seqs.fa'"
    with pytest.raises(ValueError, match=pattern):
        sa.io.fasta_windows(path)  # at once, before any window is read
