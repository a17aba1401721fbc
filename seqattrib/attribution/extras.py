"""The model's other inputs (``args=``): arrays passed to the model after X on every call.

An array whose first axis has one entry per sequence of X goes with its sequence (a control
track, a cell-type index): each row of a device batch gets its sequence's entry. Any other array
is fixed and goes to every row (broadcast along a new first axis). Attributions are taken with
respect to X only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error

Tensor = Any


@dataclass(frozen=True)
class ExtraInputs:
    """Host arrays of the model's other inputs, in the order the model takes them."""

    arrays: tuple[np.ndarray, ...]
    per_sequence: tuple[bool, ...]

    @classmethod
    def check(cls, args: Any, n_sequences: int, func: str) -> ExtraInputs | None:
        """``args`` (an array, or a tuple/list of arrays; None: no other input) checked."""
        if args is None:
            return None
        items = list(args) if isinstance(args, (tuple, list)) else [args]
        arrays = []
        for i, item in enumerate(items):
            array = np.asarray(item.detach().cpu() if hasattr(item, "detach") else item)
            if array.dtype.kind not in "fiub" or (
                array.dtype.kind == "f" and not np.isfinite(array).all()
            ):
                raise parameter_error(
                    func,
                    "args",
                    "numeric, finite arrays (the model's inputs after X)",
                    f"input {i} of dtype {array.dtype}",
                    described=True,
                    error=TypeError if array.dtype.kind not in "fiub" else ValueError,
                )
            arrays.append(np.ascontiguousarray(array))
        per_sequence = tuple(a.ndim > 0 and a.shape[0] == n_sequences for a in arrays)
        return cls(tuple(arrays), per_sequence)

    def describe(self) -> list[str]:
        """What identifies the inputs (stored with tracks files, compared on resume)."""
        return [
            f"{'per-sequence' if each else 'fixed'}{list(a.shape)}:{a.dtype.str}:"
            + hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()
            for a, each in zip(self.arrays, self.per_sequence, strict=True)
        ]

    def rows(self, indices: np.ndarray) -> ExtraInputs:
        """The inputs of the sequences at ``indices`` (fixed ones unchanged)."""
        arrays = tuple(
            a[indices] if each else a
            for a, each in zip(self.arrays, self.per_sequence, strict=True)
        )
        return ExtraInputs(arrays, self.per_sequence)

    def fixed(self, backend: Any) -> list[Tensor | None]:
        """Device copies of the fixed inputs, with a first axis of 1 (None for the others)."""
        return [
            None if each else backend.asarray(a[None], _dtype(a))
            for a, each in zip(self.arrays, self.per_sequence, strict=True)
        ]

    def chunk(self, backend: Any, first: int, n: int) -> dict[str, Tensor]:
        """Device copies of the per-sequence inputs of sequences ``first .. first + n - 1``,
        named for a kernel's payload."""
        return {
            f"extra{i}": backend.asarray(a[first : first + n], _dtype(a))
            for i, (a, each) in enumerate(zip(self.arrays, self.per_sequence, strict=True))
            if each
        }

    def for_rows(
        self, backend: Any, payload: dict[str, Tensor], fixed: Sequence[Tensor | None], local: Any
    ) -> list[Tensor]:
        """Every input for a batch of rows: ``local`` indexes the payload's sequences."""
        out = []
        zeros = None
        for i, each in enumerate(self.per_sequence):
            if each:
                out.append(backend.take(payload[f"extra{i}"], local))
            else:
                if zeros is None:
                    zeros = local * 0
                out.append(backend.take(fixed[i], zeros))
        return out


def _dtype(array: np.ndarray) -> str:
    return "int64" if array.dtype.kind in "iub" else "float32"
