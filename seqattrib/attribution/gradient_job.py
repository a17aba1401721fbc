"""What a gradient method runs: which points on which paths each sequence's rows are, how they
are weighted, and its kernel (the job layer's view of saliency, IG and EIG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._validation import check_positive_int
from ..engine import SequenceSource
from .adaptive import MIN_BASELINES, Engine, run_to_tolerance
from .baselines import RANDOM_KINDS, BaselineSpec, describe_baselines, resolve_baselines
from .gradient_kernel import GradientKernel
from .job import JobContext
from .paths import quadrature

#: EIG's defaults: (n_baselines, n_steps, method), and the named presets.
EIG_DEFAULTS = (64, 3, "gausslegendre")
EIG_PRESETS = {"crested": (25, 25, "riemann_trapezoid")}


def eig_preset(preset: Any, given: tuple[int, int, str], func: str) -> tuple[int, int, str]:
    """EIG's sampling settings: ``given``, or a named preset (when ``given`` are the defaults)."""
    if preset is None:
        return given
    if not isinstance(preset, str) or preset not in EIG_PRESETS:
        raise parameter_error(func, "preset", "None or 'crested'", preset)
    if given != EIG_DEFAULTS:
        raise parameter_error(
            func,
            "preset",
            "None when n_baselines, n_steps or quadrature are given",
            preset,
            "A preset sets all three; drop it or them.",
        )
    return EIG_PRESETS[preset]


@dataclass(frozen=True)
class GradientMethod:
    """Which points on which paths, and how each gradient is weighted.

    ``n_steps=None`` is saliency: one point, the input itself, and no baseline.
    """

    func: str
    source: SequenceSource
    n_steps: int | None
    quadrature: str
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
            quadrature(self.quadrature, self.n_steps)  # validates the rule before any work

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
        if self.max_baselines < max(self.n_baselines, MIN_BASELINES):
            raise parameter_error(
                func,
                "max_baselines",
                f"at least n_baselines ({self.n_baselines}) and at least {MIN_BASELINES} with "
                "tolerance (a standard error needs a spread of baselines)",
                self.max_baselines,
            )

    def path(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Points, gradient weights and (for return_delta) output weights of one path."""
        if self.n_steps is None:
            return np.ones(1), np.ones(1), None
        alphas, weights = quadrature(self.quadrature, self.n_steps)
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
            "quadrature": self.quadrature if path else None,
            "n_baselines": self.n_baselines if path else None,
            "baselines": (
                describe_baselines(self.baselines, self.source, self.n_baselines) if path else None
            ),
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
