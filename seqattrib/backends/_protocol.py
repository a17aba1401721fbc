"""The backend protocol: the primitives every method is written against.

A backend is the only place that knows a framework. Tensors are opaque to the engine: it only
combines them with ``+ - *`` (which both frameworks overload) and with the primitives below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Tensor = Any


@dataclass
class TransferStats:
    """Bytes copied across the host/device boundary, counted by the backend."""

    to_device: int = 0
    to_host: int = 0

    def reset(self) -> None:
        self.to_device = 0
        self.to_host = 0


class OutOfDeviceMemory(RuntimeError):
    """A batch did not fit on the device (raised by backends, caught by the batch sizer)."""


class Backend(Protocol):
    """Framework primitives used by the engine and the methods."""

    name: str
    transfers: TransferStats

    def session(self, model: Any, device: Any) -> AbstractContextManager[Any]:
        """Eval mode on ``device`` for the duration; restores device, mode, grad flags after."""

    def describe(self, model: Any) -> str:
        """A short text naming the model (class, parameter count)."""

    def asarray(self, array: np.ndarray, dtype: str = "float32") -> Tensor:
        """Copy a host array to the session's device (counted), cast to ``dtype`` there."""

    def to_numpy(self, tensor: Tensor) -> np.ndarray:
        """Copy a device tensor to a host array (counted)."""

    def take(self, tensor: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
        """Gather ``indices`` along ``axis``."""

    def one_hot(self, indices: Tensor, depth: int) -> Tensor:
        """float32 one-hot rows: (R,) int -> (R, depth)."""

    def log(self, tensor: Tensor) -> Tensor: ...

    def concat(self, tensors: Sequence[Tensor]) -> Tensor:
        """Concatenate along axis 0."""

    def reshape(self, tensor: Tensor, shape: Sequence[int]) -> Tensor: ...

    def mean(self, tensor: Tensor, axis: int, keepdims: bool = True) -> Tensor: ...

    def sum(self, tensor: Tensor, axis: Sequence[int]) -> Tensor: ...

    def segment_sum(self, values: Tensor, segment_ids: Tensor, n_segments: int) -> Tensor:
        """Sum rows of ``values`` that share a segment id: (R, ...) -> (n_segments, ...)."""

    def forward(self, model: Any, x: Tensor, output_fn: Callable[[Any], Any] | None) -> Tensor:
        """Model outputs as a (B, K) tensor, no gradients."""

    def input_gradients(
        self,
        model: Any,
        x: Tensor,
        targets: Sequence[int],
        output_fn: Callable[[Any], Any] | None,
    ) -> tuple[Tensor, Tensor]:
        """One forward pass and a vectorised backward for K selected outputs.

        Returns the selected outputs (B, K) and their gradients (B, K, *x.shape[1:]).
        """

    def synchronize(self) -> None:
        """Wait for queued device work (for timing)."""
