"""``seqattrib seqlets``: the tables of motif_instances from the command line, errors in flag
words, resume."""

from __future__ import annotations

import numpy as np
import pytest

from seqattrib.cli import main
from seqattrib.motifs import motif_instances

pytest.importorskip("torch")
pytest.importorskip("memelite")

from motifs.motif_cases import make_database, make_tracks, write_meme  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_motifs")
    tracks = make_tracks(folder / "tracks.h5")
    meme = write_meme(folder / "db.meme", make_database(np.random.default_rng(7)))
    return folder, tracks, meme


FLAGS = ["--threshold", "0.01", "--min-length", "4", "--max-length", "15", "--threads", "1"]


def test_the_command_writes_the_tables_of_the_function(files, tmp_path, capsys):
    folder, tracks, meme = files
    out = tmp_path / "cli.bed"
    assert main(["seqlets", tracks, "--motifs", meme, "-o", str(out), "--quiet", *FLAGS]) == 0
    printed = capsys.readouterr().out.splitlines()
    want = motif_instances(
        tracks, meme, out=tmp_path / "api.bed", threshold=0.01, min_length=4, max_length=15,
        n_jobs=1,
    )  # fmt: skip
    assert printed[0] == f"{want.n_seqlets} seqlets in {want.n_rows} sequences"
    assert printed[1:] == [str(out), str(tmp_path / "cli.tsv"), str(tmp_path / "cli.summary.tsv")]
    assert out.read_text() == open(want.bed).read()
    assert (tmp_path / "cli.tsv").read_text() == open(want.tsv).read()
    assert "GATA1" in (tmp_path / "cli.summary.tsv").read_text()
    # a rerun with the same flags reuses the tables; other flags are refused in flag words
    assert main(["seqlets", tracks, "--motifs", meme, "-o", str(out), "--quiet", *FLAGS]) == 0
    capsys.readouterr()
    assert main(["seqlets", tracks, "--motifs", meme, "-o", str(out), "--quiet"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("seqattrib seqlets: error: --out must be") and "--overwrite" in error
    assert "\n" not in error


def test_errors_name_the_flags(files, tmp_path, capsys):
    folder, tracks, meme = files
    bad = tmp_path / "bad.meme"
    bad.write_text("MOTIF a\nletter-probability matrix: alength= 4 w= 1\n0.5 0.5 x 0\n")
    out = str(tmp_path / "m.bed")
    assert main(["seqlets", tracks, "--motifs", str(bad), "-o", out, "--quiet"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("seqattrib seqlets: error: --motifs must be a MEME motif file")
    assert "line 3" in error
    bare = make_tracks(tmp_path / "bare.h5", regions=False)
    assert main(["seqlets", bare, "--motifs", meme, "-o", out, "--quiet"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("seqattrib seqlets: error: TRACKS must be a tracks file with regions")
    assert "--coordinates sequence" in error
    assert main(["seqlets", bare, "-o", out, "--quiet", "--coordinates", "sequence"]) == 0
    with pytest.raises(SystemExit):
        main(["seqlets", tracks, "-o", out, "--max-q-value", "2"])
    assert "--max-q-value: expected a number from 0 to 1" in capsys.readouterr().err
