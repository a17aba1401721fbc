"""deep_lift_shap against independent references: tangermeme's ``deep_lift_shap`` and captum's
``DeepLiftShap`` (same model, same references passed explicitly), to 1e-5 relative; and Keras
3 on the torch backend, which runs through the torch path.

Both references attach their rules to ``nn.Module`` layers, so they are given the models of
``deeplift_models`` (one ``nn.ReLU`` per use, ``nn.MaxPool1d`` layers); the toy models of
``models.py`` compute the same functions with ``torch.relu`` and ``F.max_pool1d``, which both
references treat as linear.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from deeplift_models import dinucleotide_references, torch_module_model
from helpers import FLOAT32, assert_close
from models import basset_weights, bpnet_weights, crested_weights, random_one_hot, torch_model

import seqattrib as sa

tangermeme = pytest.importorskip("tangermeme.deep_lift_shap")
captum_attr = pytest.importorskip("captum.attr")

N_REFERENCES = 6
CASES = {  # weights, input length
    "bpnet": (lambda: bpnet_weights(filters=16, n_layers=4), 200),
    "basset": (lambda: basset_weights(120), 120),
    "crested": (lambda: crested_weights(filters=32), 200),
}


def _setup(kind, layout="NCL", n=4, seed=3):
    weights, length = CASES[kind]
    w = weights()
    X = random_one_hot(n, length, seed=seed, layout=layout)
    refs = dinucleotide_references(X, N_REFERENCES, 0, layout)
    functional = torch_model(kind, w, layout)
    modules = torch_module_model(kind, w, length, layout)
    return functional, modules, X, refs


def ours(model, X, refs, target, **kw):
    return sa.deep_lift_shap(
        model, X, target=target, baselines=refs, n_baselines=N_REFERENCES, batch_size=7, **kw
    )


def tangermeme_dls(model, X, refs, target, hypothetical=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tangermeme.deep_lift_shap(
            model,
            torch.from_numpy(X),
            target=target,
            references=torch.from_numpy(refs),
            hypothetical=hypothetical,
            device="cpu",
            batch_size=8,
        )
    return out.numpy()


def _hypothetical(multipliers, inputs, baselines):
    """captum's custom attribution: TF-MoDISco's hypothetical scores, (N, 4, L) layout."""
    (m,), (r,) = multipliers, baselines
    projected = torch.zeros_like(r)
    for base in range(4):
        hypothetical_input = torch.zeros_like(r)
        hypothetical_input[:, base] = 1.0
        projected[:, base] = ((hypothetical_input - r) * m).sum(dim=1)
    return (projected,)


def captum_dls(model, X, refs, target):
    """Hypothetical scores from captum's DeepLiftShap, one sequence at a time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explainer = captum_attr.DeepLiftShap(model)
        return np.stack(
            [
                explainer.attribute(
                    torch.from_numpy(X[i : i + 1]),
                    torch.from_numpy(refs[i]),
                    target=target,
                    custom_attribution_func=_hypothetical,
                )
                .detach()
                .numpy()[0]
                for i in range(len(X))
            ]
        )


def captum_gap(model, X, refs, target):
    """The largest of captum's own convergence deltas, over (sequence, reference) pairs."""
    explainer = captum_attr.DeepLift(model)
    gaps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(len(X)):
            for r in refs[i]:
                _, delta = explainer.attribute(
                    torch.from_numpy(X[i : i + 1]),
                    torch.from_numpy(r[None]),
                    target=target,
                    return_convergence_delta=True,
                )
                gaps.append(abs(float(delta)))
    return max(gaps)


def relative(a, b):
    return float(np.abs(a - b).max() / max(1.0, float(np.abs(b).max())))


# --------------------------------------------------------------------------- tangermeme
@pytest.mark.parametrize("kind", list(CASES))
def test_tangermeme_parity(kind):
    functional, modules, X, refs = _setup(kind)
    for target in (0, 1):
        expected = tangermeme_dls(modules, X, refs, target)
        assert_close(ours(modules, X, refs, target), expected, FLOAT32)
        assert_close(ours(functional, X, refs, target), expected, FLOAT32)
    hypothetical = tangermeme_dls(modules, X, refs, 1, hypothetical=True)
    assert_close(ours(functional, X, refs, 1, multiply_by_inputs=False), hypothetical, FLOAT32)


@pytest.mark.parametrize("kind", list(CASES))
def test_tangermeme_treats_functional_relus_as_linear_and_goes_wrong(kind):
    """The same weights, ReLU written as torch.relu: tangermeme sees no rule to apply (and
    max pooling written as F.max_pool1d); its contributions no longer sum to the output
    difference, and differ from its own result on the module model. Ours do not change."""
    functional, modules, X, refs = _setup(kind)
    right = tangermeme_dls(modules, X, refs, 0)
    wrong = tangermeme_dls(functional, X, refs, 0)
    assert relative(wrong, right) > 1e-3
    with torch.no_grad():
        f_x = functional(torch.from_numpy(X))[:, 0].numpy()
        f_r = functional(torch.from_numpy(refs.reshape(-1, *X.shape[1:])))[:, 0].numpy()
    difference = f_x - f_r.reshape(len(X), -1).mean(axis=1)
    assert np.abs(wrong.sum(axis=(1, 2)) - difference).max() > 1e-3 * np.abs(difference).max()
    attributions, delta = ours(functional, X, refs, 0, return_delta=True)
    assert_close(attributions, right, FLOAT32)
    assert_close(delta, np.zeros_like(delta), FLOAT32)


# --------------------------------------------------------------------------- captum
def test_captum_parity_on_bpnet_like():
    functional, modules, X, refs = _setup("bpnet")
    for target in (0, 3):
        expected = captum_dls(modules, X, refs, target)
        assert_close(ours(functional, X, refs, target, multiply_by_inputs=False), expected, FLOAT32)
        assert_close(ours(modules, X, refs, target), expected * X, FLOAT32)


def test_captum_parity_on_pooled_models_where_its_pooling_rule_holds():
    """captum's max-pooling rule holds where a linear layer separates the ReLU module from the
    MaxPool1d module (see the next test): on such a model, conv, ReLU, BatchNorm, max pooling
    and dense layers, ours equals captum's."""

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.c1, self.c2 = torch.nn.Conv1d(4, 8, 7), torch.nn.Conv1d(8, 8, 5)
            self.r1, self.r2, self.r3 = torch.nn.ReLU(), torch.nn.ReLU(), torch.nn.ReLU()
            self.bn1, self.bn2 = torch.nn.BatchNorm1d(8), torch.nn.BatchNorm1d(8)
            self.p1, self.p2 = torch.nn.MaxPool1d(3), torch.nn.MaxPool1d(2)
            self.d1, self.d2 = torch.nn.Linear(8 * 7, 16), torch.nn.Linear(16, 2)
            for bn in (self.bn1, self.bn2):
                bn.running_mean.normal_(0, 0.3)
                bn.running_var.uniform_(0.5, 1.5)

        def forward(self, x):
            h = self.p1(self.bn1(self.r1(self.c1(x))))
            h = self.p2(self.bn2(self.r2(self.c2(h))))
            return self.d2(self.r3(self.d1(h.flatten(1))))

    model = Pooled().eval()
    X = random_one_hot(4, 60, seed=4, layout="NCL")
    refs = dinucleotide_references(X, N_REFERENCES, 1, "NCL")
    assert captum_gap(model, X, refs, 1) < 1e-5
    expected = captum_dls(model, X, refs, 1)
    assert_close(ours(model, X, refs, 1, multiply_by_inputs=False), expected, FLOAT32)


@pytest.mark.parametrize("kind", ["basset", "crested"])
def test_captum_pooling_rule_breaks_after_a_relu_module_and_ours_does_not(kind):
    """On Basset- and CREsted-like models a ReLU module feeds each MaxPool1d module; there
    captum's own convergence delta is far from zero (its rule routes the gradient of the wrong
    tensor), while ours sums to the output difference and equals tangermeme's."""
    functional, modules, X, refs = _setup(kind)
    assert captum_gap(modules, X, refs, 1) > 1e-3
    attributions, delta = ours(functional, X, refs, 1, return_delta=True)
    assert_close(delta, np.zeros_like(delta), FLOAT32)
    assert_close(attributions, tangermeme_dls(modules, X, refs, 1), FLOAT32)


def test_captum_treats_functional_relus_as_linear():
    functional, modules, X, refs = _setup("bpnet")
    right = captum_dls(modules, X, refs, 0)
    assert relative(captum_dls(functional, X, refs, 0), right) > 1e-3
    assert_close(ours(functional, X, refs, 0, multiply_by_inputs=False), right, FLOAT32)


# --------------------------------------------------------------------------- Keras on torch
KERAS_ON_TORCH = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, keras
import models, seqattrib as sa
assert keras.config.backend() == "torch"
torch.set_num_threads(1)
worst = 0.0
for kind, length, weights in (
    ("bpnet", 64, models.bpnet_weights(filters=16, n_layers=4)),
    ("basset", 40, models.basset_weights(40)),
    ("crested", 120, models.crested_weights(filters=16)),
):
    for layout in ("NLC", "NCL"):
        km = models.keras_model(kind, weights, length, layout)
        assert isinstance(km, torch.nn.Module) and sa.get_backend(km).name == "torch"
        tm = models.torch_model(kind, weights, layout)
        X = models.random_one_hot(3, length, seed=5, layout=layout)
        a, delta = sa.deep_lift_shap(km, X, target=[0, 1], n_baselines=4, return_delta=True)
        b = sa.deep_lift_shap(tm, X, target=[0, 1], n_baselines=4)
        worst = max(worst, float(np.abs(a - b).max() / max(1.0, np.abs(b).max())),
                    float(np.abs(delta).max()))
print(worst)
"""


def test_keras_on_the_torch_backend_equals_torch():
    env = dict(os.environ, KERAS_BACKEND="torch")
    code = KERAS_ON_TORCH.format(tests=str(Path(__file__).parents[1]))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) <= FLOAT32
