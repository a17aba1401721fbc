"""HDF5 tracks: round trip, resume after kill -9, refusals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.io.tracks_format import read_tracks

TESTS = Path(__file__).parents[1]


@pytest.fixture
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


def test_round_trip_with_regions_and_delta(model, tmp_path):
    X = random_one_hot(7, LENGTH, seed=31, layout="NCL").astype(np.int8)
    regions = SimpleNamespace(
        chrom=["chr1"] * 7, start=np.arange(7) * 100, end=np.arange(7) * 100 + LENGTH
    )
    path = tmp_path / "t.h5"
    kwargs = dict(target=[0, 2], n_baselines=3, n_steps=4, return_delta=True, batch_size=10)
    expected, delta = sa.expected_integrated_gradients(model, X, **kwargs)
    returned = sa.expected_integrated_gradients(
        model, X, out=path, regions=regions, max_cpu_sequences=3, **kwargs
    )
    assert returned == str(path)
    tracks = read_tracks(path)
    assert_close(tracks.attributions, expected, FLOAT32)
    assert_close(tracks.delta, delta, FLOAT32)
    np.testing.assert_array_equal(tracks.sequences, X)
    assert tracks.regions.chrom == ["chr1"] * 7
    np.testing.assert_array_equal(tracks.regions.start, regions.start)
    assert tracks.attrs["n_completed"] == 7 and tracks.attrs["backend"] == "torch"
    settings = tracks.settings
    assert settings["method"] == "expected_integrated_gradients"
    assert settings["targets"] == [0, 2] and settings["n_steps"] == 4
    assert settings["baselines"] == "dinuc_shuffle" and settings["random_state"] == 0
    with h5py.File(path) as f:
        assert f["sequences"].dtype == np.int8 and f["attributions"].compression == "gzip"
        assert f["attributions"].maxshape[0] is None
    part = read_tracks(path, rows=slice(2, 5))
    assert_close(part.attributions, expected[2:5], FLOAT32)


@pytest.mark.parametrize("method", ["saliency", "ig", "ism"])
def test_every_method_writes_tracks(model, tmp_path, method):
    X = random_one_hot(4, LENGTH, seed=32, layout="NCL")
    expected = sa.explain(model, X, method=method, target=1)
    path = sa.explain(model, X, method=method, target=1, out=tmp_path / f"{method}.h5")
    tracks = read_tracks(path)
    assert tracks.attributions.shape == X.shape
    assert_close(tracks.attributions, expected, FLOAT32)
    assert tracks.sequences.dtype == np.float32


def test_refusals(model, tmp_path):
    X = random_one_hot(4, LENGTH, seed=33, layout="NCL")
    path = tmp_path / "t.h5"
    sa.integrated_gradients(model, X, n_steps=4, out=path)
    with pytest.raises(ValueError, match=r"'out'.*n_steps=4 \(now 5\).*overwrite=True"):
        sa.integrated_gradients(model, X, n_steps=5, out=path)
    with pytest.raises(ValueError, match=r"'out'.*targets=\[0\] \(now \[1\]\)"):
        sa.integrated_gradients(model, X, n_steps=4, target=1, out=path)
    other = X.copy()
    other[0] = np.roll(other[0], 1, axis=-1)
    with pytest.raises(ValueError, match=r"stored sequences differ from X"):
        sa.integrated_gradients(model, other, n_steps=4, out=path)
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(ValueError, match=r"'out'.*unreadable file"):
        sa.integrated_gradients(model, X, out=tmp_path / "x.npy")
    same = sa.integrated_gradients(model, X, n_steps=4, out=path)  # complete: nothing to do
    assert read_tracks(same).attrs["n_completed"] == 4
    sa.integrated_gradients(model, X, n_steps=5, out=path, overwrite=True)
    assert read_tracks(path).settings["n_steps"] == 5
    with pytest.raises(ValueError, match=r"'out'.*existing folder"):
        sa.integrated_gradients(model, X, out=tmp_path / "missing" / "t.h5")
    with pytest.raises(ValueError, match=r"'regions'.*one region per sequence"):
        sa.saliency(
            model,
            X,
            out=tmp_path / "r.h5",
            regions=SimpleNamespace(chrom=["c"], start=[0], end=[1]),
        )


WORKER = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, models, seqattrib as sa
torch.set_num_threads(1)
model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
X = models.random_one_hot(240, {length}, seed=34, layout="NCL")
sa.expected_integrated_gradients(model, X, target=[0, 1], n_baselines=4, n_steps=4,
                                 random_state=None, batch_size=64, max_cpu_sequences=4,
                                 out={path!r})
"""


def _completed(path: Path) -> int:
    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            return int(f.attrs["n_completed"])
    except (OSError, KeyError):
        return 0


@pytest.mark.parametrize("kill_after", [8, 60])
def test_resume_after_kill_equals_an_uninterrupted_run(model, tmp_path, kill_after):
    path = tmp_path / "killed.h5"
    code = WORKER.format(tests=str(TESTS), length=LENGTH, path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while _completed(path) < kill_after and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    interrupted = read_tracks(path)  # the file opens and claims only rows it wrote
    done = interrupted.attrs["n_completed"]
    assert kill_after <= done < 240, f"killed after {done} rows"
    assert np.isfinite(interrupted.attributions).all()
    seed = interrupted.attrs["seed"]
    X = random_one_hot(240, LENGTH, seed=34, layout="NCL")
    kwargs = dict(target=[0, 1], n_baselines=4, n_steps=4, batch_size=64, max_cpu_sequences=4)
    sa.expected_integrated_gradients(model, X, random_state=None, out=path, **kwargs)
    resumed = read_tracks(path)
    assert resumed.attrs["n_completed"] == 240 and resumed.attrs["seed"] == seed
    uninterrupted = sa.expected_integrated_gradients(model, X, random_state=seed, **kwargs)
    assert_close(resumed.attributions, uninterrupted, FLOAT32)
    assert_close(resumed.attributions[:done], interrupted.attributions, FLOAT32)


def test_files_carry_fingerprints_and_older_files_are_read_but_not_resumed(model, tmp_path):
    X = random_one_hot(4, LENGTH, seed=35, layout="NCL")
    path = sa.saliency(model, X, out=tmp_path / "t.h5")
    attrs = read_tracks(path).attrs
    assert attrs["format"] == "seqattrib.tracks/2" and attrs["output_fn"] == "None"
    assert len(attrs["model_fingerprint"]) == 32 and attrs["provenance"] == "{}"
    with h5py.File(path, "r") as f:
        assert f["row_hashes"].shape == (4, 16)
    with h5py.File(path, "r+") as f:  # as version 1 wrote it
        f.attrs["format"] = "seqattrib.tracks/1"
        f.attrs["n_completed"] = 2
        for key in ("model_fingerprint", "output_fn", "provenance"):
            del f.attrs[key]
        del f["row_hashes"]
    assert read_tracks(path).attributions.shape == (2, 4, LENGTH)
    with pytest.raises(ValueError, match=r"older seqattrib without the fingerprints"):
        sa.saliency(model, X, out=path)


def test_out_that_names_no_file_is_refused_and_nothing_is_written(model, tmp_path, monkeypatch):
    X = random_one_hot(4, LENGTH, seed=36, layout="NCL")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"'out' parameter of saliency must be a file path"):
        sa.saliency(model, X, out="")
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"'out' .*a file path, not a folder.*results/tracks.h5"):
        sa.saliency(model, X, out=folder, overwrite=True)
    assert (folder / "keep.txt").read_text() == "mine"
    dangling = tmp_path / "link.h5"
    dangling.symlink_to(tmp_path / "gone" / "t.h5")
    with pytest.raises(ValueError, match=r"'out' .*link to the missing '.*gone/t.h5'"):
        sa.saliency(model, X, out=dangling)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.h5", "results"]
    (tmp_path / "t.h5.creating").mkdir()  # not a leftover of ours: refused in one line
    (tmp_path / "t.h5.creating" / "x").write_text("")
    with pytest.raises(OSError, match=r"'out' .*removing '.*t.h5.creating' failed"):
        sa.saliency(model, X, out=tmp_path / "t.h5")


def test_regions_of_another_width_than_the_rows_are_refused_at_the_start(model, tmp_path):
    X = random_one_hot(3, LENGTH, seed=37, layout="NCL")
    start = np.arange(3) * 100
    wide = SimpleNamespace(chrom=["chr1"] * 3, start=start, end=start + LENGTH + 10)
    path = tmp_path / "t.h5"
    pattern = r"'regions' parameter of saliency must be regions as wide as the sequences \(24"
    with pytest.raises(ValueError, match=pattern + r".*region 0 \(chr1:0-34\), 34 bases wide"):
        sa.saliency(model, X, out=path, regions=wide)
    assert not path.exists()


def test_read_tracks_refuses_rows_it_cannot_select(model, tmp_path):
    X = random_one_hot(4, LENGTH, seed=38, layout="NCL")
    path = sa.saliency(model, X, out=tmp_path / "t.h5")
    with pytest.raises(TypeError, match=r"'rows' parameter of read_tracks must be None or a sl"):
        read_tracks(path, rows=[5])
    with pytest.raises(TypeError, match=r"'rows' .*Got -1 instead. Pass e.g. rows=slice\(5, 6\)"):
        read_tracks(path, rows=-1)
    with pytest.raises(ValueError, match=r"'rows' .*within the 4 completed rows"):
        read_tracks(path, rows=slice(5, 6))
    with pytest.raises(ValueError, match=r"'rows' .*positive step"):
        read_tracks(path, rows=slice(None, None, -1))
    np.testing.assert_array_equal(
        read_tracks(path, rows=slice(1, 3)).attributions, read_tracks(path).attributions[1:3]
    )
    assert len(read_tracks(path, rows=slice(4, 6)).attributions) == 0
