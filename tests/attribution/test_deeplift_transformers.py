"""DeepLIFT / DeepSHAP rules for transformers (torch): softmax, products of two activations,
normalisations, attention, wherever the model writes them.

- Summation to delta is exact for every rule: on float64 models written with each construct
  (module or functional call), f(x) - mean f(r) - sum of the contributions is at float64
  rounding, where the plain gradient (the operations left uncovered) misses it by far.
- Against tangermeme 1.6, whose rules cover ``nn.Softmax``, ``nn.LayerNorm`` and its own
  ``BilinearOp`` module: a toy transformer written with those modules gives the same
  contributions.
- An Enformer-class model (enformer-pytorch built from hyperparameters, random weights) sums
  to delta, and its report names no operation left to its gradient.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from deeplift_models import dinucleotide_references
from helpers import assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.engine.outputs import Head, model_session

LENGTH, N, REFS = 48, 4, 5
DIM = 8


class _Stem(torch.nn.Module):
    """(N, L, 4) -> (N, tokens, DIM): a convolution and a GELU, tokens of 4 positions."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, DIM, 5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.conv(x.transpose(1, 2)))
        return F.avg_pool1d(h, 4).transpose(1, 2)


class Construct(torch.nn.Module):
    """The stem, one construct on the tokens, and a linear readout of 2 outputs."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.stem = _Stem()
        self.q = torch.nn.Linear(DIM, DIM)
        self.k = torch.nn.Linear(DIM, DIM)
        self.v = torch.nn.Linear(DIM, DIM)
        self.norm = torch.nn.LayerNorm(DIM)
        self.rms = torch.nn.RMSNorm(DIM)
        self.group = torch.nn.GroupNorm(2, DIM)
        self.mha = torch.nn.MultiheadAttention(DIM, 2, batch_first=True, bias=True)
        self.encoder = torch.nn.TransformerEncoderLayer(
            DIM, 2, dim_feedforward=16, dropout=0.0, batch_first=True
        )
        self.readout = torch.nn.Linear(DIM, 2)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        kind = self.kind
        if kind == "softmax":
            h = torch.softmax(h * 2.0, dim=-1) * h.shape[-1]
        elif kind == "log_softmax":
            h = F.log_softmax(h, dim=1)
        elif kind == "product":
            h = h * torch.sigmoid(1.702 * h)  # enformer-pytorch's GELU
        elif kind == "division":
            h = h / (1.0 + h.abs())
        elif kind == "layer_norm":
            h = self.norm(h)
        elif kind == "rms_norm":
            h = self.rms(h)
        elif kind == "group_norm":
            h = self.group(h.transpose(1, 2)).transpose(1, 2)
        elif kind == "einsum_attention":
            q, k, v = self.q(h), self.k(h), self.v(h)
            attention = torch.einsum("bid,bjd->bij", q, k).softmax(dim=-1)
            h = torch.einsum("bij,bjd->bid", attention, v)
        elif kind == "sdpa":
            q, k, v = (f(h).reshape(len(h), -1, 2, DIM // 2).transpose(1, 2) for f in self.qkv)
            h = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(h.shape)
        elif kind == "multihead":
            h, _ = self.mha(h, h, h)
        elif kind == "encoder_layer":
            h = self.encoder(h)
        return self.readout(h.mean(1))

    @property
    def qkv(self) -> tuple[torch.nn.Module, ...]:
        return (self.q, self.k, self.v)


KINDS = [
    "softmax",
    "log_softmax",
    "product",
    "division",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "einsum_attention",
    "sdpa",
    "multihead",
    "encoder_layer",
]


def _report(model: torch.nn.Module, x: np.ndarray, output_fn=None):
    be = sa.get_backend(model)
    dtype = next(model.parameters()).dtype
    with model_session(be, model, None):
        return be.rescale_layers(model, torch.from_numpy(x[:1]).to(dtype), Head(output_fn))


def _delta(model: torch.nn.Module, X: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, ...]:
    return sa.deep_lift_shap(  # type: ignore[return-value]
        model, X, target=[0, 1], baselines=refs, n_baselines=REFS, return_delta=True
    )


def _spread(model: torch.nn.Module, X: np.ndarray, refs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        f_x = model(torch.from_numpy(X).double()).numpy()
        f_r = model(torch.from_numpy(refs.reshape(-1, *X.shape[1:])).double()).numpy()
    return np.abs(f_x - f_r.reshape(len(X), REFS, -1).mean(1))


@pytest.mark.parametrize("kind", KINDS)
def test_every_construct_sums_to_delta(kind):
    torch.manual_seed(KINDS.index(kind))
    model = Construct(kind).double().eval()
    X = random_one_hot(N, LENGTH, seed=1)
    refs = dinucleotide_references(X, REFS, 0, "NLC")
    report = _report(model, X)
    assert not report.by_gradient, report.by_gradient
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no gap warning
        _, delta = _delta(model, X, refs)
    spread = _spread(model, X, refs)
    assert spread.max() > 1e-3  # outputs that move
    assert np.abs(delta).max() <= 1e-6 * max(1.0, spread.max())


@pytest.mark.parametrize("kind", ["einsum_attention", "layer_norm", "product"])
def test_without_the_pair_rules_the_sums_miss_delta(kind, monkeypatch):
    """The same models with the products, softmax and normalisations left to their gradient
    (what the rules replaced): the sums miss f(x) - mean f(r) by far."""
    from seqattrib.backends.torch import rescale, rescale_read

    torch.manual_seed(KINDS.index(kind))
    model = Construct(kind).double().eval()
    X = random_one_hot(N, LENGTH, seed=1)
    refs = dinucleotide_references(X, REFS, 0, "NLC")
    monkeypatch.setattr(rescale, "pair_kind", lambda *args, **kwargs: None)
    monkeypatch.setattr(rescale_read, "pair_kind", lambda *args, **kwargs: None)
    with pytest.warns(sa.SeqAttribWarning, match="miss"):
        _, delta = _delta(model, X, refs)
    assert np.abs(delta).max() > 1e-3 * _spread(model, X, refs).max()


def test_multihead_attention_keeps_its_outputs_and_weights():
    """The decomposed nn.MultiheadAttention returns what the module returns (masks, biases on
    keys and values, a zero key, unbatched inputs), so the references' outputs are the model's."""
    from seqattrib.backends.torch.rescale_pairs import decompose

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(DIM, 2, add_bias_kv=True, add_zero_attn=True).double()
    mha.eval()
    x = torch.randn(7, 3, DIM, dtype=torch.float64)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:] = True
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)

    def op(func, *args, **kwargs):
        return func(*args, **kwargs)

    calls = []

    class Capture(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "multi_head_attention_forward":
                calls.append((args, kwargs))
            return func(*args, **kwargs)

    for inputs, masks in (
        ((x, x, x), dict(key_padding_mask=padding, attn_mask=causal)),
        ((x[:, 0], x[:, 0], x[:, 0]), {}),
    ):
        expected = mha(*inputs, **masks)
        with Capture():
            mha(*inputs, **masks)
        args, kwargs = calls.pop()
        got = decompose("multi_head_attention_forward", args, kwargs, op)
        assert_close(got[0].detach().numpy(), expected[0].detach().numpy(), 1e-12)
        assert_close(got[1].detach().numpy(), expected[1].detach().numpy(), 1e-12)


# --------------------------------------------------------------------------- tangermeme
tangermeme = pytest.importorskip("tangermeme.deep_lift_shap")


class ToyTransformer(torch.nn.Module):
    """A transformer written with the modules tangermeme's rules cover: ``nn.Softmax``,
    ``nn.LayerNorm``, ``nn.GELU``, ``nn.ReLU`` and its ``BilinearOp`` for q k^T and attention
    times values; (N, 4, L) input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, DIM, 5, padding=2)
        self.gelu = torch.nn.GELU()
        self.pool = torch.nn.AvgPool1d(4)
        self.norm = torch.nn.LayerNorm(DIM)
        self.q = torch.nn.Linear(DIM, DIM)
        self.k = torch.nn.Linear(DIM, DIM)
        self.v = torch.nn.Linear(DIM, DIM)
        self.scores = tangermeme.BilinearOp("bid,bjd->bij")
        self.mix = tangermeme.BilinearOp("bij,bjd->bid")
        self.softmax = torch.nn.Softmax(dim=-1)
        self.ffn = torch.nn.Sequential(
            torch.nn.LayerNorm(DIM),
            torch.nn.Linear(DIM, 16),
            torch.nn.ReLU(),
            torch.nn.Linear(16, DIM),
        )
        self.readout = torch.nn.Linear(DIM, 2)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.gelu(self.conv(x))).transpose(1, 2)
        n = self.norm(h)
        attention = self.softmax(self.scores(self.q(n), self.k(n)) * DIM**-0.5)
        h = h + self.mix(attention, self.v(n))
        h = h + self.ffn(h)
        return self.readout(h.mean(1))


def test_toy_transformer_equals_tangermeme():
    torch.manual_seed(3)
    model = ToyTransformer().eval()
    X = random_one_hot(N, LENGTH, seed=2, layout="NCL")
    refs = dinucleotide_references(X, REFS, 0, "NCL")
    ours = sa.deep_lift_shap(
        model, X, target=1, baselines=refs, n_baselines=REFS, alphabet_axis=1, batch_size=7
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = tangermeme.deep_lift_shap(
            model,
            torch.from_numpy(X),
            target=1,
            references=torch.from_numpy(refs),
            device="cpu",
            batch_size=8,
        ).numpy()
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] >= 0.999
    assert_close(ours, theirs, 1e-4)


# --------------------------------------------------------------------------- Enformer-class
enformer_pytorch = pytest.importorskip("enformer_pytorch")


def test_an_enformer_class_model_sums_to_delta():
    torch.manual_seed(0)
    model = enformer_pytorch.Enformer.from_hparams(
        dim=48,
        depth=2,
        heads=2,
        output_heads=dict(human=5),
        target_length=8,
        num_downsamples=3,
        dim_divisible_by=8,
        attn_dim_key=8,
    ).eval()
    with torch.no_grad():  # weights larger than at initialisation: outputs that differ
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() > 1:
                p.mul_(2.0)

    def central_bins(out):
        return out["human"][:, 2:6, :].sum(1)

    X = random_one_hot(12, 256, seed=4)
    report = _report(model, X, central_bins)
    assert not report.by_gradient, report.by_gradient
    assert any("softmax rule" in r for r in report.rescaled)
    assert any("product rule" in r for r in report.rescaled)
    assert any("layer_norm" in r for r in report.rescaled)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float32: no sequence misses by more than rounding
        sa.deep_lift_shap(model, X, target=[0, 3], output_fn=central_bins, n_baselines=8)
    # float64 (rounding out of the way): delta = f(x) - mean f(r) - sum of the contributions
    # within 1e-3 of f(x) - mean f(r) for >= 99 % of the sequences and targets
    attributions, delta = sa.deep_lift_shap(
        model.double(), X, target=[0, 3], output_fn=central_bins, n_baselines=8, return_delta=True
    )
    difference = np.abs(attributions.sum(axis=(2, 3)) + delta)
    assert np.median(difference) > 1e-2
    assert np.mean(np.abs(delta) <= 1e-3 * difference) >= 0.99


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_model_with_activation_checkpointing_gives_the_same_contributions(reentrant):
    """The model's own checkpointing (torch.utils.checkpoint, as enformer-pytorch's
    use_checkpointing does) runs as plain calls under the rules, and is back after."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(Construct):
        def forward(self, x):
            return checkpoint(super().forward, x, use_reentrant=reentrant)

    torch.manual_seed(1)
    plain = Construct("encoder_layer").eval()
    checkpointed = Checkpointed("encoder_layer").eval()
    checkpointed.load_state_dict(plain.state_dict())
    X = random_one_hot(N, LENGTH, seed=1)
    refs = dinucleotide_references(X, REFS, 0, "NLC")
    expected, _ = _delta(plain, X, refs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's own advice on use_reentrant
        got, delta = _delta(checkpointed, X, refs)
    assert_close(got, expected, 1e-6)
    assert np.abs(delta).max() <= 1e-5 * max(1.0, _spread(plain.double(), X, refs).max())
    assert "apply" not in torch.utils.checkpoint.CheckpointFunction.__dict__
