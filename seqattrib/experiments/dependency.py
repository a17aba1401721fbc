"""Dependency maps: how the effect of every single-base substitution changes under every other
substitution (double mutants), on the same engine as ISM.

A row is one mutant of one sequence: a single mutant (i, a) or a double mutant (i, a, j, b) of
the scanned window. Mutants are made on the device from the reference one-hot, rows of many
sequences share each device batch, and each mutant's score f(mutant) - f(reference) lands in its
slot of its sequence's (4P, 4P) table through a segment sum; the host turns the finished table
into the double-mutant effects and their summary per pair of positions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from ..attribution.gradient_kernel import check_finite
from ..attribution.job import JobContext, run_job
from ..attribution.mutagenesis.choice import AUTO_MAX_COST_RATIO, checked_plan
from ..attribution.mutagenesis.fast import FastForward, fast_forward
from ..attribution.mutagenesis.kernel import count_rows, mutation_mask, scan_window
from ..attribution.options import RunOptions, shared_docs
from ..backends import Backend, WindowedBackend, capability
from ..engine import SequenceSource, as_source
from ..engine.blocks import DEVICE_BLOCK_BYTES
from ..engine.outputs import Head

__all__ = ["dependency_map"]

Tensor = Any

_SUMMARIES = ("max_abs", "l2")


def _pair_of_row(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row r of a sequence as mutations (u, v), u <= v, in the order (0,0), (0,1), (1,1),
    (0,2), (1,2), (2,2), ...: u == v is the single mutant u, u < v the double mutant.

    The order does not depend on the number of mutations of the sequence."""
    v = np.floor((np.sqrt(8.0 * row + 1.0) - 1.0) / 2.0).astype(np.int64)
    v -= (v * (v + 1) // 2 > row).astype(np.int64)  # float rounding, either way
    v += ((v + 1) * (v + 2) // 2 <= row).astype(np.int64)
    return row - v * (v + 1) // 2, v


class DependencyKernel:
    """Single and double mutants of many sequences per device batch, scored on the device.

    On the exact path each mutant runs through the whole model. On the fast path the double
    mutants of a batch are fast ISM's mutants of single mutants: the rows of single mutant v
    (the pairs (u, v), u <= v, of one sequence are contiguous) share one reference pass over
    x^v, and each row recomputes only the windows mutation u can change.
    """

    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        head: Head,
        targets: Sequence[int],
        source: SequenceSource,
        window: tuple[int, int],
        summary: str,
        effects: bool,
        func: str,
        fast: FastForward | None = None,
    ) -> None:
        self.backend, self.model, self.head = backend, model, head
        self.fast = fast
        self.variant = "fast" if fast is not None else "exact"  # batch sizes cached apart
        self.source, self.window, self.func = source, window, func
        self.summary, self.effects = summary, effects
        self.length = source.length
        self.width = 4 * (window[1] - window[0])  # mutations of a window: at most 4 a position
        mutations = count_rows(source, window)
        self.rows_per_sequence = mutations * (mutations + 1) // 2
        self.targets = list(targets)
        self._targets = backend.asarray(np.asarray(targets), "int64")
        nlc = source.alphabet_axis == -1
        self._mask_shape = (-1, self.length, 1) if nlc else (-1, 1, self.length)
        self._base_shape = (-1, 1, 4) if nlc else (-1, 4, 1)

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        be = self.backend
        start, end = self.window
        mask = mutation_mask(self.source.to_nlc(x)[:, start:end])
        columns = np.where(mask, np.arange(self.width), self.width)
        columns.sort(axis=1)  # each sequence's mutations first, in (position, base) order
        columns[columns == self.width] = 0  # padding, never read
        x_device = be.asarray(x)
        reference = be.forward(self.model, x_device, self.head)
        return {
            "x": x_device,
            "reference": be.take(reference, self._targets, axis=1),
            "column": be.asarray(columns, "int64"),
            "position": be.asarray(start + columns // 4, "int64"),
            "base": be.asarray(columns % 4, "int64"),
        }

    def _mutated(self, x: Tensor, position: Tensor, base: Tensor) -> Tensor:
        be = self.backend
        at = be.reshape(be.one_hot(position, self.length), self._mask_shape)
        new = be.reshape(be.one_hot(base, 4), self._base_shape)
        return x + at * (new - x)

    def compute(
        self,
        payload: dict[str, Tensor],
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> dict[str, Tensor]:
        be = self.backend
        u, v = _pair_of_row(row_in_sequence)
        local_t = be.asarray(local, "int64")
        picked = {}
        for name in ("column", "position", "base"):
            flat = be.reshape(payload[name], (-1,))
            picked[name] = [
                be.take(flat, be.asarray(local * self.width + m, "int64")) for m in (u, v)
            ]
        if self.fast is None:
            mutants = be.take(payload["x"], local_t)
            for k in (1, 0):  # a single mutant (u == v) is made twice: the same sequence
                mutants = self._mutated(mutants, picked["position"][k], picked["base"][k])
            outputs = be.take(be.forward(self.model, mutants, self.head), self._targets, axis=1)
        else:
            outputs = self._fast_outputs(payload, local, v, picked)
        scores = outputs - be.take(payload["reference"], local_t)
        slots = self.width * self.width
        slot = (
            be.asarray(segment * slots, "int64")
            + picked["column"][0] * self.width
            + picked["column"][1]
        )
        table = be.segment_sum(scores, slot, n_segments * slots)
        return {"table": be.reshape(table, (n_segments, slots, len(self.targets)))}

    def _fast_outputs(
        self, payload: dict[str, Tensor], local: np.ndarray, v: np.ndarray, picked: Any
    ) -> Tensor:
        """The rows' outputs as fast ISM mutants (mutation u) of their single mutants x^v (a
        single mutant itself when u == v: x^v with its own base set again)."""
        be, fast = self.backend, self.fast
        assert fast is not None
        singles, row_single = np.unique(local * self.width + v, return_inverse=True)
        at = be.asarray(singles, "int64")
        x = be.take(payload["x"], be.asarray(singles // self.width, "int64"))
        position = be.take(be.reshape(payload["position"], (-1,)), at)
        base = be.take(be.reshape(payload["base"], (-1,)), at)
        *kept, _ = fast.reference(self._mutated(x, position, base))
        return fast.mutant_outputs(
            kept,
            be.asarray(row_single.reshape(-1), "int64"),
            picked["position"][0],
            picked["base"][0],
            self._selected,
        )

    def _selected(self, raw: Any) -> Tensor:
        """The target outputs of a raw model output."""
        be: Any = self.backend
        return be.take(be.outputs(raw, self.head), self._targets, axis=1)

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        table = block["table"]
        n, w, k = len(table), self.width, len(self.targets)
        start, end = self.window
        x = self.source.read(first - self.source.offset, first - self.source.offset + n)
        mask = mutation_mask(self.source.to_nlc(x)[:, start:end])  # (n, W)
        scores = table.reshape(n, w, w, k).transpose(0, 3, 1, 2)  # (n, K, W, W): [u, v], u <= v
        check_finite(scores, first, self.targets, self.func)
        singles = np.diagonal(scores, axis1=2, axis2=3)  # (n, K, W)
        position = np.arange(w) // 4
        pairs = mask[:, :, None] & mask[:, None, :] & (position[:, None] < position[None, :])
        delta = scores - singles[..., :, None] - singles[..., None, :]
        delta = np.where(pairs[:, None], delta, 0.0)
        delta = delta + delta.transpose(0, 1, 3, 2)
        p = end - start
        effects = delta.reshape(n, k, p, 4, p, 4).astype(np.float32)
        if self.summary == "max_abs":
            summary = np.abs(effects).max(axis=(3, 5))
        else:
            summary = np.sqrt(np.square(effects, dtype=np.float64).sum(axis=(3, 5)))
        result = {"dependency": np.ascontiguousarray(summary, dtype=np.float32)}
        if self.effects:
            result["effects"] = np.ascontiguousarray(effects)
        return result


@dataclass(frozen=True)
class DependencyMethod:
    """Every double mutant of a window of each sequence (see ``dependency_map``)."""

    source: SequenceSource
    window: tuple[int, int]
    summary: str
    effects: bool
    fast: bool | str
    func: str = "dependency_map"
    random_state: Any = 0
    forwards: list[FastForward] = field(default_factory=list)  # the fast passes it made

    def release(self) -> None:
        """Free what the fast passes kept between passes."""
        for forward in self.forwards:
            forward.release()

    def settings(self) -> dict[str, Any]:
        return {"positions": list(self.window), "summary": self.summary, "effects": self.effects}

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        p = self.window[1] - self.window[0]
        shapes: dict[str, tuple[int, ...]] = {"dependency": (n_targets, p, p)}
        if self.effects:
            shapes["effects"] = (n_targets, p, 4, p, 4)
        return shapes

    def kernel(self, context: JobContext) -> DependencyKernel:
        be, fast, forward = context.backend, self.fast, None
        # as ISM's "auto": the windowed passes on a CPU, when the cost model predicts a gain
        if fast is True or (fast == "auto" and not be.on_accelerator()):
            windowed: WindowedBackend = capability(be, WindowedBackend, self.func)
            plan = checked_plan(
                windowed, context.model, self.source, context.head, str(context.device),
                fast is True,
            )  # fmt: skip
            if plan is not None and (fast is True or plan.cost_ratio <= AUTO_MAX_COST_RATIO):
                forward = fast_forward(windowed, plan)
                self.forwards.append(forward)
        return DependencyKernel(
            context.backend,
            context.model,
            head=context.head,
            targets=context.targets,
            source=context.source,
            window=self.window,
            summary=self.summary,
            effects=self.effects,
            func=self.func,
            fast=forward,
        )


@shared_docs
def dependency_map(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    positions: tuple[int, int] | None = None,
    summary: Literal["max_abs", "l2"] = "max_abs",
    return_effects: bool = False,
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
) -> Any:
    """Dependency map: how much the effect of each substitution changes under every other.

    Use a dependency map to see which positions of a sequence the model reads together
    (the bases of one motif, two motifs that cooperate, a motif and the spacer that sets its
    phase); ISM gives each position's effect on its own. It runs every double mutant of the
    window, each pair once: about ``4.5 P**2`` mutants per sequence for a window of P
    positions.

    For positions i != j of the window, a base a at i and a base b at j (each other than the
    reference base there), with x^{ia} the sequence x with base a at position i:

    ``effects[i, a, j, b] = (f(x^{ia,jb}) - f(x^{ia})) - (f(x^{jb}) - f(x))``

    the change of the effect of b at j when a is put at i (symmetric: equally the change of
    the effect of a at i when b is put at j; 0 for an additive model). The map summarises the
    substitutions of each pair of positions:

    ``dependency[i, j] = max over a, b of |effects[i, a, j, b]|`` (``summary="max_abs"``) or
    ``sqrt(sum over a, b of effects[i, a, j, b] ** 2)`` (``summary="l2"``).

    Entries at a reference base, and the diagonal i == j, are 0. At an N position (all-zero)
    all four bases are substituted.

    Parameters
    ----------
    [[model]]
    [[X]]
    target : int, sequence of int or None
        Output index; a sequence of K indices (all from the same forward passes); None for all.
    [[output_fn]]
    positions : (start, end), optional
        The window to map (0-based, end exclusive): P = end - start positions; default: the
        whole sequence. Row and column p of the results are position start + p.
    summary : {"max_abs", "l2"}
        How the substitutions of a pair of positions are summarised (see above).
    return_effects : bool
        Also return every double-mutant effect (P, 4, P, 4) per sequence and target.
    fast : {"auto", True, False}
        Run the double mutants as fast ISM runs single ones (see ``seqattrib.ism``): the
        double mutants x^{ia,jb} of one single mutant x^{jb} share one pass over x^{jb},
        and each recomputes only the layers' windows that the base at i can reach, up to the
        first layer that mixes all positions. Same results as ``fast=False`` (every mutant
        through the whole model) up to float32 rounding; ``"auto"`` takes it on a CPU when
        ISM's cost model predicts a gain, never on a GPU.
    [[alphabet_axis]]
    batch_size : int or "auto"
        Mutants per device batch (mutants of many sequences share batches).
    max_cpu_sequences : int
        At most this many finished sequences wait on the host before the sink takes them, and
        fewer when their maps are large: a sequence's results are a (4P, 4P) table per target
        on the device until they cross to the host, and at most 64 MiB of them wait there.
    device : str or device, optional
        Where to run; default: where the model lives.
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the results into this HDF5 file (datasets ``dependency`` and, with
        ``return_effects``, ``effects``, one row per sequence, with ``sequences``) and return
        its path; a rerun with the same settings resumes it, and a file made with another model
        or other settings is refused.
    [[overwrite]]
    [[regions]]
    [[shard]]

    Returns
    -------
    dependency : ndarray of float32, shape (n_sequences, P, P) for an int target, else
        (n_sequences, K, P, P)
    effects : ndarray of float32, shape (n_sequences, P, 4, P, 4) for an int target, else
        (n_sequences, K, P, 4, P, 4); only with ``return_effects=True``, as a tuple
        ``(dependency, effects)``. The bases are in the order A, C, G, T whatever the layout of
        X.

    With ``out``, the file's path instead.
    """
    func = "dependency_map"
    options = RunOptions.check(
        func,
        target=target,
        output_fn=output_fn,
        alphabet_axis=alphabet_axis,
        batch_size=batch_size,
        max_cpu_sequences=max_cpu_sequences,
        device=device,
        verbose=verbose,
        backend=backend,
        out=out,
        overwrite=overwrite,
        regions=regions,
        shard=shard,
    )
    if summary not in _SUMMARIES:
        raise parameter_error(func, "summary", "'max_abs' or 'l2'", summary)
    if fast not in (True, False, "auto"):
        raise parameter_error(func, "fast", "True, False or 'auto'", fast)
    if not isinstance(return_effects, bool):
        raise parameter_error(
            func, "return_effects", "True or False", return_effects, error=TypeError
        )
    source = as_source(X, alphabet_axis, func)
    window = scan_window(positions, source.length, func)
    # finished sequences wait on the device as (4P, 4P) tables per target before they cross
    # to the host: as many as DEVICE_BLOCK_BYTES holds (counting targets given by index)
    n_targets = len(target) if isinstance(target, Sequence) else 1
    table = 4 * n_targets * (4 * (window[1] - window[0])) ** 2
    options = replace(
        options,
        max_cpu_sequences=min(options.max_cpu_sequences, max(1, DEVICE_BLOCK_BYTES // table)),
    )
    method = DependencyMethod(source, window, summary, return_effects, fast)
    try:
        result, _ = run_job(method, model, source, options)
    finally:
        method.release()
    if isinstance(result, str):
        return result
    if return_effects:
        return result["dependency"], result["effects"]
    return result["dependency"]
