"""Toy models built from one NumPy weight dict, in torch and in Keras 3 (TensorFlow).

The same weights run through both frameworks, so cross-framework parity means something.
Every builder takes ``layout``: "NLC" (batch, length, 4) or "NCL" (batch, 4, length), the
layout the model's input uses. Frameworks are imported inside the builders.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


# --------------------------------------------------------------------------- weights
def linear_weights(length: int, n_outputs: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((length, 4, n_outputs)).astype(np.float32),
        "b": rng.standard_normal(n_outputs).astype(np.float32),
    }


def convnet_weights(
    n_outputs: int = 3, filters: int = 8, width: int = 5, seed: int = 0
) -> dict[str, np.ndarray]:
    """conv(4->F, width) relu, conv(F->F, 3, dilation 2) relu, mean over length, dense(F->K)."""
    rng = np.random.default_rng(seed)
    return {
        "conv1": _normal(rng, (width, 4, filters), 4 * width),
        "conv1_b": _normal(rng, (filters,), 4),
        "conv2": _normal(rng, (3, filters, filters), 3 * filters),
        "conv2_b": _normal(rng, (filters,), filters),
        "dense": _normal(rng, (filters, n_outputs), filters) * 4,
        "dense_b": _normal(rng, (n_outputs,), 1),
    }


def bpnet_weights(
    n_outputs: int = 5, filters: int = 64, n_layers: int = 9, seed: int = 0
) -> dict[str, np.ndarray]:
    """BPNet-like: conv(4->F, 21), n_layers residual dilated convs (width 3, dilation 2^i),
    global average pooling, dense(F->K) (the counts head)."""
    rng = np.random.default_rng(seed)
    weights = {
        "conv0": _normal(rng, (21, 4, filters), 84),
        "conv0_b": np.zeros(filters, np.float32),
        "dense": _normal(rng, (filters, n_outputs), filters),
        "dense_b": np.zeros(n_outputs, np.float32),
    }
    for i in range(n_layers):
        weights[f"dil{i}"] = _normal(rng, (3, filters, filters), 3 * filters)
        weights[f"dil{i}_b"] = np.zeros(filters, np.float32)
    return weights


def crested_weights(n_outputs: int = 8, filters: int = 128, seed: int = 0) -> dict[str, np.ndarray]:
    """CREsted-like peak model: conv(4->F,17) relu maxpool 3, conv(F->F,7) relu maxpool 3,
    conv(F->F,5) relu, global max pool, dense(F->64) relu, dense(64->K)."""
    rng = np.random.default_rng(seed)
    return {
        "c1": _normal(rng, (17, 4, filters), 68),
        "c1_b": np.zeros(filters, np.float32),
        "c2": _normal(rng, (7, filters, filters), 7 * filters),
        "c2_b": np.zeros(filters, np.float32),
        "c3": _normal(rng, (5, filters, filters), 5 * filters),
        "c3_b": np.zeros(filters, np.float32),
        "d1": _normal(rng, (filters, 64), filters),
        "d1_b": np.zeros(64, np.float32),
        "d2": _normal(rng, (64, n_outputs), 64),
        "d2_b": np.zeros(n_outputs, np.float32),
    }


def basset_weights(
    length: int, n_outputs: int = 3, filters: int = 16, seed: int = 0
) -> dict[str, np.ndarray]:
    """Basset-like: conv(4->F,7) BatchNorm relu maxpool 3, conv(F->F,5) BatchNorm relu maxpool 2,
    flatten, dense(->32) relu, dense(32->K). Valid convolutions; BatchNorm in eval mode with
    non-trivial statistics (epsilon ``BN_EPS`` in both frameworks). ``d1`` is stored as
    (positions, F, 32), so each framework flattens in its own order."""
    rng = np.random.default_rng(seed)
    positions = ((length - 6) // 3 - 4) // 2
    weights = {
        "c1": _normal(rng, (7, 4, filters), 28),
        "c1_b": (0.1 * rng.standard_normal(filters)).astype(np.float32),
        "c2": _normal(rng, (5, filters, filters), 5 * filters),
        "c2_b": (0.1 * rng.standard_normal(filters)).astype(np.float32),
        "d1": _normal(rng, (positions, filters, 32), positions * filters),
        "d1_b": np.zeros(32, np.float32),
        "d2": _normal(rng, (32, n_outputs), 32),
        "d2_b": np.zeros(n_outputs, np.float32),
    }
    for bn in ("bn1", "bn2"):
        weights[f"{bn}_gamma"] = (1 + 0.2 * rng.standard_normal(filters)).astype(np.float32)
        weights[f"{bn}_beta"] = (0.2 * rng.standard_normal(filters)).astype(np.float32)
        weights[f"{bn}_mean"] = (0.3 * rng.standard_normal(filters)).astype(np.float32)
        weights[f"{bn}_var"] = (0.5 + rng.random(filters)).astype(np.float32)
    return weights


BN_EPS = 1e-3
_BN_KEYS = ("gamma", "beta", "mean", "var")


# --------------------------------------------------------------------------- torch
def _torch_conv(w: np.ndarray, b: np.ndarray, **kwargs: Any) -> Any:
    import torch

    width, c_in, c_out = w.shape
    conv = torch.nn.Conv1d(c_in, c_out, width, **kwargs)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.transpose(2, 1, 0))))
        conv.bias.copy_(torch.from_numpy(b))
    return conv


def _torch_dense(w: np.ndarray, b: np.ndarray) -> Any:
    import torch

    dense = torch.nn.Linear(*w.shape)
    with torch.no_grad():
        dense.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
        dense.bias.copy_(torch.from_numpy(b))
    return dense


def _torch_bn(weights: dict[str, np.ndarray], name: str) -> Any:
    import torch

    bn = torch.nn.BatchNorm1d(len(weights[f"{name}_gamma"]), eps=BN_EPS)
    with torch.no_grad():
        for attr, key in (("weight", "gamma"), ("bias", "beta")):
            getattr(bn, attr).copy_(torch.from_numpy(weights[f"{name}_{key}"]))
        bn.running_mean.copy_(torch.from_numpy(weights[f"{name}_mean"]))
        bn.running_var.copy_(torch.from_numpy(weights[f"{name}_var"]))
    return bn


def torch_model(kind: str, weights: dict[str, np.ndarray], layout: str = "NCL") -> Any:
    """``kind`` in {"linear", "convnet", "bpnet", "crested"}."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layout = layout
            if kind == "linear":
                self.w = torch.nn.Parameter(torch.from_numpy(weights["w"].copy()))
                self.b = torch.nn.Parameter(torch.from_numpy(weights["b"].copy()))
            elif kind == "convnet":
                self.conv1 = _torch_conv(weights["conv1"], weights["conv1_b"])
                self.conv2 = _torch_conv(weights["conv2"], weights["conv2_b"], dilation=2)
                self.dense = _torch_dense(weights["dense"], weights["dense_b"])
            elif kind == "bpnet":
                self.conv0 = _torch_conv(weights["conv0"], weights["conv0_b"], padding="same")
                n = sum(1 for k in weights if k.startswith("dil") and not k.endswith("_b"))
                self.dil = torch.nn.ModuleList(
                    _torch_conv(
                        weights[f"dil{i}"], weights[f"dil{i}_b"], dilation=2**i, padding="same"
                    )
                    for i in range(n)
                )
                self.dense = _torch_dense(weights["dense"], weights["dense_b"])
            elif kind == "basset":
                self.c1 = _torch_conv(weights["c1"], weights["c1_b"])
                self.c2 = _torch_conv(weights["c2"], weights["c2_b"])
                self.bn1, self.bn2 = _torch_bn(weights, "bn1"), _torch_bn(weights, "bn2")
                d1 = weights["d1"]  # (positions, F, H): torch flattens (F, positions)
                flat = np.ascontiguousarray(d1.transpose(1, 0, 2).reshape(-1, d1.shape[2]))
                self.d1 = _torch_dense(flat, weights["d1_b"])
                self.d2 = _torch_dense(weights["d2"], weights["d2_b"])
            elif kind == "crested":
                self.c1 = _torch_conv(weights["c1"], weights["c1_b"])
                self.c2 = _torch_conv(weights["c2"], weights["c2_b"])
                self.c3 = _torch_conv(weights["c3"], weights["c3_b"])
                self.d1 = _torch_dense(weights["d1"], weights["d1_b"])
                self.d2 = _torch_dense(weights["d2"], weights["d2_b"])
            else:
                raise ValueError(kind)

        def forward(self, x: Any) -> Any:
            if kind == "linear":  # weights are (L, 4, K)
                xl = x if self.layout == "NLC" else x.transpose(1, 2)
                return torch.einsum("nlc,lck->nk", xl, self.w) + self.b
            h = x.transpose(1, 2) if self.layout == "NLC" else x
            relu = torch.relu
            if kind == "convnet":
                h = relu(self.conv2(relu(self.conv1(h))))
                return self.dense(h.mean(dim=-1))
            if kind == "bpnet":
                h = relu(self.conv0(h))
                for conv in self.dil:
                    h = h + relu(conv(h))
                return self.dense(h.mean(dim=-1))
            pool = torch.nn.functional.max_pool1d
            if kind == "basset":
                h = pool(relu(self.bn1(self.c1(h))), 3)
                h = torch.nn.functional.max_pool1d(relu(self.bn2(self.c2(h))), 2)
                return self.d2(relu(self.d1(torch.flatten(h, 1))))
            h = pool(relu(self.c1(h)), 3)
            h = pool(relu(self.c2(h)), 3)
            h = relu(self.c3(h)).amax(dim=-1)
            return self.d2(relu(self.d1(h)))

    return Model().eval()


# --------------------------------------------------------------------------- keras
def keras_model(kind: str, weights: dict[str, np.ndarray], length: int, layout: str = "NLC") -> Any:
    """The same architectures as ``torch_model`` in Keras 3 (functional API)."""
    import keras

    shape = (length, 4) if layout == "NLC" else (4, length)
    inputs = keras.Input(shape)
    h = inputs if layout == "NLC" else keras.layers.Permute((2, 1))(inputs)
    layers = keras.layers

    def conv(name: str, **kwargs: Any) -> Any:
        w = weights[name]
        layer = layers.Conv1D(w.shape[2], w.shape[0], **kwargs)
        return layer, (w, weights[name + "_b"])

    pending: list[tuple[Any, tuple[np.ndarray, ...]]] = []

    def apply(layer_and_weights: Any, x: Any) -> Any:
        layer, ws = layer_and_weights
        out = layer(x)
        pending.append((layer, ws))
        return out

    if kind == "linear":
        h = layers.Flatten()(h)
        dense = layers.Dense(weights["w"].shape[2])
        out = dense(h)
        pending.append((dense, (weights["w"].reshape(-1, weights["w"].shape[2]), weights["b"])))
    elif kind == "convnet":
        h = apply(conv("conv1", activation="relu"), h)
        h = apply(conv("conv2", activation="relu", dilation_rate=2), h)
        h = layers.GlobalAveragePooling1D()(h)
        out = apply(
            (layers.Dense(weights["dense"].shape[1]), (weights["dense"], weights["dense_b"])), h
        )
    elif kind == "bpnet":
        h = apply(conv("conv0", activation="relu", padding="same"), h)
        n = sum(1 for k in weights if k.startswith("dil") and not k.endswith("_b"))
        for i in range(n):
            h = layers.Add()(
                [
                    h,
                    apply(
                        conv(f"dil{i}", activation="relu", padding="same", dilation_rate=2**i), h
                    ),
                ]
            )
        h = layers.GlobalAveragePooling1D()(h)
        out = apply(
            (layers.Dense(weights["dense"].shape[1]), (weights["dense"], weights["dense_b"])), h
        )
    elif kind == "basset":
        for i, pool in ((1, 3), (2, 2)):
            h = apply(conv(f"c{i}"), h)
            bn = layers.BatchNormalization(epsilon=BN_EPS)
            h = bn(h)
            pending.append((bn, tuple(weights[f"bn{i}_{k}"] for k in _BN_KEYS)))
            h = layers.MaxPooling1D(pool)(layers.Activation("relu")(h))
        h = layers.Flatten()(h)  # Keras flattens (positions, F)
        d1 = weights["d1"]
        h = apply(
            (
                layers.Dense(d1.shape[2], activation="relu"),
                (d1.reshape(-1, d1.shape[2]), weights["d1_b"]),
            ),
            h,
        )
        out = apply((layers.Dense(weights["d2"].shape[1]), (weights["d2"], weights["d2_b"])), h)
    elif kind == "crested":
        h = layers.MaxPooling1D(3)(apply(conv("c1", activation="relu"), h))
        h = layers.MaxPooling1D(3)(apply(conv("c2", activation="relu"), h))
        h = layers.GlobalMaxPooling1D()(apply(conv("c3", activation="relu"), h))
        h = apply((layers.Dense(64, activation="relu"), (weights["d1"], weights["d1_b"])), h)
        out = apply((layers.Dense(weights["d2"].shape[1]), (weights["d2"], weights["d2_b"])), h)
    else:
        raise ValueError(kind)
    model = keras.Model(inputs, out)
    for layer, ws in pending:
        layer.set_weights(list(ws))
    return model


def random_one_hot(n: int, length: int, seed: int = 0, layout: str = "NLC") -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=(n, length))]
    return X if layout == "NLC" else np.ascontiguousarray(X.transpose(0, 2, 1))


# --------------------------------------------------------------------------- data attribution
def small_cnn(filters: int = 32, device: str = "cpu") -> Any:
    """torch, on (N, 4, L): conv(4->F, 11) relu, max pool 4, conv(F->F, 5, dilation 2) relu,
    mean over length, dense(F->2); seeded initial weights (the data-attribution benchmarks)."""
    import torch

    class SmallCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv1d(4, filters, 11)
            self.conv2 = torch.nn.Conv1d(filters, filters, 5, dilation=2)
            self.dense = torch.nn.Linear(filters, 2)

        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.max_pool1d(torch.relu(self.conv1(x)), 4)
            return self.dense(torch.relu(self.conv2(h)).mean(dim=-1))

    torch.manual_seed(0)
    return SmallCNN().eval().to(device)


def keras_small_cnn(length: int, filters: int = 32) -> Any:
    """``small_cnn`` in Keras, on (N, L, 4); ``small_cnn_keras_weights`` gives it torch's."""
    import keras

    inputs = keras.Input((length, 4))
    h = keras.layers.Conv1D(filters, 11, activation="relu")(inputs)
    h = keras.layers.MaxPooling1D(4)(h)
    h = keras.layers.Conv1D(filters, 5, dilation_rate=2, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def small_cnn_keras_weights(state: dict[str, Any]) -> list[np.ndarray]:
    """A torch state dict of ``small_cnn`` in ``keras_small_cnn().get_weights()`` order."""
    w = {k: v.detach().cpu().numpy() for k, v in state.items()}
    return [
        w["conv1.weight"].transpose(2, 1, 0),
        w["conv1.bias"],
        w["conv2.weight"].transpose(2, 1, 0),
        w["conv2.bias"],
        w["dense.weight"].T,
        w["dense.bias"],
    ]


def motif_cnn(filters: int, width: int, n_outputs: int = 3) -> Any:
    """torch, on (N, 4, L): conv(4->F, width) relu, mean over length, dense(F->K); torch's
    default initialisation (seed it first)."""
    import torch

    class MotifCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(4, filters, width)
            self.dense = torch.nn.Linear(filters, n_outputs)

        def forward(self, x: Any) -> Any:
            return self.dense(torch.relu(self.conv(x)).mean(dim=-1))

    return MotifCNN()
