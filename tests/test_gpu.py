"""The same jobs on a CUDA device and on the CPU give the same numbers (torch models).

On a GPU the K-target backward is vectorised (one batched vector-Jacobian product) and the batch
size probe climbs to large batches, paths the CPU suite only reaches through switches; these
tests run them for real. They skip without a CUDA device (CI has none); run them with
``python -m pytest -q tests/test_gpu.py`` on a machine that has one.

CUDA against CPU: cuDNN's float32 convolutions are far less accurate than the CPU's here. On
an H200 (torch 2.11, TF32 off through ``fp32_precision="ieee"``), saliency of the 9-layer
BPNet-like model was 2.1e-3 (relative to its largest value) from a float64 reference, against
2.4e-7 on the CPU (benchmarks/gpu_precision.py; with TF32 on, 3.9e-2), and IG and EIG on
CUDA differed from the CPU by 1.5e-3 and 1.1e-3. Gradients across devices are therefore held to
5e-3 of their largest value (``ACROSS_DEVICES``); a wrong row, weight or target moves them by
O(1). Forward-only results (ISM, TracIn) are held to ``CROSS_FRAMEWORK`` and two paths on the
same device to ``FLOAT32``.
"""

from __future__ import annotations

import warnings

import models
import numpy as np
import pytest
import torch
from data_attribution import tracin_models as tm
from helpers import CROSS_FRAMEWORK, FLOAT32, assert_close

import seqattrib as sa
from seqattrib._errors import SeqAttribWarning
from seqattrib.engine import outputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
LENGTH = 200
ACROSS_DEVICES = 5e-3


def assert_relative(actual: np.ndarray, desired: np.ndarray, tol: float = ACROSS_DEVICES) -> None:
    assert actual.shape == desired.shape
    error = float(np.abs(actual - desired).max() / np.abs(desired).max())
    print(f"max|diff| / max|desired| = {error:.2e}")  # shown with pytest -s
    assert error <= tol, f"max|diff| / max|desired| = {error:.2e} > {tol:g}"


@pytest.fixture(scope="module")
def bpnet() -> torch.nn.Module:
    return models.torch_model("bpnet", models.bpnet_weights(), "NCL")


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return models.random_one_hot(7, LENGTH, seed=3, layout="NCL")


def on_cuda(model: torch.nn.Module) -> torch.nn.Module:
    return model.to("cuda")


def test_ig_with_three_targets_matches_the_cpu(bpnet, X):
    cpu = sa.integrated_gradients(bpnet, X, target=[0, 1, 2], n_steps=8, batch_size=13)
    gpu = sa.integrated_gradients(
        bpnet, X, target=[0, 1, 2], n_steps=8, batch_size=13, device="cuda"
    )
    assert next(bpnet.parameters()).device.type == "cpu"  # moved back after the call
    assert gpu.shape == (7, 3, 4, LENGTH)
    assert_relative(gpu, cpu)


def test_vectorised_and_sequential_targets_agree_on_cuda(bpnet, X, monkeypatch):
    model = on_cuda(models.torch_model("bpnet", models.bpnet_weights(), "NCL"))
    vectorised = sa.saliency(model, X, target=[0, 2, 4], batch_size=5)
    monkeypatch.setattr(outputs, "VECTORISE_ON_ACCELERATOR", False)
    sequential = sa.saliency(model, X, target=[0, 2, 4], batch_size=5)
    assert next(model.parameters()).device.type == "cuda"  # the model stays where it was
    assert_close(vectorised, sequential, FLOAT32)


def test_eig_matches_the_cpu_and_moves_one_track_per_sequence(bpnet, X):
    kwargs = dict(target=[0, 1], n_baselines=3, n_steps=5, random_state=4, batch_size=11)
    cpu = sa.expected_integrated_gradients(bpnet, X, **kwargs)
    backend = sa.get_backend(bpnet)
    backend.transfers.reset()
    gpu = sa.expected_integrated_gradients(bpnet, X, device="cuda", **kwargs)
    assert backend.transfers.to_host == 7 * 2 * LENGTH * 4 * 4
    assert_relative(gpu, cpu)


def test_auto_batch_size_on_cuda_matches_a_fixed_one(bpnet, X):
    auto = sa.integrated_gradients(bpnet, X, n_steps=30, batch_size="auto", device="cuda")
    fixed = sa.integrated_gradients(bpnet, X, n_steps=30, batch_size=16)
    assert_relative(auto, fixed)


def test_ism_matches_the_cpu(bpnet, X):
    cpu = sa.ism(bpnet, X[:3], target=[0, 1], batch_size=64)
    gpu = sa.ism(bpnet, X[:3], target=[0, 1], batch_size=64, device="cuda")
    assert_close(gpu, cpu, CROSS_FRAMEWORK)


@pytest.mark.parametrize("mode", [{}, {"layer": "last"}, {"proj_dim": 16}])
def test_tracin_matches_the_cpu(mode):
    checkpoints = [tm.torch_state("convnet", w) for w in tm.convnet_checkpoints(2)]
    X_train, y_train = tm.data(20, seed=1)
    X_test, y_test = tm.data(4, seed=2)
    model = models.torch_model("convnet", tm.convnet_checkpoints(1)[0], "NLC")
    cpu = sa.TracIn(model, checkpoints, **mode).fit(X_train, y_train).scores(X_test, y_test)
    gpu = (
        sa.TracIn(model, checkpoints, device="cuda", **mode)
        .fit(X_train, y_train)
        .scores(X_test, y_test)
    )
    assert_close(gpu, cpu, CROSS_FRAMEWORK)


@pytest.mark.parametrize("kind", ["bpnet", "basset"])
def test_fast_ism_on_cuda_matches_the_exact_path_on_the_cpu(kind):
    weights = models.bpnet_weights() if kind == "bpnet" else models.basset_weights(LENGTH)
    model = models.torch_model(kind, weights, "NCL")
    X = models.random_one_hot(2, LENGTH, seed=4, layout="NCL")
    exact = sa.ism(model, X, target=[0, 1], fast=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)  # the fast path, not a fallback
        fast = sa.ism(model, X, target=[0, 1], fast=True, device="cuda", batch_size=97)
    assert_close(fast, exact, CROSS_FRAMEWORK)


def test_fast_auto_takes_the_exact_path_on_cuda():
    from seqattrib.attribution.mutagenesis import choice

    model = models.torch_model("basset", models.basset_weights(LENGTH), "NCL")
    X = models.random_one_hot(1, LENGTH, seed=4, layout="NCL")
    sa.ism(model, X, fast="auto", device="cuda")
    assert not choice._PLANS.get(model)  # no plan was even made
