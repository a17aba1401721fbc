"""Parameter checks shared by every public function (one error template, see ``_errors``)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._errors import parameter_error


def check_positive_int(value: Any, param: str, func: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise parameter_error(func, param, "a positive integer", value)
    return int(value)


def check_batch_size(value: Any, func: str) -> int | None:
    """``"auto"`` -> None (probe), else a positive int."""
    if isinstance(value, str) and value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise parameter_error(
            func, "batch_size", "'auto' or a positive integer (device rows)", value
        )
    return int(value)


def check_device(device: Any, func: str) -> None:
    """Refuse a device that holds no data (torch's ``meta``): a model moved there loses its
    weights."""
    if device is not None and str(device).partition(":")[0].strip().lower() == "meta":
        raise parameter_error(
            func,
            "device",
            "a device that holds data ('cpu', 'cuda', 'cuda:1', 'mps', '/GPU:0')",
            device,
            "The meta device has shapes but no values; use device='cpu' or a GPU.",
        )


def resolve_targets(target: Any, n_outputs: int, func: str) -> tuple[list[int], bool]:
    """Normalise ``target`` to a list of output indices and whether to drop the K axis."""

    def _one(t: Any) -> int:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise parameter_error(
                func, "target", "an int, a sequence of ints or None", target, error=TypeError
            )
        if not -n_outputs <= int(t) < n_outputs:
            raise parameter_error(
                func,
                "target",
                f"an output index in [0, {n_outputs}) (the model has {n_outputs} outputs)",
                t,
                "Pick an existing output, or pass output_fn to select outputs of a "
                "tuple/dict model.",
            )
        return int(t) % n_outputs

    if target is None:
        return list(range(n_outputs)), False
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        return [_one(target)], True
    if isinstance(target, (str, bytes)) or not isinstance(target, (Sequence, np.ndarray)):
        raise parameter_error(
            func, "target", "an int, a sequence of ints or None", target, error=TypeError
        )
    targets = [_one(t) for t in target]
    if not targets:
        raise parameter_error(func, "target", "a non-empty sequence of ints", target)
    return targets, False


def resolve_seed(random_state: Any, func: str) -> int:
    """One integer seed in [0, 2**63) from ``random_state`` (int, Generator or None)."""
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> 1)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if not 0 <= int(random_state) < 2**63:
            raise parameter_error(func, "random_state", "an int in [0, 2**63)", random_state)
        return int(random_state)
    raise parameter_error(
        func,
        "random_state",
        "an int, a numpy.random.Generator or None",
        random_state,
        error=TypeError,
    )


def first_difference(
    old: Mapping[str, Any], new: Mapping[str, Any], ignore: tuple[str, ...] = ()
) -> str | None:
    """The first key, in sorted order, whose values in ``old`` and ``new`` differ (a key missing
    from one reads None), leaving out ``ignore``; None when they agree."""
    for key in sorted(set(old) | set(new)):
        if key not in ignore and old.get(key) != new.get(key):
            return key
    return None


#: How every function that takes ``alphabet_axis`` documents it.
ALPHABET_AXIS_DOC = "{None, -1, -2} or the same axis as a positive index"


def check_alphabet_axis(alphabet_axis: Any, ndim: int, func: str) -> int | None:
    """``alphabet_axis`` of an array of ``ndim`` axes as -1 or -2 (None stays None).

    The alphabet is one of the array's last two axes: -1 for (..., L, 4), -2 for (..., 4, L);
    a positive index of the same axis (``ndim - 1`` or ``ndim - 2``) means the same.
    """
    if alphabet_axis is None:
        return None
    if isinstance(alphabet_axis, bool) or not isinstance(alphabet_axis, numbers.Integral):
        raise parameter_error(
            func, "alphabet_axis", "None or an int", alphabet_axis, error=TypeError
        )
    axis = int(alphabet_axis)
    if axis in (-1, -2):
        return axis
    if ndim >= 2 and axis in (ndim - 1, ndim - 2):
        return axis - ndim
    raise parameter_error(
        func,
        "alphabet_axis",
        f"None or one of the last two axes of a {ndim}-D array (-1, -2, {ndim - 1} or {ndim - 2})",
        alphabet_axis,
        "Pass -1 for (..., length, 4) or -2 for (..., 4, length).",
    )
