"""Work as a flat list of rows: row r belongs to sequence r // rows_per_sequence.

A method decides what a row is (one interpolation step for one baseline, one mutant, ...);
the plan only does the index arithmetic, so a device batch of contiguous rows spans sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowPlan:
    n_sequences: int
    rows_per_sequence: int

    @property
    def n_rows(self) -> int:
        return self.n_sequences * self.rows_per_sequence

    def sequences(self, start: int, stop: int) -> tuple[int, int]:
        """First sequence touched by rows [start, stop) and one past the last."""
        return start // self.rows_per_sequence, (stop - 1) // self.rows_per_sequence + 1

    def completed(self, stop: int) -> int:
        """Sequences whose every row lies before ``stop``."""
        return stop // self.rows_per_sequence

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence index, row within its sequence) of rows [start, stop), as int64 arrays."""
        rows = np.arange(start, stop, dtype=np.int64)
        return rows // self.rows_per_sequence, rows % self.rows_per_sequence
