"""The package's warning class and the one template every boundary error uses."""

from __future__ import annotations

import os
from typing import Any


class SeqAttribWarning(UserWarning):
    """Warnings issued by seqattrib (never a silent correction of a parameter)."""


class InputShapeRefused(ValueError):
    """A model that states the input shapes it takes (an exported program) refused X's; the
    message names the fix, and is reported as it is."""


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (int, float, str)):
        dtype = getattr(value, "dtype", None)
        return f"an array of shape {tuple(shape)}" + (f" and dtype {dtype}" if dtype else "")
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parameter_error(
    func: str,
    param: str,
    expected: str,
    got: Any,
    fix: str = "",
    *,
    error: type[Exception] = ValueError,
    described: bool = False,
) -> Exception:
    """Build an error with the package template.

    ``The {param!r} parameter of {func} must be {expected}. Got {value} instead. {fix}``
    """
    value = got if described else _describe(got)
    message = f"The {param!r} parameter of {func} must be {expected}. Got {value} instead."
    if fix:
        message += f" {fix}"
    return error(message)


def refuse_existing(func: str, param: str, path: Any, overwrite: bool) -> None:
    """Refuse to write ``path`` over an existing file unless ``overwrite`` is true."""
    if overwrite or not os.path.exists(path):
        return
    raise parameter_error(
        func,
        param,
        "a file that does not exist yet",
        os.fspath(path),
        "Pass overwrite=True to replace it, or choose another path.",
        error=FileExistsError,
    )
