"""top_k streamed over training blocks equals the stable ranking of the dense scores (ties: the
lower index first), for TRAK and TracIn (projected and exact), in memory and from a features
store, torch and Keras; it does not depend on max_cpu_sequences nor on splitting X_test."""

from __future__ import annotations

import numpy as np
import pytest
from store_models import (
    BATCH,
    DUPLICATES,
    keras_model,
    query_data,
    stable_ranking,
    torch_model,
    torch_states,
    train_data,
    weights,
)
from tracin_models import one_torch_thread

import seqattrib as sa
from seqattrib.data_attribution import tracin as tracin_module
from seqattrib.data_attribution import trak_kernel

N_TRAIN, N_TEST, PROJ_DIM = 160, 6, 32
CASES = [
    ("trak", False),
    ("trak", True),
    ("tracin_projected", False),
    ("tracin_projected", True),
    ("tracin_exact", False),  # an exact TracIn has no features to store
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def train_set():
    return train_data(N_TRAIN)


@pytest.fixture(scope="module")
def test_set(train_set):
    """Test row 0 is training row DUPLICATES[0][0] (and its copy): a tie near the top."""
    X, y = query_data(N_TEST)
    original = DUPLICATES[0][0]
    X[0], y[0] = train_set[0][original], train_set[1][original]
    return X, y


@pytest.fixture(scope="module")
def checkpoints():
    ws = weights(2)
    return {"torch": (torch_model(ws), torch_states(ws)), "keras": keras_model(ws)}


def fit(framework, method, store, checkpoints, train_set, folder):
    model, ckpts = checkpoints[framework]
    if method == "trak":
        obj = sa.TRAK(model, ckpts, proj_dim=PROJ_DIM, batch_size=BATCH)
    else:
        proj_dim = PROJ_DIM if method == "tracin_projected" else None
        obj = sa.TracIn(model, ckpts, proj_dim=proj_dim, batch_size=BATCH)
    if store:
        return obj.fit(*train_set, store=folder / f"{framework}-{method}.h5")
    return obj.fit(*train_set)


@pytest.fixture(scope="module")
def fitted(checkpoints, train_set, tmp_path_factory):
    """fitted(framework, method, store): one fit per combination, shared by the tests."""
    folder = tmp_path_factory.mktemp("stores")
    cache = {}

    def get(framework, method, store):
        key = (framework, method, store)
        if key not in cache:
            cache[key] = fit(framework, method, store, checkpoints, train_set, folder)
        return cache[key]

    return get


def tie_cut(dense_row: np.ndarray, proponents: bool) -> tuple[int, tuple[int, int]]:
    """The k that cuts the first duplicated pair of the row's ranking between its two rows,
    and that pair."""
    order = np.argsort(-dense_row if proponents else dense_row, kind="stable")
    position = {int(i): p for p, i in enumerate(order)}
    first = min(DUPLICATES, key=lambda pair: position[pair[0]])
    assert position[first[1]] == position[first[0]] + 1  # tied: adjacent, the lower row first
    return position[first[0]] + 1, first


def check_ranking(obj, test_set):
    """top_k for k = 1, n_train and the k that cuts a tie, proponents and opponents, equals
    the stable ranking of ``obj.scores``."""
    dense = obj.scores(*test_set)
    assert dense.shape == (N_TEST, N_TRAIN) and np.abs(dense).max() > 0
    for original, copy in DUPLICATES:  # equal examples, equal scores: exact ties
        assert dense[:, original].tobytes() == dense[:, copy].tobytes(), (original, copy)
    for proponents in (True, False):
        cut, (lower, upper) = tie_cut(dense[0], proponents)
        assert 1 <= cut < N_TRAIN
        for k in sorted({1, cut, N_TRAIN}):
            indices, scores = obj.top_k(*test_set, k, proponents=proponents)
            want_indices, want_scores = stable_ranking(dense, k, proponents)
            assert indices.dtype == np.int64 and scores.dtype == np.float32
            assert indices.shape == scores.shape == (N_TEST, k)
            np.testing.assert_array_equal(indices, want_indices, err_msg=f"k={k} {proponents}")
            assert scores.tobytes() == want_scores.tobytes(), (k, proponents)
            if k == cut:  # the tie straddles the cut: the lower row is in, its copy out
                assert indices[0, -1] == lower and upper not in indices[0]


@pytest.mark.parametrize("framework", ["torch", "keras"])
@pytest.mark.parametrize(("method", "store"), CASES)
def test_top_k_is_the_stable_ranking_of_the_dense_scores(
    framework, method, store, fitted, test_set
):
    check_ranking(fitted(framework, method, store), test_set)


@pytest.mark.parametrize(("method", "store"), CASES)
def test_top_k_over_many_training_blocks_is_the_stable_ranking(
    method, store, checkpoints, train_set, test_set, tmp_path, monkeypatch
):
    """Blocks of 7 training rows (TRAK: host memory for 7 rows of float64 features; TracIn:
    7 rows a block): the running selection is merged over 23 blocks, and the tied pairs lie in
    different blocks."""
    monkeypatch.setattr(trak_kernel, "HOST_BYTES", 7 * 8 * PROJ_DIM)
    monkeypatch.setattr(tracin_module, "HOST_BLOCK", 7)
    assert trak_kernel.block_rows(PROJ_DIM) == 7
    check_ranking(fit("torch", method, store, checkpoints, train_set, tmp_path), test_set)


@pytest.mark.parametrize(("method", "store"), CASES)
def test_top_k_does_not_depend_on_max_cpu_sequences(method, store, fitted, test_set):
    obj = fitted("torch", method, store)
    for proponents in (True, False):
        base = obj.top_k(*test_set, 9, proponents=proponents, max_cpu_sequences=N_TRAIN + N_TEST)
        for limit in (1, 7):
            other = obj.top_k(*test_set, 9, proponents=proponents, max_cpu_sequences=limit)
            np.testing.assert_array_equal(other[0], base[0])
            assert other[1].tobytes() == base[1].tobytes(), (limit, proponents)


@pytest.mark.parametrize(("method", "store"), CASES)
def test_top_k_of_split_test_sets_equals_one_call(method, store, fitted, test_set):
    obj = fitted("torch", method, store)
    X, y = test_set
    whole = obj.top_k(X, y, 11)
    parts = [obj.top_k(X[i : i + 4], y[i : i + 4], 11) for i in range(0, N_TEST, 4)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole[0])
    assert np.concatenate([p[1] for p in parts]).tobytes() == whole[1].tobytes()
    rows = [4, 1]
    picked = obj.top_k(X[rows], y[rows], 11)
    np.testing.assert_array_equal(picked[0], whole[0][rows])
    assert picked[1].tobytes() == whole[1][rows].tobytes()
