"""Fingerprints: every parameter and buffer value counts, output functions by code and
constants, rows by value (not dtype), one implementation shared with data attribution."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from conftest import LENGTH, make_model
from models import random_one_hot

from seqattrib.backends import get_backend
from seqattrib.data_attribution import checkpoints
from seqattrib.io import fingerprint as fp


def test_state_fingerprint_sees_values_dtypes_shapes_and_names():
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}
    same = {k: v.copy() for k, v in reversed(state.items())}
    assert fp.fingerprint(state) == fp.fingerprint(same)
    one_ulp = state["w"].copy()
    one_ulp[1, 2] = np.nextafter(one_ulp[1, 2], np.float32(10))
    changes = [
        {"w": one_ulp, "b": state["b"]},
        {"w": state["w"].astype(np.float64), "b": state["b"]},
        {"w": state["w"].reshape(3, 2), "b": state["b"]},
        {"v": state["w"], "b": state["b"]},
    ]
    assert len({fp.fingerprint(state)} | {fp.fingerprint(c) for c in changes}) == 5
    assert checkpoints.fingerprint is fp.fingerprint  # one implementation


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_model_fingerprint_covers_every_parameter_and_buffer(framework, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    be = get_backend(model)
    before = fp.model_fingerprint(model, be.state)
    assert fp.model_fingerprint(model, be.state) == before
    state = be.state(model)
    key = sorted(state)[-1]
    changed = dict(state, **{key: state[key] + 1})
    be.set_state(model, changed)
    try:
        assert fp.model_fingerprint(model, be.state) != before
    finally:
        be.set_state(model, state)


def test_an_ensemble_is_fingerprinted_member_by_member(conv_weights):
    a = make_model("torch", "convnet", conv_weights, "NCL")
    b = make_model("torch", "convnet", {k: v + 1 for k, v in conv_weights.items()}, "NCL")
    get_state = get_backend(a).state
    pair = fp.model_fingerprint([a, b], get_state)
    assert pair == fp.model_fingerprint((a, b), get_state)
    assert pair != fp.model_fingerprint([b, a], get_state) != fp.model_fingerprint([a], get_state)


def test_model_fingerprint_sees_buffers_such_as_batch_norm_statistics():
    model = torch.nn.Sequential(torch.nn.Conv1d(4, 3, 3), torch.nn.BatchNorm1d(3)).eval()
    be = get_backend(model)
    before = fp.model_fingerprint(model, be.state)
    with torch.no_grad():
        model[1].running_mean += 1
    assert fp.model_fingerprint(model, be.state) != before


def test_a_plain_callable_is_fingerprinted_by_its_code_and_the_models_it_holds(conv_weights):
    inner = make_model("torch", "convnet", conv_weights, "NCL")
    be = get_backend(inner)

    def wrapped(x):
        return inner(x)

    before = fp.model_fingerprint(wrapped, be.state)
    with torch.no_grad():
        next(inner.parameters()).add_(1)
    assert fp.model_fingerprint(wrapped, be.state) != before


def _take(outputs, k):
    return outputs[:, k]


K = 2


def _global_k(outputs):
    return outputs[:, K]


def test_function_identity_sees_code_constants_closures_and_arguments():
    def make(k):
        return lambda outputs: outputs[:, k]

    identity = fp.function_identity
    assert identity(None) is None
    assert identity(make(0)) == identity(make(0))
    assert identity(make(0)) != identity(make(1))
    assert identity(functools.partial(_take, k=0)) != identity(functools.partial(_take, k=1))
    assert identity(lambda o: o[:, 0]) != identity(lambda o: o[:, 1])
    assert identity(_global_k).startswith(f"{__name__}._global_k@")
    assert identity(_global_k) != identity(_take)

    class Head:
        def __init__(self, k):
            self.k = k

        def __call__(self, outputs):
            return outputs[:, self.k]

    assert identity(Head(0)).startswith(f"{__name__}.")
    assert identity(Head(0)) == identity(Head(0)) != identity(Head(1))
    assert identity(len) == "builtins.builtin_function_or_method"


def test_row_hashes_follow_values_not_dtypes():
    X = random_one_hot(4, LENGTH, seed=3)
    hashes = fp.row_hashes(X)
    assert hashes.shape == (4, fp.ROW_HASH_BYTES) and hashes.dtype == np.uint8
    np.testing.assert_array_equal(fp.row_hashes(X.astype(np.int8)), hashes)
    other = X.copy()
    other[2, 0] = other[2, 0][::-1]
    changed = (fp.row_hashes(other) != hashes).any(axis=1)
    assert changed.tolist() == [False, False, True, False]


def test_regions_and_file_fingerprints(tmp_path):
    a = fp.regions_fingerprint(["chr1", "chr2"], [0, 5], [10, 15])
    assert a == fp.regions_fingerprint(["chr1", "chr2"], np.array([0, 5]), np.array([10, 15]))
    assert a != fp.regions_fingerprint(["chr1", "chr2"], [0, 6], [10, 15])
    assert a != fp.regions_fingerprint(["chr1", "chr3"], [0, 5], [10, 15])
    (tmp_path / "a.fa").write_text(">c\nACGT\n")
    (tmp_path / "b.fa").write_text(">c\nACGA\n")
    assert fp.file_fingerprint(tmp_path / "a.fa") != fp.file_fingerprint(tmp_path / "b.fa")
