"""The parameter-gradients capability of the TensorFlow backend (data attribution)."""

from __future__ import annotations

import re
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ..protocol import CheckpointMismatch, Head, OutOfDeviceMemory, UnsupportedLayer


def is_keras(model: Any) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.Layer)


def call_model(model: Any, x: tf.Tensor, extras: Sequence[tf.Tensor] = ()) -> Any:
    """A forward pass in inference mode (Keras layers take ``training=False``), with the
    model's other inputs (a Keras model takes them with x in one list)."""
    if is_keras(model):
        return model([x, *extras] if extras else x, training=False)
    return model(x, *extras)


class TensorFlowParameterGradients:
    """Parameters, checkpoint files, per-example gradients and the math of losses, for Keras
    models and ``tf.Module`` s."""

    _compiled: weakref.WeakKeyDictionary[Any, dict[Any, Any]]

    # ----------------------------------------------------------------- state and checkpoints
    def set_state(self, model: Any, state: Mapping[str, Any]) -> None:
        for key, v in state_variables(model):
            v.assign(state[key])

    def read_checkpoint(self, model: Any, path: str) -> Any:
        if not is_keras(model):
            raise CheckpointMismatch(
                "a path is read with keras load_weights, and the model is not a Keras model"
            )
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*[Ss]kipping.*")
                model.load_weights(path)
        except (ValueError, OSError, KeyError) as exc:
            raise CheckpointMismatch(_keras_load_error(exc)) from exc
        return None

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        return [(key, tuple(v.shape)) for key, v in state_variables(model, trainable=True)]

    # ----------------------------------------------------------------- gradients
    def per_example_gradients(
        self,
        model: Any,
        x: tf.Tensor,
        y: tf.Tensor,
        fn: Callable[[Any, Any], Any],
        names: list[str],
        head: Head,
    ) -> tf.Tensor:
        fns = self._functions_of(model)
        key = ("per_example_gradients", fn, tuple(names), head)
        if key not in fns:
            lookup = dict(state_variables(model, trainable=True))
            variables = [lookup[n] for n in names]

            @tf.function(reduce_retracing=True)
            def gradients_fn(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
                def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
                    xi, yi = args
                    with tf.GradientTape() as tape:
                        out = tf.cast(head(call_model(model, xi[None])), tf.float32)
                        value = tf.reduce_sum(fn(out, yi[None]))
                    grads = tape.gradient(
                        value, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO
                    )
                    return tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)

                return tf.vectorized_map(one, (inputs, labels))

            fns[key] = gradients_fn
        try:
            return fns[key](x, y)
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def output_gradients(
        self, fn: Callable[[Any, Any], Any], z: tf.Tensor, y: tf.Tensor
    ) -> tf.Tensor:
        fns = self._functions_of(fn)
        if "output_gradients" not in fns:

            @tf.function(reduce_retracing=True)
            def gradients_fn(outputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
                def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
                    zi, yi = args
                    with tf.GradientTape() as tape:
                        tape.watch(zi)
                        value = tf.reduce_sum(fn(zi[None], yi[None]))
                    return tape.gradient(value, zi)

                return tf.vectorized_map(one, (outputs, labels))

            fns["output_gradients"] = gradients_fn
        return fns["output_gradients"](z, y)

    def last_layer(self, model: Any, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, bool]:
        fns = self._functions_of(model)
        if "last_layer" not in fns:
            features, use_bias = _keras_last_layer(model)

            @tf.function(reduce_retracing=True)
            def features_fn(inputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                a, z = features(inputs, training=False)
                return tf.cast(a, tf.float32), tf.cast(z, tf.float32)

            fns["last_layer"] = (features_fn, use_bias)
        fn, use_bias = fns["last_layer"]
        a, z = fn(x)
        return a, z, use_bias

    def _functions_of(self, owner: Any) -> dict[Any, Any]:
        """Compiled functions of ``owner`` (a model or a function), kept while it lives."""
        try:
            return self._compiled.setdefault(owner, {})
        except TypeError:  # not weak-referenceable: compile per call
            return {}

    # ----------------------------------------------------------------- math
    def matmul(self, a: tf.Tensor, b: tf.Tensor, transpose_b: bool = False) -> tf.Tensor:
        return tf.linalg.matmul(a, b, transpose_b=transpose_b)

    def sum(self, tensor: tf.Tensor, axis: Sequence[int]) -> tf.Tensor:
        return tf.reduce_sum(tensor, axis=tuple(axis))

    def take_columns(self, tensor: tf.Tensor, columns: Sequence[int]) -> tf.Tensor:
        return tf.gather(tensor, list(columns), axis=1)

    def where(self, condition: tf.Tensor, x: Any, y: Any) -> tf.Tensor:
        return tf.where(tf.not_equal(condition, 0), x, y)

    def logsumexp(self, tensor: tf.Tensor, axis: int) -> tf.Tensor:
        return tf.reduce_logsumexp(tensor, axis=axis)

    def exp(self, tensor: tf.Tensor) -> tf.Tensor:
        return tf.exp(tensor)

    def softplus(self, tensor: tf.Tensor) -> tf.Tensor:
        return tf.math.softplus(tensor)

    def softmax_cross_entropy(self, logits: tf.Tensor, probabilities: tf.Tensor) -> tf.Tensor:
        return tf.nn.softmax_cross_entropy_with_logits(labels=probabilities, logits=logits)

    def sigmoid_cross_entropy(self, logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        return tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)


def state_variables(model: Any, trainable: bool = False) -> list[tuple[str, Any]]:
    """(key, variable) pairs: Keras weight paths, or indexed names for a ``tf.Module``."""
    if is_keras(model):
        variables = model.trainable_weights if trainable else model.weights
        return [(v.path, v) for v in variables]
    variables = model.trainable_variables if trainable else model.variables
    return [(f"{i}:{v.name}", v) for i, v in enumerate(variables)]


def _keras_load_error(exc: Exception) -> str:
    """The first mismatch of a Keras ``load_weights`` error, without the weight values."""
    text = str(exc)
    shapes = re.search(r"variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))", text)
    path = re.search(r"Target variable: <Variable path=([^,\s]+)", text)
    if shapes and path:
        return (
            f"{path.group(1)!r} has shape {shapes.group(2)} in it but {shapes.group(1)} in "
            "the model"
        )
    layer = re.search(r"Layer '([^']+)' expected (\d+) variables, but received (\d+)", text)
    if layer:
        return (
            f"the layer {layer.group(1)!r} of the model has {layer.group(2)} weights and it "
            f"holds {layer.group(3)}"
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"keras load_weights failed: {first[:300]}"


def _keras_last_layer(model: Any) -> tuple[Any, bool]:
    """A Keras model mapping inputs to (penultimate activations, logits) and the bias flag."""
    import keras

    if not is_keras(model) or not getattr(model, "inputs", None):
        raise UnsupportedLayer("it is not a functional or Sequential Keras model")
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    if not dense:
        raise UnsupportedLayer("the model has no keras.layers.Dense layer")
    layer = dense[-1]
    try:
        output, inputs = layer.output, layer.input
    except (AttributeError, ValueError) as exc:
        raise UnsupportedLayer(f"its last Dense layer has no single output ({exc})") from exc
    if len(model.outputs) != 1 or output is not model.outputs[0]:
        raise UnsupportedLayer("the output of its last Dense layer is not the model's output")
    if layer.activation is not keras.activations.linear:
        raise UnsupportedLayer(
            f"its last Dense layer applies the activation {layer.activation.__name__!r}; the "
            "identity needs logits (activation=None)"
        )
    if len(inputs.shape) != 2:
        raise UnsupportedLayer(
            f"its last Dense layer sees inputs of shape {tuple(inputs.shape)}, not "
            "(batch, features)"
        )
    return keras.Model(model.inputs, [inputs, output]), bool(layer.use_bias)
