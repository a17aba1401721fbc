"""How the fast-ISM tests compare the fast path with the exact one.

Fast ISM gives the exact path's scores up to float32 rounding; the two round differently (the
fast path adds a layer's change to its reference values, sums windows, completes sums over
positions from tables). Scores are differences of model outputs, so both paths round them at
the scale of the outputs, not of the scores: a model whose outputs are 100 and whose scores are
0.1 has scores with three fewer correct digits in either path. The comparison is therefore
``max|fast - exact| <= 1e-5 * max|exact| + 8 * eps32 * max|outputs|``: relative 1e-5 where the
outputs are of the size of the scores, and float32 rounding of the outputs where they are not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RELATIVE = 1e-5
EPS32 = float(np.finfo(np.float32).eps)


def outputs_scale(model: Any, X: np.ndarray, output_fn: Any = None) -> float:
    """max|outputs| of the model on X (after ``output_fn``)."""
    import seqattrib as sa

    backend = sa.get_backend(model)
    from seqattrib.engine.outputs import Head

    with backend.session(model, None):
        out = backend.to_numpy(backend.forward(model, backend.asarray(X), Head(output_fn)))
    return float(np.abs(out).max())


def fast_error(fast: np.ndarray, exact: np.ndarray, scale: float) -> float:
    """max|fast - exact| as a fraction of what is allowed (<= 1 passes)."""
    allowed = RELATIVE * float(np.abs(exact).max()) + 8 * EPS32 * scale + 1e-30
    return float(np.abs(fast.astype(np.float64) - exact).max()) / allowed


def assert_fast_matches(
    fast: np.ndarray, exact: np.ndarray, model: Any, X: np.ndarray, output_fn: Any = None
) -> None:
    assert fast.shape == exact.shape
    error = fast_error(fast, exact, outputs_scale(model, X, output_fn))
    assert error <= 1.0, f"fast differs from exact by {error:.2f}x the allowed rounding"
