"""Heads of BPNet and ChromBPNet models: the profile (a scalar per sequence from the profile
logits) and the total counts."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from types import ModuleType
from typing import Any

from ..engine.outputs import describe_output
from .base import NamedHead, mismatch, ops_for, replace, select

#: The profile conventions and what they compute (``l~``: logits minus their mean per row).
CONVENTIONS = ("chrombpnet", "bpnet-lite")


@dataclass(frozen=True)
class Profile(NamedHead):
    """A scalar per sequence from profile logits (see :func:`seqattrib.heads.profile`)."""

    output: int | str | None = 0
    convention: str = "chrombpnet"

    def __call__(self, raw: Any) -> Any:
        flat = self.positions(raw)
        ops = ops_for(flat, "profile", "output")
        centred = flat - ops.reduce_mean(flat, (1,), keepdims=True)
        if self.convention == "chrombpnet":
            weights = ops.softmax(ops.stop_gradient(centred), 1)
            return ops.reduce_sum(weights * centred, (1,))[:, None]
        return ops.reduce_sum(ops.rescale_block(_LogitScaling(ops), centred), (1,))[:, None]

    def positions(self, raw: Any) -> Any:
        """The profile logits flattened per sequence (strands and positions as one axis),
        (batch, P)."""
        logits = select(raw, self.output, "profile")
        ops = ops_for(logits, "profile", "output")
        shape = ops.shape(logits)
        positions = prod(n or 2 for n in shape[1:]) if len(shape) >= 2 else 0
        if positions < 2:
            raise mismatch(
                "profile",
                "output",
                "the profile logits: (batch, length), (batch, strands, length) or (batch, "
                "length, strands)",
                f"output={self.output!r}, a tensor of shape {tuple(shape)}, from a model "
                f"returning {describe_output(raw)}",
                "Pick the profile output with output=; heads.counts() explains the counts.",
            )
        return ops.flatten(logits)

    def reoriented(self, raw: Any) -> Any:
        """The raw output of reverse-complemented windows with the profile logits turned back
        to the forward strand: positions reversed and, for stranded profiles, the two strands
        swapped (every axis but the batch reversed; ChromBPNet's variant scorer reverses the
        flattened profile)."""
        logits = select(raw, self.output, "profile")
        ops = ops_for(logits, "profile", "output")
        axes = list(range(1, len(ops.shape(logits))))
        return replace(raw, self.output, ops.flip(logits, axes))


@dataclass(frozen=True)
class _LogitScaling:
    """``l * softmax(l)`` along the positions (bpnet-lite's ``_ProfileLogitScaling``)."""

    ops: ModuleType

    def __call__(self, logits: Any) -> Any:
        return logits * self.ops.softmax(logits, -1)


@dataclass(frozen=True)
class Counts(NamedHead):
    """The counts output (see :func:`seqattrib.heads.counts`)."""

    output: int | str | None = 1

    def __call__(self, raw: Any) -> Any:
        return _counts(raw, self.output, "counts", "output")


@dataclass(frozen=True)
class LogSumExpCounts(NamedHead):
    """log(exp(a) + exp(b) + ...) of several counts outputs (see
    :func:`seqattrib.heads.logsumexp_counts`)."""

    outputs: tuple[int | str, ...] = (1, 2)

    def __call__(self, raw: Any) -> Any:
        parts = [_counts(raw, output, "logsumexp_counts", "outputs") for output in self.outputs]
        shapes = {tuple(part.shape) for part in parts}
        if len(shapes) > 1:
            raise mismatch(
                "logsumexp_counts",
                "outputs",
                "counts outputs of one shape",
                f"outputs={self.outputs!r}, of shapes {sorted(shapes, key=str)}, from a model "
                f"returning {describe_output(raw)}",
            )
        ops = ops_for(parts[0], "logsumexp_counts", "outputs")
        return ops.logsumexp(ops.stack(parts, 0), 0)


def _counts(raw: Any, output: Any, head: str, param: str) -> Any:
    counts = select(raw, output, head, param)
    ops = ops_for(counts, head, param)
    shape = ops.shape(counts)
    if len(shape) not in (1, 2):
        raise mismatch(
            head,
            param,
            "a counts output of shape (batch,) or (batch, K)",
            f"{param}={output!r}, a tensor of shape {tuple(shape)}, from a model returning "
            f"{describe_output(raw)}",
            "Pick the counts output; heads.profile() explains the profile logits.",
        )
    return counts
