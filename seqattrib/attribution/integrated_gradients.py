"""Integrated gradients and expected integrated gradients (many baselines)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._validation import check_positive_int
from ._run import GradientJob, gradient_attribution

_TAIL_DOC = """
    alphabet_axis : {None, 1, -1}
        The axis of X holding A, C, G, T; inferred when unambiguous.
    correct_gradient : bool
        Subtract the mean over the 4 bases from every gradient (Majdandzic et al. 2023).
    random_state : int, numpy.random.Generator or None
        Seeds random baselines; a sequence's baselines depend only on this and its content.
    batch_size : int or "auto"
        Device rows per batch (rows of all sequences share batches); ``"auto"`` probes the
        fastest size for the model, device and input shape, and caches it.
    max_cpu_sequences : int
        At most this many finished sequences wait on the host before the sink takes them.
    device : str or device, optional
        Where to run ("cpu", "cuda", "cuda:1", "/GPU:0"); default: where the model lives.
    verbose : bool
        Show a progress bar on stderr.
    backend : {None, "torch", "tensorflow"}
        Needed only for plain callables.
    out : path, optional
        Stream the results into this HDF5 tracks file (``seqattrib.io.read_tracks``) and
        return its path instead of arrays; a rerun with the same settings resumes it.
    overwrite : bool
        Replace an existing ``out`` file instead of resuming it.
    regions : optional
        Genome coordinates of the rows of X (``chrom``, ``start``, ``end``), stored in ``out``.
    return_delta : bool
        Also return the completeness gap f(x) - mean_j f(b_j) - sum of attributions, of shape
        (n_sequences,) for an int target, else (n_sequences, K).

    Returns
    -------
    attributions : ndarray of float32
        Shape ``(n_sequences, *X.shape[1:])`` for an int target, else
        ``(n_sequences, K, *X.shape[1:])``, in the layout of X.
    delta : ndarray of float32, only with ``return_delta=True``

    With ``out=``, the file's path instead (the delta is stored in the file).
"""


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
    return_delta: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray] | str:
    """Integrated gradients from one baseline per sequence.

    Use IG when one reference is meaningful (all zeros, 0.25 everywhere, or a chosen
    background). With a random reference, prefer ``expected_integrated_gradients``, which
    averages over many.

    IG = (x - b) * sum_k w_k grad f(b + a_k (x - b)), with the points a_k and weights w_k of
    ``method``. Rows (sequence, step) of many sequences share each device batch.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
        Maps a batch in the layout of X to outputs (batch, K), or to what output_fn reduces.
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot sequences: numpy array, memmap or h5py dataset (read in pieces).
    target : int, sequence of int or None
        Output index; a sequence of K indices (one forward pass for all); None for every output.
    output_fn : callable, optional
        Framework-native function from the raw model output to a (batch, K) tensor.
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
    """
    job = GradientJob(
        func="integrated_gradients",
        n_steps=n_steps,
        method=method,
        baselines=baselines,
        n_baselines=1,
        per_sequence_array=False,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=return_delta,
        random_state=random_state,
    )
    return gradient_attribution(
        job,
        model,
        X,
        target=target,
        output_fn=output_fn,
        alphabet_axis=alphabet_axis,
        batch_size=batch_size,
        max_cpu_sequences=max_cpu_sequences,
        device=device,
        verbose=verbose,
        backend=backend,
        out=out,
        overwrite=overwrite,
        regions=regions,
    )


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
    return_delta: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray] | str:
    """Expected integrated gradients: IG averaged over many baselines per sequence.

    Use EIG for DNA models by default: dinucleotide-shuffled references keep the sequence's
    composition, so attributions point at motifs rather than at base content. Set
    ``multiply_by_inputs=False`` for hypothetical scores (what TF-MoDISco takes).

    EIG = mean_j (x - b_j) * sum_k w_k grad f(b_j + a_k (x - b_j)). Rows (sequence, baseline,
    step) of many sequences share each device batch; the average is taken on the device.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
        Maps a batch in the layout of X to outputs (batch, K), or to what output_fn reduces.
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot sequences: numpy array, memmap or h5py dataset (read in pieces).
    target : int, sequence of int or None
        Output index; a sequence of K indices (one forward pass for all); None for every output.
    output_fn : callable, optional
        Framework-native function from the raw model output to a (batch, K) tensor.
    baselines : str, array or callable
        ``"dinuc_shuffle"`` (keeps every dinucleotide count), ``"shuffle"``, ``"random"``,
        ``"zeros"``, ``"uniform"``, an array ``(n_baselines, *X.shape[1:])`` shared by all
        sequences or ``(n_sequences, n_baselines, *X.shape[1:])``, or ``fn(x, n_baselines, rng)``.
    n_baselines : int
        Baselines per sequence (constant baselines collapse to one: they are all equal).
    n_steps : int
        Intervals of each path integral.
    method : str
        Integration rule, as for ``integrated_gradients``.
    multiply_by_inputs : bool
        False returns the gradient averaged over paths and baselines (hypothetical scores).
    """
    n_baselines = check_positive_int(n_baselines, "n_baselines", "expected_integrated_gradients")
    job = GradientJob(
        func="expected_integrated_gradients",
        n_steps=n_steps,
        method=method,
        baselines=baselines,
        n_baselines=n_baselines,
        per_sequence_array=True,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=return_delta,
        random_state=random_state,
    )
    return gradient_attribution(
        job,
        model,
        X,
        target=target,
        output_fn=output_fn,
        alphabet_axis=alphabet_axis,
        batch_size=batch_size,
        max_cpu_sequences=max_cpu_sequences,
        device=device,
        verbose=verbose,
        backend=backend,
        out=out,
        overwrite=overwrite,
        regions=regions,
    )


integrated_gradients.__doc__ = (integrated_gradients.__doc__ or "") + _TAIL_DOC
expected_integrated_gradients.__doc__ = (expected_integrated_gradients.__doc__ or "") + _TAIL_DOC
