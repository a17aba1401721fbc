"""Reference and alternative predictions of many variants per device batch (a forward-only kernel).

A "sequence" of the engine is a variant (a row of the table). Its windows are its alternative
window and, when it opens a new reference window, that window first: variants of one position (a
split multi-allelic record, or records at one position) share one reference pass. Each window is
predicted in V views (window shifts along the genome, on one or both strands), one engine row per
view, and batches hold whole windows (``row_alignment``). An SNV's alternative window is made on
the device from its reference window (base ``c`` replaced, as ISM makes its mutants); the
alternative window of an indel or a longer substitution needs genome bases outside the reference
window, so it is encoded on the host and copied with the batch that runs it. Shifted views are cut
on the device from windows read with a margin of genome bases; reverse-strand views are the
windows reverse-complemented on the device, their outputs turned back by the heads.

Outputs of all K targets (and the positional output that profile and bin scores compare) come
from one forward pass per strand; the views are averaged on the device, the positional scores are
taken there (one number per variant crosses to the host), the other scores on the host.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning
from ..attribution.gradient_kernel import check_finite
from ..backends import Backend
from ..engine.outputs import Head
from ..heads.base import NamedHead
from . import windows
from .catalog import VariantStream
from .scores import COUNTS, POSITIONAL, ScoringHead, Views, compare, host_scores

Tensor = Any


class VariantKernel:
    """Rows: the views of [the reference window,] the alternative window, per variant, of many
    variants per batch."""

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
        views: Views,
        positional: NamedHead | None = None,
        derive: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
        derived: Sequence[str] = (),
    ) -> None:
        self.backend, self.model = backend, model
        self.stream, self.scores, self.func = stream, tuple(scores), func
        self.derive, self.derived = derive, tuple(derived)
        self.targets = list(targets)
        self.views = views
        found = stream.catalog
        self._offset = offset  # the catalog row of the job's first variant (a shard's start)
        self._first = first  # the catalog row of this run's first variant (past resumed rows)
        self._opens = found.opens[first : first + n_variants].copy()
        self._opens[0] = True  # the first variant of a run (a shard, a resumed run) has its own
        self._snv_base = found.snv_base
        self.rows_per_sequence = views.n * (1 + self._opens.astype(np.int64))
        self.row_alignment = views.n  # a batch holds every view of its windows
        self._margin = views.margin
        self._padded = stream.length + 2 * self._margin
        at = np.zeros((1, self._padded, 1), np.float32)
        at[0, windows.centre(stream.length) + self._margin] = 1.0
        self._at = backend.asarray(at)
        self._heads = {
            reverse: Head(
                ScoringHead(head.output_fn, tuple(self.targets), positional, reverse, func), func
            )
            for reverse in ((False, True) if views.strands == "both" else (False,))
        }
        self._positional = positional is not None
        self._counts = any(s in COUNTS for s in self.scores)
        self._compared = tuple(
            dict.fromkeys(
                "jsd" if POSITIONAL[s] == "profile" else s for s in self.scores if s in POSITIONAL
            )
        )
        self._alts: dict[int, np.ndarray] = {}
        self._end = 0  # catalog row after the last prepared chunk
        self._last_ref: dict[str, np.ndarray] = {}
        self._ref_vector: Tensor | None = None  # the last reference window's positional output
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
            alts = self.stream.alt_windows(others, self._padded)
            for v, window in zip(others, alts, strict=True):
                self._alts[v.index] = window
        self._end = int(rows[-1]) + 1
        reference = x.astype(np.int8)
        if self._margin:
            left, right = self.stream.flanks(variants, self._margin)
            reference = np.concatenate([left, reference, right], axis=1)
        return {
            "x": be.asarray(reference),
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
        be, ops, n_views = self.backend, self.backend.head_ops, self.views.n
        x = payload["x"]
        # one window per n_views rows (batches hold whole windows)
        local, segment = local[::n_views], segment[::n_views]
        window = row_in_sequence[::n_views] // n_views
        # the payload holds the variants up to the last prepared chunk, so its first row is:
        rows = self._end - int(x.shape[0]) + local
        is_ref = self._opens[rows - self._first] & (window == 0)
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
        outputs = self._predict(be.concat(parts))  # (n_views, windows, K [+ P])
        k = len(self.targets)
        n_ref = int(is_ref.sum())
        ref_ids = be.asarray(segment[is_ref], "int64")
        alt_ids = be.asarray(np.concatenate([segment[snv], segment[other]]), "int64")
        values = be.mean(outputs[:, :, :k], 0, keepdims=False)
        result = {
            "ref": be.segment_sum(values[:n_ref], ref_ids, n_segments),
            "alt": be.segment_sum(values[n_ref:], alt_ids, n_segments),
        }
        if self._counts:  # the counts averaged as counts: log-mean-exp of the log counts
            counts = ops.logsumexp(outputs[:, :, :k], 0) - math.log(n_views)
            result["ref_counts"] = be.segment_sum(counts[:n_ref], ref_ids, n_segments)
            result["alt_counts"] = be.segment_sum(counts[n_ref:], alt_ids, n_segments)
        if self._positional:
            vectors = be.mean(ops.float64(outputs[:, :, k:]), 0, keepdims=False)
            # each alternative window against the last reference window before it
            before = np.cumsum(is_ref) - 1
            order = np.concatenate([np.flatnonzero(snv), np.flatnonzero(other)])
            table, index = vectors[:n_ref], before[order]
            if (index < 0).any():
                assert self._ref_vector is not None
                table, index = be.concat([self._ref_vector, table]), index + 1
            ref = be.take(table, be.asarray(index, "int64"))
            for name, value in compare(ops, vectors[n_ref:], ref, self._compared).items():
                result[name] = be.segment_sum(be.reshape(value, (-1, 1)), alt_ids, n_segments)
            if n_ref:
                self._ref_vector = vectors[n_ref - 1 : n_ref]
        for done in [r for r in self._alts if r < rows.min()]:
            del self._alts[done]
        return result

    def _predict(self, windows_: Tensor) -> Tensor:
        """Outputs of every view of (n, padded length, 4) windows: (n_views, n, K [+ P])."""
        be, ops = self.backend, self.backend.head_ops
        length, margin = self.stream.length, self._margin
        n = int(windows_.shape[0])
        cut = [ops.narrow(windows_, 1, margin - s, margin - s + length) for s in self.views.shifts]
        inputs = be.concat(cut) if len(cut) > 1 else cut[0]
        outputs = [be.forward(self.model, inputs, self._heads[False])]
        if self.views.strands == "both":
            reverse = ops.flip(inputs, [1, 2])  # reversed, A<->T and C<->G (ACGT order)
            outputs.append(be.forward(self.model, reverse, self._heads[True]))
        stacked = be.concat(outputs)
        return be.reshape(stacked, (self.views.n, n, int(stacked.shape[1])))

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        n = len(block["ref"])
        rows = self._catalog_rows(first, n)
        opens = self._opens[rows - self._first]
        # variants that share the previous variant's reference window take its outputs
        source = np.maximum.accumulate(np.where(opens, np.arange(n), -1))
        shared = [q for q in ("ref", "ref_counts") if q in block]
        refs = {}
        for q in shared:
            ref = block[q].copy()
            if (source < 0).any():
                ref[source < 0] = self._last_ref[q]
            ref[source >= 0] = ref[source[source >= 0]]
            self._last_ref[q] = ref[-1].copy()
            refs[q] = ref
        ref, alt = refs["ref"], block["alt"]
        check_finite(ref, int(rows[0]), self.targets, self.func)
        check_finite(alt, int(rows[0]), self.targets, self.func)
        counts = (refs["ref_counts"], block["alt_counts"]) if self._counts else None
        compared = {name: block[name][:, 0] for name in self._compared}
        out = {"ref": ref, "alt": alt, **host_scores(ref, alt, self.scores, counts, compared)}
        if "log_ratio" in out:
            positive = (alt > 0) & (ref > 0)
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
