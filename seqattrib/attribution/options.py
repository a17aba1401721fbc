"""The options every feature-attribution method shares: validated once, carried as one value,
documented once.

Each public method keeps its full keyword signature (for users, IDEs and the docs) and turns its
shared keywords into one frozen ``RunOptions``; the job layer (``job.run_job``) takes nothing
else. ``shared_docs`` writes the shared parameter descriptions into the methods' docstrings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .._errors import parameter_error
from .._validation import check_batch_size, check_device, check_positive_int
from ..shards import check_shard


@dataclass(frozen=True)
class RunOptions:
    """What a method runs on and where its results go (the shared keyword arguments).

    ``batch_size`` is None for ``"auto"``; ``shard`` is (index, count) or None.
    """

    func: str
    target: Any = 0
    output_fn: Callable[[Any], Any] | None = None
    alphabet_axis: int | None = None
    batch_size: int | None = None
    max_cpu_sequences: int = 1024
    device: Any = None
    verbose: bool = False
    backend: str | None = None
    out: str | None = None
    overwrite: bool = False
    regions: Any = None
    shard: tuple[int, int] | None = None
    args: Any = None

    @classmethod
    def from_arguments(cls, func: str, arguments: Mapping[str, Any]) -> RunOptions:
        """The shared keywords among a public method's ``arguments`` (its ``locals()``)."""
        return cls.check(func, **{name: arguments[name] for name in SHARED_KEYWORDS})

    @classmethod
    def check(
        cls,
        func: str,
        *,
        target: Any,
        output_fn: Any,
        alphabet_axis: Any,
        batch_size: Any,
        max_cpu_sequences: Any,
        device: Any,
        verbose: Any,
        backend: Any,
        out: Any,
        overwrite: Any,
        regions: Any,
        shard: Any,
        args: Any = None,
    ) -> RunOptions:
        """Validate the shared keywords of ``func`` (the X-dependent ones, ``target`` and
        ``alphabet_axis``, are checked against X and the model by the job)."""
        size = check_batch_size(batch_size, func)
        limit = check_positive_int(max_cpu_sequences, "max_cpu_sequences", func)
        for name, value in (("verbose", verbose), ("overwrite", overwrite)):
            if not isinstance(value, bool):
                raise parameter_error(func, name, "True or False", value, error=TypeError)
        if isinstance(output_fn, (list, tuple)):
            from ..heads import stack

            output_fn = stack(*output_fn)
        if output_fn is not None and not callable(output_fn):
            raise parameter_error(
                func,
                "output_fn",
                "None, a callable, a named head (seqattrib.heads) or a list of them",
                output_fn,
                error=TypeError,
            )
        check_device(device, func)
        if out is not None and not isinstance(out, (str, os.PathLike)):
            raise parameter_error(func, "out", "None or a file path", out, error=TypeError)
        return cls(
            func=func,
            target=target,
            output_fn=output_fn,
            alphabet_axis=alphabet_axis,
            batch_size=size,
            max_cpu_sequences=limit,
            device=device,
            verbose=verbose,
            backend=backend,
            out=None if out is None else os.fspath(out),
            overwrite=overwrite,
            regions=regions,
            shard=check_shard(shard, func),
            args=args,
        )


#: The keywords every attribution method shares (those ``RunOptions`` carries).
SHARED_KEYWORDS = (
    "target",
    "output_fn",
    "alphabet_axis",
    "batch_size",
    "max_cpu_sequences",
    "device",
    "verbose",
    "backend",
    "out",
    "overwrite",
    "regions",
    "shard",
    "args",
)

#: Descriptions of the parameters several methods share, written into their docstrings by
#: ``shared_docs`` where a line holds ``[[name]]``.
PARAMETER_DOCS = {
    "model": """\
model : torch.nn.Module, keras.Model, tf.Module or callable
    Maps a batch in the layout of X to outputs (batch, K), or to what output_fn reduces.""",
    "X": """\
X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
    One-hot sequences: numpy array, memmap or h5py dataset (read in pieces).""",
    "target": """\
target : int, sequence of int or None
    Output index; a sequence of K indices (all from the same forward passes); None for every
    output.""",
    "output_fn": """\
output_fn : callable, named head or list of them, optional
    Maps the raw model output (a tensor, or a tuple or dict of them) to the (batch, K) values
    explained: a framework-native function, or a head of ``seqattrib.heads`` (BPNet/ChromBPNet
    ``profile`` and ``counts``, Enformer/Borzoi ``tracks`` reductions). A list of them is
    ``heads.stack``: their columns side by side, all explained from one forward pass.""",
    "alphabet_axis": """\
alphabet_axis : {None, -1, -2} or the same axis as a positive index
    The axis of the bases in X, one of its last two: -1 for (n_sequences, length, 4), -2 for
    (n_sequences, 4, length); inferred when exactly one of them has size 4.""",
    "correct_gradient": """\
correct_gradient : bool
    Subtract the mean over the 4 bases from every gradient (Majdandzic et al. 2023).""",
    "random_state": """\
random_state : int, numpy.random.Generator or None
    Seeds random baselines; a sequence's baselines depend only on this and its content.""",
    "batch_size": """\
batch_size : int or "auto"
    Device rows per batch (rows of all sequences share batches); ``"auto"`` probes the
    fastest size for the model, device and input shape, and caches it.""",
    "max_cpu_sequences": """\
max_cpu_sequences : int
    At most this many finished sequences wait on the host before the sink takes them (it also
    bounds the sequences read from X at a time, and the chunk of an ``out`` file).""",
    "device": """\
device : str or device, optional
    Where to run ("cpu", "cuda", "cuda:1", "/GPU:0"); default: where the model lives.""",
    "verbose": """\
verbose : bool
    Show a progress bar on stderr.""",
    "backend": """\
backend : {None, "torch", "tensorflow"}
    Needed only for plain callables.""",
    "out": """\
out : path, optional
    Stream the results into this HDF5 tracks file (``seqattrib.io.read_tracks``) and return its
    path instead of arrays; a rerun with the same settings resumes it.""",
    "overwrite": """\
overwrite : bool
    Replace an existing ``out`` file instead of resuming it.""",
    "regions": """\
regions : optional
    Genome coordinates of the rows of X (``chrom``, ``start``, ``end``), stored in ``out``.""",
    "args": """\
args : array or tuple of arrays, optional
    The model's other inputs, passed after X on every call (a Keras model gets
    ``[X, *args]``): an array with one entry per sequence on its first axis goes with its
    sequence (a control track); any other array goes to every sequence. Attributions are
    taken with respect to X.""",
    "shard": """\
shard : (index, count), optional
    Run only the index-th of count contiguous blocks of X (for jobs split over processes);
    with ``out``, the file records it and ``seqattrib.io.merge_tracks`` joins the shards.""",
    "return_delta": """\
return_delta : bool
    Also return the completeness gap f(x) - mean_j f(b_j) - sum of attributions, of shape
    (n_sequences,) for an int target, else (n_sequences, K).""",
    "return_stderr": """\
return_stderr : bool
    Also return the standard error of each attribution (the shape of the attributions): the
    spread of the per-baseline path integrals over sqrt(n_baselines), accumulated on the
    device. It is the sampling error of the random baselines, not the model's uncertainty nor
    the error of the integration rule.""",
    "attribution_returns": """\
attributions : ndarray of float32
    Shape ``(n_sequences, *X.shape[1:])`` for an int target, else
    ``(n_sequences, K, *X.shape[1:])``, in the layout of X.
delta : ndarray of float32, only with ``return_delta=True``
stderr : ndarray of float32, only with ``return_stderr=True``
    The shape of the attributions.

With ``out=``, the file's path instead (delta and stderr are stored in the file).""",
}

F = TypeVar("F", bound=Callable[..., Any])
_PLACEHOLDER = re.compile(r"^( *)\[\[(\w+)\]\]$", flags=re.M)


def shared_docs(func: F) -> F:
    """Replace each ``[[name]]`` line of ``func``'s docstring by ``PARAMETER_DOCS[name]``,
    indented like the placeholder."""

    def entry(match: re.Match[str]) -> str:
        indent, name = match.group(1), match.group(2)
        return "\n".join(
            indent + line if line else line for line in PARAMETER_DOCS[name].split("\n")
        )

    func.__doc__ = _PLACEHOLDER.sub(entry, func.__doc__ or "")
    return func
