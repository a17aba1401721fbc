"""Fast ISM: recompute only what a single-base change can change.

A substitution at position p changes a convolution's output only within its receptive field
of p, a pointwise layer's output only where its input changed, and so on up to the first layer
whose output at any position may depend on every input position (dense, flatten, global
pooling, anything unknown). The backend reads that local prefix of the model into a
``LocalGraph``; this module, written once for every framework, works out for each layer and
each mutated position the window of positions that can differ (``plan_windows``), computes every
layer's reference values once per sequence, and for each mutant recomputes only its windows:
a layer's input window is the reference values with the mutant's changed window of the layer
below spliced in. The rest of the model (``tail``) then runs on the full values.

Windows have one width per layer (the interior width); near the ends of a sequence they are
shifted inwards instead of shrunk, so a batch of mutants at different positions is one tensor
per layer. Recomputing a few unchanged positions there is exact: their inputs are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...backends import WindowedBackend
from ...backends._local_graph import GraphUnsupported, LocalGraph

Tensor = Any


@dataclass
class FastPlan:
    """Window arithmetic of one model for one input length (see ``plan_windows``)."""

    graph: LocalGraph
    order: list[int]  # nodes computed for a mutant, topological, the input excluded
    starts: np.ndarray  # (n_nodes, L) int64: window start of node n for a mutation at p
    widths: list[int]  # window width of node n
    cost_ratio: float  # estimated (fast / full) cost of the local prefix per mutant
    forward: FastForward | None = None  # built once, so compiled functions are traced once


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -((-a) // b)


def plan_windows(graph: LocalGraph, length: int) -> FastPlan:
    """For every node and every mutated input position, the window of positions that can change.

    Parameters
    ----------
    graph : LocalGraph
        The model's local prefix.
    length : int
        Input length L.

    Returns
    -------
    FastPlan
        ``starts`` of shape (n_nodes, L) and one width per node: a mutation at input position p
        can only change node n at positions ``starts[n, p] : starts[n, p] + widths[n]``.
    """
    nodes = graph.nodes
    needed: set[int] = set()
    stack = list(graph.cut)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(nodes[n].inputs)
    order = [n for n in range(1, len(nodes)) if n in needed]
    p = np.arange(length, dtype=np.int64)
    starts = np.zeros((len(nodes), length), np.int64)
    widths = [1] * len(nodes)
    starts[0] = p
    fast_cost = full_cost = 0.0
    for n in order:
        node = nodes[n]
        first = node.inputs[0]
        if node.kind == "pointwise":
            s, w = starts[first], widths[first]
        elif node.kind == "crop":
            s, w = starts[first] - node.offset, widths[first]
        elif node.kind == "window":
            reach = (node.kernel - 1) * node.dilation
            s = _ceil_div(starts[first] + node.pad_left - reach, node.stride)
            end = (starts[first] + widths[first] - 1 + node.pad_left) // node.stride + 1
            w = int(np.max(end - s))
        elif node.kind == "add":
            s = np.min([starts[i] for i in node.inputs], axis=0)
            end = np.max([starts[i] + widths[i] for i in node.inputs], axis=0)
            w = int(np.max(end - s))
        else:
            raise GraphUnsupported(f"{node.name}: unknown node kind {node.kind!r}")
        w = max(1, min(int(w), node.length))
        starts[n] = np.clip(s, 0, node.length - w)
        widths[n] = w
        taps = node.kernel if node.kind == "window" else 1
        fast_cost += w * taps
        full_cost += node.length * taps
    ratio = fast_cost / full_cost if full_cost else 1.0
    return FastPlan(graph, order, starts, widths, ratio)


def fast_forward(backend: WindowedBackend, plan: FastPlan) -> FastForward:
    """The plan's ``FastForward``, made on first use (its compiled functions then stay)."""
    if plan.forward is None:
        plan.forward = FastForward(backend, plan)
    return plan.forward


def splice(
    backend: WindowedBackend,
    reference: Tensor,
    seq: Tensor,
    starts: Tensor,
    width: int,
    window: Tensor,
    window_starts: Tensor,
    axis: int,
    offsets: tuple[int, int],
) -> Tensor:
    """Mutants' values over wider windows, as (B, ...): row ``seq[i]`` of ``reference``
    (N, a, b) at positions ``starts[i] + j`` (``j < width``) along ``axis`` (1 or 2),
    overwritten by ``window`` (B, ...; positions ``window_starts[i] + j``) where they overlap.

    ``window_starts - starts`` lies within ``offsets`` (low, high), and ``reference`` is padded
    so that positions ``starts + low`` to ``starts + high + window width`` exist: a slightly
    wider run is read so that every window lies inside it, the window is written over it, and
    the middle is kept.
    """
    low, high = offsets
    n_window = int(window.shape[axis])
    left, right = max(0, -low), max(0, high + n_window - width)
    run = backend.gather_windows(reference, seq, starts - left, width + left + right, axis)
    run = backend.overwrite_windows(run, window, window_starts - starts + left, axis)
    return backend.pad_positions(run, -left, -right, axis)


def _input_width(node: Any, width: int) -> int:
    """Input positions a window node reads to produce ``width`` outputs."""
    return (width - 1) * node.stride + (node.kernel - 1) * node.dilation + 1


class FastForward:
    """Reference values per sequence and windowed forward passes per mutant, on the device.

    Reference values are kept zero-padded along their positions, as far as any window of a
    later node reaches past either end, so every window is a plain slice of them. A node whose
    window spans all its positions (and whose inputs do too) is computed as in a normal forward
    pass, without windows.
    """

    def __init__(self, backend: WindowedBackend, plan: FastPlan) -> None:
        self.backend, self.plan = backend, plan
        graph = plan.graph
        nodes = self.nodes = graph.nodes
        self.cut = graph.cut
        widths = plan.widths
        # reference values are kept for nodes read by a later node or by the tail
        self.kept = sorted({i for n in plan.order for i in nodes[n].inputs} | set(self.cut))
        # full: a mutant's window of the node spans all its positions; plain: so do its
        # inputs', and it is computed as in a normal forward pass (no windows)
        full = {n: widths[n] == nodes[n].length for n in range(len(nodes))}
        plain = {
            n: full[n] and nodes[n].kind != "crop" and all(full[i] for i in nodes[n].inputs)
            for n in plan.order
        }
        self.full, self.plain = full, plain
        # Every place a mutant's window of node i is expanded to a wider window (the input
        # range of node n): the range of (window start - expanded start), and how far the
        # expanded window, widened so the mutant's window always fits, reads past either end
        # of node i (its reference values are kept padded by that much).
        self.offsets: dict[tuple[Any, int], tuple[int, int]] = {}
        before = dict.fromkeys(self.kept, 0)
        after = dict.fromkeys(self.kept, 0)
        for n in plan.order:
            node = nodes[n]
            if plain[n]:
                continue  # computed from full values: nothing expanded
            if node.kind == "window":
                expanded = plan.starts[n] * node.stride - node.pad_left
                width = _input_width(node, widths[n])
            elif node.kind == "crop":
                expanded, width = plan.starts[n] + node.offset, widths[n]
            elif node.kind == "add":
                expanded, width = plan.starts[n], widths[n]
            else:
                continue  # pointwise: the same window
            for i in node.inputs:
                if node.kind == "add" and full[i]:
                    continue
                o = plan.starts[i] - expanded
                low, high = int(o.min()), int(o.max())
                self.offsets[n, i] = low, high
                margin_left, margin_right = max(0, -low), max(0, high + widths[i] - width)
                before[i] = max(before[i], margin_left - int(expanded.min()))
                after[i] = max(
                    after[i], int(expanded.max()) + width + margin_right - nodes[i].length
                )
        for c in self.cut:
            self.offsets[("cut", c), c] = int(plan.starts[c].min()), int(plan.starts[c].max())
        self.padding = {i: (max(0, before[i]), max(0, after[i])) for i in self.kept}
        self._starts = [backend.asarray(plan.starts[n], "int64") for n in range(len(nodes))]
        self._mutants = backend.compile(self._mutant_outputs)
        self._reference = backend.compile(self._reference_values)

    # ------------------------------------------------------------------ reference
    def reference(self, x: Tensor) -> list[Tensor]:
        """Padded values of the kept nodes for a chunk of sequences x (n, ...), then the raw
        model output as the last entry."""
        return list(self._reference(x))

    def _window_input(self, node: Any, value: Tensor, axis: int) -> Tensor:
        """A window node's full input: ``value`` zero-padded as the node pads it."""
        right = _input_width(node, node.length) - node.pad_left - value.shape[axis]
        return self.backend.pad_positions(value, node.pad_left, right, axis)

    def _reference_values(self, x: Tensor) -> list[Tensor]:
        be, nodes = self.backend, self.nodes
        values: dict[int, Tensor] = {0: x}
        for n in self.plan.order:
            node = nodes[n]
            first = node.inputs[0]
            axis = nodes[first].length_axis
            if node.kind == "pointwise":
                values[n] = node.apply(values[first])  # type: ignore[misc]
            elif node.kind == "add":
                values[n] = node.apply(*[values[i] for i in node.inputs])  # type: ignore[misc]
            elif node.kind == "window":
                values[n] = node.apply(self._window_input(node, values[first], axis))  # type: ignore[misc]
            else:  # crop
                right = nodes[first].length - node.offset - node.length
                values[n] = be.pad_positions(values[first], -node.offset, -right, axis)
        kept = []
        for n in self.kept:
            left, right = self.padding[n]
            kept.append(be.pad_positions(values[n], left, right, nodes[n].length_axis))
        return [*kept, self.plan.graph.tail(*[values[c] for c in self.cut])]

    # ------------------------------------------------------------------ mutants
    def mutant_outputs(
        self, kept: list[Tensor], seq: Tensor, position: Tensor, base: Tensor
    ) -> Any:
        """Raw model outputs of the mutants (``seq`` indexes the kept values' axis 0)."""
        return self._mutants(kept, seq, position, base)

    def _mutant_outputs(
        self, kept: list[Tensor], seq: Tensor, position: Tensor, base: Tensor
    ) -> Any:
        be, nodes, widths, full = self.backend, self.nodes, self.plan.widths, self.full
        reference = dict(zip(self.kept, kept, strict=True))
        new = be.one_hot(base, 4)  # (B, 4)
        shape = (-1, 1, 4) if nodes[0].length_axis == 1 else (-1, 4, 1)
        values: dict[int, Tensor] = {0: be.reshape(new, shape)}
        starts: dict[int, Tensor] = {0: position}

        def expand(n: Any, i: int, start: Tensor, width: int) -> Tensor:
            """Input i of node n: its mutant values at positions start + (0 .. width - 1)."""
            left = self.padding[i][0]
            return splice(
                be,
                reference[i],
                seq,
                start + left,
                width,
                values[i],
                starts[i] + left,
                nodes[i].length_axis,
                self.offsets[n, i],
            )

        for n in self.plan.order:
            node = nodes[n]
            first = node.inputs[0]
            start = be.take(self._starts[n], position)
            starts[n] = start
            if self.plain[n]:  # a plain forward step on full values
                axis = nodes[first].length_axis
                if node.kind == "window":
                    values[n] = node.apply(self._window_input(node, values[first], axis))  # type: ignore[misc]
                else:
                    values[n] = node.apply(*[values[i] for i in node.inputs])  # type: ignore[misc]
            elif node.kind == "pointwise":
                values[n] = node.apply(values[first])  # type: ignore[misc]
            elif node.kind == "crop":
                values[n] = expand(n, first, start + node.offset, widths[n])
            elif node.kind == "window":
                width = _input_width(node, widths[n])
                inp = expand(n, first, start * node.stride - node.pad_left, width)
                values[n] = node.apply(inp)  # type: ignore[misc]
            else:  # add
                parts = [
                    values[i] if full[i] else expand(n, i, start, widths[n]) for i in node.inputs
                ]
                values[n] = node.apply(*parts)  # type: ignore[misc]
        cut_values = [
            values[c] if full[c] else expand(("cut", c), c, position * 0, nodes[c].length)
            for c in self.cut
        ]
        return self.plan.graph.tail(*cut_values)
