"""Losses and model output functions of data attribution, written once.

Each definition maps a model's outputs ``z`` (B, K) and targets ``t`` to one value per example
(B,), using only the few primitives of ``Ops``. A backend offers them (the ``ParameterGradients``
capability with the core ``one_hot``, ``mean``, ``reshape``): bound to a backend
(``bound(definition, backend)``) a definition is a framework-native ``fn(z, t)`` that the backend
differentiates per example. ``NUMPY`` offers them on host arrays: TRAK's out-to-loss weights Q
come from the same definitions, evaluated in float64 on the model outputs that TRAK copies to
the host anyway (the kernel and its inverse are float64 there too).

Targets: class labels enter as one-hot rows (``Labels.targets``), which both frameworks handle
inside a vectorised per-example function; other labels as values, reshaped to (B, K) here.

Cross-entropies use the frameworks' fused, numerically stable kernels (``softmax_cross_entropy``,
``sigmoid_cross_entropy``): a log-softmax or softplus composition is the same function but
rounds differently (by up to 6e-8 in d loss / d logits of order 1, measured), and results of
this package are kept bit for bit (``tests/test_golden.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Tensor = Any


class Ops(Protocol):
    """The primitives the definitions use (a backend's, or ``NUMPY``)."""

    def one_hot(self, indices: Tensor, depth: int) -> Tensor: ...

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor: ...

    def sum(self, tensor: Tensor, axis: Sequence[int]) -> Tensor: ...

    def mean(self, tensor: Tensor, axis: int, keepdims: bool = True) -> Tensor: ...

    def reshape(self, tensor: Tensor, shape: Sequence[int]) -> Tensor: ...

    def logsumexp(self, tensor: Tensor, axis: int) -> Tensor: ...

    def exp(self, tensor: Tensor) -> Tensor: ...

    def softplus(self, tensor: Tensor) -> Tensor: ...

    def softmax_cross_entropy(self, logits: Tensor, probabilities: Tensor) -> Tensor: ...

    def sigmoid_cross_entropy(self, logits: Tensor, targets: Tensor) -> Tensor: ...


Definition = Callable[[Ops, Tensor, Tensor], Tensor]


def _per_output(ops: Ops, t: Tensor, z: Tensor) -> Tensor:
    """Targets as (B, K) rows, one value per output of ``z``."""
    return ops.reshape(t, (-1, int(z.shape[1])))


# ----------------------------------------------------------------- training losses (TracIn)
def cross_entropy(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``-log softmax(z)_y``; ``t`` one-hot rows of the labels."""
    return ops.softmax_cross_entropy(z, t)


def binary_cross_entropy(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """Binary cross-entropy of logits against targets in [0, 1], mean over outputs."""
    return ops.mean(ops.sigmoid_cross_entropy(z, _per_output(ops, t, z)), 1, keepdims=False)


def mean_squared_error(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """Mean over outputs of ``(z - t)^2``."""
    residual = z - _per_output(ops, t, z)
    return ops.mean(residual * residual, 1, keepdims=False)


# ----------------------------------------------------------------- model output functions (TRAK)
def margin(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``log p_y / (1 - p_y) = z_y - logsumexp_{k != y} z_k``; ``t`` one-hot rows."""
    correct = ops.sum(ops.where(t, z, 0.0), (1,))
    return correct - ops.logsumexp(ops.where(t, -np.inf, z), 1)


def signed_logit(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``(2y - 1) z`` of a binary model's one logit, labels ``y`` in {0, 1}."""
    return (2 * _per_output(ops, t, z) - 1)[:, 0] * z[:, 0]


def prediction(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """A regression model's one output."""
    return z[:, 0]


LOSSES: dict[str, Definition] = {
    "cross_entropy": cross_entropy,
    "bce": binary_cross_entropy,
    "mse": mean_squared_error,
}
TASKS: dict[str, Definition] = {
    "classification": margin,
    "binary": signed_logit,
    "regression": prediction,
}


def out_to_loss(task: str, ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """TRAK's weights ``Q = -dL/df`` of the output function ``f`` of ``task``: ``1 - p_y`` and
    ``sigmoid(-f)`` (the same thing for the margin and the signed logit, computed as
    ``exp(-softplus(f))``), the residual ``y - f`` for regression."""
    f = TASKS[task](ops, z, t)
    if task == "regression":
        return ops.reshape(t, (-1,)) - f
    return ops.exp(-ops.softplus(f))


# ----------------------------------------------------------------- binding
@dataclass(frozen=True)
class OutputFunction:
    """A definition bound to a backend: the framework-native ``fn(z, t) -> (B,)`` it runs.

    Equal for equal definitions and backends, so compiled functions keyed by it are reused.
    """

    definition: Definition
    ops: Any

    def __call__(self, z: Tensor, t: Tensor) -> Tensor:
        return self.definition(self.ops, z, t)


_BOUND: dict[tuple[Definition, Any], OutputFunction] = {}


def bound(definition: Definition, backend: Any) -> OutputFunction:
    """``definition`` bound to ``backend``: one object per pair, alive for the process, so that
    compiled functions a backend keeps per function object outlive each method object."""
    key = (definition, backend)
    if key not in _BOUND:
        _BOUND[key] = OutputFunction(definition, backend)
    return _BOUND[key]


class NumpyOps:
    """The primitives on host arrays, in the arrays' own precision."""

    def one_hot(self, indices: np.ndarray, depth: int) -> np.ndarray:
        return np.eye(depth, dtype=np.float32)[indices]

    def where(
        self, condition: np.ndarray, x: np.ndarray | float, y: np.ndarray | float
    ) -> np.ndarray:
        return np.where(condition != 0, x, y)

    def sum(self, tensor: np.ndarray, axis: Sequence[int]) -> np.ndarray:
        return tensor.sum(axis=tuple(axis))

    def mean(self, tensor: np.ndarray, axis: int, keepdims: bool = True) -> np.ndarray:
        return tensor.mean(axis=axis, keepdims=keepdims)

    def reshape(self, tensor: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        return np.reshape(tensor, tuple(shape))

    def logsumexp(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        top = tensor.max(axis=axis, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        return np.squeeze(top, axis) + np.log(np.exp(tensor - top).sum(axis=axis))

    def exp(self, tensor: np.ndarray) -> np.ndarray:
        return np.exp(tensor)

    def softplus(self, tensor: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, tensor)

    def softmax_cross_entropy(self, logits: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
        return -(probabilities * (logits - self.logsumexp(logits, 1)[:, None])).sum(axis=1)

    def sigmoid_cross_entropy(self, logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return self.softplus(logits) - logits * targets


NUMPY = NumpyOps()
