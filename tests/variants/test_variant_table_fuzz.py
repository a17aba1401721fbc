"""Damaged effects tables (seeded): truncations at random offsets, random bytes, a cut or changed
header line, deleted columns, in TSV and Parquet. ``read_effects``, a rerun of the job that wrote
the table (resume or reuse) and ``merge_effects`` each give either a correct result or a
one-line ``ValueError``/``OSError`` naming the file, never an IndexError or KeyError, a hang, or
rows of another table mixed in; an error leaves the damaged file as it was.

"Correct" is judged against an independent reading of the damaged bytes: ``read_effects``
returns exactly the complete rows a plain split of its lines gives; a rerun keeps the complete
rows it found (byte for byte) and appends the undamaged run's rows after them, and every row
then names the undamaged run's variant at its place; a merge holds the shards' rows in order.
A digit that random bytes turn into another digit is a number like any other: such a row is
read, kept and merged as it is written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import make_model
from variant_cases import L, make_genome, other_base

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.variants import merge_effects, read_effects

GENOME = make_genome(seed=3)
KWARGS = dict(length=L, target=[0, 2], score=("delta", "log_ratio"), max_cpu_sequences=4)
ERRORS = (ValueError, OSError)


def _variants():
    g = GENOME["chr1"]
    pos = list(range(30, 370, 17))  # 20 SNVs
    return {
        "chrom": ["chr1"] * len(pos),
        "pos": pos,
        "id": [f"rs{i}%\t{i}" if i % 7 == 3 else f"rs{i}" for i in range(len(pos))],
        "ref": [g[p - 1] for p in pos],
        "alt": [other_base(g[p - 1], i % 3) for i, p in enumerate(pos)],
    }


VARIANTS = _variants()
N = len(VARIANTS["pos"])


@pytest.fixture(scope="module")
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


@pytest.fixture(scope="module")
def written(model, tmp_path_factory):
    """The undamaged tables: whole runs and two shards, TSV and Parquet."""
    pytest.importorskip("pyarrow")
    folder = tmp_path_factory.mktemp("written")
    paths = {}
    with pytest.warns(sa.SeqAttribWarning):  # log_ratio of outputs that are not positive
        for suffix in ("tsv", "parquet"):
            paths[suffix] = folder / f"alone.{suffix}"
            sa.variant_effects(model, GENOME, VARIANTS, out=paths[suffix], **KWARGS)
            for i in range(2):
                shard = folder / f"shard{i}.{suffix}"
                sa.variant_effects(model, GENOME, VARIANTS, out=shard, shard=(i, 2), **KWARGS)
                paths[f"shard{i}.{suffix}"] = shard
    return paths


# --------------------------------------------------------------------------- damage
def _truncate(data, rng):
    return data[: int(rng.integers(0, len(data)))]


def _random_bytes(data, rng):
    at = int(rng.integers(0, len(data)))
    k = int(rng.integers(1, 9))
    return data[:at] + rng.integers(0, 256, k, dtype=np.uint8).tobytes() + data[at + k :]


def _cut_header(data, rng):
    lines = data.split(b"\n")
    lines[1] = lines[1][: int(rng.integers(0, len(lines[1])))]
    return b"\n".join(lines)


def _changed_header(data, rng):
    lines = data.split(b"\n")
    at = int(rng.integers(0, len(lines[1])))
    lines[1] = lines[1][:at] + b"x" + lines[1][at + 1 :]
    return b"\n".join(lines)


def _deleted_column(data, rng):
    lines = data.split(b"\n")
    j = int(rng.integers(0, lines[1].count(b"\t") + 1))
    for i in range(1, len(lines) - 1):
        fields = lines[i].split(b"\t")
        lines[i] = b"\t".join(fields[:j] + fields[j + 1 :])
    return b"\n".join(lines)


TSV_DAMAGE = [_truncate] * 8 + [_random_bytes] * 10 + [_cut_header, _changed_header] * 2
TSV_DAMAGE += [_deleted_column] * 3
PARQUET_DAMAGE = [_truncate] * 4 + [_random_bytes] * 6


def _parquet_without_a_column(source, target, rng):
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    j = int(rng.integers(0, table.num_columns))
    pq.write_table(table.remove_column(j).replace_schema_metadata(table.schema.metadata), target)


def _cases(kind):
    damage = TSV_DAMAGE if kind == "tsv" else PARQUET_DAMAGE + ["column"] * 2
    return [pytest.param(kind, i, d, id=f"{kind}-{i}") for i, d in enumerate(damage)]


def _damaged(source, target, damage, seed):
    rng = np.random.default_rng(seed)
    if damage == "column":
        _parquet_without_a_column(source, target, rng)
    else:
        target.write_bytes(damage(source.read_bytes(), rng))
    return target


# --------------------------------------------------------------------------- the truth
_CODES = {"%25": "%", "%09": "\t", "%0A": "\n", "%0D": "\r"}


def _decoded(field):
    """A chromosome name or id as written percent-encoded (as VCF 4.3 encodes them)."""
    return re.sub("%(25|09|0A|0D)", lambda m: _CODES[m.group()], field)


def _rows(data):
    """The complete data lines of TSV bytes (no settings line, header, or cut last line)."""
    return data.split(b"\n")[:-1][2:]


def _reference(data):
    """Columns read independently from TSV bytes: identity and float32 numbers per line."""
    lines = data.split(b"\n")[:-1]
    names = lines[1].decode().split("\t")
    rows = [line.decode().split("\t") for line in lines[2:]]
    cols = {}
    for i, name in enumerate(names):
        values = [r[i] for r in rows]
        if name in ("chrom", "id"):
            cols[name] = [_decoded(v) for v in values]
        elif name == "pos":
            cols[name] = [int(v) for v in values]
        elif name in ("ref", "alt"):
            cols[name] = values
        else:
            cols[name] = np.array([float(v) for v in values], dtype=np.float32)
    return cols


def _same(table, expected):
    assert list(table.columns) == list(expected)
    for name, values in expected.items():
        got = table.columns[name]
        if isinstance(values, np.ndarray):
            np.testing.assert_array_equal(got, values)
        else:
            assert got.tolist() == list(values), name


def _refused(info, path):
    message = str(info.value)
    assert "\n" not in message.strip(), message
    assert str(path) in message, message
    return message


# --------------------------------------------------------------------------- the fuzz
@pytest.mark.filterwarnings("ignore::seqattrib.SeqAttribWarning")
@pytest.mark.parametrize(("kind", "seed", "damage"), _cases("tsv") + _cases("parquet"))
def test_damaged_tables(tmp_path, model, written, kind, seed, damage):
    alone = written[kind]
    path = _damaged(alone, tmp_path / f"effects.{kind}", damage, seed)
    data = path.read_bytes()
    truth = read_effects(alone)

    # read_effects: the damaged file's own complete rows, or an error naming it
    try:
        table = read_effects(path)
    except ERRORS as exc:
        info = pytest.ExceptionInfo.from_exc_info((type(exc), exc, exc.__traceback__))
        _refused(info, path)
    else:
        _same(table, _reference(data) if kind == "tsv" else truth.columns)

    # a rerun of the job: the damaged rows kept as they are and the rest appended, or an error
    # that leaves the file as it was
    try:
        sa.variant_effects(model, GENOME, VARIANTS, out=path, **KWARGS)
    except ERRORS as exc:
        info = pytest.ExceptionInfo.from_exc_info((type(exc), exc, exc.__traceback__))
        assert "overwrite" in _refused(info, path)
        assert path.read_bytes() == data
    else:
        resumed = read_effects(path)
        for name in ("chrom", "pos", "id", "ref", "alt"):
            assert resumed.columns[name].tolist() == truth.columns[name].tolist()
        if kind == "tsv":
            kept = _rows(data)
            final = _rows(path.read_bytes())
            assert (
                final[: len(kept)] == kept
                and final[len(kept) :] == _rows(alone.read_bytes())[len(kept) :]
            )
        else:
            _same(resumed, truth.columns)

    # a merge with an undamaged shard: the shards' rows in order, or an error naming a shard
    shards = [tmp_path / f"s0.{kind}", tmp_path / f"s1.{kind}"]
    shutil.copy(written[f"shard0.{kind}"], shards[0])
    _damaged(written[f"shard1.{kind}"], shards[1], damage, seed)
    damaged_shard = shards[1].read_bytes()
    out = tmp_path / f"merged.{kind}"
    try:
        merge_effects(shards, out)
    except ERRORS as exc:
        info = pytest.ExceptionInfo.from_exc_info((type(exc), exc, exc.__traceback__))
        _refused(info, shards[1])
        assert not out.exists() and not any(
            p.name.startswith("merged.") for p in tmp_path.iterdir()
        )
    else:
        merged = read_effects(out)
        if kind == "tsv":
            expected = _reference(shards[0].read_bytes())
            second = _reference(damaged_shard)
            expected = {
                k: np.concatenate([v, second[k]]) if isinstance(v, np.ndarray) else v + second[k]
                for k, v in expected.items()
            }
            _same(merged, expected)
        else:
            _same(merged, truth.columns)
    assert shards[1].read_bytes() == damaged_shard  # merging only reads the shards


def _env():
    env = dict(os.environ)
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def test_command_line_rerun_on_damaged_tables(tmp_path):
    """``seqattrib variants`` on a damaged table: exit code 1 and one line on stderr."""
    rng = np.random.default_rng(5)
    g = "".join(rng.choice(list("ACGT"), 2000))
    (tmp_path / "genome.fa").write_text(">chr1\n" + g + "\n")
    lines = ["chrom\tpos\tid\tref\talt"]
    lines += [f"chr1\t{p}\tv{p}\t{g[p - 1]}\t{other_base(g[p - 1])}" for p in range(300, 1700, 70)]
    (tmp_path / "variants.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "effects.tsv"
    argv = ["variants", "--model", "seqattrib.demo:torch_model",
            "--genome", str(tmp_path / "genome.fa"), "--table", str(tmp_path / "variants.tsv"),
            "--length", "200", "--score", "delta", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert main(argv) == 0  # an undamaged finished table is reused
    data = out.read_bytes()
    rows = data.split(b"\n")
    damaged = {
        "header": b"\n".join([rows[0], rows[1][:9], *rows[2:]]),
        "bytes": b"\n".join([*rows[:5], rows[5][:12] + b"\xff\x00" + rows[5][14:], *rows[6:]]),
    }
    for name, text in damaged.items():
        out.write_bytes(text)
        result = subprocess.run(
            [sys.executable, "-m", "seqattrib", *argv],
            env=_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        err = result.stderr.strip()
        assert result.returncode == 1, (name, err[-2000:])
        assert "\n" not in err and err.startswith("seqattrib variants: error: --out must be"), err
        assert str(out) in err and "--overwrite" in err
        assert out.read_bytes() == text
