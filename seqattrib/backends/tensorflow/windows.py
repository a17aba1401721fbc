"""The windowed-forward capability of the TensorFlow backend (fast ISM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf


def _outside(starts: tf.Tensor, width: tf.Tensor, length: int) -> tf.Tensor:
    """(B, width) bool: positions ``starts[i] + j`` outside ``[0, length)``."""
    position = starts[:, None] + tf.range(width, dtype=tf.int64)[None, :]
    return (position < 0) | (position >= length)


def _running_max(x: tf.Tensor) -> tf.Tensor:
    """Running maximum along axis 1 (log-step doubling: TensorFlow has no cumulative max)."""
    shift = 1
    length = x.shape[1]
    while length is not None and shift < length:
        low = tf.fill(tf.shape(x[:, :shift]), tf.cast(-np.inf, x.dtype))
        x = tf.maximum(x, tf.concat([low, x[:, :-shift]], axis=1))
        shift *= 2
    return x


def _positions_first(x: tf.Tensor, axis: int) -> tf.Tensor:
    """Positions on axis 1 (a transpose of the two non-batch axes when they are on axis 2)."""
    return tf.transpose(x, (0, 2, 1)) if axis == 2 else x


class TensorFlowWindowedForward:
    """Windows of TensorFlow tensors and the Keras layer-graph reader of a model's local
    prefix."""

    writes_in_place = False

    def local_graph(
        self,
        model: Any,
        row_shape: tuple[int, int],
        length_axis: int,
        output_fn: Callable[[Any], Any] | None = None,
    ) -> Any:
        import keras

        from ..keras.graph import keras_local_graph
        from ..local_graph import GraphUnsupported

        if not isinstance(model, keras.Model):
            raise GraphUnsupported(f"{type(model).__name__} is not a Keras model")
        graph = keras_local_graph(model, row_shape, output_fn)
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
        self, target: tf.Tensor, window: tf.Tensor, at: tf.Tensor | int, axis: int
    ) -> tf.Tensor:
        target, window = _positions_first(target, axis), _positions_first(window, axis)
        if isinstance(at, int):  # one offset for every row: a join
            end = at + int(window.shape[1])
            return _positions_first(tf.concat([target[:, :at], window, target[:, end:]], 1), axis)
        n_window = tf.shape(window, out_type=tf.int64)[1]
        rel = tf.range(tf.shape(target, out_type=tf.int64)[1])[None, :] - at[:, None]
        inside = (rel >= 0) & (rel < n_window)
        picked = tf.gather(window, tf.clip_by_value(rel, 0, n_window - 1), axis=1, batch_dims=1)
        return _positions_first(tf.where(inside[:, :, None], picked, target), axis)

    def pad_positions(
        self, x: tf.Tensor, left: int, right: int, axis: int, fill: float = 0.0
    ) -> tf.Tensor:
        if left < 0 or right < 0:
            begin = [0, 0, 0]
            size = [-1, -1, -1]
            begin[axis] = max(0, -left)
            size[axis] = x.shape[axis] - max(0, -left) - max(0, -right)
            x = tf.slice(x, begin, size)
        if left > 0 or right > 0:
            paddings = [[0, 0], [0, 0], [0, 0]]
            paddings[axis] = [max(0, left), max(0, right)]
            x = tf.pad(x, paddings, constant_values=tf.cast(fill, x.dtype))
        return x

    def add_windows(
        self,
        x: tf.Tensor,
        source: tf.Tensor,
        rows: tf.Tensor,
        starts: tf.Tensor,
        axis: int,
        alpha: float = 1.0,
        out: tf.Tensor | None = None,
    ) -> tf.Tensor:
        windows = self.gather_windows(source, rows, starts, int(x.shape[axis]), axis)
        return x + windows if alpha == 1.0 else x + tf.cast(alpha, x.dtype) * windows

    def add_splice(
        self,
        target: tf.Tensor,
        source: tf.Tensor,
        rows: tf.Tensor,
        starts: tf.Tensor,
        window: tf.Tensor,
        at: int,
        axis: int,
    ) -> tf.Tensor:
        run = self.gather_windows(source, rows, starts, int(target.shape[axis]), axis)
        return target + self.overwrite_windows(run, window, at, axis)

    def fill_outside(
        self,
        x: tf.Tensor,
        starts: tf.Tensor,
        length: int,
        fill: float,
        axis: int,
        in_place: bool = False,
    ) -> tf.Tensor:
        outside = _outside(starts, tf.shape(x, out_type=tf.int64)[axis], length)
        outside = outside[:, None, :] if axis == 2 else outside[:, :, None]
        return tf.where(outside, tf.cast(fill, x.dtype), x)

    def reduce_positions(
        self, x: tf.Tensor, starts: tf.Tensor | None, length: int, how: str, axis: int
    ) -> tf.Tensor:
        if starts is None:
            if how == "sum":
                return tf.cast(tf.reduce_sum(tf.cast(x, tf.float64), axis), tf.float32)
            return tf.cast(tf.reduce_max(x, axis), tf.float32)
        inside = ~_outside(starts, tf.shape(x, out_type=tf.int64)[axis], length)
        if how == "max":
            shaped = inside[:, None, :] if axis == 2 else inside[:, :, None]
            return tf.reduce_max(tf.where(shaped, x, tf.cast(-np.inf, x.dtype)), axis)
        spec = "bcw,bw->bc" if axis == 2 else "bwc,bw->bc"
        return tf.cast(tf.einsum(spec, x, tf.cast(inside, x.dtype)), tf.float64)

    def reduce_tables(self, x: tf.Tensor, how: str, axis: int) -> tf.Tensor:
        x = x if axis == 1 else tf.transpose(x, (0, 2, 1))  # (N, L, C)
        if how == "sum":
            return tf.pad(tf.cumsum(tf.cast(x, tf.float64), axis=1), [[0, 0], [1, 0], [0, 0]])
        low = tf.cast(-np.inf, x.dtype)
        prefix = tf.pad(_running_max(x), [[0, 0], [1, 0], [0, 0]], constant_values=low)
        suffix = tf.reverse(_running_max(tf.reverse(x, [1])), [1])
        suffix = tf.pad(suffix, [[0, 0], [0, 1], [0, 0]], constant_values=low)
        return tf.stack([prefix, suffix], axis=1)  # (N, 2, L + 1, C)

    def reduce_complement(
        self,
        table: tf.Tensor,
        rows: tf.Tensor,
        starts: tf.Tensor,
        width: int,
        inside: tf.Tensor,
        how: str,
    ) -> tf.Tensor:
        length = tf.shape(table, out_type=tf.int64)[-2] - 1
        begin = tf.clip_by_value(starts, 0, length)
        end = tf.clip_by_value(starts + width, 0, length)
        if how == "sum":  # table (N, L + 1, C)
            total = (
                tf.gather_nd(table, tf.stack([rows, length + 0 * rows], axis=1))
                - tf.gather_nd(table, tf.stack([rows, end], axis=1))
                + tf.gather_nd(table, tf.stack([rows, begin], axis=1))
            )
            return tf.cast(total + tf.cast(inside, tf.float64), tf.float32)
        zero, one = 0 * rows, 0 * rows + 1
        prefix = tf.gather_nd(table, tf.stack([rows, zero, begin], axis=1))
        suffix = tf.gather_nd(table, tf.stack([rows, one, end], axis=1))
        return tf.maximum(tf.maximum(prefix, suffix), inside)

    def pass_bytes(self) -> int | None:
        return None  # a traced graph plans its own buffers: one pass per batch

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return tf.function(fn, reduce_retracing=True, autograph=False)
