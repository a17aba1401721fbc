"""Faults around an effects table, each a one-line error that names the parameter (or flag) and
the way out: a VCF compressed with plain gzip instead of bgzip, and a full disk while the list of
skipped variants or a merged table is written (nothing half-written is left, a rerun resumes)."""

from __future__ import annotations

import errno
import gzip
import io
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import make_model
from variant_cases import L, make_genome, other_base, skipped_cases

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.variants import merge_effects, read_effects, table_merge
from seqattrib.variants import table as effects_table

sys.path.insert(0, str(Path(__file__).parents[1] / "faults"))
from _faults import leftovers, tmpfs_mounts  # noqa: E402

NO_SPACE = "No space left on device"
KWARGS = dict(length=L, target=[0, 2], score="delta", max_cpu_sequences=3)
GENOME = make_genome()


def _variants():
    g = GENOME["chr1"]
    pos = list(range(40, 360, 40))
    cases = [("chr1", p, g[p - 1], other_base(g[p - 1])) for p in pos]
    cases += [c for c, reason in skipped_cases(GENOME) if reason == "ref_mismatch"]
    return {
        "chrom": [c[0] for c in cases],
        "pos": [c[1] for c in cases],
        "id": [f"v{i}" for i in range(len(cases))],
        "ref": [c[2] for c in cases],
        "alt": [c[3] for c in cases],
    }


VARIANTS = _variants()


@pytest.fixture(scope="module")
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


def _one_line(message: str) -> str:
    assert "\n" not in message.strip(), message
    return message


# --------------------------------------------------------------------------- plain gzip
def _vcf_text():
    g = GENOME["chr1"]
    lines = [
        "##fileformat=VCFv4.2",
        f"##contig=<ID=chr1,length={len(g)}>",
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO",
    ]
    lines += [f"chr1\t{p}\tv{p}\t{g[p - 1]}\t{other_base(g[p - 1])}\t.\t.\t." for p in (60, 90)]
    return "\n".join(lines) + "\n"


def test_a_plain_gzip_vcf_is_a_one_line_error(tmp_path, model, capsys):
    pysam = pytest.importorskip("pysam")
    plain = tmp_path / "calls.vcf"
    plain.write_text(_vcf_text())
    gz = tmp_path / "calls.vcf.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(ValueError) as info:
        sa.variant_effects(model, GENOME, gz, **KWARGS)
    message = _one_line(str(info.value))
    assert message.startswith("The 'variants' parameter of variant_effects")
    assert "compressed with plain gzip" in message
    assert "zcat calls.vcf.gz | bgzip > calls.vcf.bgz" in message and "bgzip -d" in message
    # the same file compressed with bgzip is read, and gives the plain file's effects
    bgz = tmp_path / "calls.vcf.bgz"
    pysam.tabix_compress(str(plain), str(bgz))
    a = sa.variant_effects(model, GENOME, bgz, **KWARGS)
    b = sa.variant_effects(model, GENOME, plain, **KWARGS)
    np.testing.assert_array_equal(a.scores["delta"], b.scores["delta"])
    assert a.variants["pos"].tolist() == [60, 90]
    fasta = tmp_path / "genome.fa"
    fasta.write_text("".join(f">{name}\n{seq}\n" for name, seq in GENOME.items()))
    argv = ["variants", "--model", "seqattrib.demo:torch_model", "--genome", str(fasta),
            "--length", "200", "--out", str(tmp_path / "e.tsv"), "--quiet"]  # fmt: skip
    argv += ["--vcf", str(gz)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert _one_line(err).startswith("seqattrib variants: error: --vcf/--table must be a VCF")
    assert "zcat calls.vcf.gz | bgzip" in err


# --------------------------------------------------------------------------- full disk
@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mounts(tmp_path) as mount:
        yield mount


class _FullDisk(io.StringIO):
    """A text file whose writes fail as on a full disk."""

    def write(self, text):
        raise OSError(errno.ENOSPC, NO_SPACE)


def _check_disk_error(info, path_part):
    message = _one_line(str(info.value))
    assert info.value.errno == errno.ENOSPC and NO_SPACE in message
    assert path_part in message and "Free space" in message
    return message


def test_a_full_disk_while_writing_the_skipped_list(tmpfs, model):
    alone = sa.variant_effects(model, GENOME, VARIANTS, **KWARGS)
    fs = tmpfs("1m")
    out = fs.path / "effects.tsv"
    ballast = fs.fill(leave=2 * 4096)  # the table's first lines, not the list beside it
    with pytest.raises(OSError) as info:
        sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    message = _check_disk_error(info, "effects.skipped.tsv")
    assert message.startswith("The 'out' parameter of variant_effects")
    assert leftovers(fs.path) == [] and not (fs.path / "effects.skipped.tsv.new").exists()
    ballast.unlink()
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    table = read_effects(out)
    np.testing.assert_array_equal(table.columns["delta_2"], alone.scores["delta"][:, 1])
    assert (fs.path / "effects.skipped.tsv").read_text().count("\n") == 2


def test_an_injected_full_disk_while_writing_the_skipped_list(monkeypatch, tmp_path, model):
    out = tmp_path / "effects.tsv"
    opened = open

    def failing(path, mode="r", *args, **kwargs):
        if str(path).endswith(".skipped.tsv.new"):
            opened(path, mode).close()
            return _FullDisk()
        return opened(path, mode, *args, **kwargs)

    monkeypatch.setattr(effects_table, "open", failing, raising=False)
    with pytest.warns(sa.SeqAttribWarning), pytest.raises(OSError) as info:
        sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    _check_disk_error(info, "effects.skipped.tsv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["effects.tsv"]


@pytest.fixture(scope="module")
def shards(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    paths = [folder / f"effects.{i}.tsv" for i in range(2)]
    for i, path in enumerate(paths):
        sa.variant_effects(model, GENOME, VARIANTS, out=path, shard=(i, 2), **KWARGS)
    return paths


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
def test_a_full_disk_while_merging(tmpfs, model, shards, suffix):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    fs = tmpfs("1m")
    out = fs.path / f"merged.{suffix}"
    ballast = fs.fill(leave=0)
    with pytest.raises(OSError) as info:
        merge_effects(shards, out)
    message = _check_disk_error(info, str(out))
    assert message.startswith("The 'out' parameter of merge_effects")
    assert sorted(p.name for p in fs.path.iterdir()) == [ballast.name]
    ballast.unlink()
    merge_effects(shards, out)
    alone = sa.variant_effects(model, GENOME, VARIANTS, **KWARGS)
    np.testing.assert_array_equal(read_effects(out).columns["delta_0"], alone.scores["delta"][:, 0])


def test_an_injected_full_disk_while_merging(monkeypatch, tmp_path, shards):
    out = tmp_path / "merged.tsv"
    opened = open

    def failing(path, mode="r", *args, **kwargs):
        if "w" in mode:
            opened(path, mode).close()
            return _FullDisk()
        return opened(path, mode, *args, **kwargs)

    monkeypatch.setattr(table_merge, "open", failing, raising=False)
    with pytest.raises(OSError) as info:
        merge_effects(shards, out)
    _check_disk_error(info, str(out))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    main(["merge", *map(str, shards), "-o", str(out)])
    assert len(read_effects(out).columns["pos"]) == len(VARIANTS["pos"]) - 1
