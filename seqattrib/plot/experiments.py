"""Plots of in-silico experiments: spacing curves (``space``) and dependency maps
(``dependency_map``); matplotlib is imported by the functions that draw."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .logo import _as_lc

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ALPHABET = "ACGT"


def _figure(out: Any, figsize: tuple[float, float]) -> Figure:
    """A pyplot figure, or (saving only) a bare Agg figure: scripts need no display."""
    import_optional("matplotlib")
    if out is None:
        return import_optional("matplotlib.pyplot").figure(figsize=figsize)
    figure_mod = import_optional("matplotlib.figure")
    agg = import_optional("matplotlib.backends.backend_agg")
    fig = figure_mod.Figure(figsize=figsize)
    agg.FigureCanvasAgg(fig)
    return fig


def _spacing_effects(
    before: np.ndarray, after: np.ndarray, n_distances: int, target_names: Any, func: str
) -> np.ndarray:
    """``after - before`` as (n_backgrounds, n_orientations, n_distances, K)."""
    shapes = f"before {before.shape} and after {after.shape}"
    k = before.ndim
    plain = after.ndim == k + 2 and after.shape[:k] == before.shape
    plain = plain and after.shape[-1] == n_distances
    targeted = k >= 2 and after.ndim == k + 2 and after.shape[: k - 1] == before.shape[:-1]
    targeted = targeted and after.shape[-1] == before.shape[-1]
    targeted = targeted and after.shape[-2] == n_distances
    if target_names is not None:
        targeted = targeted and after.shape[-1] == len(target_names)
        plain = plain and len(target_names) == 1
    if not (plain or targeted):
        raise parameter_error(
            func,
            "after",
            "the second result of space (n_sequences[, n_shuffles], n_orientations, "
            "n_distances[, K]) for its first, before, and one entry per distance",
            f"{shapes} with {n_distances} distances",
            "Pass the two arrays space returned, and the distances it was given.",
            described=True,
        )
    if plain and targeted:
        raise parameter_error(
            func,
            "target_names",
            "given when the last axis could be the distances or the targets",
            f"None for {shapes}",
            "Pass one name per target (e.g. target_names=['target 0', 'target 1']).",
            described=True,
        )
    if plain:
        effects = after - before[..., None, None]
        effects = effects[..., None]
    else:
        effects = after - before[..., None, None, :]
    return effects.reshape(-1, *effects.shape[-3:])


def plot_spacing(
    before: Any,
    after: Any,
    *,
    distances: Any,
    orientations: Sequence[str] | None = None,
    target_names: Sequence[str] | None = None,
    errorbar: Literal["sem", "std"] = "sem",
    title: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> Figure:
    """Draw spacing curves: the effect of the motifs together against the distance between
    them, one line per orientation, one panel per target, with error bars over backgrounds.

    Use this on what ``seqattrib.space`` returns: the effect is ``after - before`` per
    background (and shuffle), and each point is its mean over the backgrounds; a peak at one
    distance (or a period of about 10 bp, one helical turn) is the spacing the model rewards.

    Parameters
    ----------
    before : array of shape (n_sequences[, n_shuffles][, K])
        The backgrounds' outputs (``space``'s first result).
    after : array of shape (n_sequences[, n_shuffles], n_orientations, n_distances[, K])
        The outputs with the motifs inserted (``space``'s second result).
    distances : array of shape (n_distances,)
        The x coordinate of each distance: the gaps given to ``space`` (for more than two
        motifs, one number per arrangement, e.g. the first gap).
    orientations : sequence of str, optional
        The label of each orientation (e.g. ``["++", "+-", "-+", "--"]``, as given to
        ``space``); default: numbered.
    target_names : sequence of str, optional
        The title of each target's panel; needed only when the shapes leave it open whether
        the last axis holds targets.
    errorbar : {"sem", "std"}
        The standard error of the mean over backgrounds, or their standard deviation.
    title : str, optional
    out : str or path, optional
        Save the figure there (format from the suffix).

    Returns
    -------
    matplotlib Figure
        One Axes per target; each holds one errorbar container (``ax.containers``) per
        orientation, its line labelled with the orientation.
    """
    func = "plot_spacing"
    if errorbar not in ("sem", "std"):
        raise parameter_error(func, "errorbar", "'sem' or 'std'", errorbar)
    x = np.asarray(distances, dtype=np.float64)
    if x.ndim != 1:
        raise parameter_error(
            func,
            "distances",
            "one number per distance (1-D)",
            f"an array of shape {x.shape}",
            "For several gaps per arrangement, pass one of them (e.g. distances[:, 0]).",
            described=True,
        )
    effects = _spacing_effects(
        np.asarray(before, np.float64), np.asarray(after, np.float64), len(x), target_names, func
    )
    n, n_orientations, _, n_targets = effects.shape
    labels = (
        [f"orientation {i}" for i in range(n_orientations)]
        if orientations is None
        else [str(o) for o in orientations]
    )
    if len(labels) != n_orientations:
        raise parameter_error(
            func,
            "orientations",
            f"one label per orientation ({n_orientations})",
            list(orientations or []),
        )
    names = (
        [f"target {k}" for k in range(n_targets)] if target_names is None else list(target_names)
    )
    mean = effects.mean(axis=0)
    spread = effects.std(axis=0, ddof=1) if n > 1 else np.zeros_like(mean)
    if errorbar == "sem":
        spread = spread / np.sqrt(n)
    fig = _figure(out, (4.5 * n_targets + 1.0, 3.5))
    axes = np.atleast_1d(fig.subplots(1, n_targets, squeeze=False, sharey=True)[0])
    for k, ax in enumerate(axes):
        for o, label in enumerate(labels):
            ax.errorbar(x, mean[o, :, k], yerr=spread[o, :, k], label=label, marker="o", ms=3)
        ax.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
        ax.set_xlabel("distance (bp)")
        ax.set_title(names[k])
        ax.legend(title="orientation", fontsize="small")
    axes[0].set_ylabel(f"effect (after - before), mean ± {errorbar} over {n}")
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    if out is not None:
        fig.savefig(os.fspath(out), bbox_inches="tight", dpi=150)
    return fig


def plot_dependency_map(
    dependency: Any,
    *,
    start: int = 0,
    sequence: Any = None,
    cmap: str = "Reds",
    title: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> Figure:
    """Draw a dependency map of one sequence and target as a heatmap.

    Use this on what ``seqattrib.dependency_map`` returns (one sequence and target of it):
    row i, column j is how much the effects of substitutions at position j change when
    position i is mutated. Blocks along the diagonal are motifs (their bases are read
    together); blocks off it are pairs of elements the model reads together. The diagonal is
    left blank.

    Parameters
    ----------
    dependency : array of shape (P, P)
        One map (a leading axis of size 1 is allowed).
    start : int
        The position of the map's first row and column in the sequence (``positions[0]`` of
        ``dependency_map``), for the axis labels.
    sequence : str or array of shape (P, 4) or (4, P), optional
        The bases of the mapped window, written along both axes (when P is at most 60).
    cmap : str
        A sequential matplotlib colormap.
    title : str, optional
    out : str or path, optional
        Save the figure there (format from the suffix).

    Returns
    -------
    matplotlib Figure
        One Axes whose image (``ax.images[0]``) is the (P, P) map with the diagonal masked,
        and a colorbar.
    """
    func = "plot_dependency_map"
    values = np.asarray(dependency, dtype=np.float64)
    while values.ndim > 2 and values.shape[0] == 1:
        values = values[0]
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise parameter_error(
            func,
            "dependency",
            "one map of shape (P, P)",
            f"an array of shape {np.shape(dependency)}",
            "Select one sequence and target, e.g. dependency[0] or dependency[0, k].",
            described=True,
        )
    p = values.shape[0]
    bases = None
    if sequence is not None:
        if isinstance(sequence, str):
            bases = sequence.upper()
        else:
            one_hot = _as_lc(sequence, None, func, "sequence")
            bases = "".join(
                ALPHABET[int(np.argmax(row))] if row.max() > 0 else "N" for row in one_hot
            )
        if len(bases) != p:
            raise parameter_error(
                func, "sequence", f"the {p} bases of the mapped window", f"{len(bases)} bases",
                "Pass the window's bases, e.g. X[0, start:end].", described=True,
            )  # fmt: skip
    masked = np.ma.masked_array(values, mask=np.eye(p, dtype=bool))
    size = min(max(4.0, 0.08 * p + 2.0), 16.0)
    fig = _figure(out, (size + 1.0, size))
    ax = fig.add_subplot()
    extent = (start - 0.5, start + p - 0.5, start + p - 0.5, start - 0.5)
    image = ax.imshow(masked, cmap=cmap, interpolation="nearest", extent=extent, vmin=0.0)
    ax.set_xlabel("position j (its substitutions' effects change)")
    ax.set_ylabel("position i (mutated)")
    if bases is not None and p <= 60:
        ticks = np.arange(start, start + p)
        ax.set_xticks(ticks, list(bases), fontsize="small")
        ax.set_yticks(ticks, list(bases), fontsize="small")
    fig.colorbar(image, ax=ax, label="dependency", fraction=0.046, pad=0.04)
    if title is not None:
        ax.set_title(title)
    if out is not None:
        fig.savefig(os.fspath(out), bbox_inches="tight", dpi=150)
    return fig
