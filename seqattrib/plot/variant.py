"""Reference vs alternative attributions around one variant (matplotlib, imported when used)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from .._errors import deprecated_alias, parameter_error
from .._optional import import_optional
from .logo import _as_lc, plot_ism, plot_logo

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@deprecated_alias(path="out")
def plot_variant(
    ref: Any,
    alt: Any,
    *,
    offset: int = 0,
    start: int | None = None,
    end: int | None = None,
    kind: Literal["logo", "ism"] = "logo",
    alphabet_axis: int | None = None,
    title: str | None = None,
    out: str | os.PathLike[str] | None = None,
    coordinates: tuple[str, int] | None = None,
) -> Figure:
    """Draw the attributions of a variant's reference window above those of its alternative
    window, over the same stretch of genome on the left of the variant.

    Use this on the ``OUT.ref.h5`` and ``OUT.alt.h5`` tracks of ``variant_effects(...,
    attributions=...)`` (``seqattrib plot OUT.ref.h5 --alt OUT.alt.h5 --row i`` does it from
    the files): a variant that breaks a motif shows the motif in one panel and not the other.

    Parameters
    ----------
    ref, alt : array of shape (length, 4) or (4, length)
        Attributions (or ISM scores, ``kind="ism"``) of one variant's two windows.
    offset : int
        Where the alternative window starts relative to the reference window on the genome's
        left flank (its ``regions`` start minus the reference's: half the length change of an
        indel, 0 for a substitution).
    start, end : int, optional
        Positions of the reference window to draw (default: 20 on each side of the centre);
        the alternative panel draws ``start - offset .. end - offset``.
    kind : {"logo", "ism"}
        Logos (attributions x one-hot, or hypothetical scores) or ISM heatmaps.
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in the arrays passed, one of their last two: -1 for
        (length, 4), -2 for (4, length); inferred when exactly one of them has size 4.
    title : str, optional
    out : str or path, optional
        Save the figure there (format from the suffix).
    coordinates : (chrom, start), optional
        The reference window's place on the genome (0-based start); axes show 1-based genome
        positions, and the title gives the variant's 1-based position (its first reference
        base, at ``length // 2`` of the reference window, where ``variant_effects`` puts it).

    Returns
    -------
    matplotlib Figure
        Two Axes: reference on top, alternative below.
    """
    func = "plot_variant"
    if kind not in ("logo", "ism"):
        raise parameter_error(func, "kind", "'logo' or 'ism'", kind)
    ref_lc = _as_lc(ref, alphabet_axis, func, "ref")
    alt_lc = _as_lc(alt, alphabet_axis, func, "alt")
    length = ref_lc.shape[0]
    lo = max(0, length // 2 - 20) if start is None else start
    hi = min(length, length // 2 + 21) if end is None else end
    lo_alt, hi_alt = max(0, lo - offset), min(alt_lc.shape[0], hi - offset)
    import_optional("matplotlib")
    if out is not None:
        figure_mod = import_optional("matplotlib.figure")
        agg = import_optional("matplotlib.backends.backend_agg")
        fig = figure_mod.Figure(figsize=(min(max(6.0, 0.15 * (hi - lo)), 40.0), 5.0))
        agg.FigureCanvasAgg(fig)
    else:
        fig = import_optional("matplotlib.pyplot").figure(figsize=(8.0, 5.0))
    top, bottom = fig.subplots(2, 1)
    draw = plot_logo if kind == "logo" else plot_ism
    alt_coordinates = None if coordinates is None else (coordinates[0], coordinates[1] + offset)
    draw(ref_lc, start=lo, end=hi, ax=top, alphabet_axis=-1, coordinates=coordinates)
    draw(alt_lc, start=lo_alt, end=hi_alt, ax=bottom, alphabet_axis=-1, coordinates=alt_coordinates)
    heading = title
    if coordinates is not None:
        where = f"variant at {coordinates[0]}:{int(coordinates[1]) + length // 2 + 1:,}"
        heading = where if title is None else f"{title}, {where}"
    top.set_title("reference" if heading is None else f"{heading}\nreference")
    bottom.set_title("alternative")
    fig.tight_layout()
    if out is not None:
        fig.savefig(os.fspath(out), bbox_inches="tight", dpi=150)
    return fig
