"""TensorFlow backend: Keras 3 models on the TensorFlow backend, ``tf.Module`` and callables."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import tensorflow as tf

from .._errors import parameter_error
from ._protocol import OutOfDeviceMemory, TransferStats

_DTYPES = {"float32": tf.float32, "int64": tf.int64, "int32": tf.int32}


def _tf_device(device: Any) -> str | None:
    """'cpu', 'cuda', 'cuda:1', 'gpu:0', '/GPU:0' -> a TensorFlow device string."""
    if device is None:
        return None
    text = str(device)
    if text.startswith("/"):
        return text
    name, _, index = text.partition(":")
    kind = {"cuda": "GPU", "gpu": "GPU", "cpu": "CPU"}.get(name.lower())
    if kind is None:
        raise parameter_error(
            "the TensorFlow backend", "device", "'cpu', 'gpu', 'cuda:N' or '/GPU:N'", device
        )
    return f"/{kind}:{index or 0}"


def _is_keras(model: Any) -> bool:
    import sys

    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.Layer)


def _as_2d(raw: Any, output_fn: Callable[[Any], Any] | None) -> tf.Tensor:
    out = output_fn(raw) if output_fn is not None else raw
    if isinstance(out, (tuple, list, dict)):
        raise parameter_error(
            "the model",
            "output_fn",
            "given when the model returns a tuple, list or dict",
            f"an output of type {type(out).__name__}",
            "Pass output_fn=lambda out: ... returning a (batch, n_outputs) tensor.",
            described=True,
        )
    out = tf.convert_to_tensor(out)
    if out.shape.rank == 1:
        return out[:, None]
    if out.shape.rank != 2:
        raise parameter_error(
            "the model",
            "output_fn",
            "given when the model output is not (batch, n_outputs)",
            f"an output of shape {tuple(out.shape)}",
            "Pass output_fn that reduces it, e.g. lambda out: tf.reduce_sum(out, -1).",
            described=True,
        )
    return out


class TensorFlowBackend:
    """Primitives for Keras 3 (TensorFlow backend) models, ``tf.Module`` and callables."""

    name = "tensorflow"
    #: Run the K vector-Jacobian products as one batch Jacobian on CPUs too (tests use it).
    vectorise_on_cpu = False
    #: ... and on accelerators (the default there; benchmarks switch it off to compare).
    vectorise_on_accelerator = True

    def __init__(self) -> None:
        self.transfers = TransferStats()
        #: On a CPU the K vector-Jacobian products run one after another (see the torch
        #: backend): a vectorised K x rows backward falls out of the cache.
        self._on_cpu = True
        self._compiled: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()

    @contextmanager
    def session(self, model: Any, device: Any) -> Iterator[str | None]:
        name = _tf_device(device)
        previous = self._on_cpu
        gpus = tf.config.list_logical_devices("GPU")
        self._on_cpu = not gpus or (name is not None and "CPU" in name.upper())
        try:
            with tf.device(name) if name else nullcontext():
                yield name
        finally:
            self._on_cpu = previous

    def describe(self, model: Any) -> str:
        variables = getattr(model, "trainable_variables", None) or getattr(model, "variables", [])
        n = int(sum(np.prod(v.shape) for v in variables))
        return f"{type(model).__module__}.{type(model).__name__} (tensorflow, {n} parameters)"

    # ----------------------------------------------------------------- arrays
    def asarray(self, array: np.ndarray, dtype: str = "float32") -> tf.Tensor:
        array = np.ascontiguousarray(array)
        self.transfers.to_device += array.nbytes
        return tf.cast(tf.identity(array), _DTYPES[dtype])

    def to_numpy(self, tensor: tf.Tensor) -> np.ndarray:
        out = np.asarray(tensor.numpy())
        self.transfers.to_host += out.nbytes
        return out

    def take(self, tensor: tf.Tensor, indices: tf.Tensor, axis: int = 0) -> tf.Tensor:
        return tf.gather(tensor, indices, axis=axis)

    def one_hot(self, indices: tf.Tensor, depth: int) -> tf.Tensor:
        return tf.one_hot(indices, depth, dtype=tf.float32)

    def log(self, tensor: tf.Tensor) -> tf.Tensor:
        return tf.math.log(tensor)

    def concat(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor:
        return tensors[0] if len(tensors) == 1 else tf.concat(list(tensors), axis=0)

    def reshape(self, tensor: tf.Tensor, shape: Sequence[int]) -> tf.Tensor:
        return tf.reshape(tensor, tuple(shape))

    def mean(self, tensor: tf.Tensor, axis: int, keepdims: bool = True) -> tf.Tensor:
        return tf.reduce_mean(tensor, axis=axis, keepdims=keepdims)

    def sum(self, tensor: tf.Tensor, axis: Sequence[int]) -> tf.Tensor:
        return tf.reduce_sum(tensor, axis=tuple(axis))

    def segment_sum(self, values: tf.Tensor, segment_ids: tf.Tensor, n_segments: int) -> tf.Tensor:
        return tf.math.unsorted_segment_sum(values, segment_ids, n_segments)

    # ----------------------------------------------------------------- fast ISM
    def local_graph(self, model: Any, row_shape: tuple[int, int], length_axis: int) -> Any:
        import keras

        from ._keras_graph import keras_local_graph
        from ._local_graph import GraphUnsupported

        if not isinstance(model, keras.Model):
            raise GraphUnsupported(f"{type(model).__name__} is not a Keras model")
        graph = keras_local_graph(model, row_shape)
        if graph.nodes[0].length_axis != length_axis:
            raise GraphUnsupported("the model's input layout differs from the one of X")
        return graph

    def expand_windows(
        self,
        ref: tf.Tensor,
        seq: tf.Tensor,
        starts: tf.Tensor,
        width: int,
        window: tf.Tensor,
        window_starts: tf.Tensor,
        axis: int,
        offsets: tuple[int, int],
    ) -> tf.Tensor:
        if axis == 2:  # only the input of an (N, 4, L) model: move positions to axis 1
            ref, window = tf.transpose(ref, (0, 2, 1)), tf.transpose(window, (0, 2, 1))
        length = tf.shape(ref, out_type=tf.int64)[1]
        pos = starts[:, None] + tf.range(width, dtype=tf.int64)[None, :]
        flat = tf.reshape(ref, (-1, tf.shape(ref)[2]))
        around = tf.gather(flat, seq[:, None] * length + pos)  # rows of channels
        n_window = tf.shape(window, out_type=tf.int64)[1]
        rel = pos - window_starts[:, None]
        inside = (rel >= 0) & (rel < n_window)
        picked = tf.gather(window, tf.clip_by_value(rel, 0, n_window - 1), axis=1, batch_dims=1)
        out = tf.where(inside[:, :, None], picked, around)
        return tf.transpose(out, (0, 2, 1)) if axis == 2 else out

    def pad_positions(self, x: tf.Tensor, left: int, right: int, axis: int) -> tf.Tensor:
        if left < 0 or right < 0:
            begin = [0, 0, 0]
            size = [-1, -1, -1]
            begin[axis] = max(0, -left)
            size[axis] = x.shape[axis] - max(0, -left) - max(0, -right)
            x = tf.slice(x, begin, size)
        if left > 0 or right > 0:
            paddings = [[0, 0], [0, 0], [0, 0]]
            paddings[axis] = [max(0, left), max(0, right)]
            x = tf.pad(x, paddings)
        return x

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return tf.function(fn, reduce_retracing=True, autograph=False)

    def on_accelerator(self) -> bool:
        return not self._on_cpu

    def synchronize(self) -> None:
        # Eager ops and .numpy() are synchronous from Python's point of view; a tiny copy
        # to the host waits for the queue on GPUs.
        tf.constant(0.0).numpy()

    # ----------------------------------------------------------------- model calls
    def _call(self, model: Any, x: tf.Tensor) -> Any:
        return model(x, training=False) if _is_keras(model) else model(x)

    def _functions(self, model: Any, output_fn: Callable[[Any], Any] | None) -> dict[Any, Any]:
        try:
            per_model = self._compiled.setdefault(model, {})
        except TypeError:  # not weak-referenceable: compile per call
            per_model = {}
        return per_model.setdefault(id(output_fn) if output_fn is not None else None, {})

    def forward(
        self, model: Any, x: tf.Tensor, output_fn: Callable[[Any], Any] | None
    ) -> tf.Tensor:
        fns = self._functions(model, output_fn)
        if "forward" not in fns:

            @tf.function(reduce_retracing=True)
            def forward_fn(inputs: tf.Tensor) -> tf.Tensor:
                return tf.cast(_as_2d(self._call(model, inputs), output_fn), tf.float32)

            fns["forward"] = forward_fn
        try:
            return fns["forward"](x)
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def outputs(self, raw: Any, output_fn: Callable[[Any], Any] | None) -> tf.Tensor:
        return tf.cast(_as_2d(raw, output_fn), tf.float32)

    def input_gradients(
        self,
        model: Any,
        x: tf.Tensor,
        targets: Sequence[int],
        output_fn: Callable[[Any], Any] | None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        fns = self._functions(model, output_fn)
        k = len(targets)
        sequential = not (self.vectorise_on_cpu if self._on_cpu else self.vectorise_on_accelerator)
        loop = (fns.get("no_pfor", False) or sequential) and k > 1
        key = ("grad_loop", k) if loop else ("grad", k == 1)
        if key not in fns:
            fns[key] = self._gradient_function(model, output_fn, k=k, pfor=not loop)
        index = tf.constant(list(targets), dtype=tf.int32)
        try:
            return fns[key](x, index)
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc
        except (ValueError, tf.errors.InvalidArgumentError, NotImplementedError):
            if k == 1 or loop:
                raise
            # A layer without a vectorisation (pfor) rule: loop over K on one tape.
            fns["no_pfor"] = True
            return self.input_gradients(model, x, targets, output_fn)

    def _gradient_function(
        self, model: Any, output_fn: Callable[[Any], Any] | None, *, k: int, pfor: bool
    ) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
        single = k == 1

        @tf.function(reduce_retracing=True)
        def gradient_fn(inputs: tf.Tensor, index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape(persistent=not single and not pfor) as tape:
                tape.watch(inputs)
                out = tf.cast(_as_2d(self._call(model, inputs), output_fn), tf.float32)
                selected = tf.gather(out, index, axis=1)
                # Rows are independent in eval mode, so the gradient of a sum over rows is
                # every row's own gradient. Sums are taken on the tape.
                totals = [tf.reduce_sum(selected[:, i]) for i in range(k)] if not pfor else []
                total = tf.reduce_sum(selected) if single else None
            if single:
                grads = tape.gradient(total, inputs)[:, None]
            elif pfor:
                grads = tape.batch_jacobian(selected, inputs, experimental_use_pfor=True)
            else:
                grads = tf.stack([tape.gradient(t, inputs) for t in totals], axis=1)
            return selected, grads

        return gradient_fn

    # ----------------------------------------------------------------- data attribution
    def get_state(self, model: Any) -> dict[str, np.ndarray]:
        return {key: np.array(v.numpy(), copy=True) for key, v in _state_variables(model)}

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        for key, v in _state_variables(model):
            v.assign(state[key])

    def load_checkpoint(self, model: Any, checkpoint: Any) -> float | None:
        import os
        import warnings
        from collections.abc import Mapping

        from ._protocol import CheckpointMismatch

        variables = _state_variables(model)
        if isinstance(checkpoint, (str, os.PathLike)):
            if not _is_keras(model):
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
        return [(key, tuple(v.shape)) for key, v in _state_variables(model, trainable=True)]

    def per_example_gradients(
        self,
        model: Any,
        x: tf.Tensor,
        y: tf.Tensor,
        loss: str | Callable[..., Any],
        names: list[str],
    ) -> tf.Tensor:
        fns = self._data_functions(model)
        key = ("per_example_gradients", loss, tuple(names))
        if key not in fns:
            lookup = dict(_state_variables(model, trainable=True))
            variables = [lookup[n] for n in names]

            @tf.function(reduce_retracing=True)
            def gradients_fn(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
                def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
                    xi, yi = args
                    with tf.GradientTape() as tape:
                        out = tf.cast(_as_2d(self._call(model, xi[None]), None), tf.float32)
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


def _state_variables(model: Any, trainable: bool = False) -> list[tuple[str, Any]]:
    """(key, variable) pairs: Keras weight paths, or indexed names for a ``tf.Module``."""
    if _is_keras(model):
        variables = model.trainable_weights if trainable else model.weights
        return [(v.path, v) for v in variables]
    variables = model.trainable_variables if trainable else model.variables
    return [(f"{i}:{v.name}", v) for i, v in enumerate(variables)]


def _keras_load_error(exc: Exception) -> str:
    """The first mismatch of a Keras ``load_weights`` error, without the weight values."""
    import re

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

    from ._protocol import UnsupportedLayer

    if not _is_keras(model) or not getattr(model, "inputs", None):
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
