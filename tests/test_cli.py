"""The command line: every subcommand in-process, one subprocess demo, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FLOAT32, assert_close

import seqattrib as sa
from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import read_tracks

MODEL = "seqattrib.demo:torch_model"


@pytest.fixture(scope="module")
def fasta(tmp_path_factory):
    data = demo.load_data()
    path = tmp_path_factory.mktemp("cli") / "seqs.fa"
    path.write_text(
        "".join(
            f">{n}\n{s}\n" for n, s in zip(data["names"][:6], data["sequences"][:6], strict=True)
        )
    )
    return path, data["sequences"][:6]


@pytest.fixture(scope="module")
def genome(tmp_path_factory):
    folder = tmp_path_factory.mktemp("genome")
    data = demo.load_data()
    chr1 = "".join(data["sequences"][:5])  # 1,000 bp
    (folder / "g.fa").write_text(f">chr1\n{chr1}\n>chr2\n{data['sequences'][5]}\n")
    (folder / "peaks.bed").write_text(
        "chr1\t100\t300\nchr1\t450\t550\nchr1\t900\t1000\nchr2\t0\t200\n"
    )
    (folder / "sizes").write_text("chr1\t1000\nchr2\t200\n")
    return folder


def test_explain_from_fasta_equals_the_api(fasta, tmp_path, capsys):
    path, seqs = fasta
    out = tmp_path / "t.h5"
    code = main(
        [
            "explain",
            "--model",
            MODEL,
            "--fasta",
            str(path),
            "--method",
            "eig",
            "--n-baselines",
            "3",
            "--n-steps",
            "4",
            "--target",
            "0,2",
            "--hypothetical",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0 and capsys.readouterr().out.strip() == str(out)
    X = sa.one_hot(seqs, layout="NCL")
    expected = sa.expected_integrated_gradients(
        demo.torch_model(), X, target=[0, 2], n_baselines=3, n_steps=4, multiply_by_inputs=False
    )
    tracks = read_tracks(out)
    assert_close(tracks.attributions, expected, FLOAT32)
    np.testing.assert_array_equal(tracks.sequences, X)


def test_genome_regions_ism_export_and_plot(genome, tmp_path, capsys):
    out = tmp_path / "ism.h5"
    code = main(
        [
            "ism",
            "--model",
            MODEL,
            "--genome",
            str(genome / "g.fa"),
            "--regions",
            str(genome / "peaks.bed"),
            "--length",
            "200",
            "--target",
            "all",
            "--positions",
            "50:150",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    warning = capsys.readouterr().err.strip()  # the window off chr1's end: one line
    assert warning.startswith("seqattrib ism: warning: ") and "dropped 1 of 4" in warning
    assert len(warning.splitlines()) == 1
    tracks = read_tracks(out)
    assert tracks.attributions.shape == (3, 3, 4, 200)  # the window off chr1's end is dropped
    assert list(tracks.regions.start) == [100, 400, 0]
    assert not tracks.attributions[..., :50].any()
    assert (
        main(
            [
                "export",
                "bigwig",
                str(out),
                "-o",
                str(tmp_path),
                "--chrom-sizes",
                str(genome / "sizes"),
                "--class-names",
                "GATA,Ebox,CTCF",
            ]
        )
        == 0
    )
    assert (tmp_path / "Ebox.bw").stat().st_size > 0
    assert main(["export", "modisco", str(out), "-o", str(tmp_path)]) == 0
    assert np.load(tmp_path / "target1_attr.npz")["arr_0"].shape == (3, 4, 200)
    assert (
        main(
            [
                "plot",
                str(out),
                "--row",
                "2",
                "--target",
                "1",
                "--start",
                "40",
                "--end",
                "160",
                "-o",
                str(tmp_path / "ism.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "ism.png").stat().st_size > 1000
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["explain", "--model", "missing.pt", "--fasta", "x.fa", "--out", "o.h5"],
            "--model must be an existing file",
        ),
        (
            ["explain", "--model", MODEL, "--fasta", "missing.fa", "--out", "o.h5"],
            "existing FASTA file",
        ),
        (["explain", "--model", MODEL, "--out", "o.h5"], "--genome, --regions and --length"),
        (
            ["explain", "--model", "no.such.module:f", "--fasta", "x.fa", "--out", "o.h5"],
            "pkg.module:factory",
        ),
        (["plot", "missing.h5", "-o", "x.png"], "existing tracks file"),
    ],
)
def test_bad_arguments_give_one_line_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("seqattrib ")


def test_bad_target_and_existing_output(fasta, tmp_path, capsys):
    path, _ = fasta
    args = [
        "explain",
        "--model",
        MODEL,
        "--fasta",
        str(path),
        "--method",
        "saliency",
        "--out",
        str(tmp_path / "s.h5"),
        "--quiet",
    ]
    with pytest.raises(SystemExit) as stop:
        main(args + ["--target", "x"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "--target" in err
    assert main(args + ["--target", "5"]) == 1
    assert "--target must be an output index in [0, 3)" in capsys.readouterr().err
    assert main(args) == 0
    assert main(args + ["--target", "1"]) == 1  # different settings, no --overwrite
    assert "overwrite" in capsys.readouterr().err


def test_demo_runs_as_a_subprocess_twice(tmp_path):
    argv = [sys.executable, "-m", "seqattrib", "demo", "-o", str(tmp_path / "demo")]
    argv += ["--n-sequences", "12", "--quiet"]
    for _ in range(2):  # the second run replaces the demo's own files
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
    assert "top-scoring base inside the planted motif" in out.stdout
    written = {p.name for p in (tmp_path / "demo").iterdir()}
    assert {"tracks.h5", "GATA_ohe.npz", "GATA_attr.npz", "GATA.bw", "logo_GATA.png"} <= written
    assert Path(tmp_path / "demo" / "logo_GATA.png").stat().st_size > 1000


@pytest.mark.parametrize("kind", ["torchscript", "keras", "savedmodel"])
def test_model_files(kind, fasta, tmp_path, capsys):
    import torch

    path, seqs = fasta
    if kind == "torchscript":
        model_path = tmp_path / "model.pt"
        torch.jit.script(demo.torch_model()).save(str(model_path))
        layout = "NCL"
    elif kind == "keras":
        model_path = demo.data_dir() / "demo_model.keras"
        layout = "NLC"
    else:
        model_path = tmp_path / "saved"
        demo.keras_model().export(str(model_path), verbose=False)
        layout = "NLC"
    out = tmp_path / "s.h5"
    assert (
        main(
            [
                "explain",
                "--model",
                str(model_path),
                "--fasta",
                str(path),
                "--method",
                "saliency",
                "--target",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    ), capsys.readouterr().err
    X = sa.one_hot(seqs, layout=layout)
    expected = sa.saliency(demo.torch_model(), sa.one_hot(seqs, layout="NCL"), target=1)
    if layout == "NLC":
        expected = expected.transpose(0, 2, 1)
    assert_close(read_tracks(out).attributions, expected, 1e-4)
    np.testing.assert_array_equal(read_tracks(out).sequences, X)


def test_ism_fast_flag_gives_the_exact_scores(genome, tmp_path):
    tracks = {}
    for fast in ("yes", "no"):
        out = tmp_path / f"ism_{fast}.h5"
        args = ["ism", "--model", MODEL, "--genome", str(genome / "g.fa"), "--regions"]
        args += [str(genome / "peaks.bed"), "--length", "200", "--positions", "90:110"]
        assert main([*args, "--fast", fast, "--out", str(out), "--quiet"]) == 0
        tracks[fast] = read_tracks(out).attributions
    scale = np.abs(tracks["no"]).max()
    assert scale > 0 and np.abs(tracks["yes"] - tracks["no"]).max() <= 1e-5 * scale
