"""Every public method leaves the model as it found it: device, dtype, train/eval mode of every
module, requires_grad flags and every parameter and buffer value (BatchNorm running statistics
included), after a successful run and after an error raised mid-run."""

from __future__ import annotations

import warnings

import models
import numpy as np
import pytest
import torch

import seqattrib as sa

LENGTH = 16
_BASES = np.random.default_rng(3).choice(list("ACGT"), 200)
GENOME = {"chr1": "".join(_BASES)}
VARIANTS = {
    "chrom": ["chr1", "chr1"],
    "pos": [50, 120],
    "id": ["v0", "v1"],
    "ref": [_BASES[49], _BASES[119]],
    "alt": ["A" if _BASES[49] != "A" else "C", "G" if _BASES[119] != "G" else "T"],
}

METHODS = {
    "saliency": lambda m, X, **kw: sa.saliency(m, X, batch_size=3, **kw),
    "integrated_gradients": lambda m, X, **kw: sa.integrated_gradients(m, X, n_steps=2, **kw),
    "expected_integrated_gradients": lambda m, X, **kw: sa.expected_integrated_gradients(
        m, X, n_baselines=2, n_steps=2, batch_size=5, **kw
    ),
    "eig_tolerance": lambda m, X, **kw: sa.expected_integrated_gradients(
        m, X, n_baselines=2, n_steps=2, tolerance=1e-9, max_baselines=4, **kw
    ),
    "deep_lift_shap": lambda m, X, **kw: sa.deep_lift_shap(m, X, n_baselines=2, **kw),
    "ism_exact": lambda m, X, **kw: sa.ism(m, X, fast=False, batch_size=7, **kw),
    "ism_fast": lambda m, X, **kw: sa.ism(m, X, fast=True, batch_size=7, **kw),
    "explain": lambda m, X, **kw: sa.explain(m, X, method="ig", n_steps=2, **kw),
    "variant_effects": lambda m, X, **kw: sa.variant_effects(
        m, GENOME, VARIANTS, length=LENGTH, layout="NCL", score="delta", **kw
    ),
}


def _model(dtype: torch.dtype) -> torch.nn.Module:
    """Conv, BatchNorm, ReLU, Dropout, mean over positions, dense; in train mode, as a user
    holds a model between training steps (a forward pass here would change BatchNorm's
    running statistics and draw dropout masks)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(4, 6, 5, padding=2),
        torch.nn.BatchNorm1d(6),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.5),
        torch.nn.AdaptiveAvgPool1d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(6, 3),
    ).to(dtype)
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    model.train()
    model[3].eval()  # a mix of modes, each restored as it was
    model[0].weight.requires_grad_(False)  # a frozen layer stays frozen, the others trainable
    return model


def _snapshot(model: torch.nn.Module) -> dict:
    return {
        "modes": [m.training for m in model.modules()],
        "grad": [p.requires_grad for p in model.parameters()],
        "tensors": {
            name: (t.device, t.dtype, t.detach().clone())
            for name, t in model.state_dict(keep_vars=True).items()
        },
    }


def _assert_unchanged(model: torch.nn.Module, before: dict) -> None:
    after = _snapshot(model)
    assert after["modes"] == before["modes"]
    assert after["grad"] == before["grad"]
    assert after["tensors"].keys() == before["tensors"].keys()
    for name, (device, dtype, value) in before["tensors"].items():
        now_device, now_dtype, now_value = after["tensors"][name]
        assert (now_device, now_dtype) == (device, dtype), name
        assert torch.equal(now_value, value), name


def _run(method: str, model: torch.nn.Module, X: np.ndarray, **kwargs) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sa.SeqAttribWarning)
        METHODS[method](model, X, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_run_leaves_the_model_as_it_found_it(method, dtype):
    model = _model(dtype)
    X = models.random_one_hot(5, LENGTH, seed=1, layout="NCL")
    before = _snapshot(model)
    _run(method, model, X)
    _assert_unchanged(model, before)


def _raising_on_call(n: int):
    """An output_fn that works for its first ``n - 1`` calls, then raises (an error mid-run)."""
    calls = [0]

    def output_fn(out):
        calls[0] += 1
        if calls[0] >= n:
            raise KeyError("profile")
        return out

    return output_fn


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("failure", ["output_fn", "target"])
def test_an_error_mid_run_leaves_the_model_as_it_found_it(method, failure):
    model = _model(torch.float64)
    X = models.random_one_hot(5, LENGTH, seed=1, layout="NCL")
    before = _snapshot(model)
    kwargs = {"output_fn": _raising_on_call(2)} if failure == "output_fn" else {"target": 7}
    with pytest.raises((ValueError, RuntimeError, KeyError)):
        _run(method, model, X, **kwargs)
    _assert_unchanged(model, before)


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_a_device_without_data_is_refused_and_the_weights_stay(device):
    model = _model(torch.float32)
    X = models.random_one_hot(3, LENGTH, seed=1, layout="NCL")
    before = _snapshot(model)
    with pytest.raises(ValueError, match=r"'device' parameter of saliency.*device='cpu'"):
        sa.saliency(model, X, device=device)
    _assert_unchanged(model, before)


def test_a_keras_model_keeps_its_weights_and_trainable_flags():
    keras = pytest.importorskip("keras")
    inputs = keras.Input((LENGTH, 4))
    hidden = keras.layers.Conv1D(6, 5, padding="same")(inputs)
    hidden = keras.layers.BatchNormalization()(hidden)
    hidden = keras.layers.Dropout(0.5)(keras.layers.ReLU()(hidden))
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(hidden))
    model = keras.Model(inputs, outputs)
    model.layers[1].trainable = False
    X = models.random_one_hot(4, LENGTH, seed=1, layout="NLC")
    weights = [w.copy() for w in model.get_weights()]
    flags = [layer.trainable for layer in model.layers]
    sa.integrated_gradients(model, X, n_steps=2)
    with pytest.raises(ValueError):
        sa.saliency(model, X, target=7)
    assert [layer.trainable for layer in model.layers] == flags
    for now, then in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(now, then)


def test_a_model_without_weights_is_refused():
    model = _model(torch.float32).to("meta")
    X = models.random_one_hot(3, LENGTH, seed=1, layout="NCL")
    with pytest.raises(ValueError, match=r"'model' parameter .*meta device.*load_state_dict"):
        sa.saliency(model, X)
    assert next(model.parameters()).device.type == "meta"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("home", "device"), [("cpu", "cuda"), ("cuda", "cpu")])
@pytest.mark.parametrize("failure", [None, "output_fn"])
def test_a_run_on_another_device_moves_the_model_back(home, device, failure):
    model = _model(torch.float64).to(home)
    X = models.random_one_hot(5, LENGTH, seed=1, layout="NCL")
    before = _snapshot(model)
    if failure is None:
        _run("expected_integrated_gradients", model, X, device=device)
    else:
        with pytest.raises(ValueError, match="output_fn"):
            _run("saliency", model, X, device=device, output_fn=_raising_on_call(2))
    _assert_unchanged(model, before)
