"""ChromBPNet contribution scores files from tracks files: the layout ChromBPNet's interpret
step writes, read back with plain h5py and by `modisco motifs -i`."""

from __future__ import annotations

import os
import shutil
import subprocess
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.cli import main
from seqattrib.io import export_chrombpnet, read_tracks

N = 7


def _regions(n):
    return SimpleNamespace(
        chrom=["chr2"] * n, start=1000 + np.arange(n) * 50, end=1000 + np.arange(n) * 50 + LENGTH
    )


@pytest.fixture(scope="module")
def saliency_tracks(conv_weights, tmp_path_factory):
    """Hypothetical scores of targets 0 and 2, with regions, in the (N, L, 4) layout."""
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(N, LENGTH, seed=51)
    X[3, 5:8] = 0  # N bases: all-zero columns
    path = tmp_path_factory.mktemp("chrombpnet") / "t.h5"
    sa.saliency(model, X, target=[0, 2], out=path, regions=_regions(N))
    return path, X, model


def _read(path):
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["projected_shap", "raw", "shap"]
        assert all(list(f[group]) == ["seq"] for group in f)
        return {group: f[group]["seq"][()] for group in f}


@pytest.mark.parametrize("target, k", [(2, 1), (0, 0)])
def test_layout_values_and_regions_of_one_target(saliency_tracks, tmp_path, target, k):
    path, X, model = saliency_tracks
    out = tmp_path / "sample.counts_scores.h5"
    files = export_chrombpnet(path, out, target=target, max_cpu_sequences=3)
    bed = tmp_path / "sample.counts_scores.interpreted_regions.bed"
    assert files == [out, bed]
    got = _read(out)
    assert got["raw"].dtype == np.int8 and got["raw"].shape == (N, 4, LENGTH)
    assert got["shap"].dtype == got["projected_shap"].dtype == np.float32
    assert got["shap"].shape == got["projected_shap"].shape == (N, 4, LENGTH)
    np.testing.assert_array_equal(got["raw"], X.transpose(0, 2, 1))
    stored = read_tracks(path).attributions[:, k].transpose(0, 2, 1)
    np.testing.assert_array_equal(got["shap"], stored)
    np.testing.assert_array_equal(got["projected_shap"], got["raw"] * got["shap"])
    # the scores of that target as the method gives them in memory
    assert_close(got["shap"], sa.saliency(model, X, target=target).transpose(0, 2, 1), FLOAT32)
    lines = [line.split("\t") for line in bed.read_text().splitlines()]
    assert len(lines) == N and all(len(line) == 10 for line in lines)
    start = 1000 + 4 * 50
    assert lines[4] == [
        "chr2",
        str(start),
        str(start + LENGTH),
        ".",
        "0",
        ".",
        "-1",
        "-1",
        "-1",
    ] + [str(LENGTH // 2)]
    with h5py.File(out) as f:
        assert f.attrs["target"] == target and f.attrs["method"] == "saliency"


def test_channels_first_tracks_and_ism_scores_centred(conv_weights, tmp_path):
    model = make_model("torch", "convnet", conv_weights, "NCL")
    X = random_one_hot(4, LENGTH, seed=52, layout="NCL")
    path = sa.ism(model, X, target=1, out=tmp_path / "ism.h5")
    files = export_chrombpnet(path, tmp_path / "ism_scores.h5", compression=None)
    assert files == [tmp_path / "ism_scores.h5"]  # no regions: no regions file
    got = _read(files[0])
    np.testing.assert_array_equal(got["raw"], X)
    expected = sa.ism_to_hypothetical(sa.ism(model, X, target=1), alphabet_axis=1)
    assert_close(got["shap"], expected, FLOAT32)
    np.testing.assert_array_equal(got["projected_shap"], got["raw"] * got["shap"])
    with h5py.File(files[0]) as f:
        assert f["shap"]["seq"].compression is None


def test_blocks_do_not_change_the_file(saliency_tracks, tmp_path):
    path, _, _ = saliency_tracks
    whole = _read(export_chrombpnet(path, tmp_path / "a.h5", target=2)[0])
    for rows in (1, 4, 100):
        blocks = _read(
            export_chrombpnet(path, tmp_path / f"b{rows}.h5", target=2, max_cpu_sequences=rows)[0]
        )
        for group, values in whole.items():
            np.testing.assert_array_equal(blocks[group], values)


def test_target_must_be_one_of_the_file(saliency_tracks, tmp_path):
    path, _, _ = saliency_tracks
    with pytest.raises(ValueError, match=r"'target'.*targets \[0, 2\].*Pass target=0"):
        export_chrombpnet(path, tmp_path / "s.h5")
    with pytest.raises(ValueError, match=r"'target'.*targets \[0, 2\]. Got 1 instead"):
        export_chrombpnet(path, tmp_path / "s.h5", target=1)
    with pytest.raises(TypeError, match=r"'target'"):
        export_chrombpnet(path, tmp_path / "s.h5", target=True)
    with pytest.raises(ValueError, match=r"'compression'.*'gzip' or None"):
        export_chrombpnet(path, tmp_path / "s.h5", target=0, compression="blosc")
    assert list(tmp_path.iterdir()) == []


def test_contributions_are_refused(conv_weights, tmp_path):
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=53)
    path = sa.integrated_gradients(model, X, n_steps=2, out=tmp_path / "ig.h5")
    with pytest.raises(ValueError, match=r"hypothetical.*multiply_by_inputs=False"):
        export_chrombpnet(path, tmp_path / "s.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ig.h5"]


def test_soft_encodings_are_refused_naming_the_row(conv_weights, tmp_path):
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH, seed=54)
    X[2, 4] = 0.25  # an N written as 0.25 everywhere: raw/seq is int8
    path = sa.saliency(model, X, out=tmp_path / "t.h5")
    with pytest.raises(ValueError, match=r"row 2 holding the value 0.25.*all-zero column"):
        export_chrombpnet(path, tmp_path / "s.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.h5"]


def test_existing_files_are_kept_without_overwrite(saliency_tracks, tmp_path):
    path, _, _ = saliency_tracks
    out = tmp_path / "s.h5"
    bed = tmp_path / "s.interpreted_regions.bed"
    for mine in (out, bed):
        mine.write_bytes(b"mine")
        with pytest.raises(FileExistsError, match=r"'out'.*overwrite=True"):
            export_chrombpnet(path, out, target=0)
        assert mine.read_bytes() == b"mine"
        mine.unlink()
    out.write_bytes(b"mine")
    export_chrombpnet(path, out, target=0, overwrite=True)
    assert _read(out)["raw"].shape == (N, 4, LENGTH)
    with pytest.raises(ValueError, match=r"'out'.*other than the tracks file"):
        export_chrombpnet(path, path, target=0, overwrite=True)
    assert len(read_tracks(path).attributions) == N


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_export_that_fails_midway_leaves_no_file(saliency_tracks, tmp_path, monkeypatch, error):
    from seqattrib.io import chrombpnet

    path, _, _ = saliency_tracks
    calls = []
    real = chrombpnet._one_hot_int8

    def fail_on_the_second_block(*args):
        calls.append(1)
        if len(calls) == 2:
            raise error("interrupted")
        return real(*args)

    monkeypatch.setattr(chrombpnet, "_one_hot_int8", fail_on_the_second_block)
    with pytest.raises(error):
        export_chrombpnet(path, tmp_path / "s.h5", target=0, max_cpu_sequences=2)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "s.h5").write_bytes(b"the previous export")
    calls.clear()
    with pytest.raises(error):
        export_chrombpnet(path, tmp_path / "s.h5", target=0, max_cpu_sequences=2, overwrite=True)
    assert (tmp_path / "s.h5").read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


def test_command_line(saliency_tracks, tmp_path, capsys):
    path, _, _ = saliency_tracks
    out = tmp_path / "sub" / "s.h5"
    assert main(["export", "chrombpnet", str(path), "-o", str(out), "--target", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(out), str(out.parent / "s.interpreted_regions.bed")]
    assert "export_chrombpnet" in captured.err  # the progress bar
    np.testing.assert_array_equal(
        _read(out)["shap"], read_tracks(path).attributions[:, 1].transpose(0, 2, 1)
    )
    argv = ["export", "chrombpnet", str(path), "-o", str(tmp_path / "t.h5"), "--quiet"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--target must be one of" in err
    assert "Pass --target 0" in err
    assert main([*argv, "--target", "0"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*argv, "--target", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--out must be" in err and "--overwrite" in err
    assert main(["export", "modisco", str(path), "-o", str(tmp_path / "m"), "--target", "0"]) == 1
    assert "--target must be left out" in capsys.readouterr().err


@pytest.mark.slow
def test_modisco_reads_the_file(tmp_path):
    """`modisco motifs -i` (TF-MoDISco's reader of ChromBPNet files) runs on the export."""
    from seqattrib import demo

    if shutil.which("modisco") is None:
        pytest.skip("modisco-lite is not installed (pip install modisco-lite)")
    data = demo.load_data()
    positives = np.flatnonzero(data["labels"][:, 0] > 0)[:40]
    X = sa.one_hot([data["sequences"][i] for i in positives], layout="NCL", dtype=np.int8)
    tracks = sa.saliency(demo.torch_model(), X, target=0, out=tmp_path / "t.h5")
    scores = export_chrombpnet(tracks, tmp_path / "GATA.counts_scores.h5")[0]
    result = tmp_path / "modisco_results.h5"
    argv = ["modisco", "motifs", "-i", str(scores), "-n", "100", "-l", "1", "-w", "200"]
    run = subprocess.run(
        [*argv, "-o", str(result)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with h5py.File(result) as f:  # modisco's results file, written to the end
        assert f.attrs["window_size"] == 200
