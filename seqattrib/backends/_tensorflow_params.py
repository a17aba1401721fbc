"""The parameter-gradients capability of the TensorFlow backend (data attribution)."""

from __future__ import annotations

import os
import re
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ._protocol import CheckpointMismatch, Head, OutOfDeviceMemory, UnsupportedLayer


def is_keras(model: Any) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.Layer)


def call_model(model: Any, x: tf.Tensor) -> Any:
    """A forward pass in inference mode (Keras layers take ``training=False``)."""
    return model(x, training=False) if is_keras(model) else model(x)


class TensorFlowParameterGradients:
    """Parameters, checkpoints and per-example gradients of Keras models and ``tf.Module`` s."""

    _compiled: weakref.WeakKeyDictionary[Any, dict[Any, Any]]

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        for key, v in state_variables(model):
            v.assign(state[key])

    def load_checkpoint(self, model: Any, checkpoint: Any) -> float | None:
        variables = state_variables(model)
        if isinstance(checkpoint, (str, os.PathLike)):
            if not is_keras(model):
                raise CheckpointMismatch(
                    "a path is read with keras load_weights, and the model is not a Keras model"
                )
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*[Ss]kipping.*")
                    model.load_weights(os.fspath(checkpoint))
            except (ValueError, OSError, KeyError) as exc:
                raise CheckpointMismatch(_keras_load_error(exc)) from exc
            return None
        if isinstance(checkpoint, Mapping):
            keys = [key for key, _ in variables]
            values = []
            for key in keys:
                if key not in checkpoint:
                    raise CheckpointMismatch(f"the weight {key!r} of the model is missing from it")
                values.append(checkpoint[key])
            for key in checkpoint:
                if key not in keys:
                    raise CheckpointMismatch(f"it has the key {key!r}, which the model lacks")
        elif isinstance(checkpoint, (list, tuple)):
            values = list(checkpoint)
            if len(values) != len(variables):
                first = variables[len(values)][0] if len(values) < len(variables) else None
                raise CheckpointMismatch(
                    f"it holds {len(values)} arrays but the model has {len(variables)} weights"
                    + (f" (the first missing is {first!r})" if first else "")
                )
        else:
            raise CheckpointMismatch(
                f"it is a {type(checkpoint).__name__}: expected a weights file path, a list of "
                "arrays (model.get_weights()) or a {weight path: array} dict"
            )
        for (key, v), value in zip(variables, values, strict=True):
            shape = tuple(np.shape(value))
            if shape != tuple(v.shape):
                raise CheckpointMismatch(
                    f"{key!r} has shape {shape} in it but {tuple(v.shape)} in the model"
                )
        for (_, v), value in zip(variables, values, strict=True):
            v.assign(np.asarray(value))
        return None

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        return [(key, tuple(v.shape)) for key, v in state_variables(model, trainable=True)]

    def per_example_gradients(
        self,
        model: Any,
        x: tf.Tensor,
        y: tf.Tensor,
        loss: str | Callable[..., Any],
        names: list[str],
        head: Head,
    ) -> tf.Tensor:
        fns = self._data_functions(model)
        key = ("per_example_gradients", loss, tuple(names), head)
        if key not in fns:
            lookup = dict(state_variables(model, trainable=True))
            variables = [lookup[n] for n in names]

            @tf.function(reduce_retracing=True)
            def gradients_fn(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
                def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
                    xi, yi = args
                    with tf.GradientTape() as tape:
                        out = tf.cast(head(call_model(model, xi[None])), tf.float32)
                        value = tf.reduce_sum(_tf_loss_values(loss, out, yi[None]))
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

    def last_layer_features(
        self, model: Any, x: tf.Tensor, y: tf.Tensor, loss: str | Callable[..., Any]
    ) -> tuple[tf.Tensor, tf.Tensor, bool]:
        fns = self._data_functions(model)
        key = ("last_layer_features", loss)
        if key not in fns:
            features, use_bias = _keras_last_layer(model)

            @tf.function(reduce_retracing=True)
            def features_fn(inputs: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                a, z = features(inputs, training=False)

                def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
                    zi, yi = args
                    with tf.GradientTape() as tape:
                        tape.watch(zi)
                        value = tf.reduce_sum(_tf_loss_values(loss, zi[None], yi[None]))
                    return tape.gradient(value, zi)

                z = tf.cast(z, tf.float32)
                return tf.cast(a, tf.float32), tf.vectorized_map(one, (z, labels))

            fns[key] = (features_fn, use_bias)
        fn, use_bias = fns[key]
        a, delta = fn(x, y)
        return a, delta, use_bias

    def matmul(self, a: tf.Tensor, b: tf.Tensor, transpose_b: bool = False) -> tf.Tensor:
        return tf.linalg.matmul(a, b, transpose_b=transpose_b)

    def _data_functions(self, model: Any) -> dict[Any, Any]:
        """Compiled data-attribution functions of ``model`` (kept while the model lives)."""
        try:
            return self._compiled.setdefault(model, {})
        except TypeError:  # not weak-referenceable: compile per call
            return {}

    def sum(self, tensor: tf.Tensor, axis: Sequence[int]) -> tf.Tensor:
        return tf.reduce_sum(tensor, axis=tuple(axis))


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


def _tf_loss_values(loss: str | Callable[..., Any], out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """Per-example losses (B,) of (B, K) outputs, or TRAK's model output functions; see
    ``Backend.per_example_gradients``."""
    if loss == "trak_margin":  # log p_y / (1 - p_y) = z_y - logsumexp_{k != y} z_k
        mask = tf.one_hot(y, tf.shape(out)[1], on_value=True, off_value=False, dtype=tf.bool)
        correct = tf.reduce_sum(tf.where(mask, out, tf.zeros_like(out)), axis=1)
        others = tf.where(mask, tf.fill(tf.shape(out), tf.constant(-np.inf, out.dtype)), out)
        return correct - tf.reduce_logsumexp(others, axis=1)
    if loss == "trak_binary":  # (2y - 1) * logit
        sign = 2 * tf.cast(tf.reshape(y, tf.shape(out)), out.dtype) - 1
        return sign[:, 0] * out[:, 0]
    if loss == "trak_regression":
        return out[:, 0]
    if loss == "cross_entropy":
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out)
    if loss == "bce":
        target = tf.cast(tf.reshape(y, tf.shape(out)), out.dtype)
        return tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=out), axis=1
        )
    if loss == "mse":
        return tf.reduce_mean(tf.square(out - tf.cast(tf.reshape(y, tf.shape(out)), out.dtype)), 1)
    assert callable(loss)
    return loss(out, y)
