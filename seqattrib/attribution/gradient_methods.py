"""Saliency, integrated gradients and expected integrated gradients: one gradient method, three
public faces.

A ``GradientMethod`` says which points on which paths each sequence's rows are and how they are
weighted; the kernel (``gradient_kernel``) and the job layer do the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from .._validation import check_positive_int
from ..engine import SequenceSource, as_source
from .adaptive import Engine, run_to_tolerance
from .baselines import RANDOM_KINDS, BaselineSpec, describe_baselines, resolve_baselines
from .gradient_kernel import GradientKernel
from .job import JobContext, drop_target_axis, run_job
from .options import RunOptions, shared_docs
from .paths import quadrature


@dataclass(frozen=True)
class GradientMethod:
    """Which points on which paths, and how each gradient is weighted.

    ``n_steps=None`` is saliency: one point, the input itself, and no baseline.
    """

    func: str
    source: SequenceSource
    n_steps: int | None
    rule: str
    baselines: Any
    n_baselines: int
    per_sequence_array: bool
    multiply_by_inputs: bool
    correct_gradient: bool
    return_delta: bool
    random_state: Any
    return_stderr: bool = False
    tolerance: float | None = None
    max_baselines: int = 0

    def __post_init__(self) -> None:
        func = self.func
        for name in ("multiply_by_inputs", "correct_gradient", "return_delta", "return_stderr"):
            if not isinstance(getattr(self, name), bool):
                raise parameter_error(func, name, "True or False", getattr(self, name))
        self._check_sampling()
        if self.return_delta and not self.multiply_by_inputs:
            raise parameter_error(
                func,
                "return_delta",
                "False when multiply_by_inputs=False",
                True,
                "Completeness holds for attributions multiplied by (x - baseline).",
            )
        if self.n_steps is not None:
            check_positive_int(self.n_steps, "n_steps", func)
            quadrature(self.rule, self.n_steps)  # validates the rule before any work

    def _check_sampling(self) -> None:
        """Standard errors need a spread of baselines; a tolerance needs random ones."""
        func = self.func
        random = self.n_steps is not None and (
            callable(self.baselines)
            or (isinstance(self.baselines, str) and self.baselines in RANDOM_KINDS)
        )
        if self.return_stderr and random and self.n_baselines < 2 and self.tolerance is None:
            raise parameter_error(
                func,
                "return_stderr",
                "False with one random baseline per sequence",
                True,
                "A standard error needs at least two baselines per sequence: use "
                "expected_integrated_gradients with n_baselines >= 2.",
            )
        if self.tolerance is None:
            return
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)):
            raise parameter_error(func, "tolerance", "None or a positive number", self.tolerance)
        if not 0 < float(self.tolerance) < np.inf:
            raise parameter_error(func, "tolerance", "None or a positive number", self.tolerance)
        if not random:
            raise parameter_error(
                func,
                "tolerance",
                "None unless the baselines are random (a name such as 'dinuc_shuffle', or a "
                "callable)",
                self.tolerance,
                "Fixed baselines have no sampling error to reduce.",
            )
        check_positive_int(self.max_baselines, "max_baselines", func)
        if self.max_baselines < self.n_baselines:
            raise parameter_error(
                func,
                "max_baselines",
                f"at least n_baselines ({self.n_baselines})",
                self.max_baselines,
            )

    def path(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Points, gradient weights and (for return_delta) output weights of one path."""
        if self.n_steps is None:
            return np.ones(1), np.ones(1), None
        alphas, weights = quadrature(self.rule, self.n_steps)
        if not self.return_delta:
            return alphas, weights, None
        # f(x) - f(b) from the path's endpoints: add a zero-weight point where a rule lacks one.
        if alphas[0] != 0.0:
            alphas, weights = np.r_[0.0, alphas], np.r_[0.0, weights]
        if alphas[-1] != 1.0:
            alphas, weights = np.r_[alphas, 1.0], np.r_[weights, 0.0]
        output_weights = np.zeros_like(alphas)
        output_weights[0], output_weights[-1] = -1.0, 1.0
        return alphas, weights, output_weights

    def settings(self) -> dict[str, Any]:
        path = self.n_steps is not None
        return {
            "n_steps": self.n_steps,
            "quadrature": self.rule if path else None,
            "n_baselines": self.n_baselines if path else None,
            "baselines": describe_baselines(self.baselines) if path else None,
            "multiply_by_inputs": self.multiply_by_inputs,
            "correct_gradient": self.correct_gradient,
            "return_delta": self.return_delta,
            "return_stderr": self.return_stderr,
            "tolerance": self.tolerance,
            "max_baselines": self.max_baselines if self.tolerance is not None else None,
        }

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {"attributions": (n_targets, *self.source.row_shape)}
        if self.return_delta:
            shapes["delta"] = (n_targets,)
        if self.return_stderr:
            shapes["stderr"] = (n_targets, *self.source.row_shape)
        if self.tolerance is not None:
            shapes["n_baselines"] = (n_targets,)  # the same for every target
        return shapes

    def kernel(self, context: JobContext) -> GradientKernel:
        return self._kernel(context, self.source, None)

    def round_kernel(
        self, context: JobContext, source: SequenceSource, baseline_range: tuple[int, int]
    ) -> GradientKernel:
        """The kernel of one round of a run to a tolerance: baselines ``baseline_range`` of
        each sequence of ``source``, results left as raw sums (see ``adaptive``)."""
        return self._kernel(context, source, baseline_range)

    def _kernel(
        self,
        context: JobContext,
        source: SequenceSource,
        baseline_range: tuple[int, int] | None,
    ) -> GradientKernel:
        spec = (
            BaselineSpec(1, "zeros", constant=0.0)
            if self.n_steps is None
            else resolve_baselines(
                self.baselines,
                self.n_baselines,
                source,
                context.seed,
                self.func,
                per_sequence_array=self.per_sequence_array,
                row_offset=context.row_offset,
                baseline_range=baseline_range,
            )
        )
        alphas, weights, output_weights = self.path()
        return GradientKernel(
            context,
            row_shape=self.source.row_shape,
            alphabet_axis=self.source.alphabet_axis,
            alphas=alphas,
            weights=weights,
            output_weights=output_weights,
            baselines=spec,
            multiply_by_inputs=self.multiply_by_inputs,
            correct_gradient=self.correct_gradient,
            func=self.func,
            return_stderr=self.return_stderr or baseline_range is not None,
            raw_moments=baseline_range is not None,
        )

    def run(
        self, context: JobContext, sink: Any, engine: Engine, block: int, verbose: bool
    ) -> bool:
        """Run to a tolerance when one is set (and return True); else leave the run to the
        job's single pass (False)."""
        if self.tolerance is None:
            return False
        run_to_tolerance(self, context, sink, engine, block, verbose)
        return True


def _attribute(method: GradientMethod, model: Any, options: RunOptions) -> Any:
    result, squeeze = run_job(method, model, method.source, options)
    if isinstance(result, str):
        return result
    result = drop_target_axis(result, squeeze)
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
        rule="",
        baselines="zeros",
        n_baselines=1,
        per_sequence_array=False,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=False,
        random_state=0,
    )
    return _attribute(method, model, options)


@shared_docs
def integrated_gradients(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    baselines: str | np.ndarray | Callable[..., np.ndarray] = "zeros",
    n_steps: int = 25,
    method: str = "riemann_trapezoid",
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
    return_delta: bool = False,
    return_stderr: bool = False,
) -> np.ndarray | tuple[np.ndarray, ...] | str:
    """Integrated gradients from one baseline per sequence.

    Use IG when one reference is meaningful (all zeros, 0.25 everywhere, or a chosen
    background). With a random reference, prefer ``expected_integrated_gradients``, which
    averages over many.

    IG = (x - b) * sum_k w_k grad f(b + a_k (x - b)), with the points a_k and weights w_k of
    ``method``. Rows (sequence, step) of many sequences share each device batch.

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
    method : str
        ``"riemann_trapezoid"`` (n_steps + 1 points), ``"riemann_left"``, ``"riemann_right"``,
        ``"riemann_middle"``, ``"gausslegendre"``.
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
        rule=method,
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


@shared_docs
def expected_integrated_gradients(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    baselines: str | np.ndarray | Callable[..., np.ndarray] = "dinuc_shuffle",
    n_baselines: int = 25,
    n_steps: int = 25,
    method: str = "riemann_trapezoid",
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
    return_delta: bool = False,
    return_stderr: bool = False,
    tolerance: float | None = None,
    max_baselines: int = 400,
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
        ``"zeros"``, ``"uniform"``, an array (n_baselines, *X.shape[1:]) shared by all sequences
        or (n_sequences, n_baselines, *X.shape[1:]), or ``fn(x, n_baselines, rng)``.
    n_baselines : int
        Baselines per sequence (constant baselines collapse to one: they are all equal).
    n_steps : int
        Intervals of each path integral.
    method : str
        Integration rule, as for ``integrated_gradients``.
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
    [[return_delta]]
    [[return_stderr]]
    tolerance : float, optional
        Add baselines to each sequence in rounds (``n_baselines`` first, then doubling) until
        the relative standard error of each of its targets, ||stderr|| / ||attributions||, is
        at most this, or ``max_baselines`` is reached: easy sequences stop early, hard ones get
        more. Random baselines only.
    max_baselines : int
        The most baselines a sequence gets with ``tolerance``.

    Returns
    -------
    [[attribution_returns]]
    n_baselines : int64 array of shape (n_sequences,), only with ``tolerance``
        The baselines each sequence used (also stored in ``out`` files).
    """
    func = "expected_integrated_gradients"
    n_baselines = check_positive_int(n_baselines, "n_baselines", func)
    options = RunOptions.from_arguments(func, locals())
    gradient_method = GradientMethod(
        func=func,
        source=as_source(X, alphabet_axis, func),
        n_steps=n_steps,
        rule=method,
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
