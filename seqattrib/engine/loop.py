"""The one loop: device batch -> kernel -> device accumulator -> host buffer -> sink.

Rows of all sequences form one flat list (``RowPlan``); a device batch is a contiguous slice of
it, so it spans sequences. The kernel reduces a batch to one partial result per touched
sequence on the device (a segment sum); a sequence whose rows straddle batches is carried on the
device until its last row is in. Finished sequences cross to the host once, in host blocks, and
go to the sink. X is read in input chunks, so host memory is bounded by the chunk, the block and
the sink, never by N (``blocks`` derives both from ``max_cpu_sequences``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np

from ..backends import Backend, OutOfDeviceMemory
from . import batching
from .batching import AutoBatchSizer, FixedBatchSizer
from .blocks import input_chunk
from .plan import RowPlan
from .sinks import Sink
from .source import SequenceSource

Tensor = Any
Payload = dict[str, Tensor]


class Kernel(Protocol):
    """What a method gives the loop."""

    @property
    def rows_per_sequence(self) -> int | np.ndarray:
        """Rows of every sequence, or one count per sequence (shape (n_sequences,))."""

    def prepare(self, x: np.ndarray, first: int) -> Payload:
        """Move a chunk of sequences (rows ``first:first+len(x)`` of X) to the device.

        ``first`` (here and in ``finalize``) indexes X itself, also in a resumed run.

        Every tensor in the payload has the chunk's sequences on axis 0.
        """

    def compute(
        self,
        payload: Payload,
        local: np.ndarray,
        row_in_sequence: np.ndarray,
        segment: np.ndarray,
        n_segments: int,
    ) -> Payload:
        """Reduce one batch of rows to partial results per sequence, on the device.

        ``local`` indexes the payload's axis 0 for each row, ``segment`` numbers the batch's
        sequences from 0. Returns tensors of shape (n_segments, ...) that add up across batches.
        """

    def finalize(self, block: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        """Host post-processing of finished sequences ``first:first+n`` before the sink."""


class _Window:
    """Device payload for the sequences [lo, hi) that current and next batches need."""

    def __init__(
        self,
        kernel: Kernel,
        source: SequenceSource,
        backend: Backend,
        chunk: int,
    ) -> None:
        self.kernel, self.source, self.backend = kernel, source, backend
        self.lo = self.hi = 0
        self.payload: Payload = {}
        self.chunk = chunk

    def ensure(self, first: int, stop: int) -> None:
        if first > self.lo and self.payload:
            drop = min(first, self.hi) - self.lo
            self.payload = {name: t[drop:] for name, t in self.payload.items()}
            self.lo += drop
        if first >= self.hi:
            self.lo = self.hi = first
            self.payload = {}
        while self.hi < stop:
            end = min(self.source.n_sequences, self.hi + max(self.chunk, stop - self.hi))
            fresh = self.kernel.prepare(
                self.source.read(self.hi, end), self.source.offset + self.hi
            )
            if self.payload:
                fresh = {
                    name: self.backend.concat([self.payload[name], t]) for name, t in fresh.items()
                }
            self.payload = fresh
            self.hi = end


def run_rows(
    kernel: Kernel,
    source: SequenceSource,
    backend: Backend,
    model: Any,
    sink: Sink,
    *,
    batch_size: int | None,
    max_cpu_sequences: int,
    host_block: int,
    cache_key: Hashable,
    verbose: bool = False,
    description: str = "",
) -> Any:
    """Run every row of ``kernel`` over ``source`` into ``sink``; return ``sink.result()``.

    ``batch_size`` rows per device batch (None: probed and cached under ``cache_key``);
    ``host_block`` finished sequences per copy to the host (see ``blocks``).
    """
    plan = RowPlan(source.n_sequences, kernel.rows_per_sequence)
    sequence_bytes = 4 * math.prod(source.row_shape)
    sizer: FixedBatchSizer | AutoBatchSizer = (
        FixedBatchSizer(batch_size)
        if batch_size is not None
        else AutoBatchSizer(
            model,
            cache_key,
            plan.n_rows,
            first_size=batching.first_size(backend.on_accelerator(), sequence_bytes),
            watch=not backend.on_accelerator(),  # batch times are exact without a sync there
        )
    )
    align = int(getattr(kernel, "row_alignment", 1))  # batches of whole groups of rows
    chunk = input_chunk(max_cpu_sequences, plan.mean_rows, sequence_bytes)
    window = _Window(kernel, source, backend, chunk)
    progress = _progress(source.offset, source.n_sequences, verbose, description)
    carry: Payload | None = None
    done = _Finished(kernel, backend, sink, host_block, progress, source.offset)
    start = 0
    while start < plan.n_rows:
        size = sizer.next_size()
        stop = min(start + max(align, size // align * align), plan.n_rows)
        first, last = plan.sequences(start, stop)
        window.ensure(first, last)
        sequence, row_in_sequence = plan.rows(start, stop)
        tick = time.perf_counter()
        try:
            parts = kernel.compute(
                window.payload,
                sequence - window.lo,
                row_in_sequence,
                sequence - first,
                last - first,
            )
            if sizer.timing:
                backend.synchronize()
        except OutOfDeviceMemory:
            sizer.out_of_memory(size)
            continue
        sizer.observe(stop - start, time.perf_counter() - tick)
        if carry is not None:
            parts = {
                name: backend.concat([t[:1] + carry[name], t[1:]])
                if len(t) > 1
                else t + carry[name]
                for name, t in parts.items()
            }
        n_complete = plan.completed(stop) - first
        carry = (
            {name: t[n_complete:] for name, t in parts.items()}
            if first + n_complete < last
            else None
        )
        if n_complete:
            done.add({name: t[:n_complete] for name, t in parts.items()}, n_complete)
        start = stop
    done.flush(everything=True)
    progress.close()
    return sink.result()


class _Finished:
    """Finished sequences: kept on the device, copied to the host in blocks, then sunk."""

    def __init__(
        self,
        kernel: Kernel,
        backend: Backend,
        sink: Sink,
        block: int,
        progress: Any,
        first: int,
    ) -> None:
        self.kernel, self.backend, self.sink, self.progress = kernel, backend, sink, progress
        self.parts: list[Payload] = []
        self.n_pending = 0
        self.n_written = first  # global index (a resumed run starts past the written rows)
        self.block = block

    def add(self, part: Payload, n: int) -> None:
        self.parts.append(part)
        self.n_pending += n
        if self.n_pending >= self.block:
            self.flush(everything=False)

    def flush(self, everything: bool) -> None:
        if not self.parts:
            return
        names = list(self.parts[0])
        pending = {name: self.backend.concat([p[name] for p in self.parts]) for name in names}
        n = self.n_pending
        offset = 0
        while n - offset >= self.block or (everything and offset < n):
            size = min(self.block, n - offset)
            host = {
                name: self.backend.to_numpy(t[offset : offset + size])
                for name, t in pending.items()
            }
            self.sink.write(self.n_written, self.kernel.finalize(host, self.n_written))
            self.n_written += size
            offset += size
            self.progress.update(size)
        rest = {name: t[offset:] for name, t in pending.items()}
        self.parts = [rest] if offset < n else []
        self.n_pending = n - offset


def _progress(done: int, todo: int, verbose: bool, description: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=done + todo,
        initial=done,
        disable=not verbose,
        unit="seq",
        desc=description or None,
        file=sys.stderr,
    )
