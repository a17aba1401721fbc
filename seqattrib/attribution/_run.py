"""Shared orchestration of the gradient methods: validate, open a backend session, run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._validation import (
    SequenceSource,
    as_source,
    check_batch_size,
    check_positive_int,
    resolve_seed,
    resolve_targets,
)
from ..backends import Backend, get_backend
from ..engine import ArraySink, run
from ._kernel import GradientKernel
from .baselines import BaselineSpec, resolve_baselines
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


def probe_outputs(
    backend: Backend, model: Any, source: SequenceSource, output_fn: Callable[[Any], Any] | None
) -> int:
    """Number of model outputs, from a forward pass on the first sequence.

    Nothing is copied back: non-finite outputs show up as non-finite attributions, which the
    kernel refuses on the host.
    """
    out = backend.forward(model, backend.asarray(source.read(0, 1)), output_fn)
    return int(out.shape[1])


def check_common(
    func: str, batch_size: Any, max_cpu_sequences: Any, verbose: Any, output_fn: Any
) -> tuple[int | None, int]:
    size = check_batch_size(batch_size, func)
    limit = check_positive_int(max_cpu_sequences, "max_cpu_sequences", func)
    if not isinstance(verbose, bool):
        raise parameter_error(func, "verbose", "True or False", verbose, error=TypeError)
    if output_fn is not None and not callable(output_fn):
        raise parameter_error(func, "output_fn", "None or a callable", output_fn, error=TypeError)
    return size, limit


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
    be = get_backend(model, backend)
    with be.session(model, device) as resolved_device:
        n_outputs = probe_outputs(be, model, source, output_fn)
        targets, squeeze = resolve_targets(target, n_outputs, func)
        seed = resolve_seed(job.random_state, func)
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
        alphas, weights, output_weights = _path(job)
        kernel = GradientKernel(
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
        k = len(targets)
        shapes: dict[str, tuple[int, ...]] = {"attributions": (k, *source.row_shape)}
        if job.return_delta:
            shapes["delta"] = (k,)
        sink = ArraySink(source.n_sequences, shapes)
        cache_key = ("gradients", be.name, str(resolved_device), source.row_shape, k)
        result = run(
            kernel,
            source,
            be,
            model,
            sink,
            batch_size=size,
            max_cpu_sequences=limit,
            cache_key=cache_key,
            verbose=verbose,
            description=func,
        )
    attributions = result["attributions"]
    if squeeze:
        attributions = attributions[:, 0]
    if not job.return_delta:
        return attributions
    delta = result["delta"][:, 0] if squeeze else result["delta"]
    return attributions, delta
