"""TF-MoDISco inputs and bigWig tracks from tracks files."""

from __future__ import annotations

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
from seqattrib.io import export_bigwig, export_modisco, read_tracks


@pytest.fixture
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def _regions(n):
    return SimpleNamespace(
        chrom=["chrA"] * n, start=np.arange(n) * 50, end=np.arange(n) * 50 + LENGTH
    )


def test_modisco_inputs_in_the_form_modisco_reads(model, tmp_path):
    X = random_one_hot(6, LENGTH, seed=41)
    hyp = sa.expected_integrated_gradients(
        model, X, target=[0, 2], multiply_by_inputs=False, n_baselines=3, n_steps=3
    )
    path = sa.expected_integrated_gradients(
        model,
        X,
        target=[0, 2],
        multiply_by_inputs=False,
        n_baselines=3,
        n_steps=3,
        out=tmp_path / "t.h5",
        regions=_regions(6),
    )
    out = tmp_path / "modisco"
    out.mkdir()
    files = export_modisco(path, out, class_names={0: "first", 2: "third"})
    assert sorted(p.name for p in files) == sorted(
        f"{c}_{k}" for c in ("first", "third") for k in ("ohe.npz", "attr.npz", "regions.bed")
    )
    from modiscolite.cli import _load_input  # modisco-lite's own loader

    for k, name in enumerate(["first", "third"]):
        ohe = _load_input(out / f"{name}_ohe.npz")
        attr = np.load(out / f"{name}_attr.npz")["arr_0"]
        assert ohe.shape == attr.shape == (6, 4, LENGTH) and attr.dtype == np.float32
        np.testing.assert_array_equal(ohe, X.transpose(0, 2, 1))
        assert_close(attr, hyp[:, k].transpose(0, 2, 1), FLOAT32)
    bed = (out / "first_regions.bed").read_text().splitlines()
    assert bed[1] == f"chrA\t50\t{50 + LENGTH}"
    with pytest.raises(FileExistsError, match=r"overwrite"):
        export_modisco(path, out, class_names={0: "first", 2: "third"})


def test_modisco_refuses_non_hypothetical_and_centres_ism(model, tmp_path):
    X = random_one_hot(3, LENGTH, seed=42)
    plain = sa.integrated_gradients(model, X, out=tmp_path / "ig.h5")
    with pytest.raises(ValueError, match=r"hypothetical.*multiply_by_inputs=False"):
        export_modisco(plain, tmp_path)
    ism = sa.ism(model, X, target=1, out=tmp_path / "ism.h5")
    export_modisco(ism, tmp_path)
    attr = np.load(tmp_path / "target1_attr.npz")["arr_0"]
    expected = sa.ism_to_hypothetical(sa.ism(model, X, target=1)).transpose(0, 2, 1)
    assert_close(attr, expected, FLOAT32)


def test_bigwig_export_equals_projected_scores(model, tmp_path):
    pybigwig = pytest.importorskip("pyBigWig")
    X = random_one_hot(4, LENGTH, seed=43)
    regions = SimpleNamespace(
        chrom=["chrA", "chrA", "chrB", "chrB"],
        start=[0, 100, 10, 60],
        end=[LENGTH, 100 + LENGTH, 10 + LENGTH, 60 + LENGTH],
    )
    path = sa.expected_integrated_gradients(
        model, X, target=[1, 2], n_baselines=2, n_steps=3, out=tmp_path / "t.h5", regions=regions
    )
    files = export_bigwig(path, tmp_path, {"chrA": 500, "chrB": 300})
    scores = sa.project(read_tracks(path).attributions, X)  # (4, 2, L)
    for k, file in enumerate(files):
        with pybigwig.open(str(file)) as bw:
            got = np.array(bw.values("chrA", 100, 100 + LENGTH))
            assert_close(got, scores[1, k], FLOAT32)
            got = np.array(bw.values("chrB", 10, 10 + LENGTH))
            assert_close(got, scores[2, k], FLOAT32)
    with pytest.raises(ValueError, match=r"regions="):
        export_bigwig(sa.saliency(model, X, out=tmp_path / "s.h5"), tmp_path, {"chrA": 500})


@pytest.mark.slow
def test_modisco_finds_the_planted_gata_motif_on_the_demo(tmp_path):
    """End to end: demo EIG hypothetical scores -> export -> `modisco motifs` -> GATA."""
    from seqattrib import demo

    if shutil.which("modisco") is None:
        pytest.skip("modisco-lite is not installed (pip install modisco-lite)")

    data = demo.load_data()
    positives = np.flatnonzero(data["labels"][:, 0] > 0)[:300]
    X = sa.one_hot([data["sequences"][i] for i in positives], layout="NCL", dtype=np.int8)
    tracks = sa.expected_integrated_gradients(
        demo.torch_model(),
        X,
        target=0,
        multiply_by_inputs=False,
        n_baselines=10,
        n_steps=10,
        out=tmp_path / "t.h5",
    )
    export_modisco(tracks, tmp_path, class_names=["GATA"])
    result = tmp_path / "modisco.h5"
    subprocess.run(
        [
            "modisco",
            "motifs",
            "-s",
            str(tmp_path / "GATA_ohe.npz"),
            "-a",
            str(tmp_path / "GATA_attr.npz"),
            "-n",
            "2000",
            "-w",
            "200",
            "-o",
            str(result),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    consensus = []
    with h5py.File(result) as f:
        for pattern in f["pos_patterns"].values():
            contrib = pattern["contrib_scores"][:]
            consensus.append("".join("ACGT"[i] for i in contrib.argmax(axis=1)))
    assert any("GATA" in c or "TATC" in c for c in consensus), consensus


def test_export_modisco_takes_arrays_like_a_tracks_file(tmp_path):
    """Scores in memory give the files a tracks file of the same scores gives."""
    import seqattrib as sa
    from seqattrib import demo

    X = sa.one_hot(demo.load_data()["sequences"][:6], layout="NCL")
    model = demo.torch_model()
    kwargs = dict(target=[0, 2], n_baselines=3, multiply_by_inputs=False)
    scores = sa.expected_integrated_gradients(model, X, **kwargs)
    path = sa.expected_integrated_gradients(model, X, out=tmp_path / "t.h5", **kwargs)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from_arrays = export_modisco(scores, tmp_path / "a", sequences=X, class_names=["x", "y"])
    from_file = export_modisco(path, tmp_path / "b", class_names=["x", "y"])
    assert [p.name for p in from_arrays] == [p.name for p in from_file]
    for a, b in zip(from_arrays, from_file, strict=True):
        with np.load(a) as left, np.load(b) as right:
            np.testing.assert_array_equal(left["arr_0"], right["arr_0"])
    with pytest.raises(ValueError, match="'sequences'"):
        export_modisco(scores, tmp_path / "a", overwrite=True)


def test_modisco_export_makes_its_folder_and_keeps_existing_files(model, tmp_path):
    X = random_one_hot(3, LENGTH, seed=44)
    path = sa.saliency(model, X, out=tmp_path / "s.h5")
    out = tmp_path / "new" / "modisco"  # neither folder exists yet
    files = export_modisco(path, out)
    assert sorted(p.name for p in files) == ["target0_attr.npz", "target0_ohe.npz"]
    assert sorted(p.name for p in out.iterdir()) == ["target0_attr.npz", "target0_ohe.npz"]
    (out / "target0_ohe.npz").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_modisco(path, out)
    assert (out / "target0_ohe.npz").read_bytes() == b"mine"
    assert sorted(p.name for p in out.iterdir()) == ["target0_attr.npz", "target0_ohe.npz"]
