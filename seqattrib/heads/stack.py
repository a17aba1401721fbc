"""Several heads as the columns of one (batch, K) output: K targets from one forward pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .base import NamedHead, columns, ops_for


@dataclass(frozen=True)
class Stack(NamedHead):
    """The columns of each head, side by side (see :func:`seqattrib.heads.stack`)."""

    heads: tuple[Callable[[Any], Any], ...]
    #: What results files record of the heads (each head's code and settings).
    identity: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from ..io.fingerprint import function_identity

        text = "|".join(str(function_identity(head)) for head in self.heads)
        object.__setattr__(self, "identity", text)

    def __call__(self, raw: Any) -> Any:
        parts = []
        for head in self.heads:
            value = head(raw)
            parts.append(columns(value, ops_for(value, "stack", "heads"), "stack", "heads", raw))
        return ops_for(parts[0], "stack", "heads").concat(parts, 1)
