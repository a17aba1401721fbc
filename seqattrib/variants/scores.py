"""The scores of a variant table, the views each window is predicted in, and the head that
gives the kernel the K targets and a positional output from one forward pass.

- ``delta``, ``log_ratio``, ``logfc`` and ``log_sum`` are taken on the host from the predictions
  (averaged over the views); ``jsd``, ``l2`` and ``log_l2`` compare the positional outputs of the
  reference and alternative windows on the device, one number per variant crossing to the host;
  ``abs_logfc_x_jsd`` is their product.
- A view is a window shifted along the genome (``shifts``) on the forward or the reverse strand
  (``strands="both"``: the window reverse-complemented on the device, its outputs turned back to
  the forward orientation where a named head knows their positions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..engine.outputs import Head, OutputShapeError, describe_output
from ..heads.base import NamedHead
from ..heads.profile import Profile
from ..heads.stack import Stack
from ..heads.tracks import Tracks

#: Every score, in the order of the table's columns.
SCORES = (
    "delta",
    "log_ratio",
    "logfc",
    "jsd",
    "abs_logfc_x_jsd",
    "log_sum",
    "l2",
    "log_l2",
)
#: Scores that compare the positional output (``positional=``) of the two windows.
POSITIONAL = {"jsd": "profile", "abs_logfc_x_jsd": "profile", "l2": "tracks", "log_l2": "tracks"}
#: Scores that need the log-mean-exp of the outputs over the views (counts averaged as counts).
COUNTS = ("logfc", "abs_logfc_x_jsd")
STRANDS = ("forward", "both")
#: The largest window shift, in bases.
MAX_SHIFT = 64


def check_scores(score: Any, func: str) -> tuple[str, ...]:
    names = (score,) if isinstance(score, str) else tuple(score) if score is not None else ()
    if not names or any(s not in SCORES for s in names) or len(set(names)) != len(names):
        raise parameter_error(
            func, "score", "one of " + ", ".join(repr(s) for s in SCORES) + " or a sequence", score
        )
    return tuple(s for s in SCORES if s in names)


def check_strands(strands: Any, func: str) -> str:
    if strands not in STRANDS:
        raise parameter_error(func, "strands", "'forward' or 'both'", strands)
    return str(strands)


def check_shifts(shifts: Any, func: str) -> tuple[int, ...]:
    items = (shifts,) if isinstance(shifts, (int, np.integer)) else shifts
    try:
        values = tuple(int(s) for s in items)
        ok = all(int(s) == s and not isinstance(s, bool) for s in items)
    except (TypeError, ValueError):
        values, ok = (), False
    if not ok or not values or len(set(values)) != len(values):
        raise parameter_error(
            func, "shifts", "a sequence of distinct ints such as (-1, 0, 1)", shifts
        )
    if max(abs(s) for s in values) > MAX_SHIFT:
        raise parameter_error(
            func,
            "shifts",
            f"shifts of at most {MAX_SHIFT} bases either way",
            shifts,
            "Shifts average out the model's sensitivity to the window's exact position; use a "
            "few bases, e.g. (-1, 0, 1).",
        )
    return values


def check_positional(positional: Any, scores: tuple[str, ...], func: str) -> NamedHead | None:
    """The positional output the scores compare: a profile head for ``jsd``, a tracks head for
    ``l2``; an int or str names the profile output (as ``heads.profile(output)``)."""
    kinds = {POSITIONAL[s] for s in scores if s in POSITIONAL}
    if len(kinds) > 1:
        raise parameter_error(
            func,
            "score",
            "profile scores (jsd, abs_logfc_x_jsd) or bins x tracks scores (l2, log_l2), not both",
            scores,
            "Score the profile and the tracks of a model in two calls.",
        )
    if positional is None and kinds == {"tracks"}:
        raise parameter_error(
            func,
            "profile",
            "heads.tracks(track, bins=...) for the scores 'l2' and 'log_l2'",
            None,
            "Name the tracks and bins whose per-bin differences are compared.",
        )
    if positional is None:
        return Profile(0) if kinds else None
    if isinstance(positional, (int, str)) and not isinstance(positional, bool):
        positional = Profile(positional)
    if not isinstance(positional, (Profile, Tracks)):
        raise parameter_error(
            func,
            "profile",
            "None, the profile output (an int or str), heads.profile(...) or heads.tracks(...)",
            positional,
            error=TypeError,
        )
    if not kinds:
        raise parameter_error(
            func,
            "profile",
            "None unless a score compares it ('jsd', 'abs_logfc_x_jsd', 'l2', 'log_l2')",
            positional,
            "Add the score that uses it, or leave profile out.",
        )
    want = Profile if kinds == {"profile"} else Tracks
    if not isinstance(positional, want):
        head = "heads.profile(...)" if want is Profile else "heads.tracks(...)"
        raise parameter_error(
            func,
            "profile",
            f"{head} for the scores {list(scores)}",
            positional,
        )
    return positional


# ----------------------------------------------------------------------------- views
@dataclass(frozen=True)
class Views:
    """How each window is predicted: ``shifts`` along the genome, on one or both strands.

    A window is read with ``margin`` extra genome bases on each side; the view of shift ``s``
    is its bases ``[margin - s, margin - s + length)``: the window moved ``s`` bases to the left
    on the genome (the sequence moved ``s`` bases to the right, as Basenji and Borzoi shift it,
    with genome bases where they pad).
    """

    shifts: tuple[int, ...] = (0,)
    strands: str = "forward"

    @property
    def margin(self) -> int:
        return max(abs(s) for s in self.shifts)

    @property
    def n(self) -> int:
        return len(self.shifts) * (2 if self.strands == "both" else 1)

    def settings(self) -> dict[str, Any]:
        return {"strands": self.strands, "shifts": list(self.shifts)}


# ----------------------------------------------------------------------------- the head
def reverse_values(head: Callable[[Any], Any], raw: Any) -> Any:
    """``head``'s values from the raw outputs of a reverse-complemented window, in the forward
    orientation where the head knows the positions of what it reads (a named head's
    ``reoriented``); another function's values as they are."""
    if isinstance(head, Stack):
        return Stack(tuple(_Reversed(h) for h in head.heads))(raw)
    reoriented = getattr(head, "reoriented", None)
    return head(raw if reoriented is None else reoriented(raw))


@dataclass(frozen=True)
class _Reversed:
    """A head applied to the re-oriented raw output of a reverse-complemented window."""

    head: Callable[[Any], Any]

    def __call__(self, raw: Any) -> Any:
        return reverse_values(self.head, raw)


@dataclass(frozen=True)
class ScoringHead:
    """The kernel's head: the K targets of ``output_fn`` and then, with ``positional``, its
    positional values (profile logits or per-bin values), (batch, K + P), in the forward
    orientation (``reverse``: the input windows are reverse-complemented)."""

    output_fn: Callable[[Any], Any] | None
    targets: tuple[int, ...]
    positional: NamedHead | None = None
    reverse: bool = False
    func: str = field(default="variant_effects", compare=False)

    def __call__(self, raw: Any) -> Any:
        fn = self.output_fn
        if self.reverse and fn is not None:
            fn = _Reversed(fn)
        values = Head(fn, self.func)(raw)
        ops = _ops(values)
        values = ops.take(values, list(self.targets), 1)
        if self.positional is None:
            return values
        selects = getattr(self.positional, "output", None) is not None
        if selects and not isinstance(raw, (tuple, list, dict)):
            raise parameter_error(
                self.func,
                "score",
                "scores the model's outputs can give",
                f"a score that compares profiles or bins of a model returning "
                f"{describe_output(raw)}",
                "jsd and abs_logfc_x_jsd need a profile output (profile=0 for a model that "
                "returns (profile, counts)); score a single-output model with 'delta', "
                "'log_ratio' or 'logfc'.",
                described=True,
                error=OutputShapeError,
            )
        source = self.positional.reoriented(raw) if self.reverse else raw  # type: ignore[attr-defined]
        vector = self.positional.positions(source)  # type: ignore[attr-defined]
        return ops.concat([values, ops.flatten(vector)], 1)


def _ops(x: Any) -> Any:
    from ..backends import tensor_backend

    backend = tensor_backend(x)
    assert backend is not None
    return backend.head_ops


# ----------------------------------------------------------------------------- device scores
def compare(ops: Any, alt: Any, ref: Any, scores: tuple[str, ...]) -> dict[str, Any]:
    """Positional scores of alt against ref vectors, (n, P) float64 each -> (n,) per score.

    ``jsd``: the Jensen-Shannon distance (base 2) of the softmax of the logits, as ChromBPNet's
    variant scorer computes it; ``l2``: ``sqrt(sum_b (alt_b - ref_b)^2)``; ``log_l2``: the same of
    ``log2(1 + x)`` (Borzoi's D2 and logD2).
    """
    out: dict[str, Any] = {}
    if "jsd" in scores or "abs_logfc_x_jsd" in scores:
        lp = alt - ops.logsumexp(alt, 1)[:, None]
        lq = ref - ops.logsumexp(ref, 1)[:, None]
        lm = ops.logsumexp(ops.stack([lp, lq], 0), 0) - math.log(2.0)
        p, q = ops.exp(lp), ops.exp(lq)
        divergence = ops.reduce_sum(p * (lp - lm) + q * (lq - lm), (1,)) * 0.5
        out["jsd"] = ops.sqrt(ops.maximum(divergence, 0.0) / math.log(2.0))
    if "l2" in scores:
        out["l2"] = ops.sqrt(ops.reduce_sum((alt - ref) * (alt - ref), (1,)))
    if "log_l2" in scores:
        diff = (ops.log1p(alt) - ops.log1p(ref)) / math.log(2.0)
        out["log_l2"] = ops.sqrt(ops.reduce_sum(diff * diff, (1,)))
    return out


# ----------------------------------------------------------------------------- host scores
def host_scores(
    ref: np.ndarray,
    alt: np.ndarray,
    scores: Sequence[str],
    counts: tuple[np.ndarray, np.ndarray] | None,
    compared: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The scores of a block: ``ref``, ``alt`` (n, K) mean predictions over the views;
    ``counts``: the log-mean-exp of the predictions over the views (ref, alt); ``compared``:
    the device's positional scores, (n,) each."""
    out: dict[str, np.ndarray] = {}
    k = ref.shape[1]
    r, a = ref.astype(np.float64), alt.astype(np.float64)
    if "delta" in scores:
        out["delta"] = (a - r).astype(np.float32)
    if "log_ratio" in scores:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.log(a) - np.log(r)
        out["log_ratio"] = np.where((alt > 0) & (ref > 0), ratio, np.nan).astype(np.float32)
    if counts is not None:
        logfc = (counts[1].astype(np.float64) - counts[0].astype(np.float64)) / math.log(2.0)
        if "logfc" in scores:
            out["logfc"] = logfc.astype(np.float32)
        if "abs_logfc_x_jsd" in scores:
            jsd = compared["jsd"].astype(np.float64)[:, None]
            out["abs_logfc_x_jsd"] = (np.abs(logfc) * jsd).astype(np.float32)
    if "jsd" in scores:
        out["jsd"] = np.repeat(compared["jsd"][:, None], k, axis=1).astype(np.float32)
    if "log_sum" in scores:
        with np.errstate(divide="ignore", invalid="ignore"):
            log_sum = np.log2(1.0 + a) - np.log2(1.0 + r)
        out["log_sum"] = np.where((alt > -1) & (ref > -1), log_sum, np.nan).astype(np.float32)
    for name in ("l2", "log_l2"):
        if name in scores:
            out[name] = np.repeat(compared[name][:, None], k, axis=1).astype(np.float32)
    return {s: out[s] for s in scores}
