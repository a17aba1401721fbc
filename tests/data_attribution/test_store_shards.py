"""Sharded features stores: 2 or 3 shards merged (given in any order) equal one run bit for bit,
every dataset, with the same top-k; missing, duplicated, overlapping, foreign and unfinished
shards are refused and nothing is written."""

from __future__ import annotations

import re

import numpy as np
import pytest
from store_models import (
    BATCH,
    assert_same_datasets,
    datasets,
    hooked_fit,
    leftovers,
    one_line,
    python,
    query_data,
    snapshot,
    torch_model,
    torch_states,
    train_data,
    weights,
)
from tracin_models import one_torch_thread

import seqattrib as sa
from seqattrib.io import merge, merge_features, read_store

#: the settings of ``store_models.hooked_fit`` (its subprocess writes the unfinished shard)
N_TRAIN, N_TEST = 240, 5
KW = {"proj_dim": 16, "batch_size": BATCH}


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
    return train_data(N_TRAIN)


@pytest.fixture(scope="module")
def test_set():
    return query_data(N_TEST)


def make(name, ws, states, **kwargs):
    cls = sa.TRAK if name == "TRAK" else sa.TracIn
    return cls(torch_model(ws), states, **{**KW, **kwargs})


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("shards")


@pytest.fixture(scope="module")
def shards(ws, states, train_set, folder):
    """TRAK shard stores of 2 and of 3 shards: {n: [path of shard i]}."""
    made = {}
    for n in (2, 3):
        made[n] = [folder / f"shard{i}of{n}.h5" for i in range(n)]
        for i, path in enumerate(made[n]):
            make("TRAK", ws, states).fit(*train_set, shard=(i, n), store=path)
    return made


@pytest.mark.parametrize("name", ["TRAK", "TracIn"])
@pytest.mark.parametrize("n", [2, 3])
def test_merged_shards_equal_one_run_bit_for_bit(
    name, n, ws, states, train_set, test_set, shards, tmp_path
):
    single = tmp_path / "single.h5"
    whole = make(name, ws, states).fit(*train_set, store=single)
    if name == "TRAK":
        paths = shards[n]
    else:
        paths = [tmp_path / f"tracin{i}of{n}.h5" for i in range(n)]
        for i, path in enumerate(paths):
            make(name, ws, states).fit(*train_set, shard=(i, n), store=path)
    for path in paths:
        info = read_store(path)
        assert info.finished and info.method == name
        assert 0 < info.n_completed
    order = paths[::-1]  # any order
    merged = merge(order, tmp_path / "merged.h5")
    assert merged == tmp_path / "merged.h5"
    cls = sa.TRAK if name == "TRAK" else sa.TracIn
    loaded = cls.from_store(merged, torch_model(ws), states)
    assert_same_datasets(datasets(merged), datasets(single))
    info = read_store(merged)
    assert (
        info.finished and info.shard is None and info.n_completed == read_store(single).n_completed
    )

    want = whole.scores(*test_set)
    assert np.abs(want).max() > 0
    assert loaded.scores(*test_set).tobytes() == want.tobytes()
    for proponents in (True, False):
        got, expected = (obj.top_k(*test_set, 13, proponents=proponents) for obj in (loaded, whole))
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1].tobytes() == expected[1].tobytes()
    # the merged store is a finished store of the same job: fit on it is a no-op
    before = snapshot(merged)
    make(name, ws, states).fit(*train_set, store=merged)
    assert snapshot(merged) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("join", [merge, merge_features])
def test_merge_alone_gives_the_finished_store_of_one_run(
    join, ws, states, train_set, shards, tmp_path
):
    """The merge itself computes TRAK's kernel: the merged file is, before any other call,
    the store one fit writes."""
    single = tmp_path / "single.h5"
    make("TRAK", ws, states).fit(*train_set, store=single)
    merged = join(shards[3], tmp_path / "merged.h5")
    assert read_store(merged).finished
    assert_same_datasets(datasets(merged), datasets(single))


def _refused(paths, out, phrase):
    """merge refuses in one line that names the parameter and matches ``phrase``, and writes
    nothing."""
    with pytest.raises(ValueError) as info:
        merge(paths, out)
    message = one_line(info.value)
    assert "'shards'" in message and re.search(phrase, message), message
    assert not out.exists() and leftovers(out.parent, out.name) == []
    return message


def test_a_missing_shard_is_refused(shards, tmp_path):
    three = shards[3]
    _refused([three[0], three[2]], tmp_path / "m.h5", r"shard.*\b1\b")  # names shard 1
    _refused(shards[2][:1], tmp_path / "m.h5", r"shard.*\b1\b")


def test_duplicated_and_overlapping_shards_are_refused(shards, tmp_path):
    two, three = shards[2], shards[3]
    _refused([two[0], two[0], two[1]], tmp_path / "m.h5", r"shard 0")
    _refused([two[0], three[1], three[2]], tmp_path / "m.h5", r"(?i)row")  # rows 80..119 twice
    _refused([two[0], two[1], three[2]], tmp_path / "m.h5", r"(?i)row|shard")


@pytest.mark.parametrize(
    ("kwargs", "other_weights", "phrase"),
    [
        ({}, True, r"(?i)checkpoint"),
        ({"proj_dim": 24}, False, r"(?i)setting|proj_dim"),
        ({"random_state": 3}, False, r"(?i)setting|random_state|seed"),
    ],
)
def test_a_shard_of_another_job_is_refused(
    kwargs, other_weights, phrase, ws, states, train_set, shards, tmp_path
):
    ckpts = torch_states(weights(2, first_seed=40)) if other_weights else states
    foreign = tmp_path / "foreign1of2.h5"
    make("TRAK", ws, ckpts, **kwargs).fit(*train_set, shard=(1, 2), store=foreign)
    _refused([shards[2][0], foreign], tmp_path / "m.h5", phrase)


def test_a_shard_of_other_training_data_is_refused(ws, states, train_set, shards, tmp_path):
    X, y = train_set[0].copy(), train_set[1]
    X[200, 7] = np.roll(X[200, 7], 1)  # one base of a row of shard 1
    foreign = tmp_path / "foreign1of2.h5"
    make("TRAK", ws, states).fit(X, y, shard=(1, 2), store=foreign)
    out = tmp_path / "m.h5"
    try:  # refused at the merge, or the merged store is refused as other training data
        merged = merge([shards[2][0], foreign], out)
    except ValueError as exc:
        assert "'shards'" in one_line(exc)
        assert not out.exists()
        return
    before = snapshot(merged)
    with pytest.raises(ValueError, match="other training data") as info:
        make("TRAK", ws, states).fit(*train_set, store=merged)
    one_line(info.value)
    assert snapshot(merged) == before


def test_an_unfinished_shard_is_refused(shards, tmp_path):
    """Shard 1 of 2 killed by SIGKILL after a few writes into its store."""
    path = tmp_path / "killed1of2.h5"
    done = python(hooked_fit(path, "trak.fit(X, y, store=store, shard=(1, 2))", "kill", n=4))
    assert done.returncode == -9, done.stderr[-3000:]
    assert path.exists() and not read_store(path).finished
    before = snapshot(path)
    _refused([shards[2][0], path], tmp_path / "m.h5", r"killed1of2.*(?i:finish|resume)")
    assert snapshot(path) == before


def test_an_existing_output_is_not_overwritten(shards, tmp_path):
    out = tmp_path / "merged.h5"
    out.write_bytes(b"earlier results")
    with pytest.raises((ValueError, FileExistsError)) as info:
        merge(shards[2], out)
    assert "overwrite" in one_line(info.value)
    assert out.read_bytes() == b"earlier results"
    merge(shards[2], out, overwrite=True)
    assert read_store(out).n_completed == read_store(shards[2][0]).n_completed * 2
