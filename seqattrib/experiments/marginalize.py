"""``marginalize``: a motif's effect on its own, inserted into many backgrounds.

Every experiment here is one job on the engine. A background sequence is one of the engine's
sequences; its rows are its *bases* (the background itself, its dinucleotide shuffles, or copies
with a window shuffled, built on the host per input chunk) times the *edits* shared by every
background (nothing, a motif at a position, two motifs at a distance and orientation), applied on
the device as ``x * (1 - mask) + content``. So a device batch spans backgrounds and edits, every
target comes from one forward pass, and a background's (K, rows) predictions cross to the host
once, into memory or a resumable, fingerprinted ``out`` file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from .._validation import check_positive_int, resolve_seed
from ..attribution.baselines import dinucleotide_shuffle, sequence_rng
from ..attribution.gradient_kernel import check_finite
from ..attribution.job import JobContext, run_job
from ..attribution.options import RunOptions, shared_docs
from ..backends import Backend
from ..engine import SequenceSource, as_source
from ..engine.outputs import Head
from . import edits

__all__ = ["marginalize"]

Tensor = Any


class EditKernel:
    """Rows: each base of a background (host-built) under each shared edit (device-applied)."""

    def __init__(
        self,
        backend: Backend,
        model: Any,
        *,
        head: Head,
        targets: Sequence[int],
        source: SequenceSource,
        bases: Callable[[np.ndarray], np.ndarray] | None,
        n_bases: int,
        content: np.ndarray,
        mask: np.ndarray,
        func: str,
    ) -> None:
        self.backend, self.model, self.head, self.source = backend, model, head, source
        self.bases, self.n_bases, self.func = bases, n_bases, func
        self.n_edits = len(content)
        self.targets = list(targets)
        self._targets = backend.asarray(np.asarray(self.targets), "int64")
        self.rows_per_sequence = n_bases * self.n_edits
        self._edited = bool(mask.any())
        self._content = backend.asarray(np.ascontiguousarray(source.from_nlc(content)))
        self._mask = backend.asarray(np.ascontiguousarray(source.from_nlc(mask)))

    def prepare(self, x: np.ndarray, first: int) -> dict[str, Tensor]:
        if self.bases is None:
            return {"x": self.backend.asarray(x)}
        nlc = self.bases(self.source.to_nlc(x))  # (n, n_bases, L, 4)
        return {"x": self.backend.asarray(np.ascontiguousarray(self.source.from_nlc(nlc)))}

    def compute(
        self,
        payload: dict[str, Tensor],
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> dict[str, Tensor]:
        be = self.backend
        base = local * self.n_bases + row_in_sequence // self.n_edits
        bases = be.reshape(payload["x"], (-1, *self.source.row_shape))
        rows = be.take(bases, be.asarray(base, "int64"))
        if self._edited:
            edit = be.asarray(row_in_sequence % self.n_edits, "int64")
            mask = be.take(self._mask, edit)
            rows = rows + mask * (be.take(self._content, edit) - rows)
        outputs = be.take(be.forward(self.model, rows, self.head), self._targets, axis=1)
        slot = be.asarray(segment * self.rows_per_sequence + row_in_sequence, "int64")
        table = be.segment_sum(outputs, slot, n_segments * self.rows_per_sequence)
        shape = (n_segments, self.rows_per_sequence, len(self.targets))
        return {"predictions": be.reshape(table, shape)}

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        predictions = np.ascontiguousarray(block["predictions"].transpose(0, 2, 1))
        check_finite(predictions, first, self.targets, self.func)
        return {"predictions": predictions}


@dataclass(frozen=True)
class EditMethod:
    """An experiment as the job layer sees it: bases per background x shared edits.

    ``edit_motifs`` lists, per edit, the (motif, start) pairs it writes (an empty list: the
    background as it is); ``bases`` builds (n, n_bases, L, 4) from a chunk's (n, L, 4) and the
    seed (None: the background itself); ``described`` is what decides the bases, for files.
    """

    func: str
    source: SequenceSource
    edit_motifs: tuple[tuple[tuple[np.ndarray, int], ...], ...]
    n_bases: int
    bases: Callable[[np.ndarray, int], np.ndarray] | None
    described: dict[str, Any]
    random_state: Any = 0

    def settings(self) -> dict[str, Any]:
        digest = hashlib.blake2b(digest_size=8)
        for edit in self.edit_motifs:
            for motif, start in edit:
                digest.update(np.ascontiguousarray(motif).tobytes() + str(start).encode())
            digest.update(b"|")
        return dict(self.described, edits=digest.hexdigest(), n_edits=len(self.edit_motifs))

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        return {"predictions": (n_targets, self.n_bases * len(self.edit_motifs))}

    def kernel(self, context: JobContext) -> EditKernel:
        length = self.source.length
        placed = [edits.placement(edit, length) for edit in self.edit_motifs]
        seed = context.seed
        bases = self.bases
        return EditKernel(
            context.backend,
            context.model,
            head=context.head,
            targets=context.targets,
            source=context.source,
            bases=None if bases is None else (lambda x: bases(x, seed)),
            n_bases=self.n_bases,
            content=np.stack([c for c, _ in placed]),
            mask=np.stack([m for _, m in placed]),
            func=self.func,
        )


def background_shuffles(n_shuffles: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Bases: ``n_shuffles`` dinucleotide shuffles of each sequence, seeded by its content."""

    def draw(x_nlc: np.ndarray, seed: int) -> np.ndarray:
        return np.stack([dinucleotide_shuffle(x, n_shuffles, sequence_rng(seed, x)) for x in x_nlc])

    return draw


def check_shuffles(n_shuffles: Any, func: str) -> int | None:
    """``n_shuffles`` of the backgrounds: None (use them as they are) or a positive int."""
    return None if n_shuffles is None else check_positive_int(n_shuffles, "n_shuffles", func)


def background_source(backgrounds: Any, alphabet_axis: int | None, func: str) -> SequenceSource:
    """The backgrounds as the engine's source (refusing an empty set), errors naming them."""
    shape = getattr(backgrounds, "shape", None)
    if shape is not None and len(shape) == 3 and shape[0] == 0:
        raise parameter_error(
            func,
            "backgrounds",
            "at least one background sequence",
            "an empty array",
            "Pass sequences, or shuffles of them with n_shuffles=.",
            described=True,
        )
    try:
        return as_source(backgrounds, alphabet_axis, func)
    except (ValueError, TypeError) as exc:  # the shared checks call the sequences X
        text = str(exc).replace("The 'X' parameter", "The 'backgrounds' parameter", 1)
        raise type(exc)(text) from None


def run_edits(method: EditMethod, model: Any, options: RunOptions) -> tuple[np.ndarray | str, bool]:
    """Run an experiment: (N, [K,] rows) predictions, or the ``out`` file's path."""
    result, squeeze = run_job(method, model, method.source, options)
    if isinstance(result, str):
        return result, squeeze
    return result["predictions"], squeeze


def split_rows(predictions: np.ndarray, squeeze: bool, shape: tuple[int, ...]) -> np.ndarray:
    """(N, [K,] rows) predictions as (N, *shape, [K]): the target axis last."""
    n = len(predictions)
    if squeeze:
        return predictions.reshape(n, *shape)
    k = predictions.shape[1]
    return np.moveaxis(predictions.reshape(n, k, *shape), 1, -1)


@shared_docs
def marginalize(
    model: Any,
    backgrounds: Any,
    motif: Any,
    *,
    position: int | None = None,
    n_shuffles: int | None = None,
    target: int | Sequence[int] | None = 0,
    output_fn: Callable[[Any], Any] | None = None,
    func: Callable[..., Any] | None = None,
    func_kwargs: dict[str, Any] | None = None,
    alphabet_axis: int | None = None,
    random_state: int | np.random.Generator | None = 0,
    batch_size: int | Literal["auto"] = "auto",
    max_cpu_sequences: int = 1024,
    device: Any = None,
    verbose: bool = False,
    backend: str | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    shard: tuple[int, int] | None = None,
) -> tuple[Any, Any] | str:
    """The model's output on backgrounds before and after inserting a motif.

    Use this to ask what a motif does on its own (global importance analysis): the difference
    between ``after`` and ``before``, averaged over many neutral backgrounds, is the motif's
    marginal effect. ``space`` asks how two motifs act together, ``ablate`` and
    ``tile_shuffle`` what the sequence's own windows contribute.

    Parameters
    ----------
    [[model]]
    backgrounds : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
        One-hot background sequences (numpy array, memmap or h5py dataset, read in pieces).
    motif : str or array
        What to insert: a sequence (``N`` keeps the background's base), a one-hot array of shape
        (m, 4) or (4, m), or a position weight matrix (its consensus is inserted); a motif of a
        MEME file comes from ``seqattrib.experiments.read_meme``.
    position : int, optional
        0-based start of the motif; default: centred (start ``length // 2 - m // 2``).
    n_shuffles : int, optional
        Use ``n_shuffles`` dinucleotide shuffles of each background instead of the background
        itself (made as the rows run; a sequence's shuffles depend only on ``random_state`` and
        its content).
    [[target]]
    [[output_fn]]
    func : callable, optional
        An attribution method (e.g. ``seqattrib.saliency``) to run on the backgrounds before
        and after the insertion instead of the model's predictions; it gets ``target``,
        ``output_fn``, ``batch_size``, ``max_cpu_sequences``, ``device`` and ``verbose``, and
        ``func_kwargs``.
    func_kwargs : dict, optional
        More keyword arguments for ``func`` (e.g. ``{"n_steps": 10}``).
    [[alphabet_axis]]
    random_state : int, numpy.random.Generator or None
        Seeds the background shuffles.
    [[batch_size]]
    [[max_cpu_sequences]]
    [[device]]
    [[verbose]]
    [[backend]]
    out : path, optional
        Stream the predictions into this HDF5 file (dataset ``predictions`` of shape
        (n_sequences, [K,] rows), rows ordered as ``before, after`` per shuffle) and return its
        path; a rerun with the same settings resumes it. With ``func``: ``func`` writes
        ``OUT.before.h5`` and ``OUT.after.h5`` (OUT: the path without its suffix).
    [[overwrite]]
    [[shard]]

    Returns
    -------
    before, after : ndarray of float32
        Shape (n_sequences,) for an int target, else (n_sequences, K); with ``n_shuffles``,
        (n_sequences, n_shuffles[, K]). With ``func``: what ``func`` returns for the
        backgrounds and for the edited backgrounds (the shuffles of a sequence one after
        another), each made in memory. With ``out``: the file's path (with ``func``: the two
        files' paths).
    """
    name = "marginalize"
    options = RunOptions.check(
        name, target=target, output_fn=output_fn, alphabet_axis=alphabet_axis,
        batch_size=batch_size, max_cpu_sequences=max_cpu_sequences, device=device,
        verbose=verbose, backend=backend, out=out, overwrite=overwrite, regions=None,
        shard=shard,
    )  # fmt: skip
    source = background_source(backgrounds, alphabet_axis, name)
    shuffles = check_shuffles(n_shuffles, name)
    inserted = edits.as_motif(motif, name)
    length = source.length
    start = edits.check_start(
        edits.centred_start(length, len(inserted)) if position is None else position,
        len(inserted),
        length,
        name,
        "position",
    )
    if func is not None:
        return _with_func(
            func, func_kwargs, model, source, inserted, start, shuffles, random_state, options
        )
    method = EditMethod(
        name,
        source,
        ((), ((inserted, start),)),
        shuffles or 1,
        None if shuffles is None else background_shuffles(shuffles),
        {"n_shuffles": shuffles},
        random_state,
    )
    predictions, squeeze = run_edits(method, model, options)
    if isinstance(predictions, str):
        return predictions
    both = split_rows(predictions, squeeze, (shuffles or 1, 2))
    before, after = both[:, :, 0], both[:, :, 1]
    if shuffles is None:
        return before[:, 0], after[:, 0]
    return before, after


def _with_func(
    func: Callable[..., Any],
    func_kwargs: dict[str, Any] | None,
    model: Any,
    source: SequenceSource,
    motif: np.ndarray,
    start: int,
    shuffles: int | None,
    random_state: Any,
    options: RunOptions,
) -> tuple[Any, Any]:
    """``func`` on the backgrounds and on the edited backgrounds (made on the host)."""
    name = "marginalize"
    if not callable(func):
        raise parameter_error(name, "func", "None or a callable", func, error=TypeError)
    if options.shard is not None:
        raise parameter_error(
            name, "shard", "None when func is given", options.shard,
            "Split the backgrounds yourself and call marginalize on each part.",
        )  # fmt: skip
    nlc = source.to_nlc(source.read(0, source.n_sequences))
    if shuffles is not None:
        seed = resolve_seed(random_state, name)
        nlc = background_shuffles(shuffles)(nlc, seed).reshape(-1, *nlc.shape[1:])
    edited = edits.insert(nlc, [(motif, start)])
    kwargs = dict(
        target=options.target,
        output_fn=options.output_fn,
        batch_size=options.batch_size or "auto",
        max_cpu_sequences=options.max_cpu_sequences,
        device=options.device,
        verbose=options.verbose,
    )
    kwargs.update(func_kwargs or {})
    layout = source.from_nlc
    if options.out is None:
        return func(model, layout(nlc), **kwargs), func(model, layout(edited), **kwargs)
    root, suffix = os.path.splitext(options.out)
    return tuple(
        func(model, layout(rows), out=f"{root}.{which}{suffix or '.h5'}",
             overwrite=options.overwrite, **kwargs)
        for which, rows in (("before", nlc), ("after", edited))
    )  # fmt: skip
