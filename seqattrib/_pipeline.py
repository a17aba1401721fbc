"""What every method does around its kernel: backend session, targets, sink, resume, run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from ._errors import parameter_error
from ._validation import (
    SequenceSource,
    check_batch_size,
    check_positive_int,
    resolve_seed,
    resolve_targets,
)
from .backends import Backend, get_backend
from .engine import ArraySink, Kernel, run

#: make_kernel(backend, targets, seed, todo) -> Kernel; ``todo`` is the part of X left to run.
KernelFactory = Callable[[Backend, list[int], int, SequenceSource], Kernel]

_SHARD: ContextVar[dict[str, int] | None] = ContextVar("seqattrib_shard", default=None)
_PROVENANCE: ContextVar[dict[str, str] | None] = ContextVar("seqattrib_provenance", default=None)


@contextmanager
def shard_context(index: int, count: int, start: int, stop: int, total: int) -> Iterator[None]:
    """Record in ``out=`` files written inside this block that X is rows [start, stop) of a
    job of ``total`` rows split in ``count`` shards (``seqattrib merge`` reads it)."""
    token = _SHARD.set(
        {"index": index, "count": count, "start": start, "stop": stop, "total": total}
    )
    try:
        yield
    finally:
        _SHARD.reset(token)


@contextmanager
def provenance_context(**identity: str) -> Iterator[None]:
    """Record in ``out=`` files written inside this block the identity of the job's inputs
    beyond X (``genome=``, ``regions=`` digests): resume and ``seqattrib merge`` compare it."""
    token = _PROVENANCE.set(identity)
    try:
        yield
    finally:
        _PROVENANCE.reset(token)


def check_common(
    func: str, batch_size: Any, max_cpu_sequences: Any, verbose: Any, output_fn: Any
) -> tuple[int | None, int]:
    """Validate the arguments every method shares."""
    size = check_batch_size(batch_size, func)
    limit = check_positive_int(max_cpu_sequences, "max_cpu_sequences", func)
    if not isinstance(verbose, bool):
        raise parameter_error(func, "verbose", "True or False", verbose, error=TypeError)
    if output_fn is not None and not callable(output_fn):
        raise parameter_error(func, "output_fn", "None or a callable", output_fn, error=TypeError)
    return size, limit


def probe_outputs(
    backend: Backend, model: Any, source: SequenceSource, output_fn: Callable[[Any], Any] | None
) -> int:
    """Number of model outputs, from a forward pass on the first sequence.

    Nothing is copied back: non-finite outputs show up in the results, which kernels refuse on
    the host.
    """
    out = backend.forward(model, backend.asarray(source.read(0, 1)), output_fn)
    return int(out.shape[1])


def _random_state_setting(random_state: Any) -> Any:
    if random_state is None or isinstance(random_state, np.random.Generator):
        return None  # no fixed seed: a resumed file keeps the seed it drew
    return int(random_state)


def execute(
    *,
    func: str,
    model: Any,
    source: SequenceSource,
    backend: str | None,
    device: Any,
    target: Any,
    output_fn: Callable[[Any], Any] | None,
    batch_size: int | None,
    max_cpu_sequences: int,
    verbose: bool,
    random_state: Any,
    make_kernel: KernelFactory,
    shapes: Callable[[int], dict[str, tuple[int, ...]]],
    settings: dict[str, Any],
    out: Any = None,
    overwrite: bool = False,
    regions: Any = None,
) -> tuple[dict[str, np.ndarray] | str, bool]:
    """Run a method's kernel over X into memory or into a (resumable) tracks file.

    Returns the arrays by name (full target axis) or the file's path, and whether the target
    axis is to be dropped.
    """
    be = get_backend(model, backend)
    with be.session(model, device) as resolved_device:
        n_outputs = probe_outputs(be, model, source, output_fn)
        targets, squeeze = resolve_targets(target, n_outputs, func)
        seed = resolve_seed(random_state, func)
        row_shapes = shapes(len(targets))
        if out is None:
            sink: Any = ArraySink(source.n_sequences, row_shapes)
            done = 0
        else:
            from .io.fingerprint import function_identity, model_fingerprint
            from .io.tracks import open_track_writer

            sink, seed = open_track_writer(
                out,
                func=func,
                source=source,
                shapes=row_shapes,
                squeeze=squeeze,
                settings=dict(
                    settings,
                    method=func,
                    targets=targets,
                    random_state=_random_state_setting(random_state),
                    n_sequences=source.n_sequences,
                    row_shape=list(source.row_shape),
                    alphabet_axis=source.alphabet_axis,
                    **({"shard": _SHARD.get()} if _SHARD.get() is not None else {}),
                ),
                seed=seed,
                adopt_seed=_random_state_setting(random_state) is None,
                description={"backend": be.name, "model": be.describe(model)},
                model_fingerprint=model_fingerprint(model, be.get_state),
                output_fn=function_identity(output_fn),
                provenance=_PROVENANCE.get(),
                regions=regions,
                overwrite=overwrite,
                block_sequences=max_cpu_sequences,
            )
            done = sink.n_completed
        try:
            if done < source.n_sequences:
                todo = source.tail(done)
                run(
                    make_kernel(be, targets, seed, todo),
                    todo,
                    be,
                    model,
                    sink,
                    batch_size=batch_size,
                    max_cpu_sequences=max_cpu_sequences,
                    cache_key=(func, be.name, str(resolved_device), source.row_shape, len(targets)),
                    verbose=verbose,
                    description=func,
                )
        finally:
            if out is not None:
                sink.close()
    return sink.result(), squeeze
