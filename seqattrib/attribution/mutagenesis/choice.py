"""Choosing the fast ISM path: read the model's graph once per model, shape and device, check
the plan against the model itself in every call, and fall back to the exact path with one
warning naming the reason."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._errors import SeqAttribWarning
from ...backends import WindowedBackend
from ...backends.local_graph import GraphUnsupported, NothingLocal
from ...engine import SequenceSource
from ...engine.outputs import Head
from .fast import fast_forward
from .plan import FastPlan, plan_windows, predicted_costs

#: ``fast="auto"`` takes the fast path when its predicted cost per mutant is at most this
#: fraction of the exact path's (``fast.predicted_costs``: multiply-adds of every layer plus
#: the element passes that building windows, joining them to their context and splicing them
#: into full values cost, for the windows of each layer against its full length). The margin
#: covers the cost model's error on the benchmark models (see the documentation's
#: performance page).
AUTO_MAX_COST_RATIO = 0.75

_PLANS: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def checked_plan(
    be: WindowedBackend,
    model: Any,
    source: SequenceSource,
    head: Head,
    device_key: str,
    requested: bool,
) -> FastPlan | None:
    """The fast-ISM plan (cached per model, shape and device), checked in every call against
    the model itself on a batch of mutants, so that a model changed since the plan was made
    (a swapped head, a new attribute value) or another ``output_fn`` can never reuse it."""
    length_axis = 1 if source.alphabet_axis == -1 else 2
    row_shape = tuple(source.row_shape)

    def check(plan: FastPlan) -> float:
        return _check_fast(be, model, plan, source, head, length_axis)

    with be.transfers.paused():  # the check is not the job's work
        return fast_plan(
            be,
            model,
            row_shape,  # type: ignore[arg-type]
            length_axis,
            device_key,
            check,
            requested=requested,
            output_fn=head.output_fn,
        )


#: Sequences of the check batch, and its mutated positions: two at each end (windows reach
#: past the ends there) and three in the middle (three consecutive positions meet every
#: offset of a stride-3 pooling window): 7 mutants and the reference, through both paths.
_CHECK_SEQUENCES = 1


def _check_fast(
    be: WindowedBackend,
    model: Any,
    plan: FastPlan,
    source: SequenceSource,
    head: Head,
    length_axis: int,
) -> float:
    """How far the fast path's ISM scores are from the exact path's on a check batch, as a
    fraction of the allowed float32 rounding: a value above 1 means the plan is wrong.

    Allowed: 1e-3 of the largest exact score plus 1e-5 of the largest output (float32
    rounding of outputs that are large next to the scores; the fast path sums in a different
    order). A wrong plan moves scores by a fraction of their size, far above that.
    """
    L = source.length
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(_CHECK_SEQUENCES, L))
    nlc = np.eye(4, dtype=np.float32)[codes]
    x = nlc if length_axis == 1 else np.ascontiguousarray(nlc.transpose(0, 2, 1))
    middle = L // 2
    spots = np.unique(np.clip([0, 1, middle, middle + 1, middle + 2, L - 2, L - 1], 0, L - 1))
    seq = np.repeat(np.arange(_CHECK_SEQUENCES), len(spots))
    position = np.tile(spots, _CHECK_SEQUENCES)
    base = (codes[seq, position] + 1 + np.arange(len(seq)) % 3) % 4
    mutants = nlc[seq].copy()
    mutants[np.arange(len(seq)), position] = np.eye(4, dtype=np.float32)[base]
    if length_axis == 2:
        mutants = np.ascontiguousarray(mutants.transpose(0, 2, 1))
    forward = fast_forward(be, plan)
    *kept, raw = forward.reference(be.asarray(x))
    fast_reference = be.to_numpy(be.outputs(raw, head))
    fast_mutants = be.to_numpy(
        forward.mutant_outputs(
            kept,
            be.asarray(seq, "int64"),
            be.asarray(position, "int64"),
            be.asarray(base, "int64"),
            lambda raw: be.outputs(raw, head),
        )
    )
    exact_reference = be.to_numpy(be.forward(model, be.asarray(x), head))
    exact_mutants = be.to_numpy(be.forward(model, be.asarray(mutants), head))
    exact = exact_mutants - exact_reference[seq]
    fast = fast_mutants - fast_reference[seq]
    size = float(np.max(np.abs(np.concatenate([exact_reference, exact_mutants]))))
    allowed = 1e-3 * float(np.max(np.abs(exact))) + 1e-5 * size + 1e-30
    error = max(
        float(np.max(np.abs(fast - exact))),
        float(np.max(np.abs(fast_reference - exact_reference))) / 10,  # 1e-4 of the outputs
    )
    return error / allowed


@dataclass
class _Refusal:
    reason: str
    quiet_in_auto: bool  # nothing local to reuse: "auto" says nothing
    warned: bool = False


def fast_plan(
    backend: WindowedBackend,
    model: Any,
    row_shape: tuple[int, int],
    length_axis: int,
    device_key: str,
    check: Callable[[FastPlan], float],
    *,
    requested: bool,
    output_fn: Callable[[Any], Any] | None = None,
) -> FastPlan | None:
    """The fast-ISM plan of ``model`` for inputs of ``row_shape``, or None.

    The plan (the read graph and its compiled passes) is cached per model, shape and device,
    but ``check(plan)`` runs in every call: it compares the fast path with the model itself
    on a batch of mutants and returns the error as a fraction of the allowed rounding (above 1:
    wrong). A cached plan that fails (the model changed since it was read) is read again once;
    a plan that still fails, or a model that cannot be read, is refused. A refusal warns once
    per model, shape and device: under ``fast=True`` (``requested``) always, under ``"auto"``
    unless the model simply has no local layers to reuse.
    """
    try:
        per_model = _PLANS.setdefault(model, {})
    except TypeError:
        per_model = {}
    key = (row_shape, length_axis, device_key)
    entry = per_model.get(key)
    if isinstance(entry, FastPlan):
        if _passes(entry, check):
            return entry
        entry = None  # the model changed since its graph was read: read it again
    if entry is None:
        entry = per_model[key] = _read(backend, model, row_shape, length_axis, check, output_fn)
    if isinstance(entry, FastPlan):
        return entry
    if not entry.warned and (requested or not entry.quiet_in_auto):
        entry.warned = True
        warnings.warn(
            f"fast ISM is not available for this model: {entry.reason}. Using the exact path "
            "(every mutant through the whole model); pass fast=False to silence this.",
            SeqAttribWarning,
            stacklevel=5,
        )
    return None


def _passes(plan: FastPlan, check: Callable[[FastPlan], float]) -> bool:
    try:
        return check(plan) <= 1.0
    except Exception:  # noqa: BLE001 - a plan that cannot even run is not used
        return False


def _read(
    backend: WindowedBackend,
    model: Any,
    row_shape: tuple[int, int],
    length_axis: int,
    check: Callable[[FastPlan], float],
    output_fn: Callable[[Any], Any] | None,
) -> FastPlan | _Refusal:
    """Read the model's graph, plan its windows and check the plan; or say why not."""
    try:
        graph = backend.local_graph(model, row_shape, length_axis, output_fn)
        plan = plan_windows(graph, row_shape[length_axis - 1])
        error = check(plan)
    except NothingLocal as exc:
        return _Refusal(str(exc), quiet_in_auto=True)
    except GraphUnsupported as exc:
        return _Refusal(str(exc), quiet_in_auto=False)
    except Exception as exc:  # noqa: BLE001 - a reader's or a layer's failure: never fatal
        return _Refusal(
            f"reading its graph failed ({type(exc).__name__}: {exc})", quiet_in_auto=False
        )
    if not error <= 1.0:
        return _Refusal(
            "the fast path did not reproduce the model's ISM scores on a check batch "
            f"({error:.1f}x the float32 rounding allowed)",
            quiet_in_auto=False,
        )
    # the costs of passes as this backend runs them (mutants per pass)
    plan.costs = predicted_costs(plan, fast_forward(backend, plan).rows_per_pass())
    return plan


def clear_plans() -> None:
    """Forget every cached fast-ISM plan."""
    _PLANS.clear()
