"""The DeepLIFT kernel: rows (sequence, reference) reduced on the device.

A device batch holds rows of several sequences. The backend's rescale capability runs the
batch's sequences once and every row's reference once, with every nonlinearity it finds under
the rescale rule (max pooling under the max rule), and returns the multipliers m_j of each row.
Here, written once for every framework:

- hypothetical scores, the form TF-MoDISco takes (``combine_mult_and_diffref`` of the DeepSHAP
  code in TF-MoDISco, BPNet and ChromBPNet): for a row with reference r_j, base b at a position
  gets m_j[b] - sum_c r_j[c] m_j[c], the contribution the position would have if it held b;
  the mean over the references is taken on the device, by a segment sum with weight 1 / B;
- contributions: the hypothetical scores times the one-hot input, so that for a one-hot x the
  contributions of a row sum to sum (x - r_j) m_j;
- summation to delta: per sequence and target, f(x) - mean_j f(r_j) and the gap the rules
  leave, sum over positions of (x - r_j) m_j against f(x) - f(r_j) (root mean square over the
  references), both on the device; ``finalize`` warns about sequences whose gap is too large.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import SeqAttribWarning, parameter_error
from ..backends import RescaleGradients, RescaleReport, RescaleUnsupported, capability
from .baseline_rows import BaselineRows
from .baselines import BaselineSpec
from .gradient_kernel import check_finite

if TYPE_CHECKING:
    from .job import JobContext

Tensor = Any

#: A sequence warns when the root-mean-square gap over its references exceeds this fraction of
#: the root-mean-square output difference f(x) - f(r_j) ...
GAP_WARNING = 1e-3
#: ... plus this fraction of the output's size (float32 rounding of f(x) - f(r_j) itself).
GAP_ROUNDING = 1e-5


class DeepLiftKernel:
    """Rows (sequence, reference) reduced on the device; see the module docstring."""

    def __init__(
        self,
        context: JobContext,
        *,
        row_shape: tuple[int, int],
        alphabet_axis: int,
        baselines: BaselineSpec,
        multiply_by_inputs: bool,
        return_delta: bool,
        func: str,
    ) -> None:
        backend = context.backend
        self.rescale: RescaleGradients = capability(backend, RescaleGradients, func)  # type: ignore[type-abstract]
        self.backend, self.model, self.head = backend, context.model, context.head
        self.targets, self.vectorised = context.targets, context.vectorised
        self.row_shape = row_shape
        # alphabet axis of a (R, K, *row) multiplier tensor
        self.alphabet_axis = -1 if alphabet_axis == -1 else 2
        self.alphabet_size = row_shape[-1] if alphabet_axis == -1 else row_shape[0]
        self.rows_per_sequence = baselines.n_baselines
        self.weight = 1.0 / baselines.n_baselines
        self.multiply_by_inputs = multiply_by_inputs
        self.return_delta = return_delta
        self.func = func
        self.extras = context.extras
        self._baseline_rows = BaselineRows(backend, baselines, self.extras, row_shape)
        self._fixed = [] if self.extras is None else self.extras.fixed(backend)
        first = backend.asarray(context.source.read(0, 1))
        first_extras: list[Tensor] = []
        if self.extras is not None:
            chunk = self.extras.chunk(backend, 0, 1)
            zero = backend.asarray(np.zeros(1), "int64")
            first_extras = self.extras.for_rows(backend, chunk, self._fixed, zero)
        with refusals(func):
            self.report: RescaleReport = self.rescale.rescale_layers(
                self.model, first, self.head, first_extras
            )
        self._warned = False

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        return self._baseline_rows.prepare(x, first)

    def _other_inputs(
        self, payload: dict[str, Tensor], sequences: Tensor, segment_ids: Tensor
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The model's other inputs for the batch's sequences and for its reference rows."""
        if self.extras is None:
            return [], []
        be = self.backend
        of_inputs = self.extras.for_rows(be, payload, self._fixed, sequences)
        return of_inputs, [be.take(e, segment_ids) for e in of_inputs]

    def _references(
        self, payload: dict[str, Tensor], x_rows: Tensor, local: np.ndarray, j: np.ndarray
    ) -> Tensor:
        references = self._baseline_rows.rows(payload, local, j)
        if isinstance(references, float):  # one constant: a full (R, *row) tensor of it
            return x_rows * 0.0 + references
        return references

    def _total(self, t: Tensor) -> Tensor:
        """Sum over the two row axes of a (R, K, a, b) tensor -> (R, K)."""
        be = self.backend
        a, b = self.row_shape
        return be.mean(be.mean(t, axis=-1, keepdims=False), axis=-1, keepdims=False) * float(a * b)

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
        expand = (n_rows, 1, *self.row_shape)
        # the batch's sequences once each (segment numbers them from 0, local rows in order)
        sequences = be.asarray(local[0] + np.arange(n_segments), "int64")
        inputs = be.take(payload["x"], sequences)
        segment_ids = be.asarray(segment, "int64")
        extras = self._other_inputs(payload, sequences, segment_ids)
        x_rows = be.take(inputs, segment_ids)
        references = self._references(payload, x_rows, local, row_in_sequence)
        with refusals(self.func):
            input_outputs, reference_outputs, multipliers = self.rescale.rescale_gradients(
                self.model,
                inputs,
                references,
                segment,  # the host's copy: the pairing is read on the host
                self.targets,
                self.head,
                self.vectorised,
                extras,
            )
        # hypothetical scores: m[b] - sum_c r[c] m[c] (the mean over the 4 bases, times 4:
        # exact, 4 is a power of two)
        projected = be.mean(be.reshape(references, expand) * multipliers, self.alphabet_axis)
        hypothetical = multipliers - projected * float(self.alphabet_size)
        summed = self.return_delta and not self.multiply_by_inputs
        if self.multiply_by_inputs or summed:
            contributions = hypothetical * be.reshape(x_rows, expand)
        scores = contributions if self.multiply_by_inputs else hypothetical
        f_x = be.take(input_outputs, segment_ids)
        difference = f_x - reference_outputs
        gap = difference - self._total(be.reshape(x_rows - references, expand) * multipliers)
        # 0 where a sequence's outputs are finite, NaN where one is not: added to its
        # attributions, so that finalize refuses it (a NaN output can have finite multipliers)
        flags = be.segment_sum(difference * 0.0, segment_ids, n_segments)

        def mean(values: Tensor) -> Tensor:
            return be.segment_sum(values * self.weight, segment_ids, n_segments)

        parts = {
            "attributions": mean(scores) + be.reshape(flags, (n_segments, -1, 1, 1)),
            "difference": mean(difference),
            "output": mean(f_x),
            "gap_squared": mean(gap * gap),
            "difference_squared": mean(difference * difference),
        }
        if summed:
            parts["contribution_sum"] = mean(self._total(contributions))
        return parts

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        attributions = block["attributions"]
        check_finite(attributions, first, self.targets, self.func)
        self._check_gaps(block, first)
        out = {"attributions": attributions}
        if self.return_delta:
            summed = block.get("contribution_sum")
            if summed is None:
                summed = attributions.sum(axis=(2, 3))
            out["delta"] = block["difference"] - summed
        return out

    def _check_gaps(self, block: dict[str, np.ndarray], first: int) -> None:
        """One warning per job: the first sequence (and target) whose gap is too large."""
        if self._warned:
            return
        gap = np.sqrt(np.maximum(block["gap_squared"], 0.0))
        spread = np.sqrt(np.maximum(block["difference_squared"], 0.0))
        allowed = GAP_WARNING * spread + GAP_ROUNDING * np.maximum(1.0, np.abs(block["output"]))
        bad = gap > allowed
        if not bad.any():
            return
        self._warned = True
        i, k = (int(v) for v in np.argwhere(bad)[0])
        n_bad = int(bad.any(axis=1).sum())
        warnings.warn(
            gap_message(
                self.func,
                first + i,
                self.targets[k],
                float(gap[i, k] / max(float(spread[i, k]), 1e-30)),
                n_bad - 1,
                self.report,
            ),
            SeqAttribWarning,
            stacklevel=2,
        )


@contextmanager
def refusals(func: str) -> Iterator[None]:
    """A backend's refusal of a model, in the package's error template."""
    try:
        yield
    except RescaleUnsupported as exc:
        raise parameter_error(
            func,
            "model",
            "a model whose nonlinearities the rescale rules can reach",
            exc.received,
            exc.fix,
            error=RescaleUnsupported,
            described=True,
        ) from None


def gap_message(
    func: str, sequence: int, target: int, relative: float, more: int, report: RescaleReport
) -> str:
    """The warning for contributions that do not sum to f(x) - mean f(r)."""
    if report.by_gradient:
        cause = (
            "The model holds operations that no DeepLIFT rule covers and that keep their "
            "gradient: " + "; ".join(_shorten(report.by_gradient)) + "."
        )
    else:
        cause = (
            "Every operation the rules could see is covered, so a nonlinearity may run where "
            "they cannot see it (compiled code, a custom operation)."
        )
    others = f" ({more} more sequence(s) of the same block too)" if more else ""
    return (
        f"{func}: the contributions of sequence {sequence} (target {target}) miss "
        f"f(x) - f(reference) by {relative:.2g} of it (root mean square over its "
        f"references){others}. {cause} return_delta=True gives the gap of every sequence."
    )


def _shorten(items: Sequence[str], limit: int = 6) -> list[str]:
    shown = list(items[:limit])
    if len(items) > limit:
        shown.append(f"and {len(items) - limit} more")
    return shown
