"""What fast ISM's mutant pass builds, worked out once per plan (``Layout``).

For every input a window or merge node reads, the range of that input it needs (an
"expansion": reference context with the input's window written into it, or the window itself
where it covers the range, or a slice of a wider expansion of the same input); the padding the
reference values are kept with (each padding value a window layer reads, as far as any range
reaches past either end); the tables that complete sums and maxima over positions; which nodes
may overwrite their input; and one table of everything looked up per mutated position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .plan import FastPlan, input_width


def fill_key(fill: float | None) -> Any:
    """Dict key of a padding value (NaN is not equal to itself); None (any value) reads 0."""
    if fill is None:
        return 0.0
    return "nan" if math.isnan(fill) else float(fill)


@dataclass
class Expansion:
    """Input ``i`` of a consumer over the consumer's input range: positions ``begin[p] + j``
    (j < ``width``) for a mutation at p."""

    i: int
    begin: np.ndarray  # (L,) int64
    width: int
    fill: float | None  # the padding value a window node reads; None: any (merges, the tail)
    offsets: tuple[int, int] = (0, 0)  # range of (window start of i) - begin
    margins: tuple[int, int] = (0, 0)  # how far the range reaches past either end of i
    mask: bool = False  # the window of i may hold virtual positions the consumer reads
    source: tuple[Any, int] | None = None  # the expansion of i that this one is a slice of
    shift: int = 0  # ... starting this far into it
    reference_only: bool = False  # the reference values over the range, nothing written


class Layout:
    """The expansions, kept reference values, tables and in-place choices of one plan."""

    def __init__(self, plan: FastPlan) -> None:
        self.plan = plan
        self.nodes = plan.graph.nodes
        self.cut = plan.graph.cut
        self.expansions: dict[tuple[Any, int], Expansion] = {}
        self._layout()
        self.kept: dict[tuple[int, Any], tuple[int, int]] = {}
        for e in self.expansions.values():
            if e.source is None:
                key = (e.i, fill_key(e.fill))
                old = self.kept.get(key, (0, 0))
                self.kept[key] = (max(old[0], e.margins[0]), max(old[1], e.margins[1]))
        # reductions of a window: one table per term (reduction, node, offset) whose node
        # changes in windows; terms whose node never changes: their reference sums
        self.tables: list[tuple[int, int, int]] = []
        self.sums: list[tuple[int, int, int]] = []
        for c in self.cut:
            if self.nodes[c].kind != "reduce" or not plan.changes[c]:
                continue
            for j, offset in plan.terms.get(c, [(self.nodes[c].inputs[0], 0)]):
                if not plan.changes[j]:
                    self.sums.append((c, j, offset))
                elif not plan.full[j]:
                    self.tables.append((c, j, offset))
        self.constants = [c for c in self.cut if not plan.changes[c]]
        self.in_place = self._in_place()
        self.node_bytes = self._node_bytes()
        self.bytes_per_row = self._bytes_per_row()
        self.rows, self.table = self._position_table()

    @property
    def n_kept(self) -> int:
        """Tensors the reference pass returns before the raw output."""
        return len(self.kept) + len(self.tables) + len(self.sums) + len(self.constants)

    def _in_place(self) -> dict[int, int]:
        """Pointwise and merge nodes that may overwrite an input (which one): nothing else reads
        it (no other node, not the tail), and (for a merge) it is not also its other input."""
        plan, nodes = self.plan, self.nodes
        readers: dict[int, list[Any]] = {}
        for n in plan.order:
            if plan.changes[n]:
                for i in dict.fromkeys(nodes[n].inputs):
                    readers.setdefault(i, []).append(n)
        for c in self.cut:
            readers.setdefault(c, []).append("cut")
        chosen: dict[int, int] = {}
        for n in plan.order:
            node = nodes[n]
            if node.in_place is None or node.kind not in ("pointwise", "merge"):
                continue
            candidates = [0, 1] if node.commutes and len(node.inputs) == 2 else [0]
            for at in candidates:
                i = node.inputs[at]
                if readers.get(i) == [n] and node.inputs.count(i) == 1:
                    chosen[n] = at
                    break
        return chosen

    def plain(self, n: int) -> bool:
        """Node n runs on full values: it and its changing inputs span all positions."""
        plan = self.plan
        return plan.full[n] and all(
            plan.full[i] or not plan.changes[i] for i in self.nodes[n].inputs
        )

    def virtual(self, i: int) -> bool:
        """Whether node i's window can reach past either end of the node."""
        plan = self.plan
        if plan.full[i] or not plan.changes[i]:
            return False
        s = plan.starts[i]
        return bool(s.min() < 0 or s.max() + plan.widths[i] > self.nodes[i].length)

    def _layout(self) -> None:
        """The expansions the mutant pass builds: every input of a window or merge node over
        the node's input range, every unchanging input of a plain node, every cut node that
        is not already full."""
        plan, nodes = self.plan, self.nodes
        zero = np.zeros(plan.starts.shape[1], np.int64)
        for n in plan.order:
            node = nodes[n]
            if not plan.changes[n] or node.kind in ("pointwise", "reduce", "fixed"):
                continue
            if n in plan.skipped:
                continue
            if node.kind == "crop" and not plan.full[n]:
                continue  # the input's window, read at shifted positions
            if self.plain(n):
                for i in node.inputs:
                    if not plan.changes[i]:
                        self._expand((n, i), i, zero, nodes[i].length, None)
                continue
            if plan.delta[n]:
                (i,) = node.inputs
                self._expand(("reference", i), i, plan.starts[i], plan.widths[i], 0.0)
                self._expand(("reference", n), n, plan.starts[n], plan.widths[n], 0.0)
                self.expansions["reference", i].reference_only = True
                self.expansions["reference", n].reference_only = True
                continue
            if node.kind == "window":
                begin = plan.starts[n] * node.stride - node.pad_left
                width, fill = input_width(node, plan.widths[n]), node.fill
            elif node.kind == "crop":
                begin, width, fill = zero + node.offset, node.length, None
            else:
                begin, width, fill = plan.starts[n], plan.widths[n], None
            for i in dict.fromkeys(node.inputs):
                if not plan.full[i]:
                    self._expand((n, i), i, begin, width, fill)
        for c in self.cut:
            if nodes[c].kind != "reduce" and plan.changes[c] and not plan.full[c]:
                self._expand(("cut", c), c, zero, nodes[c].length, None)
        self._share()

    def _expand(
        self, key: tuple[Any, int], i: int, begin: np.ndarray, width: int, fill: float | None
    ) -> None:
        plan = self.plan
        e = Expansion(i, begin, width, fill)
        if plan.changes[i]:
            o = plan.starts[i] - begin
            e.offsets = int(o.min()), int(o.max())
            e.mask = fill is not None and self.virtual(i)
        before = max(0, -int(begin.min()))
        after = max(0, int(begin.max()) + width - self.nodes[i].length)
        e.margins = (before, after)
        self.expansions[key] = e

    def _share(self) -> None:
        """An expansion that lies inside another one of the same input (at the same place for
        every mutant, and with the same padding or none needed) is a slice of it."""
        by_input: dict[int, list[tuple[Any, int]]] = {}
        for key, e in self.expansions.items():
            if self.plan.changes[e.i] and not e.reference_only:
                by_input.setdefault(e.i, []).append(key)
        for keys in by_input.values():
            keys.sort(key=lambda k: -self.expansions[k].width)
            for a, key in enumerate(keys):
                e = self.expansions[key]
                for other in keys[:a]:
                    host = self.expansions[other]
                    shifts = e.begin - host.begin  # e starts this far into host
                    shift = int(shifts[0])
                    fits = (shifts == shift).all() and 0 <= shift <= host.width - e.width
                    padding = e.fill is None or fill_key(e.fill) == fill_key(host.fill)
                    if host.source is None and fits and padding:
                        e.source, e.shift = other, shift
                        break

    def _position_table(self) -> tuple[dict[Any, int], np.ndarray]:
        """Everything the mutant pass looks up per mutated position, one row each (read for a
        batch with one gather): window starts, the padded starts of expansions, and the
        offsets of windows inside them."""
        plan = self.plan
        rows: dict[Any, np.ndarray] = {}
        for n in plan.order:
            if plan.changes[n] and not plan.full[n] and self.nodes[n].kind != "reduce":
                rows["start", n] = plan.starts[n]
        for key, e in self.expansions.items():
            if e.source is None:
                rows["begin", key] = e.begin + self.kept[e.i, fill_key(e.fill)][0]
                if self.plan.changes[e.i]:
                    rows["offset", key] = plan.starts[e.i] - e.begin
        names = list(rows)
        table = np.stack([rows[k] for k in names]) if names else np.zeros((1, plan.starts.shape[1]))
        return {k: r for r, k in enumerate(names)}, table.astype(np.int64)

    def _bytes_per_row(self) -> int:
        """Bytes of the largest intermediate tensor of the mutant pass, per mutant."""
        return max([*self.node_bytes.values(), 4])

    def _node_bytes(self) -> dict[int, int]:
        """Bytes per mutant of the largest tensor the mutant pass makes for node n: its
        values over its window, the ranges of its inputs it builds (a delta node: its input's
        change), the range of n the cut reads."""
        plan, nodes = self.plan, self.nodes
        sizes = {
            n: [plan.widths[n] * nodes[n].channels]
            for n in plan.order
            if plan.changes[n] and n not in plan.skipped
        }
        for key, e in self.expansions.items():
            consumer = e.i if key[0] in ("reference", "cut") else key[0]
            if consumer in sizes:
                sizes[consumer].append(e.width * nodes[e.i].channels)
        for n in sizes:
            if plan.delta[n]:
                (i,) = nodes[n].inputs
                sizes[n].append(plan.widths[i] * nodes[i].channels)
        return {n: 4 * max(s) for n, s in sizes.items()}
