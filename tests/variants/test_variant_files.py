"""Inputs (VCF, bgzip with and without an index, BCF, TSV, CSV, DataFrame) and outputs (TSV and
Parquet tables, attribution tracks, skipped lists): resume after a kill, shards merged equal one
run, the command line and the ref vs alt plot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import make_model
from helpers import FLOAT32, assert_close
from variant_cases import (  # noqa: F401 - the genome and fasta fixtures
    L,
    expected_windows,
    fasta_fixture,
    genome_fixture,
    one_hot,
    scored_cases,
    skipped_cases,
    split,
    table,
)

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.shards import shard_path
from seqattrib.variants import merge_effects, read_effects

pysam = pytest.importorskip("pysam")

HEADER = "##fileformat=VCFv4.2\n{contigs}#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"


def _cases(genome):
    """Scored and skipped variants, sorted as an indexed VCF must be (a BCF of a symbolic <DEL>
    needs header lines of its own, so symbolic alleles are left to test_variant_effects)."""
    skipped = [c for c, _ in skipped_cases(genome) if c[0] != "chr9" and c[3] != "<DEL>"]
    cases = scored_cases(genome) + skipped
    return sorted(cases, key=lambda c: (c[0], c[1]))


def write_vcf(path, genome, cases):
    contigs = "".join(f"##contig=<ID={c},length={len(s)}>\n" for c, s in genome.items())
    lines = [f"{c}\t{p}\tv{i}\t{r}\t{a}\t.\t.\t.\n" for i, (c, p, r, a) in enumerate(cases)]
    path.write_text(HEADER.format(contigs=contigs) + "".join(lines))
    return path


@pytest.fixture(scope="module")
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


@pytest.fixture(scope="module")
def expected(model, genome):
    with pytest.warns(sa.SeqAttribWarning, match="skipped"):
        return sa.variant_effects(
            model, genome, table(_cases(genome)), length=L, target=[0, 2], score="delta"
        )


def _same(result, expected):
    for name in ("chrom", "pos", "ref", "alt"):
        assert result.variants[name].tolist() == expected.variants[name].tolist()
    assert_close(result.scores["delta"], expected.scores["delta"], FLOAT32)
    assert [r[5] for r in result.skipped] == [r[5] for r in expected.skipped]


@pytest.mark.parametrize("kind", ["vcf", "bgzip", "bgzip+tabix", "bgzip+csi", "bcf"])
def test_vcf_inputs(kind, tmp_path, model, genome, fasta, expected):
    path = write_vcf(tmp_path / "calls.vcf", genome, _cases(genome))
    if kind != "vcf":
        if kind == "bcf":
            with pysam.VariantFile(str(path)) as source:
                bcf = str(tmp_path / "calls.bcf")
                with pysam.VariantFile(bcf, "wb", header=source.header) as target:
                    for rec in source:
                        target.write(rec)
            path = tmp_path / "calls.bcf"
        else:
            gz = tmp_path / "calls.vcf.gz"
            pysam.tabix_compress(str(path), str(gz))
            if kind == "bgzip+tabix":
                pysam.tabix_index(str(gz), preset="vcf")
            if kind == "bgzip+csi":
                pysam.tabix_index(str(gz), preset="vcf", csi=True)
            path = gz
    with pytest.warns(sa.SeqAttribWarning, match="skipped"):
        result = sa.variant_effects(model, str(fasta), path, length=L, target=[0, 2], score="delta")
    _same(result, expected)
    assert all(i.startswith("v") for i in result.variants["id"])


@pytest.mark.parametrize("kind", ["tsv", "frame"])
def test_table_inputs(kind, tmp_path, model, genome, expected):
    columns = table(_cases(genome))
    if kind == "frame":
        pd = pytest.importorskip("pandas")
        source = pd.DataFrame({k.upper(): v for k, v in columns.items()})
    else:
        rows = zip(columns["chrom"], columns["pos"], columns["ref"], columns["alt"], strict=True)
        source = tmp_path / "variants.tsv"
        source.write_text(
            "#chrom\tpos\tref\talt\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows)
        )
    with pytest.warns(sa.SeqAttribWarning, match="skipped"):
        result = sa.variant_effects(model, genome, source, length=L, target=[0, 2], score="delta")
    _same(result, expected)


def test_csv_of_biallelic_variants(tmp_path, model, genome):
    cases = [v for v in split(scored_cases(genome))]
    path = tmp_path / "variants.csv"
    path.write_text(
        "chrom,pos,id,ref,alt\n"
        + "".join(f"{c},{p},x{i},{r},{a}\n" for i, (c, p, r, a) in enumerate(cases))
    )
    result = sa.variant_effects(model, genome, path, length=L, score="delta")
    by_dict = sa.variant_effects(model, genome, table(cases), length=L, score="delta")
    assert result.variants["id"][3] == "x3"
    assert_close(result.scores["delta"], by_dict.scores["delta"], FLOAT32)


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
def test_table_file_equals_memory(suffix, tmp_path, model, genome, expected):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"effects.{suffix}"
    with pytest.warns(sa.SeqAttribWarning, match="effects.skipped.tsv"):
        path = sa.variant_effects(
            model, genome, table(_cases(genome)), length=L, target=[0, 2], score="delta", out=out
        )
    assert path == str(out) and not os.path.exists(f"{out}.partial.tsv")
    read = read_effects(out)
    columns = expected.columns()
    assert list(read.columns) == list(columns)
    for name, values in columns.items():
        if values.dtype.kind in "fi":
            assert_close(read.columns[name], values, 0)
        else:
            assert read.columns[name].tolist() == values.tolist()
    assert read.settings["targets"] == [0, 2] and read.settings["length"] == L
    skipped = (tmp_path / "effects.skipped.tsv").read_text().splitlines()
    assert len(skipped) == 1 + len(expected.skipped) and "ref_mismatch" in skipped[2]
    # a finished file is a finished job: a rerun returns it
    with pytest.warns(sa.SeqAttribWarning):
        again = sa.variant_effects(
            model, genome, table(_cases(genome)), length=L, target=[0, 2], score="delta", out=out
        )
    assert again == str(out)
    with pytest.warns(sa.SeqAttribWarning), pytest.raises(ValueError, match="written with"):
        sa.variant_effects(
            model, genome, table(_cases(genome)), length=L, target=[0, 1], score="delta", out=out
        )


def test_a_cut_table_resumes(tmp_path, model, genome, expected):
    out = tmp_path / "effects.tsv"
    kwargs = dict(length=L, target=[0, 2], score="delta", out=out, max_cpu_sequences=3)
    with pytest.warns(sa.SeqAttribWarning):
        sa.variant_effects(model, genome, table(_cases(genome)), **kwargs)
    full = out.read_bytes()
    lines = full.split(b"\n")
    out.write_bytes(b"\n".join(lines[:6]) + b"\n" + lines[6][:10])  # 4 rows and a cut line
    with pytest.warns(sa.SeqAttribWarning):
        sa.variant_effects(model, genome, table(_cases(genome)), **kwargs)
    assert out.read_bytes() == full
    # a complete table is a finished job: a rerun neither rewrites nor appends to it
    with pytest.warns(sa.SeqAttribWarning):
        sa.variant_effects(model, genome, table(_cases(genome)), **kwargs)  # complete: kept
    assert out.read_bytes() == full
    # every row is compared with the variants, so an edited earlier row is refused, by name
    modified = full.replace(b"\tv1\t", b"\tvX\t")
    assert modified != full
    out.write_bytes(modified)
    with pytest.warns(sa.SeqAttribWarning), pytest.raises(ValueError, match=r"row 0 is .*\(vX\)"):
        sa.variant_effects(model, genome, table(_cases(genome)), **kwargs)
    assert out.read_bytes() == modified
    lines = full.split(b"\n")
    out.write_bytes(b"\n".join([*lines[:3], lines[3].replace(b"\tv", b"\tw")]) + b"\n")
    with pytest.warns(sa.SeqAttribWarning), pytest.raises(ValueError, match="same variants"):
        sa.variant_effects(
            model, genome, table([(c[0], c[1], c[2], c[3]) for c in _cases(genome)]), **kwargs
        )


def _env():
    env = dict(os.environ)
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A 30 kb genome and 1,500 SNVs (two ALT alleles per record) for the demo model."""
    folder = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(3)
    g = "".join(rng.choice(list("ACGT"), 30_000))
    (folder / "genome.fa").write_text(">chr1\n" + g + "\n")
    cases = []
    for p in range(150, 29_850, 40):
        alts = [b for b in "ACGT" if b != g[p - 1]]
        cases.append(("chr1", p, g[p - 1], ",".join(alts[:2])))
    write_vcf(folder / "calls.vcf", {"chr1": g}, cases)
    return folder


def _cli(folder, out, *extra, background=False):
    argv = [
        sys.executable, "-m", "seqattrib", "variants", "--model", "seqattrib.demo:torch_model",
        "--genome", str(folder / "genome.fa"), "--vcf", str(folder / "calls.vcf"),
        "--length", "200", "--target", "0,2", "--score", "delta", "--batch-size", "4",
        "--max-cpu-sequences", "8", "--quiet", "--out", str(out), *extra,
    ]  # fmt: skip
    if background:
        return subprocess.Popen(argv, env=_env(), stderr=subprocess.PIPE)
    result = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.mark.slow
def test_resume_after_kill_equals_one_run(big, tmp_path):
    one = tmp_path / "one.tsv"
    _cli(big, one)
    out = tmp_path / "killed.tsv"
    worker = _cli(big, out, background=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") > 300:
            break
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    written = out.read_bytes().count(b"\n") - 2
    assert 0 < written < 1480, "the kill must land mid-run"
    _cli(big, out)
    a, b = read_effects(one), read_effects(out)
    assert b.columns["pos"].tolist() == a.columns["pos"].tolist()
    for name in ("delta_0", "delta_2", "ref_0", "alt_2"):
        assert_close(b.columns[name], a.columns[name], FLOAT32)


def test_shards_merged_equal_one_run(tmp_path, model, genome):
    cases = split(scored_cases(genome))
    kwargs = dict(length=L, target=[0, 2], score="delta", attributions="saliency")
    one = sa.variant_effects(model, genome, table(cases), out=tmp_path / "one.tsv", **kwargs)
    out = str(tmp_path / "effects.tsv")
    shards = []
    for i in range(3):
        path = shard_path(out, i, 3)
        sa.variant_effects(model, genome, table(cases), out=path, shard=(i, 3), **kwargs)
        shards.append(path)
    assert main(["merge", *shards[::-1], "-o", out]) == 0
    a, b = read_effects(one), read_effects(out)
    assert list(a.columns) == list(b.columns)
    assert b.columns["alt"].tolist() == a.columns["alt"].tolist()
    for name in ("ref_0", "alt_2", "delta_0", "delta_2"):
        assert_close(b.columns[name], a.columns[name], FLOAT32)
    assert "shard" not in b.settings
    for allele in ("ref", "alt"):
        merged = sa.io.read_tracks(tmp_path / f"effects.{allele}.h5")
        single = sa.io.read_tracks(tmp_path / f"one.{allele}.h5")
        assert_close(merged.attributions, single.attributions, FLOAT32)
        assert merged.regions.start.tolist() == single.regions.start.tolist()
    with pytest.raises(ValueError, match="all|covering"):
        merge_effects(shards[:2], tmp_path / "part.tsv")


@pytest.mark.parametrize(
    ("method", "options"),
    [("saliency", {}), ("ism", {}), ("eig", {"n_baselines": 2, "n_steps": 2})],
)
def test_attribution_tracks_of_both_windows(method, options, tmp_path, model, genome):
    cases = split(scored_cases(genome))
    result = sa.variant_effects(
        model,
        genome,
        table(cases),
        length=L,
        target=1,
        score="delta",
        attributions=method,
        attribution_options=options,
        layout="NCL",
    )
    windows = [expected_windows(genome, *v) for v in cases]
    for k, allele in enumerate(("ref", "alt")):
        X = one_hot([w[k] for w in windows], "NCL")
        direct = sa.explain(model, X, method=method, target=1, **options)
        assert_close(result.attributions[allele], direct, FLOAT32)
    out = tmp_path / "effects.tsv"
    sa.variant_effects(
        model,
        genome,
        table(cases),
        length=L,
        target=1,
        score="delta",
        attributions=method,
        attribution_options=options,
        layout="NCL",
        out=out,
    )
    ref, alt = (sa.io.read_tracks(tmp_path / f"effects.{a}.h5") for a in ("ref", "alt"))
    assert_close(ref.attributions, result.attributions["ref"], FLOAT32)
    # the alternative windows start half the length change away from the reference windows
    shifts = alt.regions.start - ref.regions.start
    assert shifts.tolist() == [int((len(a) - len(r)) / 2) for _, _, r, a in cases]
    assert ref.regions.start[0] == cases[0][1] - 1 - L // 2


def test_command_line(tmp_path, genome, fasta, capsys):
    vcf = write_vcf(tmp_path / "calls.vcf", genome, scored_cases(genome))
    out = tmp_path / "effects.tsv"
    argv = ["variants", "--model", "seqattrib.demo:torch_model", "--genome", str(fasta),
            "--length", "200", "--out", str(out), "--quiet", "--score", "delta"]  # fmt: skip
    assert main([*argv, "--vcf", str(vcf)]) == 0
    table_ = read_effects(out)
    assert len(table_.columns["pos"]) == 8 and "delta_0" in table_.columns
    assert "5 too close to a chromosome end" in capsys.readouterr().err
    assert main([*argv, "--vcf", str(vcf), "--table", str(vcf)]) == 1
    assert "--vcf must be given, or --table instead" in capsys.readouterr().err
    assert main([*argv, "--vcf", str(vcf), "--target", "0,1"]) == 1
    assert "--out must be a new path, or a table written with the same settings" in (
        capsys.readouterr().err
    )


def test_plot_ref_vs_alt(tmp_path, model, genome):
    pytest.importorskip("matplotlib")
    out = tmp_path / "effects.tsv"
    sa.variant_effects(
        model,
        genome,
        table(scored_cases(genome)),
        length=L,
        target=[0, 1],
        score="delta",
        attributions="saliency",
        out=out,
    )
    image = tmp_path / "variant.png"
    argv = ["plot", str(tmp_path / "effects.ref.h5"), "--alt", str(tmp_path / "effects.alt.h5"),
            "--row", "4", "--target", "1", "-o", str(image)]  # fmt: skip
    assert main(argv) == 0 and image.stat().st_size > 0
    figure = sa.plot.plot_variant(np.ones((L, 4)), np.ones((L, 4)), offset=1)
    assert len(figure.axes) == 2


def test_command_line_passes_each_method_its_own_options(tmp_path, genome, fasta):
    """--n-steps and --n-baselines reach only the methods that take them (saliency takes
    neither); --random-state reaches deeplift_shap, whose baselines it draws."""
    vcf = write_vcf(tmp_path / "calls.vcf", genome, scored_cases(genome))
    argv = ["variants", "--model", "seqattrib.demo:torch_model", "--genome", str(fasta),
            "--vcf", str(vcf), "--length", "200", "--quiet", "--score", "delta"]  # fmt: skip
    out = tmp_path / "saliency.tsv"
    flags = ["--attributions", "saliency", "--n-steps", "5", "--n-baselines", "3"]
    assert main([*argv, *flags, "--out", str(out)]) == 0
    assert read_effects(out).settings["attribution_options"] == {}
    tracks = {}
    for seed in (0, 1):
        out = tmp_path / f"shap{seed}.tsv"
        flags = ["--attributions", "deeplift_shap", "--n-baselines", "2", "--n-steps", "5"]
        assert main([*argv, *flags, "--random-state", str(seed), "--out", str(out)]) == 0
        options = read_effects(out).settings["attribution_options"]
        assert options == {"n_baselines": 2, "random_state": seed}
        tracks[seed] = sa.io.read_tracks(tmp_path / f"shap{seed}.ref.h5").attributions
    assert not np.allclose(tracks[0], tracks[1])
