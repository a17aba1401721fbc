"""Every gradient method, ISM and DeepSHAP on borzoi-pytorch's Borzoi (a small configuration
built from ``BorzoiConfig`` hyperparameters, random weights: nothing is downloaded).

borzoi-pytorch cannot share an environment with enformer-pytorch (their ``transformers`` pins
conflict), so the script runs in a cached virtual environment of its own (``borzoi_venv``) with
this checkout's seqattrib, and prints a JSON summary that the test asserts on. Borzoi's channel
counts are fixed by the package (512 to 1,920 channels, a 7,611-track human head); the test
keeps 4 tracks with the package's own ``set_track_subset`` and a 256-bp input (2 transformer
positions, 8 output bins of which the central 4 are returned). Its output is channels-first,
(N, tracks, bins); the output function sums each track over the central 2 bins. The weights
are drawn as for the other transformer test models (``transformer_models.reinitialise``):
Borzoi's own initialisation leaves the output almost constant.

Independent truths: saliency against torch's autograd on the model, ISM against the model on
each mutant, DeepSHAP's summation against the model's outputs on the input and the references
passed in (|f(x) - mean_j f(r_j) - sum of contributions| <= 1e-3 |f(x) - mean_j f(r_j)| for at
least 99% of 20 sequences and each target).
"""

from __future__ import annotations

import pytest
from borzoi_venv import run_script

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json
import warnings

import numpy as np
import torch

import seqattrib as sa
from borzoi_pytorch import Borzoi
from transformer_models import reinitialise

torch.set_num_threads(1)
warnings.simplefilter("ignore")
L, N_REFS, TARGETS = 256, 2, [0, 3]
torch.manual_seed(0)
model = Borzoi.from_hparams(
    dim=32, depth=1, heads=2, attn_dim_key=8, attn_dim_value=16, bins_to_return=4,
    dropout_rate=0.0, attn_dropout=0.0, pos_dropout=0.0,
)
model.set_track_subset([0, 1, 2, 3])
reinitialise(model, 0)
rng = np.random.default_rng(0)
model.eval()


def output_fn(out):
    return out[:, :, 1:3].sum(dim=-1)


def one_hot(n, seed):
    r = np.random.default_rng(seed)
    return np.ascontiguousarray(
        np.eye(4, dtype=np.float32)[r.integers(0, 4, (n, L))].transpose(0, 2, 1)
    )


def predict(X):
    with torch.no_grad():
        return np.concatenate(
            [output_fn(model(torch.from_numpy(X[i : i + 8]))).numpy() for i in range(0, len(X), 8)]
        )


def rel(a, b):
    b = np.asarray(b)
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


summary = {}
X = one_hot(3, 1)
summary["spread"] = float(predict(one_hot(16, 9)).std(axis=0).mean())
sal = sa.saliency(model, X, target=TARGETS, output_fn=output_fn, batch_size=8)
x = torch.from_numpy(X).requires_grad_(True)
output_fn(model(x))[:, TARGETS[1]].sum().backward()
summary["saliency"] = {"shape": list(sal.shape), "error_vs_autograd": rel(sal[:, 1], x.grad)}
ig = sa.integrated_gradients(
    model, X, target=TARGETS, output_fn=output_fn, n_steps=4, batch_size=8
)
summary["ig"] = {"shape": list(ig.shape), "finite": bool(np.isfinite(ig).all())}
eig = sa.expected_integrated_gradients(
    model, X[:2], target=TARGETS, output_fn=output_fn, n_baselines=2, n_steps=2, batch_size=8
)
summary["eig"] = {"shape": list(eig.shape), "finite": bool(np.isfinite(eig).all())}
start, end = 126, 130
scores = sa.ism(model, X[:2], target=TARGETS, output_fn=output_fn, positions=(start, end),
                batch_size=8)
mutants, where = [], []
for i in range(2):
    for pos in range(start, end):
        for base in range(4):
            m = X[i].copy()
            m[:, pos] = np.eye(4, dtype=np.float32)[base]
            mutants.append(m)
            where.append((i, base, pos))
effects = predict(np.stack(mutants))[:, TARGETS] - predict(X[:2])[:, TARGETS][[w[0] for w in where]]
expected = np.zeros_like(scores)
for (i, base, pos), effect in zip(where, effects):
    expected[i, :, base, pos] = effect
summary["ism"] = {"shape": list(scores.shape), "error_vs_mutants": rel(scores, expected),
                  "outside_window_zero": bool((scores[..., :start] == 0).all())}
n = 20
Xd = one_hot(n, 5)
refs = np.stack([sa.dinucleotide_shuffle(s.T, N_REFS, rng) for s in Xd]).transpose(0, 1, 3, 2)
refs = np.ascontiguousarray(refs)
attr, delta = sa.deep_lift_shap(model, Xd, target=TARGETS, output_fn=output_fn, baselines=refs,
                                return_delta=True, batch_size=8)
gap = predict(Xd)[:, TARGETS] - predict(refs.reshape(n * N_REFS, 4, L))[:, TARGETS].reshape(
    n, N_REFS, -1).mean(axis=1)
miss = np.abs(gap - attr.reshape(n, len(TARGETS), -1).sum(axis=-1))
summary["deep_lift_shap"] = {
    "shape": list(attr.shape),
    "delta_error": float(
        np.abs(delta - (gap - attr.reshape(n, len(TARGETS), -1).sum(axis=-1))).max()
        / max(1.0, np.abs(predict(Xd)).max())
    ),
    "fraction_summing": float(np.mean(miss <= 1e-3 * np.abs(gap))),
    "worst_relative_miss": float((miss / np.abs(gap)).max()),
}
print(json.dumps(summary))
"""


@pytest.fixture(scope="module")
def summary() -> dict:
    return run_script(SCRIPT, timeout=600)


def test_the_model_depends_on_the_sequence(summary: dict) -> None:
    assert summary["spread"] > 1e-2  # else every check below would pass on a constant model


def test_gradient_methods_run_and_saliency_is_the_gradient(summary: dict) -> None:
    assert summary["saliency"]["shape"] == [3, 2, 4, 256]
    assert summary["saliency"]["error_vs_autograd"] <= 1e-5
    assert summary["ig"] == {"shape": [3, 2, 4, 256], "finite": True}
    assert summary["eig"] == {"shape": [2, 2, 4, 256], "finite": True}


def test_ism_is_the_model_on_each_mutant(summary: dict) -> None:
    assert summary["ism"]["shape"] == [2, 2, 4, 256]
    assert summary["ism"]["error_vs_mutants"] <= 1e-5
    assert summary["ism"]["outside_window_zero"]


def test_deep_lift_shap_sums_to_the_output_difference(summary: dict) -> None:
    result = summary["deep_lift_shap"]
    assert result["shape"] == [20, 2, 4, 256]
    assert result["delta_error"] <= 1e-5  # relative to the outputs: float32 rounding
    assert result["fraction_summing"] >= 0.99, result
