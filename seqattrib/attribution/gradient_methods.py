"""Saliency, integrated gradients and expected integrated gradients: one gradient method
(``gradient_job.GradientMethod``), three public faces."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._errors import deprecated_alias
from ..engine import as_source
from .baselines import DefaultCount, baseline_count
from .gradient_job import EIG_DEFAULTS, GradientMethod, eig_preset
from .job import run_job
from .options import RunOptions, shared_docs


def _attribute(method: GradientMethod, model: Any, options: RunOptions) -> Any:
    result, _ = run_job(method, model, method.source, options)
    if isinstance(result, str):
        return result
    names = ["attributions"] + ["delta"] * method.return_delta + ["stderr"] * method.return_stderr
    returned = [result[name] for name in names]
    if method.tolerance is not None:
        counts = result["n_baselines"]
        returned.append((counts if counts.ndim == 1 else counts[:, 0]).astype(np.int64))
    return tuple(returned) if len(returned) > 1 else returned[0]


@shared_docs
def saliency(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    alphabet_axis: int | None = None,
    correct_gradient: bool = False,
    multiply_by_inputs: bool = False,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    regions: Any = None,
    shard: tuple[int, int] | None = None,
    args: Any = None,
) -> np.ndarray | str:
    """Gradients of model outputs with respect to the input.

    Use saliency for a fast first look (one backward pass per sequence); it explains the
    model locally around the input. Integrated gradients or EIG attribute the output relative
    to a reference and satisfy completeness.

    Parameters
    ----------
    [[model]]
    [[X]]
    [[target]]
    [[output_fn]]
    [[alphabet_axis]]
    [[correct_gradient]]
    multiply_by_inputs : bool
        Return gradient x input instead of the gradient.
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    [[out]]
    [[overwrite]]
    [[regions]]
    [[shard]]
    [[args]]

    Returns
    -------
    ndarray of float32, shape (n_sequences, *X.shape[1:]) for an int target, else
    (n_sequences, K, *X.shape[1:]), in the layout of X; the file's path with ``out=``.
    """
    func = "saliency"
    options = RunOptions.from_arguments(func, locals())
    method = GradientMethod(
        func=func,
        source=as_source(X, alphabet_axis, func),
        n_steps=None,
        quadrature="",
        baselines="zeros",
        n_baselines=1,
        per_sequence_array=False,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=False,
        random_state=0,
    )
    return _attribute(method, model, options)


@deprecated_alias(method="quadrature")
@shared_docs
def integrated_gradients(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    baselines: str | np.ndarray | Callable[..., np.ndarray] = "zeros",
    n_steps: int = 25,
    quadrature: str = "riemann_trapezoid",
    multiply_by_inputs: bool = True,
    alphabet_axis: int | None = None,
    correct_gradient: bool = False,
    random_state: int | np.random.Generator | None = 0,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    regions: Any = None,
    shard: tuple[int, int] | None = None,
    args: Any = None,
    return_delta: bool = False,
    return_stderr: bool = False,
) -> np.ndarray | tuple[np.ndarray, ...] | str:
    """Integrated gradients from one baseline per sequence.

    Use IG when one reference is meaningful (all zeros, 0.25 everywhere, or a chosen
    background). With a random reference, prefer ``expected_integrated_gradients``, which
    averages over many.

    IG = (x - b) * sum_k w_k grad f(b + a_k (x - b)), with the points a_k and weights w_k of
    the rule ``quadrature``. Rows (sequence, step) of many sequences share each device batch.

    Parameters
    ----------
    [[model]]
    [[X]]
    [[target]]
    [[output_fn]]
    baselines : str, array or callable
        ``"zeros"``, ``"uniform"`` (0.25), ``"shuffle"``, ``"dinuc_shuffle"``, ``"random"``, an
        array of shape X.shape[1:] (shared) or X.shape (one per sequence) in the layout of X, or
        ``fn(x, n_baselines, rng) -> (n_baselines, *x.shape)`` called per sequence.
    n_steps : int
        Intervals of the path integral.
    quadrature : str
        The rule of the path integral: ``"riemann_trapezoid"`` (n_steps + 1 points),
        ``"riemann_left"``, ``"riemann_right"``, ``"riemann_middle"``, ``"gausslegendre"``.
    multiply_by_inputs : bool
        False returns the path-averaged gradient (hypothetical scores) without the (x - b)
        factor.
    [[alphabet_axis]]
    [[correct_gradient]]
    [[random_state]]
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    [[out]]
    [[overwrite]]
    [[regions]]
    [[shard]]
    [[args]]
    [[return_delta]]
    return_stderr : bool
        Also return the standard error of the attributions: 0 for a fixed baseline; an error
        for one random baseline (use ``expected_integrated_gradients``).

    Returns
    -------
    [[attribution_returns]]
    """
    func = "integrated_gradients"
    options = RunOptions.from_arguments(func, locals())
    gradient_method = GradientMethod(
        func=func,
        source=as_source(X, alphabet_axis, func),
        n_steps=n_steps,
        quadrature=quadrature,
        baselines=baselines,
        n_baselines=1,
        per_sequence_array=False,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=return_delta,
        random_state=random_state,
        return_stderr=return_stderr,
    )
    return _attribute(gradient_method, model, options)


@deprecated_alias(method="quadrature")
@shared_docs
def expected_integrated_gradients(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    baselines: str | np.ndarray | Callable[..., np.ndarray] = "dinuc_shuffle",
    n_baselines: int = DefaultCount(EIG_DEFAULTS[0]),
    n_steps: int = EIG_DEFAULTS[1],
    quadrature: str = EIG_DEFAULTS[2],
    multiply_by_inputs: bool = True,
    alphabet_axis: int | None = None,
    correct_gradient: bool = False,
    random_state: int | np.random.Generator | None = 0,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    regions: Any = None,
    shard: tuple[int, int] | None = None,
    args: Any = None,
    return_delta: bool = False,
    return_stderr: bool = False,
    tolerance: float | None = None,
    max_baselines: int = 400,
    preset: str | None = None,
) -> np.ndarray | tuple[np.ndarray, ...] | str:
    """Expected integrated gradients: IG averaged over many baselines per sequence.

    Use EIG for DNA models by default: dinucleotide-shuffled references keep the sequence's
    composition, so attributions point at motifs rather than at base content. Set
    ``multiply_by_inputs=False`` for hypothetical scores (what TF-MoDISco takes).

    EIG = mean_j (x - b_j) * sum_k w_k grad f(b_j + a_k (x - b_j)). Rows (sequence, baseline,
    step) of many sequences share each device batch; the average is taken on the device.

    Parameters
    ----------
    [[model]]
    [[X]]
    [[target]]
    [[output_fn]]
    baselines : str, array or callable
        ``"dinuc_shuffle"`` (keeps every dinucleotide count), ``"shuffle"``, ``"random"``,
        ``"zeros"``, ``"uniform"``, an array ``(n_baselines, *X.shape[1:])`` shared by all
        sequences or ``(n_sequences, n_baselines, *X.shape[1:])``, or ``fn(x, n_baselines, rng)``.
    n_baselines : int
        Baselines per sequence (constant baselines collapse to one: they are all equal). An
        array of baselines carries its own count, which replaces the default.
    n_steps : int
        Points (Gauss-Legendre) or intervals (trapezoid) of each path integral.
    quadrature : str
        The rule of each path integral, as for ``integrated_gradients``. The default, 64
        baselines x 3 Gauss-Legendre points (192 rows per sequence), is closer to the
        expectation than 25 baselines x 25 trapezoid steps (650 rows) on the models measured:
        the random baselines' sampling error dominates, so rows buy more as baselines than as
        steps.
    multiply_by_inputs : bool
        False returns the gradient averaged over paths and baselines (hypothetical scores).
    [[alphabet_axis]]
    [[correct_gradient]]
    [[random_state]]
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    [[out]]
    [[overwrite]]
    [[regions]]
    [[shard]]
    [[args]]
    [[return_delta]]
    [[return_stderr]]
    tolerance : float, optional
        Add baselines to each sequence in rounds (``n_baselines`` first, then doubling) until
        the relative standard error of each of its targets, ||stderr|| / ||attributions||, is
        at most this, or ``max_baselines`` is reached: easy sequences stop early, hard ones get
        more. A sequence stops with at least 2 baselines (one has no spread to estimate an
        error from); sequences still above the tolerance at ``max_baselines`` raise one
        ``SeqAttribWarning`` saying how many. Random baselines only.
    max_baselines : int
        The most baselines a sequence gets with ``tolerance``.
    preset : {None, "crested"}
        ``"crested"``: CREsted's settings, 25 baselines x 25 trapezoid steps (the defaults of
        earlier versions of this package), in place of ``n_baselines``, ``n_steps`` and
        ``quadrature``.

    Returns
    -------
    [[attribution_returns]]
    n_baselines : int64 array of shape (n_sequences,), only with ``tolerance``
        The baselines each sequence used (also stored in ``out`` files).
    """
    func = "expected_integrated_gradients"
    count, n_steps, quadrature = eig_preset(preset, (n_baselines, n_steps, quadrature), func)
    if isinstance(n_baselines, DefaultCount):  # the preset's count is a default too
        count = DefaultCount(count)
    n_baselines = baseline_count(baselines, count, func)
    options = RunOptions.from_arguments(func, locals())
    gradient_method = GradientMethod(
        func=func,
        source=as_source(X, alphabet_axis, func),
        n_steps=n_steps,
        quadrature=quadrature,
        baselines=baselines,
        n_baselines=n_baselines,
        per_sequence_array=True,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=return_delta,
        random_state=random_state,
        return_stderr=return_stderr,
        tolerance=tolerance,
        max_baselines=max_baselines,
    )
    return _attribute(gradient_method, model, options)
