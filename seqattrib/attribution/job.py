"""The job layer: one method over X, in memory or into a (resumable) tracks file.

A method describes itself (its settings, the rows it returns per sequence, and a kernel for the
engine); ``run_job`` does the rest the same way for every method: the backend session with full
float32, the targets from one probing forward pass, the seed, the sink, the resume point, and
the engine's loop.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import numpy as np

from .._validation import resolve_seed, resolve_targets
from ..backends import Backend, get_backend
from ..engine import ArraySink, Kernel, SequenceSource, run_rows
from ..engine.blocks import host_block
from ..engine.outputs import Head, model_session, vectorise_targets
from ..shards import Shard, shard_rows
from .options import RunOptions


@dataclass(frozen=True)
class JobContext:
    """What a method's kernel is made from, once the session is open."""

    backend: Backend
    model: Any
    head: Head
    targets: list[int]
    seed: int
    source: SequenceSource  # the rows of X still to run (indices stay those of X)
    device: Any  # the session's resolved device
    vectorised: bool  # K targets' gradients as one vectorised backward
    row_offset: int = 0  # the row of X where ``source`` starts (a shard's first row)


class Method(Protocol):
    """A feature-attribution method, as the job layer sees it."""

    #: Name in messages and files ("ism", "integrated_gradients", ...).
    func: str
    #: ``random_state`` as given (int, Generator or None).
    random_state: Any

    def settings(self) -> dict[str, Any]:
        """Everything besides the shared options that decides the results (stored in ``out``
        files and compared when one is resumed)."""

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        """Shape of each result per sequence, e.g. ``{"attributions": (K, L, 4)}``."""

    def kernel(self, context: JobContext) -> Kernel:
        """The engine kernel for the rows of ``context.source``."""


def _stored_random_state(random_state: Any) -> Any:
    if random_state is None or isinstance(random_state, np.random.Generator):
        return None  # no fixed seed: a resumed file keeps the seed it drew
    return int(random_state)


def run_job(
    method: Method, model: Any, source: SequenceSource, options: RunOptions
) -> tuple[dict[str, np.ndarray] | str, bool]:
    """Run ``method`` over ``source`` with ``options``.

    Returns the results by name (with the target axis) or the ``out`` file's path, and whether
    the target axis is to be dropped (an int target).
    """
    func = method.func
    shard = None
    if options.shard is not None:
        shard = shard_rows(*options.shard, source.n_sequences, func)
        source = source.rows(shard.start, shard.stop)
    be = get_backend(model, options.backend)
    head = Head(options.output_fn)
    with model_session(be, model, options.device) as device:
        n_outputs = int(be.forward(model, be.asarray(source.read(0, 1)), head).shape[1])
        targets, squeeze = resolve_targets(options.target, n_outputs, func)
        seed = resolve_seed(method.random_state, func)
        row_shapes = method.row_shapes(len(targets))
        result_bytes = 4 * sum(int(np.prod(shape)) for shape in row_shapes.values())
        block = host_block(options.max_cpu_sequences, result_bytes)
        if options.out is None:
            sink: Any = ArraySink(source.n_sequences, row_shapes)
            done = 0
        else:
            sink, seed = _track_writer(
                method, be, model, source, options, targets, squeeze, seed, block, shard
            )
            done = sink.n_completed
        try:
            if done < source.n_sequences:
                todo = source.tail(done)
                context = JobContext(
                    be,
                    model,
                    head,
                    targets,
                    seed,
                    todo,
                    device,
                    vectorise_targets(be),
                    0 if shard is None else shard.start,
                )
                kernel = method.kernel(context)
                # a kernel may run the method in several ways (ISM: exact or windowed), each
                # with its own best batch size
                variant = getattr(kernel, "variant", None)
                key: Hashable = (
                    func,
                    be.name,
                    str(device),
                    source.row_shape,
                    len(targets),
                    variant,
                )
                run_rows(
                    kernel,
                    todo,
                    be,
                    model,
                    sink,
                    batch_size=options.batch_size,
                    max_cpu_sequences=options.max_cpu_sequences,
                    host_block=block,
                    cache_key=key,
                    verbose=options.verbose,
                    description=func,
                )
        finally:
            if options.out is not None:
                sink.close()
    return sink.result(), squeeze


def _track_writer(
    method: Method,
    be: Backend,
    model: Any,
    source: SequenceSource,
    options: RunOptions,
    targets: list[int],
    squeeze: bool,
    seed: int,
    block: int,
    shard: Shard | None,
) -> tuple[Any, int]:
    """Open (or resume) the ``out`` tracks file: the writer and the seed the run must use."""
    from ..io.tracks import open_track_writer

    stored_random_state = _stored_random_state(method.random_state)
    settings = dict(
        method.settings(),
        method=method.func,
        targets=targets,
        random_state=stored_random_state,
        n_sequences=source.n_sequences,
        row_shape=list(source.row_shape),
        alphabet_axis=source.alphabet_axis,
    )
    regions = options.regions
    if shard is not None:
        settings["shard"] = shard.setting()
        if regions is not None:
            regions = _regions_rows(regions, shard.start, shard.stop)
    assert options.out is not None
    return open_track_writer(
        options.out,
        func=method.func,
        source=source,
        shapes=method.row_shapes(len(targets)),
        squeeze=squeeze,
        settings=settings,
        seed=seed,
        adopt_seed=stored_random_state is None,
        description={"backend": be.name, "model": be.describe(model)},
        regions=regions,
        overwrite=options.overwrite,
        block_sequences=block,
    )


def drop_target_axis(result: dict[str, np.ndarray], squeeze: bool) -> dict[str, np.ndarray]:
    """The results without their target axis (axis 1) for an int target."""
    return {name: values[:, 0] for name, values in result.items()} if squeeze else result


def _regions_rows(regions: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of ``regions`` (anything with ``chrom``, ``start`` and ``end``)."""
    if hasattr(regions, "take"):
        return regions.take(np.arange(start, stop))
    return SimpleNamespace(
        chrom=list(regions.chrom)[start:stop],
        start=np.asarray(regions.start)[start:stop],
        end=np.asarray(regions.end)[start:stop],
    )
