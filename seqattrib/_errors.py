"""The package's warning class and the one template every boundary error uses."""

from __future__ import annotations

from typing import Any


class SeqAttribWarning(UserWarning):
    """Warnings issued by seqattrib (never a silent correction of a parameter)."""


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
