"""The features store: a fit written to a store equals the fit in memory bit for bit, a second
fit with the same arguments changes nothing, a store of another job is refused in one line that
names what differs (and is left as it was), one writer at a time, and X_train read out of core
(memmap, HDF5 dataset, genome windows) gives the same numbers as an array in memory."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch
from store_models import (
    BATCH,
    LENGTH,
    assert_same_datasets,
    datasets,
    hooked_fit,
    leftovers,
    one_line,
    popen,
    query_data,
    snapshot,
    torch_model,
    torch_states,
    train_data,
    weights,
)
from tracin_models import one_torch_thread

import seqattrib as sa
from seqattrib.io import read_store

N_TRAIN, N_TEST = 240, 5
TRAK_KW = {"proj_dim": 16, "batch_size": BATCH}
TRACIN_KW = {"proj_dim": 16, "batch_size": BATCH, "learning_rates": [0.5, 0.25]}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def ws():
    return weights(2)


@pytest.fixture(scope="module")
def states(ws):
    return torch_states(ws)


@pytest.fixture(scope="module")
def train_set():
    """Labels in {0, 1} of a 3-output model: valid for target=[0, 1] and for bce on one
    output as well, so that only the setting under test differs."""
    return train_data(N_TRAIN, labels=2)


@pytest.fixture(scope="module")
def test_set():
    return query_data(N_TEST, labels=2)


def method(name, model, checkpoints, **kwargs):
    if name == "TRAK":
        return sa.TRAK(model, checkpoints, **{**TRAK_KW, **kwargs})
    return sa.TracIn(model, checkpoints, **{**TRACIN_KW, **kwargs})


# --------------------------------------------------------------------------- reuse and equality
@pytest.mark.parametrize("name", ["TRAK", "TracIn"])
def test_a_second_fit_is_a_no_op_and_equals_the_fit_in_memory(
    name, ws, states, train_set, test_set, tmp_path
):
    path = tmp_path / "features.h5"
    memory = method(name, torch_model(ws), states).fit(*train_set)
    stored = method(name, torch_model(ws), states).fit(*train_set, store=path)
    info = read_store(path)
    assert info.finished and info.method == name and info.shard is None and info.ids is None
    before = snapshot(path)
    time.sleep(0.01)  # a rewrite would move the modification time
    again = method(name, torch_model(ws), states).fit(*train_set, store=path)
    assert snapshot(path) == before, "the second fit wrote into the finished store"

    want = memory.scores(*test_set)
    assert np.abs(want).max() > 0
    for fitted in (stored, again):
        assert fitted.scores(*test_set).tobytes() == want.tobytes()
        assert fitted.self_influence().tobytes() == memory.self_influence().tobytes()
        for proponents in (True, False):
            got, expected = (
                fitted.top_k(*test_set, 7, proponents=proponents),
                memory.top_k(*test_set, 7, proponents=proponents),
            )
            np.testing.assert_array_equal(got[0], expected[0])
            assert got[1].tobytes() == expected[1].tobytes()
    if name == "TRAK":
        loaded = sa.TRAK.from_store(path, torch_model(ws), states)
    else:
        rates = TRACIN_KW["learning_rates"]
        loaded = sa.TracIn.from_store(path, torch_model(ws), states, learning_rates=rates)
    assert loaded.scores(*test_set).tobytes() == want.tobytes()
    out = stored.scores(*test_set, out=tmp_path / "scores.h5")
    import h5py

    with h5py.File(out, "r") as f:
        assert f["scores"][()].tobytes() == want.tobytes()
    assert snapshot(path) == before
    assert leftovers(tmp_path) == []


def test_read_store_describes_the_store(ws, states, train_set, tmp_path):
    """method, settings, n_train, n_completed, shard, ids and finished, as documented."""
    path = tmp_path / "features.h5"
    method("TRAK", torch_model(ws), states).fit(*train_set, store=path)
    info = read_store(path)
    assert info.method == "TRAK" and info.finished and info.shard is None and info.ids is None
    assert info.n_train == N_TRAIN
    assert info.settings["proj_dim"] == 16
    assert info.n_completed > 0
    shard = tmp_path / "shard.h5"
    method("TRAK", torch_model(ws), states).fit(*train_set, store=shard, shard=(1, 3))
    part = read_store(shard)
    assert part.finished and part.shard is not None
    assert 0 < part.n_completed < info.n_completed


def test_ids_are_kept_in_the_store(ws, states, train_set, tmp_path):
    path = tmp_path / "features.h5"
    ids = [f"chr{1 + i % 3}:{100 * i}-{100 * i + LENGTH}" for i in range(N_TRAIN)]
    trak = method("TRAK", torch_model(ws), states).fit(*train_set, store=path, ids=ids)
    assert trak.train_ids_ == ids
    assert read_store(path).ids == ids
    assert sa.TRAK.from_store(path, torch_model(ws), states).train_ids_ == ids
    assert method("TRAK", torch_model(ws), states).fit(*train_set).train_ids_ is None
    with pytest.raises(ValueError, match="'ids'") as info:
        method("TRAK", torch_model(ws), states).fit(
            *train_set, store=tmp_path / "other.h5", ids=ids[:-1]
        )
    one_line(info.value)
    assert not (tmp_path / "other.h5").exists()


# --------------------------------------------------------------------------- refusals
def _other_data(train_set):
    X, y = train_set[0].copy(), train_set[1]
    X[101, 20] = np.roll(X[101, 20], 1)  # one base of one sequence
    return X, y


def _other_labels(train_set):
    y = train_set[1].copy()
    y[57] = 1 - y[57]
    return train_set[0], y


#: (what differs, the method's arguments, the training set, the phrase the refusal must hold)
VARIANTS = {
    "architecture": (
        lambda ws, states: (
            torch_model(weights(2, filters=5)),
            torch_states(weights(2, filters=5)),
        ),
        {},
        None,
        r"another model",
    ),
    "checkpoints": (
        lambda ws, states: (torch_model(ws), torch_states(weights(2, first_seed=40))),
        {},
        None,
        r"other checkpoints",
    ),
    "fewer checkpoints": (
        lambda ws, states: (torch_model(ws), states[:1]),
        {},
        None,
        r"other checkpoints",
    ),
    "training data": (None, {}, _other_data, r"other training data"),
    "labels": (None, {}, _other_labels, r"other (labels|training data)"),
    "proj_dim": (None, {"proj_dim": 24}, None, r"other settings"),
    "lambda_reg": (None, {"lambda_reg": 0.5}, None, r"other settings"),
    "target": (None, {"target": [0, 1]}, None, r"other settings"),
    "loss": (None, {"loss": "bce", "target": 0}, None, r"other settings"),
    "random_state": (None, {"random_state": 1}, None, r"other settings"),
}


@pytest.fixture(scope="module")
def finished_store(ws, states, train_set, tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "features.h5"
    method("TRAK", torch_model(ws), states).fit(*train_set, store=path)
    return path


@pytest.mark.parametrize("differs", list(VARIANTS))
def test_a_store_of_another_job_is_refused_and_left_as_it_was(
    differs, ws, states, train_set, finished_store
):
    build, kwargs, data, phrase = VARIANTS[differs]
    model, checkpoints = build(ws, states) if build else (torch_model(ws), states)
    X, y = data(train_set) if data else train_set
    other = method("TRAK", model, checkpoints, **kwargs)
    before = snapshot(finished_store)
    with pytest.raises(ValueError) as info:
        other.fit(X, y, store=finished_store)
    message = one_line(info.value)
    assert "'store'" in message and re.search(phrase, message), message
    assert snapshot(finished_store) == before
    with pytest.raises(RuntimeError):  # the refused object holds no fit
        other.scores(X[:2], y[:2])


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"learning_rates": [1.0, 0.25]}, r"other settings"),
        ({"proj_dim": 32}, r"other settings"),
        ({"parameters": "last"}, r"other settings|another model"),
    ],
)
def test_a_tracin_store_of_other_settings_is_refused(
    kwargs, phrase, ws, states, train_set, tmp_path
):
    path = tmp_path / "tracin.h5"
    method("TracIn", torch_model(ws), states).fit(*train_set, store=path)
    before = snapshot(path)
    with pytest.raises(ValueError) as info:
        method("TracIn", torch_model(ws), states, **kwargs).fit(*train_set, store=path)
    assert re.search(phrase, one_line(info.value)), str(info.value)
    assert snapshot(path) == before


def test_a_tracin_store_needs_a_projection(ws, states, train_set, tmp_path):
    path = tmp_path / "exact.h5"
    with pytest.raises(ValueError, match="proj_dim") as info:
        sa.TracIn(torch_model(ws), states).fit(*train_set, store=path)
    one_line(info.value)
    assert not path.exists() and leftovers(tmp_path) == []


def test_checkpoint_files_rewritten_after_the_fit_are_refused(
    ws, states, train_set, test_set, tmp_path
):
    files = [tmp_path / f"epoch{i}.pt" for i in range(2)]
    for file, state in zip(files, states, strict=True):
        torch.save(state, file)
    path = tmp_path / "features.h5"
    trak = method("TRAK", torch_model(ws), [str(f) for f in files]).fit(*train_set, store=path)
    good = trak.top_k(*test_set, 3)
    torch.save(torch_states(weights(1, first_seed=77))[0], files[1])  # retrained in place
    before = snapshot(path)
    with pytest.raises(ValueError, match="(?i)checkpoint") as info:
        trak.top_k(*test_set, 3)
    one_line(info.value)
    with pytest.raises(ValueError, match="other checkpoints") as info:
        sa.TRAK.from_store(path, torch_model(ws), [str(f) for f in files])
    one_line(info.value)
    assert snapshot(path) == before
    torch.save(states[1], files[1])  # the same weights again: accepted, the same ranking
    again = trak.top_k(*test_set, 3)
    np.testing.assert_array_equal(again[0], good[0])


@pytest.mark.parametrize("bad", ["short", "fractional", "text"])
def test_labels_of_the_wrong_length_or_type_are_refused(
    bad, ws, states, train_set, finished_store, tmp_path
):
    X, y = train_set
    labels = {
        "short": y[:-1],
        "fractional": y + 0.5,
        "text": np.array([str(v) for v in y]),
    }[bad]
    fresh = tmp_path / "fresh.h5"
    before = snapshot(finished_store)
    for path in (fresh, finished_store):
        with pytest.raises((ValueError, TypeError)) as info:
            method("TRAK", torch_model(ws), states).fit(X, labels, store=path)
        assert "'y_train'" in one_line(info.value)
    assert not fresh.exists() and leftovers(tmp_path) == []
    assert snapshot(finished_store) == before


@pytest.mark.parametrize("name", ["TRAK", "TracIn"])
def test_k_beyond_the_training_set_is_refused(name, ws, states, train_set, test_set, tmp_path):
    fitted = method(name, torch_model(ws), states).fit(*train_set, store=tmp_path / "f.h5")
    for k in (N_TRAIN + 1, 0):
        with pytest.raises(ValueError, match="'k'") as info:
            fitted.top_k(*test_set, k)
        one_line(info.value)
    assert fitted.top_k(*test_set, N_TRAIN)[0].shape == (N_TEST, N_TRAIN)


@pytest.mark.parametrize("kind", ["text", "hdf5"])
def test_a_file_that_is_not_a_store_is_never_overwritten(kind, ws, states, train_set, tmp_path):
    path = tmp_path / "results.h5"
    if kind == "text":
        path.write_text("chr1\t0\t50\n")
    else:
        import h5py

        with h5py.File(path, "w") as f:
            f["attributions"] = np.ones((3, 4), np.float32)
    before = snapshot(path)
    with pytest.raises((ValueError, OSError)) as info:
        method("TRAK", torch_model(ws), states).fit(*train_set, store=path)
    assert "'store'" in one_line(info.value)
    assert snapshot(path) == before
    with pytest.raises((ValueError, OSError)):
        sa.TRAK.from_store(path, torch_model(ws), states)


def test_a_store_being_written_is_refused_to_a_second_writer(ws, states, train_set, tmp_path):
    """A first writer (another process) holds the store mid-run: the second fit is refused in
    one line naming that process, changes nothing, and the first finishes as if alone."""
    path, go = tmp_path / "features.h5", tmp_path / "go"
    first = popen(hooked_fit(path, "trak.fit(X, y, store=store)", action="pause", n=2, go=go))
    try:
        line = first.stdout.readline()
        assert line.strip() == "paused", first.stderr.read()[-3000:]
        before = snapshot(path)
        assert not read_store(path).finished  # a reader needs no lock
        X, y = train_data(N_TRAIN)  # the subprocess's training set
        with pytest.raises(BlockingIOError) as info:
            method("TRAK", torch_model(ws), states).fit(X, y, store=path)
        assert f"pid {first.pid}" in one_line(info.value)
        assert snapshot(path) == before
    finally:
        go.touch()
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0 and out.strip().endswith("done"), err[-3000:]
    alone = tmp_path / "alone.h5"
    method("TRAK", torch_model(ws), states).fit(X, y, store=alone)
    assert_same_datasets(datasets(path), datasets(alone))
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- out of core
@pytest.fixture(scope="module")
def in_memory(ws, states, train_set, test_set, tmp_path_factory):
    path = tmp_path_factory.mktemp("in_memory") / "features.h5"
    trak = method("TRAK", torch_model(ws), states).fit(*train_set, store=path)
    return path, trak.scores(*test_set), trak.top_k(*test_set, 9)


def _genome_windows(X, folder):
    """A FASTA whose windows (a BED of 50 bp regions, 10 bp apart) are the rows of X."""
    gap = "N" * 10
    chrom = gap.join(sa.decode(X, alphabet_axis=-1))
    fasta = folder / "genome.fa"
    fasta.write_text(">chrT\n" + "\n".join(chrom[i : i + 60] for i in range(0, len(chrom), 60)))
    bed = folder / "windows.bed"
    bed.write_text(
        "".join(f"chrT\t{i * (LENGTH + 10)}\t{i * (LENGTH + 10) + LENGTH}\n" for i in range(len(X)))
    )
    regions = sa.io.read_regions(bed)
    return sa.io.genome_windows(fasta, regions, LENGTH)


@pytest.mark.parametrize("source", ["memmap", "hdf5", "genome_windows"])
def test_training_sets_out_of_core_equal_the_array_in_memory(
    source, ws, states, train_set, test_set, in_memory, tmp_path
):
    import h5py

    X, y = train_set
    reference, scores, top = in_memory
    handle = None
    if source == "memmap":
        X_train = np.memmap(tmp_path / "X.u8", np.uint8, "w+", shape=X.shape)
        X_train[:] = X.astype(np.uint8)
        X_train.flush()
        X_train = np.memmap(tmp_path / "X.u8", np.uint8, "r", shape=X.shape)
    elif source == "hdf5":
        with h5py.File(tmp_path / "X.h5", "w") as f:
            f.create_dataset("X", data=X.astype(np.uint8), chunks=(32, LENGTH, 4))
        handle = h5py.File(tmp_path / "X.h5", "r")
        X_train = handle["X"]
    else:
        X_train = _genome_windows(X, tmp_path)
        assert len(X_train) == len(X)
        np.testing.assert_array_equal(np.asarray(X_train[:]), X)
    try:
        path = tmp_path / "features.h5"
        trak = method("TRAK", torch_model(ws), states).fit(X_train, y, store=path)
        assert_same_datasets(datasets(path), datasets(reference))  # digests of the rows too
        before = snapshot(reference)  # the same sequences: the array's store is reused as is
        method("TRAK", torch_model(ws), states).fit(X_train, y, store=reference)
        assert snapshot(reference) == before
    finally:
        if handle is not None:
            handle.close()
    assert trak.scores(*test_set).tobytes() == scores.tobytes()
    again = trak.top_k(*test_set, 9)
    np.testing.assert_array_equal(again[0], top[0])
    assert again[1].tobytes() == top[1].tobytes()
    assert read_store(path).finished
