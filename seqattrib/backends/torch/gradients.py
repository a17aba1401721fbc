"""Input gradients of several outputs from one torch graph (the core backend and the DeepLIFT
rules share them)."""

from __future__ import annotations

import warnings

import torch


def target_gradients(selected: torch.Tensor, x: torch.Tensor, vectorised: bool) -> torch.Tensor:
    """(rows, K, *x.shape[1:]): the gradients of the K columns of ``selected`` (rows, K) with
    respect to ``x``, from one graph (one forward pass for all K): one backward for K = 1; for
    more, one vmapped backward over K x rows (``vectorised``), or K passes one after another
    (also for a layer without a vmap rule)."""
    k = selected.shape[1]
    if k == 1:
        (grad,) = torch.autograd.grad(selected.sum(), x)
        return grad.unsqueeze(1)
    if vectorised:
        eye = torch.eye(k, dtype=selected.dtype, device=selected.device)
        basis = eye[:, None, :].expand(k, selected.shape[0], k)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*[Bb]atching rule.*")
                (grads,) = torch.autograd.grad(
                    selected, x, grad_outputs=basis, is_grads_batched=True, retain_graph=True
                )
            return grads.movedim(0, 1)
        except RuntimeError:
            pass
    grads = torch.stack(
        [torch.autograd.grad(selected[:, i].sum(), x, retain_graph=i < k - 1)[0] for i in range(k)]
    )
    return grads.movedim(0, 1)
