"""Models, checkpoints, training runs and reference computations for the TracIn tests.

References live here, never in the package: a brute-force TracIn that loads every checkpoint
into a fresh torch model by hand and loops over examples with ``torch.autograd.grad``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import models
import numpy as np
import torch

LENGTH = 24
CE = torch.nn.CrossEntropyLoss(reduction="none")


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one thread: these models and batches are tiny, so a second intra-op thread
    only adds synchronisation, which costs seconds per test on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- convnet checkpoints
def convnet_checkpoints(n: int, n_outputs: int = 3) -> list[dict[str, np.ndarray]]:
    """Weight dicts of ``n`` checkpoints of the toy convnet (different seeds)."""
    return [models.convnet_weights(n_outputs=n_outputs, seed=10 + i) for i in range(n)]


def torch_state(kind: str, weights: dict[str, np.ndarray], layout: str = "NLC") -> dict:
    return copy.deepcopy(models.torch_model(kind, weights, layout).state_dict())


def data(n: int, seed: int, n_outputs: int = 3, layout: str = "NLC") -> tuple[np.ndarray, Any]:
    X = models.random_one_hot(n, LENGTH, seed=seed, layout=layout)
    y = np.random.default_rng(seed).integers(0, n_outputs, n)
    return X, y


# --------------------------------------------------------------------------- BatchNorm model
def bn_weights(seed: int, filters: int = 6, n_outputs: int = 3) -> dict[str, np.ndarray]:
    """conv(4->F, 5) -> BatchNorm (eval statistics differ per seed) -> relu -> mean -> dense."""
    rng = np.random.default_rng(seed)
    w = models.convnet_weights(n_outputs=n_outputs, filters=filters, seed=seed)
    return {
        "conv1": w["conv1"],
        "conv1_b": w["conv1_b"],
        "gamma": (1 + 0.3 * rng.standard_normal(filters)).astype(np.float32),
        "beta": (0.3 * rng.standard_normal(filters)).astype(np.float32),
        "mean": (0.5 * rng.standard_normal(filters)).astype(np.float32),
        "var": rng.uniform(0.3, 2.0, filters).astype(np.float32),
        "dense": w["dense"],
        "dense_b": w["dense_b"],
    }


BN_EPS = 1e-3


def torch_bn_model(weights: dict[str, np.ndarray]) -> torch.nn.Module:
    """Input (N, L, 4)."""

    class BNNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            f = weights["gamma"].shape[0]
            self.conv = torch.nn.Conv1d(4, f, weights["conv1"].shape[0])
            self.bn = torch.nn.BatchNorm1d(f, eps=BN_EPS)
            self.dense = torch.nn.Linear(f, weights["dense"].shape[1])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.bn(self.conv(x.transpose(1, 2))))
            return self.dense(h.mean(dim=-1))

    model = BNNet()
    t = torch.from_numpy
    with torch.no_grad():
        model.conv.weight.copy_(t(np.ascontiguousarray(weights["conv1"].transpose(2, 1, 0))))
        model.conv.bias.copy_(t(weights["conv1_b"]))
        model.bn.weight.copy_(t(weights["gamma"]))
        model.bn.bias.copy_(t(weights["beta"]))
        model.bn.running_mean.copy_(t(weights["mean"]))
        model.bn.running_var.copy_(t(weights["var"]))
        model.dense.weight.copy_(t(np.ascontiguousarray(weights["dense"].T)))
        model.dense.bias.copy_(t(weights["dense_b"]))
    return model.eval()


def keras_bn_model(weights: dict[str, np.ndarray]) -> Any:
    import keras

    inputs = keras.Input((LENGTH, 4))
    conv = keras.layers.Conv1D(weights["gamma"].shape[0], weights["conv1"].shape[0])
    bn = keras.layers.BatchNormalization(epsilon=BN_EPS)
    dense = keras.layers.Dense(weights["dense"].shape[1])
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.ReLU()(bn(conv(inputs))))
    model = keras.Model(inputs, dense(h))
    model.set_weights(keras_bn_weights(weights))
    return model


def keras_bn_weights(weights: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model.get_weights()`` order of ``keras_bn_model``."""
    keys = ("conv1", "conv1_b", "gamma", "beta", "mean", "var", "dense", "dense_b")
    return [weights[k] for k in keys]


# --------------------------------------------------------------------------- references
def per_example_gradients(
    model: torch.nn.Module,
    X: np.ndarray,
    y: np.ndarray,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = CE,
    params: Sequence[torch.Tensor] | None = None,
) -> np.ndarray:
    """One ``torch.autograd.grad`` call per example: (n, n_params) float64."""
    params = list(model.parameters()) if params is None else list(params)
    rows = []
    for x, t in zip(X, y, strict=True):
        out = model(torch.from_numpy(np.ascontiguousarray(x[None])))
        loss = loss_fn(out, torch.as_tensor(np.asarray(t)[None])).sum()
        grads = torch.autograd.grad(loss, params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
    return np.stack(rows)


def brute_force_tracin(
    make_model: Callable[[], torch.nn.Module],
    states: Sequence[dict],
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    learning_rates: Sequence[float] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = CE,
    params: Callable[[torch.nn.Module], Sequence[torch.Tensor]] | None = None,
) -> np.ndarray:
    """sum_c lr_c G_test G_train^T, loading each checkpoint into a fresh model by hand."""
    rates = learning_rates or [1.0] * len(states)
    total = 0.0
    for state, lr in zip(states, rates, strict=True):
        model = make_model()
        model.load_state_dict(state)
        model.eval()
        chosen = None if params is None else params(model)
        g_train = per_example_gradients(model, *train, loss_fn=loss_fn, params=chosen)
        g_test = per_example_gradients(model, *test, loss_fn=loss_fn, params=chosen)
        total = total + lr * g_test @ g_train.T
    return np.asarray(total)


# --------------------------------------------------------------------------- a training run
def motif_data(
    n: int, length: int, seed: int, p_motif: tuple[float, float] = (0.0, 1.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Random sequences; class c carries the motif GATAG with probability ``p_motif[c]``.

    ``(0, 1)``: a clean task; ``(0.5, 0.5)``: labels carry no signal (only memorisation fits).
    """
    rng = np.random.default_rng(seed)
    X = models.random_one_hot(n, length, seed=seed)
    y = rng.integers(0, 2, n)
    motif = np.eye(4, dtype=np.float32)[[2, 0, 3, 0, 2]]
    has = rng.random(n) < np.asarray(p_motif)[y]
    for i in np.flatnonzero(has):
        start = rng.integers(0, length - len(motif))
        X[i, start : start + len(motif)] = motif
    return X, y


class MotifNet(torch.nn.Module):
    """conv(4->F, 5) relu, global max pool, dense(F->2); input (N, L, 4)."""

    def __init__(self, filters: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, filters, 5)
        self.dense = torch.nn.Linear(filters, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(torch.relu(self.conv(x.transpose(1, 2))).amax(dim=-1))


def train(
    X: np.ndarray, y: np.ndarray, *, epochs: int, filters: int = 16, lr: float = 0.1, seed: int = 0
) -> tuple[MotifNet, list[dict]]:
    """SGD with momentum, batches of 20; a state dict copy after every epoch."""
    with one_torch_thread():
        torch.manual_seed(seed)
        net = MotifNet(filters)
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
        xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        states = []
        for _ in range(epochs):
            order = torch.randperm(len(X))
            for start in range(0, len(X), 20):
                idx = order[start : start + 20]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
                opt.step()
            states.append(copy.deepcopy(net.state_dict()))
    return net.eval(), states
