"""Spacing curves and dependency maps: the artists drawn carry the numbers given."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LENGTH, make_model
from models import random_one_hot

import seqattrib as sa
from seqattrib.plot import plot_dependency_map, plot_spacing

pytest.importorskip("matplotlib")
pytest.importorskip("matplotlib.pyplot").switch_backend("Agg")


def _points(container):
    """The (x, y) of an errorbar container's line and the half-heights of its bars."""
    line, _, (bars,) = container
    x, y = (np.asarray(v, np.float64) for v in line.get_data())
    segments = [np.asarray(s) for s in bars.get_segments()]
    half = np.array([(s[1, 1] - s[0, 1]) / 2 for s in segments])
    return x, y, half


def test_spacing_curve_is_the_mean_effect_per_orientation_and_target_with_its_sem():
    rng = np.random.default_rng(0)
    n, n_orient, distances, k = 6, 3, np.array([0, 2, 5, 9]), 2
    before = rng.normal(size=(n, k))
    after = before[:, None, None, :] + rng.normal(size=(n, n_orient, len(distances), k))
    fig = plot_spacing(before, after, distances=distances, orientations=["++", "+-", "--"])
    axes = [ax for ax in fig.axes if ax.containers]
    assert len(axes) == k
    effect = after - before[:, None, None, :]
    for t, ax in enumerate(axes):
        assert ax.get_title() == f"target {t}"
        assert [c.get_label() for c in ax.containers] == ["++", "+-", "--"]
        for o, container in enumerate(ax.containers):
            x, y, half = _points(container)
            np.testing.assert_allclose(x, distances)
            np.testing.assert_allclose(y, effect[:, o, :, t].mean(axis=0), rtol=1e-12)
            sem = effect[:, o, :, t].std(axis=0, ddof=1) / np.sqrt(n)
            np.testing.assert_allclose(half, sem, rtol=1e-9)


def test_spacing_curve_pools_backgrounds_and_shuffles_without_a_target_axis(tmp_path):
    rng = np.random.default_rng(1)
    before = rng.normal(size=(4, 3))  # (n_sequences, n_shuffles): an int target
    after = rng.normal(size=(4, 3, 2, 5))
    path = tmp_path / "spacing.png"
    fig = plot_spacing(before, after, distances=range(5), errorbar="std", out=path)
    assert path.stat().st_size > 0
    (ax,) = [ax for ax in fig.axes if ax.containers]
    effect = (after - before[..., None, None]).reshape(12, 2, 5)
    for o, container in enumerate(ax.containers):
        _, y, half = _points(container)
        np.testing.assert_allclose(y, effect[:, o].mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(half, effect[:, o].std(axis=0, ddof=1), rtol=1e-9)


def test_spacing_plot_takes_what_space_returns(conv_weights):
    model = make_model("torch", "convnet", conv_weights, "NCL")
    X = random_one_hot(3, LENGTH, seed=5, layout="NCL")
    before, after = sa.space(model, X, ["GATA", "CAGCTG"], distances=[0, 3, 6], target=[0, 2])
    fig = plot_spacing(before, after, distances=[0, 3, 6], target_names=["a", "b"])
    axes = [ax for ax in fig.axes if ax.containers]
    assert [ax.get_title() for ax in axes] == ["a", "b"]
    _, y, _ = _points(axes[1].containers[0])
    expected = (after - before[:, None, None, :])[:, 0, :, 1].mean(axis=0)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_spacing_plot_refuses_shapes_it_cannot_read():
    before, after = np.zeros((4, 3)), np.zeros((4, 3, 3, 3))  # (n, s) and (n, s, O, D)?
    with pytest.raises(ValueError, match=r"'target_names'.*distances or the targets"):
        plot_spacing(before, after, distances=[0, 1, 2])
    assert plot_spacing(before, after, distances=[0, 1, 2], target_names=list("xyz")).axes
    with pytest.raises(ValueError, match=r"'after'.*with 4 distances"):
        plot_spacing(before, after, distances=[0, 1, 2, 3])


def test_dependency_map_is_drawn_with_the_diagonal_masked_and_bases_on_both_axes(tmp_path):
    rng = np.random.default_rng(2)
    dependency = rng.random((1, 8, 8))
    X = random_one_hot(1, 8, seed=3)
    path = tmp_path / "map.svg"
    fig = plot_dependency_map(dependency, start=10, sequence=X[0], title="map", out=path)
    assert path.stat().st_size > 0
    ax, colorbar = fig.axes
    assert colorbar.get_ylabel() == "dependency"
    image = ax.images[0].get_array()
    assert image.mask.tolist() == np.eye(8, dtype=bool).tolist()
    np.testing.assert_allclose(image.filled(-1), np.where(np.eye(8), -1, dependency[0]))
    bases = "".join("ACGT"[i] for i in X[0].argmax(-1))
    assert "".join(t.get_text() for t in ax.get_xticklabels()) == bases
    assert "".join(t.get_text() for t in ax.get_yticklabels()) == bases
    assert ax.get_xticks()[0] == 10 and ax.get_title() == "map"
    with pytest.raises(ValueError, match=r"'dependency'.*\(P, P\)"):
        plot_dependency_map(dependency[0, :, :5])
    with pytest.raises(ValueError, match=r"'sequence'.*8 bases"):
        plot_dependency_map(dependency, sequence="ACGT")
