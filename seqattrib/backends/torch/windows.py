"""The windowed-forward capability of the torch backend (fast ISM).

Windows are cut, joined and padded with their positions outermost in memory (a tensor whose
positions lie on axis 2 is stored as its (N, L, C) transpose): one window of one sequence is
then one contiguous block, so gathering windows copies whole blocks, and the torch reader runs
convolutions and pooling on such tensors in the channels-last format (``local_ops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _major(x: torch.Tensor, axis: int) -> torch.Tensor:
    """The view of ``x`` with its positions on axis 1 (and back: the map is its own inverse)."""
    return x.transpose(1, 2) if axis == 2 else x


def _blocks(rows: torch.Tensor, starts: torch.Tensor) -> list[tuple[int, int, int, int, int, int]]:
    """Rows of a batch that read windows at a regular pattern, as (first row, groups, rows per
    group, source row, first start, start step): a group is a run of consecutive rows with one
    (source row, start), and the groups of a block have one size and starts ``step`` apart.

    The mutants of one position share their windows, and consecutive positions' windows move
    by one, so a batch of a scan is a few blocks, each of them one broadcast view of the
    source (no copy).
    """
    r, s = rows.tolist(), starts.tolist()
    blocks: list[list[int]] = []
    first = 0
    for k in range(1, len(r) + 1):
        if k < len(r) and r[k] == r[first] and s[k] == s[first]:
            continue
        size, row, start = k - first, r[first], s[first]
        block = blocks[-1] if blocks else None
        if block is not None and block[2] == size and block[3] == row:
            step = start - (block[4] + (block[1] - 1) * block[5])
            if step >= 0 and (block[1] == 1 or step == block[5]):
                block[5] = step
                block[1] += 1
                first = k
                continue
        blocks.append([first, 1, size, row, start, 0])
        first = k
    return [tuple(b) for b in blocks]  # type: ignore[misc]


def _spare_rows(out: torch.Tensor | None, x: torch.Tensor, axis: int) -> torch.Tensor | None:
    """The positions-major view of ``out`` (``x`` itself, or a tensor laid out as ``x`` with at
    least its rows) to write a result of ``x``'s shape into; None where it cannot hold it."""
    if out is None:
        return None
    if out is x:
        return _major(x, axis)
    fits = (
        out.shape[1:] == x.shape[1:]
        and out.shape[0] >= x.shape[0]
        and out.dtype == x.dtype
        and out.device == x.device
        and _major(out, axis).is_contiguous()
    )
    return _major(out, axis)[: x.shape[0]] if fits else None


def _outside(starts: torch.Tensor, width: int, length: int) -> torch.Tensor:
    """(B, width) bool: positions ``starts[i] + j`` outside ``[0, length)``."""
    position = starts[:, None] + torch.arange(width, device=starts.device)
    return (position < 0) | (position >= length)


#: On a CPU, a node of a windowed pass runs on as many mutants at once as keep its largest
#: tensor under this many bytes (wider layers run on chunks of a batch). Smaller chunks pay the
#: per-call cost of the framework more often; larger ones leave the cache and make larger
#: temporaries, which the C allocator hands back to the operating system and faults in again.
#: Full scan of the BPNet-like model (L=1000, 64 channels, 3000 mutants, CPU seconds of three
#: runs): 1.21-1.23 s under 1 MiB, 1.00-1.02 s under 2 MiB, 0.89-0.97 s under 4 MiB,
#: 0.89-0.96 s under 8 MiB, 0.90-1.04 s under 16 MiB.
CPU_PASS_BYTES = 8 * 2**20


class TorchWindowedForward:
    """Windows of torch tensors and the torch.fx (or torch.export) reader of a model's local
    prefix."""

    device: torch.device
    writes_in_place = True

    def pass_bytes(self) -> int | None:
        return CPU_PASS_BYTES if self.device.type == "cpu" else None

    def local_graph(
        self,
        model: Any,
        row_shape: tuple[int, int],
        length_axis: int,
        output_fn: Callable[[Any], Any] | None = None,
    ) -> Any:
        from .export_graph import torch_model_graph

        return torch_model_graph(model, row_shape, length_axis, output_fn)

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

    def add_windows(
        self,
        x: torch.Tensor,
        source: torch.Tensor,
        rows: torch.Tensor,
        starts: torch.Tensor,
        axis: int,
        alpha: float = 1.0,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        major = _major(x, axis)
        target = _spare_rows(out, x, axis)
        if x.device.type != "cpu":
            windows = self.gather_windows(source, rows, starts, x.shape[axis], axis)
            if target is None:
                return x.add(windows, alpha=alpha)
            return _major(torch.add(major, _major(windows, axis), alpha=alpha, out=target), axis)
        # on a CPU, every block of rows with a regular pattern adds one broadcast view of the
        # source: the source's windows are read where they lie, never gathered into a copy
        if target is None:
            target = torch.empty_like(major)
        src = _major(source, axis).contiguous()
        length, channels = src.shape[1], src.shape[2]
        width = major.shape[1]
        for first, n_groups, size, row, start, step in _blocks(rows, starts):
            view = src.as_strided(
                (n_groups, size, width, channels),
                (step * channels, 0, channels, 1),
                src.storage_offset() + (row * length + start) * channels,
            )
            block = slice(first, first + n_groups * size)
            part = major[block].unflatten(0, (n_groups, size))
            if target is major:
                part.add_(view, alpha=alpha)
            else:
                written = target[block].unflatten(0, (n_groups, size))
                torch.add(part, view, alpha=alpha, out=written)
        return _major(target, axis)

    def add_splice(
        self,
        target: torch.Tensor,
        source: torch.Tensor,
        rows: torch.Tensor,
        starts: torch.Tensor,
        window: torch.Tensor,
        at: int,
        axis: int,
    ) -> torch.Tensor:
        width, n_window = target.shape[axis], window.shape[axis]
        if at > 0:
            front = target.narrow(axis, 0, at)
            self.add_windows(front, source, rows, starts, axis, out=front)
        target.narrow(axis, at, n_window).add_(window)
        rest = width - at - n_window
        if rest > 0:
            part = target.narrow(axis, at + n_window, rest)
            self.add_windows(part, source, rows, starts + (at + n_window), axis, out=part)
        return target

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
        if left == 0 and right == 0:  # stored with its positions outermost (a copy if not)
            return _major(_major(x, axis).contiguous(), axis)
        if left <= 0 and right <= 0:  # removing only: a view
            return x.narrow(axis, -left, x.shape[axis] + left + right)
        major = _major(x, axis)
        if left < 0 or right < 0:
            keep = major.shape[1] - max(0, -left) - max(0, -right)
            major = major.narrow(1, max(0, -left), keep)
            left, right = max(0, left), max(0, right)
        return _major(F.pad(major, (0, 0, left, right), value=fill), axis)

    def fill_outside(
        self,
        x: torch.Tensor,
        starts: torch.Tensor,
        length: int,
        fill: float,
        axis: int,
        in_place: bool = False,
    ) -> torch.Tensor:
        major = _major(x, axis)
        width = major.shape[1]
        if int(starts.min()) >= 0 and int(starts.max()) + width <= length:
            return x  # no window of this batch reaches past an end
        outside = _outside(starts, width, length)[:, :, None]
        if in_place:
            return _major(major.masked_fill_(outside, fill), axis)
        return _major(major.masked_fill(outside, fill), axis)

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
