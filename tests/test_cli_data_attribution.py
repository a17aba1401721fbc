"""``seqattrib trak|tracin fit|top-k``: the table equals the API's top_k on the same data, shards
merged equal one run, labels are matched by id with one-line errors in flag words."""

from __future__ import annotations

import argparse
import copy
import subprocess

import numpy as np
import pytest
import torch

import seqattrib as sa
from seqattrib import demo
from seqattrib.cli import main
from seqattrib.cli.commands import launch
from seqattrib.cli.data_attribution import KeyScheme, key_schemes, read_labels

MODEL = "seqattrib.demo:torch_model"
N_TRAIN, N_TEST = 12, 3
#: Small and fixed, so that a shard computes exactly what one process computes.
SETTINGS = ["--proj-dim", "8", "--batch-size", "12", "--quiet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Training and test FASTA files of demo sequences, their labels (three 0/1 columns, and
    a class index), and two checkpoints of the demo model."""
    folder = tmp_path_factory.mktemp("cli-da")
    data = demo.load_data()
    names, seqs = data["names"], data["sequences"]
    labels = np.asarray(data["labels"])
    train, test = range(N_TRAIN), range(N_TRAIN, N_TRAIN + N_TEST)
    for name, rows in (("train", train), ("test", test)):
        (folder / f"{name}.fa").write_text("".join(f">{names[i]}\n{seqs[i]}\n" for i in rows))
        # rows in another order than the FASTA, a comment line, a '#' header
        lines = [
            f"{names[i]}\t{' '.join(str(int(v)) for v in labels[i])}\t{int(labels[i].argmax())}"
            for i in reversed(rows)
        ]
        table = ["#id\tA\tB\tC\tclass", "# demo labels"] + [
            line.replace(" ", "\t") for line in lines
        ]
        (folder / f"{name}.tsv").write_text("\n".join(table) + "\n")
    model = demo.torch_model()
    checkpoints = []
    for seed in (1, 2):
        generator = torch.Generator().manual_seed(seed)
        state = copy.deepcopy(model.state_dict())
        for value in state.values():
            value += 0.1 * torch.randn(value.shape, generator=generator)
        checkpoints.append(folder / f"ckpt{seed}.pt")
        torch.save(state, checkpoints[-1])
    X = {n: sa.one_hot([seqs[i] for i in rows]) for n, rows in (("train", train), ("test", test))}
    X = {n: x.transpose(0, 2, 1).copy() for n, x in X.items()}  # NCL, as the CLI feeds torch
    y = {n: labels[list(rows)] for n, rows in (("train", train), ("test", test))}
    ids = {n: [names[i] for i in rows] for n, rows in (("train", train), ("test", test))}
    return folder, [str(c) for c in checkpoints], X, y, ids


def _fit(method, files, store, *extra):
    folder, checkpoints = files[0], files[1]
    return main(
        [
            method,
            "fit",
            "--model",
            MODEL,
            "--checkpoints",
            *checkpoints,
            "--fasta",
            str(folder / "train.fa"),
            "--labels",
            str(folder / "train.tsv"),
            "--store",
            str(store),
            *SETTINGS,
            *extra,
        ]
    )


def _top_k(method, files, store, out, *extra):
    folder, checkpoints = files[0], files[1]
    return main(
        [
            method,
            "top-k",
            "--model",
            MODEL,
            "--checkpoints",
            *checkpoints,
            "--store",
            str(store),
            "--fasta",
            str(folder / "test.fa"),
            "--labels",
            str(folder / "test.tsv"),
            "-k",
            "5",
            "--out",
            str(out),
            *extra,
        ]
    )


def _read_table(path):
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == ["test_id", "rank", "train_index", "train_id", "score"]
    rows = [line.split("\t") for line in lines[1:]]
    return (
        [r[0] for r in rows],
        np.array([int(r[1]) for r in rows]),
        np.array([int(r[2]) for r in rows]),
        [r[3] for r in rows],
        np.array([float(r[4]) for r in rows], dtype=np.float32),
    )


def _expected(method, files, y_train, y_test, **settings):
    """top_k of the API on the same sequences, labels and checkpoints (no store)."""
    _, checkpoints, X, _, _ = files
    cls = sa.TRAK if method == "trak" else sa.TracIn
    estimator = cls(demo.torch_model(), checkpoints, proj_dim=8, batch_size=12, **settings)
    estimator.fit(X["train"], y_train)
    return estimator.top_k(X["test"], y_test, 5)


@pytest.mark.parametrize(
    "method, columns, extra, settings",
    [
        ("trak", "class", [], {}),
        ("trak", "C", ["--loss", "bce", "--target", "2"], {"loss": "bce", "target": 2}),
        ("trak", "B", ["--loss", "mse", "--target", "1"], {"loss": "mse", "target": 1}),
        (
            "tracin",
            "class",
            ["--learning-rates", "0.5,0.25", "--parameters", "last"],
            {"learning_rates": [0.5, 0.25], "parameters": "last"},
        ),
        ("tracin", "A,B,C", ["--loss", "bce"], {"loss": "bce"}),
    ],
)
def test_fit_then_top_k_equals_the_api(method, columns, extra, settings, files, tmp_path, capsys):
    """The table holds the API's top_k on the same data; TRAK with --loss mse scores without
    test labels."""
    _, _, _, y, ids = files
    store, out = tmp_path / "train.h5", tmp_path / "top.tsv"
    assert _fit(method, files, store, "--label-columns", columns, *extra) == 0
    assert capsys.readouterr().out.strip() == str(store)
    test_labels = [] if settings.get("loss") == "mse" else ["--label-columns", columns]
    if not test_labels:
        argv = ["trak", "top-k", "--model", MODEL, "--checkpoints", *files[1]]
        argv += ["--store", str(store), "--fasta", str(files[0] / "test.fa")]
        assert main([*argv, "-k", "5", "--out", str(out)]) == 0
    else:
        assert _top_k(method, files, store, out, *test_labels) == 0
    assert capsys.readouterr().out.strip() == str(out)
    if columns == "class":
        y_train, y_test = y["train"].argmax(1), y["test"].argmax(1)
    else:
        picked = ["ABC".index(c) for c in columns.split(",")]
        y_train, y_test = (y[n][:, picked].astype(np.float32) for n in ("train", "test"))
        if len(picked) == 1:
            y_train, y_test = y_train[:, 0], y_test[:, 0]
    indices, scores = _expected(method, files, y_train, y_test, **settings)
    test_ids, ranks, train_index, train_ids, table_scores = _read_table(out)
    assert test_ids == [i for i in ids["test"] for _ in range(5)]
    np.testing.assert_array_equal(ranks, np.tile(np.arange(1, 6), N_TEST))
    np.testing.assert_array_equal(train_index, indices.ravel())
    assert train_ids == [ids["train"][i] for i in indices.ravel()]
    np.testing.assert_array_equal(table_scores, scores.ravel())


@pytest.mark.parametrize("method", ["trak", "tracin"])
def test_two_shards_merged_give_the_table_of_one_run(method, files, tmp_path, capsys):
    one, out_one = tmp_path / "one.h5", tmp_path / "one.tsv"
    extra = ["--label-columns", "class"]
    assert _fit(method, files, one, *extra) == 0
    assert _top_k(method, files, one, out_one, *extra) == 0
    store = tmp_path / "train.h5"
    for shard in ("0/2", "1/2"):
        assert _fit(method, files, store, *extra, "--shard", shard) == 0
    shards = [tmp_path / f"train.shard-{i}-of-2.h5" for i in (0, 1)]
    assert capsys.readouterr().out.split() == [str(s) for s in (one, out_one, *shards)]
    assert main(["merge", *map(str, shards[::-1]), "-o", str(store)]) == 0
    out = tmp_path / "sharded.tsv"
    assert _top_k(method, files, store, out, *extra) == 0
    assert out.read_text() == out_one.read_text()


class _Worker:
    """``subprocess.Popen`` for launch's workers: the worker's command, run in this process
    (the subprocesses themselves are tested with explain in test_shard.py)."""

    def __init__(self, argv, env):
        assert argv[1:3] == ["-m", "seqattrib"] and env["CUDA_VISIBLE_DEVICES"] == ""
        self.code = main(argv[3:])

    def wait(self):
        return self.code


def test_launch_fits_one_shard_per_worker_then_merges(files, tmp_path, monkeypatch, capsys):
    """Two workers, one shard each, then the merge, equal one run."""
    one, store = tmp_path / "one.h5", tmp_path / "launched.h5"
    extra = ["--label-columns", "class"]
    assert _fit("trak", files, one, *extra) == 0
    folder, checkpoints = files[0], files[1]
    command = ["trak", "fit", "--model", MODEL, "--checkpoints", *checkpoints]
    command += ["--fasta", str(folder / "train.fa"), "--labels", str(folder / "train.tsv")]
    command += [f"--store={store}", *SETTINGS, *extra]
    monkeypatch.setattr(subprocess, "Popen", _Worker)
    assert launch(command, ["cpu", "cpu"]) == store
    assert capsys.readouterr().out.split()[1:] == [
        str(tmp_path / f"launched.shard-{i}-of-2.h5") for i in (0, 1)
    ]
    tables = []
    for path in (one, store):
        out = tmp_path / f"{path.stem}.tsv"
        assert _top_k("trak", files, path, out, *extra) == 0
        tables.append(out.read_text())
    assert tables[0] == tables[1]


def test_launch_refuses_other_commands(capsys):
    with pytest.raises(ValueError, match=r"trak fit or tracin fit with --store"):
        launch(["trak", "top-k", "--out", "x.tsv"], ["cpu"])
    with pytest.raises(ValueError, match=r"'--shard'"):
        launch(["trak", "fit", "--store", "s.h5", "--shard=0/2"], ["cpu"])


def test_top_k_refuses_an_existing_out(files, tmp_path, capsys):
    out = tmp_path / "top.tsv"
    out.write_text("keep\n")
    assert _top_k("trak", files, tmp_path / "missing.h5", out) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqattrib trak: error: --out must be a file that does not exist yet")
    assert "--overwrite" in err and len(err.splitlines()) == 1
    assert out.read_text() == "keep\n"


def _scheme(keys):
    return [KeyScheme("names", keys)]


def test_labels_are_matched_by_id(tmp_path):
    path = tmp_path / "labels.tsv"
    path.write_text("name\tID\tx\ty\n\na\tb\t1.5\t2\n# skipped\nb\tc\t-3\t4e0\nc\ta\t0\t7\n")
    keys = ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"'a' in column 'name' on line 3"):
        read_labels(str(path), _scheme(keys), "mse", "cmd")  # every column but the ids
    y = read_labels(str(path), _scheme(keys), "mse", "cmd", columns=["y", "x"])
    assert y.dtype == np.float32  # only the chosen columns are read, in their order
    np.testing.assert_array_equal(y, np.array([[7, 0], [2, 1.5], [4, -3]], np.float32))
    y = read_labels(str(path), _scheme(keys), "cross_entropy", "cmd", columns=["y"])
    assert y.dtype == np.int64 and y.tolist() == [7, 2, 4]


def test_region_labels_by_window_region_or_name(tmp_path):
    data = demo.load_data()
    (tmp_path / "g.fa").write_text(f">chr1\n{''.join(data['sequences'][:5])}\n")
    (tmp_path / "peaks.bed").write_text(
        "chr1\t100\t300\tp1\nchr1\t440\t560\tp2\nchr1\t900\t1000\tp3\n"
    )
    args = argparse.Namespace(
        fasta=None,
        genome=str(tmp_path / "g.fa"),
        regions=str(tmp_path / "peaks.bed"),
        length=200,
    )
    from seqattrib.cli.sequences import load_sequences

    with pytest.warns(sa.SeqAttribWarning, match="dropped 1 of 3"):
        X, _ = load_sequences(args, "NCL")
    schemes = key_schemes(args, X)
    assert schemes[0].keys == ["chr1:100-300", "chr1:400-600"]  # the ids kept in the store
    tables = {
        "window": "id\tv\nchr1:400-600\t2\nchr1:100-300\t1\n",
        "region": "id\tv\nchr1:440-560\t2\nchr1:100-300\t1\nchr1:900-1000\t3\n",
        "name": "id\tv\np3\t3\np2\t2\np1\t1\n",
    }
    for name, text in tables.items():
        path = tmp_path / f"{name}.tsv"
        path.write_text(text)  # the label of p3 (off chr1's end) is no error
        assert read_labels(str(path), schemes, "mse", "cmd").tolist() == [1, 2], name


@pytest.mark.parametrize(
    "table, extra, expected",
    [
        ("name\tv\n", [], "--labels must be a tab-separated table whose header row names one 'id'"),
        ("id\n{0}\t\n", [], "--labels must be a table with label columns besides 'id'"),
        ("id\tv\n{0}\t1\n{0}\t2\n", [], "--labels must be a table with one row per id. Got"),
        ("id\tv\n{0}\t1\n", [], "--labels must be a table with a row for every sequence"),
        ("id\tv\n{all}x\t1\n", [], "--labels must be a table of the given sequences only"),
        ("id\tv\n{all}", [], "--labels must be a table whose 'id' column names the sequences"),
        ("id\tv\n{0}\tNA\n", [], "--labels must be a table of finite numbers"),
        ("id\tv\n{0}\t1\t2\n", [], "--labels must be a table with 2 columns on every line"),
        ("id\tv\n{rows}", ["--label-columns", "w"], "--label-columns must be label columns"),
    ],
)
def test_label_errors_in_flag_words(table, extra, expected, files, tmp_path, capsys):
    folder, _, _, _, ids = files
    names = ids["train"]
    text = table.format(
        names[0],
        all="".join(f"{n}\t1\n" for n in names) if "{all}x" in table else "",
        rows="".join(f"{n}\t1\n" for n in names),
    )
    if table == "id\tv\n{all}":
        text = "id\tv\n" + "".join(f"other{i}\t1\n" for i in range(3))
    path = tmp_path / "labels.tsv"
    path.write_text(text)
    argv = ["trak", "fit", "--model", MODEL, "--checkpoints", *files[1]]
    argv += ["--fasta", str(folder / "train.fa"), "--labels", str(path)]
    argv += ["--store", str(tmp_path / "s.h5"), "--loss", "mse", *extra]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"seqattrib trak: error: {expected}"), err
    assert not (tmp_path / "s.h5").exists()


def test_class_labels_for_cross_entropy(files, tmp_path, capsys):
    folder, checkpoints = files[0], files[1]
    argv = ["trak", "fit", "--model", MODEL, "--checkpoints", *checkpoints]
    argv += ["--fasta", str(folder / "train.fa"), "--labels", str(folder / "train.tsv")]
    argv += ["--store", str(tmp_path / "s.h5")]
    assert main([*argv, "--label-columns", "A,B"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--labels must be one label column of class indices (0, 1, ...) for --loss " in err
    assert "--label-columns NAME" in err
    path = tmp_path / "fractional.tsv"
    path.write_text((folder / "train.tsv").read_text().replace("\t1\n", "\t0.5\n", 1))
    argv[argv.index("--labels") + 1] = str(path)
    assert main([*argv, "--label-columns", "class"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--labels must be class indices (0, 1, ...) for --loss cross_entropy. Got 0.5" in err


def test_a_store_of_other_settings_is_refused_until_overwrite(files, tmp_path, capsys):
    store = tmp_path / "train.h5"
    extra = ["--label-columns", "class"]
    assert _fit("trak", files, store, *extra) == 0
    first = store.read_bytes()
    assert _fit("trak", files, store, *extra, "--random-state", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("seqattrib trak: error: --store must be a features store of the same")
    assert "other settings" in err and "pass --overwrite to featurize again" in err
    assert store.read_bytes() == first
    assert _fit("trak", files, store, *extra, "--random-state", "1", "--overwrite") == 0
    out_seed0, out_seed1 = tmp_path / "seed0.tsv", tmp_path / "seed1.tsv"
    assert _top_k("trak", files, store, out_seed1, *extra) == 0
    assert _fit("trak", files, tmp_path / "seed0.h5", *extra) == 0
    assert _top_k("trak", files, tmp_path / "seed0.h5", out_seed0, *extra) == 0
    assert out_seed1.read_text() != out_seed0.read_text()  # the store of seed 1 replaced it


def test_top_k_without_the_labels_it_needs(files, tmp_path, capsys):
    store = tmp_path / "train.h5"
    assert _fit("trak", files, store, "--label-columns", "class") == 0
    argv = ["trak", "top-k", "--model", MODEL, "--checkpoints", *files[1], "--store", str(store)]
    argv += ["--fasta", str(files[0] / "test.fa"), "-o", str(tmp_path / "top.tsv")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqattrib trak: error: --labels must be given: the test sequences'")
    assert "--loss cross_entropy" in err and not (tmp_path / "top.tsv").exists()


def test_ctrl_c_during_fit_says_the_store_resumes(files, tmp_path, monkeypatch, capsys):
    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sa.TRAK, "fit", interrupt)
    store = tmp_path / "train.h5"
    assert _fit("trak", files, store, "--label-columns", "class", "--shard", "1/2") == 130
    err = capsys.readouterr().err.strip()
    shard = tmp_path / "train.shard-1-of-2.h5"
    assert err == (
        f"seqattrib trak: interrupted: {shard} keeps the training features written so far; "
        "rerun the same command to resume it (--overwrite starts again)."
    )


def test_library_errors_in_flag_words(files, tmp_path, capsys):
    store = tmp_path / "s.h5"
    assert (
        _fit("trak", files, store, "--label-columns", "A,C", "--loss", "bce", "--target", "0,2")
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqattrib trak: error: --target must be one output for --loss bce")
    assert "--target k" in err and "target=" not in err
    assert not store.exists()
    assert _fit("tracin", files, store, "--label-columns", "class", "--shard", "0/2") == 0
    shard = tmp_path / "s.shard-0-of-2.h5"
    assert _top_k("tracin", files, shard, tmp_path / "top.tsv", "--label-columns", "class") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("seqattrib tracin: error: --store must be a finished TracIn store of")
    assert err.endswith("Run fit to the end, or merge its shards first.")


def test_genome_regions_labelled_by_name_give_window_ids(files, tmp_path, capsys):
    """Training windows of a genome, labelled by the regions' names (a window off the end
    dropped with its label): the table names the training windows chrom:start-end, and its
    scores are the API's on the same windows."""
    folder, checkpoints, X, _, _ = files
    data = demo.load_data()
    seqs = data["sequences"]
    (tmp_path / "g.fa").write_text(f">chr1\n{''.join(seqs[:5])}\n>chr2\n{seqs[5]}\n")
    starts = {"p0": ("chr1", 0), "p1": ("chr1", 200), "p2": ("chr1", 400), "p3": ("chr1", 600)}
    starts.update({"p4": ("chr1", 800), "p5": ("chr2", 0), "p6": ("chr1", 950)})
    bed = "".join(f"{c}\t{s}\t{s + 200}\t{name}\n" for name, (c, s) in starts.items())
    (tmp_path / "train.bed").write_text(bed)
    classes = {name: i % 3 for i, name in enumerate(starts)}
    rows = "".join(f"{name}\t{classes[name]}\n" for name in reversed(list(starts)))
    (tmp_path / "train.tsv").write_text("id\tclass\n" + rows)
    store, out = tmp_path / "train.h5", tmp_path / "top.tsv"
    argv = ["trak", "fit", "--model", MODEL, "--checkpoints", *checkpoints]
    argv += ["--genome", str(tmp_path / "g.fa"), "--regions", str(tmp_path / "train.bed")]
    argv += ["--length", "200", "--labels", str(tmp_path / "train.tsv"), "--store", str(store)]
    assert main([*argv, "--proj-dim", "4", "--batch-size", "12", "--quiet"]) == 0
    assert "dropped 1 of 7 windows" in capsys.readouterr().err
    assert _top_k("trak", files, store, out, "-k", "3", "--label-columns", "class") == 0
    _, _, train_index, train_ids, scores = _read_table(out)
    windows = [f"{c}:{s}-{s + 200}" for c, s in list(starts.values())[:6]]
    assert train_ids == [windows[i] for i in train_index]
    X_train = sa.one_hot(seqs[:6]).transpose(0, 2, 1).copy()
    y_train = np.array([classes[f"p{i}"] for i in range(6)])
    trak = sa.TRAK(demo.torch_model(), checkpoints, proj_dim=4, batch_size=12)
    y_test = np.asarray(data["labels"])[N_TRAIN : N_TRAIN + N_TEST].argmax(1)
    indices, expected = trak.fit(X_train, y_train).top_k(X["test"], y_test, 3)
    np.testing.assert_array_equal(train_index, indices.ravel())
    np.testing.assert_array_equal(scores, expected.ravel())
