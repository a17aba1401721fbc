"""The operations named heads (``seqattrib.heads``) compute with, on torch tensors.

Every backend's ``head_ops`` module has the same functions; a head is written once against
them and runs on the framework of the tensors the model returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .rescale_pairs import rescale_block as block_of_rescale


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def shape(x: torch.Tensor) -> tuple[int | None, ...]:
    return tuple(int(n) for n in x.shape)


def take(x: torch.Tensor, indices: Sequence[int], axis: int) -> torch.Tensor:
    return x.index_select(axis, torch.as_tensor(list(indices), device=x.device))


def narrow(x: torch.Tensor, axis: int, start: int, stop: int) -> torch.Tensor:
    return x.narrow(axis, start, stop - start)


def flatten(x: torch.Tensor) -> torch.Tensor:
    """(batch, ...) -> (batch, n)."""
    return x.reshape(x.shape[0], -1)


def reduce_sum(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    return x.sum(dim=axes)


def reduce_mean(x: torch.Tensor, axes: tuple[int, ...], keepdims: bool = False) -> torch.Tensor:
    return x.mean(dim=axes, keepdim=keepdims)


def softmax(x: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.softmax(x, dim=axis)


def stop_gradient(x: torch.Tensor) -> torch.Tensor:
    return x.detach()


def log1p(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(x)


def log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x)


def exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def logsumexp(x: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.logsumexp(x, dim=axis)


def stack(xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
    return torch.stack(list(xs), dim=axis)


def concat(xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
    return xs[0] if len(xs) == 1 else torch.cat(list(xs), dim=axis)


def flip(x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
    return torch.flip(x, dims=tuple(axes))


def sqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(x)


def maximum(x: torch.Tensor, value: float) -> torch.Tensor:
    return torch.clamp(x, min=value)


def float64(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64)


def rescale_block(func: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """``func(z)``; DeepLIFT/DeepSHAP treat the whole of ``func`` as one elementwise
    nonlinearity (its secant between input and reference)."""
    return block_of_rescale(func, z)
