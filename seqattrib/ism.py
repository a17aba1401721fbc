"""In-silico saturation mutagenesis on the engine (a forward-only kernel).

A row is one single-base mutant (sequence i, position p, base b). Mutants are made on the
device from the reference one-hot, rows of many sequences share each device batch, and each
mutant's score lands in its (p, b) slot of its sequence through a segment sum, so only the final
(K, L, 4) table of each sequence crosses to the host.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ._errors import parameter_error
from ._fast_ism import AUTO_MAX_COST_RATIO, FastForward, FastPlan, fast_forward, fast_plan
from ._pipeline import check_common, execute
from ._validation import SequenceSource, as_source
from .backends import Backend

Tensor = Any
_SCORES = ("delta", "log_ratio")


def _mutations(window_nlc: np.ndarray) -> np.ndarray:
    """Which (position, base) of a window to mutate: (n, W * 4) bool, position-major.

    Every base but the reference at a one-hot position; all four at an N or soft position.
    """
    one_hot = (window_nlc.max(axis=-1) == 1.0) & (window_nlc.sum(axis=-1) == 1.0)
    mask = np.where(one_hot[..., None], window_nlc == 0.0, True)
    return mask.reshape(len(window_nlc), -1)


class IsmKernel:
    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        output_fn: Callable[[Any], Any] | None,
        targets: Sequence[int],
        source: SequenceSource,
        window: tuple[int, int],
        rows_per_sequence: np.ndarray,
        score: str,
        func: str,
        fast: FastForward | None = None,
    ) -> None:
        self.backend, self.model, self.output_fn = backend, model, output_fn
        self.fast = fast
        self.source, self.window, self.score, self.func = source, window, score, func
        self.rows_per_sequence = rows_per_sequence
        self.length = source.length
        self.width = 4 * (window[1] - window[0])  # table width: at most 4 mutants per position
        self.n_targets = len(targets)
        self._targets = backend.asarray(np.asarray(targets), "int64")
        nlc = source.alphabet_axis == -1
        self._mask_shape = (-1, self.length, 1) if nlc else (-1, 1, self.length)
        self._base_shape = (-1, 1, 4) if nlc else (-1, 4, 1)

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        be = self.backend
        start, end = self.window
        mask = _mutations(self.source.to_nlc(x)[:, start:end])
        columns = np.where(mask, np.arange(self.width), self.width)
        columns.sort(axis=1)  # each sequence's mutants first, in (position, base) order
        columns[columns == self.width] = 0  # padding, never read
        x_device = be.asarray(x)
        kept: dict[str, Tensor] = {}
        if self.fast is not None:
            *values, raw = self.fast.reference(x_device)
            kept = {f"kept{i}": v for i, v in enumerate(values)}
            reference = be.outputs(raw, self.output_fn)
        else:
            reference = be.forward(self.model, x_device, self.output_fn)
        return {
            **kept,
            "x": x_device,
            "reference": be.take(reference, self._targets, axis=1),
            "position": be.asarray(start + columns // 4, "int64"),
            "base": be.asarray(columns % 4, "int64"),
        }

    def compute(
        self,
        payload: dict[str, Tensor],
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> dict[str, Tensor]:
        be = self.backend
        local_t = be.asarray(local, "int64")
        entry = be.asarray(local * self.width + row_in_sequence, "int64")
        position = be.take(be.reshape(payload["position"], (-1,)), entry)
        base = be.take(be.reshape(payload["base"], (-1,)), entry)
        if self.fast is not None:
            kept = [payload[f"kept{i}"] for i in range(len(self.fast.kept))]
            raw = self.fast.mutant_outputs(kept, local_t, position, base)
            outputs = be.take(be.outputs(raw, self.output_fn), self._targets, axis=1)
        else:
            x = be.take(payload["x"], local_t)
            at = be.reshape(be.one_hot(position, self.length), self._mask_shape)
            new = be.reshape(be.one_hot(base, 4), self._base_shape)
            mutants = x + at * (new - x)
            outputs = be.forward(self.model, mutants, self.output_fn)
            outputs = be.take(outputs, self._targets, axis=1)
        reference = be.take(payload["reference"], local_t)
        if self.score == "delta":
            scores = outputs - reference
        else:
            scores = be.log(outputs) - be.log(reference)
        slot = be.asarray(segment * (4 * self.length), "int64") + position * 4 + base
        table = be.segment_sum(scores, slot, n_segments * 4 * self.length)
        return {"attributions": be.reshape(table, (n_segments, 4 * self.length, self.n_targets))}

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        scores = block["attributions"]
        finite = np.isfinite(scores).reshape(len(scores), -1).all(axis=1)
        if not finite.all():
            bad = (first + np.flatnonzero(~finite))[:5].tolist()
            if self.score == "log_ratio":
                raise parameter_error(
                    self.func,
                    "score",
                    "'delta' unless every model output is positive",
                    f"'log_ratio' with non-positive outputs for sequences {bad}",
                    "Use score='delta', or an output_fn that returns positive values "
                    "(e.g. counts or probabilities).",
                    described=True,
                )
            raise parameter_error(
                self.func,
                "model",
                "a model with finite outputs",
                f"NaN or inf for sequences {bad}",
                "Check the model on these inputs.",
                described=True,
            )
        n = len(scores)
        nlc = scores.reshape(n, self.length, 4, self.n_targets).transpose(0, 3, 1, 2)
        return {"attributions": np.ascontiguousarray(self.source.from_nlc(nlc))}


def _fast_plan(
    be: Backend,
    model: Any,
    source: SequenceSource,
    output_fn: Callable[[Any], Any] | None,
    device_key: str,
    requested: bool,
) -> FastPlan | None:
    """The fast-ISM plan (cached per model, shape and device), checked in every call against
    the model itself on a batch of mutants, so that a model changed since the plan was made
    (a swapped head, a new attribute value) or another ``output_fn`` can never reuse it."""
    length_axis = 1 if source.alphabet_axis == -1 else 2
    row_shape = tuple(source.row_shape)

    def check(plan: FastPlan) -> float:
        return _check_fast(be, model, plan, source, output_fn, length_axis)

    counted = be.transfers.to_host, be.transfers.to_device  # the check is not the job's work
    try:
        return fast_plan(
            be,
            model,
            row_shape,  # type: ignore[arg-type]
            length_axis,
            device_key,
            check,
            requested=requested,
        )
    finally:
        be.transfers.to_host, be.transfers.to_device = counted


#: Sequences and mutated positions of the check batch (positions at both ends and inside).
_CHECK_SEQUENCES = 3


def _check_fast(
    be: Backend,
    model: Any,
    plan: FastPlan,
    source: SequenceSource,
    output_fn: Callable[[Any], Any] | None,
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
    spots = np.unique(np.clip([0, 1, 2, L // 3, L // 2, 2 * L // 3, L - 3, L - 2, L - 1], 0, L - 1))
    seq = np.repeat(np.arange(_CHECK_SEQUENCES), len(spots))
    position = np.tile(spots, _CHECK_SEQUENCES)
    base = (codes[seq, position] + 1 + np.arange(len(seq)) % 3) % 4
    mutants = nlc[seq].copy()
    mutants[np.arange(len(seq)), position] = np.eye(4, dtype=np.float32)[base]
    if length_axis == 2:
        mutants = np.ascontiguousarray(mutants.transpose(0, 2, 1))
    forward = fast_forward(be, plan)
    *kept, raw = forward.reference(be.asarray(x))
    fast_reference = be.to_numpy(be.outputs(raw, output_fn))
    fast_mutants = be.to_numpy(
        be.outputs(
            forward.mutant_outputs(
                kept,
                be.asarray(seq, "int64"),
                be.asarray(position, "int64"),
                be.asarray(base, "int64"),
            ),
            output_fn,
        )
    )
    exact_reference = be.to_numpy(be.forward(model, be.asarray(x), output_fn))
    exact_mutants = be.to_numpy(be.forward(model, be.asarray(mutants), output_fn))
    exact = exact_mutants - exact_reference[seq]
    fast = fast_mutants - fast_reference[seq]
    size = float(np.max(np.abs(np.concatenate([exact_reference, exact_mutants]))))
    allowed = 1e-3 * float(np.max(np.abs(exact))) + 1e-5 * size + 1e-30
    error = max(
        float(np.max(np.abs(fast - exact))),
        float(np.max(np.abs(fast_reference - exact_reference))) / 10,  # 1e-4 of the outputs
    )
    return error / allowed


def _window(positions: Any, length: int, func: str) -> tuple[int, int]:
    if positions is None:
        return 0, length
    ok = (
        isinstance(positions, (tuple, list))
        and len(positions) == 2
        and all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in positions)
    )
    if not ok or not 0 <= positions[0] < positions[1] <= length:
        raise parameter_error(
            func,
            "positions",
            f"None or a window (start, end) with 0 <= start < end <= {length} (the length of X)",
            positions,
            "Positions are 0-based and end is exclusive, as in Python slices.",
        )
    return int(positions[0]), int(positions[1])


def _count_rows(source: SequenceSource, window: tuple[int, int]) -> np.ndarray:
    """Mutants per sequence (3 per one-hot position, 4 per N or soft position); reads X once."""
    counts = np.empty(source.n_sequences, dtype=np.int64)
    step = max(1, 2**22 // (source.length * 4))
    for begin in range(0, source.n_sequences, step):
        chunk = source.to_nlc(source.read(begin, begin + step))[:, window[0] : window[1]]
        counts[begin : begin + len(chunk)] = _mutations(chunk).sum(axis=1)
    return counts


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
) -> Any:
    """Saturation mutagenesis: the effect of every single-base substitution.

    Use ISM when you need the model's actual response to each mutation (variant effects,
    checking a motif found by gradients); it costs 3 forward passes per position, while
    gradient methods cost a few backward passes per sequence.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
        Maps a batch in the layout of X to outputs (batch, K), or to what output_fn reduces.
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot sequences: numpy array, memmap or h5py dataset (read in pieces).
    target : int, sequence of int or None
        Output index; a sequence of K indices (all from the same forward passes); None for all.
    output_fn : callable, optional
        Framework-native function from the raw model output to a (batch, K) tensor.
    positions : (start, end), optional
        Scan only this window (0-based, end exclusive); entries outside it are 0.
    score : {"delta", "log_ratio"}
        ``f(mutant) - f(reference)``, or ``log f(mutant) - log f(reference)`` for positive
        outputs (counts, probabilities).
    fast : {"auto", True, False}
        Reuse what a mutation cannot change: each layer up to the first global one (dense,
        flatten, global pooling) is recomputed only inside the window of positions the mutated
        base can reach; the rest of the model runs as usual. Same scores as ``fast=False`` up
        to float32 rounding. ``"auto"`` uses it on a CPU when the model's structure makes it
        pay (the windows cost at most half of full passes through those layers), never on a
        GPU (where the small windowed operations are launch-bound); ``True`` whenever the model
        can be split. A model that cannot be split (an unsupported layer, or a check batch the
        fast path does not reproduce) runs the exact path with one ``SeqAttribWarning`` naming
        the reason (under ``"auto"`` not for a model with no local layer at all). The graph is
        read once per model, input shape and device; every call checks the fast path against
        the model on a batch of mutants first.
    alphabet_axis : {None, 1, -1}
        The axis of X holding A, C, G, T; inferred when unambiguous.
    batch_size : int or "auto"
        Mutants per device batch (mutants of many sequences share batches).
    max_cpu_sequences : int
        At most this many finished sequences wait on the host before the sink takes them.
    device : str or device, optional
        Where to run; default: where the model lives.
    verbose : bool
        Show a progress bar on stderr.
    backend : {None, "torch", "tensorflow"}
        Needed only for plain callables.
    out : path, optional
        Stream the scores into this HDF5 tracks file (``seqattrib.io.read_tracks``) and
        return its path; a rerun with the same settings resumes it.
    overwrite : bool
        Replace an existing ``out`` file instead of resuming it.
    regions : optional
        Genome coordinates of the rows of X (``chrom``, ``start``, ``end``), stored in ``out``.

    Returns
    -------
    ndarray of float32, shape (n_sequences, *X.shape[1:]) for an int target, else
    (n_sequences, K, *X.shape[1:]), in the layout of X. Entry (p, b) is the score of the mutant
    with base b at position p; it is exactly 0 at the reference base. At an N position all four
    bases are scored against the reference.
    """
    func = "ism"
    size, limit = check_common(func, batch_size, max_cpu_sequences, verbose, output_fn)
    if score not in _SCORES:
        raise parameter_error(func, "score", "'delta' or 'log_ratio'", score)
    if fast not in (True, False, "auto"):
        raise parameter_error(func, "fast", "True, False or 'auto'", fast)
    source = as_source(X, alphabet_axis, func)
    window = _window(positions, source.length, func)

    def make_kernel(be: Backend, targets: list[int], seed: int, todo: SequenceSource) -> IsmKernel:
        forward = None
        # "auto" stays on the exact path on accelerators: there the many small windowed
        # operations are launch-bound (an H200 ran the windowed BPNet- and Basset-like scans
        # 2-3x slower than the exact ones at batch_size=128)
        if fast is True or (fast == "auto" and not be.on_accelerator()):
            # the device the session resolved (the model may have moved since the last call)
            where = f"{device}/{getattr(be, 'device', '')}"
            plan = _fast_plan(be, model, source, output_fn, where, fast is True)
            if plan is not None and (fast is True or plan.cost_ratio <= AUTO_MAX_COST_RATIO):
                forward = fast_forward(be, plan)
        return IsmKernel(
            be,
            model,
            output_fn=output_fn,
            targets=targets,
            source=todo,
            window=window,
            rows_per_sequence=_count_rows(todo, window),
            score=score,
            func=func,
            fast=forward,
        )

    result, squeeze = execute(
        func=func,
        model=model,
        source=source,
        backend=backend,
        device=device,
        target=target,
        output_fn=output_fn,
        batch_size=size,
        max_cpu_sequences=limit,
        verbose=verbose,
        random_state=0,
        make_kernel=make_kernel,
        shapes=lambda k: {"attributions": (k, *source.row_shape)},
        settings={"positions": list(window), "score": score},
        out=out,
        overwrite=overwrite,
        regions=regions,
    )
    if isinstance(result, str):
        return result
    scores = result["attributions"]
    return scores[:, 0] if squeeze else scores


def ism_to_hypothetical(scores: Any, *, alphabet_axis: int | None = None) -> np.ndarray:
    """Mean-centre ISM scores over the 4 bases at each position (hypothetical scores).

    This is the form TF-MoDISco takes for ISM (and what ``project`` expects for per-base
    tracks).

    Parameters
    ----------
    scores : array of shape (n_sequences, [K,] length, 4) or (n_sequences, [K,] 4, length)
    alphabet_axis : {None, -2, -1}
        Axis holding the bases; inferred when only one of the last two axes has size 4.

    Returns
    -------
    ndarray of float32, the shape of ``scores``
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim not in (3, 4):
        raise parameter_error(
            "ism_to_hypothetical",
            "scores",
            "an array of shape (N, [K,] L, 4) or (N, [K,] 4, L)",
            f"shape {scores.shape}",
            described=True,
        )
    if alphabet_axis is None:
        last, before = scores.shape[-1] == 4, scores.shape[-2] == 4
        if last == before:
            raise parameter_error(
                "ism_to_hypothetical",
                "alphabet_axis",
                "given (-1 or -2) when the layout is ambiguous",
                f"None for shape {scores.shape}",
            )
        alphabet_axis = -1 if last else -2
    if alphabet_axis not in (-1, -2) or scores.shape[alphabet_axis] != 4:
        raise parameter_error(
            "ism_to_hypothetical", "alphabet_axis", "-1 or -2, an axis of size 4", alphabet_axis
        )
    return scores - scores.mean(axis=alphabet_axis, keepdims=True)
