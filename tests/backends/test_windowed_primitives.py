"""The windowed-forward primitives fast ISM added for windows that reach past the ends of a
sequence and for sums and maxima over positions, in both backends, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_model
from helpers import CLOSED_FORM, assert_close

import seqattrib as sa
from seqattrib.engine.outputs import model_session


@pytest.fixture(params=["torch", "tensorflow"])
def be(request, linear_weights):
    model = make_model(request.param, "linear", linear_weights, "NLC")
    backend = sa.get_backend(model)
    with model_session(backend, model, None):
        yield backend


def along(x: np.ndarray, axis: int) -> np.ndarray:
    """(B, a, b) with positions on ``axis`` as (B, positions, channels)."""
    return x if axis == 1 else x.transpose(0, 2, 1)


@pytest.mark.parametrize("axis", [1, 2])
def test_pad_positions_with_a_fill_value(be, axis):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    pad = [(0, 0)] * 3
    pad[axis] = (2, 1)
    got = be.to_numpy(be.pad_positions(be.asarray(x), 2, 1, axis, -np.inf))
    np.testing.assert_array_equal(got, np.pad(x, pad, constant_values=-np.inf))
    mixed = be.to_numpy(be.pad_positions(be.asarray(x), -1, 2, axis, np.nan))
    kept = np.take(x, range(1, x.shape[axis]), axis=axis)
    pad[axis] = (0, 2)
    np.testing.assert_array_equal(mixed, np.pad(kept, pad, constant_values=np.nan))


@pytest.mark.parametrize("axis", [1, 2])
def test_overwrite_at_one_offset_and_clipped_at_the_ends(be, axis):
    rng = np.random.default_rng(0)
    target = rng.standard_normal((3, 8, 2) if axis == 1 else (3, 2, 8)).astype(np.float32)
    window = rng.standard_normal((3, 3, 2) if axis == 1 else (3, 2, 3)).astype(np.float32)
    t, w = along(target, axis), along(window, axis)
    same = t.copy()
    same[:, 4:7] = w
    got = be.overwrite_windows(be.asarray(target), be.asarray(window), 4, axis)
    np.testing.assert_array_equal(along(be.to_numpy(got), axis), same)
    at = np.array([-2, 3, 6])  # the first and last windows stick out of the target
    clipped = t.copy()
    clipped[0, 0:1] = w[0, 2:3]
    clipped[1, 3:6] = w[1]
    clipped[2, 6:8] = w[2, 0:2]
    got = be.overwrite_windows(
        be.asarray(target), be.asarray(window), be.asarray(at, "int64"), axis
    )
    np.testing.assert_array_equal(along(be.to_numpy(got), axis), clipped)


@pytest.mark.parametrize("axis", [1, 2])
def test_fill_outside_and_reductions_of_windows(be, axis):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 4) if axis == 1 else (3, 4, 5)).astype(np.float32)
    starts, length = np.array([-2, 1, 3]), 6  # windows of 5 positions of a 6-position node
    inside = (starts[:, None] + np.arange(5) >= 0) & (starts[:, None] + np.arange(5) < length)
    m = along(x, axis)
    filled = np.where(inside[:, :, None], m, -7.0)
    s = be.asarray(starts, "int64")
    got = be.fill_outside(be.asarray(x), s, length, -7.0, axis)
    np.testing.assert_array_equal(along(be.to_numpy(got), axis), filled)
    sums = (m * inside[:, :, None]).sum(axis=1)
    maxima = np.where(inside[:, :, None], m, -np.inf).max(axis=1)
    got_sums = be.to_numpy(be.reduce_positions(be.asarray(x), s, length, "sum", axis))
    assert_close(got_sums, sums, CLOSED_FORM)
    got_max = be.to_numpy(be.reduce_positions(be.asarray(x), s, length, "max", axis))
    np.testing.assert_array_equal(got_max, maxima)
    whole = be.to_numpy(be.reduce_positions(be.asarray(x), None, length, "sum", axis))
    assert whole.dtype == np.float32
    assert_close(whole, m.sum(axis=1), CLOSED_FORM)


@pytest.mark.parametrize("how", ["sum", "max"])
@pytest.mark.parametrize("axis", [1, 2])
def test_reduce_complement_completes_a_reduction_from_tables(be, how, axis):
    """The reduction over all positions of a sequence whose window ``starts : starts + width``
    (clipped to the sequence) holds new values, from the tables of its reference values."""
    rng = np.random.default_rng(2)
    reference = rng.standard_normal((2, 9, 3) if axis == 1 else (2, 3, 9)).astype(np.float32)
    rows, starts, width = np.array([1, 0, 1, 0]), np.array([-2, 0, 4, 7]), 4
    new = rng.standard_normal((4, width, 3)).astype(np.float32)  # (B, positions, channels)
    r = along(reference, axis)
    expected = []
    for row, start, values in zip(rows, starts, new, strict=True):
        full = r[row].copy()
        for j in range(width):
            if 0 <= start + j < 9:
                full[start + j] = values[j]
        expected.append(full.sum(0) if how == "sum" else full.max(0))
    window = new if axis == 1 else new.transpose(0, 2, 1)
    s = be.asarray(starts, "int64")
    inside = be.reduce_positions(be.asarray(window), s, 9, how, axis)
    table = be.reduce_tables(be.asarray(reference), how, axis)
    got = be.reduce_complement(table, be.asarray(rows, "int64"), s, width, inside, how)
    got = be.to_numpy(got)
    assert got.dtype == np.float32
    assert_close(got, np.stack(expected), CLOSED_FORM)
