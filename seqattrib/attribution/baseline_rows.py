"""Baselines on the device, shared by the kernels whose rows pair a sequence with a baseline.

A chunk's payload holds its sequences (``"x"``), their own baselines where they are drawn per
sequence (``"b"``, shape ``(n, B, *row)``) and the chunk of the model's other inputs; a row's
baseline is then the constant, a row of the shared baselines, or a row of ``"b"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .baselines import BaselineSpec

Tensor = Any


class BaselineRows:
    """The baselines of a job's rows, gathered on the device."""

    def __init__(
        self, backend: Any, baselines: BaselineSpec, extras: Any, row_shape: tuple[int, int]
    ) -> None:
        self.backend, self.baselines, self.extras = backend, baselines, extras
        self.row_shape = row_shape
        self.shared = backend.asarray(baselines.shared) if baselines.shared is not None else None

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        """The payload of the chunk ``x`` whose first sequence is sequence ``first``."""
        payload = {"x": self.backend.asarray(x)}
        if self.baselines.per_sequence is not None:
            b = self.baselines.per_sequence(x, first)
            payload["b"] = self.backend.asarray(b)  # (n, B, *row): sequences on axis 0
        if self.extras is not None:
            payload.update(self.extras.chunk(self.backend, first, len(x)))
        return payload

    def rows(self, payload: dict[str, Tensor], local: np.ndarray, j: np.ndarray) -> Tensor | float:
        """Baseline ``j`` of the chunk's sequences ``local`` (one entry a row): ``(R, *row)``,
        or the constant (a float) where every baseline is one constant."""
        be = self.backend
        if self.baselines.constant is not None:
            return self.baselines.constant
        if self.shared is not None:
            return be.take(self.shared, be.asarray(j, "int64"))
        flat = be.reshape(payload["b"], (-1, *self.row_shape))
        return be.take(flat, be.asarray(local * self.baselines.n_baselines + j, "int64"))
