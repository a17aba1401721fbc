"""Names and places: class names that would leave the export folder, files on a read-only
mount, and files whose claimed row count was altered."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from _faults import tmpfs_mounts, write_partially
from models import convnet_weights, random_one_hot, torch_model

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.io import export_bigwig, export_modisco, read_tracks
from seqattrib.io.merge import merge_tracks

LENGTH = 24


@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mounts(tmp_path) as mount:
        yield mount


@pytest.fixture(scope="module")
def model():
    return torch_model("convnet", convnet_weights(n_outputs=3), "NLC")


@pytest.fixture(scope="module")
def X():
    return random_one_hot(5, LENGTH, seed=31)


@pytest.fixture
def tracks(model, X, tmp_path):
    start = np.arange(5) * 100
    regions = type("R", (), dict(chrom=["chr1"] * 5, start=start, end=start + LENGTH))
    path = sa.saliency(model, X, target=[0, 1], out=tmp_path / "t.h5", regions=regions)
    (tmp_path / "sizes").write_text("chr1\t1000\n")
    return path


BAD_NAMES = ["../../x", "/tmp/x", "a/b", "..", ".", "", "a\\b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_class_names_that_are_no_file_names_are_refused(tracks, tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for export, args in ((export_modisco, ()), (export_bigwig, (tmp_path / "sizes",))):
        with pytest.raises(ValueError, match=r"'class_names' parameter .* file names"):
            export(tracks, out, *args, class_names=[name, "second"])
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_the_cli_refuses_a_class_name_leaving_the_folder(tracks, tmp_path, capsys):
    out = tmp_path / "a" / "b"
    out.mkdir(parents=True)
    argv = ["export", "modisco", str(tracks), "-o", str(out), "--class-names", "../../x,y"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--class-names must be names usable as file names" in err
    assert list(tmp_path.glob("x_*")) == [] and list(out.iterdir()) == []


def test_a_finished_file_on_a_read_only_mount_is_reused(tmpfs, model, X):
    fs = tmpfs("4m")
    path = sa.saliency(model, X, out=fs.path / "t.h5")
    unfinished = fs.path / "u.h5"
    write_partially(sa.saliency, model, X, unfinished, 1, max_cpu_sequences=2)
    fs.remount("ro")
    assert sa.saliency(model, X, out=path) == path
    np.testing.assert_array_equal(read_tracks(path).attributions, sa.saliency(model, X))
    with pytest.raises(PermissionError, match=r"'out' .*finished file.*2 of 5 rows.*read-only"):
        sa.saliency(model, X, out=unfinished, max_cpu_sequences=2)
    with pytest.raises(PermissionError, match=r"'out' .*folder this process can write to"):
        sa.saliency(model, X, out=fs.path / "new.h5")
    with pytest.raises(PermissionError, match=r"'out' .*folder this process can write to"):
        sa.saliency(model, X, out=path, overwrite=True)
    with pytest.raises(ValueError, match=r"written with another model"):
        sa.saliency(torch_model("convnet", convnet_weights(3, seed=4), "NLC"), X, out=path)


@pytest.mark.parametrize("claim", [6, -1, 2.5])
def test_an_altered_row_count_is_refused_by_every_reader(tracks, tmp_path, model, X, claim):
    with h5py.File(tracks, "r+") as f:
        f.attrs["n_completed"] = claim
    pattern = r"parameter of {} must be an intact tracks file.*claims {} completed rows"
    with pytest.raises(ValueError, match=pattern.format("read_tracks", claim)):
        read_tracks(tracks)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=pattern.format("export_modisco", claim)):
        export_modisco(tracks, out)
    with pytest.raises(ValueError, match=pattern.format("export_bigwig", claim)):
        export_bigwig(tracks, out, tmp_path / "sizes")
    assert list(out.iterdir()) == []
    with pytest.raises(ValueError, match=pattern.format("merge_tracks", claim)):
        merge_tracks([tracks], tmp_path / "m.h5")
    with pytest.raises(ValueError, match=pattern.format("saliency", claim)):
        sa.saliency(model, X, target=[0, 1], out=tracks)
