"""Backend detection: by the model's class, looked up in ``sys.modules`` (never by importing).

Keras 3 models resolve to the framework they run on: on the torch backend a Keras model *is* a
``torch.nn.Module``; on the TensorFlow backend it is a ``keras.Layer``.
"""

from __future__ import annotations

import sys
from typing import Any

from .._errors import parameter_error
from .protocol import (
    Backend,
    CheckpointMismatch,
    Head,
    OutOfDeviceMemory,
    ParameterGradients,
    RescaleGradients,
    RescaleReport,
    RescaleUnsupported,
    TransferStats,
    UnsupportedLayer,
    WindowedBackend,
    WindowedForward,
)

__all__ = [
    "Backend",
    "CheckpointMismatch",
    "Head",
    "OutOfDeviceMemory",
    "ParameterGradients",
    "RescaleGradients",
    "RescaleReport",
    "RescaleUnsupported",
    "TransferStats",
    "UnsupportedLayer",
    "WindowedBackend",
    "WindowedForward",
    "capability",
    "get_backend",
    "tensor_backend",
]


_INSTANCES: dict[str, Backend] = {}
_NAMES = ("torch", "tensorflow")


def _instance(name: str) -> Backend:
    if name not in _INSTANCES:
        if name == "torch":
            from .torch.core import TorchBackend

            _INSTANCES[name] = TorchBackend()
        else:
            from .tensorflow.core import TensorFlowBackend

            _INSTANCES[name] = TensorFlowBackend()
    return _INSTANCES[name]


def _detect(model: Any) -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "torch"
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, keras.Layer):
        backend = keras.config.backend()
        if backend in _NAMES:
            return backend
        raise parameter_error(
            "get_backend",
            "model",
            "a Keras 3 model on the TensorFlow or torch backend",
            f"a Keras model on the {backend!r} backend",
            "Set KERAS_BACKEND=tensorflow or KERAS_BACKEND=torch before importing keras.",
            error=TypeError,
            described=True,
        )
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(model, tf.Module):
        return "tensorflow"
    return None


def get_backend(model: Any, backend: str | None = None) -> Backend:
    """The backend that owns ``model``.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
        The model. Plain callables need ``backend`` to say which framework they run.
    backend : {None, "torch", "tensorflow"}
        Force a backend (needed for plain callables).
    """
    if backend is not None:
        if backend not in _NAMES:
            raise parameter_error(
                "get_backend", "backend", "None, 'torch' or 'tensorflow'", backend
            )
        if not callable(model):
            raise parameter_error(
                "get_backend",
                "model",
                "callable",
                type(model).__name__,
                error=TypeError,
                described=True,
            )
        return _instance(backend)
    name = _detect(model)
    if name is None:
        raise parameter_error(
            "get_backend",
            "model",
            "a torch.nn.Module, a Keras 3 model or a tf.Module",
            f"an object of type {type(model).__module__}.{type(model).__name__}",
            "For another callable, pass backend='torch' or backend='tensorflow'.",
            error=TypeError,
            described=True,
        )
    return _instance(name)


def tensor_backend(value: Any) -> Backend | None:
    """The backend whose framework ``value`` is a tensor of (a framework already imported),
    or None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _instance("torch")
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.is_tensor(value):
        return _instance("tensorflow")
    return None


def capability(backend: Backend, kind: Any, func: str) -> Any:
    """``backend`` as the capability ``kind`` (a protocol of ``protocol``) that a method
    needs, or a TypeError naming what the backend lacks."""
    if not isinstance(backend, kind):
        raise parameter_error(
            func,
            "model",
            f"a model whose backend offers {kind.__name__}",
            f"a model on the {backend.name} backend, which does not",
            error=TypeError,
            described=True,
        )
    return backend
