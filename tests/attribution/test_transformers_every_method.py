"""Every method on the field's transformer models: enformer-pytorch's Enformer (a small
configuration, random weights) and a hand-written Enformer-like transformer.

Both give (N, bins, tracks); the output function sums each track over the central bins. Each
method runs with the shapes of its contract and finite values, gives the same rows at batch
size 1 and 3, and K targets from one pass equal K single-target calls. Independent truths:
saliency against torch's autograd on the model itself, ISM and variant effects against the
model run on the mutated windows, and DeepSHAP's summation against the model's own outputs
on the input and on the references passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import transformer_models as tm
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa

pytestmark = pytest.mark.filterwarnings("ignore:fast ISM is not available")


@dataclass(frozen=True)
class Case:
    model: Any
    length: int
    layout: str
    output_fn: Callable[[Any], Any]
    n_tracks: int

    def sequences(self, n: int, seed: int = 1) -> np.ndarray:
        return random_one_hot(n, self.length, seed=seed, layout=self.layout)

    def predict(self, X: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.output_fn(self.model(torch.from_numpy(X))).numpy()


def _enformer() -> Case:
    model = tm.enformer_small(0)
    output_fn = tm.central_bins(tm.ENFORMER_BINS, 4, head="human")
    return Case(model, tm.ENFORMER_LENGTH, "NLC", output_fn, tm.ENFORMER_TRACKS)


def _toy() -> Case:
    model = tm.toy_transformer(0)
    output_fn = tm.central_bins(tm.TOY_LENGTH // 4, 8)
    return Case(model, tm.TOY_LENGTH, "NCL", output_fn, tm.TOY_TRACKS)


@pytest.fixture(scope="module", params=["enformer", "toy"])
def case(request: pytest.FixtureRequest) -> Case:
    return {"enformer": _enformer, "toy": _toy}[request.param]()


def _window(case: Case) -> tuple[int, int]:
    mid = case.length // 2
    return mid - 6, mid + 6


METHODS: dict[str, Callable[..., Any]] = {
    "saliency": lambda c, X, **kw: sa.saliency(c.model, X, output_fn=c.output_fn, **kw),
    "integrated_gradients": lambda c, X, **kw: sa.integrated_gradients(
        c.model, X, output_fn=c.output_fn, n_steps=4, **kw
    ),
    "expected_integrated_gradients": lambda c, X, **kw: sa.expected_integrated_gradients(
        c.model, X, output_fn=c.output_fn, n_baselines=2, n_steps=2, **kw
    ),
    "ism": lambda c, X, **kw: sa.ism(c.model, X, output_fn=c.output_fn, positions=_window(c), **kw),
    "deep_lift_shap": lambda c, X, **kw: sa.deep_lift_shap(
        c.model, X, output_fn=c.output_fn, n_baselines=3, **kw
    ),
}


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_with_its_shapes(case: Case, method: str) -> None:
    X = case.sequences(3)
    result = METHODS[method](case, X, target=None, batch_size=4)
    assert result.shape == (3, case.n_tracks, *X.shape[1:]) and result.dtype == np.float32
    assert np.isfinite(result).all() and np.abs(result).max() > 0


@pytest.mark.parametrize("method", list(METHODS))
def test_batch_size_one_and_three_give_the_same_rows(case: Case, method: str) -> None:
    X = case.sequences(3)
    one = METHODS[method](case, X, target=[0, 2], batch_size=1)
    three = METHODS[method](case, X, target=[0, 2], batch_size=3)
    assert_close(one, three, FLOAT32)


@pytest.mark.parametrize("method", list(METHODS))
def test_k_targets_in_one_pass_equal_k_calls(case: Case, method: str) -> None:
    X = case.sequences(2)
    together = METHODS[method](case, X, target=[2, 0], batch_size=4)
    for k, target in enumerate([2, 0]):
        assert_close(together[:, k], METHODS[method](case, X, target=target, batch_size=4), FLOAT32)


def test_saliency_is_the_gradient_of_the_model(case: Case) -> None:
    X = case.sequences(3)
    x = torch.from_numpy(X).requires_grad_(True)
    case.output_fn(case.model(x))[:, 1].sum().backward()
    assert x.grad is not None
    assert_close(
        sa.saliency(case.model, X, target=1, output_fn=case.output_fn), x.grad.numpy(), FLOAT32
    )


def test_ism_is_the_model_on_each_mutant(case: Case) -> None:
    X = case.sequences(2)
    start, end = _window(case)
    scores = sa.ism(case.model, X, target=[0, 3], output_fn=case.output_fn, positions=(start, end))
    mutants, where = [], []
    for i in range(len(X)):
        for pos in range(start, end):
            for base in range(4):
                mutant = X[i].copy()
                if case.layout == "NCL":
                    mutant[:, pos] = np.eye(4, dtype=np.float32)[base]
                else:
                    mutant[pos] = np.eye(4, dtype=np.float32)[base]
                mutants.append(mutant)
                where.append((i, pos, base))
    effects = (
        case.predict(np.stack(mutants))[:, [0, 3]]
        - case.predict(X)[:, [0, 3]][[i for i, _, _ in where]]
    )
    expected = np.zeros(scores.shape, dtype=np.float32)
    for (i, pos, base), effect in zip(where, effects, strict=True):
        index = (i, slice(None), base, pos) if case.layout == "NCL" else (i, slice(None), pos, base)
        expected[index] = effect
    assert_close(scores, expected, FLOAT32)


def test_variant_effects_are_the_model_on_ref_and_alt_windows(case: Case) -> None:
    rng = np.random.default_rng(3)
    chrom = "".join("ACGT"[i] for i in rng.integers(0, 4, 3 * case.length))
    positions = [case.length, case.length + 17, 2 * case.length - 5]  # 1-based
    refs = [chrom[p - 1] for p in positions]
    alts = ["ACGT"[("ACGT".index(r) + 1) % 4] for r in refs]
    variants = {"chrom": ["c1"] * 3, "pos": positions, "ref": refs, "alt": alts}
    effects = sa.variant_effects(
        case.model, {"c1": chrom}, variants, length=case.length, target=[1, 2],
        output_fn=case.output_fn, score="delta", layout=case.layout, batch_size=3,
    )  # fmt: skip
    windows, alt_windows = [], []
    for p, alt in zip(positions, alts, strict=True):
        start = p - 1 - case.length // 2  # the REF base sits at length // 2 of the window
        text = chrom[start : start + case.length]
        windows.append(text)
        alt_windows.append(text[: case.length // 2] + alt + text[case.length // 2 + 1 :])
    ref = case.predict(sa.one_hot(windows, layout=case.layout))[:, [1, 2]]
    alt = case.predict(sa.one_hot(alt_windows, layout=case.layout))[:, [1, 2]]
    assert_close(effects.predictions["ref"], ref, FLOAT32)
    assert_close(effects.scores["delta"], alt - ref, FLOAT32)


def test_deep_lift_shap_sums_to_the_output_difference(case: Case) -> None:
    """Summation (completeness) of DeepSHAP over softmax attention, attention pooling,
    LayerNorm and GELU: |f(x) - mean_j f(r_j) - sum of contributions| <= 1e-3 |f(x) - mean_j
    f(r_j)| for at least 99% of 24 sequences and each target, with f(x) and f(r_j) from the
    model itself on the input and on the references passed in."""
    n, n_refs = 24, 4
    X = case.sequences(n, seed=5)
    rng = np.random.default_rng(7)
    nlc = X if case.layout == "NLC" else X.transpose(0, 2, 1)
    refs = np.stack([sa.dinucleotide_shuffle(x, n_refs, rng) for x in nlc])
    if case.layout == "NCL":
        refs = np.ascontiguousarray(refs.transpose(0, 1, 3, 2))
    targets = [0, 2]
    attributions, delta = sa.deep_lift_shap(
        case.model, X, target=targets, output_fn=case.output_fn, baselines=refs,
        return_delta=True, batch_size=16,
    )  # fmt: skip
    gap = case.predict(X)[:, targets] - case.predict(refs.reshape(n * n_refs, *X.shape[1:]))[
        :, targets
    ].reshape(n, n_refs, -1).mean(axis=1)
    total = attributions.reshape(n, len(targets), -1).sum(axis=-1)
    mine = np.abs(gap - total)
    scale = max(1.0, float(np.abs(case.predict(X)).max()))  # float32 rounding of the outputs
    assert np.abs(delta - (gap - total)).max() <= FLOAT32 * scale  # delta is the model's own gap
    assert np.mean(mine <= 1e-3 * np.abs(gap)) >= 0.99, (mine / np.abs(gap)).max()
