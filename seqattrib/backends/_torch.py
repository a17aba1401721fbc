"""PyTorch backend (also Keras 3 models on the torch backend, which are torch modules)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from .._errors import parameter_error
from ._protocol import OutOfDeviceMemory, TransferStats

_DTYPES = {"float32": torch.float32, "int64": torch.int64, "int32": torch.int32}


def _as_2d(raw: Any, output_fn: Callable[[Any], Any] | None) -> torch.Tensor:
    out = output_fn(raw) if output_fn is not None else raw
    if not isinstance(out, torch.Tensor):
        raise parameter_error(
            "the model",
            "output_fn",
            "given when the model returns a tuple, list or dict",
            f"an output of type {type(out).__name__}",
            "Pass output_fn=lambda out: ... returning a (batch, n_outputs) tensor.",
            described=True,
        )
    if out.ndim == 1:
        return out[:, None]
    if out.ndim != 2:
        raise parameter_error(
            "the model",
            "output_fn",
            "given when the model output is not (batch, n_outputs)",
            f"an output of shape {tuple(out.shape)}",
            "Pass output_fn that reduces it, e.g. lambda out: out.sum(dim=-1).",
            described=True,
        )
    return out


class TorchBackend:
    """Primitives for ``torch.nn.Module`` models."""

    name = "torch"

    def __init__(self) -> None:
        self.transfers = TransferStats()
        self.device = torch.device("cpu")

    # ----------------------------------------------------------------- model state
    @contextmanager
    def session(self, model: Any, device: Any) -> Iterator[torch.device]:
        if not isinstance(model, torch.nn.Module):  # a plain callable: nothing to restore
            previous, self.device = self.device, torch.device(device or "cpu")
            try:
                yield self.device
            finally:
                self.device = previous
            return
        params = list(model.parameters())
        tensors = params + list(model.buffers())
        home = tensors[0].device if tensors else torch.device("cpu")
        target = torch.device(device) if device is not None else home
        modes = [(m, m.training) for m in model.modules()]
        grad_flags = [(p, p.requires_grad) for p in params]
        moved = any(t.device != target for t in tensors)
        previous = self.device
        try:
            if moved:
                model.to(target)
            model.eval()
            for p in params:
                p.requires_grad_(False)
            self.device = target
            yield target
        finally:
            self.device = previous
            for p, flag in grad_flags:
                p.requires_grad_(flag)
            for m, mode in modes:
                m.training = mode
            if moved:
                model.to(home)

    def describe(self, model: Any) -> str:
        params = model.parameters() if isinstance(model, torch.nn.Module) else []
        n = sum(p.numel() for p in params)
        return f"{type(model).__module__}.{type(model).__name__} (torch, {n} parameters)"

    # ----------------------------------------------------------------- arrays
    def asarray(self, array: np.ndarray, dtype: str = "float32") -> torch.Tensor:
        array = np.ascontiguousarray(array)
        self.transfers.to_device += array.nbytes
        t = torch.from_numpy(array).to(self.device, non_blocking=False)
        return t.to(_DTYPES[dtype])

    def to_numpy(self, tensor: torch.Tensor) -> np.ndarray:
        out = tensor.detach().to("cpu").numpy()
        self.transfers.to_host += out.nbytes
        return out

    def take(self, tensor: torch.Tensor, indices: torch.Tensor, axis: int = 0) -> torch.Tensor:
        return tensor.index_select(axis, indices)

    def one_hot(self, indices: torch.Tensor, depth: int) -> torch.Tensor:
        return torch.nn.functional.one_hot(indices, depth).to(torch.float32)

    def log(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.log(tensor)

    def concat(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors), dim=0)

    def reshape(self, tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return tensor.reshape(tuple(shape))

    def mean(self, tensor: torch.Tensor, axis: int, keepdims: bool = True) -> torch.Tensor:
        return tensor.mean(dim=axis, keepdim=keepdims)

    def sum(self, tensor: torch.Tensor, axis: Sequence[int]) -> torch.Tensor:
        return tensor.sum(dim=tuple(axis))

    def segment_sum(
        self, values: torch.Tensor, segment_ids: torch.Tensor, n_segments: int
    ) -> torch.Tensor:
        out = values.new_zeros((n_segments, *values.shape[1:]))
        return out.index_add_(0, segment_ids, values)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ----------------------------------------------------------------- model calls
    def forward(
        self, model: Any, x: torch.Tensor, output_fn: Callable[[Any], Any] | None
    ) -> torch.Tensor:
        try:
            with torch.inference_mode():
                return _as_2d(model(x), output_fn).float()
        except torch.OutOfMemoryError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def input_gradients(
        self,
        model: Any,
        x: torch.Tensor,
        targets: Sequence[int],
        output_fn: Callable[[Any], Any] | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return self._input_gradients(model, x, targets, output_fn)
        except torch.OutOfMemoryError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def _input_gradients(
        self,
        model: Any,
        x: torch.Tensor,
        targets: Sequence[int],
        output_fn: Callable[[Any], Any] | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            out = _as_2d(model(x), output_fn)
            k = len(targets)
            selected = out[:, list(targets)]
            if k == 1:
                (grad,) = torch.autograd.grad(selected.sum(), x)
                grads = grad.unsqueeze(1)
            else:
                grads = self._batched_backward(selected, x, k)
        return selected.detach().float(), grads

    def _batched_backward(self, selected: torch.Tensor, x: torch.Tensor, k: int) -> torch.Tensor:
        """K vector-Jacobian products from one graph, vectorised with vmap over the K axis."""
        eye = torch.eye(k, dtype=selected.dtype, device=selected.device)
        basis = eye[:, None, :].expand(k, selected.shape[0], k)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*[Bb]atching rule.*")
                (grads,) = torch.autograd.grad(
                    selected, x, grad_outputs=basis, is_grads_batched=True, retain_graph=True
                )
        except RuntimeError:
            # A layer without a vmap rule: K backward passes over the same graph.
            grads = torch.stack(
                [
                    torch.autograd.grad(selected[:, i].sum(), x, retain_graph=i < k - 1)[0]
                    for i in range(k)
                ]
            )
        return grads.movedim(0, 1)
