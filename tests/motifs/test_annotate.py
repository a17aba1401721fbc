"""Naming seqlets: the MEME reader, TOMTOM statistics against memelite's own call, and planted
motifs named after their family."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from seqattrib.motifs import Motif, Seqlets, annotate, read_meme, read_motifs, seqlet_matrices

pytest.importorskip("memelite")

GATA = "AGATAAGG"


def _cases() -> Path:
    root = os.environ.get("SEQATTRIB_CASES")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "../shared/data/cases"
    return base / "motifs"


def _meme(motifs: dict[str, np.ndarray]) -> str:
    text = "MEME version 4\n\nALPHABET= ACGT\n\nstrands: + -\n\n"
    for name, pwm in motifs.items():
        text += f"MOTIF {name} {name.lower()}_alt\n"
        text += f"letter-probability matrix: alength= 4 w= {len(pwm)} nsites= 20 E= 0\n"
        text += "".join(" ".join(f"{v:.6f}" for v in row) + "\n" for row in pwm) + "URL x\n\n"
    return text


def _database(rng: np.random.Generator, n: int = 30) -> dict[str, np.ndarray]:
    """Random motifs of 6-12 columns, each column peaked on one base, plus a GATA motif."""
    out = {}
    for i in range(n):
        width = int(rng.integers(6, 13))
        pwm = rng.dirichlet(np.full(4, 0.3), size=width)
        out[f"M{i:02d}"] = pwm / pwm.sum(axis=1, keepdims=True)
    gata = np.full((len(GATA), 4), 0.02)
    gata[np.arange(len(GATA)), ["ACGT".index(b) for b in GATA]] = 0.94
    out["GATA1"] = gata
    return out


def _seqlets(example, start, end, sign=None) -> Seqlets:
    n = len(example)
    return Seqlets(
        example=np.asarray(example, np.int64),
        target=np.zeros(n, np.int64),
        start=np.asarray(start, np.int64),
        end=np.asarray(end, np.int64),
        sign=np.asarray(sign if sign is not None else np.ones(n), np.int8),
        attribution=np.ones(n),
        p_value=np.full(n, 1e-3),
        fdr=np.full(n, np.nan),
    )


def _planted(rng: np.random.Generator, n: int = 6, length: int = 60):
    """Random sequences with GATA at 20..28 and contributions high on it, noise elsewhere."""
    letters = rng.integers(0, 4, size=(n, length))
    letters[:, 20 : 20 + len(GATA)] = ["ACGT".index(b) for b in GATA]
    one_hot = np.eye(4, dtype=np.float32)[letters]
    projected = rng.normal(0, 0.05, size=(n, length))
    projected[:, 20 : 20 + len(GATA)] += rng.uniform(0.5, 1.0, size=(n, len(GATA)))
    hypothetical = one_hot * projected[..., None] + (1 - one_hot) * rng.normal(
        0, 0.1, size=(n, length, 4)
    )  # other bases carry values the projection must drop
    return one_hot, hypothetical.astype(np.float32), projected


def _bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of one row of p-values, by the textbook loop."""
    n = len(p)
    order = np.argsort(p, kind="stable")
    q = np.empty(n)
    running = 1.0
    for rank in range(n, 0, -1):
        running = min(running, p[order[rank - 1]] * n / rank)
        q[order[rank - 1]] = running
    return q


def test_meme_reader_reads_ids_names_and_rows(tmp_path):
    rng = np.random.default_rng(0)
    database = _database(rng, 3)
    path = tmp_path / "db.meme"
    path.write_text(_meme(database))
    motifs = read_motifs(path)
    assert [m.id for m in motifs] == list(database)
    assert [m.name for m in motifs] == [f"{k.lower()}_alt" for k in database]
    for motif, pwm in zip(motifs, database.values(), strict=True):
        np.testing.assert_allclose(motif.pwm, pwm, atol=5e-7)
    assert list(read_meme(path)) == list(database)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t.replace("ALPHABET= ACGT", "ALPHABET= ACGU"), "line 3 declares the alphabet"),
        (lambda t: t.replace("alength= 4 w= 6", "alength= 20 w= 6", 1), "gives alength=20"),
        (lambda t: t.replace(" 0.", " x.", 1), "line 9 is not a row of 4 probabilities"),
        (lambda t: t.replace("MOTIF M01", "MOTIF M00"), "repeats the motif id 'M00'"),
        (lambda t: "not a motif file\n", "holds no MOTIF"),
        (lambda t: t.split("URL")[0].rsplit("\n", 3)[0], "has 4 rows of 6"),
    ],
)
def test_meme_reader_refuses_bad_files_naming_the_line(tmp_path, edit, words):
    database = {"M00": np.full((6, 4), 0.25), "M01": np.full((6, 4), 0.25)}
    path = tmp_path / "bad.meme"
    path.write_text(edit(_meme(database)))
    with pytest.raises(ValueError, match="read_motifs") as info:
        read_motifs(path)
    message = str(info.value)
    assert "\n" not in message and repr(str(path)) in message
    assert words in message, message


def test_custom_dna_alphabet_block_is_read_and_rna_refused(tmp_path):
    block = (
        'ALPHABET "DNA" DNA-LIKE\nA "Adenine" CC0000 ~ T "Thymine" 008000\n'
        'C "Cytosine" 0000CC ~ G "Guanine" FFB300\nN = ACGT\nEND ALPHABET\n'
    )
    text = _meme({"M00": np.full((6, 4), 0.25)}).replace("ALPHABET= ACGT\n", block)
    path = tmp_path / "dna.meme"
    path.write_text(text)
    assert [m.id for m in read_motifs(path)] == ["M00"]
    path.write_text(text.replace("~ T", "~ U"))
    with pytest.raises(ValueError, match="alphabet of 'ACGU', not ACGT"):
        read_motifs(path)


@pytest.mark.parametrize("matrix", ["sequence", "contributions"])
def test_p_values_equal_memelite_tomtom_on_the_same_matrices(tmp_path, matrix):
    from memelite import tomtom

    rng = np.random.default_rng(1)
    database = _database(rng)
    path = tmp_path / "db.meme"
    path.write_text(_meme(database))
    one_hot, hypothetical, projected = _planted(rng)
    seqlets = _seqlets(
        [0, 1, 2, 3, 4, 5, 2], [18, 20, 15, 22, 19, 30, 40], [30, 28, 33, 27, 29, 45, 52]
    )
    matches = annotate(
        seqlets, one_hot, path, attributions=hypothetical, matrix=matrix, n_matches=4, n_jobs=1
    )
    # the queries, by the definitions: the bases, or each base weighted by its share of the
    # seqlet's positive contribution with the rest of the column uniform
    queries = []
    for row, start, end in zip(seqlets.example, seqlets.start, seqlets.end, strict=True):
        bases = one_hot[row, start:end].astype(np.float64)
        weight = np.clip(projected[row, start:end], 0, None)
        weight = weight / weight.max() if matrix == "contributions" else np.ones(len(bases))
        queries.append((weight[:, None] * bases + (1 - weight[:, None]) / 4).T)
    pwms = [np.ascontiguousarray(p.T) for p in database.values()]
    p, _, offsets, _, strands = tomtom(queries, pwms, n_jobs=1)
    n = len(pwms)
    names = np.array(list(database))
    assert len(matches) == 4 * len(seqlets)
    assert (matches.seqlet == np.repeat(np.arange(len(seqlets)), 4)).all()
    assert (matches.rank == np.tile([1, 2, 3, 4], len(seqlets))).all()
    for i in range(len(seqlets)):
        order = np.argsort(p[i], kind="stable")[:4]
        mine = matches.seqlet == i
        np.testing.assert_allclose(matches.p_value[mine], p[i, order], rtol=1e-6, atol=0)
        assert list(matches.motif_id[mine]) == list(names[order])
        assert list(matches.motif_name[mine]) == [f"{k.lower()}_alt" for k in names[order]]
        np.testing.assert_allclose(matches.e_value[mine], p[i, order] * n, rtol=1e-6, atol=0)
        np.testing.assert_allclose(matches.q_value[mine], _bh(p[i])[order], rtol=1e-6, atol=0)
        assert list(matches.offset[mine]) == list(-offsets[i, order].astype(int))
        assert list(matches.strand[mine]) == ["-" if s else "+" for s in strands[i, order]]


def test_a_planted_gata_seqlet_is_named_gata_on_either_strand():
    rng = np.random.default_rng(2)
    database = _database(rng)
    one_hot, hypothetical, _ = _planted(rng)
    flipped = one_hot[:, ::-1, ::-1]  # the reverse complement: GATA on the minus strand
    both = np.concatenate([one_hot, flipped])
    attributions = np.concatenate([hypothetical, hypothetical[:, ::-1, ::-1]])
    length = one_hot.shape[1]
    starts = [16] * 6 + [length - 32] * 6  # 4 bases of flank on each side
    seqlets = _seqlets(range(12), starts, np.asarray(starts) + 16)
    matches = annotate(seqlets, both, database, attributions=attributions, n_matches=1, n_jobs=1)
    assert list(matches.motif_id) == ["GATA1"] * 12
    assert list(matches.strand) == ["+"] * 6 + ["-"] * 6
    assert (matches.offset == 4).all()  # the motif starts 4 bases into the seqlet
    assert (matches.q_value < 0.05).all()


def test_jaspar_names_planted_gata_seqlets_gata():
    path = _cases() / "jaspar_2024_consensus.meme"
    if not path.exists():
        pytest.skip(f"real validation data not found at {path} (set SEQATTRIB_CASES)")
    rng = np.random.default_rng(3)
    one_hot, hypothetical, _ = _planted(rng)
    seqlets = _seqlets(range(6), [17] * 6, [31] * 6)
    matches = annotate(seqlets, one_hot, path, attributions=hypothetical, n_matches=3, n_jobs=1)
    top = matches.motif_id[matches.rank == 1]
    assert all(":GATA" in name.split(":", 1)[1] for name in top), top


def test_seqlet_matrices_sum_to_one_and_keep_n_uniform():
    rng = np.random.default_rng(4)
    one_hot, hypothetical, _ = _planted(rng, n=2)
    one_hot[0, 22] = 0  # an N base
    seqlets = _seqlets([0, 1], [18, 18], [30, 30], sign=[1, -1])
    for matrix in ("sequence", "contributions"):
        mats = seqlet_matrices(seqlets, one_hot, attributions=hypothetical, matrix=matrix)
        for m in mats:
            np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(mats[0][4], 0.25)
    positive, negative = seqlet_matrices(seqlets, one_hot, attributions=hypothetical)
    # the motif's bases (positions 2..9 of the seqlets) carry the positive contributions: sharp
    # columns in the positive seqlet, uniform ones in a negative seqlet over the same bases
    assert (positive[[2, 3, 5, 6, 7, 8, 9]].max(axis=1) > 0.6).all()
    np.testing.assert_allclose(negative[2:10], 0.25, atol=1e-12)


def test_annotate_refuses_bad_input_in_one_line(tmp_path):
    one_hot, hypothetical, _ = _planted(np.random.default_rng(5), n=2)
    seqlets = _seqlets([0], [18], [30])
    database = {"A": np.full((5, 4), 0.25)}
    cases = [
        (dict(attributions=None), "attributions", "matrix='sequence'"),
        (dict(attributions=hypothetical, matrix="pwm"), "matrix", "'contributions' or"),
        (dict(attributions=hypothetical, n_matches=0), "n_matches", "positive int"),
        (dict(attributions=hypothetical[:, :10]), "attributions", "same sequences"),
    ]
    for kwargs, param, words in cases:
        with pytest.raises(ValueError, match=f"'{param}' parameter of annotate") as info:
            annotate(seqlets, one_hot, database, **kwargs)
        assert words in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="'one_hot' parameter of annotate"):
        annotate(_seqlets([5], [18], [30]), one_hot, database, matrix="sequence")
    with pytest.raises(TypeError, match="'motifs' parameter of annotate"):
        annotate(seqlets, one_hot, 3, matrix="sequence")  # type: ignore[arg-type]
    assert Motif("a", "b", np.ones((1, 4))).name == "b"


def test_no_seqlets_give_no_matches():
    one_hot, hypothetical, _ = _planted(np.random.default_rng(6), n=2)
    database = _database(np.random.default_rng(6))
    empty = _seqlets([], [], [])
    matches = annotate(empty, one_hot, database, attributions=hypothetical, n_jobs=1)
    assert len(matches) == 0 and matches.p_value.dtype == np.float64


def test_the_seqlet_logo_places_the_motif_where_the_match_aligns_it(tmp_path):
    pytest.importorskip("matplotlib")
    from seqattrib.plot import plot_seqlet

    one_hot, hypothetical, _ = _planted(np.random.default_rng(9), n=1)
    pwm = np.full((3, 4), 0.02)
    pwm[[0, 1, 2], [0, 1, 2]] = 0.94  # A, C, G
    out = tmp_path / "seqlet.png"
    figure = plot_seqlet(hypothetical[0], pwm, start=18, end=30, offset=4, strand="-", out=out)
    top, bottom = figure.axes
    assert out.stat().st_size > 0 and len(top.patches) > 0
    extents = [patch.get_path().get_extents() for patch in bottom.patches]
    centres = sorted({round((e.x0 + e.x1) / 2) for e in extents})
    assert centres == [22, 23, 24]  # start + offset .. + width - 1
    # a column of probability 0.94 carries about 1.6 of its 2 bits in its top letter
    tallest = max(extents, key=lambda e: e.y1 - e.y0)
    assert 1.2 < tallest.y1 - tallest.y0 < 2
