"""The gradient kernel: saliency, IG and EIG rows reduced on the device.

A row is (sequence i, baseline j, step k). Its input ``b_ij + a_k (x_i - b_ij)`` is built on the
device, its gradient is weighted by ``w_k / B`` (and by ``x_i - b_ij`` when multiplying by
inputs) and segment-summed into its sequence at once, so no more than one batch of raw
gradients is ever alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import parameter_error
from .baseline_rows import BaselineRows
from .baselines import BaselineSpec

if TYPE_CHECKING:
    from .job import JobContext

Tensor = Any


class GradientKernel:
    """Rows (sequence, baseline, step) reduced on the device; see the module docstring."""

    def __init__(
        self,
        context: JobContext,
        *,
        row_shape: tuple[int, int],
        alphabet_axis: int,
        alphas: np.ndarray,
        weights: np.ndarray,
        output_weights: np.ndarray | None,
        baselines: BaselineSpec,
        multiply_by_inputs: bool,
        correct_gradient: bool,
        func: str,
        return_stderr: bool = False,
        raw_moments: bool = False,
    ) -> None:
        backend = context.backend
        self.backend, self.model, self.head = backend, context.model, context.head
        self.targets, self.vectorised = context.targets, context.vectorised
        self.extras = context.extras
        self._fixed = [] if self.extras is None else self.extras.fixed(backend)
        self.row_shape = row_shape
        # alphabet axis of a (R, K, *row) gradient tensor
        self.grad_alphabet_axis = -1 if alphabet_axis == -1 else 2
        n_b = baselines.n_baselines
        self.n_baselines = n_b
        self.n_steps = len(alphas)
        self.rows_per_sequence = n_b * self.n_steps
        self.return_stderr = return_stderr
        self.raw_moments = raw_moments  # leave mean, second moment and delta as raw sums
        #: with return_stderr, device batches hold whole paths: each baseline's path integral
        #: is complete in one batch, and its square is taken there
        self.row_alignment = self.n_steps if return_stderr else 1
        self.alphas = alphas.astype(np.float32)
        self.weights = (weights / n_b).astype(np.float32)
        self.output_weights = (
            None if output_weights is None else (output_weights / n_b).astype(np.float32)
        )
        self.multiply_by_inputs = multiply_by_inputs
        self.correct_gradient = correct_gradient
        self.func = func
        self._baseline_rows = BaselineRows(backend, baselines, self.extras, row_shape)

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        return self._baseline_rows.prepare(x, first)

    def compute(
        self,
        payload: dict[str, Tensor],
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> dict[str, Tensor]:
        be = self.backend
        n_rows = len(local)
        step = row_in_sequence % self.n_steps
        baseline = row_in_sequence // self.n_steps
        local_t = be.asarray(local, "int64")
        x = be.take(payload["x"], local_t)
        extras = (
            [] if self.extras is None else self.extras.for_rows(be, payload, self._fixed, local_t)
        )
        b = self._baseline_rows.rows(payload, local, baseline)
        diff = x - b
        alpha = be.asarray(self.alphas[step].reshape(n_rows, 1, 1))
        outputs, grads = be.input_gradients(
            self.model, b + alpha * diff, self.targets, self.head, self.vectorised, extras
        )
        if self.correct_gradient:
            grads = grads - be.mean(grads, axis=self.grad_alphabet_axis, keepdims=True)
        weighted = grads * be.asarray(self.weights[step].reshape(n_rows, 1, 1, 1))
        if self.multiply_by_inputs:
            weighted = weighted * be.reshape(diff, (n_rows, 1, *self.row_shape))
        segment_ids = be.asarray(segment, "int64")
        # 0 where a sequence's outputs are finite, NaN where one is not: added to its
        # attributions, so that finalize refuses it (a NaN output can have finite gradients)
        flags = be.segment_sum(outputs * 0.0, segment_ids, n_segments)
        attributions = be.segment_sum(weighted, segment_ids, n_segments)
        parts = {"attributions": attributions + be.reshape(flags, (n_segments, -1, 1, 1))}
        if self.output_weights is not None:
            scaled = outputs * be.asarray(self.output_weights[step].reshape(n_rows, 1))
            parts["delta"] = be.segment_sum(scaled, segment_ids, n_segments)
        if self.return_stderr:
            parts["second_moment"] = self._second_moment(weighted, segment, baseline, n_segments)
        return parts

    def _second_moment(
        self, weighted: Tensor, segment: np.ndarray, baseline: np.ndarray, n_segments: int
    ) -> Tensor:
        """Sum over the batch's paths of (path integral / B) squared, per sequence: the path
        integral of baseline j of a sequence is the sum of its rows (all in this batch)."""
        be, n_b = self.backend, self.n_baselines
        paths = be.segment_sum(
            weighted, be.asarray(segment * n_b + baseline, "int64"), n_segments * n_b
        )
        owner = be.asarray(np.arange(n_segments * n_b) // n_b, "int64")
        return be.segment_sum(paths * paths, owner, n_segments)

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        attributions = block["attributions"]
        check_finite(attributions, first, self.targets, self.func)
        if self.raw_moments:
            return block
        if "delta" in block:
            # block["delta"] holds f(x) - mean_j f(b_j); completeness subtracts the attributions.
            block = dict(block, delta=block["delta"] - attributions.sum(axis=(2, 3)))
        if "second_moment" in block:
            block = dict(block)
            block["stderr"] = standard_error(
                attributions, block.pop("second_moment"), self.n_baselines
            )
        return block


def check_finite(results: np.ndarray, first: int, targets: Sequence[int], func: str) -> None:
    """Refuse (n, K, ...) results with a NaN or inf, naming the first sequence and target."""
    finite = np.isfinite(results).reshape(results.shape[0], results.shape[1], -1).all(axis=2)
    if finite.all():
        return
    i, k = (int(v) for v in np.argwhere(~finite)[0])
    n_bad = int((~finite).any(axis=1).sum())
    raise parameter_error(
        func,
        "model",
        "a model with finite outputs (and gradients)",
        f"NaN or inf for sequence {first + i} (target {targets[k]})"
        + (f" and {n_bad - 1} more sequence(s) of this block" if n_bad > 1 else ""),
        "Check the model on that input (e.g. a log of zero, an overflow) or the output_fn.",
        described=True,
    )


def standard_error(mean: np.ndarray, second_moment: np.ndarray, n_baselines: int) -> np.ndarray:
    """Standard error of a mean over ``n_baselines`` path integrals A_j, from ``mean`` = sum_j
    A_j / B and ``second_moment`` = sum_j (A_j / B)^2: sqrt(sample variance / B), in float64
    (float32 result). 0 for one baseline (a deterministic reference has no sampling error)."""
    if n_baselines < 2:
        return np.zeros_like(mean)
    b = float(n_baselines)
    m, s2 = mean.astype(np.float64), second_moment.astype(np.float64)
    variance_of_mean = (b * s2 - m * m) / (b - 1.0)
    return np.sqrt(np.maximum(variance_of_mean, 0.0)).astype(np.float32)
