"""The toy models of ``models.py`` with module nonlinearities, for references that only see
``nn.Module`` layers (tangermeme, captum).

``models.torch_model`` writes ReLU and max pooling as function calls (``torch.relu``,
``F.max_pool1d``, ``amax``); the models here compute the same function from the same weights
with one ``nn.ReLU`` per use, ``nn.MaxPool1d`` layers and a global max pool written as
``nn.MaxPool1d`` over the remaining length (captum needs a module per call).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from models import _torch_bn, _torch_conv, _torch_dense


def torch_module_model(
    kind: str, weights: dict[str, np.ndarray], length: int, layout: str = "NCL"
) -> Any:
    """``kind`` in {"convnet", "bpnet", "basset", "crested"}; ``length``: input length."""
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layout = layout
            if kind == "convnet":
                self.conv1 = _torch_conv(weights["conv1"], weights["conv1_b"])
                self.conv2 = _torch_conv(weights["conv2"], weights["conv2_b"], dilation=2)
                self.dense = _torch_dense(weights["dense"], weights["dense_b"])
                self.relus = nn.ModuleList([nn.ReLU(), nn.ReLU()])
            elif kind == "bpnet":
                self.conv0 = _torch_conv(weights["conv0"], weights["conv0_b"], padding="same")
                n = sum(1 for k in weights if k.startswith("dil") and not k.endswith("_b"))
                self.dil = nn.ModuleList(
                    _torch_conv(
                        weights[f"dil{i}"], weights[f"dil{i}_b"], dilation=2**i, padding="same"
                    )
                    for i in range(n)
                )
                self.relus = nn.ModuleList(nn.ReLU() for _ in range(n + 1))
                self.dense = _torch_dense(weights["dense"], weights["dense_b"])
            elif kind == "basset":
                self.c1 = _torch_conv(weights["c1"], weights["c1_b"])
                self.c2 = _torch_conv(weights["c2"], weights["c2_b"])
                self.bn1, self.bn2 = _torch_bn(weights, "bn1"), _torch_bn(weights, "bn2")
                d1 = weights["d1"]
                flat = np.ascontiguousarray(d1.transpose(1, 0, 2).reshape(-1, d1.shape[2]))
                self.d1 = _torch_dense(flat, weights["d1_b"])
                self.d2 = _torch_dense(weights["d2"], weights["d2_b"])
                self.relus = nn.ModuleList(nn.ReLU() for _ in range(3))
                self.pools = nn.ModuleList([nn.MaxPool1d(3), nn.MaxPool1d(2)])
            elif kind == "crested":
                self.c1 = _torch_conv(weights["c1"], weights["c1_b"])
                self.c2 = _torch_conv(weights["c2"], weights["c2_b"])
                self.c3 = _torch_conv(weights["c3"], weights["c3_b"])
                self.d1 = _torch_dense(weights["d1"], weights["d1_b"])
                self.d2 = _torch_dense(weights["d2"], weights["d2_b"])
                self.relus = nn.ModuleList(nn.ReLU() for _ in range(4))
                remaining = ((length - 16) // 3 - 6) // 3 - 4
                self.pools = nn.ModuleList(
                    [nn.MaxPool1d(3), nn.MaxPool1d(3), nn.MaxPool1d(remaining)]
                )
            else:
                raise ValueError(kind)

        def forward(self, x: Any) -> Any:
            h = x.transpose(1, 2) if self.layout == "NLC" else x
            r = self.relus
            if kind == "convnet":
                h = r[1](self.conv2(r[0](self.conv1(h))))
                return self.dense(h.mean(dim=-1))
            if kind == "bpnet":
                h = r[0](self.conv0(h))
                for i, conv in enumerate(self.dil):
                    h = h + r[i + 1](conv(h))
                return self.dense(h.mean(dim=-1))
            p = self.pools
            if kind == "basset":
                h = p[0](r[0](self.bn1(self.c1(h))))
                h = p[1](r[1](self.bn2(self.c2(h))))
                return self.d2(r[2](self.d1(torch.flatten(h, 1))))
            h = p[0](r[0](self.c1(h)))
            h = p[1](r[1](self.c2(h)))
            h = torch.flatten(p[2](r[2](self.c3(h))), 1)
            return self.d2(r[3](self.d1(h)))

    return Model().eval()


def dinucleotide_references(X: np.ndarray, n: int, seed: int, layout: str) -> np.ndarray:
    """(N, n, *X.shape[1:]) dinucleotide shuffles of each sequence, for passing explicitly."""
    from seqattrib.attribution.baselines import dinucleotide_shuffle

    rng = np.random.default_rng(seed)
    nlc = X if layout == "NLC" else X.transpose(0, 2, 1)
    refs = np.stack([dinucleotide_shuffle(s, n, rng) for s in nlc])
    return refs if layout == "NLC" else np.ascontiguousarray(refs.transpose(0, 1, 3, 2))


# --------------------------------------------------------------------------- by hand
def one_relu_weights(length: int, seed: int = 0, hidden: int = 5) -> dict[str, np.ndarray]:
    """Weights of ``one_relu`` for inputs of ``length`` positions."""
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((length * 4, hidden)).astype(np.float32),
        "b": (0.5 * rng.standard_normal(hidden)).astype(np.float32),
        "v": rng.standard_normal((hidden, 2)).astype(np.float32),
    }


def one_relu(framework: str, w: dict[str, np.ndarray]) -> Any:
    """f(x) = relu(flatten(x) @ w + b) @ v, on (batch, L, 4)."""
    length = w["w"].shape[0] // 4
    if framework == "torch":
        import torch
        import torch.nn.functional as F

        tw, tb, tv = (torch.from_numpy(w[k]) for k in ("w", "b", "v"))

        class OneReLU(torch.nn.Module):
            def forward(self, x):
                return F.relu(x.flatten(1) @ tw + tb) @ tv

        return OneReLU()
    import keras

    inputs = keras.Input((length, 4))
    hidden = keras.layers.Dense(w["w"].shape[1], activation="relu")
    out_layer = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, out_layer(hidden(keras.layers.Flatten()(inputs))))
    hidden.set_weights([w["w"], w["b"]])
    out_layer.set_weights([w["v"]])
    return model


def one_relu_multipliers(w: dict[str, np.ndarray], x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Multipliers of f at (x, r) by hand: sum_k v_k s_k w_k, s_k the ReLU secant."""
    zx, zr = x.reshape(-1) @ w["w"] + w["b"], r.reshape(-1) @ w["w"] + w["b"]
    same = zx == zr
    dz = np.where(same, 1.0, zx - zr)
    secant = np.where(
        same, (zx > 0).astype(np.float64), (np.maximum(zx, 0) - np.maximum(zr, 0)) / dz
    )
    return (w["w"] * secant[None]) @ w["v"]  # (L * 4, 2)
