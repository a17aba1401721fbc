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

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..protocol import RESCALE_EPS, Head, RescaleReport, RescaleUnsupported
from .gradients import target_gradients
from .memory import out_of_memory
from .rescale_pairs import (
    BLOCK,
    ProductRule,
    SoftmaxRule,
    bind_product,
    decompose,
    pair_kind,
    softmax_dim,
)
from .rescale_read import (
    ModelReader,
    blocks,
    describe_call,
    module_names,
    refuse_hidden,
    rule_kind,
)


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
    tuple_type: type | None  # the type of a (values, indices) result of a max; None: a tensor
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


def _pool_returns_indices(func: Any, name: str) -> bool:
    """Whether the max pooling ``func`` returns (values, indices) rather than the values: the
    ``*_with_indices`` functions, and the adaptive poolings of ``torch`` and ``torch._C._nn``
    (those of ``torch.nn.functional`` return the values unless asked for the indices, which
    they then hand to their ``*_with_indices`` function)."""
    if name.endswith("_with_indices"):
        return True
    return name.startswith("adaptive_") and getattr(func, "__module__", "") != F.__name__


class _Pairs:
    """Which input row each reference row is compared with (``index``), as runs of rows: the
    engine lists a sequence's references together, so an input row is broadcast over its run
    instead of gathered into a copy. Also two scratch buffers per shape, reused by every
    layer's backward pass (fresh large tensors cost page faults on CPUs)."""

    def __init__(self, index: np.ndarray, on_device: torch.Tensor, keep_multipliers: bool) -> None:
        self.index = on_device  # ``index`` on the device
        ids = np.asarray(index).tolist()  # the host's copy: no transfer back from the device
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


def _float64(value: Any) -> Any:
    floating = isinstance(value, torch.Tensor) and value.is_floating_point()
    return value.double() if floating else value


def _secant64(
    func: Callable[..., Any],
    z: torch.Tensor,
    z_x: torch.Tensor,
    pairs: _Pairs,
    rest: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The secant (f(z) - f(z_x)) / (z - z_x) of a smooth function, evaluated in float64 from
    the float32 (or lower) activations, and z - z_x: in float32, f(z) - f(z_x) loses the digits
    that the division by a small z - z_x then magnifies, so that the result moved with the
    rounding of z (a sequence's contributions changed with the batch it was in)."""
    rest = tuple(_float64(a) for a in rest)
    kwargs = {k: _float64(v) for k, v in kwargs.items()}
    with torch.no_grad():
        z64, x64 = z.double(), z_x.double()
        dz = pairs.difference(z64, x64, torch.empty_like(z64))
        y64, yx64 = func(z64, *rest, **kwargs), func(x64, *rest, **kwargs)
        secant = pairs.difference(y64, yx64, y64).div_(dz)
    return secant.to(z.dtype), dz


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
        z, y = ctx.saved_tensors
        record, pairs, func, rest, kwargs = ctx.rule
        if multiplier is None:
            # On a CPU, reading whether any position needs the gradient costs nothing and
            # spares most layers its pass; on an accelerator it would wait for the device:
            # there the gradient is taken everywhere and kept where needed.
            on_cpu = z.device.type == "cpu"
            if record.name in _EXACT or z.dtype == torch.float64:
                secant, dz = pairs.scratch(z)
                if pairs.keep_multipliers:
                    secant, dz = torch.empty_like(z), torch.empty_like(z)
                pairs.difference(z, record.z, dz)
                pairs.difference(y, record.y, secant)
                secant.div_(dz)
            else:
                secant, dz = _secant64(func, z, record.z, pairs, rest, kwargs)
            if record.name in _EXACT:
                nan = not on_cpu or bool(torch.isnan(secant.sum()))
                fix = torch.isnan(secant) if nan else None
            else:
                small = dz.abs_() < RESCALE_EPS
                fix = small if not on_cpu or bool(small.any()) else None
            if record.name == BLOCK:  # where z == z_x: the block's own gradient, below
                multiplier = (secant, fix)
            elif fix is not None and on_cpu:  # a few positions: the gradient of f there
                rows = fix.flatten(1).any(1).nonzero().flatten()
                slope = _slopes(func, z.index_select(0, rows), rest, kwargs)
                secant[rows] = torch.where(fix[rows], slope, secant[rows])
                multiplier = secant
            elif fix is not None:
                multiplier = torch.where(fix, _slopes(func, z, rest, kwargs), secant)
            else:
                multiplier = secant
            if pairs.keep_multipliers:
                ctx.multiplier = multiplier
        if record.name != BLOCK:
            return grad * multiplier, None, None, None, None, None
        secant, fix = multiplier
        routed = grad * secant
        if fix is not None:  # tangermeme's rule there: the gradient of the whole block
            with torch.enable_grad():
                leaf = z.detach().requires_grad_(True)
                (plain,) = torch.autograd.grad(func(leaf), leaf, grad)
            routed = torch.where(fix, plain, routed)
        return routed, None, None, None, None, None


class _PoolRule(torch.autograd.Function):
    """Max pooling (windows along the spatial axes) under DeepLIFT's max rule, from the
    indices of the maxima: per window, with y_x and y the input's and the reference's maxima,
    the upstream gradient times max(y_x - y, 0) / (z_x - z) goes to the input's maximum and
    times min(y_x - y, 0) / (z_x - z) to the reference's, z_x - z read at that position (the
    plain gradient to the input's maximum where z_x == z there, nothing to the reference's).
    Everything but the final scatter works on pooled-size tensors. The forward pass returns
    the indices of the references' maxima too (not differentiable)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: torch.Tensor,
        record: _Record,
        pairs: _Pairs,
        func: Callable[..., Any],
        rest: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, indices = _pool(record.name, z, rest, kwargs)
        ctx.save_for_backward(z, y, indices)
        ctx.mark_non_differentiable(indices)
        ctx.rule = (record, pairs)
        return y, indices

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> tuple[Any, ...]:  # type: ignore[override]
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
    the sum is divided by z_x - z; where z == z_x, the input's routing of the gradient. The
    forward pass returns the indices of a (values, indices) result too (not differentiable)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: torch.Tensor,
        record: _Record,
        pairs: _Pairs,
        func: Callable[..., Any],
        rest: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        out = func(z, *rest, **kwargs)
        y = _values(out)
        index = pairs.index
        ctx.save_for_backward(
            z, record.z.index_select(0, index), y, record.y.index_select(0, index)
        )
        ctx.call = (func, rest, kwargs)
        if y is out:
            return y
        ctx.mark_non_differentiable(*out[1:])
        return (y, *out[1:])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[Any, ...]:  # type: ignore[override]
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
            # (no host read of ``unchanged`` on an accelerator: it would wait for the device)
            if dz.device.type != "cpu" or bool(unchanged.any()):
                (plain,) = torch.autograd.grad(y_inp, inp, grad)
                routed = torch.where(
                    unchanged, plain, (to_input + to_reference) / dz.masked_fill(unchanged, 1.0)
                )
            else:
                routed = (to_input + to_reference) / dz
        return routed, None, None, None, None, None


# --------------------------------------------------------------------------- the passes
class _Rules(TorchFunctionMode):
    """What both passes share: which calls take a rule (tensors depend on the input where they
    require gradients: both passes run with autograd on), and compositions of covered
    operations run call by call through the pass itself (``_op``), so that the two passes see
    the same calls in the same order."""

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        call = describe_call(func, kwargs)
        kind = rule_kind(call, args)
        if kind == "other" and not call.in_place:
            kind = pair_kind(call.name, args, kwargs, _requires_grad, call.reflected) or "other"
        if kind == "other":
            return func(*args, **kwargs)
        if kind == "decompose":
            return decompose(call.name, args, kwargs, self._op, call.reflected)
        return self.rule(kind, call.name, func, args, kwargs)

    def _op(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        return self.__torch_function__(func, (), args, kwargs)

    def rule(
        self, kind: str, name: str, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        raise NotImplementedError


def _requires_grad(t: torch.Tensor) -> bool:
    return t.requires_grad


class _RecordInputs(_Rules):
    """Pass 1: every call that takes a rule, in call order, with the values its rule reads
    (copies, so that a later in-place operation of the model cannot change them)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[_Record] = []

    def rule(
        self, kind: str, name: str, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        if kind == "product":
            a, b, bound = bind_product(name, func, args, kwargs)
            self.records.append(_Record(name, _kept(a), _kept(b), None))
            return bound(a, b)
        if kind == "block":
            z, out = args[1], func(*args, **kwargs)
            self.records.append(_Record(name, _kept(z), _kept(out), None))
            return out
        if name in _WITH_INDICES:  # one pooling, with the indices the rule needs
            values, indices = _pool(name, args[0], tuple(args[1:]), kwargs)
            tuple_type = tuple if _pool_returns_indices(func, name) else None
            kept = indices.clone() if tuple_type else indices
            self.records.append(_Record(name, _kept(args[0]), _kept(values), tuple_type, kept))
            return (values, indices) if tuple_type else values
        out = func(*args, **kwargs)
        values = _values(out)
        tuple_type = None if values is out else type(out)
        self.records.append(_Record(name, _kept(args[0]), _kept(values), tuple_type))
        return out


def _kept(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


class _ApplyRules(_Rules):
    """Pass 2: the k-th call that takes a rule, for the references, uses it against the k-th
    record of the inputs."""

    def __init__(self, records: list[_Record], pairs: _Pairs, n_rows: int) -> None:
        super().__init__()
        self.records, self.pairs, self.n_rows = records, pairs, n_rows
        self.count = 0

    def rule(
        self, kind: str, name: str, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        k = self.count
        self.count += 1
        if k >= len(self.records) or self.records[k].name != name:
            raise _different_calls(k, name, self.records)
        record = self.records[k]
        if kind == "product":
            a, b, bound = bind_product(name, func, args, kwargs)
            self._check_rows(name, a, record.z)
            self._check_rows(name, b, record.y)
            return ProductRule.apply(a, b, record.z, record.y, self.pairs, bound)
        z = args[1] if kind == "block" else args[0]
        if not z.requires_grad:  # not on a path from the references (e.g. on parameters)
            return func(*args, **kwargs)
        self._check_rows(name, z, record.z)
        if kind == "softmax":
            dtype = kwargs.get("dtype")
            z = z if dtype is None else z.to(dtype)
            return SoftmaxRule.apply(z, record.z, self.pairs, softmax_dim(args, kwargs))
        if kind == "block":
            return _Rescale.apply(z, record, self.pairs, args[0], (), {})
        rule: type[torch.autograd.Function] = _Rescale if kind == "rescale" else _MaxRule
        if name in _WITH_INDICES:
            rule = _PoolRule
        out = rule.apply(z, record, self.pairs, func, tuple(args[1:]), kwargs)
        if record.tuple_type is not None:  # (values, indices), as the call returns them
            return record.tuple_type(out)
        return _values(out)  # a pooling rule also returns the indices

    def _check_rows(self, name: str, z: torch.Tensor, recorded: torch.Tensor) -> None:
        if z.shape[0] != self.n_rows or z.shape[1:] != recorded.shape[1:]:
            raise RescaleUnsupported(
                f"a model whose {name} receives a tensor of shape {tuple(z.shape)} for "
                f"a batch of {self.n_rows} rows",
                "The rules pair rows on axis 0: apply nonlinearities before moving or merging "
                "the batch axis.",
            )


def _different_calls(k: int, name: str, records: list[_Record]) -> RescaleUnsupported:
    expected = records[k].name if k < len(records) else "nothing more"
    return RescaleUnsupported(
        f"a model that makes different calls for the references than for the inputs "
        f"(nonlinearity {k + 1}: {name} instead of {expected})",
        "The rules pair each operation of a reference with the same operation of its input: "
        "remove control flow that depends on the values of the input.",
    )


# --------------------------------------------------------------------------- the capability
class TorchRescaleGradients:
    """Rescale-rule multipliers of torch modules (also Keras 3 models on the torch backend)."""

    asarray: Callable[..., torch.Tensor]  # the backend's copy of a host array to the device
    #: Models whose reading found calls the pair rules take: their inputs' pass runs with
    #: autograd on, so that it sees which tensors depend on the input as the references' does.
    _paired_models: weakref.WeakSet[Any]

    def rescale_layers(
        self, model: Any, x: torch.Tensor, head: Head, extras: Sequence[torch.Tensor] = ()
    ) -> RescaleReport:
        refuse_hidden(model)
        x = x.detach().requires_grad_(True)
        with module_names(model) as where, torch.enable_grad(), blocks(model):
            reader = ModelReader(where)
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
        report = reader.report(out)
        if not hasattr(self, "_paired_models"):
            self._paired_models = weakref.WeakSet()
        if reader.paired:
            self._paired_models.add(model)
        else:
            self._paired_models.discard(model)
        return report

    def rescale_gradients(
        self,
        model: Any,
        inputs: torch.Tensor,
        references: torch.Tensor,
        index: np.ndarray,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] = ((), ()),
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:

        selection = list(targets)
        input_extras, reference_extras = extras
        with out_of_memory():
            recorder = _RecordInputs()
            # autograd on where the pair rules apply: it tells which tensors depend on the input
            paired = model in getattr(self, "_paired_models", ())
            with blocks(model), torch.set_grad_enabled(paired), recorder:
                outputs = head(model(inputs.detach().requires_grad_(paired), *input_extras))
            input_outputs = outputs[:, selection].detach().float()
            del outputs
            refs = references.detach().requires_grad_(True)
            keep = len(selection) > 1 and not vectorised
            pairs = _Pairs(index, self.asarray(index, "int64"), keep_multipliers=keep)
            rules = _ApplyRules(recorder.records, pairs, refs.shape[0])
            with torch.enable_grad():
                with blocks(model), rules:
                    selected = head(model(refs, *reference_extras))[:, selection]
                if rules.count != len(recorder.records):
                    raise _different_calls(rules.count, "nothing more", recorder.records)
                multipliers = target_gradients(selected, refs, vectorised)
            return input_outputs, selected.detach().float(), multipliers
