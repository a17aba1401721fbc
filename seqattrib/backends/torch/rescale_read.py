"""Reading a torch model for the rescale rules: which calls are nonlinear and how each is
treated (rescale rule, max rule, plain gradient, or refused), from one forward pass that sees
every torch call the model makes (``TorchFunctionMode``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..protocol import RescaleReport, RescaleUnsupported
from .rescale_pairs import pair_kind, rescale_block

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
    max_pool3d_with_indices adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d
    adaptive_max_pool1d_with_indices adaptive_max_pool2d_with_indices
    adaptive_max_pool3d_with_indices amax max""".split()
)
#: Random at inference: no rule can pair a reference's call with its input's.
_SOFTMAX = frozenset(["gumbel_softmax"])
_SOFTMAX_FIX = (
    "DeepLIFT's rules do not cover a random softmax: explain the logits instead, with a model "
    "that returns the values before it (output_fn can pick or reduce them)."
)
#: How the rules name what a rule of ``pair_kind`` does, for the report.
_PAIR_LABELS = {
    "block": "{name} ({where})",
    "softmax": "softmax ({where}), under the softmax rule",
    "product": "{name} of two input-dependent tensors ({where}), under the product rule",
    "decompose": "{name} ({where}), as the covered operations it is made of",
}
#: Modules the rules treat as one elementwise nonlinearity (the rescale block), as their
#: authors register them with tangermeme: bpnet-lite's profile scaling (the mean-normalised
#: logits times their softmax).
BLOCK_MODULES = frozenset({"bpnetlite.bpnet._ProfileLogitScaling"})
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
    logical_not bool long int any all nonzero topk sort zeros_like ones_like empty_like
    full_like new_zeros new_ones new_empty new_full""".split()
)


# --------------------------------------------------------------------------- call names
@dataclass(frozen=True)
class Call:
    """A torch call as the rules see it: its base name and whether it writes in place."""

    name: str
    in_place: bool
    reflected: bool  # ``__rtruediv__`` and friends: the tensor is the right operand


def describe_call(func: Any, kwargs: dict[str, Any]) -> Call:
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
    return Call(name, in_place, reflected)


def rule_kind(call: Call, args: Sequence[Any]) -> str:
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


# --------------------------------------------------------------------------- reading a model
@dataclass
class _Finding:
    """One input-dependent call: what it is for the rules, and the autograd node of its
    result (None where autograd was off), to keep only what the outputs are computed from."""

    kind: str  # "rescaled", "max_rule", "by_gradient", or "refused"
    label: str
    node: Any
    refusal: RescaleUnsupported | None = None


class ModelReader(TorchFunctionMode):
    """One forward pass with the input requiring gradients: a tensor depends on the input if
    it requires gradients (parameters do not, inside the session) or was made from one that
    does (inside a custom autograd.Function, where nothing requires gradients)."""

    def __init__(self, where: Callable[[], str]) -> None:
        super().__init__()
        self.where = where
        self.findings: list[_Finding] = []
        self.n_calls = 0  # input-dependent calls seen
        self.paired = False  # calls the pair rules take (see ``rescale_pairs``)
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
        call = describe_call(func, kwargs)
        grad_enabled = torch.is_grad_enabled()
        out = func(*args, **kwargs)
        self.n_calls += 1
        made = list(_tensors(out))
        for t in made:
            self._made[id(t)] = t
        values = [t for t in made if t.is_floating_point()]  # not shapes, masks or indices
        if values:
            finding = self._classify(call, args, kwargs, dependent, grad_enabled)
            if finding is not None:
                finding.node = values[0].grad_fn if grad_enabled else None
                self.findings.append(finding)
        return out

    def _classify(
        self,
        call: Call,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        dependent: list[torch.Tensor],
        grad_enabled: bool,
    ) -> _Finding | None:
        if grad_enabled and not any(t.requires_grad for t in dependent):
            return None  # reads the input only through a tensor held constant: no gradient
        name, where = call.name, self.where()
        label = f"{name} ({where})"
        kind = rule_kind(call, args) if args and self._dependent_first(args) else "other"
        pair = (
            None if call.in_place else pair_kind(name, args, kwargs, _requires_grad, call.reflected)
        )
        if pair is not None and kind == "other":
            kind, self.paired = pair, True
            label = _PAIR_LABELS[pair].format(name=name, where=where)
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
        if kind in ("rescale", "block", "softmax", "product", "decompose"):
            return _Finding("rescaled", label, None)
        if kind == "max":
            return _Finding("max_rule", label, None)
        if name in _PRODUCTS and sum(t.requires_grad for t in dependent) > 1:
            return _Finding("by_gradient", f"{name} of two input-dependent tensors ({where})", None)
        if name in _DIVISIONS and self._divides_by_dependent(call, args):
            return _Finding("by_gradient", f"division by an input-dependent tensor ({where})", None)
        if name == "where" and args and self._dependent(args[0]):
            return _Finding("by_gradient", f"where on an input-dependent condition ({where})", None)
        if name == "detach" and grad_enabled:
            return _Finding(
                "by_gradient", f"an input-dependent tensor held constant (detach, {where})", None
            )
        if name not in _LINEAR | _PRODUCTS | _DIVISIONS | _NO_GRADIENT:
            return _Finding("by_gradient", label, None)
        return None

    def _dependent_first(self, args: Sequence[Any]) -> bool:
        return isinstance(args[0], torch.Tensor) and self._dependent(args[0])

    def _divides_by_dependent(self, call: Call, args: Sequence[Any]) -> bool:
        position = 0 if call.reflected else 1
        return (
            len(args) > position
            and isinstance(args[position], torch.Tensor)
            and args[position].requires_grad
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


def _requires_grad(t: torch.Tensor) -> bool:
    """Whether a tensor depends on the input for the pair rules, as the two passes see it."""
    return t.requires_grad


def _refused(label: str, received: str, fix: str) -> _Finding:
    return _Finding("refused", label, None, RescaleUnsupported(received, fix))


@contextmanager
def module_names(model: Any) -> Iterator[Callable[[], str]]:
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


@contextmanager
def blocks(model: Any) -> Iterator[None]:
    """The modules of ``BLOCK_MODULES`` run as rescale blocks for the duration (their
    ``forward`` shadowed on the instance, removed after), and checkpointed parts of the model
    as plain calls (``plain_checkpoints``)."""
    patched = []
    if isinstance(model, torch.nn.Module):
        for module in model.modules():
            cls = type(module)
            named = f"{cls.__module__}.{cls.__qualname__}" in BLOCK_MODULES
            if named and "forward" not in module.__dict__:
                module.forward = partial(rescale_block, module.forward)
                patched.append(module)
    try:
        with plain_checkpoints():
            yield
    finally:
        for module in patched:
            del module.forward


def _plain_generator(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield


@contextmanager
def plain_checkpoints() -> Iterator[None]:
    """``torch.utils.checkpoint`` runs the checkpointed function as a plain call for the
    duration: the rules must see its operations with autograd on, and a recomputation in the
    backward pass would run them outside the rules (the activations are then kept, as
    without checkpointing)."""
    import torch.utils.checkpoint as checkpointing

    reentrant = checkpointing.CheckpointFunction
    generator = checkpointing._checkpoint_without_reentrant_generator
    reentrant.apply = staticmethod(lambda function, preserve, *args: function(*args))  # type: ignore[method-assign,assignment]
    checkpointing._checkpoint_without_reentrant_generator = _plain_generator  # type: ignore[assignment]
    try:
        yield
    finally:
        del reentrant.apply
        checkpointing._checkpoint_without_reentrant_generator = generator


def refuse_hidden(model: Any) -> None:
    if isinstance(model, torch.nn.Module):
        for name, module in model.named_modules():
            if isinstance(module, torch.jit.ScriptModule):
                where = f"a model whose layer {name!r} is" if name else "a model that is"
                raise RescaleUnsupported(
                    f"{where} TorchScript (a {type(module).__name__}), whose operations run "
                    "outside Python, out of the rules' sight",
                    "Pass the eager (Python) model.",
                )
