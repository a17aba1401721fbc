"""The backend protocol: a core every backend has, and capabilities a backend may declare.

A backend is the only place that knows a framework. Tensors are opaque above it: methods
combine them with ``+ - *`` (which both frameworks overload) and with the primitives below.

- ``Backend`` (core): arrays and devices, a model session, a precision session, forward passes
  and input gradients of K outputs from one forward pass.
- ``WindowedForward``: what fast ISM needs to recompute windows of a model's local layers.
- ``ParameterGradients``: what data attribution needs (parameters, checkpoints, per-example
  gradients of a loss written above the backends, a few math ops for those losses).

A method asks for a capability by type (``backends.capability(backend, WindowedForward, func)``);
a backend declares one by implementing it (the capability classes are ``runtime_checkable``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

Tensor = Any
#: Maps a model's raw output (tensor, tuple, dict) to a (batch, K) tensor; written above the
#: backends (``engine.outputs.Head``) and called inside them, also while tracing.
Head = Callable[[Any], Any]


@dataclass
class TransferStats:
    """Bytes copied across the host/device boundary, counted by the backend."""

    to_device: int = 0
    to_host: int = 0

    def reset(self) -> None:
        self.to_device = 0
        self.to_host = 0

    @contextmanager
    def paused(self) -> Any:
        """Copies inside this block are not counted (work that is not the job's own)."""
        saved = self.to_device, self.to_host
        try:
            yield
        finally:
            self.to_device, self.to_host = saved


class OutOfDeviceMemory(RuntimeError):
    """A batch did not fit on the device (raised by backends, caught by the batch sizer)."""


@runtime_checkable
class Backend(Protocol):
    """Core primitives used by the engine and every method."""

    name: str
    transfers: TransferStats

    def session(self, model: Any, device: Any) -> AbstractContextManager[Any]:
        """Eval mode on ``device`` for the duration; restores device, mode, grad flags after.
        Yields the resolved device."""

    def full_float32(self) -> AbstractContextManager[None]:
        """Full float32 arithmetic inside the block (no TF32 or reduced-precision matmuls);
        the user's settings are restored after."""

    def describe(self, model: Any) -> str:
        """A short text naming the model (class, parameter count)."""

    def state(self, model: Any) -> dict[str, np.ndarray]:
        """Host copies of the model's full state: every parameter and buffer (torch state dict
        entries; every Keras weight, trainable or not, such as BatchNorm statistics)."""

    def asarray(self, array: np.ndarray, dtype: str = "float32") -> Tensor:
        """Copy a host array to the session's device (counted), cast to ``dtype`` there."""

    def to_numpy(self, tensor: Tensor) -> np.ndarray:
        """Copy a device tensor to a host array (counted)."""

    def take(self, tensor: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
        """Gather ``indices`` along ``axis``."""

    def concat(self, tensors: Sequence[Tensor]) -> Tensor:
        """Concatenate along axis 0."""

    def reshape(self, tensor: Tensor, shape: Sequence[int]) -> Tensor: ...

    def one_hot(self, indices: Tensor, depth: int) -> Tensor:
        """float32 one-hot rows: (R,) int -> (R, depth)."""

    def mean(self, tensor: Tensor, axis: int, keepdims: bool = True) -> Tensor: ...

    def log(self, tensor: Tensor) -> Tensor: ...

    def segment_sum(self, values: Tensor, segment_ids: Tensor, n_segments: int) -> Tensor:
        """Sum rows of ``values`` that share a segment id: (R, ...) -> (n_segments, ...)."""

    def forward(self, model: Any, x: Tensor, head: Head) -> Tensor:
        """``head(model(x))`` as float32 (B, K), no gradients."""

    def input_gradients(
        self, model: Any, x: Tensor, targets: Sequence[int], head: Head, vectorised: bool
    ) -> tuple[Tensor, Tensor]:
        """One forward pass and the gradients of K selected outputs of ``head(model(x))``.

        ``vectorised``: the K vector-Jacobian products as one batched backward (else one after
        another on the same graph). Returns the selected outputs (B, K) and their gradients
        (B, K, *x.shape[1:]).
        """

    def on_accelerator(self) -> bool:
        """Whether the current session computes on a GPU or another accelerator."""

    def synchronize(self) -> None:
        """Wait for queued device work (for timing)."""


@runtime_checkable
class WindowedForward(Protocol):
    """Windowed forward passes of a model's local layers (fast ISM)."""

    def local_graph(
        self,
        model: Any,
        row_shape: tuple[int, int],
        length_axis: int,
        output_fn: Callable[[Any], Any] | None = None,
    ) -> Any:
        """The model's local prefix (``_local_graph.LocalGraph``), without the layers only the
        outputs ``output_fn`` never reads need; raises ``GraphUnsupported`` naming the layer
        when it cannot be split."""

    def gather_windows(
        self, source: Tensor, rows: Tensor, starts: Tensor, width: int, axis: int
    ) -> Tensor:
        """``source[rows[i]]`` at positions ``starts[i] : starts[i] + width`` along ``axis``
        (1 or 2) of the (N, a, b) tensor, as (B, ...) (a new tensor)."""

    def overwrite_windows(
        self, target: Tensor, window: Tensor, at: Tensor | int, axis: int
    ) -> Tensor:
        """``target`` (B, ...) with row i's positions ``at[i] : at[i] + window width`` along
        ``axis`` replaced by ``window[i]`` (positions outside ``target`` are dropped); ``at``
        an int: the same offset for every row, the window inside ``target``. May write
        ``target`` in place."""

    def pad_positions(
        self, x: Tensor, left: int, right: int, axis: int, fill: float = 0.0
    ) -> Tensor:
        """``fill`` added before and after the positions along ``axis`` (negative: removed;
        removing only may return a view)."""

    def fill_outside(
        self, x: Tensor, starts: Tensor, length: int, fill: float, axis: int
    ) -> Tensor:
        """``x`` (B, ...) with ``fill`` at the positions j along ``axis`` where
        ``starts[i] + j`` lies outside ``[0, length)`` (a new tensor)."""

    def reduce_positions(
        self, x: Tensor, starts: Tensor | None, length: int, how: str, axis: int
    ) -> Tensor:
        """(B, C): the sum (``how="sum"``) or maximum (``"max"``) of ``x`` (B, ...) over its
        positions along ``axis`` (C: the other non-batch axis), only those j with
        ``0 <= starts[i] + j < length`` (sums as float64, for ``reduce_complement``); all
        positions when ``starts`` is None (float32, sums accumulated in float64)."""

    def reduce_tables(self, x: Tensor, how: str, axis: int) -> Tensor:
        """Per-sequence tables of ``x`` (N, ...) for ``reduce_complement`` (sequences on axis
        0): float64 prefix sums (``"sum"``), or prefix and suffix maxima (``"max"``)."""

    def reduce_complement(
        self,
        table: Tensor,
        rows: Tensor,
        starts: Tensor,
        width: int,
        inside: Tensor,
        how: str,
    ) -> Tensor:
        """(B, C) float32: the sum or maximum over every position of sequence ``rows[i]`` (of
        the values ``reduce_tables`` was made from), where positions ``starts[i]`` to
        ``starts[i] + width`` hold values whose reduction is ``inside`` (B, C) instead."""

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` made fast for repeated calls on tensors (inference mode; a TF graph)."""

    def pass_bytes(self) -> int | None:
        """The largest intermediate tensor one windowed pass should make, in bytes (a batch
        runs in several passes), or None for no limit."""


@runtime_checkable
class ParameterGradients(Protocol):
    """Parameters, checkpoints and per-example gradients (data attribution)."""

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        """Write a ``state`` snapshot back into the model, in place."""

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
        self,
        model: Any,
        x: Tensor,
        y: Tensor,
        loss: str | Callable[..., Any],
        names: list[str],
        head: Head,
    ) -> Tensor:
        """Vectorised per-example loss gradients, flattened: (B, P) float32.

        ``loss`` is ``"cross_entropy"`` (``y`` int class labels), ``"bce"`` (logits against
        labels in [0, 1], mean over outputs), ``"mse"`` (mean over outputs) or a framework-native
        callable ``loss(outputs, y) -> (B,)``; or one of TRAK's model output functions:
        ``"trak_margin"`` (``y`` int labels: log p_y / (1 - p_y) of the softmax, i.e.
        ``z_y - logsumexp_{k != y} z_k``), ``"trak_binary"`` (one logit, ``y`` in {0, 1}:
        ``(2y - 1) z``), ``"trak_regression"`` (one output: the prediction ``z``). ``names`` come
        from ``trainable_parameters``; ``head`` maps the model's raw output to (B, K). Each
        parameter is flattened in the Keras layout (a torch convolution's (out, in, *kernel)
        weight as (*kernel, in, out), a linear layer's (out, in) as (in, out)), so the same
        weights give the same vector, hence the same random projection, in both frameworks.
        """

    def last_layer_features(
        self, model: Any, x: Tensor, y: Tensor, loss: str | Callable[..., Any]
    ) -> tuple[Tensor, Tensor, bool]:
        """For a model whose output is its last dense layer's (pre-activation) output:
        penultimate activations ``a`` (B, m), ``delta = d loss / d logits`` (B, K) per example,
        and whether that layer has a bias. Raises ``UnsupportedLayer`` otherwise."""

    def matmul(self, a: Tensor, b: Tensor, transpose_b: bool = False) -> Tensor:
        """``a @ b`` (or ``a @ b.T``) on the device."""

    def sum(self, tensor: Tensor, axis: Sequence[int]) -> Tensor: ...


class CheckpointMismatch(ValueError):
    """A checkpoint does not fit the model; the message names the first mismatched key."""


class UnsupportedLayer(ValueError):
    """The model has no final dense layer whose output is the model's output."""
