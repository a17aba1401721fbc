"""Work as a flat list of rows, sequence after sequence.

A method decides what a row is (one interpolation step for one baseline, one mutant, ...) and
how many rows each sequence has (the same number, or one count per sequence); the plan only does
the index arithmetic, so a device batch of contiguous rows spans sequences.
"""

from __future__ import annotations

import numpy as np


class RowPlan:
    """Rows of ``n_sequences`` sequences: ``rows_per_sequence`` is an int or (n_sequences,)."""

    def __init__(self, n_sequences: int, rows_per_sequence: int | np.ndarray) -> None:
        self.n_sequences = n_sequences
        if isinstance(rows_per_sequence, (int, np.integer)):
            self._uniform: int | None = int(rows_per_sequence)
            self.n_rows = n_sequences * self._uniform
            self.mean_rows = float(self._uniform)
        else:
            counts = np.asarray(rows_per_sequence, dtype=np.int64)
            if counts.shape != (n_sequences,) or (counts < 1).any():
                raise ValueError("every sequence needs at least one row")
            self._uniform = None
            self._ends = np.cumsum(counts)
            self._starts = self._ends - counts
            self.n_rows = int(self._ends[-1])
            self.mean_rows = self.n_rows / n_sequences

    def sequences(self, start: int, stop: int) -> tuple[int, int]:
        """First sequence touched by rows [start, stop) and one past the last."""
        if self._uniform is not None:
            return start // self._uniform, (stop - 1) // self._uniform + 1
        first = int(np.searchsorted(self._ends, start, side="right"))
        last = int(np.searchsorted(self._ends, stop - 1, side="right"))
        return first, last + 1

    def completed(self, stop: int) -> int:
        """Sequences whose every row lies before ``stop``."""
        if self._uniform is not None:
            return stop // self._uniform
        return int(np.searchsorted(self._ends, stop, side="right"))

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence index, row within its sequence) of rows [start, stop), as int64 arrays."""
        rows = np.arange(start, stop, dtype=np.int64)
        if self._uniform is not None:
            return rows // self._uniform, rows % self._uniform
        sequence = np.searchsorted(self._ends, rows, side="right")
        return sequence, rows - self._starts[sequence]
