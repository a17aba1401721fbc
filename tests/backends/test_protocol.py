"""Both backends through every primitive of the protocols they declare, against NumPy.

The core protocol (arrays, model calls, input gradients, sessions) and the windowed-forward
capability (fast ISM); the parameter-gradients capability has its own file.
"""

from __future__ import annotations

import models
import numpy as np
import pytest
from conftest import LENGTH, make_model
from helpers import CLOSED_FORM, FLOAT32, assert_close

import seqattrib as sa
from seqattrib.backends import Backend, ParameterGradients, WindowedForward
from seqattrib.engine.outputs import Head, model_session

FRAMEWORKS = ["torch", "tensorflow"]


@pytest.fixture(params=FRAMEWORKS)
def linear(request, linear_weights):
    """A linear model (batch, L, 4) -> (batch, 3) and its backend, inside a session."""
    model = make_model(request.param, "linear", linear_weights, "NLC")
    backend = sa.get_backend(model)
    with model_session(backend, model, None):
        yield backend, model, linear_weights


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_backend_declares_the_core_and_both_capabilities(framework, linear_weights):
    backend = sa.get_backend(make_model(framework, "linear", linear_weights, "NLC"))
    assert isinstance(backend, Backend)
    assert isinstance(backend, WindowedForward)
    assert isinstance(backend, ParameterGradients)


def test_arrays_round_trip_and_are_counted(linear):
    be, _, _ = linear
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    be.transfers.reset()
    back = be.to_numpy(be.asarray(host))
    np.testing.assert_array_equal(back, host)
    assert be.transfers.to_device == host.nbytes and be.transfers.to_host == host.nbytes
    with be.transfers.paused():
        be.to_numpy(be.asarray(host))
    assert be.transfers.to_device == host.nbytes and be.transfers.to_host == host.nbytes
    index = be.asarray(np.array([2, 0]), "int64")
    assert be.to_numpy(be.asarray(np.array([1, 2]), "int64")).dtype == np.int64
    np.testing.assert_array_equal(
        be.to_numpy(be.take(be.asarray(host), index, axis=1)), host[:, [2, 0]]
    )
    t = be.asarray(host)
    np.testing.assert_array_equal(be.to_numpy(be.concat([t, t])), np.concatenate([host, host]))
    np.testing.assert_array_equal(be.to_numpy(be.reshape(t, (4, -1))), host.reshape(4, -1))
    np.testing.assert_array_equal(
        be.to_numpy(be.one_hot(be.asarray(np.array([3, 0]), "int64"), 4)), np.eye(4)[[3, 0]]
    )
    assert_close(be.to_numpy(be.mean(t, axis=2)), host.mean(axis=2, keepdims=True), CLOSED_FORM)
    assert_close(be.to_numpy(be.log(t + 1.0)), np.log(host + 1), FLOAT32)


def test_segment_sum(linear):
    be, _, _ = linear
    values = np.random.default_rng(0).standard_normal((7, 3, 2)).astype(np.float32)
    segments = np.array([0, 0, 2, 2, 2, 3, 3])
    expected = np.zeros((4, 3, 2), np.float32)
    np.add.at(expected, segments, values)
    got = be.segment_sum(be.asarray(values), be.asarray(segments, "int64"), 4)
    assert_close(be.to_numpy(got), expected, CLOSED_FORM)


@pytest.mark.parametrize("vectorised", [False, True])
def test_forward_and_input_gradients_of_a_linear_model(linear, vectorised):
    be, model, weights = linear
    x = models.random_one_hot(5, LENGTH, seed=1)
    expected = np.einsum("nlc,lck->nk", x, weights["w"]) + weights["b"]
    assert_close(be.to_numpy(be.forward(model, be.asarray(x), Head())), expected, FLOAT32)
    outputs, grads = be.input_gradients(model, be.asarray(x), [2, 0], Head(), vectorised)
    assert_close(be.to_numpy(outputs), expected[:, [2, 0]], FLOAT32)
    exact = np.broadcast_to(weights["w"][:, :, [2, 0]].transpose(2, 0, 1), (5, 2, LENGTH, 4))
    assert_close(be.to_numpy(grads), exact, FLOAT32)


def test_head_selects_and_reshapes_outputs(linear):
    be, model, weights = linear
    x = models.random_one_hot(2, LENGTH, seed=2)
    expected = np.einsum("nlc,lck->nk", x, weights["w"]) + weights["b"]
    first = Head(lambda out: out[:, 1])  # (batch,) -> (batch, 1)
    assert_close(be.to_numpy(be.forward(model, be.asarray(x), first)), expected[:, 1:2], FLOAT32)
    with pytest.raises(ValueError, match="output_fn"):
        be.forward(model, be.asarray(x), Head(lambda out: (out, out)))


def test_state_holds_every_weight(linear):
    be, model, weights = linear
    state = be.state(model)
    total = sum(v.size for v in state.values())
    assert total == weights["w"].size + weights["b"].size


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_full_float32_restores_the_settings(framework, linear_weights):
    model = make_model(framework, "linear", linear_weights, "NLC")
    be = sa.get_backend(model)
    if framework == "torch":
        import torch

        setting = torch.backends.cuda.matmul
        before = setting.fp32_precision
        setting.fp32_precision = "tf32"
        try:
            with be.full_float32():
                assert setting.fp32_precision == "ieee"
            assert setting.fp32_precision == "tf32"
        finally:
            setting.fp32_precision = before
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(True)
        try:
            with be.full_float32():
                assert not tf.config.experimental.tensor_float_32_execution_enabled()
            assert tf.config.experimental.tensor_float_32_execution_enabled()
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(False)


# --------------------------------------------------------------------------- windowed forward
@pytest.mark.parametrize("axis", [1, 2])
def test_gather_and_overwrite_windows(linear, axis):
    be, _, _ = linear
    rng = np.random.default_rng(3)
    shape = (3, 10, 2) if axis == 1 else (3, 2, 10)
    source = rng.standard_normal(shape).astype(np.float32)
    rows, starts, width = np.array([2, 0, 2, 1]), np.array([0, 6, 3, 3]), 4
    expected = np.stack(
        [
            np.take(source[r], range(s, s + width), axis=axis - 1)
            for r, s in zip(rows, starts, strict=True)
        ]
    )
    got = be.gather_windows(
        be.asarray(source), be.asarray(rows, "int64"), be.asarray(starts, "int64"), width, axis
    )
    np.testing.assert_array_equal(be.to_numpy(got), expected)
    window = rng.standard_normal((4, 2, 2)).astype(np.float32)  # 2 positions, 2 channels
    at = np.array([0, 2, 1, 1])
    written = expected.copy()
    for i, a in enumerate(at):
        if axis == 1:
            written[i, a : a + 2] = window[i]
        else:
            written[i, :, a : a + 2] = window[i]
    got = be.overwrite_windows(got, be.asarray(window), be.asarray(at, "int64"), axis)
    np.testing.assert_array_equal(be.to_numpy(got), written)


@pytest.mark.parametrize("axis", [1, 2])
def test_pad_positions_adds_zeros_or_crops(linear, axis):
    be, _, _ = linear
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    pad = [(0, 0)] * 3
    pad[axis] = (2, 1)
    np.testing.assert_array_equal(
        be.to_numpy(be.pad_positions(be.asarray(x), 2, 1, axis)), np.pad(x, pad)
    )
    cropped = np.take(x, range(1, x.shape[axis] - 1), axis=axis)
    np.testing.assert_array_equal(
        be.to_numpy(be.pad_positions(be.asarray(x), -1, -1, axis)), cropped
    )


def test_compile_keeps_the_function(linear):
    be, _, _ = linear
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    double = be.compile(lambda t: t + t)
    np.testing.assert_array_equal(be.to_numpy(double(be.asarray(x))), 2 * x)
