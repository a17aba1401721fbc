"""Saliency: the gradient of an output with respect to the one-hot input."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ._run import GradientJob, gradient_attribution


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
) -> np.ndarray | str:
    """Gradients of model outputs with respect to the input.

    Use saliency for a fast first look (one backward pass per sequence); it explains the
    model locally around the input. Integrated gradients or EIG attribute the output relative
    to a reference and satisfy completeness.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
        Maps a batch of one-hot sequences in the layout of X to outputs of shape (batch, K)
        (or to anything ``output_fn`` reduces to that).
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot sequences: numpy array, memmap or h5py dataset (read in pieces).
    target : int, sequence of int or None
        Output index; a sequence of K indices; None for every output.
    output_fn : callable, optional
        Framework-native function from the raw model output to a (batch, K) tensor.
    alphabet_axis : {None, 1, -1}
        The axis of X holding A, C, G, T; inferred when unambiguous.
    correct_gradient : bool
        Subtract the mean over the 4 bases at each position (Majdandzic et al. 2023).
    multiply_by_inputs : bool
        Return gradient x input instead of the gradient.
    batch_size : int or "auto"
        Device rows per batch; ``"auto"`` probes the fastest size for the model and device.
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

    Returns
    -------
    ndarray of float32, shape (n_sequences, *X.shape[1:]) for an int target, else
    (n_sequences, K, *X.shape[1:]), in the layout of X; the file's path with ``out=``.
    """
    job = GradientJob(
        func="saliency",
        n_steps=None,
        method="",
        baselines="zeros",
        n_baselines=1,
        per_sequence_array=False,
        multiply_by_inputs=multiply_by_inputs,
        correct_gradient=correct_gradient,
        return_delta=False,
        random_state=0,
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
