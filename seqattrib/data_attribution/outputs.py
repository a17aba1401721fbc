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
this package are kept bit for bit (``tests/test_golden.py``). The multinomial loss is written
out instead: TensorFlow's fused kernel returns the gradient ``softmax(z) - p`` even when the
targets (counts) do not sum to one, where the gradient is ``sum(p) softmax(z) - p``.

Losses by name (``LOSSES``, TracIn's training losses; ``OUTPUT_FUNCTIONS``, TRAK's model output
functions ``f`` with ``out_to_loss``'s weights ``Q = -dL/df``):

==============  ==========================  =================================  ===============
loss            labels (per sequence)       f (TRAK)                           Q
==============  ==========================  =================================  ===============
cross_entropy   a class index               margin ``z_y - logsumexp_{k!=y}``  ``1 - p_y``
bce             0/1 (TracIn: [0, 1])        signed logit ``(2y - 1) z``        ``sigmoid(-f)``
mse             a real value per output     the output ``z``                   ``y - f``
poisson         a count per output          the log-rate ``z``                 ``y - exp(f)``
multinomial     a count per output          ``sum_k y_k log_softmax(z)_k``     ``1``
==============  ==========================  =================================  ===============
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._errors import parameter_error
from .._validation import resolve_targets

Tensor = Any


class Ops(Protocol):
    """The primitives the definitions use (a backend's, or ``NUMPY``)."""

    def one_hot(self, indices: Tensor, depth: int) -> Tensor: ...

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor: ...

    def sum(self, tensor: Tensor, axis: Sequence[int]) -> Tensor: ...

    def mean(self, tensor: Tensor, axis: int, keepdims: bool = True) -> Tensor: ...

    def reshape(self, tensor: Tensor, shape: Sequence[int]) -> Tensor: ...

    def take_columns(self, tensor: Tensor, columns: Sequence[int]) -> Tensor: ...

    def logsumexp(self, tensor: Tensor, axis: int) -> Tensor: ...

    def exp(self, tensor: Tensor) -> Tensor: ...

    def softplus(self, tensor: Tensor) -> Tensor: ...

    def softmax_cross_entropy(self, logits: Tensor, probabilities: Tensor) -> Tensor: ...

    def sigmoid_cross_entropy(self, logits: Tensor, targets: Tensor) -> Tensor: ...


Definition = Callable[[Ops, Tensor, Tensor], Tensor]


def _per_output(ops: Ops, t: Tensor, z: Tensor) -> Tensor:
    """Targets as (B, K) rows, one value per output of ``z``: (B, K) as they are, (B,) of a
    model with one output as (B, 1). Read from the rank of ``t``, not from K: a compiled
    function traced for several K sees no K."""
    return t if len(t.shape) == 2 else ops.reshape(t, (-1, 1))


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


def poisson(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """Poisson negative log-likelihood of counts ``t`` under log-rates ``z``, mean over outputs:
    ``mean_k exp(z_k) - t_k z_k``.

    The convention of ``torch.nn.functional.poisson_nll_loss(z, t, log_input=True,
    full=False)`` and of ``keras.losses.Poisson()(t, exp(z))``: the model outputs log-rates
    (no ``exp`` or ``softplus`` layer at its end), and the constant ``log t_k!`` is left out
    (it has no gradient).
    """
    return ops.mean(ops.exp(z) - _per_output(ops, t, z) * z, 1, keepdims=False)


def multinomial(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """Multinomial negative log-likelihood of a profile of counts ``t`` (B, K) under logits ``z``
    over its K positions: ``-sum_k t_k log_softmax(z)_k``.

    The profile loss BPNet and ChromBPNet train (bpnet-lite's ``MNLLLoss``) with the constant
    ``log n! - sum_k log t_k!`` left out (it has no gradient). Both strands of a profile are
    one axis of K = 2 x length positions, flattened by ``output_fn``.
    """
    log_p = z - ops.reshape(ops.logsumexp(z, 1), (-1, 1))
    return -ops.sum(_per_output(ops, t, z) * log_p, (1,))


# ----------------------------------------------------------------- model output functions (TRAK)
def margin(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``log p_y / (1 - p_y) = z_y - logsumexp_{k != y} z_k``; ``t`` one-hot rows."""
    correct = ops.sum(ops.where(t, z, 0.0), (1,))
    return correct - ops.logsumexp(ops.where(t, -np.inf, z), 1)


def signed_logit(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``(2y - 1) z`` of a binary model's one logit, labels ``y`` in {0, 1}."""
    return (2 * _per_output(ops, t, z) - 1)[:, 0] * z[:, 0]


def prediction(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """A model's one output: a regression's prediction, a Poisson model's log-rate."""
    return z[:, 0]


def profile_log_likelihood(ops: Ops, z: Tensor, t: Tensor) -> Tensor:
    """``sum_k t_k log_softmax(z)_k``: the log-likelihood of the observed profile ``t`` (up to
    its constant), minus the multinomial loss."""
    return -multinomial(ops, z, t)


LOSSES: dict[str, Definition] = {
    "cross_entropy": cross_entropy,
    "bce": binary_cross_entropy,
    "mse": mean_squared_error,
    "poisson": poisson,
    "multinomial": multinomial,
}
"""Training losses by name (TracIn): ``fn(ops, z, t) -> (B,)``."""

OUTPUT_FUNCTIONS: dict[str, Definition] = {
    "cross_entropy": margin,
    "bce": signed_logit,
    "mse": prediction,
    "poisson": prediction,
    "multinomial": profile_log_likelihood,
}
"""TRAK's model output function ``f`` for each loss: ``fn(ops, z, t) -> (B,)``."""

TASK_LOSSES: dict[str, str] = {
    "classification": "cross_entropy",
    "binary": "bce",
    "regression": "mse",
}
"""The loss each earlier ``task=`` name stands for."""

TASKS: dict[str, Definition] = {task: OUTPUT_FUNCTIONS[loss] for task, loss in TASK_LOSSES.items()}
"""TRAK's model output function of each earlier ``task=`` name."""

SINGLE_OUTPUT: frozenset[str] = frozenset({"bce", "mse", "poisson"})
"""Losses whose TRAK output function reads one output (``z[:, 0]``)."""


def out_to_loss(
    loss: str, ops: Ops, z: Tensor, t: Tensor, columns: Sequence[int] | None = None
) -> Tensor:
    """TRAK's weights ``Q = -dL/df`` of the output function ``f`` of ``loss``.

    ``1 - p_y`` for ``"cross_entropy"`` and ``sigmoid(-f)`` for ``"bce"`` (the same function
    of the margin and of the signed logit, computed as ``exp(-softplus(f))``); the residual
    ``y - f`` for ``"mse"`` (that of ``L = (f - y)^2 / 2``: halving the loss scales every score
    alike); ``y - exp(f)`` (counts minus rate) for ``"poisson"``; ``1`` for
    ``"multinomial"``, whose ``f`` is the profile's log-likelihood itself (``L = -f``): its
    scores predict how training on an example changes the log-likelihood of a test profile.

    Parameters
    ----------
    loss : str
        A key of ``OUTPUT_FUNCTIONS``, or an earlier task name (a key of ``TASK_LOSSES``).
    ops : Ops
        ``NUMPY`` on host arrays, or a backend on its tensors.
    z : array of shape (B, K_all)
        Model outputs (after ``output_fn``).
    t : array of shape (B, ...)
        Targets, as ``Labels.targets`` gives them (one-hot rows of class labels, or values).
    columns : sequence of int, optional
        The outputs the loss sees (``check_target``); None: all.

    Returns
    -------
    array of shape (B,)
    """
    if columns is not None:
        z = ops.take_columns(z, columns)
    loss = TASK_LOSSES.get(loss, loss)
    f = OUTPUT_FUNCTIONS[loss](ops, z, t)
    if loss == "mse":
        return ops.reshape(t, (-1,)) - f
    if loss == "poisson":
        return ops.reshape(t, (-1,)) - ops.exp(f)
    if loss == "multinomial":
        return 0.0 * f + 1.0
    return ops.exp(-ops.softplus(f))


# ----------------------------------------------------------------- binding
@dataclass(frozen=True)
class OutputFunction:
    """A definition bound to a backend: the framework-native ``fn(z, t) -> (B,)`` it runs, on
    the outputs ``columns`` of ``z`` (all when None).

    Equal for equal definitions, backends and columns, so compiled functions keyed by it are
    reused.
    """

    definition: Definition
    ops: Any
    columns: tuple[int, ...] | None = None

    def __call__(self, z: Tensor, t: Tensor) -> Tensor:
        if self.columns is not None:
            z = self.ops.take_columns(z, self.columns)
        return self.definition(self.ops, z, t)


_BOUND: dict[tuple[Definition, Any, tuple[int, ...] | None], OutputFunction] = {}


def bound(
    definition: Definition, backend: Any, columns: Sequence[int] | None = None
) -> OutputFunction:
    """``definition`` bound to ``backend``, applied to the outputs ``columns`` (as
    ``check_target`` gives them; None: all outputs).

    One object per (definition, backend, columns), alive for the process, so that compiled
    functions a backend keeps per function object outlive each method object.
    """
    key = (definition, backend, None if columns is None else tuple(int(c) for c in columns))
    if key not in _BOUND:
        _BOUND[key] = OutputFunction(*key)
    return _BOUND[key]


def check_target(target: Any, n_outputs: int, func: str) -> tuple[int, ...] | None:
    """The output columns ``target`` selects for the loss, checked against the model's outputs.

    Parameters
    ----------
    target : None, int or sequence of int
        None: every output; an int or a sequence of distinct ints: those columns of the model's
        (B, n_outputs) output (after ``output_fn``), in that order; negative ints count from
        the end.
    n_outputs : int
        Outputs of the model (after ``output_fn``).
    func : str
        The public function named in errors.

    Returns
    -------
    tuple of int or None
        Non-negative column indices, or None for all outputs.
    """
    if target is None:
        return None
    columns, _ = resolve_targets(target, n_outputs, func)
    if len(set(columns)) != len(columns):
        raise parameter_error(
            func,
            "target",
            "distinct output indices",
            target,
            "Each output enters the loss once; list it once.",
        )
    return tuple(columns)


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

    def take_columns(self, tensor: np.ndarray, columns: Sequence[int]) -> np.ndarray:
        return tensor[:, list(columns)]

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
