"""TensorFlow backend: Keras 3 models on the TensorFlow backend, ``tf.Module`` and callables."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import tensorflow as tf

from ..._errors import SeqAttribWarning, parameter_error
from ..._threads import affinity_cpus, available_cpus
from ..protocol import Head, OutOfDeviceMemory, TransferStats
from . import head_ops as ops_of_heads
from .parameters import (
    TensorFlowParameterGradients,
    call_model,
    state_variables,
)
from .rescale import TensorFlowRescaleGradients
from .windows import TensorFlowWindowedForward

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


def _warn_about_threads() -> None:
    """TensorFlow sizes its thread pools by the CPUs of the process's affinity, not by a cgroup
    CPU quota, and cannot resize them once started: say so where a quota allows fewer."""
    cpus, seen = available_cpus(), affinity_cpus()
    if tf.config.threading.get_intra_op_parallelism_threads() == 0 and cpus < seen:
        warnings.warn(
            f"TensorFlow runs one thread per core it sees ({seen}) but "
            f"this process may use {cpus} CPUs (its cgroup quota); more threads than CPUs slow "
            "it down. Call tf.config.threading.set_intra_op_parallelism_threads("
            f"{cpus}) before TensorFlow's first operation.",
            SeqAttribWarning,
            stacklevel=5,
        )


class _Transposed(tf.Module):
    """A model fed X with axes 1 and 2 swapped (see ``TensorFlowBackend.adapt``)."""

    def __init__(self, model: Any) -> None:
        super().__init__(name="input_layout_adapter")
        self.model = model

    def __call__(self, x: tf.Tensor, *extras: tf.Tensor) -> Any:
        return call_model(self.model, tf.transpose(x, (0, 2, 1)), extras)


class _Ensemble(tf.Module):
    """The mean output of several models (see ``TensorFlowBackend.ensemble``)."""

    def __init__(self, models: Sequence[Any], head: Head) -> None:
        super().__init__(name="ensemble")
        self.members, self.head = list(models), head

    def __call__(self, x: tf.Tensor, *extras: tf.Tensor) -> tf.Tensor:
        outputs = [tf.cast(self.head(call_model(m, x, extras)), tf.float32) for m in self.members]
        return tf.reduce_mean(tf.stack(outputs), axis=0)


class TensorFlowBackend(
    TensorFlowWindowedForward, TensorFlowParameterGradients, TensorFlowRescaleGradients
):
    """Primitives for Keras 3 (TensorFlow backend) models, ``tf.Module`` and callables (core,
    windowed forward, parameter gradients, rescale gradients)."""

    name = "tensorflow"
    head_ops = ops_of_heads

    def __init__(self) -> None:
        self.transfers = TransferStats()
        self._on_cpu = True
        self._adapters: weakref.WeakKeyDictionary[Any, _Transposed] = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()

    @contextmanager
    def session(self, model: Any, device: Any) -> Iterator[str | None]:
        name = _tf_device(device)
        previous = self._on_cpu
        gpus = tf.config.list_logical_devices("GPU")
        self._on_cpu = not gpus or (name is not None and "CPU" in name.upper())
        if self._on_cpu:
            _warn_about_threads()
        try:
            with tf.device(name) if name else nullcontext():
                yield name
        finally:
            self._on_cpu = previous

    @contextmanager
    def full_float32(self) -> Iterator[None]:
        enabled = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(enabled)

    def ensemble(self, models: Sequence[Any], head: Head) -> Any:
        return _Ensemble(models, head)

    def adapt(self, model: Any, transpose_input: bool) -> Any:
        # Keras layers cast float inputs to their own dtype (float64, bfloat16) themselves
        if not transpose_input:
            return model
        try:
            return self._adapters.setdefault(model, _Transposed(model))
        except TypeError:  # not weak-referenceable
            return _Transposed(model)

    def describe(self, model: Any) -> str:
        variables = getattr(model, "trainable_variables", None) or getattr(model, "variables", [])
        n = int(sum(np.prod(v.shape) for v in variables))
        return f"{type(model).__module__}.{type(model).__name__} (tensorflow, {n} parameters)"

    def state(self, model: Any) -> dict[str, np.ndarray]:
        return {key: np.array(v.numpy(), copy=True) for key, v in state_variables(model)}

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

    def segment_sum(self, values: tf.Tensor, segment_ids: tf.Tensor, n_segments: int) -> tf.Tensor:
        return tf.math.unsorted_segment_sum(values, segment_ids, n_segments)

    def on_accelerator(self) -> bool:
        return not self._on_cpu

    def synchronize(self) -> None:
        # Eager ops and .numpy() are synchronous from Python's point of view; a tiny copy
        # to the host waits for the queue on GPUs.
        tf.constant(0.0).numpy()

    # ----------------------------------------------------------------- model calls
    def _functions(self, model: Any, key: Any) -> dict[Any, Any]:
        """Compiled functions of ``model`` under ``key`` (kept while the model lives)."""
        try:
            per_model = self._compiled.setdefault(model, {})
        except TypeError:  # not weak-referenceable: compile per call
            per_model = {}
        return per_model.setdefault(key, {})

    def forward(
        self, model: Any, x: tf.Tensor, head: Head, extras: Sequence[tf.Tensor] = ()
    ) -> tf.Tensor:
        fns = self._functions(model, head)
        if "forward" not in fns:

            @tf.function(reduce_retracing=True, autograph=False)
            def forward_fn(inputs: tf.Tensor, *more: tf.Tensor) -> tf.Tensor:
                return tf.cast(head(call_model(model, inputs, more)), tf.float32)

            fns["forward"] = forward_fn
        try:
            return fns["forward"](x, *extras)
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def outputs(self, raw: Any, head: Head) -> tf.Tensor:
        return tf.cast(head(raw), tf.float32)

    def input_gradients(
        self,
        model: Any,
        x: tf.Tensor,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: Sequence[tf.Tensor] = (),
    ) -> tuple[tf.Tensor, tf.Tensor]:
        fns = self._functions(model, head)
        k = len(targets)
        loop = (fns.get("no_pfor", False) or not vectorised) and k > 1
        key = ("grad_loop", k) if loop else ("grad", k == 1)
        if key not in fns:
            fns[key] = self._gradient_function(model, head, k=k, pfor=not loop)
        index = tf.constant(list(targets), dtype=tf.int32)
        try:
            return fns[key](x, index, *extras)
        except tf.errors.ResourceExhaustedError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc
        except (ValueError, tf.errors.InvalidArgumentError, NotImplementedError):
            if k == 1 or loop:
                raise
            # A layer without a vectorisation (pfor) rule: loop over K on one tape.
            fns["no_pfor"] = True
            return self.input_gradients(model, x, targets, head, vectorised, extras)

    def _gradient_function(
        self, model: Any, head: Head, *, k: int, pfor: bool
    ) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        single = k == 1

        @tf.function(reduce_retracing=True, autograph=False)
        def gradient_fn(
            inputs: tf.Tensor, index: tf.Tensor, *more: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape(persistent=not single and not pfor) as tape:
                tape.watch(inputs)
                out = tf.cast(head(call_model(model, inputs, more)), tf.float32)
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
