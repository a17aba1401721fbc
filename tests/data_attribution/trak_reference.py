"""A float64 closed-form TRAK for the tests, from explicitly computed per-example gradients.

Each checkpoint is loaded into a fresh torch model by hand and cast to float64; the output
function is written out per task and differentiated with one ``torch.autograd.grad`` call per
example. Then, per checkpoint, ``phi(z)^T (G^T G + lambda I)^-1 G^T diag(Q)`` with the
projection (when given) drawn from ``RandomProjection`` exactly as documented: Rademacher,
seed sequence ``(random_state, checkpoint)``, gradients flattened in the Keras layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from seqattrib.data_attribution.projection import RandomProjection


def output_and_weight(task: str, z: torch.Tensor, y: float | int) -> tuple[torch.Tensor, float]:
    """The model output function f of one example's outputs z (K,) and its Q = -dL/df."""
    if task == "classification":
        t = int(y)
        others = torch.cat([z[:t], z[t + 1 :]])
        f = z[t] - torch.logsumexp(others, 0)  # log p / (1 - p)
        return f, 1.0 - torch.softmax(z, 0)[t].item()
    if task == "binary":
        f = (2.0 * float(y) - 1.0) * z[0]
        return f, torch.sigmoid(-f).item()
    return z[0], float(y) - z[0].item()  # regression: the prediction; Q = the residual


def gradients(
    model: torch.nn.Module, X: np.ndarray, y: np.ndarray, task: str, keras_layout: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per-example gradients of f, (n, n_params) float64, and Q (n,), one example at a time."""
    params = list(model.parameters())
    rows, weights = [], []
    for x, t in zip(X, y, strict=True):
        z = model(torch.from_numpy(np.ascontiguousarray(x[None])).double())[0]
        f, q = output_and_weight(task, z, t)
        grads = torch.autograd.grad(f, params)
        if keras_layout:  # conv (out, in, width) and dense (out, in) weights: axes reversed
            grads = [g.permute(*reversed(range(g.ndim))) for g in grads]
        rows.append(torch.cat([g.reshape(-1) for g in grads]).numpy())
        weights.append(q)
    return np.stack(rows), np.array(weights)


def checkpoint_seed(random_state: int, index: int) -> int:
    return int(np.random.SeedSequence([random_state, index]).generate_state(1, np.uint64)[0])


def closed_form_trak(
    make_model: Callable[[], torch.nn.Module],
    states: Sequence[dict],
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    task: str = "classification",
    lambda_reg: float | str = "auto",
    proj_dim: int | None = None,
    random_state: int = 0,
) -> tuple[np.ndarray, list[float], list[float]]:
    """mean_c phi_c(test) (Phi_c^T Phi_c + lambda_c I)^-1 Phi_c^T diag(Q_c); the lambdas and
    the condition numbers of the kernels."""
    total, lambdas, conditions = 0.0, [], []
    for index, state in enumerate(states):
        model = make_model()
        model.load_state_dict(state)
        model.eval().double()
        G, Q = gradients(model, *train, task, keras_layout=proj_dim is not None)
        g, _ = gradients(model, *test, task, keras_layout=proj_dim is not None)
        if proj_dim is not None:
            seed = checkpoint_seed(random_state, index)
            matrix = RandomProjection(G.shape[1], proj_dim, seed, "rademacher").matrix()
            G, g = G @ matrix.astype(np.float64), g @ matrix.astype(np.float64)
        kernel = G.T @ G
        dim = kernel.shape[0]
        lam = 1e-6 * np.trace(kernel) if lambda_reg == "auto" else float(lambda_reg)
        lambdas.append(lam)
        conditions.append(np.linalg.cond(kernel + lam * np.eye(dim)))
        total = total + (g @ np.linalg.solve(kernel + lam * np.eye(dim), G.T)) * Q
    return np.asarray(total) / len(states), lambdas, conditions
