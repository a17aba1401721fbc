"""The windowed-forward capability of the torch backend (fast ISM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _positions(x: torch.Tensor, start: int, width: int, axis: int) -> torch.Tensor:
    """The view of positions start : start + width along ``axis``."""
    return x[:, :, start : start + width] if axis == 2 else x[:, start : start + width]


class TorchWindowedForward:
    """Windows of torch tensors and the torch.fx reader of a model's local prefix."""

    def local_graph(self, model: Any, row_shape: tuple[int, int], length_axis: int) -> Any:
        from ._torch_graph import torch_local_graph

        return torch_local_graph(model, row_shape, length_axis)

    def gather_windows(
        self, source: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, width: int, axis: int
    ) -> torch.Tensor:
        # one strided view of every window, then one index
        source = source.contiguous()
        n, a, b = source.shape
        if axis == 2:  # (N, C, L) -> (N, L - width + 1, C, width)
            view = source.as_strided((n, b - width + 1, a, width), (a * b, 1, b, 1))
        else:  # (N, L, C) -> (N, L - width + 1, width, C)
            view = source.as_strided((n, a - width + 1, width, b), (a * b, b, b, 1))
        return view[rows, starts]

    def overwrite_windows(
        self, target: torch.Tensor, window: torch.Tensor, at: torch.Tensor, axis: int
    ) -> torch.Tensor:
        n_window = window.shape[axis]
        if target.device.type == "cpu":
            # rows share a few offsets (one inside the sequence, a few near its ends): one
            # block copy per offset is far faster on a CPU than an element-wise scatter
            for offset in torch.unique(at).tolist():
                place = _positions(target, offset, n_window, axis)
                rows = (at == offset).nonzero().squeeze(1)
                if len(rows) == len(at):
                    place.copy_(window)
                else:
                    place.index_copy_(0, rows, window[rows])
            return target
        rows = torch.arange(len(at), device=target.device)[:, None]
        index = at[:, None] + torch.arange(n_window, device=target.device)
        if axis == 2:
            target[rows, :, index] = window.transpose(1, 2)
        else:
            target[rows, index] = window
        return target

    def pad_positions(self, x: torch.Tensor, left: int, right: int, axis: int) -> torch.Tensor:
        if left == 0 and right == 0:
            return x
        pad = (left, right) if axis == 2 else (0, 0, left, right)
        return torch.nn.functional.pad(x, pad)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with torch.inference_mode():
                return fn(*args)

        return run
