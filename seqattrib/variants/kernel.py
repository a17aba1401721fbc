"""Reference and alternative predictions of many variants per device batch (a forward-only kernel).

A "sequence" of the engine is a variant (a row of the table). Its rows are its alternative window
and, when it opens a new reference window, that window first: variants of one position (a split
multi-allelic record, or records at one position) share one reference pass. An SNV's alternative
window is made on the device from its reference window (base ``c`` replaced, as ISM makes its
mutants); the alternative window of an indel or a longer substitution needs genome bases outside
the reference window, so it is encoded on the host and copied with the batch that runs it.
Outputs of all K targets come from one forward pass; the scores are taken on the host.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning
from ..attribution.gradient_kernel import check_finite
from ..backends import Backend
from ..engine.outputs import Head
from . import windows
from .catalog import VariantStream

Tensor = Any


class VariantKernel:
    """Rows: [reference window,] alternative window, per variant, of many variants per batch."""

    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        head: Head,
        targets: Sequence[int],
        stream: VariantStream,
        offset: int,
        first: int,
        n_variants: int,
        scores: Sequence[str],
        func: str,
        derive: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
        derived: Sequence[str] = (),
    ) -> None:
        self.backend, self.model, self.head = backend, model, head
        self.stream, self.scores, self.func = stream, tuple(scores), func
        self.derive, self.derived = derive, tuple(derived)
        self.targets = list(targets)
        self._targets = backend.asarray(np.asarray(self.targets), "int64")
        found = stream.catalog
        self._offset = offset  # the catalog row of the job's first variant (a shard's start)
        self._first = first  # the catalog row of this run's first variant (past resumed rows)
        self._opens = found.opens[first : first + n_variants].copy()
        self._opens[0] = True  # the first variant of a run (a shard, a resumed run) has its own
        self._snv_base = found.snv_base
        self.rows_per_sequence = 1 + self._opens.astype(np.int64)
        length = stream.length
        at = np.zeros((1, length, 1), np.float32)
        at[0, windows.centre(length)] = 1.0
        self._at = backend.asarray(at)
        self._alts: dict[int, np.ndarray] = {}
        self._end = 0  # catalog row after the last prepared chunk
        self._last_ref: np.ndarray | None = None
        self._warned = False

    def _catalog_rows(self, first: int, n: int) -> np.ndarray:
        """Catalog rows of the engine's rows ``first .. first + n - 1`` of the job's input."""
        return np.arange(first, first + n) + self._offset

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        be = self.backend
        rows = self._catalog_rows(first, len(x))
        variants = self.stream.variants(int(rows[0]), int(rows[-1]) + 1)
        others = [v for v in variants if self._snv_base[v.index] < 0]
        if others:
            for v, window in zip(others, self.stream.alt_windows(others), strict=True):
                self._alts[v.index] = window
        self._end = int(rows[-1]) + 1
        return {
            "x": be.asarray(x.astype(np.int8)),
            "base": be.asarray(np.maximum(self._snv_base[rows], 0), "int64"),
        }

    def compute(
        self,
        payload: dict[str, Tensor],
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> dict[str, Tensor]:
        be = self.backend
        x = payload["x"]
        # the payload holds the variants up to the last prepared chunk, so its first row is:
        rows = self._end - int(x.shape[0]) + local
        is_ref = self._opens[rows - self._first] & (row_in_sequence == 0)
        snv = ~is_ref & (self._snv_base[rows] >= 0)
        other = ~is_ref & ~snv
        parts = []
        if is_ref.any():
            parts.append(be.take(x, be.asarray(local[is_ref], "int64")))
        if snv.any():
            at = be.asarray(local[snv], "int64")
            reference = be.take(x, at)
            base = be.reshape(be.one_hot(be.take(payload["base"], at), 4), (-1, 1, 4))
            parts.append(reference + self._at * (base - reference))
        if other.any():
            parts.append(be.asarray(np.stack([self._alts[int(r)] for r in rows[other]])))
        outputs = be.take(be.forward(self.model, be.concat(parts), self.head), self._targets, 1)
        n_ref = int(is_ref.sum())
        alt_segments = np.concatenate([segment[snv], segment[other]])
        result = {
            "ref": be.segment_sum(
                outputs[:n_ref], be.asarray(segment[is_ref], "int64"), n_segments
            ),
            "alt": be.segment_sum(outputs[n_ref:], be.asarray(alt_segments, "int64"), n_segments),
        }
        for done in [r for r in self._alts if r < rows.min()]:
            del self._alts[done]
        return result

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        ref, alt = block["ref"].copy(), block["alt"]
        n = len(ref)
        rows = self._catalog_rows(first, n)
        opens = self._opens[rows - self._first]
        # variants that share the previous variant's reference window take its outputs
        source = np.maximum.accumulate(np.where(opens, np.arange(n), -1))
        if (source < 0).any():
            assert self._last_ref is not None
            ref[source < 0] = self._last_ref
        ref[source >= 0] = ref[source[source >= 0]]
        self._last_ref = ref[-1].copy()
        check_finite(ref, int(rows[0]), self.targets, self.func)
        check_finite(alt, int(rows[0]), self.targets, self.func)
        out = {"ref": ref, "alt": alt}
        if "delta" in self.scores:
            out["delta"] = alt - ref
        if "log_ratio" in self.scores:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.log(alt.astype(np.float64)) - np.log(ref.astype(np.float64))
            positive = (alt > 0) & (ref > 0)
            out["log_ratio"] = np.where(positive, ratio, np.nan).astype(np.float32)
            if not positive.all() and not self._warned:
                self._warned = True
                i = int(np.flatnonzero(~positive.all(axis=1))[0])
                v = self.stream.variants(int(rows[i]), int(rows[i]) + 1)[0]
                warnings.warn(
                    f"{self.func}: log_ratio is NaN where a prediction is not positive (first: "
                    f"{v.label}). It is meant for positive outputs (counts, probabilities); pass "
                    "score='delta' for other outputs, or an output_fn that returns positive "
                    "values.",
                    SeqAttribWarning,
                    stacklevel=2,
                )
        if self.derive is not None:
            extra = self.derive(out)
            if set(extra) != set(self.derived):
                raise RuntimeError(
                    f"{self.func}: derived columns {sorted(extra)}, expected {list(self.derived)}"
                )
            out.update(extra)
        return out
