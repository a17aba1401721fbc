"""Shared orchestration of the gradient methods: validate, open a backend session, run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._pipeline import check_common, execute
from .._validation import SequenceSource, as_source, check_positive_int
from ..backends import Backend
from ._kernel import GradientKernel
from .baselines import BaselineSpec, describe_baselines, resolve_baselines
from .quadrature import quadrature


@dataclass
class GradientJob:
    """Everything a gradient method varies: which points on which paths, and weighting."""

    func: str
    n_steps: int | None  # None: saliency (one point, the input itself)
    method: str
    baselines: Any
    n_baselines: int
    per_sequence_array: bool
    multiply_by_inputs: bool
    correct_gradient: bool
    return_delta: bool
    random_state: Any


def _path(job: GradientJob) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Points, gradient weights and (for return_delta) output weights of one path."""
    if job.n_steps is None:
        return np.ones(1), np.ones(1), None
    alphas, weights = quadrature(job.method, job.n_steps)
    if not job.return_delta:
        return alphas, weights, None
    # f(x) - f(b) from the path's endpoints: add a zero-weight point where a rule lacks one.
    if alphas[0] != 0.0:
        alphas, weights = np.r_[0.0, alphas], np.r_[0.0, weights]
    if alphas[-1] != 1.0:
        alphas, weights = np.r_[alphas, 1.0], np.r_[weights, 0.0]
    output_weights = np.zeros_like(alphas)
    output_weights[0], output_weights[-1] = -1.0, 1.0
    return alphas, weights, output_weights


def gradient_attribution(
    job: GradientJob,
    model: Any,
    X: Any,
    *,
    target: Any,
    output_fn: Callable[[Any], Any] | None,
    alphabet_axis: int | None,
    batch_size: Any,
    max_cpu_sequences: Any,
    device: Any,
    verbose: Any,
    backend: str | None,
    out: Any = None,
    overwrite: bool = False,
    regions: Any = None,
) -> Any:
    func = job.func
    size, limit = check_common(func, batch_size, max_cpu_sequences, verbose, output_fn)
    if not isinstance(job.multiply_by_inputs, bool):
        raise parameter_error(func, "multiply_by_inputs", "True or False", job.multiply_by_inputs)
    if not isinstance(job.correct_gradient, bool):
        raise parameter_error(func, "correct_gradient", "True or False", job.correct_gradient)
    if job.return_delta and not job.multiply_by_inputs:
        raise parameter_error(
            func,
            "return_delta",
            "False when multiply_by_inputs=False",
            True,
            "Completeness holds for attributions multiplied by (x - baseline).",
        )
    if job.n_steps is not None:
        check_positive_int(job.n_steps, "n_steps", func)
    source = as_source(X, alphabet_axis, func)
    if job.n_steps is not None:
        quadrature(job.method, job.n_steps)  # validates the rule before any work
    alphas, weights, output_weights = _path(job)

    def make_kernel(
        be: Backend, targets: list[int], seed: int, todo: SequenceSource
    ) -> GradientKernel:
        spec: BaselineSpec = (
            BaselineSpec(1, "zeros", constant=0.0)
            if job.n_steps is None
            else resolve_baselines(
                job.baselines,
                job.n_baselines,
                source,
                seed,
                func,
                per_sequence_array=job.per_sequence_array,
            )
        )
        return GradientKernel(
            be,
            model,
            output_fn=output_fn,
            targets=targets,
            row_shape=source.row_shape,
            alphabet_axis=source.alphabet_axis,
            alphas=alphas,
            weights=weights,
            output_weights=output_weights,
            baselines=spec,
            multiply_by_inputs=job.multiply_by_inputs,
            correct_gradient=job.correct_gradient,
            func=func,
        )

    def shapes(k: int) -> dict[str, tuple[int, ...]]:
        row: dict[str, tuple[int, ...]] = {"attributions": (k, *source.row_shape)}
        if job.return_delta:
            row["delta"] = (k,)
        return row

    settings = {
        "n_steps": job.n_steps,
        "quadrature": job.method if job.n_steps is not None else None,
        "n_baselines": job.n_baselines if job.n_steps is not None else None,
        "baselines": describe_baselines(job.baselines) if job.n_steps is not None else None,
        "multiply_by_inputs": job.multiply_by_inputs,
        "correct_gradient": job.correct_gradient,
        "return_delta": job.return_delta,
    }
    result, squeeze = execute(
        func=func,
        model=model,
        source=source,
        backend=backend,
        device=device,
        target=target,
        output_fn=output_fn,
        batch_size=size,
        max_cpu_sequences=limit,
        verbose=verbose,
        random_state=job.random_state,
        make_kernel=make_kernel,
        shapes=shapes,
        settings=settings,
        out=out,
        overwrite=overwrite,
        regions=regions,
    )
    if isinstance(result, str):
        return result
    attributions = result["attributions"]
    if squeeze:
        attributions = attributions[:, 0]
    if not job.return_delta:
        return attributions
    delta = result["delta"][:, 0] if squeeze else result["delta"]
    return attributions, delta
