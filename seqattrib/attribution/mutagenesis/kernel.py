"""In-silico saturation mutagenesis on the engine (a forward-only kernel).

A row is one single-base mutant (sequence i, position p, base b). Mutants are made on the
device from the reference one-hot, rows of many sequences share each device batch, and each
mutant's score lands in its (p, b) slot of its sequence through a segment sum, so only the final
(K, L, 4) table of each sequence crosses to the host.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._errors import parameter_error
from ...backends import Backend, OutOfDeviceMemory
from ...engine import SequenceSource
from ...engine.outputs import Head
from ..extras import ExtraInputs
from ..gradient_kernel import check_finite
from .fast import FastForward

Tensor = Any


def mutation_mask(window_nlc: np.ndarray) -> np.ndarray:
    """Which (position, base) of a window to mutate: (n, W * 4) bool, position-major.

    Every base but the reference at a one-hot position; all four at an N or soft position.
    """
    one_hot = (window_nlc.max(axis=-1) == 1.0) & (window_nlc.sum(axis=-1) == 1.0)
    mask = np.where(one_hot[..., None], window_nlc == 0.0, True)
    return mask.reshape(len(window_nlc), -1)


class IsmKernel:
    """Single-base mutants of many sequences per device batch, scored on the device."""

    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        head: Head,
        targets: Sequence[int],
        source: SequenceSource,
        window: tuple[int, int],
        rows_per_sequence: np.ndarray,
        score: str,
        func: str,
        fast: FastForward | None = None,
        extras: ExtraInputs | None = None,
    ) -> None:
        self.backend, self.model, self.head = backend, model, head
        self.fast = fast
        self.extras = extras
        self._fixed = [] if extras is None else extras.fixed(backend)
        self.variant = "fast" if fast is not None else "exact"  # batch sizes cached apart
        self.source, self.window, self.score, self.func = source, window, score, func
        self.rows_per_sequence = rows_per_sequence
        self.length = source.length
        self.width = 4 * (window[1] - window[0])  # table width: at most 4 mutants per position
        self.n_targets, self.targets = len(targets), list(targets)
        self._targets = backend.asarray(np.asarray(targets), "int64")
        nlc = source.alphabet_axis == -1
        self._mask_shape = (-1, self.length, 1) if nlc else (-1, 1, self.length)
        self._base_shape = (-1, 1, 4) if nlc else (-1, 4, 1)

    def _rows(self, payload: dict[str, Tensor], local: Tensor) -> list[Tensor]:
        """The model's other inputs for rows of the payload's sequences ``local``."""
        if self.extras is None:
            return []
        return self.extras.for_rows(self.backend, payload, self._fixed, local)

    def _selected(self, raw: Any) -> Tensor:
        """The target outputs of a raw model output."""
        be: Any = self.backend
        return be.take(be.outputs(raw, self.head), self._targets, axis=1)

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        be = self.backend
        start, end = self.window
        mask = mutation_mask(self.source.to_nlc(x)[:, start:end])
        columns = np.where(mask, np.arange(self.width), self.width)
        columns.sort(axis=1)  # each sequence's mutants first, in (position, base) order
        columns[columns == self.width] = 0  # padding, never read
        x_device = be.asarray(x)
        kept: dict[str, Tensor] = {}
        extras: dict[str, Tensor] = {}
        if self.fast is not None:
            *values, raw = self.fast.reference(x_device)
            kept = {f"kept{i}": v for i, v in enumerate(values)}
            reference = be.outputs(raw, self.head)
        else:
            if self.extras is not None:
                extras = self.extras.chunk(be, first, len(x))
            reference = self._reference(x_device, extras)
        return {
            **kept,
            **extras,
            "x": x_device,
            "reference": be.take(reference, self._targets, axis=1),
            "position": be.asarray(start + columns // 4, "int64"),
            "base": be.asarray(columns % 4, "int64"),
        }

    def _reference(self, x_device: Tensor, extras: dict[str, Tensor]) -> Tensor:
        """The model's outputs on a chunk's sequences, in pieces halved while the device runs
        out of memory (a chunk can hold more sequences than a batch)."""
        be = self.backend
        n = piece = len(x_device)
        while True:
            try:
                parts = []
                for lo in range(0, n, piece):
                    rows = be.asarray(np.arange(lo, min(n, lo + piece)), "int64")
                    x_rows, extra_rows = be.take(x_device, rows), self._rows(extras, rows)
                    parts.append(be.forward(self.model, x_rows, self.head, extra_rows))
                return be.concat(parts)
            except OutOfDeviceMemory:
                if piece == 1:
                    raise
                piece = (piece + 1) // 2

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
            kept = [payload[f"kept{i}"] for i in range(self.fast.n_kept)]
            outputs = self.fast.mutant_outputs(kept, local_t, position, base, self._selected)
        else:
            x = be.take(payload["x"], local_t)
            at = be.reshape(be.one_hot(position, self.length), self._mask_shape)
            new = be.reshape(be.one_hot(base, 4), self._base_shape)
            mutants = x + at * (new - x)
            outputs = be.forward(self.model, mutants, self.head, self._rows(payload, local_t))
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
        n = len(scores)
        nlc = scores.reshape(n, self.length, 4, self.n_targets).transpose(0, 3, 1, 2)
        if self.score == "log_ratio" and not np.isfinite(nlc).all():
            bad = np.flatnonzero(~np.isfinite(nlc).reshape(n, -1).all(axis=1))
            raise parameter_error(
                self.func,
                "score",
                "'delta' unless every model output is positive",
                f"'log_ratio' with non-positive outputs for sequence {first + int(bad[0])}",
                "Use score='delta', or an output_fn that returns positive values "
                "(e.g. counts or probabilities).",
                described=True,
            )
        check_finite(nlc, first, self.targets, self.func)
        return {"attributions": np.ascontiguousarray(self.source.from_nlc(nlc))}


def scan_window(positions: Any, length: int, func: str) -> tuple[int, int]:
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


def count_rows(source: SequenceSource, window: tuple[int, int]) -> np.ndarray:
    """Mutants per sequence (3 per one-hot position, 4 per N or soft position); reads X once."""
    counts = np.empty(source.n_sequences, dtype=np.int64)
    step = max(1, 2**22 // (source.length * 4))
    for begin in range(0, source.n_sequences, step):
        chunk = source.to_nlc(source.read(begin, begin + step))[:, window[0] : window[1]]
        counts[begin : begin + len(chunk)] = mutation_mask(chunk).sum(axis=1)
    return counts
