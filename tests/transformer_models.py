"""Transformer sequence-to-track models of the Enformer / Borzoi kind, small and with random
weights, for tests and benchmarks.

- ``enformer_small``: enformer-pytorch's ``Enformer`` built from hyperparameters (no weights
  are downloaded): conv stem, attention pooling, a conv tower, transformer layers with relative
  position logits, target-length cropping and a softplus head per species. It takes
  (N, L, 4) and returns a dict of (N, bins, tracks) tensors, one per head.
- ``ToyTransformer``: written by hand the way Enformer is written, without relative positions:
  a conv stem and conv block each followed by attention pooling (a softmax over each pool
  window of a 1x1-conv logit, as enformer-pytorch's ``AttentionPool``), multi-head attention
  written with einsum and softmax, LayerNorm, a GELU feed-forward block and a softplus
  (N, bins, tracks) head. It takes (N, 4, L).
- ``LongInputNet``: a few-channel conv net over long inputs whose stem downsamples 128x, as
  Enformer's does (196,608 bp -> 1,536 bins), optionally with activation checkpointing inside
  its forward (``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``); it takes
  (N, 4, L) and returns (N, bins, tracks).
- ``central_bins(model_bins, n_central, head=None)``: the output function the field uses on
  such models: each track summed over the central bins, (N, bins, tracks) -> (N, tracks).

Fresh enformer-pytorch attention layers have a zero output projection (the block is the
identity at initialisation), fresh BatchNorm layers are the identity in eval mode, and
PyTorch's default initialisation shrinks the signal at every layer (outputs that barely depend
on the sequence); the builders draw He-scaled weights and random BatchNorm statistics instead,
so that every part of the network shapes the output.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from published_models import _randomise_batch_norm

#: enformer_small's input length, bins after cropping and tracks.
ENFORMER_LENGTH = 256
ENFORMER_BINS = 16
ENFORMER_TRACKS = 6
#: ToyTransformer's defaults: input length and tracks (bins = length // 4).
TOY_LENGTH = 128
TOY_TRACKS = 5
#: Enformer's input length and its 128x stem: 1,536 bins.
LONG_LENGTH = 196_608
LONG_POOL = 128


def central_bins(model_bins: int, n_central: int, head: str | None = None) -> Callable[[Any], Any]:
    """An ``output_fn``: each track summed over the ``n_central`` central bins.

    Parameters
    ----------
    model_bins : int
        Bins of the model's output.
    n_central : int
        Central bins summed (the others are left out).
    head : str, optional
        Key of the output dict (enformer-pytorch returns one tensor per species).

    Returns
    -------
    callable
        (N, bins, tracks) tensor (or a dict of them) -> (N, tracks) tensor.
    """
    lo = (model_bins - n_central) // 2

    def output_fn(out: Any) -> Any:
        tracks = out[head] if head is not None else out
        return tracks[:, lo : lo + n_central].sum(dim=1)

    return output_fn


def reinitialise(model: Any, seed: int) -> None:
    """Random values for the parts that a fresh model holds at a trivial value: He-scaled
    convolution and dense weights, small random biases, random BatchNorm statistics, attention
    pooling logits off the identity."""
    import torch

    _randomise_batch_norm(model, seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d)):
                # He-scaled, as a trained network carries its signal (PyTorch's default init
                # shrinks it layer by layer); the attention output is no longer zero
                fan_in = module.weight[0].numel()
                module.weight.copy_(
                    torch.randn(module.weight.shape, generator=generator) * (2 / fan_in) ** 0.5
                )
                if module.bias is not None:
                    module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
            logits = getattr(module, "to_attn_logits", None)
            if isinstance(logits, torch.nn.Conv2d):  # attention pooling: 2 x identity
                noise = torch.randn(logits.weight.shape, generator=generator)
                logits.weight.add_(noise / logits.weight.shape[1] ** 0.5)


def enformer_small(seed: int = 0, *, checkpointing: bool = False) -> Any:
    """enformer-pytorch's Enformer at a test size, random weights, eval mode.

    dim 48, one transformer layer of 2 heads, 8x downsampling (``num_downsamples=3``): a
    (N, 256, 4) input gives ``{"human": (N, 16, 6)}`` (32 bins cropped to the central 16).
    ``checkpointing`` turns on the model's own activation checkpointing of its transformer.
    """
    import torch
    from enformer_pytorch import Enformer

    torch.manual_seed(seed)
    model = Enformer.from_hparams(
        dim=48,
        depth=1,
        heads=2,
        attn_dim_key=8,
        output_heads={"human": ENFORMER_TRACKS},
        target_length=ENFORMER_BINS,
        num_downsamples=3,
        dim_divisible_by=8,
        use_checkpointing=checkpointing,
    )
    reinitialise(model, seed)
    return model.eval()


@cache
def _classes() -> dict[str, type]:
    import torch
    from torch import nn

    class AttentionPool(nn.Module):
        """Softmax-weighted pooling over windows of ``pool`` positions (enformer-pytorch)."""

        def __init__(self, dim: int, pool: int = 2) -> None:
            super().__init__()
            self.pool = pool
            self.to_attn_logits = nn.Conv2d(dim, dim, 1, bias=False)
            nn.init.dirac_(self.to_attn_logits.weight)
            with torch.no_grad():
                self.to_attn_logits.weight.mul_(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, d, n = x.shape
            x = x.reshape(b, d, n // self.pool, self.pool)
            attn = self.to_attn_logits(x).softmax(dim=-1)
            return (x * attn).sum(dim=-1)

    class Attention(nn.Module):
        """Multi-head self-attention written with einsum and softmax."""

        def __init__(self, dim: int, heads: int, dim_key: int) -> None:
            super().__init__()
            self.heads, self.scale = heads, dim_key**-0.5
            self.to_q = nn.Linear(dim, heads * dim_key, bias=False)
            self.to_k = nn.Linear(dim, heads * dim_key, bias=False)
            self.to_v = nn.Linear(dim, heads * dim_key, bias=False)
            self.to_out = nn.Linear(heads * dim_key, dim)

        def split(self, t: torch.Tensor) -> torch.Tensor:
            b, n, _ = t.shape
            return t.reshape(b, n, self.heads, -1).transpose(1, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = (self.split(f(x)) for f in (self.to_q, self.to_k, self.to_v))
            logits = torch.einsum("bhid,bhjd->bhij", q * self.scale, k)
            attn = logits.softmax(dim=-1)
            out = torch.einsum("bhij,bhjd->bhid", attn, v)
            b, h, n, d = out.shape
            return self.to_out(out.transpose(1, 2).reshape(b, n, h * d))

    class ToyTransformer(nn.Module):
        """Conv stem + attention pooling (4x), one transformer layer, softplus track head."""

        def __init__(self, dim: int = 16, heads: int = 2, tracks: int = TOY_TRACKS) -> None:
            super().__init__()
            self.stem = nn.Conv1d(4, dim, 15, padding=7)
            self.pool1 = AttentionPool(dim)
            self.conv = nn.Conv1d(dim, dim, 5, padding=2)
            self.pool2 = AttentionPool(dim)
            self.norm1 = nn.LayerNorm(dim)
            self.attention = Attention(dim, heads, dim // heads)
            self.norm2 = nn.LayerNorm(dim)
            self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
            self.head = nn.Sequential(nn.Linear(dim, tracks), nn.Softplus())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.pool1(nn.functional.gelu(self.stem(x)))
            h = self.pool2(nn.functional.gelu(self.conv(h))).transpose(1, 2)
            h = h + self.attention(self.norm1(h))
            h = h + self.ff(self.norm2(h))
            return self.head(h)

    class LongInputNet(nn.Module):
        """A few-channel conv net for long inputs: a 128x stem (a 15-wide conv and seven
        2x poolings), a 5-wide conv block, a softplus (N, bins, tracks) head."""

        def __init__(self, channels: int = 4, tracks: int = 2, checkpointing: bool = False):
            super().__init__()
            self.checkpointing = checkpointing
            self.stem = nn.Conv1d(4, channels, 15, padding=7)
            self.pool = nn.AvgPool1d(LONG_POOL)
            self.block = nn.Sequential(
                nn.Conv1d(channels, channels, 5, padding=2),
                nn.GELU(),
                nn.Conv1d(channels, tracks, 1),
                nn.Softplus(),
            )

        def trunk(self, x: torch.Tensor) -> torch.Tensor:
            return self.pool(nn.functional.gelu(self.stem(x)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.checkpointing:
                from torch.utils.checkpoint import checkpoint

                h = checkpoint(self.trunk, x, use_reentrant=False)
                out = checkpoint(self.block, h, use_reentrant=False)
            else:
                out = self.block(self.trunk(x))
            return out.transpose(1, 2)

    return {"ToyTransformer": ToyTransformer, "LongInputNet": LongInputNet}


def toy_transformer(seed: int = 0, **sizes: int) -> Any:
    """The hand-written ToyTransformer, random weights, eval mode: (N, 4, L) ->
    (N, L // 4, tracks)."""
    import torch

    torch.manual_seed(seed)
    model = _classes()["ToyTransformer"](**sizes)
    reinitialise(model, seed)
    return model.eval()


def long_input_net(
    seed: int = 0, *, channels: int = 4, tracks: int = 2, checkpointing: bool = False
) -> Any:
    """LongInputNet with random weights, eval mode: (N, 4, L) -> (N, L // 128, tracks)."""
    import torch

    torch.manual_seed(seed)
    return _classes()["LongInputNet"](channels, tracks, checkpointing).eval()
