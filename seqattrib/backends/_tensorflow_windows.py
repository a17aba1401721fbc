"""The windowed-forward capability of the TensorFlow backend (fast ISM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def _positions_first(x: tf.Tensor, axis: int) -> tf.Tensor:
    """Positions on axis 1 (a transpose of the two non-batch axes when they are on axis 2)."""
    return tf.transpose(x, (0, 2, 1)) if axis == 2 else x


class TensorFlowWindowedForward:
    """Windows of TensorFlow tensors and the Keras layer-graph reader of a model's local
    prefix."""

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

    def gather_windows(
        self, source: tf.Tensor, rows: tf.Tensor, starts: tf.Tensor, width: int, axis: int
    ) -> tf.Tensor:
        source = _positions_first(source, axis)
        length = tf.shape(source, out_type=tf.int64)[1]
        pos = starts[:, None] + tf.range(width, dtype=tf.int64)[None, :]
        flat = tf.reshape(source, (-1, tf.shape(source)[2]))
        return _positions_first(tf.gather(flat, rows[:, None] * length + pos), axis)

    def overwrite_windows(
        self, target: tf.Tensor, window: tf.Tensor, at: tf.Tensor, axis: int
    ) -> tf.Tensor:
        target, window = _positions_first(target, axis), _positions_first(window, axis)
        n_window = tf.shape(window, out_type=tf.int64)[1]
        rel = tf.range(tf.shape(target, out_type=tf.int64)[1])[None, :] - at[:, None]
        inside = (rel >= 0) & (rel < n_window)
        picked = tf.gather(window, tf.clip_by_value(rel, 0, n_window - 1), axis=1, batch_dims=1)
        return _positions_first(tf.where(inside[:, :, None], picked, target), axis)

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
