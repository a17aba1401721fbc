"""DeepLIFT with the rescale rule, averaged over references (DeepSHAP).

A ``DeepLiftMethod`` names the references of each sequence; the kernel (``deeplift_kernel``),
the backend's rescale capability and the job layer do the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from ..engine import SequenceSource, as_source
from .baselines import DefaultCount, baseline_count, describe_baselines, resolve_baselines
from .deeplift_kernel import DeepLiftKernel
from .job import JobContext, run_job
from .options import RunOptions, shared_docs

#: References per sequence unless an array of references gives its own count.
DEFAULT_REFERENCES = DefaultCount(20)


@dataclass(frozen=True)
class DeepLiftMethod:
    """References per sequence, and what to return."""

    func: str
    source: SequenceSource
    baselines: Any
    n_baselines: int
    multiply_by_inputs: bool
    return_delta: bool
    random_state: Any

    def __post_init__(self) -> None:
        for name in ("multiply_by_inputs", "return_delta"):
            if not isinstance(getattr(self, name), bool):
                raise parameter_error(self.func, name, "True or False", getattr(self, name))

    def settings(self) -> dict[str, Any]:
        return {
            "rule": "rescale",
            "n_baselines": self.n_baselines,
            "baselines": describe_baselines(self.baselines, self.source, self.n_baselines),
            "multiply_by_inputs": self.multiply_by_inputs,
            "return_delta": self.return_delta,
        }

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {"attributions": (n_targets, *self.source.row_shape)}
        if self.return_delta:
            shapes["delta"] = (n_targets,)
        return shapes

    def kernel(self, context: JobContext) -> DeepLiftKernel:
        spec = resolve_baselines(
            self.baselines,
            self.n_baselines,
            self.source,
            context.seed,
            self.func,
            per_sequence_array=True,
            row_offset=context.row_offset,
        )
        return DeepLiftKernel(
            context,
            row_shape=self.source.row_shape,
            alphabet_axis=self.source.alphabet_axis,
            baselines=spec,
            multiply_by_inputs=self.multiply_by_inputs,
            return_delta=self.return_delta,
            func=self.func,
        )


@shared_docs
def deep_lift_shap(
    model: Any,
    X: Any,
    *,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    baselines: str | np.ndarray | Callable[..., np.ndarray] = "dinuc_shuffle",
    n_baselines: int = DEFAULT_REFERENCES,
    multiply_by_inputs: bool = True,
    alphabet_axis: int | None = None,
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
) -> np.ndarray | tuple[np.ndarray, np.ndarray] | str:
    """DeepLIFT (rescale rule) averaged over dinucleotide-shuffled references: DeepSHAP.

    Use DeepSHAP for per-base contributions of BPNet, ChromBPNet and other profile or peak
    models: it is the standard their own pipelines produce (and TF-MoDISco is tuned on), and
    it costs one forward and one backward pass per reference, where EIG costs ``n_steps + 1``.
    It is exact for ReLU networks with max pooling; for smooth activations it approximates the
    path integral EIG computes, and ISM measures what a single substitution does.

    Every elementwise nonlinearity (ReLU, ELU, GELU, SiLU, Softplus, Sigmoid, Tanh, ..., as a
    layer, a function call or a Keras layer's activation) takes the multiplier
    (f(z) - f(z_ref)) / (z - z_ref) instead of its gradient; max pooling and max reductions
    route the change of their output to the positions holding the maximum (DeepLIFT's max
    rule); linear operations keep their gradient. Rows (sequence, reference) of many sequences
    share each device batch, and the mean over the references is taken on the device.

    The contributions of a sequence sum to f(x) - mean_j f(r_j) (up to float32 rounding) when
    every nonlinearity is covered; a sequence where they miss it by more than 1e-3 of the
    output difference raises a ``SeqAttribWarning`` naming the operations the rules do not
    cover. A softmax on the way to the target, an in-place nonlinearity, or a nonlinearity the
    backend cannot reach (a custom autograd function, TorchScript, a nested tf.function) is
    refused with an error naming it.

    Parameters
    ----------
    [[model]]
    [[X]]
    [[target]]
    [[output_fn]]
    baselines : str, array or callable
        The references: ``"dinuc_shuffle"`` (keeps every dinucleotide count), ``"shuffle"``,
        ``"random"``, ``"zeros"``, ``"uniform"``, an array ``(n_baselines, *X.shape[1:])``
        shared by all sequences or ``(n_sequences, n_baselines, *X.shape[1:])``, or
        ``fn(x, n_baselines, rng)``.
    n_baselines : int
        References per sequence (constant references collapse to one: they are all equal). An
        array of references carries its own count, which replaces the default.
    multiply_by_inputs : bool
        True: contributions (the hypothetical scores times the one-hot input). False:
        hypothetical scores, m[b] - sum_c r[c] m[c] averaged over the references, the form
        TF-MoDISco takes (``seqattrib.io.export_modisco`` writes them unchanged).
    [[alphabet_axis]]
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
    return_delta : bool
        Also return f(x) - mean_j f(r_j) - sum of the contributions (with
        ``multiply_by_inputs=False``, of the contributions the hypothetical scores imply), of
        shape (n_sequences,) for an int target, else (n_sequences, K).

    Returns
    -------
    [[attribution_returns]]
    """
    func = "deep_lift_shap"
    n_baselines = baseline_count(baselines, n_baselines, func)
    options = RunOptions.from_arguments(func, locals())
    deeplift = DeepLiftMethod(
        func=func,
        source=as_source(X, alphabet_axis, func),
        baselines=baselines,
        n_baselines=n_baselines,
        multiply_by_inputs=multiply_by_inputs,
        return_delta=return_delta,
        random_state=random_state,
    )
    result, _ = run_job(deeplift, model, deeplift.source, options)
    if isinstance(result, str):
        return result
    if not return_delta:
        return result["attributions"]
    return result["attributions"], result["delta"]
