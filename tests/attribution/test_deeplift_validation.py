"""deep_lift_shap on trained models with planted motifs.

- The simdna 3-task Keras CNN of ``../shared/data/cases/simdna_3task`` (rebuilt in torch and
  Keras 3 from the same h5 weights; skipped where the cases folder is absent): the top projected
  DeepSHAP score of tasks 1 (GATA) and 2 (TAL1) falls inside the planted motif of at least
  95 % of all positive test sequences, the contributions sum to the output difference, and
  torch and Keras agree.
- The packaged demo model: TF-MoDISco (modisco-lite) on DeepSHAP hypothetical scores, exported
  unchanged by ``export_modisco``, recovers each task's planted motif.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FLOAT32, assert_close

import seqattrib as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

import simdna_case as sv  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def simdna() -> tuple[Any, Any, sv.SimdnaCases]:
    folder = sv.simdna_dir()
    if folder is None:
        pytest.skip(sv.missing_reason())
    pytest.importorskip("torch")  # before TensorFlow
    pytest.importorskip("keras")
    torch_model, keras_model = sv.build_models(folder)
    return torch_model, keras_model, sv.load_cases(folder, split="test")


@pytest.mark.parametrize("task", sorted(sv.TASK_MOTIFS))
def test_simdna_top_deepshap_score_lies_in_the_planted_motif(task, simdna):
    torch_model, keras_model, cases = simdna
    positives = cases.positives(task)
    X = np.ascontiguousarray(positives.X.transpose(0, 2, 1))  # the torch model reads (N, 4, L)
    attributions, delta = sa.deep_lift_shap(torch_model, X, target=task, return_delta=True)
    attributions = attributions.transpose(0, 2, 1)
    scores = sa.project(attributions, positives.X)
    assert sv.motif_hit_fraction(scores, positives.motifs, sv.TASK_MOTIFS[task]) >= 0.95
    assert_close(delta, np.zeros_like(delta), FLOAT32)
    keras_attributions = sa.deep_lift_shap(keras_model, positives.X[:40], target=task)
    assert_close(keras_attributions, attributions[:40], FLOAT32)


def _reverse_complement(seq: str) -> str:
    return seq[::-1].translate(str.maketrans("ACGT", "TGCA"))


def _planted_consensus(data: dict[str, Any], k: int) -> str:
    """The majority base at each position of the motif planted for task ``k``."""
    positives = np.flatnonzero(data["labels"][:, k] > 0)
    sites = [
        data["sequences"][i][data["motif_starts"][i, k] : data["motif_ends"][i, k]]
        for i in positives
    ]
    counts = np.zeros((len(sites[0]), 4))
    for site in sites:
        counts[np.arange(len(site)), ["ACGT".index(c) for c in site]] += 1
    return "".join("ACGT"[i] for i in counts.argmax(axis=1))


def _pattern_cores(path: Path) -> list[str]:
    """Each positive pattern's consensus, trimmed to positions with at least 30 % of the
    largest summed |contribution|."""
    import h5py

    cores = []
    with h5py.File(path) as f:
        for pattern in f["pos_patterns"].values():
            contrib = pattern["contrib_scores"][:]
            weight = np.abs(contrib).sum(axis=1)
            kept = np.flatnonzero(weight >= 0.3 * weight.max())
            window = contrib[kept.min() : kept.max() + 1]
            cores.append("".join("ACGT"[i] for i in window.argmax(axis=1)))
    return cores


def test_modisco_recovers_the_demo_motifs_from_deepshap_tracks(tmp_path):
    from seqattrib import demo
    from seqattrib.io import export_modisco

    if shutil.which("modisco") is None:
        pytest.skip("modisco-lite is not installed (pip install modisco-lite)")
    data = demo.load_data()
    for k, task in enumerate(demo.TASKS):
        positives = np.flatnonzero(data["labels"][:, k] > 0)[:150]
        X = sa.one_hot([data["sequences"][i] for i in positives], layout="NCL", dtype=np.int8)
        tracks = sa.deep_lift_shap(
            demo.torch_model(), X, target=k, multiply_by_inputs=False, out=tmp_path / f"{task}.h5"
        )
        export_modisco(tracks, tmp_path, class_names=[task])
        result = tmp_path / f"{task}_modisco.h5"
        subprocess.run(
            ["modisco", "motifs", "-s", str(tmp_path / f"{task}_ohe.npz")]
            + ["-a", str(tmp_path / f"{task}_attr.npz"), "-n", "2000", "-w", "200"]
            + ["-o", str(result)],
            check=True,
            capture_output=True,
            timeout=900,
        )
        planted = _planted_consensus(data, k)
        kmers = {planted[i : i + 6] for i in range(len(planted) - 5)}
        cores = _pattern_cores(result)
        found = [
            core
            for core in cores
            if any(kmer in core or kmer in _reverse_complement(core) for kmer in kmers)
        ]
        assert found, f"{task}: planted {planted}, TF-MoDISco found {cores}"
