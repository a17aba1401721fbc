"""Featurizing a training set into a store, shared by TRAK and TracIn: the rows of a shard, the
store's identity, resuming where a killed run stopped, progress, and the one-line checks of
``store``, ``shard`` and ``ids``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..engine import SequenceSource
from ..io.features import StoreIdentity, StoreWriter, data_hashes
from ..io.fingerprint import function_identity
from ..shards import Shard, check_shard, shard_rows
from .checkpoints import Visit
from .examples import Labels, named
from .gradients import GradientPlan

#: (start, stop, features, {quantity: values}) of one block of rows, starts relative to the rows
#: being featurized.
Block = tuple[int, int, np.ndarray, dict[str, np.ndarray]]


@dataclass(frozen=True)
class StoreJob:
    """What a method stores: its name, model identity, settings, feature dimension, per-example
    quantities and whether the store ends with TRAK's kernel step."""

    method: str
    model: str
    settings: dict[str, Any]
    dim: int
    quantities: tuple[str, ...]
    kernel: bool


def model_identity(backend: Any, model: Any, plan: GradientPlan, output_fn: Any) -> str:
    """The model a store's features belong to: its class, backend, traced parameters (names
    and shapes) and output function."""
    shapes = dict(backend.trainable_parameters(model))
    return json.dumps(
        {
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "backend": backend.name,
            "parameters": [[n, list(shapes[n])] for n in plan.names],
            "output_fn": function_identity(output_fn),
        },
        sort_keys=True,
    )


def check_ids(ids: Any, n: int, func: str) -> list[str] | None:
    """``ids`` as a list of ``n`` strings, or None."""
    if ids is None:
        return None
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise parameter_error(func, "ids", f"None or {n} strings, one per sequence", ids)
    values = [str(v) for v in ids]
    if len(values) != n:
        raise parameter_error(
            func,
            "ids",
            f"one id per training sequence ({n} of them)",
            f"{len(values)} ids",
            "Pass the names of the same sequences, in the same order.",
            described=True,
        )
    return values


def checked_span(shard: Any, store: str | None, n_total: int, func: str) -> Shard | None:
    """The rows of ``shard`` (None: all), which needs a store."""
    pair = check_shard(shard, func)
    if pair is None:
        return None
    if store is None:
        raise parameter_error(
            func,
            "store",
            "a file path when shard= is given (each shard is featurized into its own store)",
            None,
            "Pass store='train_features.shard-0.h5' (one path per shard), then merge them.",
        )
    return shard_rows(pair[0], pair[1], n_total, func)


def fill_store(
    path: str,
    job: StoreJob,
    source: SequenceSource,
    labels: Labels,
    ids: list[str] | None,
    span: Shard | None,
    fingerprints: list[str],
    visits: Callable[[], Iterator[Visit]],
    featurize: Callable[[Visit, SequenceSource, Labels], Iterator[Block]],
    kernel: Callable[[Any], Sequence[Any]] | None,
    verbose: bool,
    func: str,
) -> None:
    """Create, resume or reuse the store at ``path`` and fill it: every checkpoint's features of
    the rows of ``span`` (all rows when None), then the kernel step when the job has one and
    holds the whole training set (``kernel(store) -> fits``). A finished store of the same job
    is reused as it is; one of another job is refused."""
    start, stop = (0, source.n_sequences) if span is None else (span.start, span.stop)
    rows = source.rows(start, stop)
    values = labels.values[start:stop]
    with named("X_train"):  # reads (and checks) every sequence of the rows
        row_hashes, label_hashes = data_hashes(rows, values)
    identity = StoreIdentity(
        method=job.method,
        model=job.model,
        checkpoints=fingerprints,
        settings=job.settings,
        dim=job.dim,
        quantities=job.quantities,
        n_total=source.n_sequences,
        shard=span,
        kernel_step=job.kernel,
        row_hashes=row_hashes,
        label_hashes=label_hashes,
        ids=None if ids is None else ids[start:stop],
    )
    writer = StoreWriter(path, identity, func).open()
    try:
        if writer.finished:
            return
        n_rows = identity.n_rows
        first_checkpoint, first_row = writer.resume_point()
        total = len(fingerprints) * n_rows
        with _progress(writer.n_completed, total - writer.n_completed, verbose, func) as bar:
            for visit in visits():
                if visit.index < first_checkpoint:
                    continue
                offset = first_row if visit.index == first_checkpoint else 0
                if offset == n_rows:
                    continue
                tail = rows.tail(offset)
                tail_labels = Labels(values[offset:], labels.dtype, labels.depth)
                for block_start, block_stop, features, quantities in featurize(
                    visit, tail, tail_labels
                ):
                    writer.write(visit.index, offset + block_start, features, quantities)
                    bar.update(block_stop - block_start)
        if identity.kernel and kernel is not None:
            writer.write_kernel(kernel(writer.reader()))
    finally:
        writer.close()


def _progress(done: int, todo: int, verbose: bool, func: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=done + todo,
        initial=done,
        disable=not verbose,
        unit="seq",
        desc=func,
        file=sys.stderr,
    )
