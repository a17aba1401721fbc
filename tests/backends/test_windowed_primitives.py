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


def _windows(source: np.ndarray, rows, starts, width: int) -> np.ndarray:
    """(B, width, channels): source (N, positions, channels) at rows[i], starts[i] on."""
    return np.stack([source[r, s : s + width] for r, s in zip(rows, starts, strict=True)])


def _positions_major(be, x: np.ndarray, axis: int):
    """x as a tensor of the backend; a torch tensor with positions on axis 2 stored with its
    positions outermost (the layout of fast ISM's windows in torch)."""
    t = be.asarray(x.copy())  # never a view of x: some of these write their input
    if axis == 2 and type(t).__module__.startswith("torch"):
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t


#: Batches of (source row, window start) per mutant: the mutants of one position share a
#: window; regular runs, a group of 4 (an N), a change of sequence, a start that goes back,
#: groups split at either end, every row alone, and starts that skip positions.
BATCHES = [
    ([0] * 9, [2, 2, 2, 3, 3, 3, 4, 4, 4]),
    ([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], [5, 6, 6, 6, 7, 7, 7, 0, 0, 0, 1]),
    ([1, 1, 1, 1, 0, 0, 0, 0], [3, 3, 3, 3, 4, 4, 4, 2]),
    ([0, 1, 0, 1, 0], [1, 1, 7, 0, 2]),
    ([0] * 12, [1, 1, 1, 2, 2, 2, 5, 5, 5, 6, 6, 6]),
]


@pytest.mark.parametrize("batch", range(len(BATCHES)))
@pytest.mark.parametrize("axis", [1, 2])
def test_add_windows_reads_the_windows_of_every_row(be, axis, batch):
    rng = np.random.default_rng(3)
    rows, starts = BATCHES[batch]
    width = 4
    source = rng.standard_normal((2, 12, 3)).astype(np.float32)  # (N, positions, channels)
    x = rng.standard_normal((len(rows), width, 3)).astype(np.float32)
    windows = _windows(source, rows, starts, width)
    src = _positions_major(be, along(source, axis), axis)
    r, s = be.asarray(np.array(rows), "int64"), be.asarray(np.array(starts), "int64")
    for alpha in (1.0, -1.0):
        expected = x + alpha * windows
        got = be.add_windows(_positions_major(be, along(x, axis), axis), src, r, s, axis, alpha)
        assert_close(along(be.to_numpy(got), axis), expected, CLOSED_FORM)
        # written in place, and into a larger tensor of an earlier batch (its first rows)
        x_t = _positions_major(be, along(x, axis), axis)
        got = be.add_windows(x_t, src, r, s, axis, alpha, out=x_t)
        assert_close(along(be.to_numpy(got), axis), expected, CLOSED_FORM)
        spare = _positions_major(
            be, along(np.zeros((len(rows) + 3, width, 3), np.float32), axis), axis
        )
        x_t = _positions_major(be, along(x, axis), axis)
        got = be.add_windows(x_t, src, r, s, axis, alpha, out=spare)
        assert got.shape == x_t.shape
        assert_close(along(be.to_numpy(got), axis), expected, CLOSED_FORM)
        assert_close(along(be.to_numpy(x_t), axis), x, CLOSED_FORM)  # x itself unchanged


@pytest.mark.parametrize("at", [0, 2, 5])
@pytest.mark.parametrize("axis", [1, 2])
def test_add_splice_adds_the_reference_run_around_the_window(be, axis, at):
    rng = np.random.default_rng(4)
    rows, starts = BATCHES[1]
    width, n_window = 8, 3
    source = rng.standard_normal((2, 20, 3)).astype(np.float32)
    target = rng.standard_normal((len(rows), width, 3)).astype(np.float32)
    window = rng.standard_normal((len(rows), n_window, 3)).astype(np.float32)
    run = _windows(source, rows, starts, width)
    run[:, at : at + n_window] = window
    got = be.add_splice(
        _positions_major(be, along(target, axis), axis),
        _positions_major(be, along(source, axis), axis),
        be.asarray(np.array(rows), "int64"),
        be.asarray(np.array(starts), "int64"),
        be.asarray(along(window, axis)),
        at,
        axis,
    )
    assert_close(along(be.to_numpy(got), axis), target + run, CLOSED_FORM)


@pytest.mark.parametrize("axis", [1, 2])
def test_fill_outside_in_place(be, axis):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 5, 4) if axis == 1 else (3, 4, 5)).astype(np.float32)
    starts = np.array([-1, 0, 2])  # windows of 5 positions of a 6-position node
    inside = (starts[:, None] + np.arange(5) >= 0) & (starts[:, None] + np.arange(5) < 6)
    expected = np.where(inside[:, :, None], along(x, axis), 0.0)
    got = be.fill_outside(be.asarray(x), be.asarray(starts, "int64"), 6, 0.0, axis, in_place=True)
    np.testing.assert_array_equal(along(be.to_numpy(got), axis), expected)
