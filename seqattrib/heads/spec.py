"""Heads written as text, as the command line's ``--head`` takes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import parameter_error

#: The heads by name: their first (unnamed) value and the keys they take.
GRAMMAR = {
    "profile": ("convention", ("convention", "output")),
    "counts": ("output", ("output",)),
    "logsumexp-counts": ("outputs", ("outputs",)),
    "tracks": (
        "track",
        ("track", "bins", "reduce", "transform", "minus", "output", "track_axis", "strand_pair"),
    ),
}
EXAMPLES = (
    "profile:chrombpnet, profile:bpnet-lite, counts, counts:1, logsumexp-counts:1+2, or "
    "tracks:track=5,bins=440:456,reduce=sum,transform=log1p"
)
_FUNC = "seqattrib.heads.from_spec"


def parse(spec: str) -> tuple[str, dict[str, Any]]:
    """The head's name (as its factory is called) and keyword arguments of ``spec``."""
    if not isinstance(spec, str):
        raise parameter_error(_FUNC, "spec", f"a text such as {EXAMPLES}", spec, error=TypeError)
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower().replace("_", "-")
    if name not in GRAMMAR:
        raise parameter_error(
            _FUNC, "spec", f"a head among {', '.join(GRAMMAR)}", name, f"E.g. {EXAMPLES}."
        )
    first, keys = GRAMMAR[name]
    kwargs: dict[str, Any] = {}
    for position, item in enumerate(rest.split(",") if rest.strip() else []):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            key, value = (first, key) if position == 0 else ("", item)
        key = key.replace("-", "_")
        if key not in keys or key in kwargs:
            raise parameter_error(
                _FUNC,
                "spec",
                f"key=value items with the keys {', '.join(keys)} (each once) after {name}:",
                item.strip(),
                f"E.g. {EXAMPLES}.",
            )
        kwargs[key] = _VALUES[key](value, key)
    return name.replace("-", "_"), kwargs


def _int(text: str, key: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise parameter_error(_FUNC, key, "an integer", text) from None


def _ints(text: str, key: str) -> int | list[int]:
    values = [_int(part, key) for part in text.split("+")]
    return values[0] if len(values) == 1 else values


def _output(text: str, key: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _outputs(text: str, key: str) -> tuple[int | str, ...]:
    return tuple(_output(part, key) for part in text.split("+"))


def _bins(text: str, key: str) -> Any:
    if text == "all":
        return None
    if ":" in text:
        parts = [None if not p.strip() else _int(p, key) for p in text.split(":")]
        if len(parts) > 3:
            raise parameter_error(_FUNC, key, "start:stop or start:stop:step", text)
        return slice(*parts)
    return _ints(text, key)


def _word(text: str, key: str) -> str | None:
    return None if text.lower() == "none" else text


_VALUES: dict[str, Callable[[str, str], Any]] = {
    "convention": _word,
    "output": _output,
    "outputs": _outputs,
    "track": _ints,
    "minus": _ints,
    "bins": _bins,
    "reduce": _word,
    "transform": _word,
    "track_axis": _int,
    "strand_pair": _ints,
}
