"""What an effects table holds is what one job wrote: resume, reuse of a finished table and merge
refuse a table of another model (two models that differ in one weight) or another output
function, in TSV and Parquet; chromosome names and ids with tabs, newlines, carriage returns or
``%`` round-trip exactly; a malformed table is a one-line error, never an IndexError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_model
from variant_cases import (  # noqa: F401 - the genome and fasta fixtures
    L,
    fasta_fixture,
    genome_fixture,
    make_genome,
    other_base,
)

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.variants import merge_effects, read_effects
from seqattrib.variants import table as effects_table

KWARGS = dict(length=L, target=[0, 2], score="delta", max_cpu_sequences=2)


def _variants(genome):
    g = genome["chr1"]
    pos = list(range(40, 360, 40))
    return {
        "chrom": ["chr1"] * len(pos),
        "pos": pos,
        "id": [f"v{i}" for i in range(len(pos))],
        "ref": [g[p - 1] for p in pos],
        "alt": [other_base(g[p - 1]) for p in pos],
    }


GENOME = make_genome()
VARIANTS = _variants(GENOME)
N = len(VARIANTS["pos"])


@pytest.fixture(scope="module")
def models_ab(conv_weights):
    """Two models that differ in one weight."""
    other = {k: v.copy() for k, v in conv_weights.items()}
    other["dense"][0, 0] += 0.5
    return make_model("torch", "convnet", conv_weights, "NCL"), make_model(
        "torch", "convnet", other, "NCL"
    )


class _Stopped(Exception):
    pass


def _write_partially(monkeypatch, model, out, blocks=1, **kwargs):
    """The table a run leaves when it is stopped after ``blocks`` written blocks."""
    write = effects_table.EffectsWriter.write
    calls = []

    def stop_after(self, start, block):
        if len(calls) == blocks:
            raise _Stopped
        calls.append(start)
        write(self, start, block)

    with monkeypatch.context() as patch:
        patch.setattr(effects_table.EffectsWriter, "write", stop_after)
        with pytest.raises(_Stopped):
            sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS, **kwargs)


def _text(out):
    return out if out.suffix == ".tsv" else out.with_name(out.name + ".partial.tsv")


def _one_line(message):
    assert "\n" not in message.strip(), message
    return message


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
@pytest.mark.parametrize("state", ["partial", "finished"])
def test_resume_and_reuse_refuse_another_model(monkeypatch, tmp_path, models_ab, suffix, state):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    a, b = models_ab
    alone = sa.variant_effects(a, GENOME, VARIANTS, **KWARGS)
    out = tmp_path / f"effects.{suffix}"
    if state == "partial":
        _write_partially(monkeypatch, a, out)
        kept = _text(out)
        assert 0 < kept.read_bytes().count(b"\n") - 2 < N
    else:
        sa.variant_effects(a, GENOME, VARIANTS, out=out, **KWARGS)
        kept = out
    before = kept.read_bytes()
    with pytest.raises(ValueError, match="written with another model") as info:
        sa.variant_effects(b, GENOME, VARIANTS, out=out, **KWARGS)
    message = _one_line(str(info.value))
    assert message.startswith("The 'out' parameter of variant_effects") and "overwrite" in message
    assert kept.read_bytes() == before  # nothing of model B was written
    sa.variant_effects(a, GENOME, VARIANTS, out=out, **KWARGS)  # model A resumes or reuses it
    table = read_effects(out)
    np.testing.assert_array_equal(table.columns["delta_2"], alone.scores["delta"][:, 1])
    sa.variant_effects(b, GENOME, VARIANTS, out=out, overwrite=True, **KWARGS)
    other = sa.variant_effects(b, GENOME, VARIANTS, **KWARGS)
    np.testing.assert_array_equal(
        read_effects(out).columns["ref_0"], other.predictions["ref"][:, 0]
    )


def test_resume_refuses_another_output_fn(monkeypatch, tmp_path, models_ab):
    a, _ = models_ab
    out = tmp_path / "effects.tsv"
    _write_partially(monkeypatch, a, out, output_fn=lambda z: z)
    with pytest.raises(ValueError, match="written with output_fn="):
        sa.variant_effects(a, GENOME, VARIANTS, out=out, output_fn=lambda z: 2 * z, **KWARGS)
    with pytest.raises(ValueError, match="written with output_fn="):
        sa.variant_effects(a, GENOME, VARIANTS, out=out, **KWARGS)  # none now
    sa.variant_effects(a, GENOME, VARIANTS, out=out, output_fn=lambda z: z, **KWARGS)
    assert len(read_effects(out).columns["pos"]) == N


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
def test_merge_refuses_shards_of_two_models(tmp_path, models_ab, suffix):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    a, b = models_ab
    shards = [tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"]
    sa.variant_effects(a, GENOME, VARIANTS, out=shards[0], shard=(0, 2), **KWARGS)
    sa.variant_effects(b, GENOME, VARIANTS, out=shards[1], shard=(1, 2), **KWARGS)
    with pytest.raises(ValueError, match="shards of one job.*model_fingerprint") as info:
        merge_effects(shards, tmp_path / f"merged.{suffix}")
    _one_line(str(info.value))
    assert not (tmp_path / f"merged.{suffix}").exists()
    sa.variant_effects(a, GENOME, VARIANTS, out=shards[1], shard=(1, 2), overwrite=True, **KWARGS)
    merge_effects(shards, tmp_path / f"merged.{suffix}")
    alone = sa.variant_effects(a, GENOME, VARIANTS, **KWARGS)
    merged = read_effects(tmp_path / f"merged.{suffix}")
    np.testing.assert_array_equal(merged.columns["delta_0"], alone.scores["delta"][:, 0])


# --------------------------------------------------------------------------- odd names
ODD_IDS = ["rs\t1", "a\nb", "c\rd", "50%", "%09", "e\r\n%0A\tf", "plain"]


@pytest.fixture(scope="module")
def odd():
    """A genome whose chromosome name holds a tab, and variants with odd ids."""
    name = "chr\t1%"
    genome = {name: GENOME["chr1"]}
    g = genome[name]
    pos = [60 + 30 * i for i in range(len(ODD_IDS))]
    variants = {
        "chrom": [name] * len(pos),
        "pos": pos,
        "id": ODD_IDS,
        "ref": [g[p - 1] for p in pos],
        "alt": [other_base(g[p - 1]) for p in pos],
    }
    return genome, variants


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
def test_odd_ids_and_chromosome_names_round_trip(tmp_path, models_ab, odd, suffix):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    model, _ = models_ab
    genome, variants = odd
    memory = sa.variant_effects(model, genome, variants, **KWARGS)
    assert memory.variants["id"].tolist() == ODD_IDS
    out = tmp_path / f"effects.{suffix}"
    sa.variant_effects(model, genome, variants, out=out, **KWARGS)
    table = read_effects(out)
    assert table.columns["id"].tolist() == ODD_IDS
    assert table.columns["chrom"].tolist() == variants["chrom"]
    np.testing.assert_array_equal(table.columns["delta_2"], memory.scores["delta"][:, 1])
    sa.variant_effects(model, genome, variants, out=out, **KWARGS)  # a finished table: reused
    if suffix == "tsv":
        lines = out.read_bytes().split(b"\n")
        assert len(lines) == len(ODD_IDS) + 3 and lines[-1] == b""  # one line per row
        assert all(line.count(b"\t") == 10 for line in lines[1:-1])  # 11 columns
        pd = pytest.importorskip("pandas")
        frame = pd.read_csv(out, sep="\t", skiprows=1, dtype=str, keep_default_na=False)
        assert frame.shape == (len(ODD_IDS), 11)
        assert frame["id"].tolist()[:2] == ["rs%091", "a%0Ab"]
    shards = [tmp_path / f"s{i}.{suffix}" for i in range(2)]
    for i, shard in enumerate(shards):
        sa.variant_effects(model, genome, variants, out=shard, shard=(i, 2), **KWARGS)
    for merged in (tmp_path / "merged.tsv", tmp_path / "merged2.parquet"):
        merge_effects(shards, merged)
        assert read_effects(merged).columns["id"].tolist() == ODD_IDS
        assert read_effects(merged).columns["chrom"].tolist() == variants["chrom"]


def test_odd_ids_resume(monkeypatch, tmp_path, models_ab, odd):
    model, _ = models_ab
    genome, variants = odd
    out = tmp_path / "effects.tsv"
    with monkeypatch.context() as patch:
        write = effects_table.EffectsWriter.write
        calls = []

        def stop_after(self, start, block):
            if calls:
                raise _Stopped
            calls.append(start)
            write(self, start, block)

        patch.setattr(effects_table.EffectsWriter, "write", stop_after)
        with pytest.raises(_Stopped):
            sa.variant_effects(model, genome, variants, out=out, **KWARGS)
    sa.variant_effects(model, genome, variants, out=out, **KWARGS)
    assert read_effects(out).columns["id"].tolist() == ODD_IDS


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda lines: lines[:3] + [lines[3].rsplit(b"\t", 1)[0]] + lines[4:], "line 4"),
        (lambda lines: lines[:4] + [lines[4] + b"\textra"] + lines[5:], "line 5"),
        (lambda lines: lines[:3] + [lines[3].replace(b"\t", b"\tx", 1)] + lines[4:], "line 4"),
        (
            lambda lines: lines[:1] + [lines[1].replace(b"delta_0", b"delta_9")] + lines[2:],
            "line 2",
        ),
        (lambda lines: lines[:5] + [lines[5][:5] + b"\r" + lines[5][5:]] + lines[6:], "line 6"),
        (lambda lines: lines[:3] + [b"\xff" + lines[3]] + lines[4:], "line 4"),
    ],
    ids=["short", "long", "position", "header", "carriage-return", "bytes"],
)
def test_read_effects_of_a_malformed_table_is_a_one_line_error(tmp_path, models_ab, damage, where):
    model, _ = models_ab
    out = tmp_path / "effects.tsv"
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    out.write_bytes(b"\n".join(damage(out.read_bytes().split(b"\n"))))
    with pytest.raises(ValueError) as info:
        read_effects(out)
    message = _one_line(str(info.value))
    assert message.startswith("The 'path' parameter of read_effects") and repr(str(out)) in message
    assert where in message or (where == "line 2" and "header (line 2)" in message)
    assert "overwrite=True" in message


def test_parquet_keeps_nan_as_a_number_and_reads_nulls_of_older_tables_as_nan(tmp_path, models_ab):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    model, _ = models_ab
    out = tmp_path / "effects.parquet"
    kwargs = dict(KWARGS, score="log_ratio")
    with pytest.warns(sa.SeqAttribWarning, match="log_ratio is NaN"):
        memory = sa.variant_effects(model, GENOME, VARIANTS, **kwargs)
        sa.variant_effects(model, GENOME, VARIANTS, out=out, **kwargs)
    nan = np.isnan(memory.scores["log_ratio"][:, 0])
    assert nan.any()
    stored = pq.read_table(out)
    assert stored.column("log_ratio_0").null_count == 0  # NaN is a number, not a missing value
    np.testing.assert_array_equal(
        read_effects(out).columns["log_ratio_0"], memory.scores["log_ratio"][:, 0]
    )
    # a table of an older version stored NaN as null: read (and merged) as NaN
    column = stored.column("log_ratio_0")
    nulls = pa.array(column.to_numpy(), mask=np.isnan(column.to_numpy()), type=pa.float32())
    older = stored.set_column(stored.column_names.index("log_ratio_0"), "log_ratio_0", nulls)
    assert older.column("log_ratio_0").null_count == nan.sum()
    pq.write_table(older, out)
    np.testing.assert_array_equal(
        read_effects(out).columns["log_ratio_0"], memory.scores["log_ratio"][:, 0]
    )


FACTORY = """
import sys
sys.path.insert(0, {tests!r})
import models

def model_a():
    return models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")

def model_b():
    weights = models.convnet_weights(n_outputs=3)
    weights["dense"][0, 0] += 0.5
    return models.torch_model("convnet", weights, "NCL")
"""


def test_command_line_rerun_with_another_model(tmp_path, monkeypatch, fasta, capsys):
    """``seqattrib variants --model B`` on the table of ``--model A``: exit 1, one line."""
    tests = str(Path(__file__).parents[1])
    (tmp_path / "two_models.py").write_text(FACTORY.format(tests=tests))
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = ["chrom\tpos\tid\tref\talt"]
    lines += [
        f"chr1\t{p}\tv{p}\t{r}\t{a}"
        for p, r, a in zip(*(VARIANTS[k] for k in ("pos", "ref", "alt")), strict=True)
    ]
    (tmp_path / "variants.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "effects.tsv"
    argv = ["variants", "--genome", str(fasta), "--table", str(tmp_path / "variants.tsv"),
            "--length", str(L), "--score", "delta", "--quiet", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--model", "two_models:model_a"]) == 0
    written = out.read_bytes()
    capsys.readouterr()
    assert main([*argv, "--model", "two_models:model_b"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("seqattrib variants: error: --out must be"), err
    assert "written with another model" in err and "--overwrite" in err
    assert out.read_bytes() == written
    assert main([*argv, "--model", "two_models:model_a"]) == 0  # the same model reuses it
    assert out.read_bytes() == written


@pytest.mark.parametrize("keep", [N - 1, 0])
def test_a_finished_parquet_table_with_rows_missing_is_not_reused(tmp_path, models_ab, keep):
    pq = pytest.importorskip("pyarrow.parquet")
    model, _ = models_ab
    out = tmp_path / "effects.parquet"
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    table = pq.read_table(out)
    pq.write_table(table.slice(0, keep), out)  # its settings kept, rows lost
    with pytest.raises(ValueError, match=rf"with only {keep} rows.*overwrite=True") as info:
        sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    _one_line(str(info.value))
    assert pq.read_table(out).num_rows == keep
