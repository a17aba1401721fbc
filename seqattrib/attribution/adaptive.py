"""EIG to a tolerance: baselines added per sequence in rounds until the standard error of its
attributions is small enough.

Each sequence's random baselines form one stream that depends only on the seed and the
sequence's content, and every sequence follows the same schedule (``n_baselines`` first, then
doubling up to ``max_baselines``), decided by its own relative standard error only. So a
sequence's result does not depend on which other sequences share its run: subsets,
permutations and shards give the same numbers (bit for bit at batch sizes that hold whole
sequences' rounds alike, within float rounding otherwise).

Work goes chunk by chunk (one host block of sequences at a time), so host memory stays bounded
and finished chunks stream to the sink as in any other run.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning, user_stacklevel
from ..engine import ArraySink, SequenceSource
from ..engine.source import as_source
from .gradient_kernel import check_finite

#: The fewest baselines a sequence stops at (a standard error needs a spread of baselines).
MIN_BASELINES = 2
#: engine(kernel, source, sink) runs every row of a kernel over a source into a sink.
Engine = Callable[[Any, SequenceSource, Any], Any]


@dataclass
class _Totals:
    """Float64 sums over the baselines so far, per sequence of a chunk."""

    count: np.ndarray  # (n,) baselines so far
    total: np.ndarray  # (n, K, *row) sum_j A_j
    squares: np.ndarray  # (n, K, *row) sum_j A_j^2
    outputs: np.ndarray | None  # (n, K) sum_j (f(x) - f(b_j)), with return_delta

    def mean(self) -> np.ndarray:
        return self.total / self.count.reshape(-1, *([1] * (self.total.ndim - 1)))

    def standard_error(self) -> np.ndarray:
        shape = (-1, *([1] * (self.total.ndim - 1)))
        n = self.count.reshape(shape)
        mean = self.total / n
        variance = (self.squares - n * mean * mean) / np.maximum(n - 1, 1)
        return np.sqrt(np.maximum(variance, 0.0) / n)


def relative_standard_error(mean: np.ndarray, stderr: np.ndarray) -> np.ndarray:
    """Per sequence and target: ||stderr|| / ||attributions|| over positions and bases.

    Parameters
    ----------
    mean, stderr : arrays of shape (n, K, L, 4) (either layout)

    Returns
    -------
    ndarray of shape (n, K); 0 where both norms are 0, inf where only the mean's is
    """
    n, k = mean.shape[:2]
    top = np.linalg.norm(stderr.reshape(n, k, -1), axis=2)
    bottom = np.linalg.norm(mean.reshape(n, k, -1), axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(top == 0, 0.0, top / bottom)


def run_to_tolerance(
    method: Any,
    context: Any,
    sink: Any,
    engine: Engine,
    block: int,
    verbose: bool,
) -> None:
    """Run ``method`` (a ``GradientMethod`` with a tolerance) over ``context.source`` into
    ``sink``, one chunk of ``block`` sequences at a time."""
    from tqdm.auto import tqdm

    source: SequenceSource = context.source
    progress = tqdm(
        total=source.offset + source.n_sequences,
        initial=source.offset,
        disable=not verbose,
        unit="seq",
        desc=method.func,
        file=sys.stderr,
    )
    short, worst = 0, 0.0  # sequences that did not reach the tolerance, their largest error
    for lo in range(0, source.n_sequences, block):
        hi = min(lo + block, source.n_sequences)
        chunk = source.read(lo, hi)
        totals, above = _rounds(method, context, chunk, source.offset + lo, engine)
        short += len(above)
        if len(above):
            worst = max(worst, float(above.max()))
        sink.write(source.offset + lo, _results(method, totals, context, source.offset + lo))
        progress.update(hi - lo)
    progress.close()
    if short:
        warnings.warn(
            f"{method.func}: {short} of {source.n_sequences} sequences did not reach "
            f"tolerance={method.tolerance} with max_baselines={method.max_baselines} (largest "
            f"relative standard error {worst:.3g}); their attributions use max_baselines "
            "baselines. Raise max_baselines or the tolerance.",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )


def _rounds(
    method: Any, context: Any, chunk: np.ndarray, first: int, engine: Engine
) -> tuple[_Totals, np.ndarray]:
    """Baselines [done, done + more) for the sequences of ``chunk`` (rows ``first ..`` of the
    job) still above tolerance, in rounds; also the largest relative standard error of each
    sequence that ended above it. A sequence stops only once it has at least
    ``MIN_BASELINES`` baselines: one baseline has no spread to estimate a standard error
    from."""
    source: SequenceSource = context.source
    n = len(chunk)
    k = len(context.targets)
    totals = _Totals(
        np.zeros(n),
        np.zeros((n, k, *source.row_shape)),
        np.zeros((n, k, *source.row_shape)),
        np.zeros((n, k)) if method.return_delta else None,
    )
    todo = np.arange(n)
    rse = np.zeros((n, k))
    done, more = 0, method.n_baselines
    while len(todo):
        part = as_source(chunk[todo], source.alphabet_axis, method.func)
        extras = None if context.extras is None else context.extras.rows(first + todo)
        kernel = method.round_kernel(replace(context, extras=extras), part, (done, done + more))
        shapes: dict[str, tuple[int, ...]] = {
            "attributions": (k, *source.row_shape),
            "second_moment": (k, *source.row_shape),
        }
        if method.return_delta:
            shapes["delta"] = (k,)
        result = engine(kernel, part, ArraySink(part.n_sequences, shapes))
        totals.count[todo] += more
        totals.total[todo] += more * result["attributions"].astype(np.float64)
        totals.squares[todo] += more * more * result["second_moment"].astype(np.float64)
        if totals.outputs is not None:
            totals.outputs[todo] += more * result["delta"].astype(np.float64)
        done += more
        rse = relative_standard_error(totals.mean()[todo], totals.standard_error()[todo])
        above = (rse > method.tolerance).any(axis=1) | (done < MIN_BASELINES)
        todo, rse = todo[above], rse[above]
        more = min(done, method.max_baselines - done)
        if more <= 0:
            break
    return totals, rse.max(axis=1) if len(todo) else np.zeros(0)


def _results(method: Any, totals: _Totals, context: Any, first: int) -> dict[str, np.ndarray]:
    mean = totals.mean()
    out = {"attributions": mean.astype(np.float32)}
    check_finite(out["attributions"], first, context.targets, method.func)
    if totals.outputs is not None:
        gap = totals.outputs / totals.count[:, None] - mean.sum(axis=(2, 3))
        out["delta"] = gap.astype(np.float32)
    if method.return_stderr:
        out["stderr"] = totals.standard_error().astype(np.float32)
    k = len(context.targets)
    out["n_baselines"] = np.repeat(totals.count[:, None], k, axis=1).astype(np.float32)
    return out
