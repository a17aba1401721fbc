"""``seqattrib variants`` with the scores, strands, shifts, nulls and peaks of variant_effects:
each flag reaches its keyword (the table equals the API's), the output format comes from the
``-o`` name (a VCF here), shards of a ``.vcf.gz`` are named ``.shard-i-of-n.vcf.gz`` and merged
by ``seqattrib merge``, and bad flags are one-line errors in flag words."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT32, assert_close

import seqattrib as sa
from seqattrib import heads
from seqattrib.cli import main
from seqattrib.variants import read_effects

pysam = pytest.importorskip("pysam")

L = 121  # bpnet-lite with trimming 40: profile logits (batch, 2, 41), counts (batch, 1)
FACTORY = """
import torch
from bpnetlite.bpnet import BPNet


def bpnet():
    torch.manual_seed(0)
    model = BPNet(n_filters=8, n_layers=2, n_outputs=2, n_control_tracks=0, trimming=40,
                  verbose=False)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4)
    return model.eval()
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A genome, SNVs on it (two at one position, one multi-allelic record) as a table, peaks,
    and the factory module of a BPNet-like two-head model."""
    pytest.importorskip("bpnetlite")
    folder = tmp_path_factory.mktemp("cli_scores")
    rng = np.random.default_rng(5)
    genome = {"chr1": "".join(rng.choice(list("ACGT"), 1500))}
    (folder / "genome.fa").write_text(f">chr1\n{genome['chr1']}\n")
    lines = ["chrom\tpos\tid\tref\talt"]
    for i, pos in enumerate((200, 350, 401, 640, 900, 1111)):
        ref = genome["chr1"][pos - 1]
        others = [b for b in "ACGT" if b != ref]
        alt = ",".join(others[:2]) if pos == 350 else others[i % 3]
        lines.append(f"chr1\t{pos}\tv{i}\t{ref}\t{alt}")
    (folder / "variants.tsv").write_text("\n".join(lines) + "\n")
    (folder / "peaks.bed").write_text("chr1\t100\t300\nchr1\t500\t700\nchr1\t1000\t1200\n")
    (folder / "other_peaks.bed").write_text("chr7\t100\t300\n")
    (folder / "bpnet_factory.py").write_text(FACTORY)
    return folder, genome


@pytest.fixture
def argv(files, monkeypatch):
    folder, _ = files
    monkeypatch.syspath_prepend(str(folder))
    return ["variants", "--model", "bpnet_factory:bpnet", "--genome", str(folder / "genome.fa"),
            "--table", str(folder / "variants.tsv"), "--length", str(L), "--batch-size", "8",
            "--quiet"]  # fmt: skip


def _api(files, **kwargs):
    import bpnet_factory

    folder, _ = files
    return sa.variant_effects(
        bpnet_factory.bpnet(),
        str(folder / "genome.fa"),
        str(folder / "variants.tsv"),
        length=L,
        batch_size=8,
        **kwargs,
    )


def _same_table(path, expected):
    table = read_effects(path)
    columns = expected.columns()
    assert list(table.columns) == list(columns)
    for name in ("chrom", "pos", "id", "ref", "alt"):
        assert table.columns[name].tolist() == columns[name].tolist()
    for name, values in columns.items():
        if name not in ("chrom", "pos", "id", "ref", "alt"):
            assert_close(table.columns[name], values, FLOAT32)
    return table


def test_profile_scores_on_both_strands_with_shifts_equal_the_api(files, argv, tmp_path):
    out = tmp_path / "effects.vcf.gz"
    flags = ["--head", "counts:1", "--profile", "0", "--score", "delta,logfc,jsd,abs_logfc_x_jsd",
             "--strands", "both", "--shifts", "-1", "0", "1", "-o", str(out)]  # fmt: skip
    assert main([*argv, *flags]) == 0
    expected = _api(
        files,
        output_fn=heads.counts(1),
        profile=0,
        score=("delta", "logfc", "jsd", "abs_logfc_x_jsd"),
        strands="both",
        shifts=(-1, 0, 1),
    )
    table = _same_table(out, expected)
    assert table.settings["strands"] == "both" and table.settings["shifts"] == [-1, 0, 1]
    assert out.with_name(out.name + ".tbi").exists()  # the format from the -o name
    with pysam.VariantFile(str(out)) as handle:
        assert handle.header.info["SA_jsd_0"].number == "A"
        assert [len(r.alts) for r in handle] == [1, 2, 1, 1, 1, 1]


def test_null_peaks_and_random_state_reach_the_table(files, argv, tmp_path):
    out = tmp_path / "effects.tsv"
    flags = ["--head", "counts:1", "--score", "delta,logfc", "--null", "shuffle", "--n-null",
             "100", "--random-state", "3", "--peaks", str(files[0] / "peaks.bed"),
             "-o", str(out)]  # fmt: skip
    assert main([*argv, *flags]) == 0
    expected = _api(
        files,
        output_fn=heads.counts(1),
        score=("delta", "logfc"),
        null="shuffle",
        n_null=100,
        random_state=3,
        peaks=str(files[0] / "peaks.bed"),
    )
    table = _same_table(out, expected)
    assert table.settings["null"] == {"kind": "shuffle", "n_null": 100, "random_state": 3}
    assert {"pvalue_logfc_0", "active_quantile_0"} <= set(table.columns)
    p = table.columns["pvalue_logfc_0"]
    assert np.all((p >= 1 / 101) & (p <= 1))


def test_vcf_shards_are_named_before_the_suffix_and_merged(files, argv, tmp_path, capsys):
    out = tmp_path / "effects.vcf.gz"
    flags = ["--head", "counts:1", "--score", "logfc", "-o", str(out)]
    for i in range(2):
        assert main([*argv, *flags, "--shard", f"{i}/2"]) == 0
    shards = [tmp_path / f"effects.shard-{i}-of-2.vcf.gz" for i in range(2)]
    assert all(s.exists() for s in shards)
    merged = tmp_path / "merged.vcf.gz"
    assert main(["merge", *map(str, shards), "-o", str(merged)]) == 0
    expected = _api(files, output_fn=heads.counts(1), score="logfc")
    _same_table(merged, expected)


def test_an_interrupted_run_names_what_it_kept_and_resumes(files, argv, tmp_path, capsys):
    from seqattrib.variants import table as effects_table

    out = tmp_path / "effects.vcf.gz"
    flags = ["--head", "counts:1", "--score", "logfc", "--max-cpu-sequences", "2", "-o", str(out)]
    write = effects_table.EffectsWriter.write
    calls = []

    def interrupt_after_one(self, start, block):
        if calls:
            raise KeyboardInterrupt
        calls.append(start)
        write(self, start, block)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(effects_table.EffectsWriter, "write", interrupt_after_one)
        assert main([*argv, *flags]) == 130
    err = capsys.readouterr().err
    assert f"{out}.partial.tsv keeps the rows written so far" in err, err
    assert main([*argv, *flags]) == 0
    expected = _api(files, output_fn=heads.counts(1), score="logfc")
    _same_table(out, expected)


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--score", "jsd"], ["--score must be", "--profile 0"]),
        (["--head", "counts:1", "--score", "logfc", "--null", "shuffle", "--n-null", "10"],
         ["--n-null must be at least 100", "Pass --n-null 10000"]),
        (["--head", "counts:1", "--score", "logfc", "--peaks", "OTHER"],
         ["--peaks must be", "chr7"]),
        (["--head", "counts:1", "--score", "logfc", "--shifts=0,500"], ["--shifts must be"]),
        (["--head", "counts:1", "--score", "logfc", "--profile", "0"], ["--profile must be"]),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line_errors_in_flag_words(files, argv, tmp_path, capsys, flags, words):
    flags = [str(files[0] / "other_peaks.bed") if f == "OTHER" else f for f in flags]
    model = argv.index("bpnet_factory:bpnet")
    if "jsd" in flags:  # a single-output model: no profile to compare
        argv = [*argv[:model], "seqattrib.demo:torch_model", *argv[model + 1 :]]
        argv[argv.index(str(L))] = "200"
    out = tmp_path / "effects.tsv"
    assert main([*argv, *flags, "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("seqattrib variants: error: "), err
    for word in words:
        assert word in err, err
    assert "n_null=" not in err and "profile=" not in err and "score=" not in err


def test_bad_flag_values_are_refused_by_the_parser(argv, capsys):
    cases = [
        (["--score", "delta,sad"], "abs_logfc_x_jsd"),  # the message lists every score
        (["--shifts", "a"], "expected integers such as -1 0 1"),
        (["--strands", "reverse"], "choose from 'forward', 'both'"),
    ]
    for flags, words in cases:
        with pytest.raises(SystemExit) as stop:
            main([*argv, *flags, "-o", "x.tsv"])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and flags[0] in err and words in err, err
