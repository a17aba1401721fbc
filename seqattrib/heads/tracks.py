"""Reductions of (batch, bins, tracks) outputs (Enformer, Borzoi): tracks and bins summed or
averaged, a transform, a difference of two track sets; and genome coordinates as bins."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..engine.outputs import describe_output
from .base import NamedHead, mismatch, ops_for, replace, select

REDUCTIONS = ("sum", "mean")
TRANSFORMS = (None, "log1p", "log")
#: Output windows of published models: input length, bin size and output bins (the bins
#: cover the centre of the input window).
MODELS = {
    "enformer": {"window_length": 196_608, "bin_size": 128, "n_bins": 896},
    "borzoi": {"window_length": 524_288, "bin_size": 32, "n_bins": 6_144},
}


@dataclass(frozen=True)
class Tracks(NamedHead):
    """A reduction of a (batch, bins, tracks) output (see :func:`seqattrib.heads.tracks`).

    ``bins`` is canonical: ``("all",)``, ``("slice", start, stop, step)``, ``("index",
    indices)`` or ``("mask", flags)``.
    """

    track: tuple[int, ...]
    bins: tuple[Any, ...] = ("all",)
    reduce: str = "sum"
    transform: str | None = None
    minus: tuple[int, ...] | None = None
    output: int | str | None = None
    track_axis: int = -1
    strand_pair: tuple[int, ...] | None = None

    def __call__(self, raw: Any) -> Any:
        picked, ops, (on_tracks, off_tracks), _ = self._picked(raw)
        on = self._value(picked, ops, on_tracks)
        if self.minus is None:
            return on[:, None]
        off = self._value(picked, ops, off_tracks)
        return (on - off)[:, None]

    def positions(self, raw: Any) -> Any:
        """The chosen bins of the chosen tracks, the tracks summed or averaged (``reduce``)
        bin by bin, without the transform: (batch, n_bins)."""
        picked, ops, (on_tracks, _), bin_axis = self._picked(raw)
        chosen = ops.take(picked, on_tracks, 3 - bin_axis)
        reduce = ops.reduce_sum if self.reduce == "sum" else ops.reduce_mean
        return reduce(chosen, (3 - bin_axis,))

    def reoriented(self, raw: Any) -> Any:
        """The raw output of reverse-complemented windows turned back to the forward strand:
        the bin axis reversed (before the bins are chosen) and, with ``strand_pair``, each
        track replaced by its other strand's."""
        values = select(raw, self.output, "tracks")
        ops = ops_for(values, "tracks", "output")
        shape = ops.shape(values)
        if len(shape) != 3:
            return raw  # refused with its message when the head reads it
        track_axis = 2 if self.track_axis == -1 else 1
        flipped = ops.flip(values, [3 - track_axis])
        if self.strand_pair is not None:
            if len(self.strand_pair) != shape[track_axis]:
                raise mismatch(
                    "tracks",
                    "strand_pair",
                    f"one track index per track of the model ({shape[track_axis]})",
                    f"{len(self.strand_pair)} indices for a model returning {describe_output(raw)}",
                )
            pairs = _tracks(self.strand_pair, shape[track_axis], "strand_pair", "the model")
            flipped = ops.take(flipped, pairs, track_axis)
        return replace(raw, self.output, flipped)

    def _picked(self, raw: Any) -> tuple[Any, ModuleType, tuple[list[int], list[int]], int]:
        """The output restricted to the chosen bins, its operations, the track indices (on,
        off) and the bin axis."""
        values = select(raw, self.output, "tracks")
        ops = ops_for(values, "tracks", "output")
        shape = ops.shape(values)
        described = f"a model returning {describe_output(raw)}"
        if len(shape) != 3:
            raise mismatch(
                "tracks",
                "output",
                "an output of shape (batch, bins, tracks) (or (batch, tracks, bins) with "
                "track_axis=1)",
                f"output={self.output!r}, a tensor of shape {tuple(shape)}, from {described}",
                "Pick that output with output=; profile and counts outputs take heads.profile "
                "and heads.counts.",
            )
        track_axis = 2 if self.track_axis == -1 else 1
        bin_axis = 3 - track_axis
        n_bins, n_tracks = shape[bin_axis], shape[track_axis]
        if n_bins is None or n_tracks is None:
            raise mismatch(
                "tracks",
                "output",
                "an output whose numbers of bins and tracks are known when the model is traced",
                f"a tensor of shape {tuple(shape)} from {described}",
            )
        picked = _pick_bins(values, ops, self.bins, bin_axis, n_bins, described)
        on = _tracks(self.track, n_tracks, "track", described)
        off = [] if self.minus is None else _tracks(self.minus, n_tracks, "minus", described)
        return picked, ops, (on, off), bin_axis

    def _value(self, values: Any, ops: ModuleType, tracks: list[int]) -> Any:
        track_axis = 2 if self.track_axis == -1 else 1
        chosen = ops.take(values, tracks, track_axis)
        reduced = (ops.reduce_sum if self.reduce == "sum" else ops.reduce_mean)(chosen, (1, 2))
        if self.transform is None:
            return reduced
        return getattr(ops, self.transform)(reduced)


def _tracks(tracks: tuple[int, ...], n_tracks: int, param: str, described: str) -> list[int]:
    bad = [t for t in tracks if not -n_tracks <= t < n_tracks]
    if bad:
        raise mismatch(
            "tracks",
            param,
            f"track indices 0..{n_tracks - 1} (the model has {n_tracks} tracks)",
            f"{bad[0]} from {described}",
        )
    return [t % n_tracks for t in tracks]


def _pick_bins(
    values: Any, ops: ModuleType, bins: tuple[Any, ...], axis: int, n_bins: int, described: str
) -> Any:
    """``values`` restricted to the bins ``bins`` along ``axis`` (a contiguous range is a
    slice of the tensor, other selections a gather)."""
    kind = bins[0]
    if kind == "all":
        return values
    if kind == "slice":
        start, stop, step = bins[1:]
        outside = [v for v in (start, stop) if v is not None and not -n_bins <= v <= n_bins]
        if outside:
            raise mismatch(
                "tracks",
                "bins",
                f"bins within the model's {n_bins} output bins (0..{n_bins - 1})",
                f"slice({start}, {stop}, {step}) from {described}",
                "Map genome coordinates to bins with heads.bins_for.",
            )
        indices = list(range(*slice(start, stop, step).indices(n_bins)))
    elif kind == "index":
        bad = [i for i in bins[1] if not -n_bins <= i < n_bins]
        if bad:
            raise mismatch(
                "tracks",
                "bins",
                f"bin indices 0..{n_bins - 1} (the model has {n_bins} output bins)",
                f"{bad[0]} from {described}",
                "Map genome coordinates to bins with heads.bins_for.",
            )
        indices = [i % n_bins for i in bins[1]]
    else:
        if len(bins[1]) != n_bins:
            raise mismatch(
                "tracks",
                "bins",
                f"a boolean mask of the model's {n_bins} output bins",
                f"a mask of {len(bins[1])} bins from {described}",
            )
        indices = [i for i, keep in enumerate(bins[1]) if keep]
    if not indices:
        raise mismatch(
            "tracks",
            "bins",
            "a selection of at least one bin",
            f"{_bins_text(bins)}, which selects none of the {n_bins} bins of {described}",
        )
    if indices == list(range(indices[0], indices[-1] + 1)):
        return ops.narrow(values, axis, indices[0], indices[-1] + 1)
    return ops.take(values, indices, axis)


def _bins_text(bins: tuple[Any, ...]) -> str:
    if bins[0] == "slice":
        return f"slice({bins[1]}, {bins[2]}, {bins[3]})"
    if bins[0] == "mask":
        return "a mask with no bin set"
    return repr(list(bins[1]))


def canonical_bins(bins: Any) -> tuple[Any, ...]:
    """``bins`` as given to :func:`seqattrib.heads.tracks`, as a hashable tuple."""
    if bins is None:
        return ("all",)
    if isinstance(bins, slice):
        ends = (bins.start, bins.stop, bins.step)
        if any(v is not None and not _is_int(v) for v in ends) or bins.step == 0:
            raise parameter_error("seqattrib.heads.tracks", "bins", "a slice of ints", bins)
        return ("slice", *(None if v is None else int(v) for v in ends))
    if _is_int(bins):
        return ("index", (int(bins),))
    if isinstance(bins, tuple):  # (start, end) may mean a range or two bins: refused
        raise parameter_error(
            "seqattrib.heads.tracks",
            "bins",
            "a slice for a range of bins, or a list of bin indices",
            bins,
            f"Pass slice{bins} for a range, or {list(bins)} for these bins; map genome "
            "coordinates to bins with heads.bins_for.",
            error=TypeError,
        )
    array = np.asarray(bins)
    if array.ndim == 1 and array.dtype == bool:
        return ("mask", tuple(bool(b) for b in array))
    if array.ndim == 1 and array.size and np.issubdtype(array.dtype, np.integer):
        return ("index", tuple(int(i) for i in array))
    raise parameter_error(
        "seqattrib.heads.tracks",
        "bins",
        "None (all bins), a slice, a bin index, a list of bin indices or a boolean mask of "
        "the bins",
        bins,
        "Map genome coordinates to bins with heads.bins_for.",
        error=TypeError,
    )


def canonical_tracks(track: Any, track_names: Sequence[str] | None, param: str) -> tuple[int, ...]:
    """``track`` (an index, a name, or a list of them) as a tuple of indices."""
    items = list(track) if isinstance(track, (list, tuple, np.ndarray)) else [track]
    if not items:
        raise parameter_error(
            "seqattrib.heads.tracks", param, "a track or a non-empty list of tracks", track
        )
    names = None if track_names is None else [str(n) for n in track_names]
    out = []
    for item in items:
        if _is_int(item):
            out.append(int(item))
        elif isinstance(item, str) and names is not None:
            if item not in names:
                close = [n for n in names if item.lower() in n.lower()][:3]
                raise parameter_error(
                    "seqattrib.heads.tracks",
                    param,
                    f"a name among the {len(names)} track_names",
                    item,
                    f"Names that contain it: {close}." if close else "Check the spelling.",
                )
            out.append(names.index(item))
        else:
            raise parameter_error(
                "seqattrib.heads.tracks",
                param,
                "a track index, or a name with track_names= given",
                item,
                error=TypeError,
            )
    return tuple(out)


def _is_int(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, (bool, np.bool_))


def bins_for(
    start: int,
    end: int,
    *,
    window_start: int,
    model: str | None = None,
    window_length: int | None = None,
    bin_size: int | None = None,
    n_bins: int | None = None,
) -> slice:
    """The output bins that cover the genome interval [start, end) of one input window.

    Enformer and Borzoi predict bins that cover the centre of their input window: Enformer's
    896 bins of 128 bp cover the central 114,688 bp of its 196,608 bp input (320 bins' worth of
    sequence is cropped on each side); Borzoi's 6,144 bins of 32 bp cover the central
    196,608 bp of its 524,288 bp input.

    Parameters
    ----------
    start, end : int
        The interval in genome coordinates (0-based, end excluded), on the chromosome of the
        window.
    window_start : int
        The genome coordinate of the first base of the model's input window.
    model : {"enformer", "borzoi"}, optional
        Take ``window_length``, ``bin_size`` and ``n_bins`` of this model.
    window_length, bin_size, n_bins : int, optional
        The input length, the bin size and the number of output bins (given when ``model``
        is not); the bins cover the centre of the window.

    Returns
    -------
    slice
        The bins that overlap [start, end), for ``heads.tracks(bins=...)``.
    """
    func = "seqattrib.heads.bins_for"
    given = {"window_length": window_length, "bin_size": bin_size, "n_bins": n_bins}
    if model is not None:
        if model not in MODELS:
            raise parameter_error(func, "model", f"one of {sorted(MODELS)} or None", model)
        if any(v is not None for v in given.values()):
            raise parameter_error(
                func,
                "model",
                "None when window_length, bin_size or n_bins is given",
                model,
                "Pass model= alone, or the three sizes.",
            )
        given = dict(MODELS[model])
    for name, value in given.items():
        if value is None or not _is_int(value) or value < 1:
            raise parameter_error(
                func, name, "a positive int (or model='enformer' / 'borzoi')", value
            )
    length, size, count = given["window_length"], given["bin_size"], given["n_bins"]
    assert length is not None and size is not None and count is not None
    margin = length - size * count
    if margin < 0 or margin % 2:
        raise parameter_error(
            func,
            "n_bins",
            f"bins that fit centred in the window ({count} x {size} bp in {length} bp)",
            count,
        )
    first = window_start + margin // 2
    last = first + size * count
    if not (_is_int(start) and _is_int(end)) or not first <= start < end <= last:
        raise parameter_error(
            func,
            "start",
            f"an interval start < end inside [{first}, {last}), the part of the window at "
            f"{window_start} that the model's bins cover",
            (start, end),
            "Choose a window centred on the interval, or clip the interval to the covered part.",
        )
    return slice((start - first) // size, (end - first - 1) // size + 1)
