"""The parameter-gradients capability of the torch backend (data attribution)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ._protocol import CheckpointMismatch, Head, OutOfDeviceMemory, UnsupportedLayer


class TorchParameterGradients:
    """Parameters, checkpoints and per-example gradients of torch modules."""

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for key, value in model.state_dict(keep_vars=True).items():
                value.copy_(torch.from_numpy(state[key]))

    def load_checkpoint(self, model: Any, checkpoint: Any) -> float | None:
        if isinstance(checkpoint, (str, os.PathLike)):
            try:
                state = torch.load(checkpoint, map_location="cpu", weights_only=True)
            except (OSError, RuntimeError) as exc:  # pickle errors surface as RuntimeError
                raise CheckpointMismatch(f"torch.load could not read it: {exc}") from exc
        else:
            state = checkpoint
        if not isinstance(state, Mapping):
            raise CheckpointMismatch(
                f"it holds a {type(state).__name__}, not a state dict of the model"
            )
        own = model.state_dict()
        for key, tensor in own.items():
            if key not in state:
                raise CheckpointMismatch(f"the key {key!r} of the model is missing from it")
            shape = tuple(getattr(state[key], "shape", ()))
            if shape != tuple(tensor.shape):
                raise CheckpointMismatch(
                    f"{key!r} has shape {shape} in it but {tuple(tensor.shape)} in the model"
                )
        for key in state:
            if key not in own:
                raise CheckpointMismatch(f"it has the key {key!r}, which the model lacks")
        model.load_state_dict({key: torch.as_tensor(state[key]) for key in own}, strict=True)
        return None

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        return [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]

    def per_example_gradients(
        self,
        model: Any,
        x: torch.Tensor,
        y: torch.Tensor,
        loss: str | Callable[..., Any],
        names: list[str],
        head: Head,
    ) -> torch.Tensor:
        from torch.func import functional_call, grad, vmap

        own = dict(model.named_parameters())
        params = {n: own[n].detach() for n in names}

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            out = head(functional_call(model, p, (xi[None],))).float()
            return _loss_values(loss, out, yi[None]).sum()

        try:
            with torch.enable_grad():
                grads = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
        except torch.OutOfMemoryError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc
        axes = _keras_axes(model)
        rows = x.shape[0]
        return torch.cat([_flat(grads[n], axes.get(n), rows) for n in names], dim=1)

    def last_layer_features(
        self, model: Any, x: torch.Tensor, y: torch.Tensor, loss: str | Callable[..., Any]
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        from torch.func import grad, vmap

        layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not layers:
            raise UnsupportedLayer("the model has no torch.nn.Linear layer")
        layer = layers[-1]
        seen: dict[str, torch.Tensor] = {}

        def capture(module: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
            seen["a"], seen["z"] = inputs[0], output

        handle = layer.register_forward_hook(capture)
        try:
            with torch.no_grad():
                out = model(x)
        finally:
            handle.remove()
        if "a" not in seen or seen["z"] is not out:
            raise UnsupportedLayer(
                "the output of its last torch.nn.Linear layer is not the model's output"
            )
        if seen["a"].ndim != 2:
            raise UnsupportedLayer(
                f"its last torch.nn.Linear layer sees inputs of shape {tuple(seen['a'].shape)}, "
                "not (batch, features)"
            )

        def one(zi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return _loss_values(loss, zi[None], yi[None]).sum()

        with torch.enable_grad():
            delta = vmap(grad(one))(out.detach().float(), y)
        return seen["a"].detach().float(), delta, layer.bias is not None

    def matmul(self, a: torch.Tensor, b: torch.Tensor, transpose_b: bool = False) -> torch.Tensor:
        return a @ (b.T if transpose_b else b)

    def sum(self, tensor: torch.Tensor, axis: Sequence[int]) -> torch.Tensor:
        return tensor.sum(dim=tuple(axis))


_TRANSPOSED = (
    torch.nn.Linear,
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
)


def _keras_axes(model: Any) -> dict[str, tuple[int, ...]]:
    """Axis orders that put torch weights in Keras' layout: a convolution's (out, in, *kernel)
    becomes (*kernel, in, out) (transposed: (in, out, *kernel) -> (*kernel, out, in)), a
    linear layer's (out, in) becomes (in, out). Other parameters keep their layout."""
    axes = {}
    for prefix, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, _TRANSPOSED) and isinstance(weight, torch.nn.Parameter):
            axes[f"{prefix}.weight" if prefix else "weight"] = (*range(2, weight.ndim), 1, 0)
    return axes


def _flat(grads: torch.Tensor, axes: tuple[int, ...] | None, rows: int) -> torch.Tensor:
    """(B, *shape) per-example gradients of one parameter -> (B, size), Keras layout."""
    if axes is not None:
        grads = grads.permute(0, *(1 + a for a in axes))
    return grads.reshape(rows, -1)


def _loss_values(
    loss: str | Callable[..., Any], out: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Per-example losses (B,) of (B, K) outputs, or TRAK's model output functions; see
    ``Backend.per_example_gradients``."""
    functional = torch.nn.functional
    if loss == "trak_margin":  # log p_y / (1 - p_y) = z_y - logsumexp_{k != y} z_k
        mask = torch.arange(out.shape[1], device=out.device) == y[:, None]
        correct = (out * mask).sum(1)
        return correct - out.masked_fill(mask, float("-inf")).logsumexp(1)
    if loss == "trak_binary":  # (2y - 1) * logit
        return (2 * y.reshape(out.shape).to(out.dtype) - 1)[:, 0] * out[:, 0]
    if loss == "trak_regression":
        return out[:, 0]
    if loss == "cross_entropy":
        return functional.cross_entropy(out, y, reduction="none")
    if loss == "bce":
        target = y.reshape(out.shape).to(out.dtype)
        return functional.binary_cross_entropy_with_logits(out, target, reduction="none").mean(1)
    if loss == "mse":
        return ((out - y.reshape(out.shape).to(out.dtype)) ** 2).mean(1)
    assert callable(loss)
    return loss(out, y)
