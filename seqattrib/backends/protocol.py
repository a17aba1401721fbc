"""The backend protocol: a core every backend has, and capabilities a backend may declare.

A backend is the only place that knows a framework. Tensors are opaque above it: methods
combine them with ``+ - *`` (which both frameworks overload) and with the primitives below.

- ``Backend`` (core): arrays and devices, a model session, a precision session, forward passes
  and input gradients of K outputs from one forward pass.
- ``WindowedForward``: what fast ISM needs to recompute windows of a model's local layers.
- ``ParameterGradients``: what data attribution needs (state assignment, checkpoint files,
  per-example gradients of a function written above the backends, the last dense layer, a few
  math ops those functions are written in).
- ``RescaleGradients``: modified gradients for rescale rules (DeepLIFT, DeepSHAP): a model run
  on inputs and their references in which every nonlinearity it finds uses the rescale rule.

A method asks for a capability by type (``backends.capability(backend, WindowedForward, func)``);
a backend declares one by implementing it (the capability classes are ``runtime_checkable``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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

    @property
    def head_ops(self) -> Any:
        """The operations named heads (``seqattrib.heads``) compute with: the backend's
        ``head_ops`` module (the same functions in every backend)."""

    def session(self, model: Any, device: Any) -> AbstractContextManager[Any]:
        """Eval mode on ``device`` for the duration; restores device, mode, grad flags after.
        Yields the resolved device."""

    def full_float32(self) -> AbstractContextManager[None]:
        """Full float32 arithmetic inside the block (no TF32 or reduced-precision matmuls);
        the user's settings are restored after."""

    def describe(self, model: Any) -> str:
        """A short text naming the model (class, parameter count)."""

    def ensemble(self, models: Sequence[Any], head: Head) -> Any:
        """One model whose raw output is the mean of ``head(m(x))`` over ``models`` (B, K):
        its gradients are the mean of theirs, so attributions are the ensemble's mean."""

    def adapt(self, model: Any, transpose_input: bool) -> Any:
        """``model`` fed the way it takes its input: axes 1 and 2 of X swapped when
        ``transpose_input``, cast to the dtype of its parameters where that is not float32
        (float64, bfloat16). Gradients reach X through the adaptation, in X's own layout.
        The same adapter object for the same model and settings (caches key on it); the model
        itself when nothing is to adapt."""

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

    def forward(self, model: Any, x: Tensor, head: Head, extras: Sequence[Tensor] = ()) -> Tensor:
        """``head(model(x, *extras))`` as float32 (B, K), no gradients; ``extras`` are the
        model's other inputs for the same rows (a Keras model gets ``[x, *extras]``)."""

    def outputs(self, raw: Any, head: Head) -> Tensor:
        """``head(raw)`` as float32 (B, K), for a raw output computed elsewhere."""

    def input_gradients(
        self,
        model: Any,
        x: Tensor,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: Sequence[Tensor] = (),
    ) -> tuple[Tensor, Tensor]:
        """One forward pass and the gradients with respect to ``x`` of K selected outputs of
        ``head(model(x, *extras))``.

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

    #: Whether the backend's tensors can be written in place (``add_windows`` honours ``out``).
    writes_in_place: bool

    def local_graph(
        self,
        model: Any,
        row_shape: tuple[int, int],
        length_axis: int,
        output_fn: Callable[[Any], Any] | None = None,
    ) -> Any:
        """The model's local prefix (``local_graph.LocalGraph``), without the layers only the
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

    def add_windows(
        self,
        x: Tensor,
        source: Tensor,
        rows: Tensor,
        starts: Tensor,
        axis: int,
        alpha: float = 1.0,
        out: Tensor | None = None,
    ) -> Tensor:
        """``x`` (B, ...) plus ``alpha`` times ``gather_windows(source, rows, starts, w, axis)``
        (w: the positions of ``x`` along ``axis``). ``out``: where the result may be written
        (``x`` itself, or a tensor laid out as ``x`` with at least its rows, whose first rows
        it then returns); backends whose tensors are immutable, or an ``out`` that cannot
        hold it, return a new tensor."""

    def add_splice(
        self,
        target: Tensor,
        source: Tensor,
        rows: Tensor,
        starts: Tensor,
        window: Tensor,
        at: int,
        axis: int,
    ) -> Tensor:
        """``target`` (B, ...) plus ``source``'s windows as ``gather_windows`` reads them over
        the positions of ``target``, with ``window`` (B, ...) in place of positions
        ``at : at + window width`` (inside ``target``). May write ``target`` in place."""

    def pad_positions(
        self, x: Tensor, left: int, right: int, axis: int, fill: float = 0.0
    ) -> Tensor:
        """``fill`` added before and after the positions along ``axis`` (negative: removed;
        removing only may return a view). The result is laid out as the backend's windows
        are (torch: positions outermost)."""

    def fill_outside(
        self,
        x: Tensor,
        starts: Tensor,
        length: int,
        fill: float,
        axis: int,
        in_place: bool = False,
    ) -> Tensor:
        """``x`` (B, ...) with ``fill`` at the positions j along ``axis`` where
        ``starts[i] + j`` lies outside ``[0, length)`` (a new tensor, or ``x`` itself where no
        position lies outside; ``in_place``: ``x`` may be written)."""

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
        """The largest intermediate tensor a node of a windowed pass should make, in bytes (a
        node whose tensors would be larger runs on chunks of the batch), or None for no
        limit."""


@runtime_checkable
class WindowedBackend(Backend, WindowedForward, Protocol):
    """A backend with the windowed-forward capability (what fast ISM asks for)."""


@runtime_checkable
class ParameterGradients(Protocol):
    """What data attribution needs of a framework: model state and checkpoint files, trainable
    parameters, vectorised per-example gradients of a function it is given, the last dense
    layer's inputs and outputs, and the math that losses are written in.

    The losses and model output functions themselves are written once above the backends
    (``data_attribution.outputs``) as ``fn(z, t) -> (B,)`` over the math primitives below and the
    core's ``one_hot``, ``mean`` and ``reshape``; a backend only differentiates the ``fn`` it is
    given. Checks of checkpoint contents are written once too (``data_attribution.checkpoints``).
    """

    # ----------------------------------------------------------------- state and checkpoints
    def set_state(self, model: Any, state: Mapping[str, Any]) -> None:
        """Assign every state entry of the model (the keys of ``Backend.state``) in place from
        ``state``: host arrays or the framework's tensors of the entries' shapes, cast to the
        entries' dtypes."""

    def read_checkpoint(self, model: Any, path: str) -> Any:
        """Read a checkpoint file in the framework's own format: torch
        ``torch.load(path, weights_only=True)``, returned as it is (a state dict, checked and
        assigned above); Keras ``model.load_weights(path)``, which loads into the model itself
        and returns None. Raises ``CheckpointMismatch`` saying why the file does not fit."""

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        """Names and shapes of the trainable parameters, in the order gradients are flattened.

        Call outside ``session`` (the torch session switches ``requires_grad`` off).
        """

    # ----------------------------------------------------------------- gradients
    def per_example_gradients(
        self,
        model: Any,
        x: Tensor,
        y: Tensor,
        fn: Callable[[Tensor, Tensor], Tensor],
        names: list[str],
        head: Head,
    ) -> Tensor:
        """Vectorised per-example gradients of ``fn(head(model(x_i)), y_i)`` with respect to the
        parameters ``names``, flattened: ``x`` (B, ...), ``y`` (B, ...) -> (B, P) float32.

        ``fn(z, t) -> (B,)`` is framework-native (a definition bound to this backend, or the
        user's callable loss); it is called on one example at a time, ``z`` (1, K) float32 and
        ``t`` (1, ...). ``names`` come from ``trainable_parameters``. Each parameter is flattened
        in the Keras layout (a torch convolution's (out, in, *kernel) weight as
        (*kernel, in, out), a linear layer's (out, in) as (in, out)), so the same weights give
        the same vector, hence the same random projection, in both frameworks. Raises
        ``OutOfDeviceMemory`` when the batch does not fit.
        """

    def output_gradients(
        self, fn: Callable[[Tensor, Tensor], Tensor], z: Tensor, y: Tensor
    ) -> Tensor:
        """Per-example gradients of ``fn(z_i, y_i)`` with respect to the outputs: ``z`` (B, K)
        float32, ``y`` (B, ...) -> (B, K) (e.g. ``d loss / d logits``)."""

    def last_layer(self, model: Any, x: Tensor) -> tuple[Tensor, Tensor, bool]:
        """For a model whose output is its last dense layer's (pre-activation) output: that
        layer's inputs ``a`` (B, m) float32, its outputs ``z`` (B, K) float32 (the model's
        logits), and whether it has a bias. Raises ``UnsupportedLayer`` naming why a model does
        not qualify."""

    # ----------------------------------------------------------------- math
    def matmul(self, a: Tensor, b: Tensor, transpose_b: bool = False) -> Tensor:
        """``a @ b`` (or ``a @ b.T``): (n, m) and (m, p) (or (p, m)) -> (n, p)."""

    def sum(self, tensor: Tensor, axis: Sequence[int]) -> Tensor:
        """Sum over ``axis`` (the axes dropped)."""

    def take_columns(self, tensor: Tensor, columns: Sequence[int]) -> Tensor:
        """The columns ``columns`` (Python ints) of ``tensor``, in that order: (B, K) ->
        (B, len(columns))."""

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        """``x`` where ``condition`` is nonzero (e.g. a one-hot row), else ``y``; the three
        broadcast (``x`` or ``y`` may be a Python number)."""

    def logsumexp(self, tensor: Tensor, axis: int) -> Tensor:
        """``log sum exp`` over ``axis`` (dropped), stable for large entries and ``-inf``."""

    def exp(self, tensor: Tensor) -> Tensor:
        """Elementwise ``e^x``."""

    def softplus(self, tensor: Tensor) -> Tensor:
        """Elementwise ``log(1 + e^x)``."""

    def softmax_cross_entropy(self, logits: Tensor, probabilities: Tensor) -> Tensor:
        """``-sum_k p_k log softmax(z)_k`` per row: (B, K), (B, K) -> (B,); the framework's
        fused kernel (its rounding, also of the gradient ``softmax(z) - p``)."""

    def sigmoid_cross_entropy(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Elementwise binary cross-entropy of logits against targets in [0, 1],
        ``softplus(z) - z t``: (B, K), (B, K) -> (B, K); the framework's own kernel."""


#: Below this |z_ref - z_input| an elementwise nonlinearity takes its gradient instead of the
#: rescale rule's secant, which float32 rounding turns into noise there (tangermeme and SHAP
#: use the same threshold).
RESCALE_EPS = 1e-6


@dataclass(frozen=True)
class RescaleReport:
    """What a backend found in a model for the rescale rules (descriptions for messages).

    ``rescaled``: elementwise nonlinearities under the rescale rule; ``max_rule``: max pooling
    and max reductions under DeepLIFT's max rule; ``by_gradient``: input-dependent operations
    that no rule covers and that are not linear (they keep their gradient, so attributions no
    longer sum to the output difference exactly).
    """

    rescaled: tuple[str, ...] = ()
    max_rule: tuple[str, ...] = ()
    by_gradient: tuple[str, ...] = ()


class RescaleUnsupported(ValueError):
    """The rescale rules cannot be applied to this model: ``received`` describes the model
    (naming the operation: a softmax before the target, an in-place nonlinearity, a part of the
    model the backend cannot see into), ``fix`` says what to do."""

    def __init__(self, received: str, fix: str = "") -> None:
        self.received, self.fix = received, fix
        super().__init__(f"{received}. {fix}".strip() if fix else received)


@runtime_checkable
class RescaleGradients(Protocol):
    """Modified gradients for rescale rules (DeepLIFT, DeepSHAP).

    A batch holds n inputs and R references; reference row r is compared with input row
    ``index[r]``. Elementwise nonlinearities take the multiplier (f(z_r) - f(z_x)) / (z_r - z_x)
    (their gradient where |z_r - z_x| < 1e-6); max pooling and max reductions route the change
    of their output to the positions that hold the maximum for the input and for the reference
    (DeepLIFT's max rule, the input's routing where z_r == z_x); linear operations keep their
    gradient. The model is left as it was when a call returns or raises.
    """

    def rescale_layers(
        self, model: Any, x: Tensor, head: Head, extras: Sequence[Tensor] = ()
    ) -> RescaleReport:
        """Find the nonlinearities of ``head(model(x, *extras))`` (one forward pass on ``x``).

        Raises ``RescaleUnsupported`` naming the operation for a softmax on the way to the
        outputs, an in-place nonlinearity, or a nonlinearity the backend cannot reach.
        """

    def rescale_gradients(
        self,
        model: Any,
        inputs: Tensor,
        references: Tensor,
        index: np.ndarray,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: tuple[Sequence[Tensor], Sequence[Tensor]] = ((), ()),
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The rescale-rule multipliers of K selected outputs of ``head(model(.))``; ``extras``
        are the model's other inputs for the rows of ``inputs`` and of ``references``.

        ``inputs`` (n, *row), ``references`` (R, *row) device tensors; ``index`` (R,) the
        row of ``inputs`` of each reference, a host (numpy) integer array, so that a backend
        reads the pairing without a copy back from the device (it copies ``index`` to the
        device where its rules need it there). ``vectorised``: the K backward passes as one
        batched backward, as for ``input_gradients`` (the TensorFlow backend ignores it: its
        K passes are parts of one compiled graph). Returns the selected outputs of the inputs
        (n, K) and of the references (R, K), and the multipliers (R, K, *row): for every
        reference row and target, the modified gradient with respect to the input, so that
        f(x) - f(r) = sum of (x - r) * multipliers when every nonlinearity is covered.
        """


class CheckpointMismatch(ValueError):
    """A checkpoint does not fit the model; the message names the first mismatched key."""


class UnsupportedLayer(ValueError):
    """The model has no final dense layer whose output is the model's output."""
