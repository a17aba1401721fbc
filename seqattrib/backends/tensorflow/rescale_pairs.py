"""DeepLIFT rules of the TensorFlow backend that read more than one value of an input row:
softmax and log-softmax, products of two input-dependent tensors, the square of a difference,
division by an input-dependent tensor, and elementwise operations with a constant operand.

Each rule is exact: for every output, the multipliers times the input's change sum to the
output's change, so a model made of covered operations keeps summation to delta. The rules are
those of the torch backend, found here by TensorFlow operation type:

- A product c = op(a, b) of two input-dependent tensors (``Mul``, ``MatMul``,
  ``BatchMatMulV2/V3``, two-operand ``Einsum``: linear in each operand) takes the Shapley rule
  of the two operands, c_x - c_r = op(a_bar, b_x - b_r) + op(a_x - a_r, b_bar) with a_bar,
  b_bar the means of the input's and the reference's operands: the operation's own gradient at
  (a_bar, b_bar). A product with a weight, or with a tensor held constant
  (``tf.stop_gradient``), keeps its gradient.
- ``SquaredDifference`` (a - b)^2, as ``tf.nn.moments`` writes a variance: the square under the
  rescale rule, (d_x + d_r) with d = a - b, also where b is held constant (the mean of a
  variance: its change adds nothing, the centred values summing to zero).
- Division a / b by an input-dependent b: the product of a and 1 / b (the product rule), with
  the reciprocal under the rescale rule, -1 / (b_x b_r).
- ``Softmax`` over the last axis, as the torch backend and tangermeme chain it (exp, sum,
  reciprocal, and the log-ratio product rule) in closed form; ``LogSoftmax`` as the log of it,
  which leaves g_j - e_j k sum_i g_i (the names of the torch backend's module docstring).
- ``Pow``, ``Minimum``, ``Maximum`` and ``ClipByValue`` of one input-dependent tensor and
  constants: the rescale rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

from ..protocol import RESCALE_EPS

PRODUCT_OPS = frozenset("Mul MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3 Einsum".split())
DIVISION_OPS = frozenset(["RealDiv", "Div"])
SOFTMAX_OPS = frozenset(["Softmax", "LogSoftmax"])
#: Elementwise in their first input, the others constants.
CONSTANT_OPERAND_OPS = frozenset("Pow Minimum Maximum ClipByValue".split())
#: The operations whose gradient depends on which of their inputs depend on the input.
PAIR_OPS = PRODUCT_OPS | DIVISION_OPS | SOFTMAX_OPS | CONSTANT_OPERAND_OPS | {"SquaredDifference"}
#: Outputs that carry neither the input's value nor its gradient (shapes, comparisons).
NO_GRADIENT_OPS = frozenset(
    """Shape ShapeN Size Rank Equal NotEqual Greater GreaterEqual Less LessEqual ArgMax ArgMin
    LogicalAnd LogicalOr LogicalNot IsNan IsFinite Sign Round Floor Ceil""".split()
)
_HELD = frozenset(["StopGradient", "PreventGradient"])

#: How the report names each rule.
LABELS = {
    "product": "{type} of two input-dependent tensors ('{name}'), under the product rule",
    "square": "{type} ('{name}'), the square of a difference under the rescale rule",
    "division": "division by an input-dependent tensor ('{name}'), as a product and a reciprocal",
    "softmax": "{type} ('{name}'), under the softmax rule",
    "rescale": "{type} ('{name}')",
}


class Dependence:
    """Which tensors of a graph depend on ``source``: ``values`` (whose values change with it)
    and ``gradients`` (those that also carry its gradient: not only through a stop_gradient).
    Read once, on first use, from the graph's operations in the order they were made: the
    forward pass must be complete by then."""

    def __init__(self, source: tf.Tensor) -> None:
        self.source = source
        self._read = 0
        self.values = {source.ref()}
        self.gradients = {source.ref()}

    def _update(self) -> None:
        operations = self.source.graph.get_operations()
        for op in operations[self._read :]:
            if op.type in NO_GRADIENT_OPS:
                continue
            refs = [t.ref() for t in op.inputs]
            if not any(r in self.values for r in refs):
                continue
            self.values.update(t.ref() for t in op.outputs)
            if op.type not in _HELD and any(r in self.gradients for r in refs):
                self.gradients.update(t.ref() for t in op.outputs)
        self._read = len(operations)

    def value(self, t: tf.Tensor) -> bool:
        if not self._read:
            self._update()
        return t.ref() in self.values

    def gradient(self, t: tf.Tensor) -> bool:
        if not self._read:
            self._update()
        return t.ref() in self.gradients


def pair_rule(op: Any, dependence: Dependence) -> str | None:
    """The rule of an operation of ``PAIR_OPS`` (see ``LABELS``), or None where it keeps its
    gradient (linear in what depends on the input, or not covered)."""
    carries = [dependence.gradient(t) for t in op.inputs]
    if not any(carries):
        return None
    kind = op.type
    if kind in SOFTMAX_OPS:
        return "softmax"
    if kind == "SquaredDifference":
        return "square"
    if kind in PRODUCT_OPS:
        return "product" if len(carries) == 2 and all(carries) else None
    if kind in DIVISION_OPS:
        return "division" if carries[1] else None
    z, y = op.inputs[0].shape, op.outputs[0].shape
    same_shape = z.rank is not None and z.rank == y.rank and z.is_compatible_with(y)
    if carries[0] and not any(carries[1:]) and same_shape:
        return "rescale"
    return None


def paired_operands(op: Any, rule: str, dependence: Dependence) -> list[tf.Tensor]:
    """The inputs of ``op`` that ``rule`` reads row by row (for the report's batch check)."""
    if rule in ("softmax", "rescale"):
        return [op.inputs[0]]
    return [t for t in op.inputs if dependence.value(t)]


# --------------------------------------------------------------------------- the rules
Split = Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
Pad = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _midpoint(t: tf.Tensor, split: Split) -> tf.Tensor:
    t_x, t_r = split(t)
    return (t_x + t_r) * 0.5


class _AtInputs:
    """``op`` with other inputs, for calling its registered gradient function."""

    def __init__(self, op: Any, inputs: list[tf.Tensor]) -> None:
        self._op, self.inputs = op, inputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)


def midpoint_gradient(
    op: Any, grad: tf.Tensor, dependence: Dependence, split: Split, pad: Pad, n: Any
) -> list[Any]:
    """The product rule, and the rescale rule of a squared difference: the operation's
    gradient at the midpoint of each input-dependent operand (exact for an operation linear in
    each operand, and for (a - b)^2), for the reference rows."""
    moved = [_midpoint(t, split) if dependence.value(t) else t for t in op.inputs]
    grads = tf_ops._gradient_registry.lookup(op.type)(_AtInputs(op, moved), grad[n:])
    return [
        pad(t, g) if g is not None and dependence.gradient(t) else None
        for t, g in zip(op.inputs, grads, strict=True)
    ]


def division_gradient(
    op: Any, grad: tf.Tensor, dependence: Dependence, split: Split, pad: Pad, n: Any
) -> list[Any]:
    """a / b as a * (1 / b): the product rule, then the reciprocal's secant -1 / (b_x b_r)."""
    a, b = op.inputs[0], op.inputs[1]
    b_x, b_r = split(b)
    if dependence.gradient(a):
        a_used = _midpoint(a, split)
    else:  # a weight, or a tensor held constant: the references' own values
        a_used = a[n:] if dependence.value(a) else a
    c_bar = (1.0 / b_x + 1.0 / b_r) * 0.5
    with tf.GradientTape() as tape:
        tape.watch([a_used, c_bar])
        product = a_used * c_bar
    to_a, to_c = tape.gradient(product, [a_used, c_bar], output_gradients=grad[n:])
    to_b = -to_c / (b_x * b_r)
    return [pad(a, to_a) if dependence.gradient(a) else None, pad(b, to_b)]


def softmax_gradient(
    op: Any, grad: tf.Tensor, split: Split, pad: Pad, n: Any, log: bool = False
) -> list[Any]:
    """The softmax rule over the last axis (see the module docstring), in float64."""
    z = op.inputs[0]
    z_i, z_r = (tf.cast(t, tf.float64) for t in split(z))
    lse_r = tf.reduce_logsumexp(z_r, -1, keepdims=True)
    lse_i = tf.reduce_logsumexp(z_i, -1, keepdims=True)
    half = tf.clip_by_value((lse_i - lse_r) * 0.5, -300.0, 300.0)  # d / 2
    u = tf.exp(half)
    p, q = tf.exp(z_i - lse_i), tf.exp(z_r - lse_r)
    dz = z_i - z_r
    close = tf.logical_not(tf.abs(dz) > RESCALE_EPS)  # also where both are -inf (masked)
    to_exp = tf.where(close, q / u, (p * u - q / u) / tf.where(close, tf.ones_like(dz), dz))
    small = tf.abs(half) < 1e-8
    one = tf.ones_like(half)
    kappa = tf.where(small, one, half / tf.where(small, one, tf.sinh(half)))
    g = tf.cast(grad[n:], tf.float64)
    if not log:
        d_log = dz - 2.0 * half  # the change of log softmax
        flat = tf.logical_not(tf.abs(d_log) > RESCALE_EPS)
        g = g * tf.where(flat, q, (p - q) / tf.where(flat, tf.ones_like(d_log), d_log))
    out = g - to_exp * kappa * tf.reduce_sum(g, -1, keepdims=True)
    return [pad(z, tf.cast(out, grad.dtype))]
