"""Backends are found by the model's class; state is restored; Keras on torch works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import torch
from conftest import LENGTH, make_model
from helpers import CROSS_FRAMEWORK, FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa


def test_detection_by_class(conv_weights):
    assert sa.get_backend(make_model("torch", "convnet", conv_weights, "NLC")).name == "torch"
    keras_model = make_model("tensorflow", "convnet", conv_weights, "NLC")
    assert sa.get_backend(keras_model).name == "tensorflow"
    assert "parameters" in sa.get_backend(keras_model).describe(keras_model)


def test_tf_module_and_plain_callables(linear_weights):
    w = linear_weights["w"][:, :, 0]

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(w)

        def __call__(self, x):
            return tf.reduce_sum(x * self.w, axis=(1, 2))

    X = random_one_hot(3, LENGTH)
    module = Linear()
    assert sa.get_backend(module).name == "tensorflow"
    assert_close(sa.saliency(module, X), np.broadcast_to(w, X.shape), FLOAT32)
    tensor_w = tf.constant(w)
    assert_close(
        sa.saliency(lambda x: tf.reduce_sum(x * tensor_w, axis=(1, 2)), X, backend="tensorflow"),
        np.broadcast_to(w, X.shape),
        FLOAT32,
    )
    torch_w = torch.from_numpy(w)
    assert_close(
        sa.saliency(lambda x: (x * torch_w).sum(dim=(1, 2)), X, backend="torch"),
        np.broadcast_to(w, X.shape),
        FLOAT32,
    )


KERAS_ON_TORCH = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, keras
import models, seqattrib as sa
assert keras.config.backend() == "torch"
weights = models.convnet_weights()
km = models.keras_model("convnet", weights, 24, "NLC")
assert isinstance(km, torch.nn.Module) and sa.get_backend(km).name == "torch"
tm = models.torch_model("convnet", weights, "NLC")
X = models.random_one_hot(4, 24, seed=3)
a = sa.expected_integrated_gradients(km, X, target=[0, 2], n_baselines=3, n_steps=4)
b = sa.expected_integrated_gradients(tm, X, target=[0, 2], n_baselines=3, n_steps=4)
import warnings
with warnings.catch_warnings():  # ISM's default fast="auto": the exact path, quietly
    warnings.simplefilter("error", sa.SeqAttribWarning)
    c = sa.ism(km, X, target=1)
d = sa.ism(tm, X, target=1)
print(max(float(np.abs(a - b).max() / max(1.0, np.abs(b).max())),
          float(np.abs(c - d).max() / max(1.0, np.abs(d).max()))))
"""


def test_keras_on_the_torch_backend_is_a_torch_model():
    env = dict(os.environ, KERAS_BACKEND="torch")
    code = KERAS_ON_TORCH.format(tests=str(Path(__file__).parents[1]))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) <= CROSS_FRAMEWORK


def test_session_restores_device_and_mode(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NLC").train()
    backend = sa.get_backend(model)
    with backend.session(model, "cpu") as device:
        assert device == torch.device("cpu") and not model.training
        assert not any(p.requires_grad for p in model.parameters())
    assert model.training and all(p.requires_grad for p in model.parameters())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_model_returns_to_its_device_after_a_cuda_run(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NLC")
    X = random_one_hot(3, LENGTH)
    on_gpu = sa.saliency(model, X, device="cuda")
    assert next(model.parameters()).device.type == "cpu"
    assert_close(on_gpu, sa.saliency(model, X), FLOAT32)


def test_torch_calls_run_in_full_float32_and_restore_the_tf32_flags(conv_weights):
    """Inside a call: conv, RNN and matmul at float32 ("ieee"); after it: the user's settings."""
    settings = [torch.backends.cudnn.conv, torch.backends.cudnn.rnn, torch.backends.cuda.matmul]
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = make_model("torch", "convnet", conv_weights, "NLC")

        def forward(self, x):
            seen.append(tuple(s.fp32_precision for s in settings))
            return self.inner(x)

    saved = [s.fp32_precision for s in settings]
    for s in settings:
        s.fp32_precision = "tf32"
    try:
        sa.saliency(Probe(), random_one_hot(2, LENGTH))
        assert seen and set(seen) == {("ieee", "ieee", "ieee")}
        assert [s.fp32_precision for s in settings] == ["tf32"] * 3
    finally:
        for s, value in zip(settings, saved, strict=True):
            s.fp32_precision = value
