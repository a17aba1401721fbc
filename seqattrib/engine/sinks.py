"""Where finished sequences go: an in-memory array now, an HDF5 file (``seqattrib.io``) later.

A sink receives blocks of consecutive finished sequences, at most ``max_cpu_sequences`` at a
time, in order. ``result()`` returns what the public function hands back.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Sink(Protocol):
    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        """Store rows ``start : start + len(block[name])`` of every named output."""

    def result(self) -> Any:
        """The finished output (arrays, or a file path)."""


class ArraySink:
    """Preallocated host arrays, one per named output: ``shapes`` maps name -> row shape."""

    def __init__(self, n_sequences: int, shapes: dict[str, tuple[int, ...]]) -> None:
        self.arrays = {
            name: np.empty((n_sequences, *shape), dtype=np.float32)
            for name, shape in shapes.items()
        }
        self.n_written = 0

    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        if start != self.n_written:
            raise RuntimeError(f"ArraySink expected rows from {self.n_written}, got {start}")
        n = 0
        for name, values in block.items():
            n = len(values)
            self.arrays[name][start : start + n] = values
        self.n_written += n

    def result(self) -> dict[str, np.ndarray]:
        return self.arrays
