"""The package's warning class and the one template every boundary error uses."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar


class SeqAttribWarning(UserWarning):
    """Warnings issued by seqattrib (never a silent correction of a parameter)."""


class SeqAttribDeprecationWarning(SeqAttribWarning, FutureWarning):
    """An old name that still works for one release; the message names the new one."""


F = TypeVar("F", bound=Callable[..., Any])
#: The old names already warned about in this process: (where, old name).
_WARNED: set[tuple[str, str]] = set()
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the calling function point at the
    first caller outside this package (the user's line), however deep the call."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def warn_renamed(where: str, old: str, new: str) -> None:
    """Warn, once per process, that ``old`` of ``where`` is now spelled ``new``."""
    if (where, old) in _WARNED:
        return
    _WARNED.add((where, old))
    warnings.warn(
        f"{old} of {where} is renamed {new}; the old name will stop working in the next "
        f"release. Use {new} instead.",
        SeqAttribDeprecationWarning,
        stacklevel=user_stacklevel(),
    )


def deprecated_alias(**renamed: str) -> Callable[[F], F]:
    """Accept each old keyword name (``old="new"``) of the decorated function for one release.

    An old keyword is passed on under its new name with a ``SeqAttribDeprecationWarning``
    (once per process per function and name); passing the old and the new name together is a
    ``TypeError``. The signature that ``inspect`` and the docs show holds only the new names.
    """

    def decorate(func: F) -> F:
        where = func.__name__

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renamed.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise parameter_error(
                        where,
                        old,
                        f"left out when {new}= is given (it is the old name of {new})",
                        kwargs[old],
                        f"Pass {new}= alone.",
                        error=TypeError,
                    )
                warn_renamed(f"{where}()", f"{old}=", f"{new}=")
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


class InputShapeRefused(ValueError):
    """A model that states the input shapes it takes (an exported program) refused X's; the
    message names the fix, and is reported as it is."""


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (int, float, str)):
        dtype = getattr(value, "dtype", None)
        return f"an array of shape {tuple(shape)}" + (f" and dtype {dtype}" if dtype else "")
    text = repr(os.fspath(value) if isinstance(value, os.PathLike) else value)
    # a path is named whole (a file must be found from the message); other values are cut
    limit = 400 if isinstance(value, (str, os.PathLike)) else 80
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
