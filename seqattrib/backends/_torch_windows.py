"""The windowed-forward capability of the torch backend (fast ISM).

Windows are cut, joined and padded with their positions outermost in memory (a tensor whose
positions lie on axis 2 is stored as its (N, L, C) transpose): one window of one sequence is
then one contiguous block, so gathering windows copies whole blocks, and the torch reader runs
convolutions and pooling on such tensors in the channels-last format (``_torch_ops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _major(x: torch.Tensor, axis: int) -> torch.Tensor:
    """The view of ``x`` with its positions on axis 1 (and back: the map is its own inverse)."""
    return x.transpose(1, 2) if axis == 2 else x


def _outside(starts: torch.Tensor, width: int, length: int) -> torch.Tensor:
    """(B, width) bool: positions ``starts[i] + j`` outside ``[0, length)``."""
    position = starts[:, None] + torch.arange(width, device=starts.device)
    return (position < 0) | (position >= length)


#: On a CPU, one windowed pass keeps its largest intermediate tensor under this many bytes.
#: Smaller passes pay the per-pass cost of some 150 framework calls more often; larger ones
#: make larger temporaries, which the C allocator hands back to the operating system between
#: passes and faults in again (FastForward keeps a pass's tensors until the next pass has made
#: its own, which removes most of that). Full scan of the BPNet-like model (L=1000, 64
#: channels, 3000 mutants, CPU seconds of three runs): 1.4-1.8 s in passes under 4 MiB,
#: 1.29-1.45 s under 8 MiB, 1.2-1.6 s under 16 MiB, 1.6-1.8 s under 32 MiB.
CPU_PASS_BYTES = 8 * 2**20


class TorchWindowedForward:
    """Windows of torch tensors and the torch.fx reader of a model's local prefix."""

    device: torch.device

    def pass_bytes(self) -> int | None:
        return CPU_PASS_BYTES if self.device.type == "cpu" else None

    def local_graph(
        self,
        model: Any,
        row_shape: tuple[int, int],
        length_axis: int,
        output_fn: Callable[[Any], Any] | None = None,
    ) -> Any:
        from ._torch_graph import torch_local_graph

        return torch_local_graph(model, row_shape, length_axis, output_fn)

    def gather_windows(
        self, source: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, width: int, axis: int
    ) -> torch.Tensor:
        # every window of a positions-major source is a block of width * C values at a stride
        # of C: one view of all of them, then one row index
        major = _major(source, axis).contiguous()
        n, length, channels = major.shape
        blocks = major.reshape(-1).as_strided(
            (n * length - width + 1, width * channels), (channels, 1)
        )
        picked = blocks.index_select(0, rows * length + starts)
        return _major(picked.view(-1, width, channels), axis)

    def overwrite_windows(
        self, target: torch.Tensor, window: torch.Tensor, at: torch.Tensor | int, axis: int
    ) -> torch.Tensor:
        major, block = _major(target, axis), _major(window, axis)
        n_window, width = block.shape[1], major.shape[1]
        if isinstance(at, int):  # one offset for every row, inside the target
            major[:, at : at + n_window].copy_(block)
            return target
        if target.device.type == "cpu":
            # rows share a few offsets (one inside the sequence, a few near its ends): one
            # block copy per offset is far faster on a CPU than an element-wise scatter
            for offset in torch.unique(at).tolist():
                low, high = max(0, offset), min(width, offset + n_window)
                if low >= high:
                    continue
                place = major[:, low:high]
                part = block[:, low - offset : high - offset]
                rows = (at == offset).nonzero().squeeze(1)
                if len(rows) == len(at):
                    place.copy_(part)
                else:
                    place.index_copy_(0, rows, part[rows])
            return target
        position = at[:, None] + torch.arange(n_window, device=target.device)
        inside = (position >= 0) & (position < width)
        rows = torch.arange(len(at), device=target.device)[:, None].expand_as(position)
        major[rows[inside], position[inside]] = block[inside]
        return target

    def pad_positions(
        self, x: torch.Tensor, left: int, right: int, axis: int, fill: float = 0.0
    ) -> torch.Tensor:
        if left <= 0 and right <= 0:  # removing only: a view
            return x.narrow(axis, -left, x.shape[axis] + left + right)
        major = _major(x, axis)
        if left < 0 or right < 0:
            keep = major.shape[1] - max(0, -left) - max(0, -right)
            major = major.narrow(1, max(0, -left), keep)
            left, right = max(0, left), max(0, right)
        return _major(F.pad(major, (0, 0, left, right), value=fill), axis)

    def fill_outside(
        self, x: torch.Tensor, starts: torch.Tensor, length: int, fill: float, axis: int
    ) -> torch.Tensor:
        major = _major(x, axis)
        width = major.shape[1]
        if int(starts.min()) >= 0 and int(starts.max()) + width <= length:
            return x  # no window of this batch reaches past an end
        outside = _outside(starts, width, length)
        return _major(major.masked_fill(outside[:, :, None], fill), axis)

    def reduce_positions(
        self, x: torch.Tensor, starts: torch.Tensor | None, length: int, how: str, axis: int
    ) -> torch.Tensor:
        major = _major(x, axis)  # (B, W, C)
        if starts is None:
            if how == "sum":
                return major.sum(dim=1, dtype=torch.float64).float()
            return major.amax(dim=1).float()
        outside = _outside(starts, major.shape[1], length)
        if how == "max":
            return major.masked_fill(outside[:, :, None], float("-inf")).amax(dim=1)
        weights = (~outside).to(major.dtype)
        return torch.bmm(weights[:, None, :], major)[:, 0, :].double()  # one pass over x

    def reduce_tables(self, x: torch.Tensor, how: str, axis: int) -> torch.Tensor:
        major = _major(x, axis)  # (N, L, C)
        if how == "sum":  # (N, L + 1, C) float64
            return F.pad(torch.cumsum(major.double(), dim=1), (0, 0, 1, 0))
        low = float("-inf")
        prefix = F.pad(torch.cummax(major, dim=1).values, (0, 0, 1, 0), value=low)
        suffix = torch.cummax(major.flip(1), dim=1).values.flip(1)
        return torch.stack([prefix, F.pad(suffix, (0, 0, 0, 1), value=low)], dim=1)

    def reduce_complement(
        self,
        table: torch.Tensor,
        rows: torch.Tensor,
        starts: torch.Tensor,
        width: int,
        inside: torch.Tensor,
        how: str,
    ) -> torch.Tensor:
        length = table.shape[-2] - 1
        begin = starts.clamp(0, length)
        end = (starts + width).clamp(0, length)
        if how == "sum":
            total = table[rows, length] - table[rows, end] + table[rows, begin]
            return (total + inside).float()
        outside = torch.maximum(table[rows, 0, begin], table[rows, 1, end])
        return torch.maximum(outside, inside)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with torch.inference_mode():
                return fn(*args)

        return run
