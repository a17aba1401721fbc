"""The job layer: one method over X, in memory or into a (resumable) tracks file.

A method describes itself (its settings, the rows it returns per sequence, and a kernel for the
engine); ``run_job`` does the rest the same way for every method: the backend session with full
float32, the targets from one probing forward pass, the seed, the sink, the resume point, and
the engine's loop.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from contextlib import ExitStack
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import numpy as np

from .._errors import InputShapeRefused, parameter_error
from .._validation import resolve_seed, resolve_targets
from ..backends import Backend, OutOfDeviceMemory, get_backend
from ..engine import ArraySink, Kernel, SequenceSource, run_rows
from ..engine.blocks import host_block
from ..engine.outputs import (
    Head,
    OutputShapeError,
    TargetAxis,
    model_session,
    vectorise_targets,
)
from ..io.fingerprint import function_identity, model_fingerprint
from ..shards import Shard, shard_rows
from .extras import ExtraInputs
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
    extras: ExtraInputs | None = None  # the model's other inputs, rows as in ``source``


class Method(Protocol):
    """A feature-attribution method, as the job layer sees it.

    A method may also have ``run(context, sink, engine, block, verbose) -> bool`` to drive the
    engine itself (e.g. in rounds); returning False leaves the run to the job's single pass.
    A method whose results are not tracks may have ``open_sink(options, targets, squeeze,
    shard, description)``, returning its own sink (with ``n_completed`` rows already written,
    ``close()`` and ``result()``), in memory or in ``options.out``.
    """

    @property
    def func(self) -> str:
        """Name in messages and files ("ism", "integrated_gradients", ...)."""

    @property
    def random_state(self) -> Any:
        """``random_state`` as given (int, Generator or None)."""

    def settings(self) -> dict[str, Any]:
        """Everything besides the shared options that decides the results (stored in ``out``
        files and compared when one is resumed)."""

    def row_shapes(self, n_targets: int) -> dict[str, tuple[int, ...]]:
        """Shape of each result per sequence, e.g. ``{"attributions": (K, L, 4)}``."""

    def kernel(self, context: JobContext) -> Kernel:
        """The engine kernel for the rows of ``context.source``."""


def fed_model(
    be: Backend,
    model: Any,
    source: SequenceSource,
    head: Head,
    func: str,
    extras: ExtraInputs | None = None,
) -> tuple[Any, int]:
    """The model as the job calls it, fed X in the layout (and dtype) it takes, and its number
    of outputs, from a forward pass of the first sequence (twice: a batch of 2, so that an
    output_fn reducing the batch axis shows) in the layout of X, else transposed.
    """
    x = be.asarray(np.repeat(source.read(0, 1), 2, axis=0))
    first: list[Any] = []
    if extras is not None:
        chunk = extras.chunk(be, 0, 1)
        first = extras.for_rows(be, chunk, extras.fixed(be), be.asarray(np.zeros(2), "int64"))
    failures, refusals = [], []
    for transpose in (False, True):
        fed = be.adapt(model, transpose)
        try:
            out = be.forward(fed, x, head, first)
        except (OutputShapeError, OutOfDeviceMemory):
            raise
        except InputShapeRefused as exc:
            refusals.append(exc)
            failures.append(f"{type(exc).__name__}: {_first_line(exc)}")
            continue
        except Exception as exc:  # noqa: BLE001 - the model's own error, reported below
            failures.append(f"{type(exc).__name__}: {_first_line(exc)}")
            continue
        if int(out.shape[0]) != 2:
            given = head.output_fn is not None
            raise parameter_error(
                func,
                "output_fn" if given else "model",
                "a function returning a (batch, n_outputs) tensor, one row for each input"
                if given
                else "a model returning one row of outputs for each input",
                f"{'a result' if given else 'an output'} of shape {tuple(out.shape)} for a "
                "batch of 2 sequences",
                "Reduce over the model's other axes (e.g. out.sum(-1)), never over the batch "
                "axis 0.",
                described=True,
            )
        return fed, int(out.shape[1])
    if refusals:
        raise refusals[0]
    shape = (source.n_sequences, *source.row_shape)
    other = (source.n_sequences, *source.row_shape[::-1])
    raise parameter_error(
        func,
        "model",
        f"a model that takes X of shape {shape} or {other}",
        f"a model that failed on both ({failures[0]}; transposed: {failures[1]})",
        "Check that the model takes one-hot DNA of this length; if X's alphabet axis was "
        "guessed wrong, pass alphabet_axis=1 for (N, 4, L) or -1 for (N, L, 4).",
        described=True,
    )


def _members(model: Any, func: str) -> list[Any]:
    """The models of an ensemble (a list or tuple of models), or the one model."""
    if not isinstance(model, (list, tuple)):
        return [model]
    if not model:
        raise parameter_error(func, "model", "a model or a non-empty list of models", model)
    names = {get_backend(m).name for m in model}
    if len(names) > 1:
        raise parameter_error(
            func,
            "model",
            "a list of models of one framework (an ensemble)",
            f"models of {sorted(names)}",
            described=True,
        )
    return list(model)


#: Ensembles kept while their members live, so that compiled functions and probed batch sizes
#: are reused by later calls with the same models.
_ENSEMBLES: dict[Any, Any] = {}


def _fed(
    be: Backend,
    members: list[Any],
    source: SequenceSource,
    head: Head,
    func: str,
    extras: ExtraInputs | None,
) -> tuple[Any, int]:
    """The model the job calls: the one model, or the ensemble of the members (each fed its
    own layout and dtype), and its number of outputs."""
    fed = [fed_model(be, m, source, head, func, extras) for m in members]
    counts = {n for _, n in fed}
    if len(counts) > 1:
        raise parameter_error(
            func,
            "model",
            "models with the same number of outputs (an ensemble)",
            f"models with {sorted(counts)} outputs",
            "Pass output_fn to select the same outputs of each.",
            described=True,
        )
    if len(members) == 1:
        return fed[0]
    key = (tuple(id(m) for m, _ in fed), head)
    if key not in _ENSEMBLES:
        ensemble = be.ensemble([m for m, _ in fed], head)
        try:
            for member in members:
                weakref.finalize(member, _ENSEMBLES.pop, key, None)
            _ENSEMBLES[key] = ensemble
        except TypeError:  # not weak-referenceable: not cached
            return ensemble, counts.pop()
    return _ENSEMBLES[key], counts.pop()


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:200]


def _stored_random_state(random_state: Any) -> Any:
    if random_state is None or isinstance(random_state, np.random.Generator):
        return None  # no fixed seed: a resumed file keeps the seed it drew
    return int(random_state)


def run_job(
    method: Method, model: Any, source: SequenceSource, options: RunOptions
) -> tuple[dict[str, np.ndarray] | str, bool]:
    """Run ``method`` over ``source`` with ``options``.

    Returns the results by name or the ``out`` file's path, and whether the target axis is
    dropped (an int target). Results and files of tracks come without it already; a method
    with its own sink (``open_sink``) is told, and lays out its results itself.
    """
    func = method.func
    shard = None
    extras = ExtraInputs.check(options.args, source.n_sequences, func)
    # what identifies the job's inputs beyond X's rows, taken before any sharding
    identity = _JobIdentity(None if extras is None else extras.describe(), _provenance(source.data))
    if options.shard is not None:
        shard = shard_rows(*options.shard, source.n_sequences, func)
        source = source.rows(shard.start, shard.stop)
        if extras is not None:
            extras = extras.rows(np.arange(shard.start, shard.stop))
    members = _members(model, func)
    be = get_backend(members[0], options.backend)
    head = Head(options.output_fn, func)
    with ExitStack() as sessions:
        device = [sessions.enter_context(model_session(be, m, options.device)) for m in members][0]
        fed, n_outputs = _fed(be, members, source, head, func, extras)
        if len(members) > 1:
            head = Head(func=func)  # the ensemble's output is already (batch, K)
        targets, squeeze = resolve_targets(options.target, n_outputs, func)
        axis = TargetAxis(squeeze)
        seed = resolve_seed(method.random_state, func)
        row_shapes = method.row_shapes(len(targets))
        result_bytes = 4 * sum(int(np.prod(shape)) for shape in row_shapes.values())
        block = host_block(options.max_cpu_sequences, result_bytes)
        own_sink = getattr(method, "open_sink", None)
        sink: Any
        if own_sink is not None:  # a method whose results are not tracks (a table)
            described = dict(
                _description(be, members),
                model_fingerprint=model_fingerprint(
                    members if len(members) > 1 else members[0], be.state
                ),
                output_fn=function_identity(options.output_fn) or "",
            )
            sink = own_sink(options, targets, squeeze, shard, described)
            done = sink.n_completed
        elif options.out is None:
            sink = _TargetRows(ArraySink(source.n_sequences, axis.rows(row_shapes)), axis)
            done = 0
        else:
            writer, seed = _track_writer(
                method, be, members, source, options, targets, axis, seed, block, shard, identity
            )
            sink = _TargetRows(writer, axis)
            done = sink.n_completed
        try:
            if done < source.n_sequences:
                context = JobContext(
                    be,
                    fed,
                    head,
                    targets,
                    seed,
                    source.tail(done),
                    device,
                    vectorise_targets(be),
                    0 if shard is None else shard.start,
                    extras,
                )
                _run(method, context, sink, options, block)
        finally:
            if options.out is not None or own_sink is not None:
                sink.close()
    return sink.result(), squeeze


def _run(method: Method, context: JobContext, sink: Any, options: RunOptions, block: int) -> None:
    """The engine over the rows left (a method may drive it itself, e.g. in rounds)."""
    todo, be = context.source, context.backend

    def engine(kernel: Kernel, rows: SequenceSource, into: Any) -> Any:
        # a kernel may run the method in several ways (ISM: exact or windowed), each with its
        # own best batch size
        key: Hashable = (
            method.func,
            be.name,
            str(context.device),
            todo.row_shape,
            len(context.targets),
            getattr(kernel, "variant", None),
        )
        return run_rows(
            kernel,
            rows,
            be,
            context.model,
            into,
            batch_size=options.batch_size,
            max_cpu_sequences=options.max_cpu_sequences,
            host_block=block,
            cache_key=key,
            verbose=options.verbose and rows is todo,
            description=method.func,
        )

    own_run = getattr(method, "run", None)
    if own_run is None or not own_run(context, sink, engine, block, options.verbose):
        engine(method.kernel(context), todo, sink)


def _track_writer(
    method: Method,
    be: Backend,
    members: list[Any],
    source: SequenceSource,
    options: RunOptions,
    targets: list[int],
    axis: TargetAxis,
    seed: int,
    block: int,
    shard: Shard | None,
    identity: _JobIdentity,
) -> tuple[Any, int]:
    """Open (or resume) the ``out`` tracks file: the writer and the seed the run must use."""
    from ..io.tracks import open_track_writer
    from ..io.tracks_resume import FileIdentity

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
    if identity.args is not None:
        settings["args"] = identity.args
    if shard is not None:
        settings["shard"] = shard.setting()
        if regions is not None:
            regions = _regions_rows(regions, shard.start, shard.stop)
    assert options.out is not None
    file_identity = FileIdentity.of(
        settings=settings,
        model_fingerprint=model_fingerprint(members if len(members) > 1 else members[0], be.state),
        output_fn=function_identity(options.output_fn),
        provenance=identity.provenance,
        regions=regions,
        streams=axis.rows(method.row_shapes(len(targets))),
        source=source,
        func=method.func,
    )
    return open_track_writer(
        options.out,
        func=method.func,
        source=source,
        identity=file_identity,
        seed=seed,
        adopt_seed=stored_random_state is None,
        description=_description(be, members),
        overwrite=options.overwrite,
        block_sequences=block,
    )


def _description(be: Backend, members: list[Any]) -> dict[str, str]:
    """The backend and the model, as files store them (not compared on resume)."""
    return {"backend": be.name, "model": " + ".join(be.describe(m) for m in members)}


class _TargetRows:
    """A tracks sink (in memory or a file) given rows as ``axis`` lays them out."""

    def __init__(self, sink: Any, axis: TargetAxis) -> None:
        self.sink, self.axis = sink, axis

    @property
    def n_completed(self) -> int:
        return int(self.sink.n_completed)

    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        self.sink.write(start, self.axis.block(block))

    def result(self) -> Any:
        return self.sink.result()

    def close(self) -> None:
        self.sink.close()


@dataclass(frozen=True)
class _JobIdentity:
    """The job's inputs beyond the rows of X: the model's other inputs and where X came from
    (a genome and its regions, a FASTA file), recorded in ``out`` files and compared."""

    args: list[str] | None
    provenance: dict[str, str] | None


def _provenance(data: Any) -> dict[str, str] | None:
    """Where X came from, when X says (``io.GenomeWindows``: the genome and the windows)."""
    describe = getattr(data, "provenance", None)
    return describe() if callable(describe) else None


def _regions_rows(regions: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of ``regions`` (anything with ``chrom``, ``start`` and ``end``)."""
    if hasattr(regions, "take"):
        return regions.take(np.arange(start, stop))
    return SimpleNamespace(
        chrom=list(regions.chrom)[start:stop],
        start=np.asarray(regions.start)[start:stop],
        end=np.asarray(regions.end)[start:stop],
    )
