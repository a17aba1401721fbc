"""VCF output of variant_effects: the input's records with one INFO key per value column, read
back through pysam with the values of the TSV table of the same run; resumed after an
interruption as if uninterrupted; refused with other settings; merged from shards (a
multi-allelic record split between two shards written once); bgzip with a tabix index, BCF with a
CSI index; a table input gives minimal records."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import make_model
from variant_cases import (  # noqa: F401 - the genome and fasta fixtures
    L,
    fasta_fixture,
    genome_fixture,
    make_genome,
    other_base,
    scored_cases,
    split,
)

import seqattrib as sa
from seqattrib.variants import merge_effects, read_effects
from seqattrib.variants import table as effects_table

pysam = pytest.importorskip("pysam")

KWARGS = dict(length=L, target=[0, 2], score=("delta", "log_ratio"), max_cpu_sequences=2)
VALUES = [f"{q}_{t}" for q in ("ref", "alt", "delta", "log_ratio") for t in (0, 2)]
GENOME = make_genome()
HEADER = (
    "##fileformat=VCFv4.2\n{contigs}"
    '##INFO=<ID=DP,Number=1,Type=Integer,Description="depth">\n'
    '##INFO=<ID=AF,Number=A,Type=Float,Description="allele frequency">\n'
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="genotype">\n'
    "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\n"
)


def _cases():
    """Scored variants (a multi-allelic record among them) and a record of one scored and one
    skipped (symbolic) ALT allele, and one record with no scored ALT allele."""
    g = GENOME["chr1"]
    cases = scored_cases(GENOME)
    cases.insert(2, ("chr1", 170, g[169], f"{other_base(g[169])},*"))
    cases.insert(3, ("chr1", 180, g[179], "<DEL>"))
    return cases


def write_vcf(path, cases):
    contigs = "".join(f"##contig=<ID={c},length={len(s)}>\n" for c, s in GENOME.items())
    lines = []
    for i, (c, p, r, a) in enumerate(cases):
        af = ",".join(["0.123456789"] * len(a.split(",")))
        lines.append(f"{c}\t{p}\tv{i}\t{r}\t{a}\t50\tPASS\tDP={i};AF={af}\tGT\t0/1\n")
    path.write_text(HEADER.format(contigs=contigs) + "".join(lines))
    return path


@pytest.fixture(scope="module")
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model):
    """The input VCF, and the TSV table of the run every VCF output is compared with."""
    folder = tmp_path_factory.mktemp("vcf_output")
    vcf = write_vcf(folder / "calls.vcf", _cases())
    with pytest.warns(sa.SeqAttribWarning, match="skipped"):
        sa.variant_effects(model, GENOME, vcf, out=folder / "effects.tsv", **KWARGS)
    return vcf, folder / "effects.tsv"


def _run(model, variants, out, **kwargs):
    with pytest.warns(sa.SeqAttribWarning, match="skipped"):
        return sa.variant_effects(model, GENOME, variants, out=out, **{**KWARGS, **kwargs})


def _text(path):
    """The VCF's text (decompressed; a BCF as htslib prints it)."""
    if str(path).endswith(".bcf"):
        with pysam.VariantFile(str(path)) as handle:
            return str(handle.header) + "".join(str(rec) for rec in handle)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        return handle.read()


@pytest.mark.parametrize("suffix", ["vcf", "vcf.gz", "bcf"])
def test_vcf_reads_back_with_the_tsv_values(tmp_path, model, runs, suffix):
    vcf, path = runs
    tsv = read_effects(path)
    out = tmp_path / f"effects.{suffix}"
    _run(model, vcf, out)
    with pysam.VariantFile(str(out)) as handle:
        info = handle.header.info
        for column in VALUES:  # one declared key per value column, one value per ALT allele
            key = info[f"SA_{column}"]
            assert (key.number, key.type) == ("A", "Float")
            assert key.description.endswith(f"target {column[-1]}")
        records = list(handle)
    # the records with a scored ALT allele, in input order, with their own fields kept
    cases = [c for c in _cases() if c[3] != "<DEL>"]
    assert [(r.chrom, r.pos, r.ref, r.alts) for r in records] == [
        (c, p, r, tuple(a.split(","))) for c, p, r, a in cases
    ]
    assert [r.info["DP"] for r in records] == [i for i, c in enumerate(_cases()) if c[3] != "<DEL>"]
    assert all(r.samples["s1"]["GT"] == (0, 1) for r in records)
    assert all(np.allclose(r.info["AF"], 0.123456789) for r in records)
    # the values of each scored ALT allele are the TSV table's (9 significant digits: float32)
    row = 0
    for rec in records:
        for a, alt in enumerate(rec.alts):
            if alt == "*":
                assert all(rec.info[f"SA_{c}"][a] is None for c in VALUES)
                continue
            assert (rec.chrom, rec.pos, rec.ref, alt) == tuple(
                tsv.columns[k][row] for k in ("chrom", "pos", "ref", "alt")
            )
            got = np.array([rec.info[f"SA_{c}"][a] for c in VALUES], np.float32)
            want = np.array([tsv.columns[c][row] for c in VALUES], np.float32)
            np.testing.assert_array_equal(got, want)
            row += 1
    assert row == len(tsv.columns["pos"])
    back = read_effects(out)
    assert back.settings == tsv.settings
    for name, values in tsv.columns.items():
        np.testing.assert_array_equal(back.columns[name], values)
    if suffix != "vcf":  # bgzip with a tabix index, BCF with a CSI index: regions can be read
        index = ".tbi" if suffix == "vcf.gz" else ".csi"
        assert out.with_name(out.name + index).exists()
        with pysam.VariantFile(str(out)) as handle:
            fetched = [r.pos for r in handle.fetch("chr1", 199, 260)]
        assert fetched == [200, 210, 250, 260]
    assert (tmp_path / "effects.skipped.tsv").exists()


@pytest.mark.parametrize("kind", ["bgzip", "bcf"])
def test_bgzip_and_bcf_inputs_keep_their_records(tmp_path, model, runs, kind):
    """A bgzipped VCF's lines are kept as they are; a BCF's records as htslib writes them (its
    floats with 6 significant digits; no symbolic <DEL>, which a BCF needs declared)."""
    vcf, path = runs
    source = tmp_path / ("calls.vcf.gz" if kind == "bgzip" else "calls.bcf")
    if kind == "bgzip":
        pysam.tabix_compress(str(vcf), str(source))
    else:
        text = tmp_path / "calls.vcf"
        lines = vcf.read_text().splitlines(keepends=True)
        text.write_text("".join(line for line in lines if "<DEL>" not in line))
        with pysam.VariantFile(str(text)) as handle:
            with pysam.VariantFile(str(source), "wb", header=handle.header) as target:
                for rec in handle:
                    target.write(rec)
    out = tmp_path / "effects.vcf"
    _run(model, source, out)
    records = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    info = [dict(e.split("=") for e in line.split("\t")[7].split(";")) for line in records]
    assert {i["AF"].split(",")[0] for i in info} == {
        "0.123456789" if kind == "bgzip" else "0.123457"
    }
    assert all(line.endswith("\tGT\t0/1") for line in records)
    expected = read_effects(path)
    for name, values in expected.columns.items():
        np.testing.assert_array_equal(read_effects(out).columns[name], values)


def test_a_table_input_gives_minimal_records(tmp_path, model):
    g = GENOME["chr1"]
    variants = {
        "chrom": ["chr1", "chr1"],
        "pos": [100, 150],
        "id": ["a;b c", "%x"],
        "ref": [g[99], g[149]],
        "alt": [other_base(g[99]), f"{other_base(g[149])},{other_base(g[149], 1)}"],
    }
    out = tmp_path / "effects.vcf"
    sa.variant_effects(model, GENOME, variants, out=out, **KWARGS)
    lines = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert [line.split("\t")[:8] for line in lines][0][:7] == [
        "chr1", "100", "a%3Bb%20c", g[99], other_base(g[99]), ".", "."
    ]  # fmt: skip
    assert lines[1].split("\t")[4] == f"{other_base(g[149])},{other_base(g[149], 1)}"
    with pysam.VariantFile(str(out)) as handle:
        assert set(handle.header.contigs) == set(GENOME)
        assert [len(r.info["SA_delta_2"]) for r in handle] == [1, 2]
    memory = sa.variant_effects(model, GENOME, variants, **KWARGS)
    back = read_effects(out)
    assert back.columns["id"].tolist() == ["a;b c", "%x", "%x"]
    np.testing.assert_array_equal(back.columns["delta_2"], memory.scores["delta"][:, 1])


def test_a_bcf_of_an_input_that_declares_neither_its_keys_nor_its_contigs(tmp_path, model):
    """htslib writes no BCF record with an undeclared key: the output declares them."""
    cases = scored_cases(GENOME)[:3]
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    lines += [f"{c}\t{p}\tv{i}\t{r}\t{a}\t.\tPASS\tXX=a{i}" for i, (c, p, r, a) in enumerate(cases)]
    vcf = tmp_path / "calls.vcf"
    vcf.write_text("\n".join(lines) + "\n")
    out = tmp_path / "effects.bcf"
    sa.variant_effects(model, GENOME, vcf, out=out, **KWARGS)
    with pysam.VariantFile(str(out)) as handle:
        assert [r.info["XX"] for r in handle] == ["a0", "a1", "a2"]
    memory = sa.variant_effects(model, GENOME, vcf, **KWARGS)
    np.testing.assert_array_equal(
        read_effects(out).columns["delta_2"], memory.scores["delta"][:, 1]
    )


class _Stopped(Exception):
    pass


@pytest.mark.parametrize("suffix", ["vcf", "vcf.gz"])
def test_resume_after_an_interruption_equals_an_uninterrupted_run(
    monkeypatch, tmp_path, model, runs, suffix
):
    vcf, _ = runs
    whole = tmp_path / f"whole.{suffix}"
    _run(model, vcf, whole)
    out = tmp_path / f"effects.{suffix}"
    write = effects_table.EffectsWriter.write
    calls = []

    def stop_after_two(self, start, block):
        if len(calls) == 2:
            raise _Stopped
        calls.append(start)
        write(self, start, block)

    with monkeypatch.context() as patch:
        patch.setattr(effects_table.EffectsWriter, "write", stop_after_two)
        with pytest.raises(_Stopped):
            _run(model, vcf, out)
    partial = tmp_path / f"effects.{suffix}.partial.tsv"
    assert not out.exists() and partial.exists()
    assert partial.read_text().count("\n") - 2 == 4  # two blocks of two variants
    _run(model, vcf, out)
    assert not partial.exists()
    assert _text(out) == _text(whole)
    before = out.read_bytes()
    _run(model, vcf, out)  # a finished table is reused as it is
    assert out.read_bytes() == before


def test_a_rerun_with_other_settings_is_refused(tmp_path, model, runs):
    vcf, _ = runs
    out = tmp_path / "effects.vcf.gz"
    _run(model, vcf, out)
    with pysam.VariantFile(str(out)) as handle:  # the settings are a header line
        assert [r.key for r in handle.header.records].count("seqattrib_settings") == 1
    before = out.read_bytes()
    with pytest.raises(ValueError, match="written with scores=") as info:
        _run(model, vcf, out, score="delta")
    message = str(info.value)
    assert "\n" not in message and "overwrite=True" in message
    assert message.startswith("The 'out' parameter of variant_effects")
    assert out.read_bytes() == before
    _run(model, vcf, out, score="delta", overwrite=True)
    back = read_effects(out)
    assert [c for c in back.columns if c[-1].isdigit()] == [
        "ref_0", "ref_2", "alt_0", "alt_2", "delta_0", "delta_2"
    ]  # fmt: skip


def test_a_second_writer_is_refused_while_the_first_writes(monkeypatch, tmp_path, model, runs):
    vcf, _ = runs
    out = tmp_path / "effects.bcf"
    write = effects_table.EffectsWriter.write
    refused = []

    def write_once_more(self, start, block):
        if not refused:
            with pytest.raises(BlockingIOError, match="no other process is writing") as info:
                sa.variant_effects(model, GENOME, vcf, out=out, **KWARGS)
            refused.append(str(info.value))
        write(self, start, block)

    with monkeypatch.context() as patch:
        patch.setattr(effects_table.EffectsWriter, "write", write_once_more)
        _run(model, vcf, out)
    assert "\n" not in refused[0] and "effects.bcf.lock" in refused[0], refused[0]
    with pysam.VariantFile(str(out)) as handle:  # the first writer's BCF
        assert len([a for r in handle for a in r.info["SA_delta_0"] if a is not None]) == 14


def test_merged_vcf_shards_equal_one_run(tmp_path, model, runs):
    """Four shards of 14 variants (rows 0-2, 3-6, 7-9, 10-13): the ALT alleles of the first
    multi-allelic record (rows 1-3) fall in two."""
    vcf, tsv = runs
    whole = tmp_path / "whole.vcf"
    _run(model, vcf, whole)
    shards = [tmp_path / f"effects.shard-{i}-of-4.vcf" for i in range(4)]
    for i, path in enumerate(shards):
        _run(model, vcf, path, shard=(i, 4))
    holding = [p for p in shards if "\t150\tv" in p.read_text()]
    assert holding == shards[:2]  # the record is split
    merged = merge_effects(shards[::-1], tmp_path / "merged.vcf")
    assert merged.read_text() == whole.read_text()
    table = merge_effects(shards, tmp_path / "joined.tsv")  # VCF shards into a TSV table
    assert table.read_text() == tsv.read_text()
    text_shard = tmp_path / "effects.shard-3-of-4.tsv"
    _run(model, vcf, text_shard, shard=(3, 4))
    with pytest.raises(ValueError, match="shards are not all VCF tables") as info:
        merge_effects([*shards[:3], text_shard], tmp_path / "again.vcf")
    assert "\n" not in str(info.value)


def test_an_unsorted_input_is_written_in_its_order_without_an_index(tmp_path, model):
    cases = scored_cases(GENOME)[::-1]
    vcf = write_vcf(tmp_path / "calls.vcf", cases)
    out = tmp_path / "effects.vcf.gz"
    with pytest.warns(sa.SeqAttribWarning, match="not indexed: its records are in the input"):
        sa.variant_effects(model, GENOME, vcf, out=out, **KWARGS)
    assert not out.with_name(out.name + ".tbi").exists()
    with pysam.VariantFile(str(out)) as handle:
        assert [r.pos for r in handle] == [p for _, p, _, _ in cases]
    assert len(split(cases)) == len(read_effects(out).columns["pos"])
