"""The operations named heads (``seqattrib.heads``) compute with, on TensorFlow tensors (Keras 3
models on the TensorFlow backend, ``tf.Module`` models).

Every backend's ``head_ops`` module has the same functions; a head is written once against
them and runs on the framework of the tensors the model returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from .rescale import rescale_block as block_of_rescale


def is_tensor(value: Any) -> bool:
    return bool(tf.is_tensor(value))


def shape(x: tf.Tensor) -> tuple[int | None, ...]:
    return tuple(None if n is None else int(n) for n in x.shape)


def take(x: tf.Tensor, indices: Sequence[int], axis: int) -> tf.Tensor:
    return tf.gather(x, list(indices), axis=axis)


def narrow(x: tf.Tensor, axis: int, start: int, stop: int) -> tf.Tensor:
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def flatten(x: tf.Tensor) -> tf.Tensor:
    """(batch, ...) -> (batch, n)."""
    return tf.reshape(x, tf.stack([tf.shape(x)[0], -1]))


def reduce_sum(x: tf.Tensor, axes: tuple[int, ...]) -> tf.Tensor:
    return tf.reduce_sum(x, axis=list(axes))


def reduce_mean(x: tf.Tensor, axes: tuple[int, ...], keepdims: bool = False) -> tf.Tensor:
    return tf.reduce_mean(x, axis=list(axes), keepdims=keepdims)


def softmax(x: tf.Tensor, axis: int) -> tf.Tensor:
    return tf.nn.softmax(x, axis=axis)


def stop_gradient(x: tf.Tensor) -> tf.Tensor:
    return tf.stop_gradient(x)


def log1p(x: tf.Tensor) -> tf.Tensor:
    return tf.math.log1p(x)


def log(x: tf.Tensor) -> tf.Tensor:
    return tf.math.log(x)


def exp(x: tf.Tensor) -> tf.Tensor:
    return tf.exp(x)


def logsumexp(x: tf.Tensor, axis: int) -> tf.Tensor:
    return tf.reduce_logsumexp(x, axis=axis)


def stack(xs: Sequence[tf.Tensor], axis: int) -> tf.Tensor:
    return tf.stack(list(xs), axis=axis)


def concat(xs: Sequence[tf.Tensor], axis: int) -> tf.Tensor:
    return xs[0] if len(xs) == 1 else tf.concat(list(xs), axis=axis)


def flip(x: tf.Tensor, axes: Sequence[int]) -> tf.Tensor:
    return tf.reverse(x, axis=list(axes))


def sqrt(x: tf.Tensor) -> tf.Tensor:
    return tf.sqrt(x)


def maximum(x: tf.Tensor, value: float) -> tf.Tensor:
    return tf.maximum(x, tf.constant(value, dtype=x.dtype))


def float64(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float64)


def rescale_block(func: Callable[[tf.Tensor], tf.Tensor], z: tf.Tensor) -> tf.Tensor:
    """``func(z)``; DeepLIFT/DeepSHAP treat the whole of ``func`` as one elementwise
    nonlinearity (its secant between input and reference)."""
    return block_of_rescale(func, z)
