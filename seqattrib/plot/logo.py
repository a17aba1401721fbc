"""Attribution logos and ISM heatmaps of one sequence (matplotlib, imported when first used)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import deprecated_alias, parameter_error
from .._optional import import_optional
from .._validation import check_alphabet_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ALPHABET = "ACGT"
#: Base colours of logomaker's "classic" scheme (also chrombpnet's): A green, C blue, G orange,
#: T red.
COLORS = {"A": (0.0, 0.5, 0.0), "C": (0.0, 0.0, 1.0), "G": (1.0, 0.65, 0.0), "T": (1.0, 0.0, 0.0)}
#: Fraction of a position's width a letter fills.
LETTER_WIDTH = 0.9


def _as_lc(values: Any, alphabet_axis: int | None, func: str, param: str) -> np.ndarray:
    """One sequence's scores as a float array of shape (length, 4)."""
    arr = np.asarray(values, dtype=np.float64)
    axis = check_alphabet_axis(alphabet_axis, arr.ndim, func)
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2:
        raise parameter_error(
            func,
            param,
            "the scores of one sequence, shape (length, 4) or (4, length)",
            f"shape {arr.shape}",
            "Select one sequence (and one target), e.g. attributions[i] or attributions[i, k].",
            described=True,
        )
    if axis is None:
        first, last = arr.shape[0] == 4, arr.shape[1] == 4
        if first == last:
            raise parameter_error(
                func,
                "alphabet_axis",
                "given unless exactly one axis has size 4",
                f"None for shape {arr.shape}",
                "Pass alphabet_axis=-2 for (4, length) or alphabet_axis=-1 for (length, 4).",
            )
        axis = -2 if first else -1
    if arr.shape[axis] != 4:
        raise parameter_error(
            func,
            "alphabet_axis",
            "an axis of size 4",
            f"{alphabet_axis!r} for shape {arr.shape}",
            described=True,
        )
    if not np.isfinite(arr).all():
        raise parameter_error(func, param, "finite", "NaN or infinite values", described=True)
    return arr.T if axis == -2 else arr


def _window(length: int, start: int | None, end: int | None, func: str) -> tuple[int, int]:
    lo = 0 if start is None else start
    hi = length if end is None else end
    if not (isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer))):
        raise parameter_error(func, "start", "int positions", (start, end), error=TypeError)
    if not 0 <= lo < hi <= length:
        raise parameter_error(
            func,
            "start",
            f"a window 0 <= start < end <= {length} (the sequence length)",
            f"start={start!r}, end={end!r}",
            described=True,
        )
    return int(lo), int(hi)


def _axes(ax: Axes | None, path: Any, figsize: tuple[float, float]) -> Axes:
    """The Axes to draw on: the given one, a pyplot figure, or (saving only) a bare Agg figure."""
    import_optional("matplotlib")
    if ax is not None:
        return ax
    if path is not None:
        # Saving without an Axes: no pyplot, so scripts need no display and loops leak no figures.
        figure_mod = import_optional("matplotlib.figure")
        agg = import_optional("matplotlib.backends.backend_agg")
        fig = figure_mod.Figure(figsize=figsize)
        agg.FigureCanvasAgg(fig)
        return fig.add_subplot()
    plt = import_optional("matplotlib.pyplot")
    _, new_ax = plt.subplots(figsize=figsize)
    return new_ax


def _position_axis(ax: Axes, coordinates: tuple[str, int] | None) -> None:
    """Label the x axis with positions in the sequence, or on a chromosome: ``coordinates`` =
    (chrom, 0-based genome position of the sequence's first base); ticks show 1-based genome
    positions, as genome browsers do."""
    if coordinates is None:
        ax.set_xlabel("position")
        return
    from matplotlib.ticker import FuncFormatter

    chrom, first = str(coordinates[0]), int(coordinates[1])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{int(round(x)) + first + 1:,}"))
    ax.set_xlabel(f"{chrom} (1-based)")


def _finish(ax: Axes, title: str | None, path: str | os.PathLike[str] | None) -> Axes:
    if title is not None:
        ax.set_title(title)
    if path is not None:
        root: Any = ax.figure.figure  # the top-level Figure, also for an Axes in a SubFigure
        root.savefig(os.fspath(path), bbox_inches="tight", dpi=150)
    return ax


def _letter_paths() -> dict[str, Any]:
    """Each letter's glyph as a path filling the unit square [0, 1] x [0, 1]."""
    import_optional("matplotlib")
    from matplotlib.font_manager import FontProperties
    from matplotlib.path import Path as MplPath
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    font = FontProperties(family="DejaVu Sans", weight="bold")
    paths = {}
    for letter in ALPHABET:
        glyph = TextPath((0, 0), letter, size=1, prop=font)
        box = glyph.get_extents()
        unit = (
            Affine2D()
            .translate(-box.x0, -box.y0)
            .scale(1 / box.width, 1 / box.height)
            .transform_path(glyph)
        )
        paths[letter] = MplPath(unit.vertices, unit.codes)
    return paths


@deprecated_alias(path="out")
def plot_logo(
    attributions: Any,
    *,
    start: int | None = None,
    end: int | None = None,
    ax: Axes | None = None,
    alphabet_axis: int | None = None,
    title: str | None = None,
    out: str | os.PathLike[str] | None = None,
    coordinates: tuple[str, int] | None = None,
) -> Axes:
    """Draw an attribution logo: at each position the letters, as tall as their scores.

    Use this on a window of one sequence (tens to a few hundred bases) to read motifs off
    attributions: pass attribution x one-hot for the observed bases only, or the hypothetical
    scores for what each base would contribute. Positive scores stack upwards from 0 (largest on
    top), negative ones downwards (largest magnitude at the bottom); each letter's height is the
    absolute score. Colours: A green, C blue, G orange, T red (logomaker/chrombpnet).

    Parameters
    ----------
    attributions : array of shape (length, 4) or (4, length)
        Scores of one sequence; a leading axis of size 1 is allowed.
    start, end : int, optional
        Draw positions ``start .. end - 1`` (default: all); the x axis shows these positions.
    ax : matplotlib Axes, optional
        Draw here; by default a new figure is made (without pyplot when ``out`` is given).
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in the array passed, one of its last two: -1 for (length, 4),
        -2 for (4, length); inferred when exactly one of them has size 4.
    title : str, optional
    out : str or path, optional
        Save the figure there (format from the suffix: ``.png``, ``.pdf``, ``.svg``).
    coordinates : (chrom, start), optional
        Where the sequence lies on the genome (``start``: 0-based position of its first base,
        as in BED); the x axis then shows 1-based chromosome positions.

    Returns
    -------
    matplotlib Axes
        Each letter is a ``PathPatch`` in ``ax.patches``, in data coordinates: position ``i``
        spans x in ``[i - 0.45, i + 0.45]`` and y exactly its stacked score interval.
    """
    func = "plot_logo"
    scores = _as_lc(attributions, alphabet_axis, func, "attributions")
    lo, hi = _window(scores.shape[0], start, end, func)
    window = scores[lo:hi]
    import_optional("matplotlib")
    from matplotlib.patches import PathPatch
    from matplotlib.transforms import Affine2D

    letters = _letter_paths()
    ax = _axes(ax, out, (min(max(6.0, 0.12 * (hi - lo)), 40.0), 2.5))
    bottom_min = top_max = 0.0
    for pos, row in zip(range(lo, hi), window, strict=True):
        up = down = 0.0
        for b in np.argsort(np.abs(row), kind="stable"):
            value = float(row[b])
            if value == 0.0:
                continue
            y0 = up if value > 0 else down + value
            if value > 0:
                up += value
            else:
                down += value
            place = Affine2D().scale(LETTER_WIDTH, abs(value)).translate(pos - LETTER_WIDTH / 2, y0)
            glyph = place.transform_path(letters[ALPHABET[b]])
            # add_artist, not add_patch: the limits are set below, without the costly
            # Bezier extents of every glyph
            ax.add_artist(PathPatch(glyph, facecolor=COLORS[ALPHABET[b]], edgecolor="none"))
        bottom_min, top_max = min(bottom_min, down), max(top_max, up)
    pad = 0.05 * ((top_max - bottom_min) or 1.0)
    ax.set_xlim(lo - 0.5, hi - 0.5)
    ax.set_ylim(bottom_min - pad, top_max + pad)
    ax.axhline(0.0, color="0.5", linewidth=0.5)
    _position_axis(ax, coordinates)
    ax.set_ylabel("attribution")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _finish(ax, title, out)


@deprecated_alias(path="out")
def plot_ism(
    scores: Any,
    *,
    start: int | None = None,
    end: int | None = None,
    ax: Axes | None = None,
    alphabet_axis: int | None = None,
    title: str | None = None,
    out: str | os.PathLike[str] | None = None,
    cmap: str = "RdBu_r",
    coordinates: tuple[str, int] | None = None,
) -> Axes:
    """Draw ISM scores of one sequence as a heatmap: bases A, C, G, T down, positions across.

    Use this for ``seqattrib.ism`` results: each cell is the change of the output when that
    position is mutated to that base (0 at the reference base). The colour scale is symmetric
    about 0 (diverging, red up, blue down by default).

    Parameters
    ----------
    scores : array of shape (length, 4) or (4, length)
        ISM scores of one sequence; a leading axis of size 1 is allowed.
    start, end : int, optional
        Draw positions ``start .. end - 1`` (default: all).
    ax : matplotlib Axes, optional
        Draw here; by default a new figure is made (without pyplot when ``out`` is given).
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in the array passed, one of its last two: -1 for (length, 4),
        -2 for (4, length); inferred when exactly one of them has size 4.
    title : str, optional
    out : str or path, optional
        Save the figure there (format from the suffix).
    cmap : str
        A diverging matplotlib colormap.
    coordinates : (chrom, start), optional
        Where the sequence lies on the genome, as for ``plot_logo``.

    Returns
    -------
    matplotlib Axes
        The heatmap is ``ax.images[0]``, an array of shape (4, end - start).
    """
    func = "plot_ism"
    values = _as_lc(scores, alphabet_axis, func, "scores")
    lo, hi = _window(values.shape[0], start, end, func)
    grid = values[lo:hi].T
    limit = float(np.max(np.abs(grid))) or 1.0
    ax = _axes(ax, out, (min(max(6.0, 0.12 * (hi - lo)), 40.0), 2.0))
    image = ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        vmin=-limit,
        vmax=limit,
        extent=(lo - 0.5, hi - 0.5, 3.5, -0.5),
    )
    ax.set_yticks(range(4), list(ALPHABET))
    _position_axis(ax, coordinates)
    ax.figure.colorbar(image, ax=ax, label="ISM score", fraction=0.05, pad=0.01)
    return _finish(ax, title, out)
