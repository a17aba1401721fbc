"""The engine's input: X validated once and read in pieces (numpy array, memmap, h5py dataset
or a lazy genome-window source), with the one-hot checks every method shares."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning, parameter_error, user_stacklevel
from .._validation import check_alphabet_axis

#: Slack for float rounding in the one-hot checks (soft encodings pass, anything else fails).
_ONE_HOT_ATOL = 1e-5


def infer_alphabet_axis(shape: Sequence[int], alphabet_axis: int | None, func: str) -> int:
    """Return -1 or 1: the axis of a 3-D array that holds the 4 bases."""
    if len(shape) != 3:
        raise parameter_error(
            func,
            "X",
            "a 3-D one-hot array of shape (n_sequences, length, 4) or (n_sequences, 4, length)",
            f"an array of shape {tuple(shape)}",
            "Use seqattrib.one_hot(seqs) to encode strings; add a leading axis for one sequence.",
            described=True,
        )
    if alphabet_axis is None:
        first, last = shape[1] == 4, shape[2] == 4
        if first and last:
            raise parameter_error(
                func,
                "alphabet_axis",
                "given when both axis 1 and axis -1 have size 4",
                f"None for X of shape {tuple(shape)}",
                "Pass alphabet_axis=1 for (N, 4, L) or alphabet_axis=-1 for (N, L, 4).",
            )
        if not (first or last):
            raise parameter_error(
                func,
                "X",
                "one-hot with 4 bases on axis 1 or axis -1",
                f"an array of shape {tuple(shape)}",
                "Encode sequences with seqattrib.one_hot(seqs).",
                described=True,
            )
        return 1 if first else -1
    axis = -1 if check_alphabet_axis(alphabet_axis, 3, func) == -1 else 1
    if shape[axis] != 4:
        raise parameter_error(
            func,
            "alphabet_axis",
            "an axis of size 4",
            f"{alphabet_axis} for X of shape {tuple(shape)}",
            "Pass alphabet_axis=None to infer it, or the axis that holds A, C, G, T.",
        )
    return axis


@dataclass
class SequenceSource:
    """Validated view of X that is read in pieces (numpy array, memmap or h5py dataset)."""

    data: Any
    n_sequences: int
    row_shape: tuple[int, int]
    alphabet_axis: int  # 1 or -1, for the 3-D array
    func: str
    #: Row of ``data`` where this view starts (a resumed run reads the rest of X).
    offset: int = 0

    @property
    def length(self) -> int:
        return self.row_shape[0] if self.alphabet_axis == -1 else self.row_shape[1]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of this view as float32, checked to be one-hot-like."""
        chunk = np.asarray(self.data[self.offset + start : self.offset + stop])
        chunk = chunk.astype(np.float32, copy=False)
        check_one_hot(chunk, self.alphabet_axis, self.func, offset=self.offset + start)
        return chunk

    def tail(self, start: int) -> SequenceSource:
        """The view of rows ``start:`` (indices in messages and sinks stay those of X)."""
        return SequenceSource(
            self.data,
            self.n_sequences - start,
            self.row_shape,
            self.alphabet_axis,
            self.func,
            self.offset + start,
        )

    def rows(self, start: int, stop: int) -> SequenceSource:
        """A source of rows ``start:stop`` of this one alone (indices in messages and sinks
        start again at 0: a shard of a job is a job of its own)."""
        return SequenceSource(
            _RowRange(self.data, self.offset + start, self.offset + stop),
            stop - start,
            self.row_shape,
            self.alphabet_axis,
            self.func,
        )

    def to_nlc(self, chunk: np.ndarray) -> np.ndarray:
        """(n, L, 4) view of a chunk in the source layout."""
        return chunk if self.alphabet_axis == -1 else chunk.transpose(0, 2, 1)

    def from_nlc(self, arr: np.ndarray) -> np.ndarray:
        """Move the alphabet of a (..., L, 4) array to the source layout."""
        return arr if self.alphabet_axis == -1 else np.swapaxes(arr, -1, -2)


def check_one_hot(chunk: np.ndarray, alphabet_axis: int, func: str, offset: int = 0) -> None:
    """Refuse values outside [0, 1] or columns summing to more than 1, naming the sequence."""
    bad_value = ~np.isfinite(chunk) | (chunk < 0) | (chunk > 1)
    if bad_value.any():
        i = int(np.argwhere(bad_value)[0][0])
        value = chunk[i][bad_value[i]][0]
        raise parameter_error(
            func,
            "X",
            "one-hot-like with values in [0, 1]",
            f"the value {value!r} in sequence {offset + i}",
            "Pass one-hot encoded DNA (seqattrib.one_hot), not logits, counts or attributions.",
            described=True,
        )
    sums = chunk.sum(axis=alphabet_axis)
    over = sums > 1 + _ONE_HOT_ATOL
    if over.any():
        i, pos = (int(v) for v in np.argwhere(over)[0])
        raise parameter_error(
            func,
            "X",
            "one-hot-like, summing to at most 1 over the 4 bases at every position",
            f"a sum of {sums[i, pos]:.4g} at position {pos} of sequence {offset + i}",
            "Check alphabet_axis, or that the array is one-hot encoded DNA.",
            described=True,
        )


def as_source(X: Any, alphabet_axis: int | None, func: str) -> SequenceSource:
    """Wrap X for piecewise reading after checking its type, shape and layout."""
    if isinstance(X, (str, bytes)) or (
        isinstance(X, (list, tuple)) and X and isinstance(X[0], (str, bytes))
    ):
        raise parameter_error(
            func,
            "X",
            "a one-hot array",
            "strings",
            "Encode them first: X = seqattrib.one_hot(seqs).",
            described=True,
            error=TypeError,
        )
    X = _tensor_rows(X, func)
    if not (hasattr(X, "shape") and hasattr(X, "__getitem__") and hasattr(X, "dtype")):
        try:
            X = np.asarray(X)
        except Exception as exc:  # pragma: no cover - exotic inputs
            raise parameter_error(
                func, "X", "an array", type(X).__name__, error=TypeError, described=True
            ) from exc
    shape = tuple(int(s) for s in X.shape)
    axis = infer_alphabet_axis(shape, alphabet_axis, func)
    kind = (
        np.dtype(getattr(X.dtype, "as_numpy_dtype", X.dtype)).kind if _is_np_dtype(X.dtype) else "?"
    )
    if kind not in "fiub":
        raise parameter_error(
            func,
            "X",
            "a numeric one-hot array",
            f"dtype {X.dtype}",
            described=True,
            error=TypeError,
        )
    if shape[0] == 0 or shape[1] == 0 or shape[2] == 0:
        raise parameter_error(
            func,
            "X",
            "non-empty",
            f"an array of shape {shape}",
            "Pass at least one sequence.",
            described=True,
        )
    return SequenceSource(X, shape[0], (shape[1], shape[2]), axis, func)


def _is_np_dtype(dtype: Any) -> bool:
    try:
        np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
        return True
    except TypeError:
        return False


def _tensor_rows(X: Any, func: str) -> Any:
    """A torch or TensorFlow tensor as rows read into numpy (a CPU tensor's memory is shared,
    not copied); X itself otherwise. X on an accelerator is read to the host in chunks for the
    one-hot checks, with a warning that says so."""
    module = type(X).__module__.split(".")[0]
    if module not in ("torch", "tensorflow") or not hasattr(X, "shape"):
        return X
    device = str(getattr(X, "device", "cpu")).lower()
    if "cpu" not in device:
        warnings.warn(
            f"{func}: X is on {device}; it is read to the host in chunks (for the one-hot checks) "
            "and copied back to the device. Pass a host array to avoid the copies.",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )
    return _TensorRows(X)


class _TensorRows:
    """Rows of a torch or TensorFlow tensor as numpy arrays (slices only)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.shape = tuple(int(s) for s in tensor.shape)
        tf_dtype = getattr(tensor.dtype, "as_numpy_dtype", None)
        name = str(tensor.dtype).rsplit(".", 1)[-1]
        try:
            dtype = np.dtype(tf_dtype if tf_dtype is not None else name)
        except TypeError:
            dtype = np.dtype(np.void)
        # bfloat16 and other types numpy (or torch's numpy bridge) lacks: read as float32
        self.cast = dtype.kind not in "fiub" or name == "bfloat16"
        self.dtype = np.dtype(np.float32) if self.cast else dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: slice) -> np.ndarray:
        rows = self.tensor[index]
        if hasattr(rows, "detach"):  # torch
            rows = rows.detach().cpu()
            return (rows.float() if self.cast else rows).numpy()
        return np.asarray(rows.numpy()).astype(self.dtype, copy=False)


class _RowRange:
    """Rows ``[start, stop)`` of an array-like, read lazily (slices only)."""

    def __init__(self, data: Any, start: int, stop: int) -> None:
        self.data, self.start, self.stop = data, start, stop
        self.shape = (stop - start, *tuple(data.shape)[1:])
        self.dtype = data.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: slice) -> Any:
        first, last, _ = index.indices(self.shape[0])
        return self.data[self.start + first : self.start + max(first, last)]
