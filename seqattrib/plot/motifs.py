"""A seqlet beside the motif it was named after (matplotlib, imported when first used)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .logo import _as_lc, _finish, _window, plot_logo

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def information(pwm: np.ndarray) -> np.ndarray:
    """Each letter's height in bits: ``p * (2 + sum_b p_b log2 p_b)`` per position."""
    p = np.clip(np.asarray(pwm, dtype=np.float64), 0, None)
    p = p / np.maximum(p.sum(axis=1, keepdims=True), 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.nansum(np.where(p > 0, p * np.log2(p), 0.0), axis=1)
    return p * (2.0 - entropy)[:, None]


def plot_seqlet(
    attributions: Any,
    motif: Any,
    *,
    start: int,
    end: int,
    offset: int = 0,
    strand: str = "+",
    flank: int = 5,
    name: str | None = None,
    alphabet_axis: int | None = None,
    out: str | os.PathLike[str] | None = None,
    coordinates: tuple[str, int] | None = None,
) -> Figure:
    """Draw a seqlet's contributions above the logo of its motif match, aligned.

    Use this to check a name that :func:`seqattrib.motifs.annotate` or
    :func:`seqattrib.motifs.motif_instances` gave: the top panel is the attribution logo of the
    sequence around the seqlet (the seqlet shaded), the bottom one the motif in bits, placed
    where the match aligns it (``offset`` and ``strand`` of the match; its reverse complement
    on ``"-"``).

    Parameters
    ----------
    attributions : array of shape (length, 4) or (4, length)
        The contributions of the seqlet's sequence (projected, or hypothetical).
    motif : array of shape (width, 4)
        The matched motif's probability matrix (e.g. ``read_motifs(path)[i].pwm``).
    start, end : int
        The seqlet, 0-based positions in the sequence (end excluded).
    offset : int
        Where the motif's first column lies relative to ``start`` (a match's ``offset``).
    strand : {"+", "-"}
        The match's strand.
    flank : int
        Positions drawn on each side of the seqlet.
    name : str, optional
        The motif's name, for the lower panel's title.
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in ``attributions``: -1 for (length, 4), -2 for (4, length);
        inferred when exactly one of them has size 4.
    out : str or path, optional
        Save the figure there.
    coordinates : (chrom, start), optional
        Where the sequence lies on the genome, for the x axis (as in :func:`plot_logo`).

    Returns
    -------
    matplotlib Figure
        Two Axes: the contributions, then the motif.
    """
    func = "plot_seqlet"
    scores = _as_lc(attributions, alphabet_axis, func, "attributions")
    lo, hi = _window(scores.shape[0], start, end, func)
    pwm = np.asarray(motif, dtype=np.float64)
    if pwm.ndim != 2 or pwm.shape[1] != 4 or not np.isfinite(pwm).all():
        raise parameter_error(
            func, "motif", "a finite matrix of shape (width, 4)", pwm, "Transpose a (4, width) one."
        )
    if strand not in ("+", "-"):
        raise parameter_error(func, "strand", "'+' or '-'", strand)
    if strand == "-":
        pwm = pwm[::-1, ::-1]
    first, last = max(0, lo - flank), min(scores.shape[0], hi + flank)
    first, last = min(first, lo + offset), max(last, lo + offset + len(pwm))
    first, last = max(0, first), min(scores.shape[0], last)
    bits = np.zeros_like(scores)
    at = lo + offset
    cut = slice(max(0, -at), min(len(pwm), scores.shape[0] - at))
    bits[max(0, at) : max(0, at) + cut.stop - cut.start] = information(pwm)[cut]
    width = min(max(6.0, 0.3 * (last - first)), 40.0)
    if out is not None:
        figure_mod = import_optional("matplotlib.figure")
        agg = import_optional("matplotlib.backends.backend_agg")
        figure = figure_mod.Figure(figsize=(width, 4.5))
        agg.FigureCanvasAgg(figure)
        top, bottom = figure.subplots(2, 1, sharex=True)
    else:
        plt = import_optional("matplotlib.pyplot")
        figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(width, 4.5))
    plot_logo(scores, start=first, end=last, ax=top, coordinates=coordinates)
    top.axvspan(lo - 0.5, hi - 0.5, color="0.9", zorder=0)
    top.set_xlabel("")
    plot_logo(bits, start=first, end=last, ax=bottom, coordinates=coordinates)
    bottom.set_ylabel("bits")
    bottom.set_ylim(0, 2)
    label = f"{name} ({strand})" if name is not None else f"motif ({strand})"
    _finish(bottom, label, None)
    _finish(top, None, out)
    return figure
