"""The engine: batches span sequences, results stream in bounded blocks, X is read in pieces."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.backends import OutOfDeviceMemory
from seqattrib.engine import sinks
from seqattrib.engine.batching import clear_cache


@pytest.fixture
def torch_model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NLC")


def test_batches_span_sequences(torch_model, monkeypatch):
    """26 rows per sequence in batches of 7: 78 rows need 12 calls, not 3 x 4."""
    backend = sa.get_backend(torch_model)
    calls = []
    original = type(backend).input_gradients

    def spy(self, model, x, targets, head, vectorised, extras=()):
        calls.append(int(x.shape[0]))
        return original(self, model, x, targets, head, vectorised, extras)

    monkeypatch.setattr(type(backend), "input_gradients", spy)
    sa.integrated_gradients(torch_model, random_one_hot(3, LENGTH), n_steps=25, batch_size=7)
    assert calls == [7] * 11 + [1]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_only_final_tracks_cross_to_the_host(framework, conv_weights):
    model = make_model(framework, "convnet", conv_weights, "NLC")
    X = random_one_hot(7, LENGTH)
    backend = sa.get_backend(model)
    backend.transfers.reset()
    sa.expected_integrated_gradients(
        model, X, target=[0, 2], n_baselines=5, n_steps=6, batch_size=16
    )
    assert backend.transfers.to_host == 7 * 2 * LENGTH * 4 * 4


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_host_blocks_never_exceed_max_cpu_sequences(torch_model, monkeypatch, limit):
    blocks = []
    original = sinks.ArraySink.write

    def spy(self, start, block):
        blocks.append((start, len(block["attributions"])))
        original(self, start, block)

    monkeypatch.setattr(sinks.ArraySink, "write", spy)
    sa.saliency(torch_model, random_one_hot(11, LENGTH), batch_size=64, max_cpu_sequences=limit)
    assert max(n for _, n in blocks) <= limit
    assert [s for s, _ in blocks] == list(np.cumsum([0] + [n for _, n in blocks[:-1]]))
    assert sum(n for _, n in blocks) == 11


class _Recording:
    """An array-like that records which slices were read."""

    def __init__(self, array):
        self.array, self.reads = array, []
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, index):
        self.reads.append((index.start, index.stop))
        return self.array[index]


def test_x_is_read_in_pieces(torch_model):
    X = random_one_hot(40, LENGTH)
    recording = _Recording(X)
    result = sa.saliency(torch_model, recording, batch_size=4, max_cpu_sequences=6)
    assert max(stop - start for start, stop in recording.reads[1:]) <= 6
    assert_close(result, sa.saliency(torch_model, X), FLOAT32)


def test_memmap_and_h5py_inputs(torch_model, tmp_path):
    X = random_one_hot(9, LENGTH)
    reference = sa.expected_integrated_gradients(torch_model, X, n_baselines=3, n_steps=3)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.int8, shape=X.shape)
    mm[:] = X
    mm.flush()
    readonly = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert_close(
        sa.expected_integrated_gradients(torch_model, readonly, n_baselines=3, n_steps=3),
        reference,
        FLOAT32,
    )
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["X"] = X
    with h5py.File(tmp_path / "x.h5", "r") as f:
        result = sa.expected_integrated_gradients(
            torch_model, f["X"], n_baselines=3, n_steps=3, max_cpu_sequences=2
        )
    assert_close(result, reference, FLOAT32)


def test_out_of_memory_halves_the_batch(torch_model, monkeypatch):
    backend = sa.get_backend(torch_model)
    original = type(backend).input_gradients

    def small_device(self, model, x, targets, head, vectorised, extras=()):
        if x.shape[0] > 8:
            raise OutOfDeviceMemory("pretend")
        return original(self, model, x, targets, head, vectorised, extras)

    X = random_one_hot(4, LENGTH)
    reference = sa.integrated_gradients(torch_model, X, n_steps=10, batch_size=8)
    monkeypatch.setattr(type(backend), "input_gradients", small_device)
    assert_close(
        sa.integrated_gradients(torch_model, X, n_steps=10, batch_size=40), reference, FLOAT32
    )
    clear_cache()
    assert_close(sa.integrated_gradients(torch_model, X, n_steps=10), reference, FLOAT32)


def test_row_plan_with_one_count_per_sequence():
    from seqattrib.engine import RowPlan

    plan = RowPlan(4, np.array([3, 1, 4, 2]))
    assert plan.n_rows == 10
    sequence, row = plan.rows(2, 9)
    np.testing.assert_array_equal(sequence, [0, 1, 2, 2, 2, 2, 3])
    np.testing.assert_array_equal(row, [2, 0, 0, 1, 2, 3, 0])
    assert plan.sequences(2, 9) == (0, 4)
    assert plan.completed(8) == 3 and plan.completed(7) == 2 and plan.completed(10) == 4
    uniform = RowPlan(3, 5)
    assert uniform.sequences(4, 11) == (0, 3) and uniform.completed(10) == 2
