"""The rescale-gradients capability of the torch backend (DeepLIFT, DeepSHAP).

Nonlinearities are found where they run, not where a module sits: a ``TorchFunctionMode``
sees every torch call the model (and the output function) makes while it runs, so a ReLU
module (which calls ``F.relu``), ``F.relu``, ``torch.relu`` and ``x.relu()`` are the same call
to it, inside models that ``torch.fx`` cannot trace (data-dependent Python, Keras 3 models on
the torch backend) as well. Nothing is attached to the model: the mode lives for one call.

A call runs two passes over one device batch:

1. the inputs (n rows) without autograd, recording the input and output of every call to an
   elementwise nonlinearity or a max (pooling or reduction), in call order;
2. the references (R rows) with autograd, where the k-th such call is replaced by an autograd
   function whose backward is the rule, read against the k-th record of pass 1 at the input
   row of each reference (``index``).

The gradient of the selected outputs with respect to the references is then the DeepLIFT
multiplier of every (reference, input) pair: the multipliers of both ends of a pair are equal
(the rules are symmetric), so only one end needs a backward pass.

``rescale_layers`` reads the model once (one forward pass on a single row) and refuses what the
rules cannot cover: a softmax on the way to the outputs, an in-place nonlinearity, a
nonlinearity that runs with autograd off (inside a custom ``autograd.Function``), TorchScript
(its operations are invisible to Python). Other input-dependent operations that are not linear
(layer normalisation, products of two activations, ...) are listed: they keep their gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._protocol import RESCALE_EPS, Head, OutOfDeviceMemory, RescaleReport, RescaleUnsupported

#: Elementwise functions of one varying tensor: the rescale rule.
_RESCALE = frozenset(
    """relu relu6 elu selu celu gelu silu mish softplus sigmoid tanh leaky_relu hardtanh
    hardsigmoid hardswish logsigmoid softsign tanhshrink softshrink hardshrink prelu rrelu
    threshold clamp clip clamp_min clamp_max exp exp2 expm1 log log1p log2 log10 sqrt rsqrt
    square abs reciprocal erf erfc sin cos pow""".split()
)
#: Max pooling and max reductions: DeepLIFT's max rule.
_MAX = frozenset(
    """max_pool1d max_pool2d max_pool3d max_pool1d_with_indices max_pool2d_with_indices
    max_pool3d_with_indices adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d amax
    max""".split()
)
_SOFTMAX = frozenset("softmax log_softmax softmin gumbel_softmax".split())
_SOFTMAX_FIX = (
    "DeepLIFT's rules do not cover a softmax: explain the logits instead, with a model that "
    "returns the values before the softmax (output_fn can pick or reduce them)."
)
#: Linear in every input-dependent argument (or the identity at inference).
_LINEAR = frozenset(
    """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc linear
    add sub rsub neg negative positive sum mean nansum cumsum avg_pool1d avg_pool2d avg_pool3d
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d batch_norm dropout dropout1d
    dropout2d dropout3d alpha_dropout feature_alpha_dropout pad constant_pad_nd cat concat
    concatenate stack hstack vstack reshape view view_as flatten unflatten squeeze unsqueeze
    transpose permute movedim moveaxis swapaxes swapdims t contiguous clone to float double
    half type type_as detach expand expand_as broadcast_to repeat repeat_interleave tile split
    split_with_sizes chunk tensor_split narrow select index_select getitem unbind flip fliplr
    roll gather take_along_dim diagonal interpolate upsample pixel_shuffle unfold fold get
    copy zero fill masked_fill where""".split()
)
#: Linear in one input-dependent operand: a product of two of them is not.
_PRODUCTS = frozenset(
    """mul multiply matmul mm bmm einsum dot outer tensordot addmm baddbmm addmv mv
    bilinear""".split()
)
_DIVISIONS = frozenset("div divide true_divide truediv".split())
#: Outputs carry no gradient (comparisons, indices, rounding): not reported themselves.
_NO_GRADIENT = frozenset(
    """gt ge lt le eq ne greater less greater_equal less_equal equal not_equal isnan isinf
    isfinite sign argmax argmin argsort round floor ceil trunc logical_and logical_or
    logical_not bool long int any all nonzero topk sort""".split()
)


# --------------------------------------------------------------------------- call names
@dataclass(frozen=True)
class _Call:
    """A torch call as the rules see it: its base name and whether it writes in place."""

    name: str
    in_place: bool
    reflected: bool  # ``__rtruediv__`` and friends: the tensor is the right operand


def _call(func: Any, kwargs: dict[str, Any]) -> _Call:
    raw = getattr(func, "__name__", None) or type(func).__name__
    in_place = bool(kwargs.get("inplace", False))
    reflected = False
    if raw.startswith("__") and raw.endswith("__"):
        name = raw[2:-2]
        if name[:1] == "i" and name[1:] in ("add", "sub", "mul", "truediv", "pow", "and", "or"):
            name, in_place = name[1:], True
        elif name[:1] == "r" and name[1:] in ("add", "sub", "mul", "truediv", "pow", "matmul"):
            name, reflected = name[1:], True
    else:
        name = raw.lstrip("_")
        if name.endswith("_"):
            name, in_place = name[:-1], True
    return _Call(name, in_place, reflected)


def _kind(call: _Call, args: Sequence[Any]) -> str:
    """The rule of a call: "rescale", "max", or "other" (left alone by the passes)."""
    if call.in_place or not args or not isinstance(args[0], torch.Tensor):
        return "other"
    if call.name in _RESCALE:
        if call.name == "pow" and isinstance(args[1] if len(args) > 1 else None, torch.Tensor):
            return "other"
        return "rescale"
    if call.name in _MAX:
        if call.name == "max" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return "other"  # torch.max(a, b): elementwise maximum of two tensors
        return "max"
    return "other"


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _values(out: Any) -> torch.Tensor:
    """The values of a max call (``torch.max(x, dim)`` and ``return_indices=True`` return
    (values, indices))."""
    return out if isinstance(out, torch.Tensor) else out[0]


# --------------------------------------------------------------------------- the rules
@dataclass
class _Record:
    """An elementwise nonlinearity or max of the inputs' pass: its input and output."""

    name: str
    z: torch.Tensor
    y: torch.Tensor
    returns_tuple: bool  # (values, indices) of a max
    indices: torch.Tensor | None = None  # where a max pooling's maxima are


#: Max pooling with flat indices of its maxima over the spatial axes, by name.
_WITH_INDICES: dict[str, Callable[..., Any]] = {
    "max_pool1d": F.max_pool1d_with_indices,
    "max_pool2d": F.max_pool2d_with_indices,
    "max_pool3d": F.max_pool3d_with_indices,
    "adaptive_max_pool1d": F.adaptive_max_pool1d_with_indices,
    "adaptive_max_pool2d": F.adaptive_max_pool2d_with_indices,
    "adaptive_max_pool3d": F.adaptive_max_pool3d_with_indices,
}
_WITH_INDICES |= {f"{name}_with_indices": fn for name, fn in list(_WITH_INDICES.items())}


def _pool(name: str, z: torch.Tensor, rest: tuple[Any, ...], kwargs: Any) -> Any:
    """(values, indices) of a max pooling called as ``name(z, *rest, **kwargs)``."""
    return _WITH_INDICES[name](z, *rest, **kwargs)


class _Pairs:
    """Which input row each reference row is compared with (``index``), as runs of rows: the
    engine lists a sequence's references together, so an input row is broadcast over its run
    instead of gathered into a copy. Also two scratch buffers per shape, reused by every
    layer's backward pass (fresh large tensors cost page faults on CPUs)."""

    def __init__(self, index: torch.Tensor, keep_multipliers: bool) -> None:
        self.index = index
        ids = index.tolist()
        self.runs: list[tuple[int, int, int]] = []
        for row, i in enumerate(ids):
            if self.runs and self.runs[-1][0] == i:
                self.runs[-1] = (i, self.runs[-1][1], row + 1)
            else:
                self.runs.append((i, row, row + 1))
        self.keep_multipliers = keep_multipliers  # K backward passes over one graph
        self._scratch: dict[tuple[Any, ...], list[torch.Tensor]] = {}

    def difference(self, a: torch.Tensor, a_x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = a - a_x[index]``."""
        if len(self.runs) * 4 > len(self.index):
            return torch.sub(a, a_x.index_select(0, self.index), out=out)
        for i, lo, hi in self.runs:
            torch.sub(a[lo:hi], a_x[i], out=out[lo:hi])
        return out

    def scratch(self, like: torch.Tensor) -> list[torch.Tensor]:
        key = (tuple(like.shape), like.dtype, like.device)
        if key not in self._scratch:
            self._scratch[key] = [torch.empty_like(like), torch.empty_like(like)]
        return self._scratch[key]


#: Functions whose secant needs no threshold: slopes 0 and 1 only, so f(z) - f(z_x) and
#: z - z_x round alike (only z == z_x needs the gradient).
_EXACT = frozenset("relu relu6 hardtanh clamp clip clamp_min clamp_max".split())


def _slopes(func: Callable[..., Any], z: torch.Tensor, rest: tuple[Any, ...], kwargs: Any) -> Any:
    """The gradient of the elementwise ``func`` at ``z``."""
    with torch.enable_grad():
        leaf = z.detach().requires_grad_(True)
        (slope,) = torch.autograd.grad(func(leaf, *rest, **kwargs).sum(), leaf)
    return slope


class _Rescale(torch.autograd.Function):
    """``func(z)`` forward; backward: the upstream gradient times the secant
    (f(z) - f(z_x)) / (z - z_x) against the input row of each reference (the gradient of f
    where the two differ by less than ``RESCALE_EPS``, or are equal for ``_EXACT``).

    The secant is computed in the backward pass, in place in reused buffers: on a CPU the
    elementwise passes over wide activations cost as much as a convolution's, so there are
    as few as possible (two differences, a division, the product with the gradient)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: torch.Tensor,
        record: _Record,
        pairs: _Pairs,
        func: Callable[..., Any],
        rest: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> torch.Tensor:
        y = func(z, *rest, **kwargs)
        ctx.save_for_backward(z, y)
        ctx.rule = (record, pairs, func, rest, kwargs)
        ctx.multiplier = None
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        multiplier = ctx.multiplier
        if multiplier is None:
            z, y = ctx.saved_tensors
            record, pairs, func, rest, kwargs = ctx.rule
            secant, dz = pairs.scratch(z)
            if pairs.keep_multipliers:
                secant = torch.empty_like(z)
            pairs.difference(z, record.z, dz)
            pairs.difference(y, record.y, secant)
            secant.div_(dz)
            if record.name in _EXACT:
                fix = torch.isnan(secant) if bool(torch.isnan(secant.sum())) else None
            else:
                small = dz.abs_() < RESCALE_EPS
                fix = small if bool(small.any()) else None
            if fix is not None:  # a few positions: the gradient of f there
                rows = fix.flatten(1).any(1).nonzero().flatten()
                slope = _slopes(func, z.index_select(0, rows), rest, kwargs)
                secant[rows] = torch.where(fix[rows], slope, secant[rows])
            multiplier = secant
            if pairs.keep_multipliers:
                ctx.multiplier = multiplier
        return grad * multiplier, None, None, None, None, None


class _PoolRule(torch.autograd.Function):
    """Max pooling (windows along the spatial axes) under DeepLIFT's max rule, from the
    indices of the maxima: per window, with y_x and y the input's and the reference's maxima,
    the upstream gradient times max(y_x - y, 0) / (z_x - z) goes to the input's maximum and
    times min(y_x - y, 0) / (z_x - z) to the reference's, z_x - z read at that position (the
    plain gradient to the input's maximum where z_x == z there, nothing to the reference's).
    Everything but the final scatter works on pooled-size tensors."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: torch.Tensor,
        record: _Record,
        pairs: _Pairs,
        func: Callable[..., Any],
        rest: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> torch.Tensor:
        y, indices = _pool(record.name, z, rest, kwargs)
        ctx.save_for_backward(z, y, indices)
        ctx.rule = (record, pairs)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        z, y, at_reference = (t.flatten(2) for t in ctx.saved_tensors)
        record, pairs = ctx.rule
        index = pairs.index
        z_x = record.z.flatten(2)
        at_input = record.indices.flatten(2).index_select(0, index)
        g = grad.reshape(*grad.shape[:2], -1)  # flatten has no batching rule (vmap)
        # e = y - y_x per window; in place from here on (pooled-size tensors). A 0 / 0 below
        # is a maximum where z_x == z: 1 (the plain gradient) for the input's, 0 for the
        # reference's.
        y_x = record.y.flatten(2)
        e = pairs.difference(y, y_x, torch.empty_like(y))
        at_input_z = z.gather(2, at_input)
        to_input = e.clamp_max(0.0).div_(pairs.difference(at_input_z, y_x, at_input_z))
        torch.nan_to_num_(to_input, nan=1.0)
        channels = torch.arange(z_x.shape[1], device=z.device)[:, None]
        flat = (index[:, None, None] * z_x.shape[1] + channels) * z_x.shape[2] + at_reference
        to_reference = e.clamp_min_(0.0).div_(y - z_x.reshape(-1).take(flat))
        torch.nan_to_num_(to_reference, nan=0.0)
        to_input, to_reference = to_input * g, to_reference * g
        routed = torch.zeros_like(z)
        try:
            routed.scatter_add_(2, at_input, to_input).scatter_add_(2, at_reference, to_reference)
        except RuntimeError:  # the gradient is batched over K targets (vmap): out of place
            routed = routed.scatter_add(2, at_input, to_input)
            routed = routed.scatter_add(2, at_reference, to_reference)
        return routed.reshape(ctx.saved_tensors[0].shape), None, None, None, None, None


class _MaxRule(torch.autograd.Function):
    """``func(z)`` forward (values of a max pooling or reduction); backward: DeepLIFT's max
    rule. With c_x = max(y_x - y, 0) and c_r = min(y_x - y, 0) per output, the upstream
    gradient times c_x is routed to the input's maxima and times c_r to the reference's, and
    the sum is divided by z_x - z; where z == z_x, the input's routing of the gradient."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: torch.Tensor,
        record: _Record,
        pairs: _Pairs,
        func: Callable[..., Any],
        rest: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> torch.Tensor:
        y = _values(func(z, *rest, **kwargs))
        index = pairs.index
        ctx.save_for_backward(
            z, record.z.index_select(0, index), y, record.y.index_select(0, index)
        )
        ctx.call = (func, rest, kwargs)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        z, z_x, y, y_x = ctx.saved_tensors
        func, rest, kwargs = ctx.call
        gap = y_x - y
        with torch.enable_grad():
            ref = z.detach().requires_grad_(True)
            inp = z_x.detach().requires_grad_(True)
            y_ref = _values(func(ref, *rest, **kwargs))
            y_inp = _values(func(inp, *rest, **kwargs))
            (to_input,) = torch.autograd.grad(
                y_inp, inp, grad * gap.clamp_min(0.0), retain_graph=True
            )
            (to_reference,) = torch.autograd.grad(y_ref, ref, grad * gap.clamp_max(0.0))
            dz = z_x - z  # the input's change, as the routed output changes
            unchanged = dz == 0
            if bool(unchanged.any()):
                (plain,) = torch.autograd.grad(y_inp, inp, grad)
                routed = torch.where(
                    unchanged, plain, (to_input + to_reference) / dz.masked_fill(unchanged, 1.0)
                )
            else:
                routed = (to_input + to_reference) / dz
        return routed, None, None, None, None, None


# --------------------------------------------------------------------------- the passes
class _RecordInputs(TorchFunctionMode):
    """Pass 1: every elementwise nonlinearity and max, in call order (copies, so that a later
    in-place operation of the model cannot change them)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[_Record] = []

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        call = _call(func, kwargs)
        if _kind(call, args) == "other":
            return func(*args, **kwargs)
        if call.name in _WITH_INDICES:
            values, indices = _pool(call.name, args[0], tuple(args[1:]), kwargs)
            out = func(*args, **kwargs)
            returns_tuple = not isinstance(out, torch.Tensor)
            self.records.append(_Record(call.name, args[0].clone(), values, returns_tuple, indices))
            return out
        out = func(*args, **kwargs)
        values = _values(out)
        self.records.append(_Record(call.name, args[0].clone(), values.clone(), values is not out))
        return out


class _ApplyRules(TorchFunctionMode):
    """Pass 2: the k-th elementwise nonlinearity or max of the references uses its rule
    against the k-th record of the inputs."""

    def __init__(self, records: list[_Record], pairs: _Pairs, n_rows: int) -> None:
        super().__init__()
        self.records, self.pairs, self.n_rows = records, pairs, n_rows
        self.count = 0

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        call = _call(func, kwargs)
        kind = _kind(call, args)
        if kind == "other":
            return func(*args, **kwargs)
        k = self.count
        self.count += 1
        if k >= len(self.records) or self.records[k].name != call.name:
            raise _different_calls(k, call.name, self.records)
        record = self.records[k]
        z = args[0]
        if not z.requires_grad:  # not on a path from the references (e.g. on parameters)
            return func(*args, **kwargs)
        if z.shape[0] != self.n_rows or z.shape[1:] != record.z.shape[1:]:
            raise RescaleUnsupported(
                f"a model whose {call.name} receives a tensor of shape {tuple(z.shape)} for "
                f"a batch of {self.n_rows} rows",
                "The rules pair rows on axis 0: apply nonlinearities before moving or merging "
                "the batch axis.",
            )
        rule: type[torch.autograd.Function] = _Rescale if kind == "rescale" else _MaxRule
        if call.name in _WITH_INDICES:
            rule = _PoolRule
        values = rule.apply(z, record, self.pairs, func, tuple(args[1:]), kwargs)
        if record.returns_tuple:  # (values, indices): the indices of a plain call
            with torch.no_grad():
                out = func(*args, **kwargs)
            return type(out)((values, *out[1:]))
        return values


def _different_calls(k: int, name: str, records: list[_Record]) -> RescaleUnsupported:
    expected = records[k].name if k < len(records) else "nothing more"
    return RescaleUnsupported(
        f"a model that makes different calls for the references than for the inputs "
        f"(nonlinearity {k + 1}: {name} instead of {expected})",
        "The rules pair each operation of a reference with the same operation of its input: "
        "remove control flow that depends on the values of the input.",
    )


# --------------------------------------------------------------------------- reading a model
@dataclass
class _Finding:
    """One input-dependent call: what it is for the rules, and the autograd node of its
    result (None where autograd was off), to keep only what the outputs are computed from."""

    kind: str  # "rescaled", "max_rule", "by_gradient", or "refused"
    label: str
    node: Any
    refusal: RescaleUnsupported | None = None


class _ReadModel(TorchFunctionMode):
    """One forward pass with the input requiring gradients: a tensor depends on the input if
    it requires gradients (parameters do not, inside the session) or was made from one that
    does (inside a custom autograd.Function, where nothing requires gradients)."""

    def __init__(self, where: Callable[[], str]) -> None:
        super().__init__()
        self.where = where
        self.findings: list[_Finding] = []
        self.n_calls = 0  # input-dependent calls seen
        self._made: dict[int, torch.Tensor] = {}  # id -> tensor (kept alive: ids stay unique)

    def _dependent(self, t: torch.Tensor) -> bool:
        return t.requires_grad or id(t) in self._made

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        dependent = [t for t in _tensors((args, kwargs)) if self._dependent(t)]
        if not dependent:
            return func(*args, **kwargs)
        call = _call(func, kwargs)
        grad_enabled = torch.is_grad_enabled()
        out = func(*args, **kwargs)
        self.n_calls += 1
        made = list(_tensors(out))
        for t in made:
            self._made[id(t)] = t
        values = [t for t in made if t.is_floating_point()]  # not shapes, masks or indices
        if values:
            finding = self._classify(call, args, dependent, grad_enabled)
            if finding is not None:
                finding.node = values[0].grad_fn if grad_enabled else None
                self.findings.append(finding)
        return out

    def _classify(
        self, call: _Call, args: Sequence[Any], dependent: list[torch.Tensor], grad_enabled: bool
    ) -> _Finding | None:
        name, where = call.name, self.where()
        label = f"{name} ({where})"
        kind = _kind(call, args) if args and self._dependent_first(args) else "other"
        nonlinear = kind != "other" or name not in _LINEAR | _PRODUCTS | _DIVISIONS
        if name in _SOFTMAX:
            return _refused(
                label,
                f"a model that applies {name} ({where}) on the way to its outputs",
                _SOFTMAX_FIX,
            )
        if call.in_place and nonlinear and name not in _NO_GRADIENT:
            return _refused(
                label,
                f"a model whose {label} works in place on an activation",
                "The rules need the input of every nonlinearity: use inplace=False (or "
                "x = f(x) instead of x.f_()).",
            )
        if kind != "other" and not grad_enabled:
            return _refused(
                label,
                f"a model whose {label} runs with autograd off (inside a custom "
                "torch.autograd.Function or a no_grad block), out of the rules' reach",
                "Write it with torch operations that the model calls directly.",
            )
        if kind == "rescale":
            return _Finding("rescaled", label, None)
        if kind == "max":
            return _Finding("max_rule", label, None)
        if name in _PRODUCTS and len(dependent) > 1:
            return _Finding("by_gradient", f"{name} of two input-dependent tensors ({where})", None)
        if name in _DIVISIONS and self._divides_by_dependent(call, args):
            return _Finding("by_gradient", f"division by an input-dependent tensor ({where})", None)
        if name == "where" and args and self._dependent(args[0]):
            return _Finding("by_gradient", f"where on an input-dependent condition ({where})", None)
        if name not in _LINEAR | _PRODUCTS | _DIVISIONS | _NO_GRADIENT:
            return _Finding("by_gradient", label, None)
        return None

    def _dependent_first(self, args: Sequence[Any]) -> bool:
        return isinstance(args[0], torch.Tensor) and self._dependent(args[0])

    def _divides_by_dependent(self, call: _Call, args: Sequence[Any]) -> bool:
        position = 0 if call.reflected else 1
        return (
            len(args) > position
            and isinstance(args[position], torch.Tensor)
            and self._dependent(args[position])
        )

    def report(self, out: torch.Tensor) -> RescaleReport:
        """What the outputs are computed from; raises the first refusal among it."""
        reachable: set[Any] = set()
        todo = [out.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or node in reachable:
                continue
            reachable.add(node)
            todo.extend(next_node for next_node, _ in node.next_functions)
        found: dict[str, list[str]] = {"rescaled": [], "max_rule": [], "by_gradient": []}
        for finding in self.findings:
            if finding.node is not None and finding.node not in reachable:
                continue  # a branch the outputs do not read
            if finding.refusal is not None:
                raise finding.refusal
            found[finding.kind].append(finding.label)
        return RescaleReport(
            tuple(found["rescaled"]),
            tuple(found["max_rule"]),
            tuple(dict.fromkeys(found["by_gradient"])),
        )


def _refused(label: str, received: str, fix: str) -> _Finding:
    return _Finding("refused", label, None, RescaleUnsupported(received, fix))


@contextmanager
def _module_names(model: Any) -> Iterator[Callable[[], str]]:
    """Hooks that keep the name of the running submodule (removed after)."""
    stack: list[str] = []
    handles = []
    if isinstance(model, torch.nn.Module):
        for name, module in model.named_modules():
            label = f"in layer {name!r}, {type(module).__name__}" if name else ""
            label = label or f"in {type(module).__name__}.forward"

            def push(m: Any, inputs: Any, label: str = label) -> None:
                stack.append(label)

            def pop(m: Any, inputs: Any, output: Any) -> None:
                if stack:
                    stack.pop()

            handles.append(module.register_forward_pre_hook(push))
            handles.append(module.register_forward_hook(pop))
    try:
        yield lambda: stack[-1] if stack else "in the model or output_fn"
    finally:
        for handle in handles:
            handle.remove()


def _refuse_hidden(model: Any) -> None:
    if isinstance(model, torch.nn.Module):
        for name, module in model.named_modules():
            if isinstance(module, torch.jit.ScriptModule):
                where = f"a model whose layer {name!r} is" if name else "a model that is"
                raise RescaleUnsupported(
                    f"{where} TorchScript (a {type(module).__name__}), whose operations run "
                    "outside Python, out of the rules' sight",
                    "Pass the eager (Python) model.",
                )


# --------------------------------------------------------------------------- the capability
class TorchRescaleGradients:
    """Rescale-rule multipliers of torch modules (also Keras 3 models on the torch backend)."""

    def rescale_layers(
        self, model: Any, x: torch.Tensor, head: Head, extras: Sequence[torch.Tensor] = ()
    ) -> RescaleReport:
        _refuse_hidden(model)
        x = x.detach().requires_grad_(True)
        with _module_names(model) as where, torch.enable_grad():
            reader = _ReadModel(where)
            with reader:
                out = head(model(x, *extras))
        if not out.requires_grad:
            raise RescaleUnsupported(
                "a model whose outputs do not depend on its input through torch operations "
                "(computed outside torch, or detached)",
                "Compute the outputs with torch operations on the input.",
            )
        if not reader.n_calls:
            raise RescaleUnsupported(
                "a model none of whose operations the rules could see (compiled, or run "
                "outside Python)",
                "Pass the eager (Python) model.",
            )
        return reader.report(out)

    def rescale_gradients(
        self,
        model: Any,
        inputs: torch.Tensor,
        references: torch.Tensor,
        index: torch.Tensor,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] = ((), ()),
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from ._torch import _backward

        selection = list(targets)
        input_extras, reference_extras = extras
        try:
            recorder = _RecordInputs()
            with torch.no_grad(), recorder:
                input_outputs = head(model(inputs, *input_extras))[:, selection].float()
            refs = references.detach().requires_grad_(True)
            pairs = _Pairs(index, keep_multipliers=len(selection) > 1 and not vectorised)
            rules = _ApplyRules(recorder.records, pairs, refs.shape[0])
            with torch.enable_grad():
                with rules:
                    selected = head(model(refs, *reference_extras))[:, selection]
                if rules.count != len(recorder.records):
                    raise _different_calls(rules.count, "nothing more", recorder.records)
                if len(selection) == 1:
                    (grad,) = torch.autograd.grad(selected.sum(), refs)
                    multipliers = grad.unsqueeze(1)
                else:
                    multipliers = _backward(selected, refs, len(selection), vectorised)
            return input_outputs, selected.detach().float(), multipliers
        except torch.OutOfMemoryError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc
