"""Fast ISM's forward passes: reference values once per sequence, windows per mutant.

The plan (``plan.py``) says which positions of each layer a mutation can change; the layout
(``layout.py``) what the mutant pass builds to recompute them. ``FastForward`` computes every
kept layer's reference values once per chunk of sequences, and for each batch of mutants only
their windows: a layer's input is its reference context with the mutant window of the layer
below written into it (``splice``), or, for a linear layer that pays for it, its output is its
reference values plus a transposed convolution of its input's change. Reference values that are
only added or subtracted (a change, the reference run of a residual sum) are read where they are
kept, never copied per mutant (``add_windows``, ``add_splice``). The rest of the model
(``tail``) then runs on full values, or, where the prefix ends in a sum, mean or maximum over
positions, on that reduction completed from reference tables outside the windows. Written once
for every framework, over the backend's ``WindowedForward`` primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...backends import WindowedForward
from ...backends.local_graph import LocalNode
from .layout import Layout, fill_key
from .plan import COST_BATCH, FastPlan, input_width

Tensor = Any


def splice(
    backend: WindowedForward,
    reference: Tensor,
    seq: Tensor,
    starts: Tensor,
    width: int,
    window: Tensor,
    at: Tensor,
    axis: int,
    offsets: tuple[int, int],
) -> Tensor:
    """Mutants' values over wider windows, as (B, ...): row ``seq[i]`` of ``reference``
    (N, a, b) at positions ``starts[i] + j`` (``j < width``) along ``axis`` (1 or 2),
    overwritten by ``window`` (B, ...) from position ``starts[i] + at[i]`` on, where they
    overlap.

    ``at`` lies within ``offsets`` (low, high); where every window sits at the same offset,
    it is written there for all mutants at once.
    """
    low, high = offsets
    run = backend.gather_windows(reference, seq, starts, width, axis)
    if low == high:
        n_window = int(window.shape[axis])
        cut_left, cut_right = max(0, -low), max(0, low + n_window - width)
        if cut_left or cut_right:
            window = backend.pad_positions(window, -cut_left, -cut_right, axis)
        return backend.overwrite_windows(run, window, max(0, low), axis)
    return backend.overwrite_windows(run, window, at, axis)


def fast_forward(backend: WindowedForward, plan: FastPlan) -> FastForward:
    """The plan's ``FastForward``, made on first use (its compiled functions then stay)."""
    if plan.forward is None:
        plan.forward = FastForward(backend, plan)
    return plan.forward


class FastForward:
    """Reference values per sequence and windowed forward passes per mutant, on the device.

    Reference values are kept padded along their positions with each padding value a later
    layer reads, as far as any window reaches past either end, so every context is a plain
    slice of them. Nodes whose windows span all their positions (and whose inputs' do too)
    are computed as in a normal forward pass. The reference pass returns, in this order: the
    padded values (``kept``), one table per reduction of a window (``tables``), the values of
    cut nodes that never change (``constants``), and the raw model output.
    """

    def __init__(self, backend: Any, plan: FastPlan) -> None:
        self.backend, self.plan = backend, plan
        self.nodes = plan.graph.nodes
        self.cut = plan.graph.cut
        self.layout = layout = Layout(plan)
        self.expansions, self.kept = layout.expansions, layout.kept
        self.tables, self.sums, self.constants = layout.tables, layout.sums, layout.constants
        self.in_place, self.bytes_per_row = layout.in_place, layout.bytes_per_row
        self._rows = layout.rows
        self._table = backend.asarray(layout.table, "int64")
        self._spare: dict[tuple[Any, int], Tensor] = {}  # see ``_plus_reference``
        self._held: _MutantState | None = None  # the last pass's tensors, see ``_mutant_outputs``
        self._held_chunk: _MutantState | None = None  # ... and the last chunk's, see ``_run``
        self._steps = [n for n in plan.order if plan.changes[n] and n not in plan.skipped]
        self._mutants = backend.compile(self._mutant_outputs)
        self._reference = backend.compile(self._reference_values)

    @property
    def n_kept(self) -> int:
        """Tensors the reference pass returns before the raw output."""
        return self.layout.n_kept

    # ------------------------------------------------------------------ reference
    def reference(self, x: Tensor) -> list[Tensor]:
        """The reference values a chunk of sequences x (n, ...) needs (``n_kept`` tensors,
        sequences on axis 0), then the raw model output as the last entry."""
        return list(self._reference(x))

    def _window_input(self, node: LocalNode, value: Tensor, axis: int) -> Tensor:
        """A window node's full input: ``value`` padded as the node pads it."""
        right = input_width(node, node.length) - node.pad_left - value.shape[axis]
        return self.backend.pad_positions(value, node.pad_left, right, axis, node.fill)

    def _reference_values(self, x: Tensor) -> list[Tensor]:
        be, nodes = self.backend, self.nodes
        values: dict[int, Tensor] = {0: x}
        for n in self.plan.order:
            values[n] = self._full_value(n, values, x)
        out = []
        for (i, fill), (left, right) in self.kept.items():
            out.append(be.pad_positions(values[i], left, right, nodes[i].length_axis, float(fill)))
        for c, j, offset in self.tables:
            value = self._cropped(values[j], j, offset, nodes[c].length)
            out.append(be.reduce_tables(value, nodes[c].how, nodes[j].length_axis))
        for c, j, offset in self.sums:
            value = self._cropped(values[j], j, offset, nodes[c].length)
            out.append(
                be.reduce_positions(value, None, nodes[c].length, "sum", nodes[j].length_axis)
            )
        out.extend(values[c] for c in self.constants)
        return [*out, self.plan.graph.tail(*[values[c] for c in self.cut])]

    def _cropped(self, value: Tensor, j: int, offset: int, length: int) -> Tensor:
        """Positions ``offset`` to ``offset + length`` of node j's full values."""
        right = self.nodes[j].length - offset - length
        return self.backend.pad_positions(value, -offset, -right, self.nodes[j].length_axis)

    def _full_value(self, n: int, values: dict[int, Tensor], x: Tensor) -> Tensor:
        """Node n on full values (the reference pass, and plain nodes of the mutant pass); a
        pointwise node also on a window."""
        be, node = self.backend, self.nodes[n]
        first = node.inputs[0] if node.inputs else 0
        axis = self.nodes[first].length_axis
        if node.kind == "fixed":
            return node.apply(x)  # type: ignore[misc]
        if node.kind == "pointwise":
            return node.apply(values[first])  # type: ignore[misc]
        if node.kind == "merge":
            return node.apply(*[values[i] for i in node.inputs])  # type: ignore[misc]
        if node.kind == "window":
            return node.apply(self._window_input(node, values[first], axis))  # type: ignore[misc]
        if node.kind == "reduce":
            total = be.reduce_positions(values[first], None, node.length, node.how, axis)
            return node.apply(total)  # type: ignore[misc]
        right = self.nodes[first].length - node.offset - node.length  # crop
        return be.pad_positions(values[first], -node.offset, -right, axis)

    # ------------------------------------------------------------------ mutants
    def mutant_outputs(
        self,
        kept: list[Tensor],
        seq: Tensor,
        position: Tensor,
        base: Tensor,
        finish: Callable[[Any], Tensor],
    ) -> Tensor:
        """``finish`` (raw model output -> (B, K) tensor) of the mutants' outputs (``seq``
        indexes the kept values' axis 0). Each node runs on as many of the mutants at once as
        keep its largest tensor under the backend's ``pass_bytes()``: narrow layers on the
        whole batch, wide ones on chunks of it (``_run``)."""
        return finish(self._mutants(kept, seq, position, base))

    def release(self) -> None:
        """Free the tensors kept from the last pass for the next one (at the end of a job)."""
        self._held = self._held_chunk = None
        self._spare.clear()

    def rows_per_pass(self, batch: int = COST_BATCH) -> int:
        """Mutants per chunk of the widest node in a batch of ``batch``: as few chunks as the
        backend's ``pass_bytes`` limit allows, of equal size (a batch of 32 under a limit of
        31 rows runs as two chunks of 16, not 31 and 1)."""
        return _chunk_rows(batch, self.backend.pass_bytes(), self.bytes_per_row)

    def _mutant_outputs(
        self, kept: list[Tensor], seq: Tensor, position: Tensor, base: Tensor
    ) -> Any:
        be, nodes, plan = self.backend, self.nodes, self.plan
        n_padded, n_tables = len(self.kept), len(self.tables) + len(self.sums)
        state = _MutantState(
            reference=dict(zip(self.kept, kept[:n_padded], strict=True)),
            tables=dict(
                zip(self.tables + self.sums, kept[n_padded : n_padded + n_tables], strict=True)
            ),
            seq=seq,
            position=position,
        )
        shape = (-1, 1, 4) if nodes[0].length_axis == 1 else (-1, 4, 1)
        state.values[0] = be.reshape(be.one_hot(base, 4), shape)
        state.starts[0] = position
        state.rows = be.take(self._table, position, axis=1)
        state.constants = dict(zip(self.constants, kept[n_padded + n_tables :], strict=True))
        cut_values = self._run(state, 0)
        # The previous pass's tensors are freed only now, after this pass has made its own:
        # the C allocator then reuses their memory for the next pass instead of handing the
        # top of its heap back to the operating system and faulting it in again (BPNet-like
        # model, L=1000: 0.58 ms per mutant instead of 1.4 ms, with 15 mutants per pass).
        self._held = state
        return plan.graph.tail(*cut_values)

    def _run(self, state: _MutantState, first: int) -> list[Tensor]:
        """Nodes ``self._steps[first:]`` for the mutants of ``state``, then the values the
        tail reads. From the first node whose largest tensor would pass the backend's
        ``pass_bytes()`` on, the mutants run in equal chunks (which split again at a wider
        node): the narrow layers cost a few framework calls per batch, the wide ones work on
        tensors that stay in the cache."""
        limit = self.backend.pass_bytes()
        for k in range(first, len(self._steps)):
            n = self._steps[k]
            if limit is not None:
                rows = int(state.position.shape[0])
                size = _chunk_rows(rows, limit, self.layout.node_bytes[n])
                if size < rows:
                    return self._in_chunks(state, k, rows, size)
            self._mutant_node(n, state)
        return [
            self.backend.take(state.constants[c], state.seq)
            if c in state.constants
            else self._cut_value(c, state)
            for c in self.cut
        ]

    def _in_chunks(self, state: _MutantState, first: int, rows: int, size: int) -> list[Tensor]:
        parts = []
        for a in range(0, rows, size):
            chunk = state.rows_of(a, min(rows, a + size))
            parts.append(self._run(chunk, first))
            self._held_chunk = chunk  # the previous chunk's tensors go only now (see above)
        return [self.backend.concat(list(values)) for values in zip(*parts, strict=True)]

    def _expanded(self, key: tuple[Any, int], state: _MutantState) -> Tensor:
        """Input ``key[1]`` of consumer ``key[0]`` over the consumer's input range."""
        if key in state.built:
            return state.built[key]
        be, e = self.backend, self.expansions[key]
        axis = self.nodes[e.i].length_axis
        if e.source is not None:
            host = self.expansions[e.source]
            whole = self._expanded(e.source, state)
            value = be.pad_positions(whole, -e.shift, -(host.width - e.shift - e.width), axis)
        else:
            reference, begin = self._reference_run(key, state)
            if not self.plan.changes[e.i] or e.reference_only:
                value = be.gather_windows(reference, state.seq, begin, e.width, axis)
            else:
                window, starts = state.values[e.i], state.starts[e.i]
                if e.mask:
                    window = be.fill_outside(window, starts, self.nodes[e.i].length, e.fill, axis)
                    state.held.append(window)
                low, high = e.offsets
                right = e.width - low - self.plan.widths[e.i]
                if low == high and low <= 0 and right <= 0:  # the window covers the range
                    value = be.pad_positions(window, low, right, axis)
                    if not e.mask:
                        state.views.add(key)
                else:
                    at = state.rows[self._rows["offset", key]]
                    value = splice(
                        be, reference, state.seq, begin, e.width, window, at, axis, e.offsets
                    )
        state.built[key] = value
        return value

    def _reference_run(self, key: tuple[Any, int], state: _MutantState) -> tuple[Tensor, Tensor]:
        """The kept reference values expansion ``key`` reads, and where each mutant's range
        starts in them (B,)."""
        e = self.expansions[key]
        return state.reference[e.i, fill_key(e.fill)], state.rows[self._rows["begin", key]]

    def _plus_reference(
        self,
        key: tuple[Any, int],
        x: Tensor,
        state: _MutantState,
        alpha: float = 1.0,
        in_place: bool = False,
    ) -> Tensor:
        """``x`` plus ``alpha`` times the reference values of expansion ``key`` (of node
        ``key[1]``, over ``x``'s positions), read where they are kept; in place, or into the
        tensor the previous pass made here (no new memory per pass)."""
        e = self.expansions[key]
        reference, begin = self._reference_run(key, state)
        axis = self.nodes[e.i].length_axis
        be = self.backend
        spare = be.writes_in_place and not in_place
        out = x if in_place else self._spare.get(key)
        result = be.add_windows(x, reference, state.seq, begin, axis, alpha, out)
        if spare and (out is None or result.shape[0] > out.shape[0]):
            self._spare[key] = result
        return result

    def _mutant_node(self, n: int, state: _MutantState) -> None:
        be, plan, node = self.backend, self.plan, self.nodes[n]
        values = state.values
        if node.kind == "reduce":
            parts = [
                self._reduced(n, j, offset, state)
                for j, offset in plan.terms.get(n, [(node.inputs[0], 0)])
            ]
            total = parts[0]
            for part in parts[1:]:
                total = total + part
            values[n] = node.apply(total)  # type: ignore[misc]
            return
        if not plan.full[n]:
            state.starts[n] = state.rows[self._rows["start", n]]
        if node.kind == "crop" and not plan.full[n]:
            values[n] = values[node.inputs[0]]
            return
        if plan.delta[n]:
            (i,) = node.inputs
            # node i's change over its window, zero at virtual positions
            change = self._plus_reference(("reference", i), values[i], state, alpha=-1.0)
            if self.layout.virtual(i):
                change = be.fill_outside(
                    change,
                    state.starts[i],
                    self.nodes[i].length,
                    0.0,
                    self.nodes[i].length_axis,
                    in_place=True,
                )
            state.held.append(change)
            output = node.transposed(change)  # type: ignore[misc]
            values[n] = self._plus_reference(("reference", n), output, state, in_place=True)
            state.owned.add(n)
            return
        if self._added_splice(n, state):
            return
        if self.layout.plain(n) and node.kind in ("window", "crop"):
            inputs = {i: values[i] for i in node.inputs}
            values[n] = self._full_value(n, inputs, None)
            if node.fresh:
                state.owned.add(n)
            return
        direct = node.kind == "pointwise" or self.layout.plain(n)
        parts, views = [], []
        for i in node.inputs:
            if plan.full[i] or (direct and plan.changes[i]):
                parts.append(values[i])
                views.append(True)
            else:
                parts.append(self._expanded((n, i), state))
                views.append((n, i) in state.views)
        if node.kind == "crop":  # a window onto the whole cropped range
            values[n] = parts[0]
        elif (
            n in self.in_place
            and node.inputs[self.in_place[n]] in state.owned
            and views[self.in_place[n]]
        ):
            if self.in_place[n] == 1:  # a merge that commutes: overwrite the second input
                parts = parts[::-1]
            values[n] = node.in_place(*parts)  # type: ignore[misc]
            state.owned.add(n)
        else:
            values[n] = node.apply(*parts)  # type: ignore[misc]
            if node.fresh:
                state.owned.add(n)

    def _added_splice(self, n: int, state: _MutantState) -> bool:
        """Node n, a sum of two inputs, computed without building the one that is a splice:
        when the other covers n's window and may be overwritten, the splice's reference run
        and window are added to it where they lie (``add_splice``). False where this does
        not apply (n is then computed as any node)."""
        plan, node = self.plan, self.nodes[n]
        if node.kind != "merge" or node.how != "sum" or len(node.inputs) != 2:
            return False
        if n not in self.in_place or any(plan.full[i] for i in node.inputs):
            return False
        at = self.in_place[n]
        target, other = node.inputs[at], node.inputs[1 - at]
        key = (n, other)
        e = self.expansions[key]
        low, high = e.offsets
        width = plan.widths[other]
        splice_at_one_offset = (
            plan.changes[other]
            and e.source is None
            and not e.mask
            and key not in state.built
            and low == high
            and 0 <= low
            and low + width <= e.width
        )
        if target not in state.owned or not splice_at_one_offset:
            return False
        value = self._expanded((n, target), state)
        if (n, target) not in state.views:
            return False
        reference, begin = self._reference_run(key, state)
        axis = self.nodes[other].length_axis
        state.values[n] = self.backend.add_splice(
            value, reference, state.seq, begin, state.values[other], low, axis
        )
        state.owned.add(n)
        return True

    def _reduced(self, n: int, j: int, offset: int, state: _MutantState) -> Tensor:
        """Reduction n of node j's mutant values over its positions ``offset`` on."""
        be, plan, node = self.backend, self.plan, self.nodes[n]
        axis = self.nodes[j].length_axis
        if not plan.changes[j]:
            return be.take(state.tables[n, j, offset], state.seq)
        if plan.full[j]:
            value = self._cropped(state.values[j], j, offset, node.length)
            return be.reduce_positions(value, None, node.length, node.how, axis)
        starts = state.starts[j] - offset
        inside = be.reduce_positions(state.values[j], starts, node.length, node.how, axis)
        table = state.tables[n, j, offset]
        return be.reduce_complement(table, state.seq, starts, plan.widths[j], inside, node.how)

    def _cut_value(self, c: int, state: _MutantState) -> Tensor:
        if self.nodes[c].kind == "reduce" or self.plan.full[c]:
            return state.values[c]
        return self._expanded(("cut", c), state)


@dataclass
class _MutantState:
    """What the mutant pass has computed so far in one batch."""

    reference: dict[tuple[int, Any], Tensor]
    tables: dict[tuple[int, int, int], Tensor]
    seq: Tensor
    position: Tensor
    values: dict[int, Tensor] = field(default_factory=dict)
    starts: dict[int, Tensor] = field(default_factory=dict)
    built: dict[tuple[Any, int], Tensor] = field(default_factory=dict)
    views: set[tuple[Any, int]] = field(default_factory=set)  # expansions that view a window
    owned: set[int] = field(default_factory=set)  # nodes whose values no other tensor shares
    held: list[Tensor] = field(default_factory=list)  # other tensors kept until the next pass
    rows: Tensor = None  # the position table's columns of this batch's mutations
    constants: dict[int, Tensor] = field(default_factory=dict)  # cut nodes that never change

    def rows_of(self, a: int, b: int) -> _MutantState:
        """The state of mutants ``a:b`` (views of this one's tensors)."""
        return _MutantState(
            reference=self.reference,
            tables=self.tables,
            seq=self.seq[a:b],
            position=self.position[a:b],
            values={n: v[a:b] for n, v in self.values.items()},
            starts={n: s[a:b] for n, s in self.starts.items()},
            built={k: v[a:b] for k, v in self.built.items()},
            views=set(self.views),
            owned=set(self.owned),
            rows=self.rows[:, a:b],
            constants=self.constants,
        )


def _chunk_rows(rows: int, limit: int | None, bytes_per_row: int) -> int:
    """Rows per chunk when ``rows`` mutants run in as few equal chunks as keep a tensor of
    ``bytes_per_row`` per mutant under ``limit`` bytes (None: one chunk)."""
    if limit is None:
        return rows
    most = max(1, min(rows, limit // bytes_per_row))
    chunks = -(-rows // most)
    return -(-rows // chunks)
