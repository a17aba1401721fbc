"""Faults of the variant effects table: two runs writing one table, a full disk while writing
it, and merges of shards that are read-only or lack some of their attribution tracks.

Like the tracks writer, the table's writer holds the one-writer lock (a second run is refused,
naming the first, and the first finishes as if alone), and a failed write is a one-line
``OSError`` that leaves a table a rerun resumes. Merging only reads its shards.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket

import numpy as np
import pytest
from _faults import leftovers, tmpfs_mounts
from conftest import make_model

import seqattrib as sa
from seqattrib.io.lock import acquire
from seqattrib.shards import shard_path
from seqattrib.variants import merge_effects, read_effects
from seqattrib.variants import table as effects_table

L = 24
NO_SPACE = "No space left on device"


def _genome(size: int) -> dict[str, str]:
    rng = np.random.default_rng(11)
    return {"chr1": "".join(rng.choice(list("ACGT"), size))}


def _snvs(genome: dict[str, str], step: int) -> dict[str, list]:
    """One SNV every ``step`` bases (none skipped), as a table of columns."""
    g = genome["chr1"]
    pos = list(range(L, len(g) - L, step))
    return {
        "chrom": ["chr1"] * len(pos),
        "pos": pos,
        "id": [f"v{i}" for i in range(len(pos))],
        "ref": [g[p - 1] for p in pos],
        "alt": [next(b for b in "ACGT" if b != g[p - 1]) for p in pos],
    }


GENOME = _genome(400)
VARIANTS = _snvs(GENOME, 20)
KWARGS = dict(length=L, target=[0, 2], score="delta", max_cpu_sequences=3)


@pytest.fixture(scope="module")
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


@pytest.fixture(scope="module")
def alone(model, tmp_path_factory):
    """The table one undisturbed run writes."""
    out = tmp_path_factory.mktemp("alone") / "effects.tsv"
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    return out


def _one_line(message: str) -> str:
    assert "\n" not in message.strip(), message
    return message


# --------------------------------------------------------------------------- two writers
@pytest.mark.parametrize("overwrite", [False, True], ids=["resume", "overwrite"])
def test_a_second_writer_is_refused_and_the_first_finishes_as_if_alone(
    monkeypatch, tmp_path, model, alone, overwrite
):
    out = tmp_path / "effects.tsv"
    seen: dict[str, object] = {}
    write = effects_table.EffectsWriter.write

    def write_then_second_run(self, start, block):  # a second run while the first holds it
        write(self, start, block)
        if seen:
            return
        seen["during"] = out.read_bytes()
        skipped = tmp_path / "effects.skipped.tsv"
        seen["skipped"] = os.stat(skipped).st_ino if skipped.exists() else None
        with pytest.raises(BlockingIOError) as info:
            sa.variant_effects(model, GENOME, VARIANTS, out=out, overwrite=overwrite, **KWARGS)
        seen["error"] = str(info.value)
        seen["after"] = out.read_bytes()
        seen["skipped after"] = os.stat(skipped).st_ino if skipped.exists() else None

    monkeypatch.setattr(effects_table.EffectsWriter, "write", write_then_second_run)
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    message = _one_line(str(seen["error"]))
    assert message.startswith("The 'out' parameter of variant_effects"), message
    assert f"{str(out)!r}, which pid {os.getpid()} on host {socket.gethostname()}" in message
    assert "Wait for that run to end or stop it" in message
    assert seen["after"] == seen["during"]  # the refused run wrote nothing
    assert seen["skipped"] is not None  # ... not even the skipped list beside the table
    assert seen["skipped after"] == seen["skipped"]
    assert 0 < seen["during"].count(b"\n") - 2 < len(VARIANTS["pos"])
    assert out.read_bytes() == alone.read_bytes()
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- failed writes
class _FailingTableWrites:
    """Writes to ``path`` (and no other file): the ``n``-th call writes half its bytes (a short
    write), every later one raises ENOSPC."""

    def __init__(self, monkeypatch, path, n):
        original = os.write
        self.calls = 0

        def write(fd, data):
            if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
                self.calls += 1
                if self.calls == n:
                    return original(fd, bytes(data)[: len(data) // 2])
                if self.calls > n:
                    raise OSError(errno.ENOSPC, NO_SPACE)
            return original(fd, data)

        monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("suffix", ["tsv", "parquet"])
def test_an_injected_write_failure_keeps_complete_rows_and_resumes(
    monkeypatch, tmp_path, model, alone, suffix
):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"effects.{suffix}"
    text = out if suffix == "tsv" else tmp_path / "effects.parquet.partial.tsv"
    with monkeypatch.context() as patch:
        failing = _FailingTableWrites(patch, text, 3)
        with pytest.raises(OSError, match=r"'out' parameter of variant_effects") as info:
            sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    assert failing.calls == 4  # a short write, then the failure of the rest of that block
    message = _one_line(str(info.value))
    assert info.value.errno == errno.ENOSPC and NO_SPACE in message
    assert "rerun the same command to resume" in message
    kept = text.read_bytes()  # the rows before the failed block, and nothing of it
    rows = kept.count(b"\n") - 2
    assert alone.read_bytes().startswith(kept) and kept.endswith(b"\n")
    assert 0 < rows < len(VARIANTS["pos"])
    assert f"The file keeps its {rows} complete rows" in message
    assert leftovers(tmp_path) == [] and not out.with_name(out.name + ".lock").exists()
    sa.variant_effects(model, GENOME, VARIANTS, out=out, **KWARGS)
    if suffix == "tsv":
        assert out.read_bytes() == alone.read_bytes()
    else:
        resumed, expected = read_effects(out).columns, read_effects(alone).columns
        assert list(resumed) == list(expected) and not text.exists()
        for name, values in expected.items():
            np.testing.assert_array_equal(resumed[name], values)
    assert leftovers(tmp_path) == []


@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mounts(tmp_path) as mount:
        yield mount


def test_a_full_disk_then_resume(tmpfs, model):
    genome = _genome(6000)
    variants = _snvs(genome, 10)
    one = sa.variant_effects(model, genome, variants, **KWARGS)
    fs = tmpfs("1m")
    out = fs.path / "effects.tsv"
    ballast = fs.fill(leave=4 * 4096)  # the skipped list, the lock, the first table pages
    with pytest.raises(OSError, match=rf"'out' parameter of variant_effects.*{NO_SPACE}") as e:
        sa.variant_effects(model, genome, variants, out=out, **KWARGS)
    _one_line(str(e.value))
    kept = out.read_bytes()
    assert kept.endswith(b"\n") and 0 < kept.count(b"\n") - 2 < len(variants["pos"])
    assert leftovers(fs.path) == []
    ballast.unlink()
    sa.variant_effects(model, genome, variants, out=out, **KWARGS)
    table = read_effects(out)
    assert table.columns["pos"].tolist() == variants["pos"]
    np.testing.assert_allclose(table.columns["delta_2"], one.scores["delta"][:, 1], rtol=1e-6)
    assert leftovers(fs.path) == []


# --------------------------------------------------------------------------- merging
@pytest.fixture(scope="module")
def shards(model, tmp_path_factory):
    """Three shard tables of one job with their attribution tracks and skipped lists."""
    folder = tmp_path_factory.mktemp("shards")
    out = str(folder / "effects.tsv")
    kwargs = dict(KWARGS, attributions="saliency")
    paths = []
    for i in range(3):
        path = shard_path(out, i, 3)
        sa.variant_effects(model, GENOME, VARIANTS, out=path, shard=(i, 3), **kwargs)
        paths.append(path)
    return folder, [os.path.basename(p) for p in paths]


def _copy(shards, folder):
    source, names = shards
    folder.mkdir()
    for item in source.iterdir():
        shutil.copy(item, folder / item.name)
    return [folder / name for name in names]


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_merging_read_only_shards_leaves_them_as_they_are(tmp_path, shards, alone):
    if os.geteuid() == 0:  # root writes to any file whatever its mode: a read-only mount
        with tmpfs_mounts(tmp_path) as mount:
            fs = mount("8m")
            paths = _copy(shards, fs.path / "shards")
            before = _digests(fs.path / "shards")
            fs.remount("ro")
            merged = merge_effects(paths, tmp_path / "merged.tsv")
            assert _digests(fs.path / "shards") == before
    else:
        paths = _copy(shards, tmp_path / "shards")
        before = _digests(tmp_path / "shards")
        for p in (tmp_path / "shards").iterdir():
            p.chmod(0o444)
        merged = merge_effects(paths, tmp_path / "merged.tsv")
        assert _digests(tmp_path / "shards") == before
    assert read_effects(merged).columns["pos"].tolist() == VARIANTS["pos"]
    for allele in ("ref", "alt"):
        tracks = sa.io.read_tracks(tmp_path / f"merged.{allele}.h5")
        assert tracks.attrs["n_completed"] == len(VARIANTS["pos"])
    assert (tmp_path / "merged.skipped.tsv").exists()


def test_merge_refuses_shards_of_which_only_some_have_tracks(tmp_path, shards):
    paths = _copy(shards, tmp_path / "shards")
    lacking = effects_table.companion(paths[1], "alt")
    os.remove(lacking)
    out = tmp_path / "merged.tsv"
    with pytest.raises(ValueError, match="all have alt attribution tracks, or none") as info:
        merge_effects(paths, out)
    message = _one_line(str(info.value))
    assert repr(lacking) in message and "Rerun the shards that lack them" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]  # nothing written


@pytest.mark.parametrize("kind", ["ref", "skipped"])
def test_merge_replaces_files_beside_out_only_with_overwrite(tmp_path, shards, kind):
    paths = _copy(shards, tmp_path / "shards")
    out = tmp_path / "merged.tsv"
    beside = tmp_path / os.path.basename(effects_table.companion(out, kind))
    beside.write_text("keep me\n")
    with pytest.raises(FileExistsError, match="Pass overwrite=True") as info:
        merge_effects(paths, out)
    assert repr(str(beside)) in _one_line(str(info.value))
    assert beside.read_text() == "keep me\n" and not out.exists()
    assert leftovers(tmp_path) == []
    merge_effects(paths, out, overwrite=True)
    assert beside.read_bytes() != b"keep me\n"
    assert read_effects(out).columns["pos"].tolist() == VARIANTS["pos"]


def test_merge_is_refused_while_another_run_writes_out(tmp_path, shards):
    paths = _copy(shards, tmp_path / "shards")
    out = tmp_path / "merged.tsv"
    held = acquire(str(out), "variant_effects")
    try:
        with pytest.raises(BlockingIOError, match="no other process is writing"):
            merge_effects(paths, out)
    finally:
        held.release()
    assert not out.exists()
    merge_effects(paths, out)  # once the other run is done
    assert out.exists()
