"""The rescale-gradients capability of the TensorFlow backend (DeepLIFT, DeepSHAP).

One device batch holds the inputs (n rows) and their references (R rows): every operation sees
the activations of both, so a rule reads a reference row against the input row it is paired
with (``index``). The model runs in a ``tf.function`` whose backward pass uses ``tf.gradients``,
which (unlike ``GradientTape``) honours the graph's gradient overrides, so the rules reach every
TensorFlow operation the model makes, inside custom layers and ``Lambda`` layers too:

- elementwise operations (``Relu``, ``Elu``, ``Sigmoid``, ``Tanh``, ``Softplus``, ``Exp``,
  ``Log``, ``Rsqrt``, ``Square``, ...) take the rescale rule through a gradient override;
- ``MaxPool`` and ``Max`` (max pooling, global max pooling) take DeepLIFT's max rule;
- softmax, products of two input-dependent tensors (attention), the square of a difference
  (variances), division by an input-dependent tensor: the rules of ``rescale_pairs``, so that
  Keras's ``MultiHeadAttention``, ``LayerNormalization``, ``GroupNormalization``,
  ``UnitNormalization`` and ``RMSNormalization`` are covered by the operations they emit;
- a Keras layer's activation (``Conv1D(..., activation="gelu")``, ``Activation("silu")``)
  is rescaled as one elementwise function, also where TensorFlow writes it as several
  operations (GELU, SiLU): while a call runs, each such layer's ``activation`` attribute is
  wrapped, and the original is put back when the call returns or raises.

``rescale_layers`` traces the model once and reads the operations between the input and the
outputs: a nested ``tf.function`` (whose inside the overrides cannot reach) and a rule on a
batch axis other than 0 are refused; other input-dependent operations that are not linear (a
product of three activations, a tensor held constant) are listed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

from ..protocol import RESCALE_EPS, Head, OutOfDeviceMemory, RescaleReport, RescaleUnsupported
from .parameters import call_model, is_keras
from .rescale_pairs import (
    DIVISION_OPS,
    LABELS,
    NO_GRADIENT_OPS,
    PAIR_OPS,
    PRODUCT_OPS,
    Dependence,
    division_gradient,
    midpoint_gradient,
    pair_rule,
    paired_operands,
    softmax_gradient,
)

_RESCALE_OPS = frozenset(
    """Relu Relu6 Elu Selu LeakyRelu Sigmoid Tanh Softplus Softsign Exp Expm1 Log Log1p Sqrt
    Rsqrt Square Reciprocal Inv Erf Erfc Abs""".split()
)
_MAX_OPS = frozenset(["MaxPool", "Max"])
_HELD_OPS = frozenset(["StopGradient", "PreventGradient"])
_SELECT_OPS = frozenset(["Select", "SelectV2"])
_SHAPE_OPS = frozenset("Shape ShapeN Size Rank".split())
_CALL_OPS = frozenset(["PartitionedCall", "StatefulPartitionedCall"])
#: Linear in every input-dependent input (or the identity at inference).
_LINEAR_OPS = frozenset(
    """Identity ExpandDims Squeeze Reshape Transpose ConcatV2 Pack Unpack Split SplitV Slice
    StridedSlice Pad PadV2 MirrorPad Tile BroadcastTo Cast Conv2D Conv3D DepthwiseConv2dNative
    Conv2DBackpropInput BiasAdd Add AddV2 AddN Sub Neg Mean Sum AvgPool AvgPool3D GatherV2
    ResourceGather Cumsum ReverseV2 ResizeNearestNeighbor ResizeBilinear StopGradient
    PreventGradient ZerosLike OnesLike Shape ShapeN Size Rank Fill NoOp Placeholder Const
    ReadVariableOp""".split()
)

_SCOPE = "seqattrib_rescale"
_OVERRIDES = (
    {op: "SeqAttribRescale" for op in _RESCALE_OPS}
    | {op: "SeqAttribMaxRule" for op in _MAX_OPS}
    | {op: "SeqAttribPairRule" for op in PAIR_OPS}
)


# --------------------------------------------------------------------------- the pairing
@dataclass
class _Pairing:
    """While a rescale function is traced: the number of input rows at the top of the batch,
    the input row of each reference row, the activations the wrappers rescaled, and which
    tensors depend on the batch."""

    n: Any  # scalar int32 tensor
    index: Any  # (R,) int32 tensor
    wrapped: list[str] = field(default_factory=list)
    differentiated: set[str] = field(default_factory=set)  # names of overridden operations
    dependence: Dependence | None = None


_local = threading.local()


def _pairing() -> _Pairing | None:
    return getattr(_local, "pairing", None)


@contextmanager
def _paired(pairing: _Pairing) -> Iterator[_Pairing]:
    previous = _pairing()
    _local.pairing = pairing
    try:
        yield pairing
    finally:
        _local.pairing = previous


def _split(t: tf.Tensor, pairing: _Pairing) -> tuple[tf.Tensor, tf.Tensor]:
    """(each reference row's input row, the reference rows) of a batch tensor."""
    return tf.gather(t[: pairing.n], pairing.index), t[pairing.n :]


def _with_input_rows(t: tf.Tensor, reference_rows: tf.Tensor, pairing: _Pairing) -> tf.Tensor:
    """Zero gradient for the input rows (only the references' gradients are read)."""
    return tf.concat([tf.zeros_like(t[: pairing.n]), reference_rows], axis=0)


def _secant(
    z: tf.Tensor, y: tf.Tensor, grad: tf.Tensor, plain: tf.Tensor, pairing: _Pairing
) -> tf.Tensor:
    """The rescale rule for the reference rows: grad * (f(z) - f(z_x)) / (z - z_x), or
    ``plain`` (grad * f'(z)) where |z - z_x| < RESCALE_EPS."""
    z_x, z_r = _split(z, pairing)
    y_x, y_r = _split(y, pairing)
    dz = z_r - z_x
    small = tf.abs(dz) < RESCALE_EPS
    secant = (y_r - y_x) / tf.where(small, tf.ones_like(dz), dz)
    return tf.where(small, plain, grad[pairing.n :] * secant)


# --------------------------------------------------------------------------- the overrides
def _rescale_gradient(op: Any, grad: tf.Tensor) -> list[Any]:
    pairing = _pairing()
    assert pairing is not None, "the rescale override is only used while a pairing is active"
    pairing.differentiated.add(op.name)
    plain = tf_ops._gradient_registry.lookup(op.type)(op, grad)
    plain = plain[0] if isinstance(plain, (list, tuple)) else plain
    z, y = op.inputs[0], op.outputs[0]
    routed = _secant(z, y, grad, plain[pairing.n :], pairing)
    return [_with_input_rows(z, routed, pairing)] + [None] * (len(op.inputs) - 1)


def _route(op: Any, z: tf.Tensor, y: tf.Tensor, grad: tf.Tensor) -> tf.Tensor:
    """The max operation's own gradient at input ``z`` (output ``y``) for upstream ``grad``:
    ``grad`` sent to the positions holding the maxima (shared among ties for ``Max``)."""
    if op.type == "MaxPool":
        return tf.raw_ops.MaxPoolGrad(
            orig_input=z,
            orig_output=y,
            grad=grad,
            ksize=op.get_attr("ksize"),
            strides=op.get_attr("strides"),
            padding=op.get_attr("padding"),
            explicit_paddings=op.get_attr("explicit_paddings"),
            data_format=op.get_attr("data_format"),
        )
    axes = tf.math.floormod(tf.reshape(op.inputs[1], [-1]), tf.rank(z))
    kept = tf.tensor_scatter_nd_update(
        tf.shape(z), axes[:, None], tf.ones_like(axes, dtype=tf.int32)
    )
    y, grad = tf.reshape(y, kept), tf.reshape(grad, kept)
    hits = tf.cast(tf.equal(y, z), grad.dtype)
    return hits / tf.reduce_sum(hits, axis=axes, keepdims=True) * grad


def _max_gradient(op: Any, grad: tf.Tensor) -> list[Any]:
    """DeepLIFT's max rule: grad * max(y_x - y_r, 0) routed to the input's maxima plus
    grad * min(y_x - y_r, 0) routed to the reference's, over z_x - z_r; where z_x == z_r,
    the input's routing of grad."""
    pairing = _pairing()
    assert pairing is not None, "the max-rule override is only used while a pairing is active"
    pairing.differentiated.add(op.name)
    z, y = op.inputs[0], op.outputs[0]
    z_x, z_r = _split(z, pairing)
    y_x, y_r = _split(y, pairing)
    g = grad[pairing.n :]
    gap = y_x - y_r
    to_input = _route(op, z_x, y_x, g * tf.maximum(gap, 0.0))
    to_reference = _route(op, z_r, y_r, g * tf.minimum(gap, 0.0))
    dz = z_x - z_r
    unchanged = tf.equal(dz, 0.0)
    routed = tf.where(
        unchanged,
        _route(op, z_x, y_x, g),
        (to_input + to_reference) / tf.where(unchanged, tf.ones_like(dz), dz),
    )
    return [_with_input_rows(z, routed, pairing)] + [None] * (len(op.inputs) - 1)


def _pair_gradient(op: Any, grad: tf.Tensor) -> Any:
    """The rules of ``rescale_pairs`` where ``op`` takes one, else the operation's gradient."""
    pairing = _pairing()
    assert pairing is not None, "the pair-rule override is only used while a pairing is active"
    assert pairing.dependence is not None, "the batch is set before the model runs"
    pairing.differentiated.add(op.name)
    dependence = pairing.dependence
    rule = pair_rule(op, dependence)
    if rule is None:
        return tf_ops._gradient_registry.lookup(op.type)(op, grad)
    if rule == "rescale":
        return _rescale_gradient(op, grad)

    def split(t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return _split(t, pairing)

    def pad(t: tf.Tensor, reference_rows: tf.Tensor) -> tf.Tensor:
        return _with_input_rows(t, reference_rows, pairing)

    if rule == "softmax":
        return softmax_gradient(op, grad, split, pad, pairing.n, log=op.type == "LogSoftmax")
    if rule == "division":
        return division_gradient(op, grad, dependence, split, pad, pairing.n)
    return midpoint_gradient(op, grad, dependence, split, pad, pairing.n)


def _register() -> None:
    for name, fn in (
        ("SeqAttribRescale", _rescale_gradient),
        ("SeqAttribMaxRule", _max_gradient),
        ("SeqAttribPairRule", _pair_gradient),
    ):
        try:
            tf.RegisterGradient(name)(fn)
        except KeyError:  # registered by an earlier import of this module
            pass


_register()


# --------------------------------------------------------------------------- Keras activations
def _elementwise_activation(fn: Any) -> bool:
    """A Keras activation (or TensorFlow function) known to act elementwise, other than the
    identity: one that the wrappers may rescale as a whole."""
    from ..keras.nodes import KERAS_ACTIVATIONS, LAST_AXIS_ACTIVATIONS, TF_ELEMENTWISE

    name = getattr(fn, "__name__", "")
    if id(fn) in KERAS_ACTIVATIONS:
        return name not in LAST_AXIS_ACTIVATIONS and name != "linear"
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("tensorflow") and name in TF_ELEMENTWISE and name != "identity"


class _RescaledActivation:
    """Stands in for a layer's ``activation`` while a call runs: the original function, with
    the rescale rule as its gradient when a pairing is active (else exactly the original)."""

    def __init__(self, activation: Callable[..., Any], label: str) -> None:
        self.activation = activation
        self.label = label
        self.__name__ = getattr(activation, "__name__", "activation")

    def __call__(self, z: Any, *args: Any, **kwargs: Any) -> Any:
        pairing = _pairing()
        if pairing is None:
            return self.activation(z, *args, **kwargs)
        pairing.wrapped.append(self.label)

        def f(t: tf.Tensor) -> tf.Tensor:
            return self.activation(t, *args, **kwargs)

        with tf.name_scope(_SCOPE):

            @tf.custom_gradient
            def rescaled(t: tf.Tensor) -> Any:
                y = f(t)

                def gradient(grad: tf.Tensor) -> tf.Tensor:
                    z_r = t[pairing.n :]
                    with tf.GradientTape() as tape:  # a tape ignores the overrides: f'
                        tape.watch(z_r)
                        y_r = f(z_r)
                    plain = tape.gradient(y_r, z_r, output_gradients=grad[pairing.n :])
                    return _with_input_rows(t, _secant(t, y, grad, plain, pairing), pairing)

                return y, gradient

            return rescaled(z)


def rescale_block(func: Callable[[Any], Any], z: Any) -> Any:
    """``func(z)``; under DeepLIFT's rules, the whole of ``func`` takes the rescale rule as if
    it were one elementwise nonlinearity: the multiplier of each element is
    (func(z_x) - func(z_r)) / (z_x - z_r), the gradient where the two are closer than
    ``RESCALE_EPS`` (as tangermeme treats a registered nonlinear module)."""
    name = getattr(func, "__name__", type(func).__name__)
    return _RescaledActivation(func, f"{name} (rescale block)")(z)


@contextmanager
def _wrapped_activations(model: Any) -> Iterator[None]:
    """Each Keras layer's elementwise ``activation`` wrapped for the duration (set and put back
    with ``object.__setattr__``, outside Keras's attribute tracking)."""
    layers = []
    if is_keras(model) and hasattr(model, "_flatten_layers"):
        layers = list(model._flatten_layers(include_self=True, recursive=True))
    saved = []
    try:
        for layer in layers:
            activation = layer.__dict__.get("activation")
            if activation is not None and _elementwise_activation(activation):
                saved.append((layer, activation))
                label = f"{getattr(activation, '__name__', 'activation')} (layer '{layer.name}')"
                object.__setattr__(layer, "activation", _RescaledActivation(activation, label))
        yield
    finally:
        for layer, activation in saved:
            object.__setattr__(layer, "activation", activation)


# --------------------------------------------------------------------------- reading a model
_PROBE_ROWS = 3  # one input and two references: an odd batch, so that another axis shows


def _ancestors(tensor: tf.Tensor) -> set[Any]:
    """The operations whose gradient reaches ``tensor``: those it is computed from (the
    forward pass, not its gradient), except behind a stop_gradient."""
    seen: set[Any] = set()
    todo = [tensor.op]
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if op.type not in ("StopGradient", "PreventGradient"):
            todo.extend(t.op for t in op.inputs)
    return seen


def _read_graph(graph: Any, out: tf.Tensor, pairing: _Pairing) -> RescaleReport:
    """Classify the input-dependent operations of the forward pass to ``out`` (a graph traced
    with the overrides, and differentiated once)."""
    assert pairing.dependence is not None, "the batch is set before the model runs"
    dependence = pairing.dependence
    forward = _ancestors(out)
    rescaled: list[str] = list(dict.fromkeys(pairing.wrapped))
    max_rule: list[str] = []
    by_gradient: list[str] = []
    for op in graph.get_operations():
        if op not in forward or op.type in NO_GRADIENT_OPS:
            continue
        carried = [t for t in op.inputs if dependence.gradient(t)]
        if not carried or not any(t.dtype.is_floating for t in op.outputs):
            continue  # reads the input only through a tensor held constant, or no values
        if _SCOPE in op.name.split("/"):
            continue  # inside a wrapped activation
        label = f"{op.type} ('{op.name}')"
        if op.type in _CALL_OPS:
            raise RescaleUnsupported(
                f"a model that calls a compiled function ({label}, e.g. a layer decorated "
                "with tf.function), whose nonlinearities are out of the rules' reach",
                "Call that code without tf.function.",
            )
        rule = _rule(op, dependence)
        if rule is not None:
            operands = [op.inputs[0]] if rule == "max" else paired_operands(op, rule, dependence)
            _check_rows(label, [*operands, op.outputs[0]])
            _check_differentiated(label, op, pairing)
            if rule == "max":
                max_rule.append(label)
            else:
                rescaled.append(LABELS[rule].format(type=op.type, name=op.name))
        elif op.type in _HELD_OPS:
            readers = [c for c in op.outputs[0].consumers() if c in forward]
            if not all(c.type == "SquaredDifference" for c in readers):  # tf.nn.moments' mean
                by_gradient.append(f"an input-dependent tensor held constant ({label})")
        elif op.type in PRODUCT_OPS:
            if len(carried) > 1:
                by_gradient.append(
                    f"{op.type} of {len(carried)} input-dependent tensors ('{op.name}')"
                )
        elif op.type in _SELECT_OPS:  # linear in the values where the condition is fixed
            if _reads_values(op.inputs[0], dependence.source):
                by_gradient.append(f"where on an input-dependent condition ('{op.name}')")
        elif op.type == "DivNoNan":
            if dependence.gradient(op.inputs[1]):
                by_gradient.append(f"division by an input-dependent tensor ('{op.name}')")
        elif op.type not in _LINEAR_OPS and op.type not in DIVISION_OPS:
            by_gradient.append(label)
    return RescaleReport(tuple(rescaled), tuple(max_rule), tuple(dict.fromkeys(by_gradient)))


def _reads_values(t: tf.Tensor, source: tf.Tensor) -> bool:
    """Whether ``t`` is computed from the values of ``source`` (not only from its shape)."""
    seen: set[Any] = set()
    todo = [t.op]
    while todo:
        op = todo.pop()
        if op is source.op:
            return True
        if op in seen or op.type in _SHAPE_OPS:
            continue
        seen.add(op)
        todo.extend(i.op for i in op.inputs)
    return False


def _rule(op: Any, dependence: Dependence) -> str | None:
    if op.type in _RESCALE_OPS:
        return "rescale"
    if op.type in _MAX_OPS:
        return "max"
    return pair_rule(op, dependence) if op.type in PAIR_OPS else None


def _check_rows(label: str, tensors: Sequence[tf.Tensor]) -> None:
    """Refuse a rule whose operands or result do not hold the batch's rows on axis 0."""
    for t in tensors:
        rows = t.shape[0] if t.shape.rank else None
        if rows != _PROBE_ROWS:
            raise RescaleUnsupported(
                f"a model whose {label} receives or makes a tensor of shape {t.shape} for a "
                f"batch of {_PROBE_ROWS} rows",
                "The rules pair rows on axis 0: apply nonlinearities before moving or "
                "merging the batch axis.",
            )


def _check_differentiated(label: str, op: Any, pairing: _Pairing) -> None:
    """Refuse a rule that the overrides did not reach."""
    if op.name not in pairing.differentiated:
        raise RescaleUnsupported(
            f"a model whose {label} lies inside a custom gradient (a "
            "tf.custom_gradient function, or a TensorFlow function written with one "
            "such as tf.nn.silu), which replaces the rules with its own gradient",
            "Use the Keras activation (activation='silu' on the layer, or "
            "keras.layers.Activation), which the rules rescale as a whole.",
        )


def _paired_pass(
    model: Any,
    head: Head,
    inputs: tf.Tensor,
    references: tf.Tensor,
    pairing: _Pairing,
    extras: tuple[Sequence[tf.Tensor], Sequence[tf.Tensor]] = ((), ()),
) -> tuple[tf.Tensor, tf.Tensor]:
    """The batch [inputs; references] and the model's (batch, K) outputs, with the rules
    (``extras``: the model's other inputs for the inputs' rows and for the references')."""
    batch = tf.concat([inputs, references], axis=0)
    pairing.dependence = Dependence(batch)
    more = [tf.concat([a, b], axis=0) for a, b in zip(*extras, strict=True)]
    graph = tf.compat.v1.get_default_graph()
    with graph.gradient_override_map(_OVERRIDES):
        return batch, tf.cast(head(call_model(model, batch, more)), tf.float32)


# --------------------------------------------------------------------------- the capability
class TensorFlowRescaleGradients:
    """Rescale-rule multipliers of Keras 3 (TensorFlow backend) models and ``tf.Module`` s."""

    _functions: Callable[[Any, Any], dict[Any, Any]]

    def rescale_layers(
        self, model: Any, x: tf.Tensor, head: Head, extras: Sequence[tf.Tensor] = ()
    ) -> RescaleReport:
        found: dict[str, Any] = {}
        more = list(extras)

        def probe(inputs: tf.Tensor, references: tf.Tensor) -> tf.Tensor:
            pairing = _Pairing(tf.shape(inputs)[0], tf.zeros([2], tf.int32))
            tiled = [tf.repeat(e, _PROBE_ROWS - 1, axis=0) for e in more]
            with _paired(pairing):
                batch, out = _paired_pass(model, head, inputs, references, pairing, (more, tiled))
                tf.gradients(tf.reduce_sum(out[1:]), batch)
            found.update(pairing=pairing, out=out)
            return out

        spec = tf.TensorSpec((1, *x.shape[1:]), x.dtype)
        refs = tf.TensorSpec((_PROBE_ROWS - 1, *x.shape[1:]), x.dtype)
        with _wrapped_activations(model):
            traced = tf.function(probe).get_concrete_function(spec, refs)
        return _read_graph(traced.graph, found["out"], found["pairing"])

    def rescale_gradients(
        self,
        model: Any,
        inputs: tf.Tensor,
        references: tf.Tensor,
        index: np.ndarray,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,  # ignored: the K passes are parts of one compiled graph
        extras: tuple[Sequence[tf.Tensor], Sequence[tf.Tensor]] = ((), ()),
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        fns = self._functions(model, head)
        key = ("rescale", len(targets))
        if key not in fns:
            fns[key] = _rescale_function(model, head, len(targets))
        selected = tf.constant(list(targets), dtype=tf.int32)
        try:
            with _wrapped_activations(model):
                return fns[key](
                    inputs,
                    references,
                    tf.constant(np.asarray(index, np.int32)),
                    selected,
                    tuple(map(tuple, extras)),
                )
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc


def _rescale_function(model: Any, head: Head, k: int) -> Callable[..., Any]:
    @tf.function(reduce_retracing=True, autograph=False)
    def rescale_fn(
        inputs: tf.Tensor,
        references: tf.Tensor,
        index: tf.Tensor,
        targets: tf.Tensor,
        extras: tuple[tuple[tf.Tensor, ...], tuple[tf.Tensor, ...]],
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        n = tf.shape(inputs)[0]
        pairing = _Pairing(n, index)
        with _paired(pairing):
            batch, out = _paired_pass(model, head, inputs, references, pairing, extras)
            chosen = tf.gather(out, targets, axis=1)
            # rows are independent in eval mode: the gradient of a sum over the reference
            # rows is every reference row's own gradient
            grads = [tf.gradients(tf.reduce_sum(chosen[n:, i]), batch)[0][n:] for i in range(k)]
        return chosen[:n], chosen[n:], tf.stack(grads, axis=1)

    return rescale_fn
