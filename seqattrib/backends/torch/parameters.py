"""The parameter-gradients capability of the torch backend (data attribution)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..protocol import CheckpointMismatch, Head, UnsupportedLayer
from .memory import out_of_memory


class TorchParameterGradients:
    """Parameters, checkpoint files, per-example gradients and the math of losses, for torch
    modules."""

    # ----------------------------------------------------------------- state and checkpoints
    def set_state(self, model: Any, state: Mapping[str, Any]) -> None:
        with torch.no_grad():
            for key, value in model.state_dict(keep_vars=True).items():
                value.copy_(torch.as_tensor(state[key]))

    def read_checkpoint(self, model: Any, path: str) -> Any:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise CheckpointMismatch(
                "it is not weights that load without running code (a whole pickled model, as "
                "torch.save(model) writes, or no torch.save file at all); save each checkpoint "
                "with torch.save(model.state_dict(), path)"
            ) from None
        except (OSError, RuntimeError, EOFError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointMismatch(f"torch.load could not read it: {first}") from exc

    def trainable_parameters(self, model: Any) -> list[tuple[str, tuple[int, ...]]]:
        return [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]

    # ----------------------------------------------------------------- gradients
    def per_example_gradients(
        self,
        model: Any,
        x: torch.Tensor,
        y: torch.Tensor,
        fn: Callable[[Any, Any], Any],
        names: list[str],
        head: Head,
    ) -> torch.Tensor:
        import sys
        from contextlib import nullcontext

        from torch.func import functional_call, grad, vmap

        own = dict(model.named_parameters())
        params = {n: own[n].detach() for n in names}
        # A Keras layer on the torch backend reads its weights from its Keras variables, not
        # from the parameters functional_call swaps: its traced values enter through a
        # StatelessScope instead.
        keras: Any = sys.modules.get("keras")
        variables: dict[int, Any] = {}
        if keras is not None:
            for module in model.modules():
                if isinstance(module, keras.Layer):
                    variables.update({id(v.value): v for v in module.variables})
        held = [n for n in names if id(own[n]) in variables]

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            scope = (
                keras.StatelessScope(state_mapping=[(variables[id(own[n])], p[n]) for n in held])
                if held
                else nullcontext()
            )
            with scope:
                out = head(functional_call(model, p, (xi[None],))).float()
            return fn(out, yi[None]).sum()

        with out_of_memory(), torch.enable_grad():
            grads = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
        axes = _keras_axes(model)
        rows = x.shape[0]
        return torch.cat([_flat(grads[n], axes.get(n), rows) for n in names], dim=1)

    def output_gradients(
        self, fn: Callable[[Any, Any], Any], z: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        from torch.func import grad, vmap

        def one(zi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return fn(zi[None], yi[None]).sum()

        with torch.enable_grad():
            return vmap(grad(one))(z, y)

    def last_layer(self, model: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
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
        return seen["a"].detach().float(), out.detach().float(), layer.bias is not None

    # ----------------------------------------------------------------- math
    def matmul(self, a: torch.Tensor, b: torch.Tensor, transpose_b: bool = False) -> torch.Tensor:
        return a @ (b.T if transpose_b else b)

    def sum(self, tensor: torch.Tensor, axis: Sequence[int]) -> torch.Tensor:
        return tensor.sum(dim=tuple(axis))

    def take_columns(self, tensor: torch.Tensor, columns: Sequence[int]) -> torch.Tensor:
        return tensor[:, list(columns)]

    def where(self, condition: torch.Tensor, x: Any, y: Any) -> torch.Tensor:
        return torch.where(condition != 0, x, y)

    def logsumexp(self, tensor: torch.Tensor, axis: int) -> torch.Tensor:
        return tensor.logsumexp(axis)

    def exp(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.exp(tensor)

    def softplus(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(tensor)

    def softmax_cross_entropy(
        self, logits: torch.Tensor, probabilities: torch.Tensor
    ) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, probabilities, reduction="none")

    def sigmoid_cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.binary_cross_entropy_with_logits(
            logits, targets, reduction="none"
        )


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
