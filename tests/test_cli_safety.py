"""The command line writes only where it is asked, replaces nothing without --overwrite, checks
what it needs before it starts work, and words every failure (Ctrl-C included) on one line that
names the flag and the fix."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import FLOAT32, assert_close

from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import read_tracks

MODEL = "demo"
#: The demo file's sequences that trained the demo model (data/make_demo.py: n_train = 1600 of
#: 2000); only the others are held out.
HELD_OUT = 2000 - 1600


def _error(argv, capsys, code=1):
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("seqattrib") and "Traceback" not in err and "Errno" not in err, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-safety")
    data = demo.load_data()
    (folder / "seqs.fa").write_text(
        "".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:4]))
    )
    (folder / "g.fa").write_text(f">chr1\n{''.join(data['sequences'][:5])}\n")
    (folder / "peaks.bed").write_text("chr1\t100\t300\nchr1\t450\t550\n")
    (folder / "sizes").write_text("chr1\t1000\n")
    argv = ["explain", "--model", MODEL, "--method", "saliency", "--quiet", "--target", "0,1"]
    genome = ["--genome", str(folder / "g.fa"), "--regions", str(folder / "peaks.bed")]
    assert main([*argv, *genome, "--length", "200", "--out", str(folder / "hyp.h5")]) == 0
    ig = ["explain", "--model", MODEL, "--method", "ig", "--n-steps", "2", "--quiet"]
    assert main([*ig, "--fasta", str(folder / "seqs.fa"), "--out", str(folder / "ig.h5")]) == 0
    return folder


# --------------------------------------------------------------------------- demo
def _demo(outdir, *extra):
    return ["demo", "-o", str(outdir), "--n-sequences", "4", "--quiet", *extra]


@pytest.mark.parametrize("name", ["tracks.h5", "GATA.bw", "logo_GATA.png"])
def test_demo_replaces_no_file_it_did_not_write(tmp_path, capsys, name):
    mine = tmp_path / name
    mine.write_bytes(b"the user's own file")
    err = _error(_demo(tmp_path), capsys)
    assert re.search(r"--out\b", err) and name in err and "--overwrite" in err
    assert mine.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing else was written


def test_demo_reruns_over_its_own_files_and_overwrite_replaces_others(tmp_path, capsys):
    assert main(_demo(tmp_path)) == 0
    first = read_tracks(tmp_path / "tracks.h5").attributions
    assert main(_demo(tmp_path)) == 0  # its own output: reused
    assert main(_demo(tmp_path, "--n-sequences", "6")) == 0  # its own, another run: replaced
    assert len(read_tracks(tmp_path / "tracks.h5").attributions) == 6
    mine = tmp_path / "other"
    (mine / "tracks.h5").parent.mkdir()
    (mine / "tracks.h5").write_bytes(b"mine")
    assert main(_demo(mine, "--overwrite")) == 0
    assert_close(read_tracks(mine / "tracks.h5").attributions, first, FLOAT32)


def test_demo_explains_only_held_out_sequences(tmp_path, capsys):
    err = _error(["demo", "-o", str(tmp_path / "d"), "--n-sequences", "100000"], capsys)
    assert "--n-sequences" in err and str(HELD_OUT) in err
    assert not (tmp_path / "d").exists()


def test_demo_without_a_held_out_gata_sequence_skips_the_logo_and_says_why(tmp_path, capsys):
    data = demo.load_data()
    n = max(n for n in range(1, 20) if data["labels"][-n:, 0].max() <= 0)  # no GATA site
    assert main(["demo", "-o", str(tmp_path), "--n-sequences", str(n), "--quiet"]) == 0
    assert "logo skipped" in capsys.readouterr().err
    assert (tmp_path / "tracks.h5").exists() and not (tmp_path / "logo_GATA.png").exists()


def test_demo_data_folder_that_does_not_exist_is_one_line(tmp_path, capsys):
    err = _error(_demo(tmp_path / "d", "--data", str(tmp_path / "nowhere")), capsys)
    assert "--data" in err and "nowhere" in err


def test_demo_output_folder_that_is_a_file(tmp_path, capsys):
    (tmp_path / "d").write_text("a file")
    err = _error(_demo(tmp_path / "d"), capsys)
    assert re.search(r"--out\b", err)


def test_demo_without_pybigwig_skips_the_bigwigs_and_says_so_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyBigWig", None)  # as if not installed
    import seqattrib

    seen = []
    explain = seqattrib.expected_integrated_gradients

    def spy(*args, **kwargs):
        seen.append(capsys.readouterr().err)  # what was said before the work started
        return explain(*args, **kwargs)

    monkeypatch.setattr(seqattrib, "expected_integrated_gradients", spy)
    assert main(_demo(tmp_path)) == 0
    assert seen and "bigWig tracks skipped: pip install 'seqattrib[bigwig]'" in seen[0]
    names = {p.name for p in tmp_path.iterdir()}
    assert "tracks.h5" in names and "GATA_attr.npz" in names and "logo_GATA.png" in names
    assert not any(name.endswith(".bw") for name in names)


# --------------------------------------------------------------------------- optional dependencies
def test_export_bigwig_checks_pybigwig_before_writing(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyBigWig", None)
    out = tmp_path / "bw"
    argv = ["export", "bigwig", str(files / "hyp.h5"), "-o", str(out)]
    err = _error([*argv, "--chrom-sizes", str(files / "sizes")], capsys)
    assert "pip install 'seqattrib[bigwig]'" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "module, flags, extra",
    [
        ("pyarrow.parquet", ["--table", "v.tsv", "--out", "e.parquet"], "parquet"),
        ("pysam", ["--vcf", "v.vcf.gz", "--out", "e.tsv"], "variants"),
    ],
)
def test_variants_check_their_optional_modules_before_work(
    files, capsys, monkeypatch, module, flags, extra
):
    from seqattrib.cli import commands

    monkeypatch.setitem(sys.modules, module, None)

    def work(*args, **kwargs):
        raise AssertionError("the work started before the missing module was found")

    monkeypatch.setattr(commands, "load_model", work)
    argv = ["variants", "--model", MODEL, "--genome", str(files / "g.fa"), "--length", "200"]
    err = _error([*argv, *flags], capsys)
    assert f"pip install 'seqattrib[{extra}]'" in err


# --------------------------------------------------------------------------- plot
def test_plot_writes_exactly_the_path_asked(files, tmp_path, capsys):
    err = _error(["plot", str(files / "hyp.h5"), "-o", str(tmp_path / "noext")], capsys)
    assert re.search(r"--out\b", err) and ".png" in err
    assert list(tmp_path.iterdir()) == []
    image = tmp_path / "logo.png"
    assert main(["plot", str(files / "hyp.h5"), "-o", str(image)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logo.png"]
    before = image.read_bytes()
    err = _error(["plot", str(files / "hyp.h5"), "--row", "1", "-o", str(image)], capsys)
    assert "--overwrite" in err and image.read_bytes() == before
    assert main(["plot", str(files / "hyp.h5"), "--row", "1", "-o", str(image), "--overwrite"]) == 0
    assert image.read_bytes() != before


def test_plot_on_a_full_disk_names_the_output(files, tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    def full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))

    monkeypatch.setattr(Figure, "savefig", full)
    err = _error(["plot", str(files / "hyp.h5"), "-o", str(tmp_path / "x.png")], capsys)
    assert f"--out '{tmp_path / 'x.png'}'" in err and "space" in err.lower()
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- export
def test_a_refused_export_writes_nothing_and_the_next_one_works(files, tmp_path, capsys):
    out = tmp_path / "modisco"
    err = _error(["export", "modisco", str(files / "ig.h5"), "-o", str(out)], capsys)
    assert "--hypothetical" in err
    assert not out.exists() or list(out.iterdir()) == []
    assert main(["export", "modisco", str(files / "hyp.h5"), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"target{k}_{kind}" for k in (0, 1) for kind in ("ohe.npz", "attr.npz", "regions.bed")
    )


def test_export_of_an_unfinished_file_says_how_many_rows(files, tmp_path, capsys):
    partial = tmp_path / "partial.h5"
    partial.write_bytes((files / "hyp.h5").read_bytes())
    with h5py.File(partial, "r+") as f:  # as a run that has written 1 of its 2 rows
        f.attrs["n_completed"] = np.int64(1)
    assert main(["export", "modisco", str(partial), "-o", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "1 of the 2 rows" in err
    assert np.load(tmp_path / "m" / "target0_attr.npz")["arr_0"].shape[0] == 1


@pytest.mark.parametrize("code", [errno.EROFS, errno.EEXIST])
def test_export_folder_that_cannot_be_made(files, tmp_path, capsys, monkeypatch, code):
    def refuse(self, *args, **kwargs):
        raise OSError(code, os.strerror(code), os.fspath(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    err = _error(["export", "modisco", str(files / "hyp.h5"), "-o", str(tmp_path / "m")], capsys)
    assert re.search(r"--out\b", err)


def test_export_bigwig_into_a_read_only_folder(files, tmp_path, capsys, monkeypatch):
    from seqattrib.io import export

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    monkeypatch.setattr(export, "open", read_only, raising=False)
    argv = ["export", "bigwig", str(files / "hyp.h5"), "-o", str(tmp_path)]
    err = _error([*argv, "--chrom-sizes", str(files / "sizes")], capsys)
    assert re.search(r"--out\b", err) and "read-only" in err.lower()
    assert list(tmp_path.iterdir()) == []


def test_export_into_a_file_name(files, tmp_path, capsys):
    (tmp_path / "m").write_text("a file")
    err = _error(["export", "modisco", str(files / "hyp.h5"), "-o", str(tmp_path / "m")], capsys)
    assert re.search(r"--out\b", err) and "file" in err


# --------------------------------------------------------------------------- input errors
@pytest.mark.parametrize(
    "name, text, flag, words",
    [
        ("iupac.fa", ">a\nACGTRACGT\n", "--fasta", "'R'"),
        ("dup.fa", ">a\nACGT\n>a\nACGT\n", "--fasta", "dup.fa"),
        ("empty.fa", "", "--fasta", ">"),
        ("noheader.fa", "ACGT\n", "--fasta", ">"),
    ],
)
def test_fasta_errors_name_the_fasta_flag(tmp_path, capsys, name, text, flag, words):
    (tmp_path / name).write_text(text)
    argv = ["explain", "--model", MODEL, "--fasta", str(tmp_path / name), "--quiet"]
    err = _error([*argv, "--out", str(tmp_path / "t.h5")], capsys)
    assert err.split("error: ")[1].startswith(flag) and words in err
    assert "--genome" not in err


@pytest.mark.parametrize(
    "text, words",
    [
        ("chr1\t100\n", "chrom, start and end"),
        ("chr1\t100\t200\tp\t0\t.\t1\t1\t1\t900\n", "cut -f1-3"),
    ],
)
def test_regions_errors_name_the_regions_flag(files, tmp_path, capsys, text, words):
    (tmp_path / "r.bed").write_text(text)
    argv = ["explain", "--model", MODEL, "--genome", str(files / "g.fa"), "--length", "50"]
    argv += ["--regions", str(tmp_path / "r.bed"), "--out", str(tmp_path / "t.h5")]
    err = _error(argv, capsys)
    assert err.split("error: ")[1].startswith("--regions") and words in err


def test_a_regions_file_that_does_not_exist(files, tmp_path, capsys):
    argv = ["explain", "--model", MODEL, "--genome", str(files / "g.fa"), "--length", "50"]
    argv += ["--regions", str(tmp_path / "none.bed"), "--out", str(tmp_path / "t.h5")]
    err = _error(argv, capsys)
    assert err.split("error: ")[1].startswith("--regions") and "none.bed" in err


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "abc", "WORLD_SIZE": "2"},
        {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"},
    ],
)
def test_scheduler_variables_that_are_not_integers(files, tmp_path, capsys, monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = ["explain", "--model", MODEL, "--fasta", str(files / "seqs.fa"), "--quiet"]
    err = _error([*argv, "--out", str(tmp_path / "t.h5")], capsys)
    name, value = next(iter(env.items()))
    assert "--shard" in err and f"{name}={value!r}" in err


# --------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("model", ["sleepy", "deaf"])  # deaf: swallows the KeyboardInterrupt
def test_ctrl_c_is_one_line_and_the_rerun_resumes(tmp_path, model):
    data = demo.load_data()
    fasta = tmp_path / "many.fa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:100])))
    out = tmp_path / "t.h5"
    argv = [sys.executable, "-m", "seqattrib", "explain", "--model", f"slow_models:{model}"]
    argv += ["--fasta", str(fasta), "--method", "saliency", "--batch-size", "2", "--quiet"]
    argv += ["--max-cpu-sequences", "2", "--out", str(out)]
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + 120
        done = 0
        while done == 0 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                done = int(read_tracks(out, rows=slice(0, 0)).attrs["n_completed"])
            except (OSError, ValueError, KeyError):
                done = 0
        assert run.poll() is None, "the run ended before it could be interrupted"
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "rerun the same command" in lines[0]
    assert str(out) in lines[0]
    kept = int(read_tracks(out, rows=slice(0, 0)).attrs["n_completed"])
    assert 0 < kept < 100
    rerun = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    tracks = read_tracks(out)
    assert int(tracks.attrs["n_completed"]) == 100 and np.isfinite(tracks.attributions).all()
