"""The one loop every method runs on: device batches of rows that span sequences."""

from __future__ import annotations

from .batching import AutoBatchSizer, FixedBatchSizer
from .loop import Kernel, run_rows
from .plan import RowPlan
from .sinks import ArraySink, Sink
from .source import SequenceSource, as_source

__all__ = [
    "ArraySink",
    "AutoBatchSizer",
    "FixedBatchSizer",
    "Kernel",
    "RowPlan",
    "SequenceSource",
    "Sink",
    "as_source",
    "run_rows",
]
