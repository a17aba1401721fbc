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

    def outputs(self, raw: Any, output_fn: Callable[[Any], Any] | None) -> Tensor:
        """A raw model output as (batch, n_outputs) float32, through ``output_fn``."""

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

    def local_graph(self, model: Any, row_shape: tuple[int, int], length_axis: int) -> Any:
        """The model's local prefix for fast ISM (``_local_graph.LocalGraph``); raises
        ``GraphUnsupported`` naming the layer when it cannot be split."""

    def expand_windows(
        self,
        ref: Tensor,
        seq: Tensor,
        starts: Tensor,
        width: int,
        window: Tensor,
        window_starts: Tensor,
        axis: int,
        offsets: tuple[int, int],
    ) -> Tensor:
        """Mutants' values over wider windows, as (B, ...): row ``seq[i]`` of ``ref`` (N, a, b)
        at positions ``starts[i] + j`` (``j < width``) along ``axis`` (1 or 2), overwritten by
        ``window`` (B, ...; positions ``window_starts[i] + j``) where they overlap.
        ``window_starts - starts`` lies within ``offsets`` (low, high), and ``ref`` is padded
        so that positions ``starts + low`` to ``starts + high + window width`` exist."""

    def pad_positions(self, x: Tensor, left: int, right: int, axis: int) -> Tensor:
        """Zeros added before and after the positions along ``axis`` (negative: removed)."""

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` made fast for repeated calls on tensors (inference mode; a TF graph)."""

    def on_accelerator(self) -> bool:
        """Whether the current session computes on a GPU or another accelerator."""

    def synchronize(self) -> None:
        """Wait for queued device work (for timing)."""

    # ----------------------------------------------------------------- data attribution
    def get_state(self, model: Any) -> dict[str, np.ndarray]:
        """Host copies of the model's full state: every parameter and buffer (torch state dict
        entries; every Keras weight, trainable or not, such as BatchNorm statistics)."""

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        """Write a ``get_state`` snapshot back into the model, in place."""

    def load_checkpoint(self, model: Any, checkpoint: Any) -> float | None:
        """Default checkpoint loader: torch ``load_state_dict(torch.load(path, weights_only=True))``
        or a state dict; Keras ``load_weights(path)``, a weight list or a ``{path: array}`` dict.

        Returns None (no learning rate). Raises ``CheckpointMismatch`` naming the first key that
        does not fit the model.
        """

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        """Names and shapes of the trainable parameters, in the order gradients are flattened.

        Call outside ``session`` (the torch session switches ``requires_grad`` off).
        """

    def per_example_gradients(
        self, model: Any, x: Tensor, y: Tensor, loss: str | Callable[..., Any], names: list[str]
    ) -> Tensor:
        """Vectorised per-example loss gradients, flattened: (B, P) float32.

        ``loss`` is ``"cross_entropy"`` (``y`` int class labels), ``"bce"`` (logits against
        labels in [0, 1], mean over outputs), ``"mse"`` (mean over outputs) or a framework-native
        callable ``loss(outputs, y) -> (B,)``; or one of TRAK's model output functions:
        ``"trak_margin"`` (``y`` int labels: log p_y / (1 - p_y) of the softmax, i.e.
        ``z_y - logsumexp_{k != y} z_k``), ``"trak_binary"`` (one logit, ``y`` in {0, 1}:
        ``(2y - 1) z``), ``"trak_regression"`` (one output: the prediction ``z``). ``names`` come
        from ``trainable_parameters``. Each parameter is flattened in the Keras layout
        (a torch convolution's (out, in, *kernel) weight as (*kernel, in, out), a linear
        layer's (out, in) as (in, out)), so the same weights give the same vector, hence the
        same random projection, in both frameworks.
        """

    def last_layer_features(
        self, model: Any, x: Tensor, y: Tensor, loss: str | Callable[..., Any]
    ) -> tuple[Tensor, Tensor, bool]:
        """For a model whose output is its last dense layer's (pre-activation) output:
        penultimate activations ``a`` (B, m), ``delta = d loss / d logits`` (B, K) per example,
        and whether that layer has a bias. Raises ``UnsupportedLayer`` otherwise."""

    def matmul(self, a: Tensor, b: Tensor, transpose_b: bool = False) -> Tensor:
        """``a @ b`` (or ``a @ b.T``) on the device."""


class CheckpointMismatch(ValueError):
    """A checkpoint does not fit the model; the message names the first mismatched key."""


class UnsupportedLayer(ValueError):
    """The model has no final dense layer whose output is the model's output."""
