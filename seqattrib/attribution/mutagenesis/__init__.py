"""In-silico saturation mutagenesis: exact (every mutant through the whole model) and fast
(only the windows a mutation can change), on the same engine as the gradient methods."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..._errors import SeqAttribWarning, parameter_error
from ..._validation import check_alphabet_axis
from ...backends import WindowedBackend, capability
from ...engine import SequenceSource, as_source
from ..job import JobContext, run_job
from ..options import RunOptions, shared_docs
from .choice import AUTO_MAX_COST_RATIO, checked_plan
from .fast import FastForward, fast_forward
from .kernel import IsmKernel, count_rows, scan_window

__all__ = ["ism", "ism_to_hypothetical"]

_SCORES = ("delta", "log_ratio")


@dataclass(frozen=True)
class IsmMethod:
    """Every single-base substitution of a window of each sequence, scored by ``score``."""

    source: SequenceSource
    window: tuple[int, int]
    score: str
    fast: bool | str
    func: str = "ism"
    random_state: Any = 0
    forwards: list[FastForward] = field(default_factory=list)  # the fast passes it made

    def release(self) -> None:
        """Free what the fast passes kept between passes."""
        for forward in self.forwards:
            forward.release()

    def settings(self) -> dict[str, Any]:
        return {"positions": list(self.window), "score": self.score}

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        return {"attributions": (n_targets, *self.source.row_shape)}

    def kernel(self, context: JobContext) -> IsmKernel:
        be, fast = context.backend, self.fast
        forward = None
        # "auto" stays on the exact path on accelerators: there the many small windowed
        # operations are launch-bound (an H200 ran the windowed BPNet- and Basset-like scans
        # 2-3x slower than the exact ones at batch_size=128)
        if context.extras is not None:
            if fast is True:
                warnings.warn(
                    "fast ISM does not take the model's other inputs (args=); using the exact "
                    "path (every mutant through the whole model). Pass fast=False to silence "
                    "this.",
                    SeqAttribWarning,
                    stacklevel=4,
                )
        elif fast is True or (fast == "auto" and not be.on_accelerator()):
            windowed: WindowedBackend = capability(be, WindowedBackend, self.func)
            plan = checked_plan(
                windowed,
                context.model,
                self.source,
                context.head,
                str(context.device),
                fast is True,
            )
            if plan is not None and (fast is True or plan.cost_ratio <= AUTO_MAX_COST_RATIO):
                forward = fast_forward(windowed, plan)
                self.forwards.append(forward)
        return IsmKernel(
            be,
            context.model,
            head=context.head,
            targets=context.targets,
            source=context.source,
            window=self.window,
            rows_per_sequence=count_rows(context.source, self.window),
            score=self.score,
            func=self.func,
            fast=forward,
            extras=context.extras,
        )


@shared_docs
def ism(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    positions: tuple[int, int] | None = None,
    score: Literal["delta", "log_ratio"] = "delta",
    fast: bool | Literal["auto"] = "auto",
    alphabet_axis: int | None = None,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    regions: Any = None,
    shard: tuple[int, int] | None = None,
    args: Any = None,
) -> Any:
    """Saturation mutagenesis: the effect of every single-base substitution.

    Use ISM when you need the model's actual response to each mutation (variant effects,
    checking a motif found by gradients); it costs 3 forward passes per position, while
    gradient methods cost a few backward passes per sequence.

    Parameters
    ----------
    [[model]]
    [[X]]
    target : int, sequence of int or None
        Output index; a sequence of K indices (all from the same forward passes); None for all.
    [[output_fn]]
    positions : (start, end), optional
        Scan only this window (0-based, end exclusive); entries outside it are 0.
    score : {"delta", "log_ratio"}
        ``f(mutant) - f(reference)``, or ``log f(mutant) - log f(reference)`` for positive
        outputs (counts, probabilities).
    fast : {"auto", True, False}
        Reuse what a mutation cannot change. Every layer up to the first one that mixes all
        positions (a dense layer on the flattened sequence) is recomputed only over the window
        of positions the mutated base can reach, and a sum, mean or maximum over positions
        right after those layers is completed from the reference sequence's values outside the
        windows; the rest of the model runs as usual. Same scores as ``fast=False`` up to
        float32 rounding. The model's graph is read once per model, input shape and device
        (torch models through torch.fx with every argument but the input at its default, so
        wrappers that index a tuple output, ``if x is None`` branches and arithmetic on
        ``x.shape`` are read; Keras functional and Sequential models, nested models included,
        with extra inputs that the model fills from constants); layers that only outputs
        ``output_fn`` never reads need are skipped. Every call first checks the fast path
        against the model itself on 7 mutants. ``"auto"`` takes the fast path on a CPU when
        its cost model predicts at most 0.75 of the exact path's time per mutant (the windows'
        multiply-adds, the memory passes that build them, the framework calls per batch), and
        never on a GPU (where the small windowed operations are launch-bound); ``True`` takes
        it whenever the model can be read. A model that cannot (a layer that cannot be
        windowed, or a check batch the fast path does not reproduce) runs the exact path with
        one ``SeqAttribWarning`` naming the layer and what to change (under ``"auto"`` not for
        a model with no local layer at all). The documentation's fast ISM guide lists what is read.
    [[alphabet_axis]]
    batch_size : int or "auto"
        Mutants per device batch (mutants of many sequences share batches).
    [[max_cpu_sequences]]
    device : str or device, optional
        Where to run; default: where the model lives.
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the scores into this HDF5 tracks file (``seqattrib.io.read_tracks``) and
        return its path; a rerun with the same settings resumes it.
    [[overwrite]]
    [[regions]]
    [[shard]]
    [[args]]

    Returns
    -------
    ndarray of float32, shape (n_sequences, *X.shape[1:]) for an int target, else
    (n_sequences, K, *X.shape[1:]), in the layout of X. Entry (p, b) is the score of the mutant
    with base b at position p; it is exactly 0 at the reference base. At an N position all four
    bases are scored against the reference.
    """
    func = "ism"
    options = RunOptions.from_arguments(func, locals())
    if score not in _SCORES:
        raise parameter_error(func, "score", "'delta' or 'log_ratio'", score)
    if fast not in (True, False, "auto"):
        raise parameter_error(func, "fast", "True, False or 'auto'", fast)
    source = as_source(X, alphabet_axis, func)
    method = IsmMethod(source, scan_window(positions, source.length, func), score, fast)
    try:
        result, _ = run_job(method, model, source, options)
    finally:
        method.release()
    if isinstance(result, str):
        return result
    return result["attributions"]


def ism_to_hypothetical(scores: Any, *, alphabet_axis: int | None = None) -> np.ndarray:
    """Mean-centre ISM scores over the 4 bases at each position (hypothetical scores).

    This is the form TF-MoDISco takes for ISM (and what ``project`` expects for per-base
    tracks).

    Parameters
    ----------
    scores : array of shape (n_sequences, [K,] length, 4) or (n_sequences, [K,] 4, length)
    alphabet_axis : {None, -1, -2} or the same axis as a positive index
        The axis of the bases in ``scores``, one of its last two: -1 for (..., length, 4), -2
        for (..., 4, length); inferred when exactly one of them has size 4.

    Returns
    -------
    ndarray of float32, the shape of ``scores``
    """
    func = "ism_to_hypothetical"
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim not in (3, 4):
        raise parameter_error(
            func,
            "scores",
            "an array of shape (N, [K,] L, 4) or (N, [K,] 4, L)",
            f"shape {scores.shape}",
            described=True,
        )
    axis = check_alphabet_axis(alphabet_axis, scores.ndim, func)
    if axis is None:
        last, before = scores.shape[-1] == 4, scores.shape[-2] == 4
        if last == before:
            raise parameter_error(
                func,
                "alphabet_axis",
                "given (-1 or -2) when the layout is ambiguous",
                f"None for shape {scores.shape}",
            )
        axis = -1 if last else -2
    if scores.shape[axis] != 4:
        raise parameter_error(func, "alphabet_axis", "an axis of size 4", alphabet_axis)
    return scores - scores.mean(axis=axis, keepdims=True)
