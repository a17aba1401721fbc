"""Fast ISM's window arithmetic: which positions of each layer a single-base change can
change, and what each path costs.

A substitution at position p changes a convolution's output only within its receptive field
of p, a pointwise layer's output only where its input changed, and so on up to the first layer
whose output at any position may depend on every input position. ``plan_windows`` works out,
for every node of a model's local prefix (``backends.local_graph``) and every mutated position,
the window of positions that can differ. Windows have one width per node and move with the
mutation without being clipped at the ends of the sequence: a window that reaches past an end
holds "virtual" positions there, so one node's window sits at the same offset inside the next
node's input for every mutant. A node whose window would be much wider than the node runs on
full values instead.

The plan also decides, per node, how the fast path computes it (a convolution over its window,
or its reference values plus a transposed convolution of its input's change), which sums over
positions become sums of their terms, and predicts the cost per mutant of the fast and exact
paths (``fast="auto"`` compares them). Written once for every framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...backends.local_graph import GraphUnsupported, LocalGraph, LocalNode

#: A node whose window would be this many times wider than the node is computed over all its
#: positions instead (windows may be somewhat wider than the node: they move with the mutation
#: and hold virtual positions past its ends).
FULL_WIDTH = 1.5

#: Cost model (``predicted_costs``), in multiply-adds, fitted to the per-mutant CPU times of
#: both paths on the benchmark models (one thread; ``benchmarks/bench_fast_ism.py``): a pass
#: over one tensor element (read, written or copied) costs as much as this many multiply-adds,
ELEMENT_COST = 11.0
#: ... one framework call (a layer, a gather, a join) as many as this, per pass over a batch
#: (so per mutant: divided by the mutants of a pass),
CALL_COST = 1.5e6
#: ... and every mutant as many as this on either path (building its row, scoring it).
MUTANT_COST = 1.1e6
#: Mutants per pass assumed for the exact path (and for the fast path where one pass runs a
#: whole batch).
COST_BATCH = 64


@dataclass
class FastPlan:
    """Window arithmetic of one model for one input length (see ``plan_windows``)."""

    graph: LocalGraph
    order: list[int]  # nodes computed for a mutant, topological, the input excluded
    starts: np.ndarray  # (n_nodes, L) int64: window start of node n for a mutation at p
    widths: list[int]  # window width of node n (its length where ``full``)
    full: list[bool]  # node n can change at every position: computed on full values
    changes: list[bool]  # node n can change at all (False: fixed, or computed from fixed)
    delta: list[bool] = field(default_factory=list)  # node n adds its output change to its
    # reference values (a transposed convolution of its input's change; ``_delta_pays``)
    terms: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # a sum over the
    # positions of a reduction's input, as sums over nodes j from position ``offset`` on
    # (``_sum_terms``); the crops and sums between are not computed for a mutant
    skipped: set[int] = field(default_factory=set)
    costs: tuple[float, float] = (0.0, 0.0)  # predicted (fast, exact) cost per mutant
    forward: Any = None  # its FastForward, built once (compiled functions are traced once)

    @property
    def cost_ratio(self) -> float:
        """Predicted time of the fast path over the exact path, per mutant."""
        fast, exact = self.costs
        return fast / exact if exact > 0 else 1.0


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -((-a) // b)


def _reach(node: LocalNode) -> int:
    return (node.kernel - 1) * node.dilation


def input_width(node: LocalNode, width: int) -> int:
    """Input positions a window node reads to produce ``width`` outputs."""
    return (width - 1) * node.stride + _reach(node) + 1


def _needed(graph: LocalGraph) -> list[int]:
    nodes = graph.nodes
    needed: set[int] = set()
    stack = list(graph.cut)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(nodes[n].inputs)
    return [n for n in range(1, len(nodes)) if n in needed]


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
        can only change node n at positions ``starts[n, p] : starts[n, p] + widths[n]`` (which
        may reach past either end of the node), or anywhere in a ``full`` node.
    """
    nodes = graph.nodes
    order = _needed(graph)
    p = np.arange(length, dtype=np.int64)
    starts = np.zeros((len(nodes), length), np.int64)
    widths = [1] * len(nodes)
    full = [False] * len(nodes)
    changes = [True] + [False] * (len(nodes) - 1)
    starts[0] = p
    for n in order:
        node = nodes[n]
        moving = [i for i in node.inputs if changes[i]]
        if node.kind == "fixed" or not moving:
            widths[n] = 0
            continue
        changes[n] = True
        if node.kind == "reduce":
            continue
        if any(full[i] for i in moving):
            full[n] = True
        elif node.kind in ("pointwise", "crop"):
            (i,) = moving
            starts[n] = starts[i] - (node.offset if node.kind == "crop" else 0)
            widths[n] = widths[i]
        elif node.kind == "window":
            (i,) = moving
            s = _ceil_div(starts[i] + node.pad_left - _reach(node), node.stride)
            end = (starts[i] + widths[i] - 1 + node.pad_left) // node.stride + 1
            starts[n], widths[n] = s, int(np.max(end - s))
        elif node.kind == "merge":
            s = np.min([starts[i] for i in moving], axis=0)
            end = np.max([starts[i] + widths[i] for i in moving], axis=0)
            starts[n], widths[n] = s, int(np.max(end - s))
        else:
            raise GraphUnsupported(f"{node.name}: unknown node kind {node.kind!r}")
        if full[n] or widths[n] >= FULL_WIDTH * node.length:
            full[n], starts[n], widths[n] = True, 0, node.length
    plan = FastPlan(graph, order, starts, widths, full, changes)
    plan.delta = [_delta_pays(plan, n) for n in range(len(nodes))]
    _sum_terms(plan)
    plan.costs = predicted_costs(plan)
    return plan


def _readers(graph: LocalGraph, order: list[int]) -> dict[int, list[Any]]:
    readers: dict[int, list[Any]] = {}
    for n in order:
        for i in dict.fromkeys(graph.nodes[n].inputs):
            readers.setdefault(i, []).append(n)
    for c in graph.cut:
        readers.setdefault(c, []).append("cut")
    return readers


def _sum_terms(plan: FastPlan) -> None:
    """A sum (or mean) over the positions of a crop of a sum of nodes is the sum of the
    nodes' own sums over the cropped range: those are completed from reference tables like any
    reduction, and the crops and sums between (read by nothing else) are never built."""
    nodes = plan.graph.nodes
    readers = _readers(plan.graph, plan.order)
    for n in plan.order:
        node = nodes[n]
        if node.kind != "reduce" or node.how != "sum" or not plan.changes[n]:
            continue
        terms: list[tuple[int, int]] = []
        skipped: set[int] = set()
        stack = [(node.inputs[0], 0, n)]
        while stack:
            j, offset, reader = stack.pop()
            inner = nodes[j]
            alone = readers.get(j) == [reader] and not plan.full[j] and plan.changes[j]
            if alone and inner.kind == "crop":
                skipped.add(j)
                stack.append((inner.inputs[0], offset + inner.offset, j))
            elif alone and inner.kind == "merge" and inner.how == "sum":
                skipped.add(j)
                stack.extend((i, offset, j) for i in inner.inputs)
            else:
                terms.append((j, offset))
        if skipped:
            plan.terms[n] = terms
            plan.skipped |= skipped


def _delta_pays(plan: FastPlan, n: int) -> bool:
    """Whether node n is cheaper as its reference plus a transposed convolution of its input's
    change (over the input's window) than as a convolution over its own window (whose input
    is the reference context joined to the input's window)."""
    nodes, widths = plan.graph.nodes, plan.widths
    node = nodes[n]
    if node.kind != "window" or node.transposed is None or node.stride != 1:
        return False
    (i,) = node.inputs
    if plan.full[n] or plan.full[i] or not plan.changes[i]:
        return False
    c_in, c_out = nodes[i].channels, node.channels
    windowed = widths[n] * node.macs + ELEMENT_COST * c_in * (
        input_width(node, widths[n]) + 2 * widths[i]
    )
    delta = widths[i] * node.macs + ELEMENT_COST * (
        c_in * 4 * widths[i] + c_out * 2 * widths[n] + c_in * widths[n]
    )
    return delta < windowed


# ---------------------------------------------------------------------- cost model
@dataclass
class PathWork:
    """The work of one path per mutant: multiply-adds, tensor elements passed over (read,
    written or copied), and framework calls per pass over a batch."""

    macs: float = 0.0
    elements: float = 0.0
    calls: float = 0.0

    def add(self, macs: float = 0.0, elements: float = 0.0, calls: float = 0.0) -> None:
        self.macs += macs
        self.elements += elements
        self.calls += calls

    def cost(self, rows: float) -> float:
        """In multiply-adds, for passes of ``rows`` mutants."""
        return (
            self.macs + ELEMENT_COST * self.elements + CALL_COST * self.calls / rows + MUTANT_COST
        )


def _node_work(work: PathWork, node: LocalNode, positions: float, inputs: list[LocalNode]) -> None:
    reads = sum(i.channels for i in inputs) * positions
    work.add(positions * node.macs, reads + positions * node.channels, 1)


def path_work(plan: FastPlan) -> tuple[PathWork, PathWork]:
    """The work per mutant of the fast path and of the exact path.

    The exact path builds each mutant and runs every node over all its positions; the fast
    path runs the changing nodes over their windows, plus what a window costs to build (a
    gather of its reference context, the mutant window written into it, a mask where it may
    reach past an end), the reference windows of layers that add their change to them, the
    splices of the cut into full values. Both run the tail.
    """
    nodes, widths = plan.graph.nodes, plan.widths
    length = nodes[0].length
    exact = PathWork(plan.graph.tail_macs, 16.0 * length, 8)  # the mutant: 4 passes over it
    fast = PathWork(plan.graph.tail_macs, 0.0, 8)
    for node in nodes[1:]:
        inputs = [nodes[i] for i in node.inputs]
        positions = nodes[node.inputs[0]].length if node.kind == "reduce" else node.length
        _node_work(exact, node, positions, inputs)
    for n in plan.order:
        node = nodes[n]
        if not plan.changes[n] or n in plan.skipped or node.kind == "crop":
            continue
        if node.kind == "reduce":
            for j, _ in plan.terms.get(n, [(node.inputs[0], 0)]):
                fast.add(0, widths[j] * nodes[j].channels, 3)
            continue
        if plan.delta[n]:
            (i,) = node.inputs
            c_in = nodes[i].channels
            fast.add(
                widths[i] * node.macs,
                c_in * 3 * widths[i] + node.channels * 3 * widths[n],
                6,
            )
            continue
        _node_work(fast, node, widths[n], [nodes[i] for i in node.inputs])
        if node.kind in ("window", "merge") and not plan.full[n]:
            span = input_width(node, widths[n]) if node.kind == "window" else widths[n]
            for i in node.inputs:
                if not plan.full[i]:
                    fast.add(0, nodes[i].channels * (span + widths[i]), 4)
    for c in plan.graph.cut:
        if nodes[c].kind != "reduce" and not plan.full[c]:
            fast.add(0, 2 * nodes[c].length * nodes[c].channels, 4)
    return fast, exact


def predicted_costs(plan: FastPlan, rows_per_pass: float | None = None) -> tuple[float, float]:
    """Predicted cost per mutant of the fast path and of the exact path (in multiply-adds),
    for passes of ``rows_per_pass`` mutants on the fast path (default: ``COST_BATCH``, as
    the exact path)."""
    fast, exact = path_work(plan)
    return fast.cost(rows_per_pass or COST_BATCH), exact.cost(COST_BATCH)
