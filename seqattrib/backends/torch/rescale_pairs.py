"""DeepLIFT rules of the torch backend that read more than one value of an input row: softmax,
products of two input-dependent tensors, operations written as compositions of covered ones
(layer, RMS and group normalisation, division by an activation, log-softmax, scaled
dot-product attention), and the rescale block (a function treated as one elementwise
nonlinearity).

Each rule is exact: for every output, the multipliers times the input's change sum to the
output's change, so a model made of covered operations keeps summation to delta.

- A product c = a * b of two input-dependent tensors (``mul``, ``matmul``, ``bmm``,
  ``einsum``, ...; any operation linear in each operand) takes the Shapley rule of the two
  operands: c_x - c_r = op(a_bar, b_x - b_r) + op(a_x - a_r, b_bar) with a_bar, b_bar the means
  of the input's and the reference's operands (attention's q k^T and attention times values,
  x * sigmoid(1.702 x), gating).
- Softmax over an axis, y = a / s with a = exp(z) and s = sum a: exp under the rescale rule,
  the sum (linear), 1 / s under the rescale rule, and the product a (1 / s) under the
  log-ratio rule (the change of y_i in proportion to the changes of log a_i and log (1 / s)),
  as tangermeme's softmax rule chains them. With p and q the input's and the reference's
  softmax, d = lse(z_x) - lse(z_r), u = exp(d / 2) and dz = z_x - z_r, the multipliers
  times an upstream gradient g are g_j r_j - e_j k sum_i g_i r_i, where
  r_i = (p_i - q_i) / (dz_i - d) (q_i where the two logs agree),
  e_j = (p_j u - q_j / u) / dz_j (q_j / u where dz_j = 0) and k = (d / 2) / sinh(d / 2):
  invariant to a shift of the logits, computed in float64.
- Layer, RMS and group normalisation, division by an activation, log-softmax, softmin, scaled
  dot-product attention and multi-head attention (``nn.MultiheadAttention``, also inside
  ``nn.TransformerEncoderLayer``) run as the covered operations they are made of (a square, a
  mean, a reciprocal square root and a product; a softmax between two products).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import handle_torch_function, has_torch_function_unary

from ..protocol import RESCALE_EPS

#: The name a rescale block's call has for the rules.
BLOCK = "rescale_block"
_PRODUCTS = frozenset("mul multiply matmul mm bmm einsum".split())
_DIVISIONS = frozenset("div divide true_divide truediv".split())
_NORMS = frozenset("layer_norm rms_norm group_norm".split())
_ATTENTION = frozenset(["scaled_dot_product_attention", "multi_head_attention_forward"])
_DECOMPOSED = _DIVISIONS | _NORMS | _ATTENTION | {"log_softmax", "softmin"}

Op = Callable[..., Any]  # runs a torch function under the rules: op(func, *args, **kwargs)


def rescale_block(func: Callable[[Any], Any], z: Any) -> Any:
    """``func(z)``; under DeepLIFT's rules, the whole of ``func`` takes the rescale rule as if
    it were one elementwise nonlinearity: the multiplier of each element is
    (func(z_x) - func(z_r)) / (z_x - z_r), the gradient where the two are closer than
    ``RESCALE_EPS`` (as tangermeme treats a registered nonlinear module)."""
    if has_torch_function_unary(z):
        return handle_torch_function(rescale_block, (z,), func, z)
    return func(z)


def pair_kind(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    dependent: Callable[[Any], bool],
    reflected: bool = False,
) -> str | None:
    """The rule of a call of ``name`` beyond the elementwise ones: "block", "softmax",
    "product", "decompose", or None. ``dependent(t)``: whether tensor t depends on the input;
    ``reflected``: a reflected operator (``b.__rtruediv__(a)``)."""
    if name == BLOCK:
        return "block" if len(args) > 1 and _is_dependent(args[1], dependent) else None
    if name == "softmax":
        return "softmax" if args and _is_dependent(args[0], dependent) else None
    if name in _PRODUCTS:
        tensors = [t for t in _operands(name, args) if isinstance(t, torch.Tensor)]
        if len(tensors) == 2 and all(dependent(t) for t in tensors):
            return "product"
        return None
    if name in _DIVISIONS:
        if kwargs.get("rounding_mode") is not None:
            return None
        divisor = args[0] if reflected else _second(args, kwargs)
        return "decompose" if _is_dependent(divisor, dependent) else None
    if name in _ATTENTION:
        if kwargs.get("static_k") is not None or kwargs.get("static_v") is not None:
            return None  # precomputed keys: left to its gradient
        qkv = list(args[:3]) + [kwargs.get(k) for k in ("query", "key", "value")]
        return "decompose" if any(_is_dependent(t, dependent) for t in qkv) else None
    if name in _DECOMPOSED:
        first = args[0] if args else kwargs.get("input")
        return "decompose" if _is_dependent(first, dependent) else None
    return None


def _is_dependent(value: Any, dependent: Callable[[Any], bool]) -> bool:
    return isinstance(value, torch.Tensor) and dependent(value)


def _second(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    return args[1] if len(args) > 1 else kwargs.get("other")


# --------------------------------------------------------------------------- products
def _operands(name: str, args: Sequence[Any]) -> list[Any]:
    if name == "einsum":
        rest = list(args[1:])
        return list(rest[0]) if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
    return list(args[:2])


def bind_product(
    name: str, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, Callable[[Any, Any], Any]]:
    """The two operands of a product call and the call as a function of them."""
    a, b = _operands(name, args)
    if name != "einsum":
        return a, b, lambda p, q: func(p, q, *args[2:], **kwargs)
    equation = args[0]
    if len(args) == 2:  # einsum(equation, [a, b])
        return a, b, lambda p, q: func(equation, [p, q], **kwargs)
    return a, b, lambda p, q: func(equation, p, q, **kwargs)


class ProductRule(torch.autograd.Function):
    """``call(a, b)`` forward (a, b: the references' operands); backward: the Shapley rule of
    the two operands against the input row of each reference (``pairs``)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        a_x: torch.Tensor,
        b_x: torch.Tensor,
        pairs: Any,
        call: Callable[[Any, Any], Any],
    ) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.rule = (a_x, b_x, pairs, call)
        return call(a, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        a, b = ctx.saved_tensors
        a_x, b_x, pairs, call = ctx.rule
        index = pairs.index
        a_bar = (a + a_x.index_select(0, index)) * 0.5
        b_bar = (b + b_x.index_select(0, index)) * 0.5
        to_a = to_b = None
        with torch.enable_grad():
            if ctx.needs_input_grad[0]:
                leaf = a.detach().requires_grad_(True)
                (to_a,) = torch.autograd.grad(call(leaf, b_bar), leaf, grad)
            if ctx.needs_input_grad[1]:
                leaf = b.detach().requires_grad_(True)
                (to_b,) = torch.autograd.grad(call(a_bar, leaf), leaf, grad)
        return to_a, to_b, None, None, None, None


# --------------------------------------------------------------------------- softmax
def softmax_dim(args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if dim is None:  # the implicit axis of the old F.softmax(x) call
        return 0 if args[0].dim() in (0, 1, 3) else 1
    return int(dim)


class SoftmaxRule(torch.autograd.Function):
    """``softmax(z, dim)`` forward (z: the references' logits); backward: the exact rule of
    the module docstring against the input row of each reference."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, z: torch.Tensor, z_x: torch.Tensor, pairs: Any, dim: int
    ) -> torch.Tensor:
        ctx.save_for_backward(z)
        ctx.rule = (z_x, pairs, dim)
        ctx.parts = None
        return torch.softmax(z, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        parts = ctx.parts
        if parts is None:
            (z,) = ctx.saved_tensors
            z_x, pairs, dim = ctx.rule
            z_r = z.double()
            z_i = z_x.double().index_select(0, pairs.index)
            lse_r = torch.logsumexp(z_r, dim, keepdim=True)
            lse_i = torch.logsumexp(z_i, dim, keepdim=True)
            half = ((lse_i - lse_r) * 0.5).clamp(-300.0, 300.0)  # d / 2
            u = torch.exp(half)
            p, q = torch.exp(z_i - lse_i), torch.exp(z_r - lse_r)
            dz = z_i - z_r
            close = ~(dz.abs() > RESCALE_EPS)  # also where both are -inf (masked)
            to_exp = torch.where(close, q / u, (p * u - q / u) / dz.masked_fill(close, 1.0))
            kappa = torch.where(half.abs() < 1e-8, 1.0, half / torch.sinh(half))
            d_log = dz - 2.0 * half  # the change of log softmax
            flat = ~(d_log.abs() > RESCALE_EPS)
            ratio = torch.where(flat, q, (p - q) / d_log.masked_fill(flat, 1.0))
            parts = (ratio, to_exp * kappa, dim)
            if pairs.keep_multipliers:
                ctx.parts = parts
        ratio, to_sum, dim = parts
        g = grad.double() * ratio
        out = g - to_sum * g.sum(dim, keepdim=True)
        return out.to(grad.dtype), None, None, None


# --------------------------------------------------------------------------- compositions
def decompose(
    name: str, args: Sequence[Any], kwargs: dict[str, Any], op: Op, reflected: bool = False
) -> Any:
    """The call of ``name`` on ``args`` as the covered operations it is made of, each run
    through ``op``."""
    if name in _DIVISIONS:
        if reflected:  # b.__rtruediv__(a): a / b
            b, a = args[0], args[1]
        else:
            a = args[0] if args else kwargs["input"]
            b = _second(args, kwargs)
        return op(torch.mul, a, op(torch.reciprocal, b))
    if name == "log_softmax":
        return op(torch.log, op(torch.softmax, args[0], softmax_dim(args, kwargs)))
    if name == "softmin":
        return op(torch.softmax, op(torch.neg, args[0]), softmax_dim(args, kwargs))
    if name == "layer_norm":
        return _layer_norm(op, *args, **kwargs)
    if name == "rms_norm":
        return _rms_norm(op, *args, **kwargs)
    if name == "group_norm":
        return _group_norm(op, *args, **kwargs)
    if name == "multi_head_attention_forward":
        return _multi_head_attention(op, *args, **kwargs)
    return _attention(op, *args, **kwargs)


def _normalised(op: Op, x: torch.Tensor, dims: tuple[int, ...], eps: float) -> Any:
    centred = op(torch.sub, x, op(torch.mean, x, dims, keepdim=True))
    variance = op(torch.mean, op(torch.square, centred), dims, keepdim=True)
    return op(torch.mul, centred, op(torch.rsqrt, op(torch.add, variance, eps)))


def _affine(op: Op, y: Any, weight: Any, bias: Any) -> Any:
    if weight is not None:
        y = op(torch.mul, y, weight)
    if bias is not None:
        y = op(torch.add, y, bias)
    return y


def _layer_norm(
    op: Op,
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Any:
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    return _affine(op, _normalised(op, input, dims, eps), weight, bias)


def _rms_norm(
    op: Op,
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: Any = None,
    eps: float | None = None,
) -> Any:
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    power = op(torch.mean, op(torch.square, input), dims, keepdim=True)
    y = op(torch.mul, input, op(torch.rsqrt, op(torch.add, power, eps)))
    return _affine(op, y, weight, None)


def _group_norm(
    op: Op,
    input: torch.Tensor,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Any:
    shape = input.shape
    grouped = op(torch.reshape, input, (shape[0], num_groups, -1))
    y = op(torch.reshape, _normalised(op, grouped, (-1,), eps), tuple(shape))
    per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    weight = None if weight is None else weight.reshape(per_channel)
    bias = None if bias is None else bias.reshape(per_channel)
    return _affine(op, y, weight, bias)


def _attention(
    op: Op,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """``F.scaled_dot_product_attention`` at inference (dropout is off in eval mode)."""
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeats = query.shape[-3] // key.shape[-3]
        key = op(torch.repeat_interleave, key, repeats, dim=-3)
        value = op(torch.repeat_interleave, value, repeats, dim=-3)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    logits = op(torch.mul, op(torch.matmul, query, op(torch.transpose, key, -2, -1)), scale)
    n_query, n_key = query.shape[-2], key.shape[-2]
    if is_causal:
        attn_mask = torch.ones(n_query, n_key, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            logits = op(torch.masked_fill, logits, ~attn_mask, float("-inf"))
        else:
            logits = op(torch.add, logits, attn_mask)
    return op(torch.matmul, op(torch.softmax, logits, -1), value)


def _multi_head_attention(
    op: Op,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Any,
    in_proj_bias: Any,
    bias_k: Any,
    bias_v: Any,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: torch.Tensor,
    out_proj_bias: Any,
    training: bool = True,
    key_padding_mask: Any = None,
    need_weights: bool = True,
    attn_mask: Any = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Any = None,
    k_proj_weight: Any = None,
    v_proj_weight: Any = None,
    static_k: Any = None,
    static_v: Any = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Any, Any]:
    """``F.multi_head_attention_forward`` at inference (the call ``nn.MultiheadAttention``
    makes: sequence-first (L, N, E) tensors, or unbatched (L, E)), batch first inside, so
    that every rule pairs rows on axis 0."""
    unbatched = query.dim() == 2
    q, k, v = (
        op(torch.transpose, op(torch.unsqueeze, t, 1) if unbatched else t, 0, 1)
        for t in (query, key, value)
    )
    if use_separate_proj_weight:
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        weights = tuple(in_proj_weight.chunk(3))
    biases = (None,) * 3 if in_proj_bias is None else tuple(in_proj_bias.chunk(3))
    q, k, v = (
        op(torch.nn.functional.linear, t, w, b)
        for t, w, b in zip((q, k, v), weights, biases, strict=True)
    )
    n, length, embed = q.shape
    extra = []
    if bias_k is not None and bias_v is not None:
        k = op(torch.cat, [k, bias_k.reshape(1, 1, embed).expand(n, 1, embed)], 1)
        v = op(torch.cat, [v, bias_v.reshape(1, 1, embed).expand(n, 1, embed)], 1)
        extra.append(1)
    if add_zero_attn:
        k = op(torch.cat, [k, k.new_zeros(n, 1, embed)], 1)
        v = op(torch.cat, [v, v.new_zeros(n, 1, embed)], 1)
        extra.append(1)
    head_dim = embed // num_heads

    def heads(t: Any) -> Any:
        return op(torch.transpose, op(torch.reshape, t, (n, -1, num_heads, head_dim)), 1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    logits = op(torch.matmul, op(torch.mul, q, head_dim**-0.5), op(torch.transpose, k, -2, -1))
    n_keys = k.shape[-2]
    if is_causal and attn_mask is None:
        attn_mask = (
            torch.ones(length, n_keys, dtype=torch.bool, device=q.device).tril().logical_not()
        )
    for mask, shape in ((attn_mask, None), (key_padding_mask, (n, 1, 1, -1))):
        if mask is None:
            continue
        if extra:  # the columns of bias_k and the zero key are never masked
            mask = torch.nn.functional.pad(mask, (0, len(extra)))
        if shape is not None:
            mask = mask.reshape(shape)
        elif mask.dim() == 3:  # (N * heads, L, S)
            mask = mask.reshape(n, num_heads, length, n_keys)
        if mask.dtype == torch.bool:
            logits = op(torch.masked_fill, logits, mask, float("-inf"))
        else:
            logits = op(torch.add, logits, mask)
    attention = op(torch.softmax, logits, -1)
    out = op(
        torch.reshape, op(torch.transpose, op(torch.matmul, attention, v), 1, 2), (n, length, embed)
    )
    out = op(
        torch.transpose, op(torch.nn.functional.linear, out, out_proj_weight, out_proj_bias), 0, 1
    )
    weights_out = None
    if need_weights:
        weights_out = op(torch.mean, attention, 1) if average_attn_weights else attention
    if unbatched:
        out = op(torch.squeeze, out, 1)
        weights_out = None if weights_out is None else op(torch.squeeze, weights_out, 0)
    return out, weights_out
