"""``seqattrib marginalize`` and ``seqattrib space``: the file and the table equal the API, motifs
come from a MEME file by name, shards, and bad input on one line in the flags' words."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from helpers import CLOSED_FORM, assert_close

import seqattrib as sa
from seqattrib import demo
from seqattrib.cli import main

GATA, EBOX = "CTTATCT", "CACCTG"


@pytest.fixture(scope="module")
def fasta(tmp_path_factory):
    data = demo.load_data()
    path = tmp_path_factory.mktemp("experiments") / "backgrounds.fa"
    sequences = data["sequences"][demo.N_TRAIN : demo.N_TRAIN + 6]
    path.write_text("".join(f">b{i}\n{s}\n" for i, s in enumerate(sequences)))
    return path


@pytest.fixture(scope="module")
def X():
    data = demo.load_data()
    return sa.one_hot(data["sequences"][demo.N_TRAIN : demo.N_TRAIN + 6], layout="NCL")


@pytest.fixture(scope="module")
def meme(tmp_path_factory):
    path = tmp_path_factory.mktemp("motifs") / "motifs.meme"
    rows = {"GATA_like": GATA, "Ebox_like": EBOX}
    text = "MEME version 4\n\nALPHABET= ACGT\n\n"
    for name, seq in rows.items():
        matrix = 0.04 + 0.84 * np.eye(4)[["ACGT".index(b) for b in seq]]
        body = "\n".join(" ".join(f"{v:.2f}" for v in row) for row in matrix)
        text += f"MOTIF {name}\nletter-probability matrix: alength= 4 w= {len(seq)}\n{body}\n\n"
    path.write_text(text)
    return path


def _table(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.strip().splitlines()[2:]]


def test_marginalize_from_a_meme_file_equals_the_api(fasta, X, meme, tmp_path, capsys):
    out = tmp_path / "gata.h5"
    code = main([
        "marginalize", "--model", "demo", "--fasta", str(fasta), "--meme", str(meme),
        "--motif", "GATA_like", "--n-shuffles", "3", "--random-state", "4", "--out", str(out),
        "--quiet", "--batch-size", "11",
    ])  # fmt: skip
    assert code == 0
    before, after = sa.marginalize(
        demo.torch_model(), X, GATA, n_shuffles=3, random_state=4, target=None
    )
    with h5py.File(out) as f:
        rows = f["predictions"][:].reshape(6, 3, 3, 2)  # N, K, shuffles, (before, after)
        assert json.loads(f.attrs["targets"]) == [0, 1, 2]
    assert_close(np.moveaxis(rows[..., 1], 1, -1), after, CLOSED_FORM)
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == str(out)
    table = _table(printed)
    assert [row[:2] for row in table] == [
        ["GATA_like", "0"],
        ["GATA_like", "1"],
        ["GATA_like", "2"],
    ]
    effect = (after - before).mean(axis=(0, 1))
    assert_close(np.array([float(row[4]) for row in table]), effect, 1e-5)


def test_space_table_and_shards_equal_the_api(fasta, X, tmp_path, capsys):
    out = tmp_path / "space.h5"
    args = [
        "space", "--model", "demo", "--fasta", str(fasta), "--motifs", f"{GATA},{EBOX}",
        "--distances", "0:30:10", "--orientations", "++,-+", "--target", "0", "--out", str(out),
        "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    before, after = sa.space(
        demo.torch_model(), X, [GATA, EBOX], distances=[0, 10, 20], orientations=["++", "-+"]
    )
    table = _table(capsys.readouterr().out)
    assert [row[0] for row in table] == [f"{o} gap {d}" for o in ("++", "-+") for d in (0, 10, 20)]
    effect = (after - before[:, None, None]).mean(axis=0).ravel()
    assert_close(np.array([float(row[4]) for row in table]), effect, 1e-5)
    for index in range(2):
        assert main([*args, "--shard", f"{index}/2"]) == 0
    parts = []
    for index in range(2):
        with h5py.File(tmp_path / f"space.shard-{index}-of-2.h5") as f:
            parts.append(f["predictions"][:])
    assert_close(np.concatenate(parts)[:, 1:].reshape(6, 2, 3), after, CLOSED_FORM)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["marginalize", "--motif", GATA, "--position", "195"], "--position must be between 0"),
        (["marginalize", "--motif", "GATAQ"], "--motif must be a sequence of A, C, G, T and N"),
        (["marginalize", "--motif", "A" * 201], "--motif must be at most as long"),
        (["space", "--motifs", f"{GATA},{EBOX}", "--distances", "195"], "--distances must be gaps"),
        (["space", "--motifs", GATA, "--distances", "1"], "--motifs must be a list of two"),
        (["space", "--motifs", f"{GATA},{EBOX}", "--distances", "1,x"], "argument --distances"),
        (["space", "--motifs", "A,C", "--distances", "1", "--orientations", "+"], "--orientations"),
    ],
)
def test_bad_input_is_one_line_in_the_flags_words(fasta, tmp_path, capsys, args, flag):
    command = [*args, "--model", "demo", "--fasta", str(fasta), "--out", str(tmp_path / "x.h5")]
    try:
        code = main(command)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert flag in err and len(err.splitlines()) == 1, err
