"""The one loop every method runs on: device batches of rows that span sequences."""

from __future__ import annotations

from .batching import AutoBatchSizer, FixedBatchSizer
from .plan import RowPlan
from .runner import Kernel, run
from .sinks import ArraySink, Sink

__all__ = ["ArraySink", "AutoBatchSizer", "FixedBatchSizer", "Kernel", "RowPlan", "Sink", "run"]
