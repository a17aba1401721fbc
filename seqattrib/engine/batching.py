"""Batch sizes in device rows: fixed, or probed per model, device and input shape.

Per-row cost falls with batch size while the device is under-used and rises again once
activations leave the cache (CPU) or memory runs out (GPU), so ``batch_size="auto"`` measures.
The probe is real work: the first batches of a job run at growing sizes (each size twice, the
second timed, so tracing and kernel selection stay out of the timing), then the best per-row
size is kept and cached for the model, device, input shape and number of targets, with its
per-row time.

A busy machine (another process on the same cores) makes single timings unreliable, so a
size that looks no better than the best so far is timed once more and keeps its faster timing
before it counts against the climb. On a CPU the job then keeps watching its own per-row time:
when it stays more than ``REPROBE_FACTOR`` times slower or faster than the probe measured at
that size (the probe ran under other load than the job), the size is probed again, once per
job, and the new result replaces the cached one. So a probe taken at a bad moment does not
strand this job or later ones at its size.

A job too small to finish the probe caches nothing final; it leaves its best size so far, and
the next job with the same key resumes the climb there instead of starting again at the bottom.
On an accelerator the climb starts at ``ACCELERATOR_START`` rows: smaller batches only measure
kernel-launch overhead there (measured on an H200: 32-row batches ran IG 5-20x slower per row
than 2048-row ones on the BPNet- and CREsted-like benchmark models). On a CPU it starts at
``CPU_START`` rows, fewer for long inputs: the first batch holds at most ``CPU_START_BYTES`` of
input, one row of a 196,608-bp sequence. A 16-row batch of an Enformer-sized model at that
length can need more memory than the host has, and a host that runs out of memory kills the
process rather than raising an error the probe could back off from (an accelerator raises one).
"""

from __future__ import annotations

import statistics
import weakref
from collections.abc import Hashable
from typing import Any

_CACHE: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
_CACHE_BY_ID: dict[int, dict[Hashable, Any]] = {}

#: Sizes tried in order (rows). A probe stops after ``_PATIENCE`` sizes in a row that are not
#: at least ``1 - _GAIN`` faster per row than the best so far (one slow timing on a busy machine
#: must not strand a job at a tiny size), past ``_MAX_BATCH_SECONDS``, or when the device runs
#: out of memory; the best size measured is kept.
_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_GAIN = 0.95
_PATIENCE = 2
_MAX_BATCH_SECONDS = 4.0
#: First size tried on an accelerator (GPU/TPU) and on a CPU.
ACCELERATOR_START = 256
CPU_START = 16
#: Input bytes (float32 rows) of the first batch on a CPU, at most; at least one row.
CPU_START_BYTES = 4 * 2**20
#: A job whose per-row time at its size stays this many times off the probe's probes again.
REPROBE_FACTOR = 2.0
#: Full batches (the median of their per-row times) that decide whether to probe again.
_WATCH_BATCHES = 5


def _store(model: Any) -> dict[Hashable, Any]:
    try:
        return _CACHE.setdefault(model, {})
    except TypeError:
        return _CACHE_BY_ID.setdefault(id(model), {})


def first_size(on_accelerator: bool, sequence_bytes: int) -> int:
    """Rows of the first batch of a probe, for inputs of ``sequence_bytes`` each (float32)."""
    if on_accelerator:
        return ACCELERATOR_START
    fits = max(1, CPU_START_BYTES // max(1, sequence_bytes))
    return max(c for c in _CANDIDATES if c <= min(CPU_START, fits))


def clear_cache() -> None:
    """Forget every probed batch size."""
    _CACHE.clear()
    _CACHE_BY_ID.clear()


class FixedBatchSizer:
    """The size the user asked for (halved only if the device runs out of memory)."""

    timing = False

    def __init__(self, size: int) -> None:
        self.size = size

    def next_size(self) -> int:
        return self.size

    def observe(self, rows: int, seconds: float) -> None:
        """Nothing to learn from a fixed size."""

    def out_of_memory(self, size: int) -> None:
        if size <= 1:
            raise MemoryError("One row does not fit on the device.")
        self.size = max(1, size // 2)


class AutoBatchSizer:
    """Probe on the job's own first batches, then keep the fastest size per row.

    ``watch``: compare the job's per-row times with the probe's after it (only where batch
    times are exact without synchronising, i.e. on a CPU).
    """

    def __init__(
        self,
        model: Any,
        key: Hashable,
        n_rows: int,
        *,
        first_size: int | None = None,
        watch: bool = True,
    ) -> None:
        self._store = _store(model)
        self._key = key
        cached = self._store.get(key)
        resume = self._store.get(("unfinished", key))
        self._ceiling = len(_CANDIDATES) - 1  # index of the largest size still worth trying
        start = CPU_START if first_size is None else first_size
        self._start = next(
            (i for i, c in enumerate(_CANDIDATES) if c >= start), len(_CANDIDATES) - 1
        )
        self._candidate = _CANDIDATES.index(resume) if resume in _CANDIDATES else self._start
        self.size = cached if cached is not None else _CANDIDATES[self._candidate]
        self.timing = cached is None
        self._repeat = 0
        self._n_rows_left = n_rows
        self._best: tuple[float, int] | None = None  # (seconds per row, size)
        self._misses = 0
        self._retimed: float | None = None  # the first timing of a size timed twice
        self._rate: float | None = self._store.get(("rate", key)) if cached is not None else None
        self._watch = watch
        self._recent: list[float] = []
        self._reprobed = False
        self.probed: list[tuple[int, float]] = []

    def next_size(self) -> int:
        return self.size

    def observe(self, rows: int, seconds: float) -> None:
        self._n_rows_left -= rows
        if not self.timing:
            self._check_rate(rows, seconds)
            return
        self._repeat += 1
        if self._repeat < 2:  # the first batch of a size warms it up
            return
        if rows < self.size:  # a partial batch at the end: its time says nothing
            self._finish(cache=False)
            return
        per_row = seconds / rows
        if self._retimed is not None:
            per_row, self._retimed = min(per_row, self._retimed), None
        elif (
            self._best is not None
            and per_row >= _GAIN * self._best[0]
            and seconds <= _MAX_BATCH_SECONDS
        ):
            # no better than the best so far: a busy moment must not decide alone
            self._retimed, self._repeat = per_row, 1
            return
        self._repeat = 0
        self.probed.append((self.size, per_row))
        improved = self._best is None or per_row < _GAIN * self._best[0]
        if self._best is None or per_row < self._best[0]:
            self._best = (per_row, self.size)
        self._misses = 0 if improved else self._misses + 1
        next_index = self._candidate + 1
        concluded = (
            self._misses >= _PATIENCE or seconds > _MAX_BATCH_SECONDS or next_index > self._ceiling
        )
        if concluded or 2 * _CANDIDATES[next_index] > self._n_rows_left:
            self._finish(cache=concluded)  # a job too small to probe further caches nothing
            return
        self._candidate = next_index
        self.size = _CANDIDATES[next_index]

    def _check_rate(self, rows: int, seconds: float) -> None:
        """Probe again (once per job) when the job's per-row time at its size stays far from
        what the probe measured there."""
        if not self._watch or self._reprobed or self._rate is None or rows < self.size:
            return
        self._recent = [*self._recent[1 - _WATCH_BATCHES :], seconds / rows]
        if len(self._recent) < _WATCH_BATCHES:
            return
        ratio = statistics.median(self._recent) / self._rate
        if 1 / REPROBE_FACTOR <= ratio <= REPROBE_FACTOR:
            return
        self._reprobed, self.timing = True, True
        self._candidate = max(self._start, _CANDIDATES.index(self.size) - 2)
        self.size = _CANDIDATES[self._candidate]
        self._best, self._misses, self._repeat, self._recent = None, 0, 0, []

    def out_of_memory(self, size: int) -> None:
        # nothing at or above this size is tried again in this probe
        self._ceiling = min(
            self._ceiling, max((i for i, c in enumerate(_CANDIDATES) if c < size), default=-1)
        )
        if self._best is None:
            if size <= 1:
                raise MemoryError("One row does not fit on the device.")
            self.size = max(1, size // 2)
            if self.size in _CANDIDATES:
                self._candidate = _CANDIDATES.index(self.size)
            return
        self._finish(cache=True)

    def _finish(self, cache: bool) -> None:
        if self._best is not None:
            self.size = self._best[1]
        self.timing = False
        self._retimed = None
        if cache:
            self._store[self._key] = self.size
            self._store.pop(("unfinished", self._key), None)
            if self._best is not None:
                self._store[("rate", self._key)] = self._best[0]
                self._rate = self._best[0]
        elif self._best is not None and self.size in _CANDIDATES:
            # the next job resumes the climb at the best size so far
            self._store[("unfinished", self._key)] = self.size
