"""The gradient kernel: saliency, IG and EIG rows reduced on the device.

A row is (sequence i, baseline j, step k). Its input ``b_ij + a_k (x_i - b_ij)`` is built on the
device, its gradient is weighted by ``w_k / B`` (and by ``x_i - b_ij`` when multiplying by
inputs) and segment-summed into its sequence at once, so no more than one batch of raw
gradients is ever alive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..backends import Backend
from .baselines import BaselineSpec

Tensor = Any


class GradientKernel:
    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        output_fn: Callable[[Any], Any] | None,
        targets: Sequence[int],
        row_shape: tuple[int, int],
        alphabet_axis: int,
        alphas: np.ndarray,
        weights: np.ndarray,
        output_weights: np.ndarray | None,
        baselines: BaselineSpec,
        multiply_by_inputs: bool,
        correct_gradient: bool,
        func: str,
    ) -> None:
        self.backend, self.model, self.output_fn = backend, model, output_fn
        self.targets = list(targets)
        self.row_shape = row_shape
        # alphabet axis of a (R, K, *row) gradient tensor
        self.grad_alphabet_axis = -1 if alphabet_axis == -1 else 2
        self.baselines = baselines
        n_b = baselines.n_baselines
        self.n_steps = len(alphas)
        self.rows_per_sequence = n_b * self.n_steps
        self.alphas = alphas.astype(np.float32)
        self.weights = (weights / n_b).astype(np.float32)
        self.output_weights = (
            None if output_weights is None else (output_weights / n_b).astype(np.float32)
        )
        self.multiply_by_inputs = multiply_by_inputs
        self.correct_gradient = correct_gradient
        self.func = func
        self._shared = backend.asarray(baselines.shared) if baselines.shared is not None else None

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        payload = {"x": self.backend.asarray(x)}
        if self.baselines.per_sequence is not None:
            b = self.baselines.per_sequence(x, first)
            payload["b"] = self.backend.asarray(b)  # (n, B, *row): sequences on axis 0
        return payload

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
        x = be.take(payload["x"], be.asarray(local, "int64"))
        if self.baselines.constant is not None:
            b: Tensor | float = self.baselines.constant
        elif self._shared is not None:
            b = be.take(self._shared, be.asarray(baseline, "int64"))
        else:
            index = local * self.baselines.n_baselines + baseline
            flat = be.reshape(payload["b"], (-1, *self.row_shape))
            b = be.take(flat, be.asarray(index, "int64"))
        diff = x - b
        alpha = be.asarray(self.alphas[step].reshape(n_rows, 1, 1))
        outputs, grads = be.input_gradients(
            self.model, b + alpha * diff, self.targets, self.output_fn
        )
        if self.correct_gradient:
            grads = grads - be.mean(grads, axis=self.grad_alphabet_axis, keepdims=True)
        weighted = grads * be.asarray(self.weights[step].reshape(n_rows, 1, 1, 1))
        if self.multiply_by_inputs:
            weighted = weighted * be.reshape(diff, (n_rows, 1, *self.row_shape))
        segment_ids = be.asarray(segment, "int64")
        parts = {"attributions": be.segment_sum(weighted, segment_ids, n_segments)}
        if self.output_weights is not None:
            scaled = outputs * be.asarray(self.output_weights[step].reshape(n_rows, 1))
            parts["delta"] = be.segment_sum(scaled, segment_ids, n_segments)
        return parts

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        attributions = block["attributions"]
        finite = np.isfinite(attributions).reshape(len(attributions), -1).all(axis=1)
        if not finite.all():
            bad = first + np.flatnonzero(~finite)
            raise parameter_error(
                self.func,
                "model",
                "a model with finite outputs and gradients",
                f"NaN or inf for sequences {bad[:5].tolist()}",
                "Check the model on these inputs (e.g. a log of zero, an overflow).",
                described=True,
            )
        if "delta" in block:
            # block["delta"] holds f(x) - mean_j f(b_j); completeness subtracts the attributions.
            block = dict(block, delta=block["delta"] - attributions.sum(axis=(2, 3)))
        return block
