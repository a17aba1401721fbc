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


@contextmanager
def _full_float32() -> Iterator[None]:
    """TF32 off inside a call (restored after): cuDNN's default TF32 convolutions keep 10
    mantissa bits, which moved EIG of the CREsted-like benchmark model by 1e-2 of its largest
    value on an H200; attributions are computed in full float32 instead.

    torch 2.9+ has per-backend ``fp32_precision`` settings, and reading the legacy
    ``allow_tf32`` flags after a mix of the two APIs raises; so the new API is used where it
    exists (conv, RNN and matmul set to "ieee"), the legacy flags elsewhere.
    """
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    settings: list[Any] = [getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None), matmul]
    if all(hasattr(s, "fp32_precision") for s in settings):
        saved = [s.fp32_precision for s in settings]
        for setting in settings:
            setting.fp32_precision = "ieee"
        try:
            yield
        finally:
            for setting, value in zip(settings, saved, strict=True):
                setting.fp32_precision = value
        return
    flags = cudnn.allow_tf32, matmul.allow_tf32
    cudnn.allow_tf32 = matmul.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = flags


def _positions(x: torch.Tensor, start: int, width: int, axis: int) -> torch.Tensor:
    """The view of positions start : start + width along ``axis``."""
    return x[:, :, start : start + width] if axis == 2 else x[:, start : start + width]


def _runs(
    src: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, width: int, axis: int
) -> torch.Tensor:
    """``src[rows[i]]`` at positions ``starts[i] : starts[i] + width`` along ``axis`` (1 or 2)
    of the (N, a, b) tensor, as (B, ...): one strided view of every window, then one index."""
    src = src.contiguous()
    n, a, b = src.shape
    if axis == 2:  # (N, C, L) -> (N, L - width + 1, C, width)
        view = src.as_strided((n, b - width + 1, a, width), (a * b, 1, b, 1))
    else:  # (N, L, C) -> (N, L - width + 1, width, C)
        view = src.as_strided((n, a - width + 1, width, b), (a * b, b, b, 1))
    return view[rows, starts]


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
    #: Run the K vector-Jacobian products as one vmapped backward on CPUs too (tests use it).
    vectorise_on_cpu = False
    #: ... and on accelerators (the default there; benchmarks switch it off to compare).
    vectorise_on_accelerator = True

    def __init__(self) -> None:
        self.transfers = TransferStats()
        self.device = torch.device("cpu")

    # ----------------------------------------------------------------- model state
    @contextmanager
    def session(self, model: Any, device: Any) -> Iterator[torch.device]:
        with _full_float32():
            with self._session(model, device) as target:
                yield target

    @contextmanager
    def _session(self, model: Any, device: Any) -> Iterator[torch.device]:
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
        t = torch.from_numpy(array)
        if self.device.type == "cuda":
            # From pinned memory the copy is queued behind the device's work instead of
            # waiting for it: the host prepares the next batch while the GPU runs this one.
            t = t.pin_memory().to(self.device, non_blocking=True)
        else:
            t = t.to(self.device)
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

    def on_accelerator(self) -> bool:
        return self.device.type != "cpu"

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ----------------------------------------------------------------- fast ISM
    def local_graph(self, model: Any, row_shape: tuple[int, int], length_axis: int) -> Any:
        from ._torch_graph import torch_local_graph

        return torch_local_graph(model, row_shape, length_axis)

    def expand_windows(
        self,
        ref: torch.Tensor,
        seq: torch.Tensor,
        starts: torch.Tensor,
        width: int,
        window: torch.Tensor,
        window_starts: torch.Tensor,
        axis: int,
        offsets: tuple[int, int],
    ) -> torch.Tensor:
        low, high = offsets
        n_window = window.shape[axis]
        # read a little wider, so that every row's window lies inside what was read ...
        left, right = max(0, -low), max(0, high + n_window - width)
        out = _runs(ref, seq, starts - left, width + left + right, axis)
        # ... write the window over it in place, and keep the middle
        at = window_starts - starts + left
        if out.device.type == "cpu":
            # rows share a few offsets (one inside the sequence, a few near its ends): one
            # block copy per offset is far faster on a CPU than an element-wise scatter
            for offset in torch.unique(at).tolist():
                target = _positions(out, offset, n_window, axis)
                rows = (at == offset).nonzero().squeeze(1)
                if len(rows) == len(at):
                    target.copy_(window)
                else:
                    target.index_copy_(0, rows, window[rows])
        else:
            rows = torch.arange(len(seq), device=out.device)[:, None]
            index = at[:, None] + torch.arange(n_window, device=out.device)
            if axis == 2:
                out[rows, :, index] = window.transpose(1, 2)
            else:
                out[rows, index] = window
        return _positions(out, left, width, axis)

    def pad_positions(self, x: torch.Tensor, left: int, right: int, axis: int) -> torch.Tensor:
        if left == 0 and right == 0:
            return x
        pad = (left, right) if axis == 2 else (0, 0, left, right)
        return torch.nn.functional.pad(x, pad)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with torch.inference_mode():
                return fn(*args)

        return run

    # ----------------------------------------------------------------- model calls
    def forward(
        self, model: Any, x: torch.Tensor, output_fn: Callable[[Any], Any] | None
    ) -> torch.Tensor:
        try:
            with torch.inference_mode():
                return _as_2d(model(x), output_fn).float()
        except torch.OutOfMemoryError as exc:
            raise OutOfDeviceMemory(str(exc)) from exc

    def outputs(self, raw: Any, output_fn: Callable[[Any], Any] | None) -> torch.Tensor:
        return _as_2d(raw, output_fn).float()

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
        """K vector-Jacobian products from one graph (one forward pass for all K).

        On an accelerator they run as one vmapped backward over K x rows. On a CPU a backward
        over K x rows falls out of the cache (measured: BPNet-like, 128 rows, K=5 cost 5.4x one
        target vmapped, 3.5x as K passes), so there the K passes run one after another.
        """
        on_cpu = selected.device.type == "cpu"
        if self.vectorise_on_cpu if on_cpu else self.vectorise_on_accelerator:
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
                pass  # a layer without a vmap rule: K passes below
        grads = torch.stack(
            [
                torch.autograd.grad(selected[:, i].sum(), x, retain_graph=i < k - 1)[0]
                for i in range(k)
            ]
        )
        return grads.movedim(0, 1)

    # ----------------------------------------------------------------- data attribution
    def get_state(self, model: Any) -> dict[str, np.ndarray]:
        return {
            key: value.detach().to("cpu").numpy().copy()
            for key, value in model.state_dict(keep_vars=True).items()
        }

    def set_state(self, model: Any, state: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for key, value in model.state_dict(keep_vars=True).items():
                value.copy_(torch.from_numpy(state[key]))

    def load_checkpoint(self, model: Any, checkpoint: Any) -> float | None:
        import os
        from collections.abc import Mapping

        from ._protocol import CheckpointMismatch

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
    ) -> torch.Tensor:
        from torch.func import functional_call, grad, vmap

        own = dict(model.named_parameters())
        params = {n: own[n].detach() for n in names}

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            out = _as_2d(functional_call(model, p, (xi[None],)), None).float()
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

        from ._protocol import UnsupportedLayer

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
